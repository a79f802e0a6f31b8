"""The C library behind the batch codecs: the only module that calls ``txstore._codecs``.

A cffi call costs 90-450 ns with its argument conversion, against ~20 ns per item of C work, so
the C library is called once per *list*: items are packed into one buffer plus a lengths array
(``-1`` for ``None``), and the result is cut back into ``bytes`` objects with one ``struct``
call. ``perf/bench_codecs.py`` measures every function here against a pure-Python loop: the
compute-heavy ones (murmur2, varints) are 7-28x faster, and the column codecs, which make no
object per item, 8-13x. The list-returning batches of layouts that Python builds with one
concatenation per item lost to a comprehension here (0.34-0.9x): they are in
:mod:`txstore.codecs.batches`, mapping the single-item codecs. Single-item ``murmur2`` lives
here too, since it is the one single-item codec where C wins.
"""

from __future__ import annotations

import struct
import threading
import weakref
from array import array
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, cast

import txstore._codecs as _codecs
import txstore._fastpaths as _columns
from txstore.codecs._common import (
    INT_MAX,
    ValueFormat,
    _array,
    _as_bytes,
    _check_int,
    _cut,
    _fail,
    _format,
)
from txstore.codecs.columns import BinaryColumn, KeyColumns, ValueColumns
from txstore.errors import InvalidArgumentError, InvalidTypeError

# C int32 and int64 arrays are read and written through array("i") and array("q").
assert array("i").itemsize == 4 and array("q").itemsize == 8  # on every platform we build on

_ffi: Any = _codecs.ffi
_lib: Any = _codecs.lib
#: Allocates batch output buffers without zeroing them: C writes every byte that is read back.
_new_output: Any = _ffi.new_allocator(should_clear_after_alloc=False)


def _pack(name: str, items: Sequence[bytes | None]) -> tuple[bytes, list[int], bytes]:
    """Concatenate ``items`` for a batch C call: ``(data, lengths, lengths as C int64s)``, where
    a ``None`` item has length -1 and no bytes. Every other item is taken as its bytes (see
    :func:`~txstore.codecs._common._as_bytes`), so the batch functions agree with the
    single-item ones on any bytes-like input."""
    try:
        # No None (the common case): join and len run at C speed, without a Python loop.
        data = b"".join(items)  # type: ignore[arg-type]
        lens = list(map(len, items))  # type: ignore[arg-type]
    except TypeError:  # a None item, or one that is not a contiguous bytes-like object
        return _pack_checked(name, items)
    # join takes each item's bytes, but len() counts a memoryview's or an array's *items*
    # (8 bytes each in an array("q")): the lengths then fall short of the data, and the item
    # by item path measures bytes. One sum costs ~4 ns per item; checking every item's type
    # would cost ~10. (It misses only a mix that cancels out exactly: a buffer whose len()
    # exceeds its bytes, possible only for an empty multi-dimensional one, next to one whose
    # len() falls short by exactly as much.)
    if sum(lens) != len(data):
        return _pack_checked(name, items)
    return data, lens, struct.pack(f"{len(lens)}q", *lens)


def _pack_checked(name: str, items: Sequence[bytes | None]) -> tuple[bytes, list[int], bytes]:
    """:func:`_pack` item by item: ``None`` is length -1, any other item is converted by
    :func:`~txstore.codecs._common._as_bytes` (which raises the typed errors)."""
    parts = [x if x is None or type(x) is bytes else _as_bytes(name, x) for x in items]
    data = b"".join([x for x in parts if x is not None])
    lens = [-1 if x is None else len(x) for x in parts]
    return data, lens, struct.pack(f"{len(lens)}q", *lens)


def _unpack(buf: Any, total: int, lens: Any, n: int) -> list[bytes | None]:
    """Split a batch C result (``total`` bytes, ``n`` lengths, -1 for ``None``) into items."""
    data = _ffi.buffer(buf, total)
    out_lens: list[int] = _ffi.unpack(lens, n)
    if -1 not in out_lens:
        return cast("list[bytes | None]", _cut(data, out_lens))
    # A few None items (tombstones): cut them as empty items, then put None in their place.
    items = cast("list[bytes | None]", _cut(data, [m if m >= 0 else 0 for m in out_lens]))
    pos = -1
    for _ in range(out_lens.count(-1)):
        pos = out_lens.index(-1, pos + 1)
        items[pos] = None
    return items


