"""Benchmark of txstore's byte codecs: pure Python vs the ``txstore.codecs`` facade vs raw C.

For each codec, interleaved in one process (see ``_harness.py``):

* ``py``: the best plain-Python implementation of the codec (the ``py_*`` functions below):
  what a user would write without txstore, with ``struct.Struct`` objects, concatenation and
  ``b"".join``. It does not validate its arguments and is specialised to one value format.
* ``facade``: the ``txstore.codecs`` single-item function a store calls once per item. For
  value conversions that is the function ``value_converter(src, dst)`` returns (a store
  resolves its pair of formats once), and for segment ids the one
  ``segment_id_function(interval)`` returns; the generic forms ``convert_value(raw, src,
  dst)`` and ``segment_id(ts, interval)``, which check the formats or the interval on every
  call, are shown in rows marked ``*`` and not counted in the figure.
* ``C``: the raw C function through cffi, called once per item (the ``c_*`` functions): what
  the facade would cost if it used C for one item (allocate the output, call, copy out).
* ``py loop`` vs ``batch``: the pure-Python list comprehension over N items, with the same
  semantics as the batch function (``None`` items pass through), vs the facade's batch function
  (one C call for varints and partitions; the others, marked ``(Python)``, map the single-item
  codecs over the list, since this benchmark found that faster than their C batches: a C batch
  that must return one new object per item loses to a comprehension for layouts that Python
  builds with one concatenation).

Single items are timed as ``deque(map(fn, *columns), maxlen=0)`` over distinct items, so each
per-item time includes one Python call and ~10 ns of ``map`` overhead, equally for every
variant. Before timing, every variant's output is checked against the facade's.

Data: 16-byte keys, 90-110-byte values (mean 100), 0-3 headers with short keys and values
(10% ``None`` values), timestamps around 1.7e12, 2% tombstones among changelog records.

* ``columns``: the column functions (``split_value_columns``, ``window_key_columns``,
  ``session_key_columns``: what the Spark reader calls) against the best plain Python that
  builds the same Arrow-layout columns (``_codec_columns.py``). A list-returning batch must make
  one ``bytes`` object per item, which costs more than the C work of most layouts; a column
  does not, so this is where a C batch can pay off.

Run ``python perf/bench_codecs.py [--quick] [--json PATH]``. The output ends with three figures:
``codec_batch_speedup_min`` (the smallest batch speedup over the pure-Python loop, over every
list-returning batch function and size; goal >= 8), ``codec_single_slowdown_max`` (the largest
facade single-item time over the pure-Python time; goal <= 1.0) and
``codec_columns_speedup_min`` (the smallest speedup of a column function over plain Python
building the same columns). The JSON record (``_record.py``; default ``perf/out/codecs.json``)
holds them, every round's timings of every codec and the environment.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import struct
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import _codec_columns as pycols
import txstore._codecs as _codecs
from _harness import Settings, Timing, compare, consume, fmt_ns, fmt_ratio, table
from _record import Record, add_json_argument

from txstore import codecs
from txstore.codecs import ValueFormat
from txstore.codecs._native import session_key_columns, split_value_columns, window_key_columns
from txstore.errors import SerializationError
from txstore.types import Headers

_ffi: Any = _codecs.ffi
_lib: Any = _codecs.lib

PLAIN = ValueFormat.PLAIN
TIMESTAMPED = ValueFormat.TIMESTAMPED
HEADERS = ValueFormat.HEADERS

HeaderItems = list[tuple[str, bytes | None]]

# --------------------------------------------------------------------------- pure Python

_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_QQ = struct.Struct(">qq")
_ONE_BYTE = [bytes((u,)) for u in range(128)]
_PLAIN_TO_HEADERS = b"\x00" + _Q.pack(-1)  # empty headers, timestamp -1


def py_encode_varint(value: int) -> bytes:
    """Kafka's zig-zag varint of a 32-bit int."""
    u = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    if u < 0x80:
        return _ONE_BYTE[u]
    if u < 0x4000:
        return bytes((u & 0x7F | 0x80, u >> 7))
    out = bytearray()
    while u > 0x7F:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


#: The varint of every length below 8192 (one or two bytes), for headers and value prefixes.
_VARLEN = [py_encode_varint(n) for n in range(8192)]


def py_decode_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    """``(value, next_offset)`` of the zig-zag varint at ``offset``."""
    b = buf[offset]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), offset + 1
    u = b & 0x7F
    shift = 7
    i = offset + 1
    while True:
        b = buf[i]
        i += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise ValueError("varint is longer than 5 bytes")
    u &= 0xFFFFFFFF
    return (u >> 1) ^ -(u & 1), i


def py_encode_varints(values: Iterable[int]) -> bytes:
    return b"".join(map(py_encode_varint, values))


