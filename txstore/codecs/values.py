"""Varints, record headers and the four value formats, one item at a time (pure Python).

These are the single-item paths: for one short item Python's ``bytes`` concatenation and
``struct`` beat a cffi call (``perf/bench_codecs.py`` shows both). The batch forms are in
:mod:`txstore.codecs.batches` and :mod:`txstore.codecs._native`.

Every function checks its input, at no cost when the input is good: the work is done inside
``try`` by operations that already reject bad input (``struct`` a non-int or out-of-range
number, indexing a short buffer, ``bytes + x`` a non-bytes ``x``) and their errors are turned
into :class:`~txstore.errors.SerializationError` or :class:`~txstore.errors.InvalidTypeError`.
Anything unusual (multi-byte lengths, malformed input) takes a slower, fully checked path.
Conversions between value formats are resolved once per (source, target) pair by
:func:`value_converter`: the stores call the returned function for each value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from txstore._fastpaths import headers_function as _headers_function
from txstore._fastpaths import value_function as _value_function
from txstore.codecs._common import (
    _HEADERS,
    _PLAIN,
    _PLAIN_HEADERS,
    _TIMESTAMPED,
    ValueFormat,
    _as_bytes,
    _check_int,
    _check_long,
    _fail,
    _format,
    _pack_q,
    _unpack_q,
)
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError
from txstore.types import EMPTY_HEADERS, Headers

#: A value conversion between two formats, as returned by :func:`value_converter`.
ValueConverter = Callable[[bytes | None], bytes | None]

#: ``_ONE_BYTE[u]`` is the byte ``u`` (< 0x80): a one-byte varint.
_ONE_BYTE = [bytes((u,)) for u in range(128)]

#: ``_LEN[n]`` is the zig-zag varint of a length ``n`` < 64 (one byte, ``2 * n``).
_LEN = _ONE_BYTE[0::2]

_new_object = object.__new__
_join = b"".join  # one copy of each part; ``a + b + c`` copies the front parts again


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


def _encode_varint(value: int) -> bytes:
    """Kafka's zig-zag ``writeVarint`` of a 32-bit signed int. O(1).

    >>> encode_varint(300).hex()
    'd804'
    """
    if type(value) is int:
        # Zig-zag without the 32-bit mask: for an int in range u is in [0, 2**32); for any
        # other int it is >= 2**32, so the size tests below are also the range check.
        u = (value << 1) ^ (value >> 31)
        if u < 0x80:
            return _ONE_BYTE[u]
        if u < 0x4000:
            return bytes((u & 0x7F | 0x80, u >> 7))
        if u <= 0xFFFFFFFF:
            out = bytearray()
            while u > 0x7F:
                out.append(u & 0x7F | 0x80)
                u >>= 7
            out.append(u)
            return bytes(out)
    _check_int("varint value", value)  # raises the typed error
    raise AssertionError("unreachable")  # pragma: no cover


def decode_unsigned_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Read an unsigned varint at ``offset``; return ``(value, next_offset)``. O(1).

    The value is returned as Java's ``int`` would hold it (so ``ff ff ff ff 0f`` is -1).

    >>> decode_unsigned_varint(bytes.fromhex("ffffffff0f"))
    (-1, 5)
    """
    if type(buf) is not bytes:
        buf = _as_bytes("buf", buf)
    if type(offset) is not int:
        raise InvalidTypeError(f"offset must be an int, got {type(offset).__name__}")
    if offset < 0:
        raise InvalidArgumentError(f"offset must not be negative, got {offset}")
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


