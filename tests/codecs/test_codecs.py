"""Tests of the byte codecs (``txstore.codecs``, backed by ``csrc/txcodecs.c``).

Every expected byte string comes from ``/work/shared/kafka-formats.md`` (Kafka's own test
vectors and the document's hex examples) or from ``tests/oracle.py``, a reference written from
that document. Each codec is checked three ways where the facade has both forms: the
single-item function (mostly pure Python), the batch function (one C call) and the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oracle as o
from txstore import _codecs
from txstore import codecs as c
from txstore.codecs import ValueFormat as VF
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    SerializationError,
    TxStoreError,
)
from txstore.types import Headers

# The facade typed as Any, for calls that pass deliberately wrong argument types.
cx: Any = c

INT_MIN, INT_MAX = o.INT_MIN, o.INT_MAX
LONG_MIN, LONG_MAX = o.LONG_MIN, o.LONG_MAX
FORMATS = list(VF)

# Hypothesis budgets: keep the whole file well under 30 s.
PROPS = settings(max_examples=200, deadline=None)
FEW = settings(max_examples=40, deadline=None)
GARBAGE = settings(max_examples=500, deadline=None)


def h(text: str) -> bytes:
    """Hex with optional spaces, as kafka-formats.md writes it."""
    return bytes.fromhex(text.replace(" ", ""))


def ofmt(fmt: VF) -> o.Fmt:
    return o.Fmt(int(fmt))


def header_pairs(headers: Headers) -> list[tuple[str, bytes | None]]:
    return [(hd.key, hd.value) for hd in headers]


# ============================================================================ strategies

int32s = st.integers(INT_MIN, INT_MAX)
longs = st.integers(LONG_MIN, LONG_MAX)
# Timestamps: the edges Kafka cares about plus anything in range.
timestamps = st.one_of(
    st.sampled_from([LONG_MIN, -1, 0, 1, 1000, LONG_MAX]), longs, st.integers(-(2**20), 2**20)
)
seqs = st.one_of(st.sampled_from([0, 1, INT_MAX, INT_MIN]), int32s)
keys = st.binary(max_size=24)
values = st.binary(max_size=64)
header_keys = st.text(max_size=8)  # hypothesis' text() never contains lone surrogates
header_lists = st.lists(st.tuples(header_keys, st.none() | st.binary(max_size=12)), max_size=5)
formats = st.sampled_from(FORMATS)


@st.composite
def stored_value(draw: st.DrawFn, fmt: VF) -> bytes:
    """A valid stored value of ``fmt`` built by the oracle."""
    hb = o.encode_headers(draw(header_lists))
    return o.pack(ofmt(fmt), draw(values), draw(timestamps), hb)


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding, then truncated, cut, extended or with a byte changed."""
    data = bytearray(draw(base))
    action = draw(st.sampled_from(["keep", "truncate", "flip", "insert", "append", "drop"]))
    if action == "truncate":
        del data[draw(st.integers(0, len(data))) :]
    elif action == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    elif action == "insert":
        data.insert(draw(st.integers(0, len(data))), draw(st.integers(0, 255)))
    elif action == "append":
        data += draw(st.binary(min_size=1, max_size=4))
    elif action == "drop" and data:
        del data[draw(st.integers(0, len(data) - 1))]
    return bytes(data)


