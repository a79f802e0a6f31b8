"""A pure-Python reference of Kafka Streams' state-store byte formats, for the codec tests.

Written directly from ``/work/shared/kafka-formats.md`` (sections 0-6), for clarity and not
for speed, and deliberately independent of ``txstore.codecs``: it imports nothing from txstore
and does not use ``struct``. Every layout is spelled out the way the document spells it, with
Java's 32-bit ``int`` and 64-bit ``long`` semantics made explicit.

Anything the reference cannot decode (truncated input, a varint past 5 bytes, a negative or
oversized length, a header key that is not UTF-8, trailing bytes) raises :class:`OracleError`,
the stand-in for Kafka's ``SerializationException``. The facade must raise
``txstore.errors.SerializationError`` for exactly those inputs.

>>> write_varint(-65).hex()
'8101'
>>> window_key(b"a", 1000, 0).hex()
'6100000000000003e800000000'
>>> murmur2(b"21")
-973932308
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

#: ``ConsumerRecord.NO_TIMESTAMP``, the surrogate timestamp of values that never had one.
NO_TIMESTAMP = -1

HeaderList = list[tuple[str, bytes | None]]


class OracleError(Exception):
    """The reference rejects the input (Kafka would throw ``SerializationException``)."""


class Fmt(IntEnum):
    """The four stored value layouts; the numbers are those of ``txstore.codecs.ValueFormat``."""

    PLAIN = 0  # [value]
    TIMESTAMPED = 1  # [L ts][value]
    HEADERS = 2  # [varint hsize][headers][L ts][value]
    PLAIN_HEADERS = 3  # [varint hsize][headers][value]


def has_timestamp(fmt: Fmt) -> bool:
    return fmt in (Fmt.TIMESTAMPED, Fmt.HEADERS)


def has_headers(fmt: Fmt) -> bool:
    return fmt in (Fmt.HEADERS, Fmt.PLAIN_HEADERS)


# ----------------------------------------------------------------------------- Java integers


def to_int32(u: int) -> int:
    """Reinterpret the low 32 bits of ``u`` as a Java ``int``."""
    u &= 0xFFFFFFFF
    return u - 2**32 if u >= 2**31 else u


def to_int64(u: int) -> int:
    """Reinterpret the low 64 bits of ``u`` as a Java ``long``."""
    u &= 0xFFFFFFFFFFFFFFFF
    return u - 2**64 if u >= 2**63 else u


def L(x: int) -> bytes:
    """``L(x)``: 8-byte big-endian two's-complement long (``ByteBuffer.putLong``)."""
    if not LONG_MIN <= x <= LONG_MAX:
        raise ValueError(f"{x} is not a Java long")
    u = x & 0xFFFFFFFFFFFFFFFF
    return bytes((u >> (8 * (7 - i))) & 0xFF for i in range(8))


def I(x: int) -> bytes:  # noqa: E743 - the document's name for a 4-byte int
    """``I(x)``: 4-byte big-endian two's-complement int."""
    if not INT_MIN <= x <= INT_MAX:
        raise ValueError(f"{x} is not a Java int")
    u = x & 0xFFFFFFFF
    return bytes((u >> (8 * (3 - i))) & 0xFF for i in range(4))


def read_long(data: bytes, pos: int) -> int:
    """``ByteBuffer.getLong(pos)``; underflow is an error."""
    if pos < 0 or len(data) - pos < 8:
        raise OracleError("buffer underflow reading a long")
    u = 0
    for b in data[pos : pos + 8]:
        u = (u << 8) | b
    return to_int64(u)


def read_int(data: bytes, pos: int) -> int:
    """``ByteBuffer.getInt(pos)``; underflow is an error."""
    if pos < 0 or len(data) - pos < 4:
        raise OracleError("buffer underflow reading an int")
    u = 0
    for b in data[pos : pos + 4]:
        u = (u << 8) | b
    return to_int32(u)


# ----------------------------------------------------------------------------- §0.1 varints