def _ints(typecode: str, cdata: Any, n: int) -> list[int]:
    """The first ``n`` C ints (``q``: int64, ``i``: int32) of ``cdata`` as a list of ints.

    ``array.tolist`` makes the ints ~40% faster than ``ffi.unpack`` (7 against 12 ns each).
    """
    out = array(typecode)
    out.frombytes(_ffi.buffer(cdata, out.itemsize * n))
    return out.tolist()


def _c_ints(typecode: str, name: str, values: Sequence[int]) -> bytes:
    """``values`` as native C ints (``q``: int64, ``i``: int32) for a batch C call, with the
    typed errors of :func:`_array`."""
    try:
        return struct.pack(f"{len(values)}{typecode}", *values)
    except (struct.error, TypeError):
        return _array(typecode, name, values).tobytes()


def encode_varints(values: Sequence[int]) -> bytes:
    """Concatenated zig-zag varints of many ints, in one C call."""
    n = len(values)
    arr = None
    # Exact ints only, as _check_int (no bools or other int subclasses): counting the types
    # in a list costs ~10 ns per value, a set of them ~15.
    if list(map(type, values)).count(int) == n:
        with suppress(struct.error):  # out of range: reported below, as _check_int words it
            arr = struct.pack(f"{n}i", *values)
    if arr is None:
        for v in values:
            _check_int("varint value", v)
        arr = _array("i", "varint values", values).tobytes()
    out = _new_output("uint8_t[]", 5 * n + 1)
    total = _lib.txc_varint_encode_batch(_ffi.from_buffer("int32_t[]", arr), n, out, 5 * n + 1)
    if total < 0:
        raise _fail(total, "varints")
    return bytes(_ffi.buffer(out, total))


def decode_varints(buf: bytes) -> list[int]:
    """Decode a buffer made only of zig-zag varints, in one C call."""
    buf = _as_bytes("buf", buf)
    n = len(buf)
    out = _new_output("int32_t[]", n + 1)  # C writes the first `count` values
    count = _lib.txc_varint_decode_batch(_ffi.from_buffer(buf), n, out, n + 1)
    if count < 0:
        raise _fail(count, "varints")
    return _ints("i", out, count)


#: ``allocate(nbytes)`` for a column's data: any writable buffer of at least ``nbytes``.
Allocate = Callable[[int], Any]


class _BufferPool:
    """The column functions' default output buffers, with the memory of large ones recycled.

    A fresh buffer of a megabyte comes from ``mmap`` (or a heap top that glibc trims on free):
    every call then pays a page fault per 4 KiB it writes, which on this machine made a
    10,000-row split cost 131 ns per row against ~20 ns with recycled memory. The pool keeps
    the memory of a large buffer once its last user is gone (a finalizer on the buffer object
    that every user holds, directly or through a ``memoryview`` or Arrow buffer made from it)
    and hands it out again: a live column's data is never reused. Small buffers come from the
    ordinary allocator; at most ``max_bytes`` are kept.
    """

    MIN_BYTES = 64 * 1024

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._free: list[tuple[int, Any]] = []  # (capacity, cdata)
        self._kept = 0
        # reentrant: a GC pass inside the lock may finalize a buffer, which calls _release
        self._lock = threading.RLock()

    def allocate(self, nbytes: int) -> Any:
        size = nbytes + 1  # never a zero-size allocation
        if size < self.MIN_BYTES:
            return _ffi.buffer(_new_output("uint8_t[]", size), size)
        found = None
        with self._lock:
            for i, (cap, _) in enumerate(self._free):
                if size <= cap <= 2 * size:  # at most half of a recycled buffer unused
                    found = self._free.pop(i)
                    self._kept -= cap
                    break
        cap, cdata = found or (size, _new_output("uint8_t[]", size))
        buf = _ffi.buffer(cdata, size)
        weakref.finalize(buf, self._release, cap, cdata)
        return buf

    def _release(self, cap: int, cdata: Any) -> None:
        with self._lock:
            if self._kept + cap <= self.max_bytes:
                self._free.append((cap, cdata))
                self._kept += cap


