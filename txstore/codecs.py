"""Byte codecs of Kafka Streams' state stores: the only module that calls the C extension.

Every function here works on ``bytes`` and produces exactly the bytes Kafka Streams produces
(see ``docs/formats.md``). Two implementations sit behind one API:

* **batch functions** (plural names: ``window_keys``, ``convert_values``...) call the C library
  ``txstore._codecs`` once for a whole list, where a call costs ~20 ns per item;
* **single-item functions** use whichever implementation ``perf/bench_codecs.py`` measured
  faster on one item. A cffi call costs 90-450 ns with its argument conversion, so short
  layouts (``key + struct.pack``) stay in Python and only murmur2 goes to C.

Decoders never read past their input: truncated, oversized or malformed input raises
:class:`~txstore.errors.SerializationError`; a wrong argument type raises
:class:`~txstore.errors.InvalidTypeError`.

>>> encode_varint(-65).hex()
'8101'
>>> window_key(b"a", 1000, 0).hex()
'6100000000000003e800000000'
>>> murmur2(b"21")
-973932308
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from enum import IntEnum
from itertools import accumulate, repeat
from typing import Any, cast

from txstore import _codecs
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError
from txstore.types import Headers

_ffi: Any = _codecs.ffi
_lib: Any = _codecs.lib
#: Allocates batch output buffers without zeroing them: C writes every byte that is read back.
_new_output: Any = _ffi.new_allocator(should_clear_after_alloc=False)

__all__ = [
    "ValueFormat",
    "convert_value",
    "convert_values",
    "decode_headers",
    "decode_unsigned_varint",
    "decode_varint",
    "decode_varints",
    "encode_headers",
    "encode_unsigned_varint",
    "encode_varint",
    "encode_varints",
    "extract_session_key",
    "extract_session_keys",
    "extract_window_key",
    "extract_window_keys",
    "murmur2",
    "ordered_upper_range",
    "pack_value",
    "parse_time_windowed_key",
    "partition_for_key",
    "partitions_for_keys",
    "record_to_value",
    "records_to_values",
    "segment_id",
    "segment_ids",
    "session_key",
    "session_keys",
    "split_value",
    "split_values",
    "time_windowed_key",
    "window_key",
    "window_keys",
]

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_QQ = struct.Struct(">qq")
_L_MINUS_ONE = _Q.pack(-1)


class ValueFormat(IntEnum):
    """The stored value layouts. The names match Kafka's ``DslStoreFormat``.

    ========================  ==============================================
    ``PLAIN``                 ``[value]``
    ``TIMESTAMPED``           ``[ts 8 BE][value]``
    ``HEADERS``               ``[varint hsize][headers][ts 8 BE][value]``
    ``PLAIN_HEADERS``         ``[varint hsize][headers][value]``
    ========================  ==============================================
    """

    PLAIN = 0
    TIMESTAMPED = 1
    HEADERS = 2
    PLAIN_HEADERS = 3

    @property
    def has_timestamp(self) -> bool:
        return self in (ValueFormat.TIMESTAMPED, ValueFormat.HEADERS)

    @property
    def has_headers(self) -> bool:
        return self in (ValueFormat.HEADERS, ValueFormat.PLAIN_HEADERS)


# Aliases for the single-item paths: on Python 3.11 ``ValueFormat.HEADERS`` is an enum class
# attribute lookup of ~100 ns, a global ~5 ns.
_PLAIN = ValueFormat.PLAIN
_TIMESTAMPED = ValueFormat.TIMESTAMPED
_HEADERS = ValueFormat.HEADERS
_PLAIN_HEADERS = ValueFormat.PLAIN_HEADERS

_ERRORS = {
    -1: "input is truncated",
    -2: "varint is longer than 5 bytes",
    -3: "negative length",
    -4: "length runs past the end of the input",
    -5: "output buffer too small",
    -6: "header key is not valid UTF-8",
    -7: "trailing bytes after the end of the structure",
    -8: "argument out of range",
}


def _fail(code: int, what: str) -> SerializationError:
    return SerializationError(f"cannot decode {what}: {_ERRORS.get(code, f'error {code}')}")


def _as_bytes(name: str, value: object) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidTypeError(f"{name} must be bytes, got {type(value).__name__}")


def _check_long(name: str, value: object) -> int:
    if type(value) is not int:
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not -(2**63) <= value <= LONG_MAX:
        raise InvalidArgumentError(f"{name} {value} is outside the 64-bit signed range")
    return value


def _check_int(name: str, value: object) -> int:
    if type(value) is not int:
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not -(2**31) <= value <= INT_MAX:
        raise InvalidArgumentError(f"{name} {value} is outside the 32-bit signed range")
    return value


# --------------------------------------------------------------------------- packing helpers


def _pack(name: str, items: Sequence[bytes | None]) -> tuple[bytes, list[int], bytes]:
    """Concatenate ``items`` for a batch C call: ``(data, lengths, lengths as C int64s)``, where
    a ``None`` item has length -1 and no bytes."""
    try:
        # No None (the common case): join and len run at C speed, without a Python loop.
        data = b"".join(items)  # type: ignore[arg-type]
        lens = list(map(len, items))  # type: ignore[arg-type]
    except TypeError:
        try:
            data = b"".join([x for x in items if x is not None])
            lens = [-1 if x is None else len(x) for x in items]
        except TypeError:
            for x in items:
                if x is not None:
                    _as_bytes(name, x)
            raise
    return data, lens, struct.pack(f"{len(lens)}q", *lens)


#: ``"{n}s"`` struct codes, to cut a batch result into items with one ``struct`` call (longer
#: items are cut by slicing: for them the copy costs more than the slicing).
_S_CODES = [f"{n}s" for n in range(1024)]


def _cut(data: Any, lens: list[int], trim: int = 0) -> list[bytes]:
    """Cut the buffer ``data`` into consecutive items of ``lens`` bytes (all >= ``trim``),
    dropping the last ``trim`` bytes of each. One uncached ``struct`` format builds every item
    in C: about twice as fast as slicing in a comprehension."""
    n = len(lens)
    if n and lens.count(lens[0]) == n:
        code = f"{lens[0] - trim}s{trim}x" if trim else f"{lens[0]}s"
        return list(struct.Struct(code * n).unpack(data))
    if not trim and max(lens, default=0) < len(_S_CODES):
        return list(struct.Struct("".join(map(_S_CODES.__getitem__, lens))).unpack(data))
    data = bytes(data)
    ends = list(accumulate(lens))
    return [data[e - m : e - trim] for e, m in zip(ends, lens, strict=True)]


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


def _c_ints(typecode: str, name: str, values: Sequence[int]) -> bytes:
    """``values`` as native C ints (``q``: int64, ``i``: int32) for a batch C call, with the
    typed errors of :func:`_array`."""
    try:
        return struct.pack(f"{len(values)}{typecode}", *values)
    except (struct.error, TypeError):
        return _array(typecode, name, values).tobytes()


def _array(typecode: str, name: str, values: Iterable[int]) -> array[int]:
    """``array(typecode, values)`` with typed errors for non-ints and out-of-range ints."""
    try:
        return array(typecode, values)
    except TypeError:
        raise InvalidTypeError(f"{name} must be ints") from None
    except OverflowError:
        bits = 64 if typecode == "q" else 32
        raise InvalidArgumentError(f"{name} must fit in {bits}-bit signed ints") from None


# --------------------------------------------------------------------------- varints


def encode_unsigned_varint(value: int) -> bytes:
    """Kafka's ``writeUnsignedVarint`` of a 32-bit value (negative ints wrap, as in Java).

    >>> encode_unsigned_varint(-1).hex()
    'ffffffff0f'
    """
    u = _check_int_or_uint(value) & 0xFFFFFFFF
    out = bytearray()
    while u & ~0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _check_int_or_uint(value: object) -> int:
    if type(value) is not int:
        raise InvalidTypeError(f"varint value must be an int, got {type(value).__name__}")
    if not -(2**31) <= value <= 0xFFFFFFFF:
        raise InvalidArgumentError(f"varint value {value} does not fit in 32 bits")
    return value


_SMALL_VARINTS = [bytes([((v << 1) ^ (v >> 31)) & 0xFF]) for v in range(-64, 64)]


def encode_varint(value: int) -> bytes:
    """Kafka's zig-zag ``writeVarint`` of a 32-bit signed int. O(1).

    >>> encode_varint(300).hex()
    'd804'
    """
    if type(value) is int and -64 <= value < 64:
        return _SMALL_VARINTS[value + 64]
    if type(value) is not int or not -(2**31) <= value <= INT_MAX:
        _check_int("varint value", value)  # raises the typed error
    u = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    if u < 0x4000:
        return bytes((u & 0x7F | 0x80, u >> 7))
    out = bytearray()
    while u & ~0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def decode_unsigned_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Read an unsigned varint at ``offset``; return ``(value, next_offset)``.

    The value is returned as Java's ``int`` would hold it (so ``ff ff ff ff 0f`` is -1).
    """
    if type(buf) is not bytes:
        buf = _as_bytes("buf", buf)
    u = 0
    shift = 0
    n = len(buf)
    for i in range(offset, offset + 5):
        if i >= n:
            raise SerializationError("cannot decode varint: input is truncated")
        b = buf[i]
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            u &= 0xFFFFFFFF
            return (u - (1 << 32) if u & 0x80000000 else u), i + 1
        shift += 7
    raise SerializationError("cannot decode varint: varint is longer than 5 bytes")