def write_unsigned_varint(value: int) -> bytes:
    """``ByteUtils.writeUnsignedVarint(int)``: 7 bits a byte, low group first, MSB = more."""
    if not INT_MIN <= value <= 0xFFFFFFFF:
        raise ValueError(f"{value} does not fit in 32 bits")
    v = value & 0xFFFFFFFF  # Java's int, seen unsigned (>>> shifts)
    out = bytearray()
    while (v & 0xFFFFFF80) != 0:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def write_varint(value: int) -> bytes:
    """``ByteUtils.writeVarint(int)`` = ``writeUnsignedVarint((v << 1) ^ (v >> 31))``."""
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"{value} is not a Java int")
    zigzag = to_int32((value << 1) ^ (value >> 31))
    return write_unsigned_varint(zigzag)


def read_unsigned_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """``ByteUtils.readUnsignedVarint``: returns ``(Java int, next position)``.

    Java's loop: ``while ((b = get()) & 0x80) != 0 { value |= (b & 0x7f) << i; i += 7;
    if (i > 28) throw illegalVarint; } value |= b << i``. So a 5th byte with the continuation
    bit throws, and the bits shifted past 32 by the 5th byte are lost.
    """
    value = 0
    i = 0
    while True:
        if pos < 0 or pos >= len(data):
            raise OracleError("buffer underflow reading a varint")
        b = data[pos]
        pos += 1
        if (b & 0x80) == 0:
            break
        value |= (b & 0x7F) << i
        i += 7
        if i > 28:
            raise OracleError("varint is longer than 5 bytes")
    value |= b << i
    return to_int32(value), pos


def read_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """``ByteUtils.readVarint`` = ``(u >>> 1) ^ -(u & 1)`` of the unsigned varint."""
    signed_u, pos = read_unsigned_varint(data, pos)
    u = signed_u & 0xFFFFFFFF  # >>> works on the unsigned bits
    return to_int32((u >> 1) ^ -(u & 1)), pos


def read_varints(data: bytes) -> list[int]:
    """A buffer made only of zig-zag varints."""
    out: list[int] = []
    pos = 0
    while pos < len(data):
        v, pos = read_varint(data, pos)
        out.append(v)
    return out


# ----------------------------------------------------------------------------- §1.2 headers


def encode_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    """``HeadersSerializer``: ``""`` for none, else ``varint(count) header*``.

    ``header := varint(len(keyUtf8)) keyUtf8 (varint(-1) | varint(len(v)) v)``.
    A key that is not encodable as UTF-8 (a lone surrogate) raises ``ValueError``.
    """
    if headers is None or len(headers) == 0:
        return b""
    out = bytearray(write_varint(len(headers)))
    for key, value in headers:
        key_utf8 = key.encode("utf-8")  # strict: a lone surrogate raises UnicodeEncodeError
        out += write_varint(len(key_utf8))
        out += key_utf8
        if value is None:
            out += write_varint(-1)
        else:
            out += write_varint(len(value))
            out += value
    return bytes(out)


def decode_headers(data: bytes | None) -> HeaderList:
    """``HeadersDeserializer``, strict: accepts ``""`` and ``00`` as "no headers"; rejects a
    negative count or key length, a value length below -1, lengths past the end, keys that are
    not UTF-8 and bytes left over after the last header."""
    if data is None or len(data) == 0:
        return []
    count, pos = read_varint(data, 0)
    if count < 0:
        raise OracleError("negative header count")
    headers: HeaderList = []
    for _ in range(count):
        klen, pos = read_varint(data, pos)
        if klen < 0:
            raise OracleError("negative header key length")
        if pos + klen > len(data):
            raise OracleError("header key runs past the end")
        try:
            key = data[pos : pos + klen].decode("utf-8")
        except UnicodeDecodeError:
            raise OracleError("header key is not UTF-8") from None
        pos += klen
        vlen, pos = read_varint(data, pos)
        if vlen == -1:
            headers.append((key, None))
            continue
        if vlen < 0:
            raise OracleError("negative header value length")
        if pos + vlen > len(data):
            raise OracleError("header value runs past the end")
        headers.append((key, data[pos : pos + vlen]))
        pos += vlen
    if pos != len(data):
        raise OracleError("trailing bytes after the headers")
    return headers


