"""Varints, record headers and the four value formats, one item at a time (pure Python).

These are the single-item paths: for one short item Python's ``bytes`` concatenation and
``struct`` beat a cffi call (``perf/bench_codecs.py`` shows both). The batch forms are in
:mod:`txstore.codecs._native`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from txstore.codecs._common import (
    _HEADERS,
    _L_MINUS_ONE,
    _PLAIN,
    _PLAIN_HEADERS,
    _Q,
    _TIMESTAMPED,
    INT_MAX,
    ValueFormat,
    _as_bytes,
    _check_int,
    _check_long,
    _fail,
    _format,
)
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError
from txstore.types import Headers


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