def py_decode_varints(buf: bytes) -> list[int]:
    out: list[int] = []
    append = out.append
    i = 0
    n = len(buf)
    while i < n:
        b = buf[i]
        i += 1
        if b < 0x80:
            append((b >> 1) ^ -(b & 1))
            continue
        u = b & 0x7F
        shift = 7
        while True:
            b = buf[i]
            i += 1
            u |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 28:
                raise ValueError("varint is longer than 5 bytes")
        u &= 0xFFFFFFFF
        append((u >> 1) ^ -(u & 1))
    return out


def py_encode_headers(headers: Headers | HeaderItems | None) -> bytes:
    """``[varint count]([varint klen][key][varint vlen | 01][value])*``; no headers: ``b""``."""
    if not headers:
        return b""
    out = [_VARLEN[len(headers)]]
    append = out.append
    for key, value in headers:
        kb = key.encode()
        n = len(kb)
        append(_VARLEN[n] if n < 8192 else py_encode_varint(n))
        append(kb)
        if value is None:
            append(b"\x01")
        else:
            n = len(value)
            append(_VARLEN[n] if n < 8192 else py_encode_varint(n))
            append(value)
    return b"".join(out)


def py_decode_headers(buf: bytes) -> HeaderItems:
    """Headers as a list of ``(key, value)`` pairs."""
    if not buf:
        return []
    count, pos = py_decode_varint(buf, 0)
    items: HeaderItems = []
    append = items.append
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = py_decode_varint(buf, pos)
        end = pos + klen
        key = buf[pos:end].decode()
        b = buf[end]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos = end + 1
        else:
            vlen, pos = py_decode_varint(buf, end)
        if vlen < 0:
            append((key, None))
        else:
            end = pos + vlen
            append((key, buf[pos:end]))
            pos = end
    return items


def py_pack_headers_value(value: bytes, timestamp: int, headers: bytes) -> bytes:
    """``[varint hsize][headers][ts 8 BE][value]`` (ValueTimestampHeaders)."""
    n = len(headers)
    return (_VARLEN[n] if n < 8192 else py_encode_varint(n)) + headers + _Q.pack(timestamp) + value


def py_split_headers_value(raw: bytes) -> tuple[bytes, int, bytes]:
    """``(value, timestamp, headers)`` of a ValueTimestampHeaders value."""
    b = raw[0]
    if b < 0x80:
        end = ((b >> 1) ^ -(b & 1)) + 1
        return raw[end + 8 :], _Q.unpack_from(raw, end)[0], raw[1:end]
    hsize, pos = py_decode_varint(raw, 0)
    end = pos + hsize
    return raw[end + 8 :], _Q.unpack_from(raw, end)[0], raw[pos:end]


def py_plain_to_headers(raw: bytes | None) -> bytes | None:
    return None if raw is None else _PLAIN_TO_HEADERS + raw


def py_timestamped_to_headers(raw: bytes | None) -> bytes | None:
    return None if raw is None else b"\x00" + raw


def py_headers_to_plain(raw: bytes | None) -> bytes | None:
    if raw is None:
        return None
    b = raw[0]
    if b < 0x80:
        return raw[((b >> 1) ^ -(b & 1)) + 9 :]
    hsize, pos = py_decode_varint(raw, 0)
    return raw[pos + hsize + 8 :]


def py_record_to_headers_value(value: bytes | None, timestamp: int, headers: bytes) -> bytes | None:
    if value is None:
        return None
    n = len(headers)
    return (_VARLEN[n] if n < 8192 else py_encode_varint(n)) + headers + _Q.pack(timestamp) + value


def py_window_key(key: bytes, timestamp: int, seq: int = 0) -> bytes:
    return key + _QI.pack(timestamp, seq)


def py_extract_window_key(raw: bytes) -> tuple[bytes, int, int]:
    n = len(raw) - 12
    ts, seq = _QI.unpack_from(raw, n)
    return raw[:n], ts, seq


def py_session_key(key: bytes, start: int, end: int) -> bytes:
    return key + _QQ.pack(end, start)


def py_extract_session_key(raw: bytes) -> tuple[bytes, int, int]:
    n = len(raw) - 16
    end, start = _QQ.unpack_from(raw, n)
    return raw[:n], start, end


_BLOCKS: dict[int, struct.Struct] = {}


def _murmur2_u32(data: bytes) -> int:
    """Kafka's murmur2 as an unsigned 32-bit int (see kafka-formats.md section 6)."""
    length = len(data)
    h = 0x9747B28C ^ length
    nblocks = length >> 2
    blocks = _BLOCKS.get(nblocks)
    if blocks is None:
        blocks = _BLOCKS[nblocks] = struct.Struct(f"<{nblocks}I")
    for k in blocks.unpack_from(data):
        k = (k * 0x5BD1E995) & 0xFFFFFFFF
        k ^= k >> 24
        h = ((h * 0x5BD1E995) ^ (k * 0x5BD1E995)) & 0xFFFFFFFF
    tail = length & 3
    if tail:
        i = length - tail
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    return h ^ (h >> 15)