def _decode_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """Read a zig-zag varint at ``offset``; return ``(value, next_offset)``. O(1).

    >>> decode_varint(bytes.fromhex("8101"))
    (-65, 2)
    """
    if type(buf) is not bytes:  # indexing a memoryview or array gives items, not bytes
        buf = _as_bytes("buf", buf)
    try:
        b = buf[offset]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), offset + 1
        if offset >= 0:  # two and three bytes, inlined
            c = buf[offset + 1]
            if c < 0x80:
                u = b & 0x7F | c << 7
                return (u >> 1) ^ -(u & 1), offset + 2
            d = buf[offset + 2]
            if d < 0x80:
                u = b & 0x7F | (c & 0x7F) << 7 | d << 14
                return (u >> 1) ^ -(u & 1), offset + 3
    except IndexError:
        raise SerializationError("cannot decode varint: input is truncated") from None
    except TypeError:
        raise InvalidTypeError(f"buf must be bytes, got {type(buf).__name__}") from None
    u, nxt = decode_unsigned_varint(buf, offset)  # four or five bytes, or a bad offset
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
    if type(headers) is not Headers:
        if not headers:
            return b""
        headers = Headers.of(headers)  # checks every pair
    items = headers.pairs  # valid (key, value) pairs: the constructor checked them
    n = len(items)
    if not n:
        return b""
    out = [_LEN[n] if n < 64 else encode_varint(n)]
    append = out.append
    try:
        for key, value in items:
            kb = key.encode()
            n = len(kb)
            append(_LEN[n] if n < 64 else encode_varint(n))
            append(kb)
            if value is None:
                append(b"\x01")
            else:
                n = len(value)
                append(_LEN[n] if n < 64 else encode_varint(n))
                append(value)
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"header key {e.object!r} cannot be encoded as UTF-8") from e
    return b"".join(out)


def _decode_headers(buf: bytes) -> Headers:
    """Parse serialized headers; accepts zero bytes and an explicit count of 0. O(len(buf)).

    >>> decode_headers(bytes.fromhex("0402610104626304 0102".replace(" ", "")))
    Headers([('a', None), ('bc', b'\\x01\\x02')])
    """
    if type(buf) is not bytes:
        if buf is None:
            return EMPTY_HEADERS
        buf = _as_bytes("buf", buf)
    if not buf:
        return EMPTY_HEADERS
    # Lengths below 64 are one varint byte b with b & 0x81 == 0 (no continuation bit, not
    # negative), and the length is b >> 1; anything else goes through decode_varint. A length
    # past the end needs no test of its own: the next index raises IndexError, and after the
    # last header ``pos`` must be exactly the end.
    items: list[tuple[str, bytes | None]] = []
    append = items.append
    try:
        b = buf[0]
        if b & 0x81:
            count, pos = decode_varint(buf, 0)
            if count < 0:
                raise _fail(-3, "headers")
        else:
            count, pos = b >> 1, 1
        for _ in range(count):
            b = buf[pos]
            if b & 0x81:
                klen, pos = decode_varint(buf, pos)
                if klen < 0:
                    raise _fail(-3, "headers")
                end = pos + klen
            else:
                pos += 1
                end = pos + (b >> 1)
            key = buf[pos:end].decode()
            b = buf[end]
            if not b & 0x81:
                pos = end + 1 + (b >> 1)
                append((key, buf[end + 1 : pos]))
            elif b == 1:  # varint -1: a null value
                pos = end + 1
                append((key, None))
            else:
                vlen, pos = decode_varint(buf, end)
                if vlen < -1:
                    raise _fail(-3, "headers")
                if vlen == -1:
                    append((key, None))
                else:
                    append((key, buf[pos : pos + vlen]))
                    pos += vlen
    except IndexError:
        raise _fail(-4, "headers") from None
    except UnicodeDecodeError:
        raise _fail(-6, "headers") from None
    if pos != len(buf):
        raise _fail(-4 if pos > len(buf) else -7, "headers")
    headers = _new_object(Headers)  # Headers.from_pairs, inlined: the pairs are valid
    headers.pairs = items
    return headers


def _pack_value(fmt: ValueFormat, value: bytes, timestamp: int = -1, headers: bytes = b"") -> bytes:
    """Build a stored value of format ``fmt`` from serialized parts. O(len(value)).

    ``headers`` is already-serialized headers (see :func:`encode_headers`); it is ignored by
    formats without headers, as ``timestamp`` is by formats without a timestamp.

    >>> pack_value(ValueFormat.HEADERS, b"v", 100).hex()
    '00000000000000006476'
    """
    # len(headers) is its size only for bytes: of a memoryview or an array it counts items
    # (8 bytes each in an array("q")), so other headers types take the checked path.
    try:
        if fmt is _HEADERS:  # by identity: no comparison chain
            if type(headers) is bytes:
                n = len(headers)  # a size below 64 is one varint byte, inlined
                hsize = _LEN[n] if n < 64 else encode_varint(n)
                return _join((hsize, headers, _pack_q(timestamp), value))  # join checks types
        elif fmt is _TIMESTAMPED:
            return _pack_q(timestamp) + value
        elif fmt is _PLAIN:
            if type(value) is bytes:
                return value
        elif fmt is _PLAIN_HEADERS and type(headers) is bytes:
            n = len(headers)
            hsize = _LEN[n] if n < 64 else encode_varint(n)
            return _join((hsize, headers, value))
    except (TypeError, struct.error):
        pass
    return _pack_value_checked(_format(fmt), value, timestamp, headers)