_POOL = _BufferPool()
_allocate_default = _POOL.allocate


def _writable(buf: Any, nbytes: int) -> Any:
    """``buf`` as a C ``uint8_t[]`` C may write ``nbytes`` to; a read-only or short buffer
    from a caller's ``allocate`` is a typed error, never a write past its end."""
    try:
        c_buf = _ffi.from_buffer("uint8_t[]", buf, require_writable=True)
    except (BufferError, TypeError):
        raise InvalidTypeError(
            f"allocate must return a writable buffer, got {type(buf).__name__}"
        ) from None
    if len(c_buf) < nbytes:
        raise InvalidArgumentError(f"allocate({nbytes}) returned a buffer of {len(c_buf)} bytes")
    return c_buf


def _column_error(code: int, what: str, raws: Sequence[bytes], index: int) -> Exception:
    if 0 <= index < len(raws) and raws[index] is None:
        return InvalidArgumentError(f"{what} at index {index} is None; columns hold no nulls")
    if code == -8:  # TXC_ERR_BAD_ARGUMENT with every item present: the 2 GiB offsets limit
        return InvalidArgumentError(f"{what}s: a column holds at most 2 GiB; pass fewer rows")
    return _fail(code, f"{what} at index {index}")


def split_value_columns(
    fmt: ValueFormat, raws: Sequence[bytes], allocate: Allocate | None = None
) -> ValueColumns:
    """Split stored values of format ``fmt`` into columns (values, timestamps, headers) in one
    C pass, making no object per row; ``None`` items are refused.

    O(n); the batch form of :func:`split_value` for readers that build Arrow arrays.
    ``allocate(nbytes)`` gives the buffers the byte columns are written to: by default C
    memory whose large buffers are recycled once no column uses them (fresh multi-megabyte
    buffers cost a page fault per 4 KiB on every call: measured 214 against 55 ns per row for
    64k rows of 110 bytes). Pass ``pyarrow.allocate_buffer`` when the columns go to Arrow: the
    data buffers are then Arrow's own, from its pool.

    >>> cols = split_value_columns(ValueFormat.TIMESTAMPED, [bytes(7) + b"\\x05v", bytes(8)])
    >>> cols.values.to_list(), cols.timestamps.tolist(), cols.headers.to_list()
    ([b'v', b''], [5, 0], [b'', b''])
    """
    fmt = _format(fmt)
    alloc = allocate or _allocate_default
    n = len(raws)
    voffs, hoffs = array("i", bytes(4 * (n + 1))), array("i", bytes(4 * (n + 1)))
    ts = array("q", bytes(8 * n))
    try:
        values, headers = _columns.split_value_columns(int(fmt), raws, alloc, voffs, ts, hoffs)
    except (TypeError, ValueError, BufferError):  # the packed path raises the typed error
        return _split_value_columns_packed(fmt, raws, alloc)
    return ValueColumns(BinaryColumn(values, voffs), ts, BinaryColumn(headers, hoffs))


def _split_value_columns_packed(
    fmt: ValueFormat, raws: Sequence[bytes], alloc: Allocate
) -> ValueColumns:
    data, lens, c_lens = _pack("stored value", raws)  # C refuses None (-1) items
    n = len(lens)
    values, headers = alloc(len(data)), alloc(len(data))
    voffs, hoffs = array("i", bytes(4 * (n + 1))), array("i", bytes(4 * (n + 1)))
    ts = array("q", bytes(8 * n))
    bad = _ffi.new("int64_t *")
    r = _lib.txc_split_columns(
        fmt,
        _ffi.from_buffer(data),
        _ffi.from_buffer("int64_t[]", c_lens),
        n,
        _writable(values, len(data)),
        _ffi.from_buffer("int32_t[]", voffs),
        _ffi.from_buffer("int64_t[]", ts),
        _writable(headers, len(data)),
        _ffi.from_buffer("int32_t[]", hoffs),
        bad,
    )
    if r < 0:
        raise _column_error(r, f"{fmt.name} value", raws, bad[0])
    return ValueColumns(BinaryColumn(values, voffs), ts, BinaryColumn(headers, hoffs))