def garbage(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a valid encoding slightly damaged."""
    return st.one_of(st.binary(max_size=40), mutated(valid))


varint_streams = st.lists(int32s, max_size=4).map(lambda vs: b"".join(map(o.write_varint, vs)))
header_encodings = header_lists.map(o.encode_headers)
any_stored_value = formats.flatmap(stored_value)


def agree(facade: Callable[[], Any], reference: Callable[[], Any]) -> None:
    """The facade decodes to what the oracle decodes, or raises SerializationError exactly
    when the oracle rejects the input. Any other exception fails the test."""
    try:
        expected = reference()
    except o.OracleError:
        with pytest.raises(SerializationError):
            facade()
        return
    assert facade() == expected


# ============================================================================ §0.1 varints (Kafka)

# ByteUtilsTest.assertVarintSerde
SIGNED_VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "80 01"),
    (-65, "81 01"),
    (8191, "fe 7f"),
    (-8192, "ff 7f"),
    (8192, "80 80 01"),
    (-8193, "81 80 01"),
    (1048575, "fe ff 7f"),
    (-1048576, "ff ff 7f"),
    (1048576, "80 80 80 01"),
    (-1048577, "81 80 80 01"),
    (134217727, "fe ff ff 7f"),
    # self-computed in §0.1
    (2, "04"),
    (127, "fe 01"),
    (128, "80 02"),
    (150, "ac 02"),
    (200, "90 03"),
    (300, "d8 04"),
    (1000, "d0 0f"),
]

# ByteUtilsTest.assertUnsignedVarintSerde
UNSIGNED_VARINTS = [
    (0, "00"),
    (1, "01"),
    (63, "3f"),
    (64, "40"),
    (-1, "ff ff ff ff 0f"),
    (8192, "80 40"),
    (INT_MAX, "ff ff ff ff 07"),
]


@pytest.mark.parametrize(("value", "hexs"), SIGNED_VARINTS, ids=[str(v) for v, _ in SIGNED_VARINTS])
def test_signed_varint_kafka_vector(value, hexs):
    expected = h(hexs)
    assert o.write_varint(value) == expected
    assert c.encode_varint(value) == expected
    assert c.encode_varints([value]) == expected
    assert o.read_varint(expected) == (value, len(expected))
    assert c.decode_varint(expected) == (value, len(expected))
    assert c.decode_varints(expected) == [value]
    # at an offset inside a larger buffer
    assert c.decode_varint(b"\x00" + expected + b"\x00", 1) == (value, 1 + len(expected))


def test_signed_varint_table_as_one_batch():
    vals = [v for v, _ in SIGNED_VARINTS]
    stream = b"".join(h(x) for _, x in SIGNED_VARINTS)
    assert c.encode_varints(vals) == stream
    assert c.decode_varints(stream) == vals
    assert o.read_varints(stream) == vals


@pytest.mark.parametrize(
    ("value", "hexs"), UNSIGNED_VARINTS, ids=[str(v) for v, _ in UNSIGNED_VARINTS]
)
def test_unsigned_varint_kafka_vector(value, hexs):
    expected = h(hexs)
    assert o.write_unsigned_varint(value) == expected
    assert c.encode_unsigned_varint(value) == expected
    assert o.read_unsigned_varint(expected) == (value, len(expected))
    assert c.decode_unsigned_varint(expected) == (value, len(expected))


def test_unsigned_varint_takes_values_up_to_2_pow_32_as_java_bits():
    # 0xFFFFFFFF is the same 32 bits as Java's -1
    assert c.encode_unsigned_varint(0xFFFFFFFF) == h("ff ff ff ff 0f")
    assert c.decode_unsigned_varint(h("ff ff ff ff 0f")) == (-1, 5)


def test_fifth_varint_byte_bits_past_32_are_dropped_like_java():
    # Java's `b << 28` on an int keeps only the low 4 bits of the 5th byte: 7f behaves as 0f.
    assert o.read_unsigned_varint(h("ff ff ff ff 7f")) == (-1, 5)
    assert c.decode_unsigned_varint(h("ff ff ff ff 7f")) == (-1, 5)
    assert c.decode_varint(h("ff ff ff ff 7f")) == o.read_varint(h("ff ff ff ff 7f"))
    assert c.decode_varint(h("ff ff ff ff 7f")) == (INT_MIN, 5)
    assert c.decode_varints(h("ff ff ff ff 7f")) == [INT_MIN]


def test_varint_extremes():
    for v in (INT_MIN, INT_MAX):
        enc = o.write_varint(v)
        assert len(enc) == 5
        assert c.encode_varint(v) == c.encode_varints([v]) == enc
        assert c.decode_varint(enc) == (v, 5)
        assert c.decode_varints(enc) == [v]
    assert c.encode_varint(INT_MAX) == h("fe ff ff ff 0f")
    assert c.encode_varint(INT_MIN) == h("ff ff ff ff 0f")


def test_non_canonical_varint_is_accepted_like_java():
    # Kafka's reader does not insist on the shortest form: 80 00 is 0.
    assert o.read_varint(h("80 00")) == (0, 2)
    assert c.decode_varint(h("80 00")) == (0, 2)
    assert c.decode_varints(h("80 00 81 00")) == [0, -1]


# ============================================================================ §6 murmur2 (Kafka)

# UtilsTest.testMurmur2
MURMUR2_KAFKA = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]

# §6 extra self-computed values: (input, murmur2, toPositive, {n: partition})
MURMUR2_EXTRA = [
    (b"", 275646681, 275646681, (0, 1, 3, 9, 81)),
    (b"key", -1079937367, 1067546281, (1, 1, 1, 1, 81)),
    (b"a", -1563381124, 584102524, (1, 0, 4, 4, 24)),
    (b"hello", 2132663229, 2132663229, (0, 1, 3, 9, 29)),
    (h("00000001"), -173113808, 1974369840, (0, 0, 0, 0, 40)),
]
PARTITION_COUNTS = (3, 4, 6, 12, 100)


@pytest.mark.parametrize(("data", "expected"), MURMUR2_KAFKA, ids=lambda x: repr(x)[:20])
def test_murmur2_kafka_vector(data, expected):
    assert o.murmur2(data) == expected
    assert c.murmur2(data) == expected
    # the batch partitioner hashes in C too: with INT_MAX partitions it reveals toPositive(h)
    assert c.partitions_for_keys([data], INT_MAX) == [(expected & 0x7FFFFFFF) % INT_MAX]


@pytest.mark.parametrize(
    ("data", "hash_", "positive", "partitions"), MURMUR2_EXTRA, ids=lambda x: repr(x)[:12]
)
def test_murmur2_and_partition_extra_table(data, hash_, positive, partitions):
    assert o.murmur2(data) == c.murmur2(data) == hash_
    assert o.to_positive(hash_) == positive
    assert c.partitions_for_keys([data], INT_MAX) == [positive % INT_MAX]
    for n, expected in zip(PARTITION_COUNTS, partitions, strict=True):
        assert o.partition_for_key(data, n) == expected
        assert c.partition_for_key(data, n) == expected
        assert c.partitions_for_keys([data], n) == [expected]


def test_partition_table_as_one_batch():
    data = [row[0] for row in MURMUR2_EXTRA]
    for i, n in enumerate(PARTITION_COUNTS):
        assert c.partitions_for_keys(data, n) == [row[3][i] for row in MURMUR2_EXTRA]


# ============================================================================ §1.2 headers examples

HEADER_EXAMPLES: list[tuple[list[tuple[str, bytes | None]] | None, str]] = [
    ([("key1", b"value1")], "02 08 6b657931 0c 76616c756531"),
    ([("a", None), ("bc", h("0102"))], "04 02 61 01 04 6263 04 0102"),
    ([("k", b"v")], "02 02 6b 02 76"),  # from the §1.3 example
    ([("a", None)], "02 02 61 01"),  # from the §1.4 example
    ([("", b"")], "02 00 00"),  # empty key, empty (not null) value: varint(0), no bytes
    ([], ""),  # no headers: zero bytes, NOT varint(0)
    (None, ""),
]


@pytest.mark.parametrize(("headers", "hexs"), HEADER_EXAMPLES)
def test_headers_example(headers, hexs):
    expected = h(hexs)
    assert o.encode_headers(headers) == expected
    assert c.encode_headers(headers) == expected
    assert c.encode_headers(Headers(headers)) == expected
    assert o.decode_headers(expected) == (headers or [])
    assert c.decode_headers(expected) == Headers(headers)


def test_headers_explicit_zero_count_means_no_headers():
    # The writer never emits 00, but a reader must accept it (§1.2).
    assert o.decode_headers(b"\x00") == []
    assert c.decode_headers(b"\x00") == Headers()
    assert c.decode_headers(b"") == Headers()
    assert c.decode_headers(None) == Headers()  # type: ignore[arg-type]


# ======================================================================== §1.3, §1.4, §2.1 values

# (format, value, timestamp or None, headers, stored hex)
VALUE_EXAMPLES: list[tuple[VF, bytes, int | None, o.HeaderList, str]] = [
    (  # §1.2: headers [("a", null), ("bc", 01 02)] as a ValueTimestampHeaders
        VF.HEADERS,
        b"x",
        5,
        [("a", None), ("bc", h("0102"))],
        "14 0402610104626304 0102 0000000000000005 78",
    ),
    (VF.HEADERS, b"v", 100, [], "00 0000000000000064 76"),  # §1.3
    (VF.HEADERS, b"val", 1000, [("k", b"v")], "0a 02 02 6b 02 76 00000000000003e8 76616c"),
    (
        VF.HEADERS,
        b"test-value",
        123456789,
        [("key1", b"value1")],
        "1a 02086b6579310c76616c756531 00000000075bcd15 746573742d76616c7565",
    ),
    (VF.PLAIN_HEADERS, h("00000005"), None, [("a", None)], "08 02 02 61 01 00000005"),  # §1.4
    (VF.TIMESTAMPED, b"val", 1000, [], "00000000000003e8 76616c"),  # §2.1
    (VF.TIMESTAMPED, b"val", -1, [], "ffffffffffffffff 76616c"),  # §2.1
    (VF.PLAIN, b"val", None, [], "76616c"),
    (VF.PLAIN_HEADERS, b"v", None, [], "00 76"),
]


@pytest.mark.parametrize(
    ("fmt", "value", "ts", "headers", "hexs"),
    VALUE_EXAMPLES,
    ids=[f"{e[0].name}-{e[4][:12]}" for e in VALUE_EXAMPLES],
)
def test_value_example(fmt, value, ts, headers, hexs):
    expected = h(hexs)
    hb = c.encode_headers(headers)
    assert hb == o.encode_headers(headers)
    record_ts = -1 if ts is None else ts
    # encode: oracle, single, record converter single and batch
    assert o.pack(ofmt(fmt), value, record_ts, hb) == expected
    assert c.pack_value(fmt, value, record_ts, hb) == expected
    assert c.record_to_value(fmt, value, record_ts, hb) == expected
    assert c.records_to_values(fmt, [value], [record_ts], [hb]) == [expected]
    # decode: oracle, single, batch
    parts = (value, ts, hb)
    assert o.split(ofmt(fmt), expected) == parts
    assert c.split_value(fmt, expected) == parts
    assert c.split_values(fmt, [expected]) == [parts]
    # the embedded headers decode back
    assert c.decode_headers(c.split_value(fmt, expected)[2]) == Headers(headers)


# §1.6 HeadersBytesStore and §2.4 TimestampedBytesStore conversions
CONVERSION_EXAMPLES = [
    # convertFromPlainToHeaderFormat: 00 || L(-1) || v
    (VF.PLAIN, VF.HEADERS, "76", "00 ffffffffffffffff 76"),
    # convertToHeaderFormat on a timestamped value: 00 || [ts][value]
    (VF.TIMESTAMPED, VF.HEADERS, "00000000000003e8 76616c", "00 00000000000003e8 76616c"),
    # convertToHeaderFormat on a plain window value: [value] -> [00][value]
    (VF.PLAIN, VF.PLAIN_HEADERS, "76616c", "00 76616c"),
    # convertToTimestampedFormat: L(NO_TIMESTAMP) || plain
    (VF.PLAIN, VF.TIMESTAMPED, "76616c", "ffffffffffffffff 76616c"),
    # rawValue: strip the 8-byte timestamp
    (VF.TIMESTAMPED, VF.PLAIN, "00000000000003e8 76616c", "76616c"),
    # rawAggregation: strip the headers prefix
    (VF.PLAIN_HEADERS, VF.PLAIN, "08 02 02 61 01 00000005", "00000005"),
    (
        VF.HEADERS,
        VF.TIMESTAMPED,
        "0a 02026b0276 00000000000003e8 76616c",
        "00000000000003e8 76616c",
    ),
    (VF.HEADERS, VF.PLAIN_HEADERS, "0a 02026b0276 00000000000003e8 76616c", "0a 02026b0276 76616c"),
    (VF.PLAIN_HEADERS, VF.HEADERS, "0a 02026b0276 76616c", "0a 02026b0276 ffffffffffffffff 76616c"),
    (VF.HEADERS, VF.HEADERS, "00 0000000000000064 76", "00 0000000000000064 76"),
]


@pytest.mark.parametrize(
    ("src", "dst", "raw", "hexs"),
    CONVERSION_EXAMPLES,
    ids=[f"{s.name}-{d.name}" for s, d, _, _ in CONVERSION_EXAMPLES],
)
def test_conversion_example(src, dst, raw, hexs):
    expected = h(hexs)
    assert o.convert(h(raw), ofmt(src), ofmt(dst)) == expected
    assert c.convert_value(h(raw), src, dst) == expected
    assert c.convert_values([h(raw), None], src, dst) == [expected, None]
    assert c.convert_value(None, src, dst) is None


def test_record_converters_from_the_changelog():
    # §2.4 rawValueToTimestampedValue: L(record.timestamp) || value
    assert c.records_to_values(VF.TIMESTAMPED, [b"val", None], [1000, 7], [b"", b""]) == [
        h("00000000000003e8 76616c"),
        None,
    ]
    # §1.7 rawValueToHeadersValue: varint(len(H)) H L(record.timestamp) value
    hb = h("02 02 6b 02 76")
    expected = h("0a 02026b0276 00000000000003e8 76616c")
    assert o.record_to_value(o.Fmt.HEADERS, b"val", 1000, hb) == expected
    assert c.record_to_value(VF.HEADERS, b"val", 1000, hb) == expected
    assert c.records_to_values(VF.HEADERS, [b"val"], [1000], [hb]) == [expected]
    # a null value is a delete and stays null in every format
    for fmt in FORMATS:
        assert c.record_to_value(fmt, None, 1000, hb) is None
        assert c.records_to_values(fmt, [None], [1000], [hb]) == [None]
        assert o.record_to_value(ofmt(fmt), None, 1000, hb) is None
    # identity for the plain format: the record value as is
    assert c.records_to_values(VF.PLAIN, [b"val"], [1000], [hb]) == [b"val"]


# ============================================================================ §3.1 window keys

WINDOW_KEY_EXAMPLES = [
    (b"a", 1000, 0, "61 00000000000003e8 00000000"),
    (b"a", 1000, 1, "61 00000000000003e8 00000001"),  # 1st put with retainDuplicates
    (h("00000001"), 60000, 0, "00000001 000000000000ea60 00000000"),  # IntegerSerializer key
    (b"key", 1700000000000, 7, "6b6579 0000018bcfe56800 00000007"),
]


@pytest.mark.parametrize(("key", "ts", "seq", "hexs"), WINDOW_KEY_EXAMPLES)
def test_window_key_example(key, ts, seq, hexs):
    expected = h(hexs)
    assert o.window_key(key, ts, seq) == expected
    assert c.window_key(key, ts, seq) == expected
    assert c.window_keys([key], [ts], [seq]) == [expected]
    assert o.extract_window_key(expected) == (key, ts, seq)
    assert c.extract_window_key(expected) == (key, ts, seq)
    assert c.extract_window_keys([expected]) == [(key, ts, seq)]


def test_window_keys_default_seq_is_zero():
    assert c.window_key(b"a", 1000) == h("61 00000000000003e8 00000000")
    assert c.window_keys([b"a"], [1000]) == [h("61 00000000000003e8 00000000")]


# (oracle function, facade function, key, time, expected hex, batch equivalent or None)
WINDOW_BOUND_EXAMPLES: list[tuple[str, str, bytes, int, str, tuple[int, int] | None]] = [
    ("window_lower_range_fixed", "lowerRangeFixedSize(a, -5)", b"a", -5,
     "61 0000000000000000 00000000", (0, 0)),
    ("window_upper_range_fixed", "upperRangeFixedSize(a, 1000)", b"a", 1000,
     "61 00000000000003e8 7fffffff", (1000, INT_MAX)),
    ("window_lower_range", "lowerRange(ab, any)", b"ab", 123456,
     "6162 000000000000000000000000", (0, 0)),
    ("window_upper_range", "upperRange(b, 1000) keeps the key: first ts byte is 00", b"b", 1000,
     "62 00000000000003e8 7fffffff", None),
    ("window_upper_range", "upperRange(ab, MAX) truncates: 62 < 7f", b"ab", LONG_MAX,
     "61 7fffffffffffffff 7fffffff", None),
    ("window_upper_range", "upperRange(0a0b0c, MAX)", h("0a0b0c"), LONG_MAX,
     "0a 7fffffffffffffff 7fffffff", None),
    ("window_upper_range", "upperRange(0a8f9f, MAX) keeps bytes >= 7f", h("0a8f9f"), LONG_MAX,
     "0a8f9f 7fffffffffffffff 7fffffff", None),
    ("window_upper_range", "upperRange(0c0c09, 0AFF..) stops at 09", h("0c0c09"),
     0x0AFFFFFFFFFFFFFF, "0c0c 0affffffffffffff 7fffffff", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fn", "what", "key", "time", "hexs", "batch"),
    WINDOW_BOUND_EXAMPLES,
    ids=[e[1] for e in WINDOW_BOUND_EXAMPLES],
)
def test_window_bound_example(fn, what, key, time, hexs, batch):
    expected = h(hexs)
    assert getattr(o, fn)(key, time) == expected
    assert getattr(c, fn)(key, time) == expected
    if batch is not None:
        # the bound is a plain store key, so the batch encoder must give the same bytes
        ts, seq = batch
        assert c.window_keys([key], [ts], [seq]) == [expected]
    else:
        # upperRange has no batch form; check the OrderedBytes primitive directly
        suffix = o.L(time) + o.I(INT_MAX)
        assert c.ordered_upper_range(key, suffix) == o.ordered_upper_range(key, suffix)


# ============================================================================ §3.3 session keys

SESSION_KEY_EXAMPLES = [
    (b"a", 10, 20, "61 0000000000000014 000000000000000a"),
    (b"a", 0, 0, "61 0000000000000000 0000000000000000"),
    (b"key", 1000, 5000, "6b6579 0000000000001388 00000000000003e8"),
]


@pytest.mark.parametrize(("key", "start", "end", "hexs"), SESSION_KEY_EXAMPLES)
def test_session_key_example(key, start, end, hexs):
    expected = h(hexs)
    assert o.session_key(key, start, end) == expected
    assert c.session_key(key, start, end) == expected
    assert c.session_keys([key], [start], [end]) == [expected]
    assert o.extract_session_key(expected) == (key, start, end)
    assert c.extract_session_key(expected) == (key, start, end)
    assert c.extract_session_keys([expected]) == [(key, start, end)]


# (function, description, key, time, expected hex, batch (start, end) or None)
SESSION_BOUND_EXAMPLES: list[tuple[str, str, bytes, int, str, tuple[int, int] | None]] = [
    ("session_lower_range_fixed", "lowerRangeFixedSize(a, 100)", b"a", 100,
     "61 0000000000000064 0000000000000000", (0, 100)),
    ("session_lower_range_fixed", "lowerRangeFixedSize(a, -3) clamps to 0", b"a", -3,
     "61 0000000000000000 0000000000000000", (0, 0)),
    ("session_upper_range_fixed", "upperRangeFixedSize(a, 500)", b"a", 500,
     "61 7fffffffffffffff 00000000000001f4", (500, LONG_MAX)),
    ("session_lower_range", "lowerRange(ab, any)", b"ab", 777,
     "6162 00000000000000000000000000000000", (0, 0)),
    ("session_upper_range", "upperRange(ab, 500) truncated", b"ab", 500,
     "61 7fffffffffffffff 00000000000001f4", None),
    ("session_upper_range", "upperRange(b, 500)", b"b", 500,
     "62 7fffffffffffffff 00000000000001f4", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fn", "what", "key", "time", "hexs", "batch"),
    SESSION_BOUND_EXAMPLES,
    ids=[e[1] for e in SESSION_BOUND_EXAMPLES],
)
def test_session_bound_example(fn, what, key, time, hexs, batch):
    expected = h(hexs)
    assert getattr(o, fn)(key, time) == expected
    assert getattr(c, fn)(key, time) == expected
    if batch is not None:
        start, end = batch
        assert c.session_keys([key], [start], [end]) == [expected]
    else:
        suffix = o.L(LONG_MAX) + o.L(time)
        assert c.ordered_upper_range(key, suffix) == o.ordered_upper_range(key, suffix)


# ============================================================================ §5 windowed serdes

TIME_WINDOWED_EXAMPLES = [
    (b"a", 1000, "61 00000000000003e8"),
    (h("00000005"), 0, "00000005 0000000000000000"),  # int key 5, start 0
]


@pytest.mark.parametrize(("key", "start", "hexs"), TIME_WINDOWED_EXAMPLES)
def test_time_windowed_key_example(key, start, hexs):
    # There is no batch form of the topic key; the changelog key (window_keys) differs from it
    # only by the 4-byte seqnum, which is what a reader must strip with forChangelog(true).
    expected = h(hexs)
    assert o.time_windowed_key(key, start) == expected
    assert c.time_windowed_key(key, start) == expected
    assert c.window_keys([key], [start], [0]) == [expected + bytes(4)]
    assert o.parse_time_windowed_key(expected) == (key, start)
    assert c.parse_time_windowed_key(expected) == (key, start)


def test_session_windowed_topic_key_is_the_session_store_key():
    # §5: SessionWindowedSerializer = SessionKeySchema.toBinary
    assert c.session_key(b"a", 10, 20) == h("61 0000000000000014 000000000000000a")


# ============================================================================ §4 segment ids

SEGMENT_EXAMPLES = [
    (0, 60000, 0),
    (59999, 60000, 0),
    (60000, 60000, 1),
    (180000 - 120000, 60000, 1),  # testSegmentMaintenance: minLive = seg(60000) = 1
    (300000, 60000, 5),
    (6 * 60000, 60000, 6),  # testInitialLoading
    (6 * 60000 - 120000, 60000, 4),
    (270000, 30000, 9),
    (-1, 60000, 0),  # truncation toward zero, not floor (-1)
    (-59999, 60000, 0),
    (-60000, 60000, -1),
    (-60001, 60000, -1),
    (-120001, 60000, -2),
    (LONG_MIN, 1, LONG_MIN),
    (LONG_MAX, 1, LONG_MAX),
    (LONG_MIN, LONG_MAX, -1),
    (LONG_MAX, LONG_MAX, 1),
    (LONG_MIN, 7, -1317624576693539401),  # Java: Long.MIN_VALUE / 7
]


@pytest.mark.parametrize(("ts", "interval", "expected"), SEGMENT_EXAMPLES)
def test_segment_id_example(ts, interval, expected):
    assert o.segment_id(ts, interval) == expected
    assert c.segment_id(ts, interval) == expected
    assert c.segment_ids([ts], interval) == [expected]


# ============================================================================ properties: encoders


@PROPS
@given(int32s)
def test_varint_single_batch_oracle(v):
    enc = o.write_varint(v)
    assert c.encode_varint(v) == enc
    assert c.encode_varints([v]) == enc
    assert c.decode_varint(enc) == (v, len(enc))
    assert c.decode_varints(enc) == [v]


@PROPS
@given(st.lists(int32s, max_size=30))
def test_varint_stream_single_batch_oracle(vs):
    stream = b"".join(o.write_varint(v) for v in vs)
    assert c.encode_varints(vs) == stream
    assert c.decode_varints(stream) == vs
    pos, decoded = 0, []
    while pos < len(stream):
        v, pos = c.decode_varint(stream, pos)
        decoded.append(v)
    assert decoded == vs


@PROPS
@given(st.integers(INT_MIN, 0xFFFFFFFF))
def test_unsigned_varint_matches_oracle(v):
    enc = o.write_unsigned_varint(v)
    assert c.encode_unsigned_varint(v) == enc
    assert c.decode_unsigned_varint(enc) == (o.to_int32(v), len(enc))
    assert o.read_unsigned_varint(enc) == (o.to_int32(v), len(enc))


@PROPS
@given(header_lists)
def test_headers_round_trip(headers):
    enc = o.encode_headers(headers)
    assert c.encode_headers(headers) == enc
    assert c.encode_headers(Headers(headers)) == enc
    assert c.decode_headers(enc) == Headers(headers)
    assert o.decode_headers(enc) == headers


@PROPS
@given(formats, values, timestamps, header_lists)
def test_pack_split_single_batch_oracle(fmt, value, ts, headers):
    hb = o.encode_headers(headers)
    packed = o.pack(ofmt(fmt), value, ts, hb)
    assert c.pack_value(fmt, value, ts, hb) == packed
    assert c.record_to_value(fmt, value, ts, hb) == packed
    assert c.records_to_values(fmt, [value], [ts], [hb]) == [packed]
    parts = (value, ts if fmt.has_timestamp else None, hb if fmt.has_headers else b"")
    assert o.split(ofmt(fmt), packed) == parts
    assert c.split_value(fmt, packed) == parts
    assert c.split_values(fmt, [packed]) == [parts]


@FEW
@given(
    formats,
    st.lists(st.tuples(st.none() | values, timestamps, header_lists), max_size=12),
)
def test_records_to_values_batch_with_deletes(fmt, records):
    vals = [v for v, _, _ in records]
    tss = [t for _, t, _ in records]
    hbs = [o.encode_headers(hl) for _, _, hl in records]
    expected = [
        o.record_to_value(ofmt(fmt), v, t, hb) for v, t, hb in zip(vals, tss, hbs, strict=True)
    ]
    assert c.records_to_values(fmt, vals, tss, hbs) == expected
    assert [
        c.record_to_value(fmt, v, t, hb) for v, t, hb in zip(vals, tss, hbs, strict=True)
    ] == expected


@FEW
@given(formats, st.lists(st.none() | any_stored_value, max_size=10))
def test_split_values_batch_matches_single(fmt, raws):
    # build valid values of `fmt` (the drawn ones may be of another format: re-pack them)
    items = [None if r is None else o.pack(ofmt(fmt), r, 5, b"") for r in raws]
    expected = [None if r is None else o.split(ofmt(fmt), r) for r in items]
    assert c.split_values(fmt, items) == expected
    assert [None if r is None else c.split_value(fmt, r) for r in items] == expected


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_convert_every_direction_single_batch_oracle(src, dst, data):
    raws = data.draw(st.lists(st.none() | stored_value(src), max_size=8))
    expected = [o.convert(r, ofmt(src), ofmt(dst)) for r in raws]
    assert [c.convert_value(r, src, dst) for r in raws] == expected
    convert = c.value_converter(src, dst)
    assert [convert(r) for r in raws] == expected
    assert c.convert_values(raws, src, dst) == expected
    # and the converted values are valid values of dst
    for r, out in zip(raws, expected, strict=True):
        if r is None:
            continue
        assert out is not None
        v_src, ts_src, h_src = o.split(ofmt(src), r)
        v_dst, ts_dst, h_dst = c.split_value(dst, out)
        assert v_dst == v_src
        if dst.has_timestamp:
            assert ts_dst == (-1 if ts_src is None else ts_src)
        if dst.has_headers:
            assert h_dst == h_src


def _fields(fmt: VF) -> set[str]:
    return {name for name, has in (("ts", fmt.has_timestamp), ("headers", fmt.has_headers)) if has}


@PROPS
@given(formats, formats, st.data())
def test_convert_round_trip_loses_nothing_when_target_has_the_fields(a, b, data):
    raw = data.draw(stored_value(a))
    there = c.convert_value(raw, a, b)
    assert there is not None
    back = c.convert_value(there, b, a)
    assert c.convert_values(c.convert_values([raw], a, b), b, a) == [back]
    if _fields(a) <= _fields(b):
        # e.g. PLAIN -> HEADERS -> PLAIN, TIMESTAMPED -> HEADERS -> TIMESTAMPED
        assert back == raw
    else:
        # the dropped fields come back as the defaults: ts -1, empty headers
        value, ts, hb = o.split(ofmt(a), raw)
        ts_back = ts if b.has_timestamp and ts is not None else -1
        hb_back = hb if b.has_headers else b""
        assert back == o.pack(ofmt(a), value, ts_back, hb_back)


@PROPS
@given(keys, timestamps, seqs)
def test_window_key_single_batch_oracle(key, ts, seq):
    enc = o.window_key(key, ts, seq)
    assert c.window_key(key, ts, seq) == enc
    assert c.window_keys([key], [ts], [seq]) == [enc]
    assert c.extract_window_key(enc) == (key, ts, seq)
    assert c.extract_window_keys([enc]) == [(key, ts, seq)]


@FEW
@given(st.lists(st.tuples(keys, timestamps, seqs), max_size=20))
def test_window_keys_batch(items):
    ks, ts, sq = [k for k, _, _ in items], [t for _, t, _ in items], [s for _, _, s in items]
    expected = [o.window_key(*it) for it in items]
    assert c.window_keys(ks, ts, sq) == expected
    assert [c.window_key(*it) for it in items] == expected
    assert c.extract_window_keys(expected) == items
    assert [c.extract_window_key(e) for e in expected] == items


@PROPS
@given(keys, timestamps, timestamps)
def test_session_key_single_batch_oracle(key, start, end):
    enc = o.session_key(key, start, end)
    assert c.session_key(key, start, end) == enc
    assert c.session_keys([key], [start], [end]) == [enc]
    assert c.extract_session_key(enc) == (key, start, end)
    assert c.extract_session_keys([enc]) == [(key, start, end)]


@FEW
@given(st.lists(st.tuples(keys, timestamps, timestamps), max_size=20))
def test_session_keys_batch(items):
    ks, ss, es = [k for k, _, _ in items], [s for _, s, _ in items], [e for _, _, e in items]
    expected = [o.session_key(*it) for it in items]
    assert c.session_keys(ks, ss, es) == expected
    assert c.extract_session_keys(expected) == items
    assert [c.extract_session_key(e) for e in expected] == items


@PROPS
@given(keys, timestamps)
def test_time_windowed_key_matches_oracle(key, start):
    enc = o.time_windowed_key(key, start)
    assert c.time_windowed_key(key, start) == enc
    assert c.parse_time_windowed_key(enc) == (key, start)
    assert o.parse_time_windowed_key(enc) == (key, start)


BOUNDS = [
    "window_lower_range_fixed",
    "window_upper_range_fixed",
    "window_lower_range",
    "window_upper_range",
    "session_lower_range_fixed",
    "session_upper_range_fixed",
    "session_lower_range",
    "session_upper_range",
]


@pytest.mark.parametrize("fn", BOUNDS)
@settings(max_examples=60, deadline=None)
@given(key=keys, time=timestamps)
def test_range_bound_matches_oracle(fn, key, time):
    assert getattr(c, fn)(key, time) == getattr(o, fn)(key, time)


@PROPS
@given(keys, timestamps)
def test_fixed_bounds_are_store_keys(key, time):
    assert c.window_keys([key, key], [max(0, time), time], [0, INT_MAX]) == [
        c.window_lower_range_fixed(key, time),
        c.window_upper_range_fixed(key, time),
    ]
    assert c.session_keys([key, key], [0, time], [max(0, time), LONG_MAX]) == [
        c.session_lower_range_fixed(key, time),
        c.session_upper_range_fixed(key, time),
    ]


@PROPS
@given(keys, st.binary(min_size=1, max_size=16))
def test_ordered_upper_range_matches_oracle(key, suffix):
    assert c.ordered_upper_range(key, suffix) == o.ordered_upper_range(key, suffix)


@PROPS
@given(keys, timestamps, seqs, keys)
def test_window_upper_range_bounds_every_key_with_that_prefix(key, to, seq, tail):
    # What upperRange is for: any store key key||tail with time <= to sorts <= the bound.
    bound = c.window_upper_range(key, to)
    if seq >= 0 and to >= 0:
        for ts in (0, to):
            assert c.window_key(key, ts, seq) <= bound
    assert c.window_lower_range(key, to) <= c.window_key(key + tail, max(0, to), 0)


@PROPS
@given(timestamps, st.one_of(st.integers(1, 100), st.integers(1, LONG_MAX)))
def test_segment_id_matches_oracle(ts, interval):
    expected = o.segment_id(ts, interval)
    assert c.segment_id(ts, interval) == expected
    assert c.segment_ids([ts], interval) == [expected]


@FEW
@given(st.lists(timestamps, max_size=30), st.integers(1, 10**6))
def test_segment_ids_batch(tss, interval):
    assert c.segment_ids(tss, interval) == [o.segment_id(t, interval) for t in tss]


@PROPS
@given(st.binary(max_size=80), st.integers(1, 1000))
def test_murmur2_and_partition_match_oracle(data, n):
    assert c.murmur2(data) == o.murmur2(data)
    expected = o.partition_for_key(data, n)
    assert c.partition_for_key(data, n) == expected
    assert c.partitions_for_keys([data], n) == [expected]


@FEW
@given(st.lists(st.binary(max_size=20), max_size=30), st.integers(1, INT_MAX))
def test_partitions_for_keys_batch(ks, n):
    assert c.partitions_for_keys(ks, n) == [o.partition_for_key(k, n) for k in ks]


# ============================================================================ garbage into decoders


@GARBAGE
@given(garbage(varint_streams), st.integers(0, 6))
def test_garbage_decode_varint(data, offset):
    agree(lambda: c.decode_varint(data, offset), lambda: o.read_varint(data, offset))
    agree(
        lambda: c.decode_unsigned_varint(data, offset),
        lambda: o.read_unsigned_varint(data, offset),
    )


@GARBAGE
@given(garbage(varint_streams))
def test_garbage_decode_varints(data):
    agree(lambda: c.decode_varints(data), lambda: o.read_varints(data))


@GARBAGE
@given(garbage(header_encodings))
def test_garbage_decode_headers(data):
    agree(lambda: header_pairs(c.decode_headers(data)), lambda: o.decode_headers(data))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_garbage_split_value(fmt, data):
    raw = data.draw(garbage(stored_value(fmt)))
    agree(lambda: c.split_value(fmt, raw), lambda: o.split(ofmt(fmt), raw))
    agree(lambda: c.split_values(fmt, [raw]), lambda: [o.split(ofmt(fmt), raw)])


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_garbage_split_values_batch(fmt, data):
    raws = data.draw(st.lists(st.none() | garbage(stored_value(fmt)), max_size=5))
    agree(
        lambda: c.split_values(fmt, raws),
        lambda: [None if r is None else o.split(ofmt(fmt), r) for r in raws],
    )


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_garbage_convert(src, dst, data):
    raws = data.draw(st.lists(st.none() | garbage(stored_value(src)), max_size=4))
    agree(
        lambda: c.convert_values(raws, src, dst),
        lambda: [o.convert(r, ofmt(src), ofmt(dst)) for r in raws],
    )
    for r in raws:
        _agree_convert_one(r, src, dst)


def _agree_convert_one(raw: bytes | None, src: VF, dst: VF) -> None:
    agree(lambda: c.convert_value(raw, src, dst), lambda: o.convert(raw, ofmt(src), ofmt(dst)))
    convert = c.value_converter(src, dst)
    agree(lambda: convert(raw), lambda: o.convert(raw, ofmt(src), ofmt(dst)))


# value_converter: the conversion of one pair of formats, resolved once. Its fast paths read a
# one- or two-byte headers size inline; everything else goes through split_value + pack_value.


@pytest.mark.parametrize("src", [VF.HEADERS, VF.PLAIN_HEADERS], ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
def test_a_non_canonical_headers_size_is_written_back_canonically(src: VF, dst: VF) -> None:
    """``80 00`` is a two-byte varint of 0. The single conversion copied it into the output,
    where the batch conversion (and the oracle) write ``00``: found by Hypothesis."""
    raw = b"\x80\x00" + (b"\x00" * 8 if src == VF.HEADERS else b"") + b"value"
    expected = o.convert(raw, ofmt(src), ofmt(dst))
    assert c.convert_value(raw, src, dst) == expected
    assert c.convert_values([raw], src, dst) == [expected]
    if dst in (VF.HEADERS, VF.PLAIN_HEADERS):
        assert expected is not None and expected[:1] == b"\x00"


def test_value_converter_is_resolved_once_per_pair():
    for src in FORMATS:
        for dst in FORMATS:
            convert = c.value_converter(src, dst)
            assert c.value_converter(int(src), int(dst)) is convert  # type: ignore[arg-type]
            assert convert(None) is None


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("hsize", [0, 63, 64, 100, 8191, 8192, 20000])
def test_value_converter_headers_size_edges(src, dst, hsize):
    # one header whose value fills the headers section to exactly hsize bytes (0: none)
    hb = b"" if hsize == 0 else o.encode_headers([("k", b"x" * (hsize - 4 - (hsize > 67)))])
    if hsize in (8192, 20000):  # three-byte value length: let the size fall where it falls
        hb = o.encode_headers([("k", b"x" * hsize)])
    else:
        assert len(hb) == hsize
    raw = o.pack(ofmt(src), b"value", 1234, hb)
    expected = o.convert(raw, ofmt(src), ofmt(dst))
    assert c.value_converter(src, dst)(raw) == expected
    assert c.convert_value(raw, src, dst) == expected
    assert c.split_value(src, raw) == o.split(ofmt(src), raw)
    if src.has_headers and len(raw) > 2:  # cut off: one byte short of a whole value
        agree(lambda: c.split_value(src, raw[:-1]), lambda: o.split(ofmt(src), raw[:-1]))


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
def test_value_converter_buffer_types_give_bytes(src, dst):
    raw = o.pack(ofmt(src), b"value", 1234, o.encode_headers([("k", b"v")]))
    expected = o.convert(raw, ofmt(src), ofmt(dst))
    for buf in (bytearray(raw), memoryview(raw)):
        out = c.value_converter(src, dst)(buf)  # type: ignore[arg-type]
        assert type(out) is bytes
        assert out == expected


BAD_STORED: list[tuple[str, VF, bytes]] = [
    ("TIMESTAMPED: 7 bytes", VF.TIMESTAMPED, h("00000000000003")),
    ("TIMESTAMPED: empty", VF.TIMESTAMPED, b""),
    ("HEADERS: empty", VF.HEADERS, b""),
    ("HEADERS: timestamp cut short", VF.HEADERS, h("00 00000000000003")),
    ("HEADERS: negative size", VF.HEADERS, h("01 0000000000000000")),
    ("HEADERS: two-byte negative size", VF.HEADERS, h("8101") + bytes(200)),
    ("HEADERS: size past the end", VF.HEADERS, h("04 02") + bytes(8)),
    ("HEADERS: two-byte size past the end", VF.HEADERS, h("8001") + bytes(70)),
    ("HEADERS: varint over 5 bytes", VF.HEADERS, h("ffffffffff01") + bytes(8)),
    ("PLAIN_HEADERS: empty", VF.PLAIN_HEADERS, b""),
    ("PLAIN_HEADERS: negative size", VF.PLAIN_HEADERS, h("03")),
    ("PLAIN_HEADERS: size past the end", VF.PLAIN_HEADERS, h("0a 0000")),
    ("PLAIN_HEADERS: truncated varint", VF.PLAIN_HEADERS, h("80")),
]


@pytest.mark.parametrize(("why", "src", "raw"), BAD_STORED, ids=[w for w, _, _ in BAD_STORED])
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
def test_value_converter_bad_value_is_a_serialization_error(why, src, raw, dst):
    with pytest.raises(o.OracleError):
        o.convert(raw, ofmt(src), ofmt(dst))
    with pytest.raises(SerializationError):
        c.value_converter(src, dst)(raw)
    with pytest.raises(SerializationError):
        c.convert_value(raw, src, dst)


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("raw", ["text", 12, 1.5, [0] * 12, object()], ids=type)
def test_value_converter_wrong_type_is_an_invalid_type_error(src, dst, raw):
    with pytest.raises(InvalidTypeError):
        c.value_converter(src, dst)(raw)


@pytest.mark.parametrize(("src", "dst"), [(7, VF.PLAIN), (VF.PLAIN, 4), (-1, -1), ("PLAIN", 0)])
def test_value_converter_unknown_format_is_an_invalid_argument_error(src, dst):
    with pytest.raises(InvalidArgumentError):
        c.value_converter(src, dst)


window_key_encodings = st.builds(o.window_key, keys, timestamps, seqs)
session_key_encodings = st.builds(o.session_key, keys, timestamps, timestamps)
time_windowed_encodings = st.builds(o.time_windowed_key, keys, timestamps)


@GARBAGE
@given(st.lists(garbage(window_key_encodings), min_size=1, max_size=3))
def test_garbage_extract_window_keys(raws):
    agree(lambda: c.extract_window_key(raws[0]), lambda: o.extract_window_key(raws[0]))
    agree(lambda: c.extract_window_keys(raws), lambda: [o.extract_window_key(r) for r in raws])


@GARBAGE
@given(st.lists(garbage(session_key_encodings), min_size=1, max_size=3))
def test_garbage_extract_session_keys(raws):
    agree(lambda: c.extract_session_key(raws[0]), lambda: o.extract_session_key(raws[0]))
    agree(lambda: c.extract_session_keys(raws), lambda: [o.extract_session_key(r) for r in raws])


@GARBAGE
@given(garbage(time_windowed_encodings))
def test_garbage_parse_time_windowed_key(raw):
    agree(lambda: c.parse_time_windowed_key(raw), lambda: o.parse_time_windowed_key(raw))


# ============================================================================ bad input


def test_error_classes_also_derive_from_builtins():
    assert issubclass(SerializationError, ValueError)
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidTypeError, TypeError)
    for cls in (SerializationError, InvalidArgumentError, InvalidTypeError):
        assert issubclass(cls, TxStoreError)


TRUNCATED_VARINTS = ["", "80", "ff ff", "80 80 80 80", "ff ff ff ff"]


@pytest.mark.parametrize("hexs", TRUNCATED_VARINTS)
def test_truncated_varint_is_a_serialization_error(hexs):
    # the last byte still has the continuation bit (or there is no byte at all)
    data = h(hexs)
    with pytest.raises(o.OracleError):
        o.read_varint(data)
    with pytest.raises(SerializationError):
        c.decode_varint(data)
    with pytest.raises(SerializationError):
        c.decode_unsigned_varint(data)
    if data:
        with pytest.raises(SerializationError):
            c.decode_varints(data)
        with pytest.raises(SerializationError):
            c.decode_varints(b"\x02" + data)  # a good varint, then a truncated one


def test_varint_offset_past_the_end_is_truncated():
    with pytest.raises(SerializationError):
        c.decode_varint(b"\x02", 1)
    with pytest.raises(SerializationError):
        c.decode_unsigned_varint(b"\x02", 5)


SIX_BYTE_VARINTS = ["ff ff ff ff ff 01", "80 80 80 80 80 00", "81 80 80 80 80 00"]


@pytest.mark.parametrize("hexs", SIX_BYTE_VARINTS)
def test_varint_whose_fifth_byte_has_the_continuation_bit_is_rejected(hexs):
    # readUnsignedVarint throws when the 5th byte still says "more"
    data = h(hexs)
    with pytest.raises(o.OracleError):
        o.read_unsigned_varint(data)
    with pytest.raises(SerializationError):
        c.decode_varint(data)
    with pytest.raises(SerializationError):
        c.decode_unsigned_varint(data)
    with pytest.raises(SerializationError):
        c.decode_varints(data)
    with pytest.raises(SerializationError):
        c.decode_headers(data)  # the header count is such a varint


# (why, headersBytes)
BAD_HEADERS = [
    ("negative header count -1", "01"),
    ("negative header count -2", "03"),
    ("negative key length", "02 01 00"),
    ("negative value length -2 (only -1 means null)", "02 02 61 03"),
    ("negative value length -3", "02 02 61 05 00 00"),
    ("count past the end: 2 headers announced, 1 present", "04 02 61 01"),
    ("huge count", "fe ff ff ff 0f 00 00"),
    ("key length past the end", "02 0a 61 01"),
    ("value length past the end", "02 02 61 0a 00"),
    ("truncated before the value length", "02 02 61"),
    ("truncated key length varint", "02 80"),
    ("invalid UTF-8 key ff", "02 02 ff 01"),
    ("invalid UTF-8 key: overlong NUL c0 80", "02 04 c080 01"),
    ("invalid UTF-8 key: surrogate ed a0 80", "02 06 eda080 01"),
    ("invalid UTF-8 key: truncated sequence e2 82", "02 04 e282 01"),
    ("invalid UTF-8 key: above U+10FFFF", "02 08 f4908080 01"),
    ("trailing bytes after the headers", "02 02 61 01 00"),
    ("trailing bytes after an explicit count of 0", "00 00"),
    ("6-byte count varint", "80 80 80 80 80 00"),
]


@pytest.mark.parametrize(("why", "hexs"), BAD_HEADERS, ids=[w for w, _ in BAD_HEADERS])
def test_bad_headers_are_a_serialization_error(why, hexs):
    data = h(hexs)
    with pytest.raises(o.OracleError):
        o.decode_headers(data)
    with pytest.raises(SerializationError):
        c.decode_headers(data)


def test_valid_utf8_header_keys_decode():
    # the counterpart of the UTF-8 rejections: multibyte keys are fine
    for key in ("é", "€", "😀", "k\x00y"):
        enc = c.encode_headers([(key, b"v")])
        assert enc == o.encode_headers([(key, b"v")])
        assert c.decode_headers(enc) == Headers([(key, b"v")])


def test_header_key_with_lone_surrogate_cannot_be_encoded():
    # a str with a lone surrogate has no UTF-8 form
    with pytest.raises(InvalidArgumentError):
        c.encode_headers([("\ud800", b"v")])
    with pytest.raises(InvalidArgumentError):
        c.encode_headers(Headers([("ok", None), ("x\udfffy", None)]))


# (why, format, stored bytes)
BAD_VALUES = [
    ("TIMESTAMPED shorter than 8 bytes", VF.TIMESTAMPED, "00 00 00"),
    ("TIMESTAMPED empty", VF.TIMESTAMPED, ""),
    ("HEADERS empty", VF.HEADERS, ""),
    ("PLAIN_HEADERS empty", VF.PLAIN_HEADERS, ""),
    ("HEADERS without a timestamp", VF.HEADERS, "00 0000"),
    ("HEADERS headersSize past the end", VF.HEADERS, "0a 00"),
    ("PLAIN_HEADERS headersSize past the end", VF.PLAIN_HEADERS, "0a 00"),
    ("HEADERS negative headersSize", VF.HEADERS, "01 0000000000000000"),
    ("PLAIN_HEADERS negative headersSize", VF.PLAIN_HEADERS, "03 00"),
    ("HEADERS truncated headersSize varint", VF.HEADERS, "80"),
    ("PLAIN_HEADERS 6-byte headersSize varint", VF.PLAIN_HEADERS, "80 80 80 80 80 00"),
]


@pytest.mark.parametrize(("why", "fmt", "hexs"), BAD_VALUES, ids=[w for w, _, _ in BAD_VALUES])
def test_bad_stored_value_is_a_serialization_error(why, fmt, hexs):
    raw = h(hexs)
    with pytest.raises(o.OracleError):
        o.split(ofmt(fmt), raw)
    with pytest.raises(SerializationError):
        c.split_value(fmt, raw)
    with pytest.raises(SerializationError):
        c.split_values(fmt, [b"", raw] if fmt == VF.PLAIN else [None, raw])
    for dst in FORMATS:
        with pytest.raises(SerializationError):
            c.convert_value(raw, fmt, dst)
        with pytest.raises(SerializationError):
            c.convert_values([None, raw], fmt, dst)


def test_split_values_error_names_the_bad_index():
    good = h("00000000000003e8 76616c")
    with pytest.raises(SerializationError, match="index 2"):
        c.split_values(VF.TIMESTAMPED, [good, None, b"\x00"])


@pytest.mark.parametrize(
    ("why", "call"),
    [
        ("window key shorter than 12 bytes", lambda: c.extract_window_key(bytes(11))),
        ("window keys: one shorter than 12", lambda: c.extract_window_keys([bytes(12), b"x"])),
        ("session key shorter than 16 bytes", lambda: c.extract_session_key(bytes(15))),
        ("session keys: one shorter than 16", lambda: c.extract_session_keys([bytes(16), b""])),
        ("time-windowed key shorter than 8", lambda: c.parse_time_windowed_key(bytes(7))),
        ("time-windowed key empty", lambda: c.parse_time_windowed_key(b"")),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_short_keys_are_a_serialization_error(why, call):
    with pytest.raises(SerializationError):
        call()


STR = "text"
WRONG_TYPES: list[tuple[str, Callable[[], object]]] = [
    ("encode_varint str", lambda: cx.encode_varint(STR)),
    ("encode_varint float", lambda: cx.encode_varint(1.0)),
    ("encode_unsigned_varint float", lambda: cx.encode_unsigned_varint(1.0)),
    ("encode_varints float item", lambda: cx.encode_varints([1, 1.5])),
    ("decode_varint str", lambda: cx.decode_varint(STR)),
    ("decode_varint None", lambda: cx.decode_varint(None)),
    ("decode_unsigned_varint str", lambda: cx.decode_unsigned_varint(STR)),
    ("decode_unsigned_varint None", lambda: cx.decode_unsigned_varint(None)),
    ("decode_varints str", lambda: cx.decode_varints(STR)),
    ("decode_headers str", lambda: cx.decode_headers(STR)),
    ("decode_headers list", lambda: cx.decode_headers([1])),
    ("encode_headers str value", lambda: cx.encode_headers([("k", STR)])),
    ("encode_headers bytes key", lambda: cx.encode_headers([(b"k", b"v")])),
    ("encode_headers not pairs", lambda: cx.encode_headers([("k",)])),
    ("pack_value str value", lambda: cx.pack_value(VF.TIMESTAMPED, STR, 1)),
    ("pack_value PLAIN str value", lambda: cx.pack_value(VF.PLAIN, STR)),
    ("pack_value HEADERS str value", lambda: cx.pack_value(VF.HEADERS, STR, 1)),
    ("pack_value float ts", lambda: cx.pack_value(VF.TIMESTAMPED, b"v", 1.5)),
    ("pack_value HEADERS float ts", lambda: cx.pack_value(VF.HEADERS, b"v", 1.5)),
    ("pack_value str headers", lambda: cx.pack_value(VF.HEADERS, b"v", 1, STR)),
    (
        "pack_value Headers object as headers",
        lambda: cx.pack_value(VF.PLAIN_HEADERS, b"v", 1, Headers([("k", b"v")])),
    ),
    *[(f"split_value {f.name} str", lambda f=f: cx.split_value(f, STR)) for f in FORMATS],
    ("split_values str item", lambda: cx.split_values(VF.TIMESTAMPED, [STR])),
    ("convert_value str", lambda: cx.convert_value(STR, VF.PLAIN, VF.HEADERS)),
    ("convert_value str same format", lambda: cx.convert_value(STR, VF.HEADERS, VF.HEADERS)),
    ("convert_values str item", lambda: cx.convert_values([b"v", STR], VF.PLAIN, VF.HEADERS)),
    ("record_to_value float ts", lambda: cx.record_to_value(VF.TIMESTAMPED, b"v", 1.5, b"")),
    ("record_to_value str value", lambda: cx.record_to_value(VF.HEADERS, STR, 1, b"")),
    ("record_to_value str headers", lambda: cx.record_to_value(VF.HEADERS, b"v", 1, STR)),
    (
        "records_to_values float ts",
        lambda: cx.records_to_values(VF.TIMESTAMPED, [b"v"], [1.5], [b""]),
    ),
    ("records_to_values str value", lambda: cx.records_to_values(VF.HEADERS, [STR], [1], [b""])),
    (
        "records_to_values None headers",
        lambda: cx.records_to_values(VF.HEADERS, [b"v"], [1], [None]),
    ),
    ("records_to_values str headers", lambda: cx.records_to_values(VF.HEADERS, [b"v"], [1], [STR])),
    ("window_key str key", lambda: cx.window_key(STR, 1, 0)),
    ("window_key float ts", lambda: cx.window_key(b"k", 1.5, 0)),
    ("window_key float seq", lambda: cx.window_key(b"k", 1, 0.5)),
    ("window_keys str key", lambda: cx.window_keys([STR], [1], [0])),
    ("window_keys float ts", lambda: cx.window_keys([b"k"], [1.5], [0])),
    ("window_keys float seq", lambda: cx.window_keys([b"k"], [1], [0.5])),
    ("extract_window_key str", lambda: cx.extract_window_key(STR * 4)),
    ("extract_window_key None", lambda: cx.extract_window_key(None)),
    ("extract_window_keys str", lambda: cx.extract_window_keys([STR * 4])),
    ("session_key str key", lambda: cx.session_key(STR, 1, 2)),
    ("session_key float start", lambda: cx.session_key(b"k", 1.5, 2)),
    ("session_key float end", lambda: cx.session_key(b"k", 1, 2.5)),
    ("session_keys str key", lambda: cx.session_keys([STR], [1], [2])),
    ("session_keys float start", lambda: cx.session_keys([b"k"], [1.5], [2])),
    ("session_keys float end", lambda: cx.session_keys([b"k"], [1], [2.5])),
    ("extract_session_key str", lambda: cx.extract_session_key(STR * 4)),
    ("extract_session_keys str", lambda: cx.extract_session_keys([STR * 4])),
    ("time_windowed_key str key", lambda: cx.time_windowed_key(STR, 1)),
    ("time_windowed_key float start", lambda: cx.time_windowed_key(b"k", 1.5)),
    ("parse_time_windowed_key str", lambda: cx.parse_time_windowed_key(STR * 2)),
    ("window_lower_range_fixed float", lambda: cx.window_lower_range_fixed(b"k", 1.5)),
    ("window_upper_range_fixed float", lambda: cx.window_upper_range_fixed(b"k", 1.5)),
    ("window_lower_range str key", lambda: cx.window_lower_range(STR, 1)),
    ("window_upper_range str key", lambda: cx.window_upper_range(STR, 1)),
    ("window_upper_range float to", lambda: cx.window_upper_range(b"k", 1.5)),
    ("session_lower_range_fixed float", lambda: cx.session_lower_range_fixed(b"k", 1.5)),
    ("session_upper_range_fixed float", lambda: cx.session_upper_range_fixed(b"k", 1.5)),
    ("session_lower_range str key", lambda: cx.session_lower_range(STR, 1)),
    ("session_upper_range float to", lambda: cx.session_upper_range(b"k", 1.5)),
    ("segment_id float ts", lambda: cx.segment_id(1.5, 10)),
    ("segment_ids float ts", lambda: cx.segment_ids([1.5], 10)),
    ("murmur2 str", lambda: cx.murmur2(STR)),
    ("partition_for_key str", lambda: cx.partition_for_key(STR, 3)),
    ("partitions_for_keys str", lambda: cx.partitions_for_keys([STR], 3)),
]


@pytest.mark.parametrize(("why", "call"), WRONG_TYPES, ids=[w for w, _ in WRONG_TYPES])
def test_wrong_argument_type_is_an_invalid_type_error(why, call):
    with pytest.raises(InvalidTypeError) as info:
        call()
    assert isinstance(info.value, TypeError)


BIG_LONG = 2**63
BIG_INT = 2**31
OUT_OF_RANGE: list[tuple[str, Callable[[], object]]] = [
    ("encode_varint 2^31", lambda: cx.encode_varint(BIG_INT)),
    ("encode_varint -2^31-1", lambda: cx.encode_varint(-BIG_INT - 1)),
    ("encode_varints 2^31", lambda: cx.encode_varints([0, BIG_INT])),
    ("encode_unsigned_varint 2^32", lambda: cx.encode_unsigned_varint(2**32)),
    ("encode_unsigned_varint -2^31-1", lambda: cx.encode_unsigned_varint(-BIG_INT - 1)),
    ("pack_value ts 2^63", lambda: cx.pack_value(VF.TIMESTAMPED, b"v", BIG_LONG)),
    ("pack_value ts -2^63-1", lambda: cx.pack_value(VF.HEADERS, b"v", -BIG_LONG - 1)),
    ("record_to_value ts 2^63", lambda: cx.record_to_value(VF.HEADERS, b"v", BIG_LONG, b"")),
    (
        "records_to_values ts 2^63",
        lambda: cx.records_to_values(VF.TIMESTAMPED, [b"v"], [BIG_LONG], [b""]),
    ),
    ("window_key ts 2^63", lambda: cx.window_key(b"k", BIG_LONG, 0)),
    ("window_key ts -2^63-1", lambda: cx.window_key(b"k", -BIG_LONG - 1, 0)),
    ("window_key seq 2^31", lambda: cx.window_key(b"k", 0, BIG_INT)),
    ("window_key seq -2^31-1", lambda: cx.window_key(b"k", 0, -BIG_INT - 1)),
    ("window_keys ts 2^63", lambda: cx.window_keys([b"k"], [BIG_LONG], [0])),
    ("window_keys seq 2^31", lambda: cx.window_keys([b"k"], [0], [BIG_INT])),
    ("session_key start 2^63", lambda: cx.session_key(b"k", BIG_LONG, 0)),
    ("session_key end -2^63-1", lambda: cx.session_key(b"k", 0, -BIG_LONG - 1)),
    ("session_keys start 2^63", lambda: cx.session_keys([b"k"], [BIG_LONG], [0])),
    ("session_keys end 2^63", lambda: cx.session_keys([b"k"], [0], [BIG_LONG])),
    ("time_windowed_key start 2^63", lambda: cx.time_windowed_key(b"k", BIG_LONG)),
    ("window_upper_range_fixed 2^63", lambda: cx.window_upper_range_fixed(b"k", BIG_LONG)),
    ("window_lower_range_fixed 2^63", lambda: cx.window_lower_range_fixed(b"k", BIG_LONG)),
    ("window_upper_range 2^63", lambda: cx.window_upper_range(b"k", BIG_LONG)),
    ("session_upper_range_fixed 2^63", lambda: cx.session_upper_range_fixed(b"k", BIG_LONG)),
    ("session_upper_range 2^63", lambda: cx.session_upper_range(b"k", BIG_LONG)),
    ("segment_id ts 2^63", lambda: cx.segment_id(BIG_LONG, 1)),
    ("segment_ids ts 2^63", lambda: cx.segment_ids([BIG_LONG], 1)),
    ("segment_id interval 2^63", lambda: cx.segment_id(1, BIG_LONG)),
    ("segment_ids interval 2^63", lambda: cx.segment_ids([1], BIG_LONG)),
    ("partition_for_key 2^31 partitions", lambda: cx.partition_for_key(b"k", BIG_INT)),
    ("partitions_for_keys 2^31 partitions", lambda: cx.partitions_for_keys([b"k"], BIG_INT)),
]


@pytest.mark.parametrize(("why", "call"), OUT_OF_RANGE, ids=[w for w, _ in OUT_OF_RANGE])
def test_out_of_range_number_is_an_invalid_argument_error(why, call):
    with pytest.raises(InvalidArgumentError):
        call()


MISMATCHED: list[tuple[str, Callable[[], object]]] = [
    ("window_keys: more timestamps", lambda: cx.window_keys([b"a"], [1, 2], [0])),
    ("window_keys: fewer seqs", lambda: cx.window_keys([b"a", b"b"], [1, 2], [0])),
    ("window_keys: fewer timestamps", lambda: cx.window_keys([b"a", b"b"], [1])),
    ("session_keys: fewer ends", lambda: cx.session_keys([b"a"], [1], [])),
    ("session_keys: more starts", lambda: cx.session_keys([b"a"], [1, 2], [3])),
    (
        "records_to_values: more timestamps",
        lambda: cx.records_to_values(VF.HEADERS, [b"v"], [1, 2], [b""]),
    ),
    ("records_to_values: fewer headers", lambda: cx.records_to_values(VF.HEADERS, [b"v"], [1], [])),
]


@pytest.mark.parametrize(("why", "call"), MISMATCHED, ids=[w for w, _ in MISMATCHED])
def test_mismatched_batch_lengths_are_an_invalid_argument_error(why, call):
    with pytest.raises(InvalidArgumentError):
        call()


UNKNOWN_FORMAT: list[tuple[str, Callable[[], object]]] = [
    ("pack_value", lambda: cx.pack_value(7, b"v", 1)),
    ("split_value", lambda: cx.split_value(7, h("00000000000003e8"))),
    ("split_value negative", lambda: cx.split_value(-1, b"v")),
    ("split_values", lambda: cx.split_values(7, [b"v"])),
    ("convert_value unknown src", lambda: cx.convert_value(b"v", 7, VF.PLAIN)),
    ("convert_value unknown dst", lambda: cx.convert_value(b"v", VF.PLAIN, 7)),
    ("convert_value unknown src == dst", lambda: cx.convert_value(b"v", 7, 7)),
    ("convert_value None raw", lambda: cx.convert_value(None, 7, VF.PLAIN)),
    ("convert_values unknown src", lambda: cx.convert_values([b"v"], 7, VF.PLAIN)),
    ("convert_values unknown dst", lambda: cx.convert_values([b"v"], VF.PLAIN, 4)),
    ("record_to_value", lambda: cx.record_to_value(7, b"v", 1, b"")),
    ("records_to_values", lambda: cx.records_to_values(7, [b"v"], [1], [b""])),
]


@pytest.mark.parametrize(("why", "call"), UNKNOWN_FORMAT, ids=[w for w, _ in UNKNOWN_FORMAT])
def test_unknown_value_format_is_an_invalid_argument_error(why, call):
    with pytest.raises(InvalidArgumentError):
        call()


@pytest.mark.parametrize("interval", [0, -1, -60000])
def test_segment_interval_below_one_is_an_invalid_argument_error(interval):
    with pytest.raises(InvalidArgumentError):
        c.segment_id(1000, interval)
    with pytest.raises(InvalidArgumentError):
        c.segment_ids([1000], interval)
    with pytest.raises(InvalidArgumentError):
        c.segment_ids([], interval)


@pytest.mark.parametrize("n", [0, -1])
def test_num_partitions_below_one_is_an_invalid_argument_error(n):
    with pytest.raises(InvalidArgumentError):
        c.partition_for_key(b"k", n)
    with pytest.raises(InvalidArgumentError):
        c.partitions_for_keys([b"k"], n)
    with pytest.raises(InvalidArgumentError):
        c.partitions_for_keys([], n)


def test_empty_max_suffix_is_an_invalid_argument_error():
    # OrderedBytes.upperRange reads maxSuffix[0]
    with pytest.raises(InvalidArgumentError):
        c.ordered_upper_range(b"k", b"")


def test_none_window_and_session_keys_are_rejected():
    with pytest.raises(InvalidArgumentError):
        c.window_keys([None], [1], [0])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        c.session_keys([None], [1], [2])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        c.partitions_for_keys([b"a", None], 3)  # type: ignore[list-item]


# ============================================================================ large and edge inputs


def test_empty_keys():
    assert c.window_key(b"", 5, 1) == o.L(5) + o.I(1)
    assert c.window_keys([b"", b""], [5, 6], [1, 2]) == [o.L(5) + o.I(1), o.L(6) + o.I(2)]
    assert c.extract_window_key(o.L(5) + o.I(1)) == (b"", 5, 1)
    assert c.extract_window_keys([bytes(12)]) == [(b"", 0, 0)]
    assert c.session_key(b"", 1, 2) == o.L(2) + o.L(1)
    assert c.session_keys([b""], [1], [2]) == [o.L(2) + o.L(1)]
    assert c.extract_session_key(bytes(16)) == (b"", 0, 0)
    assert c.extract_session_keys([bytes(16)]) == [(b"", 0, 0)]
    assert c.time_windowed_key(b"", 3) == o.L(3)
    assert c.parse_time_windowed_key(o.L(3)) == (b"", 3)
    # upperRange of an empty key is just the suffix (nothing to keep)
    assert c.window_upper_range(b"", 9) == o.window_upper_range(b"", 9) == o.L(9) + o.I(INT_MAX)
    assert c.session_upper_range(b"", 9) == o.L(LONG_MAX) + o.L(9)
    assert c.partitions_for_keys([b""], 100) == [c.partition_for_key(b"", 100)] == [81]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_zero_length_values(fmt):
    packed = o.pack(ofmt(fmt), b"", 7, b"")
    assert c.pack_value(fmt, b"", 7, b"") == packed
    assert c.records_to_values(fmt, [b"", None], [7, 7], [b"", b""]) == [packed, None]
    expected = (b"", 7 if fmt.has_timestamp else None, b"")
    assert c.split_value(fmt, packed) == expected
    assert c.split_values(fmt, [packed, None]) == [expected, None]
    for dst in FORMATS:
        out = o.convert(packed, ofmt(fmt), ofmt(dst))
        assert c.convert_value(packed, fmt, dst) == out
        assert c.convert_values([packed], fmt, dst) == [out]
    if fmt == VF.PLAIN:
        assert packed == b""  # an empty (not null) plain value stays empty, not None
        assert c.convert_values([b""], VF.PLAIN, VF.PLAIN) == [b""]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_100_kb_value(fmt):
    value = bytes(range(256)) * 400  # 102,400 bytes
    hb = o.encode_headers([("big", value), ("k", b"v")])
    packed = o.pack(ofmt(fmt), value, LONG_MAX, hb)
    assert c.pack_value(fmt, value, LONG_MAX, hb) == packed
    assert c.records_to_values(fmt, [value], [LONG_MAX], [hb]) == [packed]
    parts = (value, LONG_MAX if fmt.has_timestamp else None, hb if fmt.has_headers else b"")
    assert c.split_value(fmt, packed) == parts
    assert c.split_values(fmt, [packed]) == [parts]
    for dst in FORMATS:
        out = o.convert(packed, ofmt(fmt), ofmt(dst))
        assert c.convert_value(packed, fmt, dst) == out
        assert c.convert_values([packed, None, packed], fmt, dst) == [out, None, out]
    assert c.decode_headers(hb) == Headers([("big", value), ("k", b"v")])
    key = value[:100_000]
    assert c.window_keys([key], [1], [2]) == [c.window_key(key, 1, 2)]
    assert c.murmur2(value) == o.murmur2(value)


N = 10_000


def test_10000_item_batches():
    ks = [i.to_bytes(4, "big") * (i % 5) for i in range(N)]
    tss = [(i * 7919) - N * 3000 for i in range(N)]
    sqs = [i % 3 for i in range(N)]
    wks = c.window_keys(ks, tss, sqs)
    assert wks == [o.window_key(k, t, s) for k, t, s in zip(ks, tss, sqs, strict=True)]
    assert c.extract_window_keys(wks) == list(zip(ks, tss, sqs, strict=True))
    sks = c.session_keys(ks, sqs, tss)
    assert sks == [o.session_key(k, s, t) for k, s, t in zip(ks, sqs, tss, strict=True)]
    assert c.extract_session_keys(sks) == list(zip(ks, sqs, tss, strict=True))
    assert c.segment_ids(tss, 60000) == [o.segment_id(t, 60000) for t in tss]
    assert c.partitions_for_keys(ks, 12) == [o.partition_for_key(k, 12) for k in ks]
    vals: list[bytes | None] = [None if i % 10 == 0 else k for i, k in enumerate(ks)]
    hbs = [o.encode_headers([("i", k)]) if i % 2 else b"" for i, k in enumerate(ks)]
    stored = c.records_to_values(VF.HEADERS, vals, tss, hbs)
    assert stored == [
        o.record_to_value(o.Fmt.HEADERS, v, t, hb) for v, t, hb in zip(vals, tss, hbs, strict=True)
    ]
    for dst in FORMATS:
        conv = c.convert_values(stored, VF.HEADERS, dst)
        assert conv == [o.convert(s, o.Fmt.HEADERS, ofmt(dst)) for s in stored]
    assert c.split_values(VF.HEADERS, stored) == [
        None if s is None else o.split(o.Fmt.HEADERS, s) for s in stored
    ]
    ints = [((i * 2654435761) & 0xFFFFFFFF) - 2**31 for i in range(N)]
    stream = c.encode_varints(ints)
    assert stream == b"".join(o.write_varint(v) for v in ints)
    assert c.decode_varints(stream) == ints


def test_empty_batches():
    assert c.window_keys([], []) == []
    assert c.extract_window_keys([]) == []
    assert c.session_keys([], [], []) == []
    assert c.extract_session_keys([]) == []
    assert c.convert_values([], VF.PLAIN, VF.HEADERS) == []
    assert c.split_values(VF.HEADERS, []) == []
    assert c.records_to_values(VF.HEADERS, [], [], []) == []
    assert c.segment_ids([], 10) == []
    assert c.partitions_for_keys([], 10) == []
    assert c.encode_varints([]) == b""
    assert c.decode_varints(b"") == []


def test_headers_with_many_entries():
    headers = [(f"key-{i}", None if i % 7 == 0 else str(i).encode()) for i in range(1000)]
    enc = c.encode_headers(headers)
    assert enc == o.encode_headers(headers)
    assert enc[:2] == o.write_varint(1000) == h("d0 0f")  # a 2-byte count varint
    decoded = c.decode_headers(enc)
    assert len(decoded) == 1000
    assert header_pairs(decoded) == headers
    packed = c.pack_value(VF.HEADERS, b"v", 1, enc)
    assert c.split_value(VF.HEADERS, packed) == (b"v", 1, enc)
    assert c.decode_headers(c.split_values(VF.HEADERS, [packed])[0][2]) == decoded  # type: ignore[index]


def test_duplicate_header_keys_are_preserved_in_order():
    headers = [("k", b"1"), ("j", None), ("k", b"2"), ("k", None), ("j", b"")]
    enc = c.encode_headers(headers)
    assert enc == o.encode_headers(headers)
    decoded = c.decode_headers(enc)
    assert header_pairs(decoded) == headers
    assert decoded.headers("k") == [b"1", b"2", None]
    assert decoded.last_header("j") == b""
    # a different order is a different encoding
    assert c.encode_headers(list(reversed(headers))) != enc


@pytest.mark.parametrize("ts", [LONG_MIN, LONG_MIN + 1, -1, 0, LONG_MAX - 1, LONG_MAX])
def test_extreme_timestamps_and_seq(ts):
    for seq in (0, INT_MAX, INT_MIN, -1):
        enc = o.window_key(b"k", ts, seq)
        assert c.window_key(b"k", ts, seq) == c.window_keys([b"k"], [ts], [seq])[0] == enc
        assert c.extract_window_key(enc) == c.extract_window_keys([enc])[0] == (b"k", ts, seq)
    enc = o.session_key(b"k", ts, LONG_MAX)
    assert c.session_key(b"k", ts, LONG_MAX) == c.session_keys([b"k"], [ts], [LONG_MAX])[0] == enc
    assert c.extract_session_key(enc) == (b"k", ts, LONG_MAX)
    for fmt in FORMATS:
        packed = o.pack(ofmt(fmt), b"v", ts, b"")
        assert c.pack_value(fmt, b"v", ts) == packed
        assert c.records_to_values(fmt, [b"v"], [ts], [b""]) == [packed]
        assert c.split_values(fmt, [packed]) == [c.split_value(fmt, packed)]
    assert c.time_windowed_key(b"k", ts) == o.time_windowed_key(b"k", ts)
    assert c.parse_time_windowed_key(o.time_windowed_key(b"k", ts)) == (b"k", ts)
    assert c.segment_id(ts, 60000) == c.segment_ids([ts], 60000)[0] == o.segment_id(ts, 60000)
    for fn in BOUNDS:
        assert getattr(c, fn)(b"k", ts) == getattr(o, fn)(b"k", ts)


def test_long_max_and_min_bytes():
    assert c.window_key(b"", LONG_MAX, INT_MAX) == h("7fffffffffffffff 7fffffff")
    assert c.window_key(b"", LONG_MIN, INT_MIN) == h("8000000000000000 80000000")
    assert c.pack_value(VF.TIMESTAMPED, b"", LONG_MIN) == h("8000000000000000")


def test_buffer_types_are_accepted_as_bytes():
    # bytearray and memoryview are bytes-like (the facade's _as_bytes accepts them)
    for buf in (bytearray(b"k"), memoryview(b"k")):
        assert c.window_key(buf, 1, 2) == o.window_key(b"k", 1, 2)  # type: ignore[arg-type]
        assert c.session_key(buf, 1, 2) == o.session_key(b"k", 1, 2)  # type: ignore[arg-type]
        assert c.time_windowed_key(buf, 1) == o.time_windowed_key(b"k", 1)  # type: ignore[arg-type]
        assert c.murmur2(buf) == o.murmur2(b"k")  # type: ignore[arg-type]
    raw = bytearray(o.window_key(b"k", 1, 2))
    assert c.extract_window_key(raw) == (b"k", 1, 2)  # type: ignore[arg-type]
    assert c.decode_varint(bytearray(b"\x02")) == (1, 1)  # type: ignore[arg-type]
    assert c.decode_headers(memoryview(b"\x02\x02a\x01")) == Headers([("a", None)])  # type: ignore[arg-type]


# ============================================================================ C-only entry points

# csrc/txcodecs.h also exports a headers codec and OrderedBytes.upperRange, which the facade
# implements in Python instead. They are part of the C library's contract, so they are checked
# here directly against the oracle: a bug in them cannot hide behind the facade.
_ffi: Any = _codecs.ffi
_lib: Any = _codecs.lib


def c_headers_decode(data: bytes) -> o.HeaderList | int:
    """``txc_headers_decode``: the decoded headers, or the negative error code."""
    max_headers = len(data) + 1
    spans = _ffi.new("int64_t[]", 4 * max_headers)
    n = _lib.txc_headers_decode(data, len(data), spans, max_headers)
    if n < 0:
        return int(n)
    out: o.HeaderList = []
    for i in range(n):
        koff, klen, voff, vlen = spans[4 * i : 4 * i + 4]
        out.append(
            (
                data[koff : koff + klen].decode("utf-8"),
                None if vlen < 0 else data[voff : voff + vlen],
            )
        )
    return out


def c_headers_encode(keys_utf8: list[bytes], vals: list[bytes | None]) -> bytes | int:
    """``txc_headers_encode``: the bytes, or the negative error code."""
    klens = _ffi.new("int64_t[]", [len(k) for k in keys_utf8] or [0])
    vlens = _ffi.new("int64_t[]", [-1 if v is None else len(v) for v in vals] or [0])
    cap = 5 + sum(10 + len(k) for k in keys_utf8) + sum(len(v or b"") for v in vals)
    out = _ffi.new("uint8_t[]", cap)
    kdata = b"".join(keys_utf8)
    vdata = b"".join(v for v in vals if v is not None)
    n = _lib.txc_headers_encode(len(keys_utf8), kdata, klens, vdata, vlens, out, cap)
    return int(n) if n < 0 else bytes(_ffi.buffer(out, n))


@GARBAGE
@given(garbage(header_encodings))
def test_c_headers_decode_matches_oracle(data):
    result = c_headers_decode(data)
    try:
        expected = o.decode_headers(data)
    except o.OracleError:
        assert isinstance(result, int)
        assert result < 0
        return
    assert result == expected
    assert _lib.txc_headers_count(data, len(data)) == len(expected)


@pytest.mark.parametrize(("why", "hexs"), BAD_HEADERS, ids=[w for w, _ in BAD_HEADERS])
def test_c_headers_decode_rejects_bad_headers(why, hexs):
    result = c_headers_decode(h(hexs))
    assert isinstance(result, int)
    assert result < 0


def test_c_headers_decode_error_codes():
    assert c_headers_decode(h("01")) == _lib.TXC_ERR_NEGATIVE_LENGTH
    assert c_headers_decode(h("02 02 ff 01")) == _lib.TXC_ERR_BAD_UTF8
    assert c_headers_decode(h("02 02 61 01 00")) == _lib.TXC_ERR_TRAILING
    assert c_headers_decode(h("80 80 80 80 80 00")) == _lib.TXC_ERR_VARINT_TOO_LONG
    assert c_headers_decode(b"") == []
    assert c_headers_decode(b"\x00") == []
    assert _lib.txc_headers_count(b"", 0) == 0
    assert _lib.txc_headers_count(b"\x01", 1) == _lib.TXC_ERR_NEGATIVE_LENGTH


@PROPS
@given(header_lists)
def test_c_headers_encode_matches_oracle(headers):
    keys_utf8 = [k.encode("utf-8") for k, _ in headers]
    assert c_headers_encode(keys_utf8, [v for _, v in headers]) == o.encode_headers(headers)


def test_c_headers_encode_rejects_invalid_utf8_keys():
    assert c_headers_encode([b"\xff"], [b"v"]) == _lib.TXC_ERR_BAD_UTF8
    assert c_headers_encode([b"\xed\xa0\x80"], [None]) == _lib.TXC_ERR_BAD_UTF8
    assert c_headers_encode([], []) == b""


@PROPS
@given(keys, st.binary(min_size=1, max_size=16))
def test_c_ordered_upper_range_matches_oracle(key, suffix):
    cap = len(key) + len(suffix)
    out = _ffi.new("uint8_t[]", cap + 1)
    n = _lib.txc_ordered_upper_range(key, len(key), suffix, len(suffix), out, cap)
    assert bytes(_ffi.buffer(out, n)) == o.ordered_upper_range(key, suffix)
    # a buffer one byte too small is refused, never overrun
    if n > 0:
        small = _ffi.new("uint8_t[]", n)
        assert _lib.txc_ordered_upper_range(key, len(key), suffix, len(suffix), small, n - 1) == (
            _lib.TXC_ERR_BUFFER_TOO_SMALL
        )