def py_murmur2(data: bytes) -> int:
    h = _murmur2_u32(data)
    return h - 0x100000000 if h & 0x80000000 else h


def py_partition_for_key(key: bytes, num_partitions: int) -> int:
    return (_murmur2_u32(key) & 0x7FFFFFFF) % num_partitions


def py_segment_id(timestamp: int, interval: int) -> int:
    return timestamp // interval if timestamp >= 0 else -(-timestamp // interval)


# --------------------------------------------------------------------------- raw C, one item


def _check(code: int) -> int:
    if code < 0:
        raise SerializationError(f"C error {code}")
    return code


def c_encode_varint(value: int) -> bytes:
    out = _ffi.new("uint8_t[5]")
    return bytes(_ffi.buffer(out, _lib.txc_varint_encode(value, out)))


def c_decode_varint(buf: bytes, offset: int = 0) -> tuple[int, int]:
    out = _ffi.new("int32_t *")
    src = _ffi.from_buffer(buf) + offset if offset else buf
    n = _check(_lib.txc_varint_decode(src, len(buf) - offset, out))
    return out[0], offset + n


def c_encode_headers(headers: Headers | HeaderItems | None) -> bytes:
    if not headers:
        return b""
    kbs = [k.encode() for k, _ in headers]
    vals = [v for _, v in headers]
    keys = b"".join(kbs)
    vdata = b"".join([v for v in vals if v is not None])
    klens = _ffi.new("int64_t[]", [len(k) for k in kbs])
    vlens = _ffi.new("int64_t[]", [-1 if v is None else len(v) for v in vals])
    cap = 5 + len(keys) + len(vdata) + 10 * len(kbs)
    out = _ffi.new("uint8_t[]", cap)
    n = _check(_lib.txc_headers_encode(len(kbs), keys, klens, vdata, vlens, out, cap))
    return bytes(_ffi.buffer(out, n))


def c_decode_headers(buf: bytes) -> HeaderItems:
    if not buf:
        return []
    max_headers = len(buf) // 2 + 1
    spans = _ffi.new("int64_t[]", 4 * max_headers)
    count = _check(_lib.txc_headers_decode(buf, len(buf), spans, max_headers))
    s = _ffi.unpack(spans, 4 * count)
    items: HeaderItems = []
    for i in range(0, 4 * count, 4):
        koff, klen, voff, vlen = s[i : i + 4]
        key = buf[koff : koff + klen].decode()
        items.append((key, None if vlen < 0 else buf[voff : voff + vlen]))
    return items


def c_pack_headers_value(value: bytes, timestamp: int, headers: bytes) -> bytes:
    a = _ffi.new("int64_t[4]", (len(value), timestamp, len(headers)))  # a[3]: output length
    cap = len(value) + len(headers) + 14
    out = _ffi.new("uint8_t[]", cap)
    n = _lib.txc_records_to_format_batch(
        HEADERS, value, a, a + 1, headers, a + 2, 1, out, cap, a + 3
    )
    return bytes(_ffi.buffer(out, _check(n)))


def c_record_to_headers_value(value: bytes | None, timestamp: int, headers: bytes) -> bytes | None:
    return None if value is None else c_pack_headers_value(value, timestamp, headers)


def c_split_headers_value(raw: bytes) -> tuple[bytes, int, bytes]:
    parts = _ffi.new("int64_t[6]")
    _check(_lib.txc_value_split(HEADERS, raw, len(raw), parts))
    hoff, hlen, _, ts, voff, _ = _ffi.unpack(parts, 6)
    return raw[voff:], ts, raw[hoff : hoff + hlen]


def c_converter(src: ValueFormat, dst: ValueFormat) -> Callable[[bytes | None], bytes | None]:
    def convert(raw: bytes | None) -> bytes | None:
        if raw is None:
            return None
        a = _ffi.new("int64_t[2]", (len(raw),))  # a[1]: output length
        cap = len(raw) + 15
        out = _ffi.new("uint8_t[]", cap)
        n = _lib.txc_convert_batch(src, dst, raw, a, 1, out, cap, a + 1)
        return bytes(_ffi.buffer(out, _check(n)))

    return convert


def c_window_key(key: bytes, timestamp: int, seq: int = 0) -> bytes:
    a = _ffi.new("int64_t[2]", (len(key), timestamp))
    s = _ffi.new("int32_t[1]", (seq,))
    cap = len(key) + 12
    out = _ffi.new("uint8_t[]", cap)
    _check(_lib.txc_window_keys_encode_batch(key, a, a + 1, s, 1, out, cap))
    return bytes(_ffi.buffer(out, cap))