def _key_columns(raws: Sequence[bytes], session: bool, allocate: Allocate | None) -> KeyColumns:
    alloc = allocate or _allocate_default
    n = len(raws)
    offsets = array("i", bytes(4 * (n + 1)))
    first = array("q", bytes(8 * n))
    second = array("q" if session else "i", bytes((8 if session else 4) * n))
    try:
        keys = _columns.key_columns(session, raws, alloc, offsets, first, second)
    except (TypeError, ValueError, BufferError):  # the packed path raises the typed error
        return _key_columns_packed(raws, session, alloc)
    return KeyColumns(BinaryColumn(keys, offsets), first, second)


def _key_columns_packed(raws: Sequence[bytes], session: bool, alloc: Allocate) -> KeyColumns:
    what = "session store key" if session else "window store key"
    data, lens, c_lens = _pack(what, raws)  # C refuses None (-1) items
    n = len(lens)
    keys = alloc(len(data))
    offsets = array("i", bytes(4 * (n + 1)))
    first = array("q", bytes(8 * n))
    second = array("q" if session else "i", bytes((8 if session else 4) * n))
    bad = _ffi.new("int64_t *")
    call = _lib.txc_session_key_columns if session else _lib.txc_window_key_columns
    r = call(
        _ffi.from_buffer(data),
        _ffi.from_buffer("int64_t[]", c_lens),
        n,
        _writable(keys, len(data)),
        _ffi.from_buffer("int32_t[]", offsets),
        _ffi.from_buffer("int64_t[]", first),
        _ffi.from_buffer("int64_t[]" if session else "int32_t[]", second),
        bad,
    )
    if r < 0:
        raise _column_error(r, what, raws, bad[0])
    return KeyColumns(BinaryColumn(keys, offsets), first, second)


def window_key_columns(raws: Sequence[bytes], allocate: Allocate | None = None) -> KeyColumns:
    """Split window store keys ``[key][ts 8][seq 4]`` into columns (keys, window starts,
    sequence numbers) in one C call, making no object per row. O(n); ``allocate`` as in
    :func:`split_value_columns`.

    >>> cols = window_key_columns([b"k" + (7).to_bytes(8, "big") + (1).to_bytes(4, "big")])
    >>> cols.keys.to_list(), cols.first.tolist(), cols.second.tolist()
    ([b'k'], [7], [1])
    """
    return _key_columns(raws, False, allocate)


def session_key_columns(raws: Sequence[bytes], allocate: Allocate | None = None) -> KeyColumns:
    """Split session store keys ``[key][end 8][start 8]`` into columns (keys, session ends,
    session starts) in one C call, making no object per row. O(n); ``allocate`` as in
    :func:`split_value_columns`."""
    return _key_columns(raws, True, allocate)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit int), computed in C."""
    if type(data) is not bytes:
        data = _as_bytes("data", data)
    return int(_lib.txc_murmur2(data, len(data)))


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``toPositive(murmur2(key)) % num_partitions``, the default Kafka partitioner.

    >>> partition_for_key(b"key", 3)
    1
    """
    if type(num_partitions) is not int or not 1 <= num_partitions <= INT_MAX:
        raise InvalidArgumentError(f"num_partitions must be an int >= 1, got {num_partitions!r}")
    if type(key) is bytes:  # murmur2, inlined
        h: int = _lib.txc_murmur2(key, len(key))
        return (h & 0x7FFFFFFF) % num_partitions
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> list[int]:
    """Batch :func:`partition_for_key` in one C call."""
    if type(num_partitions) is not int or not 1 <= num_partitions <= INT_MAX:
        raise InvalidArgumentError(f"num_partitions must be an int >= 1, got {num_partitions!r}")
    data, lens, c_lens = _pack("key", keys)
    if -1 in lens:
        raise InvalidArgumentError("a key to partition cannot be None")
    n = len(lens)
    out = array("i", bytes(4 * n))
    _lib.txc_partitions_batch(
        _ffi.from_buffer(data),
        _ffi.from_buffer("int64_t[]", c_lens),
        n,
        num_partitions,
        _ffi.from_buffer("int32_t[]", out),
    )
    return out.tolist()