def decode_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Read a zig-zag varint at ``offset``; return ``(value, next_offset)``. O(1).

    >>> decode_varint(bytes.fromhex("8101"))
    (-65, 2)
    """
    try:
        b = buf[offset]
    except IndexError:
        raise SerializationError("cannot decode varint: input is truncated") from None
    except TypeError:
        raise InvalidTypeError(f"buf must be bytes, got {type(buf).__name__}") from None
    try:
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), offset + 1
    except TypeError:
        raise InvalidTypeError(f"buf must be bytes, got {type(buf).__name__}") from None
    if type(buf) is bytes and 0 <= offset < len(buf) - 1 and buf[offset + 1] < 0x80:
        u = (b & 0x7F) | (buf[offset + 1] << 7)  # two bytes, inlined
        return (u >> 1) ^ -(u & 1), offset + 2
    u, nxt = decode_unsigned_varint(buf, offset)
    u &= 0xFFFFFFFF
    return (u >> 1) ^ -(u & 1), nxt


def encode_varints(values: Sequence[int]) -> bytes:
    """Concatenated zig-zag varints of many ints, in one C call."""
    n = len(values)
    arr = None
    if set(map(type, values)) <= {int}:  # no bools or other int subclasses: as _check_int
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
    out = _ffi.new("int32_t[]", n + 1)
    count = _lib.txc_varint_decode_batch(_ffi.from_buffer(buf), n, out, n + 1)
    if count < 0:
        raise _fail(count, "varints")
    return list(_ffi.unpack(out, count))


# --------------------------------------------------------------------------- headers


def encode_headers(headers: Headers | Iterable[tuple[str, bytes | None]] | None) -> bytes:
    """Serialize headers: ``[varint count]([varint klen][key][varint vlen|01][value])*``.

    ``None`` and empty headers give zero bytes (not ``00``). O(total size).

    >>> encode_headers([("key1", b"value1")]).hex()
    '02086b6579310c76616c756531'
    >>> encode_headers(None)
    b''
    """
    if not headers:
        return b""
    hs = headers if isinstance(headers, Headers) else Headers(headers)
    if not hs:
        return b""
    small = _SMALL_VARINTS  # lengths below 64: one varint byte, inlined
    n = len(hs)
    out = [small[n + 64] if n < 64 else encode_varint(n)]
    append = out.append
    for key, value in hs:
        try:
            kb = key.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"header key {key!r} cannot be encoded as UTF-8") from e
        n = len(kb)
        append(small[n + 64] if n < 64 else encode_varint(n))
        append(kb)
        if value is None:
            append(b"\x01")
        else:
            n = len(value)
            append(small[n + 64] if n < 64 else encode_varint(n))
            append(value)
    return b"".join(out)


def decode_headers(buf: bytes) -> Headers:
    """Parse serialized headers; accepts zero bytes and an explicit count of 0.

    >>> decode_headers(bytes.fromhex("0402610104626304 0102".replace(" ", "")))
    Headers([('a', None), ('bc', b'\\x01\\x02')])
    """
    if not buf:
        if buf is None or isinstance(buf, (bytes, bytearray, memoryview)):
            return Headers()
        raise InvalidTypeError(f"buf must be bytes, got {type(buf).__name__}")
    buf = _as_bytes("buf", buf)
    count, pos = decode_varint(buf, 0)
    n = len(buf)
    if count < 0:
        raise SerializationError("cannot decode headers: negative header count")
    if count * 2 > n - pos:
        raise SerializationError("cannot decode headers: length runs past the end of the input")
    items: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        if pos < n and buf[pos] < 0x80:  # one-byte varint, inlined
            klen = (buf[pos] >> 1) ^ -(buf[pos] & 1)
            pos += 1
        else:
            klen, pos = decode_varint(buf, pos)
        if klen < 0 or pos + klen > n:
            raise _fail(-3 if klen < 0 else -4, "headers")
        try:
            key = buf[pos : pos + klen].decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(-6, "headers") from None
        pos += klen
        if pos < n and buf[pos] < 0x80:
            vlen = (buf[pos] >> 1) ^ -(buf[pos] & 1)
            pos += 1
        else:
            vlen, pos = decode_varint(buf, pos)
        if vlen == -1:
            items.append((key, None))
            continue
        if vlen < 0 or pos + vlen > n:
            raise _fail(-3 if vlen < 0 else -4, "headers")
        items.append((key, buf[pos : pos + vlen]))
        pos += vlen
    if pos != n:
        raise _fail(-7, "headers")
    return Headers(items)


# --------------------------------------------------------------------------- value formats


def pack_value(fmt: ValueFormat, value: bytes, timestamp: int = -1, headers: bytes = b"") -> bytes:
    """Build a stored value of format ``fmt`` from serialized parts. O(len(value)).

    ``headers`` is already-serialized headers (see :func:`encode_headers`); it is ignored by
    formats without headers, as ``timestamp`` is by formats without a timestamp.

    >>> pack_value(ValueFormat.HEADERS, b"v", 100).hex()
    '00000000000000006476'
    """
    try:
        if fmt is _HEADERS:  # the longest layout first, by identity (no comparison chain)
            n = len(headers)
            hsize = _SMALL_VARINTS[n + 64] if n < 64 else encode_varint(n)
            return hsize + headers + _Q.pack(timestamp) + value
        if fmt == _PLAIN:
            return _as_bytes("value", value)
        if fmt == _TIMESTAMPED:
            return _Q.pack(timestamp) + value
        if fmt == _HEADERS:
            n = len(headers)
            hsize = _SMALL_VARINTS[n + 64] if n < 64 else encode_varint(n)
            return hsize + headers + _Q.pack(timestamp) + value
        if fmt == _PLAIN_HEADERS:
            return encode_varint(len(headers)) + headers + value
    except (TypeError, struct.error):
        _as_bytes("value", value)
        _as_bytes("headers", headers)
        _check_long("timestamp", timestamp)
        raise
    raise InvalidArgumentError(f"unknown value format {fmt!r}")


def split_value(fmt: ValueFormat, raw: bytes) -> tuple[bytes, int | None, bytes]:
    """Split a stored value into ``(value, timestamp or None, serialized headers)``. O(n).

    >>> split_value(ValueFormat.TIMESTAMPED, bytes.fromhex("00000000000003e8") + b"val")
    (b'val', 1000, b'')
    """
    if fmt is _HEADERS and type(raw) is bytes and raw and not raw[0] & 0x81:
        end = (raw[0] >> 1) + 1  # a one-byte headers size (< 64 bytes of headers), inlined
        if len(raw) >= end + 8:
            return raw[end + 8 :], _Q.unpack_from(raw, end)[0], raw[1:end]
    if fmt == _PLAIN:
        return _as_bytes("raw", raw), None, b""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if fmt == _TIMESTAMPED:
        if len(raw) < 8:
            raise _fail(-1, "timestamped value")
        return raw[8:], _Q.unpack_from(raw)[0], b""
    if fmt not in (_HEADERS, _PLAIN_HEADERS):
        raise InvalidArgumentError(f"unknown value format {fmt!r}")
    if raw and raw[0] < 0x80:  # one-byte varint, inlined
        hsize, pos = (raw[0] >> 1) ^ -(raw[0] & 1), 1
    else:
        hsize, pos = decode_varint(raw, 0)
    if hsize < 0:
        raise _fail(-3, "value headers")
    end = pos + hsize
    if end > len(raw):
        raise _fail(-4, "value headers")
    headers = raw[pos:end]
    if fmt == _PLAIN_HEADERS:
        return raw[end:], None, headers
    if len(raw) - end < 8:
        raise _fail(-1, "value timestamp")
    return raw[end + 8 :], _Q.unpack_from(raw, end)[0], headers


def convert_value(raw: bytes | None, src: ValueFormat, dst: ValueFormat) -> bytes | None:
    """Convert a stored value between formats (adapters and lazy upgrades). O(n).

    A missing timestamp becomes -1 and missing headers become empty headers; fields the
    target has no room for are dropped. ``None`` stays ``None``.

    >>> convert_value(b"v", ValueFormat.PLAIN, ValueFormat.HEADERS).hex()
    '00ffffffffffffffff76'
    """
    if type(raw) is bytes:
        try:
            fast = _FAST_CONVERSIONS[src][dst]
        except (KeyError, TypeError):  # not a format: the checked path below reports it
            fast = None
        if fast is not None and (out := fast(raw)) is not None:
            return out
    if raw is None:
        _format(src)
        _format(dst)
        return None
    value, ts, headers = split_value(src, raw)
    return pack_value(dst, value, -1 if ts is None else ts, headers)


def _fast_conversion(src: ValueFormat, dst: ValueFormat) -> Callable[[bytes], bytes | None]:
    """:func:`convert_value` from ``src`` to ``dst`` as one specialised function, for
    well-formed values whose headers section has a one-byte size (< 64 bytes of headers).

    It returns byte-for-byte what ``split_value`` + ``pack_value`` return, without parsing the
    headers; for any other input (truncated, malformed, larger headers) it returns ``None`` and
    :func:`convert_value` takes the checked path, so errors are unchanged.
    """
    t = 8 if src.has_timestamp else 0
    keep_h, keep_t = dst.has_headers, dst.has_timestamp
    if not src.has_headers:  # PLAIN or TIMESTAMPED: add a constant prefix, maybe drop the ts
        prefix = (b"\x00" if keep_h else b"") + (_L_MINUS_ONE if keep_t and not t else b"")
        if not t:
            return lambda raw: prefix + raw
        if keep_t:
            return lambda raw: prefix + raw if len(raw) >= 8 else None
        return lambda raw: prefix + raw[8:] if len(raw) >= 8 else None

    def from_headers(raw: bytes) -> bytes | None:
        if not raw or raw[0] & 0x81:  # empty, or a multi-byte or negative headers size
            return None
        end = (raw[0] >> 1) + 1  # raw[:end] is [varint hsize][headers]
        if len(raw) < end + t:
            return None
        if keep_h:
            if keep_t:
                return raw if t else raw[:end] + _L_MINUS_ONE + raw[end:]
            return raw[:end] + raw[end + 8 :] if t else raw
        if keep_t:
            return raw[end:] if t else _L_MINUS_ONE + raw[end:]
        return raw[end + t :]

    return from_headers


_FAST_CONVERSIONS = {s: {d: _fast_conversion(s, d) for d in ValueFormat} for s in ValueFormat}


def _format(fmt: Any) -> ValueFormat:
    try:
        return ValueFormat(fmt)
    except ValueError:
        raise InvalidArgumentError(f"unknown value format {fmt!r}") from None


def convert_values(
    raws: Sequence[bytes | None], src: ValueFormat, dst: ValueFormat
) -> list[bytes | None]:
    """Batch :func:`convert_value`, one C call for the whole list."""
    src, dst = _format(src), _format(dst)
    data, lens, c_lens = _pack("value", raws)
    n = len(lens)
    cap = _lib.txc_convert_bound(len(data), n) + 1
    out = _new_output("uint8_t[]", cap)
    out_lens = _ffi.new("int64_t[]", n)
    c_data, c_lens_p = _ffi.from_buffer(data), _ffi.from_buffer("int64_t[]", c_lens)
    total = _lib.txc_convert_batch(src, dst, c_data, c_lens_p, n, out, cap, out_lens)
    if total < 0:
        raise _fail(total, f"{src.name} values")
    return _unpack(out, total, out_lens, n)


def split_values(
    fmt: ValueFormat, raws: Sequence[bytes | None]
) -> list[tuple[bytes, int | None, bytes] | None]:
    """Batch :func:`split_value`; ``None`` items give ``None``."""
    fmt = _format(fmt)
    data, lens, c_lens = _pack("value", raws)
    n = len(lens)
    parts = _ffi.new("int64_t[]", 6 * n + 1)
    bad = _ffi.new("int64_t *")
    r = _lib.txc_split_batch(
        fmt, _ffi.from_buffer(data), _ffi.from_buffer("int64_t[]", c_lens), n, parts, bad
    )
    if r < 0:
        raise _fail(r, f"{fmt.name} value at index {bad[0]}")
    # 6 int64 per item (hoff, hlen, has_ts, ts, voff, vlen), read as columns by strided array
    # slices: no Python int is made for the columns that are not used.
    p = array("q")
    p.frombytes(_ffi.buffer(parts, 48 * n))
    ts_column: Iterable[int | None] = p[3::6] if fmt.has_timestamp else repeat(None, n)
    return [
        None if vlen < 0 else (data[voff : voff + vlen], ts, data[hoff : hoff + hlen])
        for hoff, hlen, ts, voff, vlen in zip(
            p[0::6], p[1::6], ts_column, p[4::6], p[5::6], strict=True
        )
    ]


def record_to_value(
    fmt: ValueFormat, value: bytes | None, timestamp: int, headers: bytes
) -> bytes | None:
    """Record converter: a changelog record (plain value, record timestamp, serialized record
    headers) to the stored value of ``fmt``. A ``None`` value stays ``None`` (a delete).

    >>> record_to_value(ValueFormat.TIMESTAMPED, b"val", 1000, b"").hex()
    '00000000000003e876616c'
    """
    if value is None:
        return None
    if fmt is _HEADERS:  # pack_value's HEADERS path, inlined
        try:
            n = len(headers)
            hsize = _SMALL_VARINTS[n + 64] if n < 64 else encode_varint(n)
            return hsize + headers + _Q.pack(timestamp) + value
        except (TypeError, struct.error):
            return pack_value(fmt, value, timestamp, headers)  # raises the typed error
    return pack_value(fmt, value, timestamp, headers)


def records_to_values(
    fmt: ValueFormat,
    values: Sequence[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes],
) -> list[bytes | None]:
    """Batch :func:`record_to_value` in one C call (restore's hot path)."""
    fmt = _format(fmt)
    n = len(values)
    if len(timestamps) != n or len(headers) != n:
        raise InvalidArgumentError("values, timestamps and headers must have the same length")
    vdata, _, c_vlens = _pack("value", values)
    hdata, hlens, c_hlens = _pack("headers", headers)
    if -1 in hlens:
        raise InvalidTypeError("record headers must be bytes (use b'' for no headers)")
    ts = _c_ints("q", "timestamps", timestamps)
    cap = _lib.txc_convert_bound(len(vdata) + len(hdata), n) + 1
    out = _new_output("uint8_t[]", cap)
    out_lens = _ffi.new("int64_t[]", n)
    total = _lib.txc_records_to_format_batch(
        fmt,
        _ffi.from_buffer(vdata),
        _ffi.from_buffer("int64_t[]", c_vlens),
        _ffi.from_buffer("int64_t[]", ts),
        _ffi.from_buffer(hdata),
        _ffi.from_buffer("int64_t[]", c_hlens),
        n,
        out,
        cap,
        out_lens,
    )
    if total < 0:
        raise _fail(total, "changelog records")
    return _unpack(out, total, out_lens, n)


# --------------------------------------------------------------------------- window keys


def window_key(key: bytes, timestamp: int, seq: int = 0) -> bytes:
    """Window store key ``[key][ts 8 BE][seq 4 BE]`` (``WindowKeySchema.toStoreKeyBinary``)."""
    try:
        return key + _QI.pack(timestamp, seq)
    except (TypeError, struct.error):
        _as_bytes("key", key)
        _check_long("timestamp", timestamp)
        _check_int("seq", seq)
        return _as_bytes("key", key) + _QI.pack(timestamp, seq)


def extract_window_key(raw: bytes) -> tuple[bytes, int, int]:
    """Split a window store key into ``(key, timestamp, seq)``. O(n)."""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if len(raw) < 12:
        raise _fail(-1, "window store key")
    ts, seq = _QI.unpack_from(raw, len(raw) - 12)
    return raw[:-12], ts, seq


def window_keys(
    keys: Sequence[bytes], timestamps: Sequence[int], seqs: Sequence[int] | None = None
) -> list[bytes]:
    """Batch :func:`window_key` in one C call."""
    n = len(keys)
    if len(timestamps) != n or (seqs is not None and len(seqs) != n):
        raise InvalidArgumentError("keys, timestamps and seqs must have the same length")
    data, lens, c_lens = _pack("key", keys)
    if -1 in lens:
        raise InvalidArgumentError("a window key cannot be None")
    ts = _c_ints("q", "timestamps", timestamps)
    sq = _c_ints("i", "seqs", seqs) if seqs is not None else bytes(4 * n)
    cap = len(data) + 12 * n
    out = _new_output("uint8_t[]", cap + 1)
    total = _lib.txc_window_keys_encode_batch(
        _ffi.from_buffer(data),
        _ffi.from_buffer("int64_t[]", c_lens),
        _ffi.from_buffer("int64_t[]", ts),
        _ffi.from_buffer("int32_t[]", sq),
        n,
        out,
        cap,
    )
    if total < 0:
        raise _fail(total, "window keys")
    return _cut(_ffi.buffer(out, total), [x + 12 for x in lens])


def extract_window_keys(raws: Sequence[bytes]) -> list[tuple[bytes, int, int]]:
    """Batch :func:`extract_window_key` in one C call."""
    data, lens, c_lens = _pack("window store key", raws)
    n = len(lens)
    klens = _ffi.new("int64_t[]", n + 1)
    ts = _ffi.new("int64_t[]", n + 1)
    sq = _ffi.new("int32_t[]", n + 1)
    r = _lib.txc_window_keys_extract_batch(
        _ffi.from_buffer(data), _ffi.from_buffer("int64_t[]", c_lens), n, klens, ts, sq
    )
    if r < 0:
        raise _fail(r, "window store keys")
    # Every raw is >= 12 bytes (C checked): its key is all but its last 12 bytes.
    keys = _cut(data, lens, 12)
    return list(zip(keys, _ffi.unpack(ts, n), _ffi.unpack(sq, n), strict=True))


def ordered_upper_range(key: bytes, max_suffix: bytes) -> bytes:
    """Kafka's ``OrderedBytes.upperRange``: keep the key's first byte, then its bytes while
    they are >= the suffix's first byte, then append the suffix.

    >>> ordered_upper_range(b"ab", bytes.fromhex("7fffffffffffffff7fffffff")).hex()
    '617fffffffffffffff7fffffff'
    """
    if not max_suffix:
        raise InvalidArgumentError("max_suffix must not be empty")
    first = max_suffix[0]
    if first == 0 or not key:
        return key + max_suffix
    keep = 1
    n = len(key)
    while keep < n and key[keep] >= first:
        keep += 1
    return key[:keep] + max_suffix


def window_lower_range_fixed(key: bytes, time_from: int) -> bytes:
    """Lower bound of a single-key window fetch: ``key || L(max(0, from)) || I(0)``."""
    return window_key(key, max(0, time_from), 0)


def window_upper_range_fixed(key: bytes, time_to: int) -> bytes:
    """Upper bound of a single-key window fetch: ``key || L(to) || I(MAX)``."""
    return window_key(key, time_to, INT_MAX)


def window_lower_range(key: bytes, time_from: int) -> bytes:
    """Lower bound of a key-range window fetch: the timestamp is ignored, ``key || 00*12``."""
    return _as_bytes("key", key) + bytes(12)


def window_upper_range(key: bytes, time_to: int) -> bytes:
    """Upper bound of a key-range window fetch: ``upperRange(key, L(to) || I(MAX))``."""
    return ordered_upper_range(
        _as_bytes("key", key), _QI.pack(_check_long("time_to", time_to), INT_MAX)
    )


# --------------------------------------------------------------------------- session keys


def session_key(key: bytes, start: int, end: int) -> bytes:
    """Session store key ``[key][end 8 BE][start 8 BE]`` (end first, as Kafka does)."""
    try:
        return key + _QQ.pack(end, start)
    except (TypeError, struct.error):
        _as_bytes("key", key)
        _check_long("start", start)
        _check_long("end", end)
        return _as_bytes("key", key) + _QQ.pack(end, start)


def extract_session_key(raw: bytes) -> tuple[bytes, int, int]:
    """Split a session store key into ``(key, start, end)``."""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if len(raw) < 16:
        raise _fail(-1, "session store key")
    end, start = _QQ.unpack_from(raw, len(raw) - 16)
    return raw[:-16], start, end


def session_keys(keys: Sequence[bytes], starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
    """Batch :func:`session_key` in one C call."""
    n = len(keys)
    if len(starts) != n or len(ends) != n:
        raise InvalidArgumentError("keys, starts and ends must have the same length")
    data, lens, c_lens = _pack("key", keys)
    if -1 in lens:
        raise InvalidArgumentError("a session key cannot be None")
    cap = len(data) + 16 * n
    out = _new_output("uint8_t[]", cap + 1)
    total = _lib.txc_session_keys_encode_batch(
        _ffi.from_buffer(data),
        _ffi.from_buffer("int64_t[]", c_lens),
        _ffi.from_buffer("int64_t[]", _c_ints("q", "ends", ends)),
        _ffi.from_buffer("int64_t[]", _c_ints("q", "starts", starts)),
        n,
        out,
        cap,
    )
    if total < 0:
        raise _fail(total, "session keys")
    return _cut(_ffi.buffer(out, total), [x + 16 for x in lens])


def extract_session_keys(raws: Sequence[bytes]) -> list[tuple[bytes, int, int]]:
    """Batch :func:`extract_session_key` in one C call."""
    data, lens, c_lens = _pack("session store key", raws)
    n = len(lens)
    klens = _ffi.new("int64_t[]", n + 1)
    ends = _ffi.new("int64_t[]", n + 1)
    starts = _ffi.new("int64_t[]", n + 1)
    r = _lib.txc_session_keys_extract_batch(
        _ffi.from_buffer(data), _ffi.from_buffer("int64_t[]", c_lens), n, klens, ends, starts
    )
    if r < 0:
        raise _fail(r, "session store keys")
    # Every raw is >= 16 bytes (C checked): its key is all but its last 16 bytes.
    keys = _cut(data, lens, 16)
    return list(zip(keys, _ffi.unpack(starts, n), _ffi.unpack(ends, n), strict=True))


def session_lower_range_fixed(key: bytes, time_from: int) -> bytes:
    """``key || L(max(0, from)) || L(0)``: lower bound of a single-key session search."""
    return session_key(key, 0, max(0, time_from))


def session_upper_range_fixed(key: bytes, time_to: int) -> bytes:
    """``key || L(MAX) || L(to)``: upper bound of a single-key session search."""
    return session_key(key, time_to, LONG_MAX)


def session_lower_range(key: bytes, time_from: int) -> bytes:
    """``key || 00*16``: lower bound of a key-range session search."""
    return _as_bytes("key", key) + bytes(16)


def session_upper_range(key: bytes, time_to: int) -> bytes:
    """``upperRange(key, L(MAX) || L(to))``: upper bound of a key-range session search."""
    return ordered_upper_range(
        _as_bytes("key", key), _QQ.pack(LONG_MAX, _check_long("time_to", time_to))
    )


# --------------------------------------------------------------------------- windowed serdes


def time_windowed_key(key: bytes, start: int) -> bytes:
    """``TimeWindowedSerializer``: ``[key][L(start)]`` (no end, no sequence number)."""
    try:
        return key + _Q.pack(start)
    except (TypeError, struct.error):
        _as_bytes("key", key)
        _check_long("start", start)
        return _as_bytes("key", key) + _Q.pack(start)


def parse_time_windowed_key(raw: bytes) -> tuple[bytes, int]:
    """``TimeWindowedDeserializer``: ``(key, start)`` of ``[key][L(start)]``."""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if len(raw) < 8:
        raise _fail(-1, "time-windowed key")
    return raw[:-8], _Q.unpack_from(raw, len(raw) - 8)[0]


# --------------------------------------------------------------------------- segments


def segment_id(timestamp: int, interval: int) -> int:
    """``timestamp / interval`` with Java's truncation toward zero.

    >>> segment_id(-1, 60000), segment_id(60000, 60000)
    (0, 1)
    """
    if type(interval) is not int or not 1 <= interval <= LONG_MAX:
        raise InvalidArgumentError(f"segment interval must be an int >= 1, got {interval!r}")
    if type(timestamp) is not int or not -(2**63) <= timestamp <= 2**63 - 1:
        _check_long("timestamp", timestamp)  # raises the typed error
    return timestamp // interval if timestamp >= 0 else -(-timestamp // interval)


def segment_ids(timestamps: Sequence[int], interval: int) -> list[int]:
    """Batch :func:`segment_id` in one C call."""
    if type(interval) is not int or not 1 <= interval <= LONG_MAX:
        raise InvalidArgumentError(f"segment interval must be an int >= 1, got {interval!r}")
    n = len(timestamps)
    ts = _c_ints("q", "timestamps", timestamps)
    out = array("q", bytes(8 * n))
    _lib.txc_segment_ids_batch(
        _ffi.from_buffer("int64_t[]", ts), n, interval, _ffi.from_buffer("int64_t[]", out)
    )
    return out.tolist()


# --------------------------------------------------------------------------- partitioner


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