# ----------------------------------------------------------------------------- §1.3-1.6, §2 values


def pack(fmt: Fmt, value: bytes, ts: int = NO_TIMESTAMP, headers: bytes = b"") -> bytes:
    """Build a stored value from its parts; fields the format has no room for are dropped."""
    if fmt == Fmt.PLAIN:
        return value
    if fmt == Fmt.TIMESTAMPED:
        return L(ts) + value
    if fmt == Fmt.HEADERS:
        return write_varint(len(headers)) + headers + L(ts) + value
    if fmt == Fmt.PLAIN_HEADERS:
        return write_varint(len(headers)) + headers + value
    raise ValueError(f"unknown format {fmt}")


def split(fmt: Fmt, raw: bytes) -> tuple[bytes, int | None, bytes]:
    """``(value, timestamp or None, raw header bytes)`` of a stored value.

    The header bytes are not decoded here: Kafka decodes them lazily (``LazyHeaders``).
    """
    if fmt == Fmt.PLAIN:
        return raw, None, b""
    if fmt == Fmt.TIMESTAMPED:
        return raw[8:], read_long(raw, 0), b""
    if fmt not in (Fmt.HEADERS, Fmt.PLAIN_HEADERS):
        raise ValueError(f"unknown format {fmt}")
    hsize, pos = read_varint(raw, 0)
    if hsize < 0:
        raise OracleError("negative headersSize")
    if pos + hsize > len(raw):
        raise OracleError("headers run past the end")
    headers = raw[pos : pos + hsize]
    pos += hsize
    if fmt == Fmt.PLAIN_HEADERS:
        return raw[pos:], None, headers
    return raw[pos + 8 :], read_long(raw, pos), headers


def convert(raw: bytes | None, src: Fmt, dst: Fmt) -> bytes | None:
    """Format conversion: a missing timestamp becomes -1, missing headers become empty
    headers (``00``), a field the target lacks is dropped; ``None`` stays ``None``."""
    if raw is None:
        return None
    value, ts, headers = split(src, raw)
    return pack(dst, value, NO_TIMESTAMP if ts is None else ts, headers)


def record_to_value(fmt: Fmt, value: bytes | None, ts: int, headers: bytes) -> bytes | None:
    """Restore's record converters (§1.7, §2.4): changelog value + record timestamp + record
    headers (serialized) to the stored value of ``fmt``. A ``None`` value (a delete) stays
    ``None``. For HEADERS: ``varint(len(H)) H L(ts) value``."""
    if value is None:
        return None
    return pack(fmt, value, ts, headers)


# ----------------------------------------------------------------------------- §3.1 window keys


def window_key(key: bytes, ts: int, seq: int = 0) -> bytes:
    """``WindowKeySchema.toStoreKeyBinary``: ``[key][L ts][I seq]``."""
    return key + L(ts) + I(seq)


def extract_window_key(raw: bytes) -> tuple[bytes, int, int]:
    """``(key, timestamp, seq)``: key ``[0:len-12]``, ``L`` at ``len-12``, ``I`` at ``len-4``."""
    if len(raw) < 12:
        raise OracleError("a window store key has at least 12 bytes")
    return raw[: len(raw) - 12], read_long(raw, len(raw) - 12), read_int(raw, len(raw) - 4)


def ordered_upper_range(key: bytes, max_suffix: bytes) -> bytes:
    """``OrderedBytes.upperRange``: with a first suffix byte of 0 keep the whole key; else keep
    ``key[0]`` and then each next byte while it is >= the first suffix byte (unsigned)."""
    first = max_suffix[0]
    if first == 0:
        return key + max_suffix
    kept = bytearray()
    i = 0
    while i < len(key) and (i < 1 or key[i] >= first):
        kept.append(key[i])
        i += 1
    return bytes(kept) + max_suffix


