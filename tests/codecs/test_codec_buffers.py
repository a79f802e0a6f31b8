"""Bytes-like inputs whose ``len()`` is not their size in bytes (issue 15, item 8).

``len()`` of an ``array("q")``, or of a ``memoryview`` of one, counts 8-byte items, and of a
2-D ``memoryview`` its rows; ``b"".join`` and ``bytes()`` take their bytes. Every codec,
batch or single-item, takes such an input as its bytes: the batch forms give what the
single-item forms give on ``bytes(x)``. A non-contiguous ``memoryview`` is not a bytes-like
object (Python's glossary): it is an :class:`~txstore.errors.InvalidTypeError`.
"""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oracle as o
from tests.codecs.test_codecs import FORMATS, ofmt
from txstore import codecs as c
from txstore.codecs import ValueFormat as VF
from txstore.codecs._native import session_key_columns, split_value_columns, window_key_columns
from txstore.codecs.columns import BinaryColumn
from txstore.errors import InvalidTypeError

cx: Any = c  # the facade typed as Any: the calls below pass buffers where bytes are declared


def multibyte(raw: bytes) -> list[Any]:
    """``raw`` as every bytes-like object it fits whose ``len()`` is not ``len(raw)``: arrays
    and memoryviews of 2-, 4- and 8-byte items, and a 2-D memoryview of bytes."""
    out: list[Any] = []
    for code in ("h", "i", "q"):
        if raw and len(raw) % array(code).itemsize == 0:
            arr = array(code)
            arr.frombytes(raw)
            out += [arr, memoryview(arr), memoryview(raw).cast(code)]
    if raw and len(raw) % 2 == 0:
        out.append(memoryview(raw).cast("B", shape=[2, len(raw) // 2]))
    assert out, f"no multi-byte view of {len(raw)} bytes"
    for x in out:
        assert len(x) != len(raw) and bytes(x) == raw
    return out


def kinds(raw: bytes) -> list[Any]:
    """``raw`` as each kind of input: bytes, bytearray, memoryview, then the multi-byte ones."""
    return [raw, bytearray(raw), memoryview(raw), *multibyte(raw)]


def ids(x: Any) -> str:
    if isinstance(x, memoryview):
        return f"memoryview-{x.format}-{x.ndim}d"
    return type(x).__name__ if not isinstance(x, array) else f"array-{x.typecode}"


def non_contiguous(raw: bytes) -> memoryview:
    """A view of ``raw``'s bytes at even positions: a buffer, but not a contiguous one."""
    view = memoryview(bytes(b for x in raw for b in (x, 0)))[::2]
    assert not view.c_contiguous and bytes(view) == raw
    return view


KEY = bytes(range(1, 17))  # 16 bytes: a whole number of 2-, 4- and 8-byte items
VALUE = b"value-of-8-bytes"[:8] * 2  # 16 bytes
HEADERS = o.encode_headers([("h", b"v")])  # 6 bytes
HEADERS_8 = o.encode_headers([("abc", b"xy")])  # 8 bytes


# ============================================================================ the partitioner


@pytest.mark.parametrize("key", multibyte(KEY), ids=ids)
def test_batch_partitioner_takes_a_multibyte_buffer_as_its_bytes(key):
    for n in (3, 7, 100, 2**31 - 1):
        expected = c.partition_for_key(KEY, n)
        assert cx.partitions_for_keys([key], n) == [expected]
        # next to bytes keys, in any position
        assert cx.partitions_for_keys([b"a", key, b"bc"], n) == [
            c.partition_for_key(b"a", n),
            expected,
            c.partition_for_key(b"bc", n),
        ]
        assert cx.partition_for_key(key, n) == expected
    assert cx.murmur2(key) == c.murmur2(KEY) == o.murmur2(KEY)


def test_batch_partitioner_on_an_array_of_longs_equals_the_single_one():
    longs = array("q", [1, 2, -3, 2**62])
    raw = bytes(longs)
    assert len(longs) == 4 and len(raw) == 32
    for n in (2, 3, 5, 12):
        expected = c.partition_for_key(raw, n)
        assert expected == o.partition_for_key(raw, n)
        assert cx.partitions_for_keys([longs], n) == [expected]
        assert cx.partitions_for_keys([memoryview(longs)], n) == [expected]
        assert cx.partition_for_key(longs, n) == expected


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(max_size=4).map(lambda b: b * 8), min_size=1, max_size=12),
    st.integers(1, 1000),
    st.data(),
)
def test_batch_partitioner_agrees_with_single_on_any_mix(raws, n, data):
    # an index, not sampled_from: hypothesis hashes what it samples, and a writable
    # memoryview cannot be hashed
    items = [(ks := kinds(r) if r else [r])[data.draw(st.integers(0, len(ks) - 1))] for r in raws]
    assert cx.partitions_for_keys(items, n) == [c.partition_for_key(r, n) for r in raws]


# ========================================================================= the other batch codecs


def stored(fmt: VF) -> bytes:
    """A stored value of ``fmt`` with headers, a whole number of 8-byte items long."""
    empty = len(o.pack(ofmt(fmt), b"", 1234, HEADERS_8))
    raw = o.pack(ofmt(fmt), VALUE + bytes(-(empty + len(VALUE)) % 8), 1234, HEADERS_8)
    assert len(raw) % 8 == 0
    return raw


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_convert_and_split_values_take_each_value_as_its_bytes(fmt):
    raw = stored(fmt)
    for item in multibyte(raw):
        for dst in FORMATS:
            expected = c.convert_value(raw, fmt, dst)
            assert expected == o.convert(raw, ofmt(fmt), ofmt(dst))
            assert cx.convert_values([item, None, raw], fmt, dst) == [expected, None, expected]
            assert cx.convert_value(item, fmt, dst) == expected
            assert c.value_converter(fmt, dst)(item) == expected
        expected_parts = c.split_value(fmt, raw)
        assert cx.split_values(fmt, [item, None]) == [expected_parts, None]
        assert cx.split_value(fmt, item) == expected_parts
        cols = split_value_columns(fmt, [item, raw])
        assert cols.values.to_list() == [expected_parts[0]] * 2
        assert cols.headers.to_list() == [expected_parts[2]] * 2


def test_convert_timestamped_to_plain_headers_cuts_bytes_not_items():
    raw = o.pack(ofmt(VF.TIMESTAMPED), bytes(range(64)), 7, b"")
    expected = o.convert(raw, ofmt(VF.TIMESTAMPED), ofmt(VF.PLAIN_HEADERS))
    for item in multibyte(raw):
        assert cx.convert_value(item, VF.TIMESTAMPED, VF.PLAIN_HEADERS) == expected
        assert cx.convert_values([item], VF.TIMESTAMPED, VF.PLAIN_HEADERS) == [expected]


@pytest.mark.parametrize("key", multibyte(KEY), ids=ids)
def test_window_and_session_keys_take_the_key_as_its_bytes(key):
    wk = c.window_key(KEY, 1000, 3)
    sk = c.session_key(KEY, 10, 20)
    assert cx.window_keys([key, b"k"], [1000, 5], [3, 0]) == [wk, c.window_key(b"k", 5, 0)]
    assert cx.window_key(key, 1000, 3) == wk
    assert cx.session_keys([key], [10], [20]) == [sk]
    assert cx.session_key(key, 10, 20) == sk
    assert cx.time_windowed_key(key, 1000) == c.time_windowed_key(KEY, 1000)


def test_extracting_keys_takes_each_stored_key_as_its_bytes():
    wk = c.window_key(KEY, 1000, 3)  # 28 bytes: 2- and 4-byte items
    sk = c.session_key(KEY, 10, 20)  # 32 bytes: 2-, 4- and 8-byte items
    for item in multibyte(wk):
        assert cx.extract_window_keys([item, wk]) == [(KEY, 1000, 3)] * 2
        assert cx.extract_window_key(item) == (KEY, 1000, 3)
        assert window_key_columns([item]).keys.to_list() == [KEY]
    for item in multibyte(sk):
        assert cx.extract_session_keys([item]) == [(KEY, 10, 20)]
        assert cx.extract_session_key(item) == (KEY, 10, 20)
        assert session_key_columns([item]).keys.to_list() == [KEY]


def test_decode_varints_and_varint_take_the_buffer_as_its_bytes():
    raw = b"".join(c.encode_varint(v) for v in (300, -1, 5, 70000))  # 2 + 1 + 1 + 3 + pad
    raw += c.encode_varint(0)
    assert len(raw) == 8
    for item in multibyte(raw):
        assert cx.decode_varints(item) == [300, -1, 5, 70000, 0]
        assert cx.decode_varint(item) == (300, 2)
        assert cx.decode_varint(item, 2) == (-1, 3)
        assert cx.decode_unsigned_varint(item) == c.decode_unsigned_varint(raw)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_packing_takes_multibyte_headers_as_their_bytes(fmt):
    expected = o.pack(ofmt(fmt), b"v", 99, HEADERS_8)
    for hb in multibyte(HEADERS_8):
        assert cx.pack_value(fmt, b"v", 99, hb) == expected
        assert cx.record_to_value(fmt, b"v", 99, hb) == expected
        assert cx.records_to_values(fmt, [b"v", None, b"w"], [99, 1, 2], [hb, hb, b""]) == [
            expected,
            None,
            o.pack(ofmt(fmt), b"w", 2, b""),
        ]
    for value in multibyte(VALUE):
        expected = o.pack(ofmt(fmt), VALUE, 99, HEADERS)
        assert cx.pack_value(fmt, value, 99, HEADERS) == expected
        assert cx.record_to_value(fmt, value, 99, HEADERS) == expected
        assert cx.records_to_values(fmt, [value], [99], [HEADERS]) == [expected]


def test_decode_headers_takes_the_buffer_as_its_bytes():
    for item in multibyte(HEADERS_8):
        assert cx.decode_headers(item) == c.decode_headers(HEADERS_8)


def test_binary_column_over_a_multibyte_buffer_counts_bytes():
    data = array("q")
    data.frombytes(b"abcdefgh" * 2)
    col = BinaryColumn(data, array("i", [0, 3, 3, 10]))
    assert col.to_list() == [b"abc", b"", b"defghab"]
    assert col[2] == b"defghab" and bytes(col.view()) == b"abcdefghab"
    # what an allocate returning such a buffer gets back
    cols = split_value_columns(VF.PLAIN, [b"xy", b"z"], lambda n: array("q", bytes(8 * (n + 1))))
    assert cols.values.to_list() == [b"xy", b"z"]


# ============================================================================ non-contiguous


BATCH_CALLS = {
    "partitions_for_keys": lambda x: cx.partitions_for_keys([b"a", x], 3),
    "window_keys": lambda x: cx.window_keys([x], [1]),
    "session_keys": lambda x: cx.session_keys([x], [1], [2]),
    "extract_window_keys": lambda x: cx.extract_window_keys([x]),
    "extract_session_keys": lambda x: cx.extract_session_keys([x]),
    "convert_values": lambda x: cx.convert_values([None, x], VF.PLAIN, VF.TIMESTAMPED),
    "split_values": lambda x: cx.split_values(VF.PLAIN, [x]),
    "split_value_columns": lambda x: split_value_columns(VF.PLAIN, [x]),
    "window_key_columns": lambda x: window_key_columns([x]),
    "session_key_columns": lambda x: session_key_columns([x]),
    "decode_varints": lambda x: cx.decode_varints(x),
    "records_to_values": lambda x: cx.records_to_values(VF.HEADERS, [b"v"], [1], [x]),
}

SINGLE_CALLS = {
    "partition_for_key": lambda x: cx.partition_for_key(x, 3),
    "murmur2": lambda x: cx.murmur2(x),
    "window_key": lambda x: cx.window_key(x, 1, 2),
    "session_key": lambda x: cx.session_key(x, 1, 2),
    "extract_window_key": lambda x: cx.extract_window_key(x),
    "convert_value": lambda x: cx.convert_value(x, VF.PLAIN, VF.TIMESTAMPED),
    "split_value": lambda x: cx.split_value(VF.TIMESTAMPED, x),
    "pack_value": lambda x: cx.pack_value(VF.HEADERS, b"v", 1, x),
    "record_to_value": lambda x: cx.record_to_value(VF.HEADERS, b"v", 1, x),
    "decode_varint": lambda x: cx.decode_varint(x),
    "decode_headers": lambda x: cx.decode_headers(x),
}


@pytest.mark.parametrize("call", list(BATCH_CALLS.values()), ids=list(BATCH_CALLS))
def test_batch_codecs_refuse_a_non_contiguous_view_with_a_typed_error(call):
    view = non_contiguous(c.session_key(KEY, 1, 2))  # a valid input of every call, as bytes
    with pytest.raises(InvalidTypeError, match="contiguous bytes-like"):
        call(view)


@pytest.mark.parametrize("call", list(SINGLE_CALLS.values()), ids=list(SINGLE_CALLS))
def test_single_item_codecs_refuse_a_non_contiguous_view_with_a_typed_error(call):
    view = non_contiguous(c.session_key(KEY, 1, 2))
    with pytest.raises(InvalidTypeError, match="contiguous bytes-like"):
        call(view)


def test_a_non_buffer_item_is_still_named_in_the_error():
    with pytest.raises(InvalidTypeError, match="key must be bytes, got str"):
        cx.partitions_for_keys([b"a", "b"], 3)
    with pytest.raises(InvalidTypeError, match="key must be bytes, got int"):
        cx.window_keys([5], [1])
