# Types of the C extension txstore._fastpaths (csrc/fastpaths.c); see txstore.codecs.converters
# and txstore.codecs.keys.segment_id_function.
from collections.abc import Callable
from typing import TypeVar

_F = TypeVar("_F", bound=Callable[..., object])

def converter(
    code: int, fallback: Callable[[bytes | None], bytes | None], /
) -> Callable[[bytes | None], bytes | None]: ...
def segment_function(
    interval: int, small: int, fallback: Callable[[int], int], /
) -> Callable[[int], int]: ...
def key_function(name: str, fallback: _F, /) -> _F: ...
