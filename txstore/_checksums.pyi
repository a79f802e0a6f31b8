# Types of the C extension txstore._checksums (csrc/checksums.c, rows.c, window_reader.c,
# restore_rows.c, restore_runs.c, changelog_columns.c, kv_get.c); see txstore.engine.checksums.
from collections.abc import Callable, Sequence
from typing import Any

class ChecksumError(ValueError): ...

def seal(key: bytes, value: bytes, /) -> bytes: ...
def unseal(key: bytes, stored: bytes | None, /) -> bytes | None: ...
def seal_rows(rows: list[Any], /) -> list[Any]: ...
def unseal_rows(rows: list[Any], /) -> list[Any]: ...
def kv_getter(state: tuple[Any, ...], /) -> Callable[[Any], bytes | None]: ...
def merge_rows(upper: list[Any], lower: list[Any], keep_tombstones: bool, /) -> list[Any]: ...
def sort_rows(mapping: dict[bytes, bytes | None], seal: bool, /) -> list[Any]: ...
def sort_columns(
    mapping: dict[bytes, bytes | None], seal: bool, /
) -> tuple[list[bytes], list[bytes | None]]: ...
def restore_rows(
    keys: list[bytes],
    values: list[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes],
    fmt: int,
    seal: bool,
    max_key: int,
    /,
) -> tuple[list[bytes], list[bytes], list[bytes]]: ...
def restore_frames(
    frames: list[tuple[bytes, int, int, int, int, int, int]], fmt: int, seal: bool, max_key: int, /
) -> tuple[list[bytes], list[bytes], list[bytes]]: ...
def restore_frames_run(
    frames: list[tuple[bytes, int, int, int, int, int, int]], fmt: int, seal: bool, max_key: int, /
) -> bytes: ...
def column_bytes(
    buf: bytes, pos: int, end: int, n: int, has_headers: int, lo: int, hi: int, /
) -> int: ...
def encode_run(keys: list[bytes], stored: list[bytes], deletes: list[bytes], /) -> bytes: ...
def merge_runs(
    bufs: list[bytes], pos: list[int], more: list[bool], limit: int, /
) -> tuple[list[bytes], list[bytes], int]: ...
def decode_columns(
    buf: bytes, pos: int, end: int, n: int, has_headers: int, keys_only: bool, /
) -> tuple[tuple[int, ...], list[bytes], list[bytes | None], list[bytes], int]: ...
def crc32c(data: bytes, crc: int = 0, /) -> int: ...
def set_hardware(on: bool, /) -> bool: ...
def hardware() -> bool: ...
def window_items(
    cursor: Any,
    key: bytes,
    time_from: int,
    time_to: int,
    limit: int,
    kv_type: type,
    decode: Any,
    sealed: bool,
    staged: list[Any] | None,
    /,
) -> list[Any] | None: ...
def session_items(
    cursor: Any,
    key: bytes,
    end_from: int,
    start_to: int,
    limit: int,
    kv_type: type,
    make: Any,
    key_obj: Any,
    decode: Any,
    sealed: bool,
    /,
) -> list[Any] | None: ...
def scan_rows(
    it: Any, n: int, bound: bytes | None, inclusive: bool, reverse: bool, sealed: bool, /
) -> tuple[list[tuple[bytes, bytes]], bool] | None: ...
