# Types of the C extension txstore._fastpaths (csrc/fastpaths.c); see txstore.codecs.converters
# and txstore.codecs.keys.segment_id_function.
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., object])

def converter(
    code: int, fallback: Callable[[bytes | None], bytes | None], /
) -> Callable[[bytes | None], bytes | None]: ...
def segment_function(
    interval: int, small: int, fallback: Callable[[int], int], /
) -> Callable[[int], int]: ...
def key_function(name: str, fallback: _F, /) -> _F: ...
def value_function(name: str, fallback: _F, formats: tuple[object, ...], /) -> _F: ...
def headers_function(fallback: _F, headers_type: type, empty: object, /) -> _F: ...

# The column functions (csrc/columns.c); see txstore.codecs._native.split_value_columns.
def split_value_columns(
    fmt: int,
    raws: Sequence[bytes],
    allocate: Callable[[int], Any],
    value_offsets: Any,
    timestamps: Any,
    header_offsets: Any,
    /,
) -> tuple[Any, Any]: ...
def key_columns(
    session: bool,
    raws: Sequence[bytes],
    allocate: Callable[[int], Any],
    key_offsets: Any,
    first: Any,
    second: Any,
    /,
) -> Any: ...