def ordered_lower_range(key: bytes, min_suffix: bytes) -> bytes:
    """``OrderedBytes.lowerRange`` = ``key || minSuffix``."""
    return key + min_suffix


def window_lower_range_fixed(key: bytes, time_from: int) -> bytes:
    return key + L(max(0, time_from)) + I(0)


def window_upper_range_fixed(key: bytes, time_to: int) -> bytes:
    return key + L(time_to) + I(INT_MAX)


def window_lower_range(key: bytes, time_from: int) -> bytes:
    """The timestamp is ignored: the minimum suffix ``00 x 12`` is used."""
    return ordered_lower_range(key, bytes(12))


def window_upper_range(key: bytes, time_to: int) -> bytes:
    return ordered_upper_range(key, L(time_to) + I(INT_MAX))


# ----------------------------------------------------------------------------- §3.3 session keys


def session_key(key: bytes, start: int, end: int) -> bytes:
    """``SessionKeySchema.toBinary``: ``[key][L end][L start]`` (end first)."""
    return key + L(end) + L(start)


def extract_session_key(raw: bytes) -> tuple[bytes, int, int]:
    """``(key, start, end)``: end at ``len-16``, start at ``len-8``."""
    if len(raw) < 16:
        raise OracleError("a session store key has at least 16 bytes")
    end = read_long(raw, len(raw) - 16)
    start = read_long(raw, len(raw) - 8)
    return raw[: len(raw) - 16], start, end


def session_lower_range_fixed(key: bytes, time_from: int) -> bytes:
    """``Windowed(key, SessionWindow(0, max(0, from)))``."""
    return key + L(max(0, time_from)) + L(0)


def session_upper_range_fixed(key: bytes, time_to: int) -> bytes:
    """``Windowed(key, SessionWindow(to, Long.MAX))``."""
    return key + L(LONG_MAX) + L(time_to)


def session_lower_range(key: bytes, time_from: int) -> bytes:
    return ordered_lower_range(key, bytes(16))


def session_upper_range(key: bytes, time_to: int) -> bytes:
    return ordered_upper_range(key, L(LONG_MAX) + L(time_to))


# ----------------------------------------------------------------------------- §5 windowed serdes


def time_windowed_key(key: bytes, start: int) -> bytes:
    """``TimeWindowedSerializer``: ``[key][L start]``, no end and no seqnum."""
    return key + L(start)


def parse_time_windowed_key(raw: bytes) -> tuple[bytes, int]:
    """``TimeWindowedDeserializer`` (non-changelog mode): ``(key, start)``."""
    if len(raw) < 8:
        raise OracleError("a time-windowed key has at least 8 bytes")
    return raw[: len(raw) - 8], read_long(raw, len(raw) - 8)


# ----------------------------------------------------------------------------- §4.2 segments


def segment_id(ts: int, interval: int) -> int:
    """``ts / interval`` with Java's long division, which truncates toward zero."""
    if interval < 1:
        raise ValueError("segment interval must be >= 1")
    q = ts // interval  # Python floors toward -infinity...
    if q < 0 and q * interval != ts:
        q += 1  # ...so a negative inexact quotient is one too small
    return q


# ----------------------------------------------------------------------------- §6 murmur2


def murmur2(data: bytes) -> int:
    """``Utils.murmur2``: a signed 32-bit int."""
    mask = 0xFFFFFFFF
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    length = len(data)
    h = (seed ^ length) & mask
    for i in range(length // 4):
        k = data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 | data[4 * i + 3] << 24
        k = (k * m) & mask
        k ^= k >> r  # >>> on a 32-bit value
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    base = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return to_int32(h)


def to_positive(n: int) -> int:
    """``Utils.toPositive`` = ``n & 0x7fffffff``."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``BuiltInPartitioner.partitionForKey`` = ``toPositive(murmur2(key)) % numPartitions``."""
    if num_partitions < 1:
        raise ValueError("num_partitions must be >= 1")
    return to_positive(murmur2(key)) % num_partitions