def c_extract_window_key(raw: bytes) -> tuple[bytes, int, int]:
    a = _ffi.new("int64_t[3]", (len(raw),))  # a[1]: key length, a[2]: timestamp
    s = _ffi.new("int32_t[1]")
    _check(_lib.txc_window_keys_extract_batch(raw, a, 1, a + 1, a + 2, s))
    return raw[: a[1]], a[2], s[0]


def c_session_key(key: bytes, start: int, end: int) -> bytes:
    a = _ffi.new("int64_t[3]", (len(key), end, start))
    cap = len(key) + 16
    out = _ffi.new("uint8_t[]", cap)
    _check(_lib.txc_session_keys_encode_batch(key, a, a + 1, a + 2, 1, out, cap))
    return bytes(_ffi.buffer(out, cap))


def c_extract_session_key(raw: bytes) -> tuple[bytes, int, int]:
    a = _ffi.new("int64_t[4]", (len(raw),))  # a[1]: key length, a[2]: end, a[3]: start
    _check(_lib.txc_session_keys_extract_batch(raw, a, 1, a + 1, a + 2, a + 3))
    return raw[: a[1]], a[3], a[2]


def c_murmur2(data: bytes) -> int:
    return int(_lib.txc_murmur2(data, len(data)))


def c_partition_for_key(key: bytes, num_partitions: int) -> int:
    return (int(_lib.txc_murmur2(key, len(key))) & 0x7FFFFFFF) % num_partitions


def c_segment_id(timestamp: int, interval: int) -> int:
    a = _ffi.new("int64_t[2]", (timestamp,))
    _lib.txc_segment_ids_batch(a, 1, interval, a + 1)
    return int(a[1])


# --------------------------------------------------------------------------- data


@dataclass
class Data:
    """Seeded, realistic inputs, built with the pure-Python encoders; every list has ``n``
    items."""

    n: int
    keys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    header_bytes: list[bytes] = field(default_factory=list)
    stored_headers: list[bytes] = field(default_factory=list)  # ValueFormat.HEADERS values
    stored_timestamped: list[bytes] = field(default_factory=list)
    record_values: list[bytes | None] = field(default_factory=list)  # 2% tombstones
    window_keys: list[bytes] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    session_keys: list[bytes] = field(default_factory=list)
    varints: list[int] = field(default_factory=list)
    varint_bytes: list[bytes] = field(default_factory=list)

    @classmethod
    def make(cls, n: int, seed: int = 20260601) -> Data:
        rng = random.Random(seed)
        d = cls(n)
        names = ["trace-id", "content-type", "src", "retry-count", "tenant"]
        for _ in range(n):
            key = rng.randbytes(16)
            value = rng.randbytes(rng.randint(90, 110))
            ts = 1_700_000_000_000 + rng.randrange(30 * 86_400_000)
            hs = Headers(
                (
                    rng.choice(names),
                    None if rng.random() < 0.1 else rng.randbytes(rng.randint(1, 16)),
                )
                for _ in range(rng.randrange(4))
            )
            hb = py_encode_headers(hs)
            d.keys.append(key)
            d.values.append(value)
            d.timestamps.append(ts)
            d.headers.append(hs)
            d.header_bytes.append(hb)
            d.stored_headers.append(py_pack_headers_value(value, ts, hb))
            d.stored_timestamped.append(_Q.pack(ts) + value)
            d.record_values.append(None if rng.random() < 0.02 else value)
            d.window_keys.append(py_window_key(key, ts, 0))
            end = ts + rng.randrange(300_000)
            d.starts.append(ts)
            d.ends.append(end)
            d.session_keys.append(py_session_key(key, ts, end))
            r = rng.random()  # lengths and counts, mostly small; a few negative deltas
            if r < 0.5:
                v = rng.randrange(64)
            elif r < 0.85:
                v = rng.randrange(64, 8192)
            elif r < 0.95:
                v = rng.randrange(8192, 1 << 20)
            else:
                v = -rng.randrange(1, 1000)
            d.varints.append(v)
            d.varint_bytes.append(py_encode_varint(v))
        return d


# --------------------------------------------------------------------------- cases

Fn = Callable[..., Any]
Thunk = Callable[[], object]


@dataclass
class Single:
    """A single-item function and the argument columns to map it over."""

    fn: Fn
    columns: tuple[Iterable[Any], ...]

    def run(self) -> list[Any]:
        return list(map(self.fn, *self.columns))

    def thunk(self) -> Thunk:
        fn, cols = self.fn, self.columns
        return lambda: consume(map(fn, *cols))


@dataclass
class Case:
    """One codec: its single-item variants and, if it has one, its batch function."""

    name: str
    functions: str  # facade single / batch names, for the table
    py: Single | None = None
    facade: Single | None = None
    c: Single | None = None
    batch: Callable[[int], tuple[Thunk, Thunk]] | None = None  # n -> (py loop, facade batch)
    norm: Callable[[Any], Any] = lambda x: x
    #: False: shown for reference, not counted in codec_single_slowdown_max, because no store
    #: calls this function per item (it calls the pre-resolved form measured in another row).
    in_figure: bool = True
    #: True: ``batch`` is a column function (its own table and codec_columns_speedup_min).
    columns: bool = False