def _pack_value_checked(fmt: ValueFormat, value: bytes, timestamp: int, headers: bytes) -> bytes:
    value = _as_bytes("value", value)
    if fmt == _PLAIN:
        return value
    timestamp = _check_long("timestamp", timestamp)
    if fmt == _TIMESTAMPED:
        return _pack_q(timestamp) + value
    headers = _as_bytes("headers", headers)
    hsize = encode_varint(len(headers))
    if fmt == _HEADERS:
        return hsize + headers + _pack_q(timestamp) + value
    return hsize + headers + value


def _split_value(fmt: ValueFormat, raw: bytes) -> tuple[bytes, int | None, bytes]:
    """Split a stored value into ``(value, timestamp or None, serialized headers)``. O(n).

    >>> split_value(ValueFormat.TIMESTAMPED, bytes.fromhex("00000000000003e8") + b"val")
    (b'val', 1000, b'')
    """
    # Other types take the checked path, which converts them to bytes: indexing or slicing a
    # memoryview or an array works on items, not bytes.
    if type(raw) is bytes:
        try:
            if fmt is _HEADERS:
                b = raw[0]
                # unpack_from fails if the timestamp is cut short (or end is past the end)
                if not b & 0x81:  # a one-byte headers size (< 64 bytes)
                    end = (b >> 1) + 1
                    return raw[end + 8 :], _unpack_q(raw, end)[0], raw[1:end]
                end = _headers_end(raw)
                return raw[end + 8 :], _unpack_q(raw, end)[0], raw[2:end]
            if fmt is _TIMESTAMPED:
                return raw[8:], _unpack_q(raw)[0], b""
            if fmt is _PLAIN_HEADERS:
                b = raw[0]
                if not b & 0x81:
                    end = (b >> 1) + 1
                    if len(raw) >= end:
                        return raw[end:], None, raw[1:end]
            elif fmt is _PLAIN:
                return raw, None, b""
        except (IndexError, struct.error):
            pass
    return _split_value_checked(_format(fmt), raw)


def _split_value_checked(fmt: ValueFormat, raw: bytes) -> tuple[bytes, int | None, bytes]:
    raw = _as_bytes("raw", raw)
    if fmt == _PLAIN:
        return raw, None, b""
    if fmt == _TIMESTAMPED:
        if len(raw) < 8:
            raise _fail(-1, "timestamped value")
        return raw[8:], _unpack_q(raw)[0], b""
    if not raw:
        raise _fail(-1, "value headers")
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
    return raw[end + 8 :], _unpack_q(raw, end)[0], headers


def _headers_end(raw: bytes) -> int:
    """Where ``[varint hsize][headers]`` ends in ``raw`` for a two-byte headers size (64 to
    8191 bytes of headers); for any other start, a position past the end of ``raw``.

    A two-byte varint whose second byte is 0 is a non-canonical encoding of a size below 64:
    it goes to the checked path too, which writes the size back canonically (as the C batch
    conversions and :func:`pack_value` do), so copying ``raw[:end]`` never keeps it."""
    if len(raw) > 1:
        b, c = raw[0], raw[1]
        if b & 0x80 and 0 < c < 0x80:
            u = b & 0x7F | c << 7
            if not u & 1:  # not negative
                return (u >> 1) + 2
    return len(raw) + 1


# The public single-value codecs are C builtins (csrc/fastpaths.c), cheaper to call than any
# Python function, each in front of the Python function above: C takes exact bytes and ints in
# range (one-byte headers sizes), the Python function everything else, or raises the typed error.
_FORMATS = (_PLAIN, _TIMESTAMPED, _HEADERS, _PLAIN_HEADERS)
encode_varint = _value_function("encode_varint", _encode_varint, _FORMATS)
decode_varint = _value_function("decode_varint", _decode_varint, _FORMATS)
pack_value = _value_function("pack_value", _pack_value, _FORMATS)
split_value = _value_function("split_value", _split_value, _FORMATS)
decode_headers = _headers_function(_decode_headers, Headers, EMPTY_HEADERS)