def _headers_as_list(h: Any) -> HeaderItems:
    return [tuple(x) for x in h]


def build_cases(d: Data, single_n: int) -> list[Case]:
    """Every codec, with ``single_n`` items for the single-item variants."""
    s = slice(0, single_n)
    keys, values, ts = d.keys[s], d.values[s], d.timestamps[s]
    hb, hs = d.header_bytes[s], d.headers[s]
    stored_h, stored_t = d.stored_headers[s], d.stored_timestamped[s]
    rec_values, wks, sks = d.record_values[s], d.window_keys[s], d.session_keys[s]
    starts, ends = d.starts[s], d.ends[s]
    varints, varint_bytes = d.varints[s], d.varint_bytes[s]
    interval, partitions = 60_000, 12
    zeros = repeat(0)

    def varint_encode_batch(n: int) -> tuple[Thunk, Thunk]:
        vs = d.varints[:n]
        return (lambda: py_encode_varints(vs)), (lambda: codecs.encode_varints(vs))

    def varint_decode_batch(n: int) -> tuple[Thunk, Thunk]:
        buf = b"".join(d.varint_bytes[:n])
        return (lambda: py_decode_varints(buf)), (lambda: codecs.decode_varints(buf))

    def split_batch(n: int) -> tuple[Thunk, Thunk]:
        raws = d.stored_headers[:n]

        def py() -> list[tuple[bytes, int, bytes] | None]:
            split = py_split_headers_value
            return [None if r is None else split(r) for r in raws]

        return py, (lambda: codecs.split_values(HEADERS, raws))

    def plain_to_headers_batch(n: int) -> tuple[Thunk, Thunk]:
        raws = d.values[:n]

        def py() -> list[bytes | None]:
            prefix = _PLAIN_TO_HEADERS
            return [None if r is None else prefix + r for r in raws]

        return py, (lambda: codecs.convert_values(raws, PLAIN, HEADERS))

    def timestamped_to_headers_batch(n: int) -> tuple[Thunk, Thunk]:
        raws = d.stored_timestamped[:n]

        def py() -> list[bytes | None]:
            return [None if r is None else b"\x00" + r for r in raws]

        return py, (lambda: codecs.convert_values(raws, TIMESTAMPED, HEADERS))

    def headers_to_plain_batch(n: int) -> tuple[Thunk, Thunk]:
        raws = d.stored_headers[:n]

        def py() -> list[bytes | None]:
            conv = py_headers_to_plain
            return [None if r is None else conv(r) for r in raws]

        return py, (lambda: codecs.convert_values(raws, HEADERS, PLAIN))

    def records_batch(n: int) -> tuple[Thunk, Thunk]:
        vs, tss, hbs = d.record_values[:n], d.timestamps[:n], d.header_bytes[:n]

        def py() -> list[bytes | None]:
            pack, varlen, enc = _Q.pack, _VARLEN, py_encode_varint
            return [
                None
                if v is None
                else (varlen[m] if (m := len(h)) < 8192 else enc(m)) + h + pack(t) + v
                for v, t, h in zip(vs, tss, hbs, strict=True)
            ]

        return py, (lambda: codecs.records_to_values(HEADERS, vs, tss, hbs))

    def window_encode_batch(n: int) -> tuple[Thunk, Thunk]:
        ks, tss = d.keys[:n], d.timestamps[:n]

        def py() -> list[bytes]:
            pack = _QI.pack
            return [k + pack(t, 0) for k, t in zip(ks, tss, strict=True)]

        return py, (lambda: codecs.window_keys(ks, tss))

    def window_extract_batch(n: int) -> tuple[Thunk, Thunk]:
        raws = d.window_keys[:n]

        def py() -> list[tuple[bytes, int, int]]:
            unpack = _QI.unpack_from
            return [(r[:-12], *unpack(r, len(r) - 12)) for r in raws]

        return py, (lambda: codecs.extract_window_keys(raws))

    def session_encode_batch(n: int) -> tuple[Thunk, Thunk]:
        ks, ss, es = d.keys[:n], d.starts[:n], d.ends[:n]

        def py() -> list[bytes]:
            pack = _QQ.pack
            return [k + pack(e, st) for k, st, e in zip(ks, ss, es, strict=True)]

        return py, (lambda: codecs.session_keys(ks, ss, es))

    def session_extract_batch(n: int) -> tuple[Thunk, Thunk]:
        raws = d.session_keys[:n]

        def py() -> list[tuple[bytes, int, int]]:
            unpack = _QQ.unpack_from
            return [(r[:-16], st, e) for r in raws for e, st in (unpack(r, len(r) - 16),)]

        return py, (lambda: codecs.extract_session_keys(raws))

    def partitions_batch(n: int) -> tuple[Thunk, Thunk]:
        ks = d.keys[:n]

        def py() -> list[int]:
            h = _murmur2_u32
            return [(h(k) & 0x7FFFFFFF) % partitions for k in ks]

        return py, (lambda: codecs.partitions_for_keys(ks, partitions))

    def segments_batch(n: int) -> tuple[Thunk, Thunk]:
        tss = d.timestamps[:n]

        def py() -> list[int]:
            iv = interval
            return [t // iv if t >= 0 else -(-t // iv) for t in tss]

        return py, (lambda: codecs.segment_ids(tss, interval))

    def split_columns(n: int) -> tuple[Thunk, Thunk]:
        raws = d.stored_headers[:n]
        return (
            lambda: pycols.split_headers_columns(raws, py_decode_varint),
            lambda: split_value_columns(HEADERS, raws),
        )

    def window_columns(n: int) -> tuple[Thunk, Thunk]:
        raws = d.window_keys[:n]
        return (lambda: pycols.window_key_columns(raws)), (lambda: window_key_columns(raws))

    def session_columns(n: int) -> tuple[Thunk, Thunk]:
        raws = d.session_keys[:n]
        return (lambda: pycols.session_key_columns(raws)), (lambda: session_key_columns(raws))

    column_cases = [
        Case("split HEADERS values", "split_value_columns", batch=split_columns),
        Case("window key extract", "window_key_columns", batch=window_columns),
        Case("session key extract", "session_key_columns", batch=session_columns),
    ]
    for case in column_cases:
        case.columns, case.norm = True, pycols.as_lists

    fmt_h, fmt_p = repeat(HEADERS), repeat(PLAIN)
    return [
        *column_cases,
        Case(
            "varint encode",
            "encode_varint / encode_varints",
            Single(py_encode_varint, (varints,)),
            Single(codecs.encode_varint, (varints,)),
            Single(c_encode_varint, (varints,)),
            varint_encode_batch,
        ),
        Case(
            "varint decode",
            "decode_varint / decode_varints",
            Single(py_decode_varint, (varint_bytes,)),
            Single(codecs.decode_varint, (varint_bytes,)),
            Single(c_decode_varint, (varint_bytes,)),
            varint_decode_batch,
        ),
        Case(
            "headers encode (0-3)",
            "encode_headers",
            Single(py_encode_headers, (hs,)),
            Single(codecs.encode_headers, (hs,)),
            Single(c_encode_headers, (hs,)),
        ),
        Case(
            "headers decode (0-3)",
            "decode_headers",
            Single(py_decode_headers, (hb,)),
            Single(codecs.decode_headers, (hb,)),
            Single(c_decode_headers, (hb,)),
            norm=_headers_as_list,
        ),
        Case(
            "pack HEADERS value",
            "pack_value",
            Single(py_pack_headers_value, (values, ts, hb)),
            Single(codecs.pack_value, (fmt_h, values, ts, hb)),
            Single(c_pack_headers_value, (values, ts, hb)),
        ),
        Case(
            "split HEADERS value",
            "split_value / split_values (Python)",
            Single(py_split_headers_value, (stored_h,)),
            Single(codecs.split_value, (fmt_h, stored_h)),
            Single(c_split_headers_value, (stored_h,)),
            split_batch,
        ),
        Case(
            "convert PLAIN->HEADERS",
            "value_converter(P,H) / convert_values (Python)",
            Single(py_plain_to_headers, (values,)),
            Single(codecs.value_converter(PLAIN, HEADERS), (values,)),
            Single(c_converter(PLAIN, HEADERS), (values,)),
            plain_to_headers_batch,
        ),
        Case(
            "convert TIMESTAMPED->HEADERS",
            "value_converter(T,H) / convert_values (Python)",
            Single(py_timestamped_to_headers, (stored_t,)),
            Single(codecs.value_converter(TIMESTAMPED, HEADERS), (stored_t,)),
            Single(c_converter(TIMESTAMPED, HEADERS), (stored_t,)),
            timestamped_to_headers_batch,
        ),
        Case(
            "convert HEADERS->PLAIN",
            "value_converter(H,P) / convert_values (Python)",
            Single(py_headers_to_plain, (stored_h,)),
            Single(codecs.value_converter(HEADERS, PLAIN), (stored_h,)),
            Single(c_converter(HEADERS, PLAIN), (stored_h,)),
            headers_to_plain_batch,
        ),
        Case(
            "convert PLAIN->HEADERS, by name",
            "convert_value",
            Single(py_plain_to_headers, (values,)),
            Single(codecs.convert_value, (values, fmt_p, fmt_h)),
            in_figure=False,
        ),
        Case(
            "record -> HEADERS value",
            "record_to_value / records_to_values (Python)",
            Single(py_record_to_headers_value, (rec_values, ts, hb)),
            Single(codecs.record_to_value, (fmt_h, rec_values, ts, hb)),
            Single(c_record_to_headers_value, (rec_values, ts, hb)),
            records_batch,
        ),
        Case(
            "window key encode",
            "window_key / window_keys (Python)",
            Single(py_window_key, (keys, ts, zeros)),
            Single(codecs.window_key, (keys, ts, zeros)),
            Single(c_window_key, (keys, ts, zeros)),
            window_encode_batch,
        ),
        Case(
            "window key extract",
            "extract_window_key / extract_window_keys (Python)",
            Single(py_extract_window_key, (wks,)),
            Single(codecs.extract_window_key, (wks,)),
            Single(c_extract_window_key, (wks,)),
            window_extract_batch,
        ),
        Case(
            "session key encode",
            "session_key / session_keys (Python)",
            Single(py_session_key, (keys, starts, ends)),
            Single(codecs.session_key, (keys, starts, ends)),
            Single(c_session_key, (keys, starts, ends)),
            session_encode_batch,
        ),
        Case(
            "session key extract",
            "extract_session_key / extract_session_keys (Python)",
            Single(py_extract_session_key, (sks,)),
            Single(codecs.extract_session_key, (sks,)),
            Single(c_extract_session_key, (sks,)),
            session_extract_batch,
        ),
        Case(
            "murmur2 (16 B)",
            "murmur2",
            Single(py_murmur2, (keys,)),
            Single(codecs.murmur2, (keys,)),
            Single(c_murmur2, (keys,)),
        ),
        Case(
            "partition (16 B, 12 parts)",
            "partition_for_key / partitions_for_keys",
            Single(py_partition_for_key, (keys, repeat(partitions))),
            Single(codecs.partition_for_key, (keys, repeat(partitions))),
            Single(c_partition_for_key, (keys, repeat(partitions))),
            partitions_batch,
        ),
        Case(
            "segment id",
            "segment_id_function(iv) / segment_ids (Python)",
            Single(py_segment_id, (ts, repeat(interval))),
            Single(codecs.segment_id_function(interval), (ts,)),
            Single(c_segment_id, (ts, repeat(interval))),
            segments_batch,
        ),
        Case(
            "segment id, interval per call",
            "segment_id",
            Single(py_segment_id, (ts, repeat(interval))),
            Single(codecs.segment_id, (ts, repeat(interval))),
            in_figure=False,
        ),
    ]


# --------------------------------------------------------------------------- checks


def check(case: Case, sizes: Sequence[int]) -> None:
    """Fail loudly if any variant disagrees with the facade (no timing of wrong code)."""
    if case.facade is not None:
        expected = [case.norm(x) for x in case.facade.run()]
        for label, variant in (("py", case.py), ("C", case.c)):
            if variant is not None and [case.norm(x) for x in variant.run()] != expected:
                raise AssertionError(f"{case.name}: {label} single disagrees with the facade")
    if case.batch is not None:
        for n in sizes:
            py, facade = case.batch(n)
            if case.norm(py()) != case.norm(facade()):
                raise AssertionError(f"{case.name}: py loop disagrees with the batch, n={n}")


# --------------------------------------------------------------------------- main


@dataclass
class Row:
    case: Case
    single: dict[str, Timing] = field(default_factory=dict)
    batch: dict[int, dict[str, Timing]] = field(default_factory=dict)

    def ratio(self, a: str, b: str) -> float | None:
        if a not in self.single or b not in self.single:
            return None
        return self.single[a].median_ns / self.single[b].median_ns

    def speedup(self, n: int) -> float | None:
        t = self.batch.get(n)
        return t["py"].median_ns / t["batch"].median_ns if t else None


def _noise(timings: Iterable[Timing]) -> str:
    spreads = [t.spread for t in timings]
    return f"{100 * max(spreads):.0f}%" if spreads else "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run (well under a minute)")
    parser.add_argument("--only", default="", help="only codecs whose name contains this text")
    parser.add_argument("--repeats", type=int, default=0, help="interleaved rounds (override)")
    add_json_argument(parser, "codecs")
    args = parser.parse_args(argv)

    single_n = 1000
    sizes = [1000] if args.quick else [1000, 10_000]
    settings = Settings(
        repeats=args.repeats or (9 if args.quick else 15),
        target_ns=6_000_000 if args.quick else 20_000_000,
    )
    record = Record(
        "codecs",
        quick=args.quick,
        workload={
            "single_items_per_pass": single_n,
            "batch_sizes": sizes,
            "rounds": settings.repeats,
            "sample_target_ns": settings.target_ns,
        },
        argv=argv,
    )
    started = time.perf_counter()
    data = Data.make(max(max(sizes), single_n))
    cases = [c for c in build_cases(data, single_n) if args.only in c.name]

    print(
        f"txstore codec benchmark ({'quick' if args.quick else 'full'}): "
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"single items: {single_n} distinct items per pass; batches of {', '.join(map(str, sizes))}"
        f"; {settings.repeats} interleaved rounds of >= {settings.target_ns / 1e6:.0f} ms, "
        "median ns per item"
    )
    rows: list[Row] = []
    for case in cases:
        check(case, sizes)
        row = Row(case)
        singles = {
            label: v.thunk()
            for label, v in (("py", case.py), ("facade", case.facade), ("C", case.c))
            if v is not None
        }
        if singles:
            row.single = compare(singles, single_n, settings)
        if case.batch is not None:
            for n in sizes:
                py, facade = case.batch(n)
                row.batch[n] = compare({"py": py, "batch": facade}, n, settings)
        rows.append(row)

    print()
    print("Single items: ns per item (py = best pure Python; facade = txstore.codecs; C = cffi)")
    print("  facade/py, C/py > 1: slower than pure Python; noise: (max - min) / median of rounds")
    print(
        table(
            ["codec", "facade function", "py", "facade", "C", "facade/py", "C/py", "noise"],
            [
                [
                    r.case.name if r.case.in_figure else f"{r.case.name} *",
                    r.case.functions.split(" / ")[0],
                    *(
                        fmt_ns(r.single[k].median_ns if k in r.single else None)
                        for k in ("py", "facade", "C")
                    ),
                    fmt_ratio(r.ratio("facade", "py")),
                    fmt_ratio(r.ratio("C", "py")),
                    _noise(r.single.values()),
                ]
                for r in rows
                if r.single
            ],
        )
    )
    if any(not r.case.in_figure for r in rows if r.single):
        print(
            "  * not in the figure: the generic forms, which check the formats (the interval) on"
            "\n    each call; the stores resolve them once (value_converter, segment_id_function)"
            "\n    and call the result, as measured in the rows without *"
        )
    batch_rows = [r for r in rows if r.batch and not r.case.columns]
    column_rows = [r for r in rows if r.batch and r.case.columns]
    for n in sizes:
        for title, selected in (
            (
                f"Batches of {n}: ns per item (py loop = list comprehension; batch = one C call)",
                batch_rows,
            ),
            (
                f"Columns of {n}: ns per item (py = plain Python building the same Arrow-layout"
                " columns; batch = one C call)",
                column_rows,
            ),
        ):
            if not selected:
                continue
            print()
            print(title)
            print("  speedup = py / batch (goal >= 8); (Python): the facade's batch is Python")
            print(
                table(
                    ["codec", "function", "py", "batch", "speedup", "noise"],
                    [
                        [
                            r.case.name,
                            r.case.functions.split(" / ")[-1],
                            fmt_ns(r.batch[n]["py"].median_ns),
                            fmt_ns(r.batch[n]["batch"].median_ns),
                            fmt_ratio(r.speedup(n)),
                            _noise(r.batch[n].values()),
                        ]
                        for r in selected
                    ],
                )
            )

    # (value, label, the timing series of the record it comes from)
    speedups = [
        (r.speedup(n) or 0.0, f"{r.case.name} n={n}", f"batch {n}/{r.case.name}")
        for r in batch_rows
        for n in sizes
    ]
    column_speedups = [
        (r.speedup(n) or 0.0, f"{r.case.name} n={n}", f"columns {n}/{r.case.name}")
        for r in column_rows
        for n in sizes
    ]
    slowdowns = [
        (r.ratio("facade", "py") or 0.0, r.case.name, f"single/{r.case.name}")
        for r in rows
        if r.single and r.case.in_figure
    ]
    print()
    print(f"elapsed {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f}")
    if args.only:
        print("(no figures: --only measured a subset of the codecs)")
        return 0
    for r in rows:
        if r.single:
            record.add_timings(f"single/{r.case.name}", r.single)
        for n, t in r.batch.items():
            record.add_timings(f"{'columns' if r.case.columns else 'batch'} {n}/{r.case.name}", t)
    if speedups:
        low, low_name, series = min(speedups)
        met = sum(x >= 8 for x, *_ in speedups)
        print(f"smallest batch speedup: {low_name}; {met}/{len(speedups)} batches reach 8x")
        record.figure("codec_batch_speedup_min", low, "x", based_on=[series])
    if column_speedups:
        low, low_name, series = min(column_speedups)
        print(f"smallest column speedup: {low_name}")
        record.figure("codec_columns_speedup_min", low, "x", based_on=[series])
    if slowdowns:
        high, high_name, series = max(slowdowns)
        over = sum(x > 1.0 for x, *_ in slowdowns)
        print(f"largest facade/py: {high_name}; {over}/{len(slowdowns)} singles above 1.0")
        record.figure(
            "codec_single_slowdown_max",
            high,
            "x",
            based_on=[f"{series}/facade", f"{series}/py"],
        )
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
