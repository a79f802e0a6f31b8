"""The column codecs (``split_value_columns``, ``window_key_columns``, ``session_key_columns``)
against the pure-Python oracle, their Arrow layout, and what each bad input gets."""

from __future__ import annotations

from array import array
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oracle as o
from tests.codecs.test_codecs import FORMATS, garbage, keys, ofmt, seqs, stored_value, timestamps
from txstore.codecs import ValueFormat as VF
from txstore.codecs._native import session_key_columns, split_value_columns, window_key_columns
from txstore.codecs.columns import BinaryColumn
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError

PROPS = settings(max_examples=120, deadline=None)
anyc: Any = split_value_columns  # for calls with deliberately wrong argument types


def check_layout(col: BinaryColumn, items: list[bytes]) -> None:
    """The column holds ``items`` in Arrow's binary layout, readable by Arrow without a copy."""
    assert len(col) == len(items)
    assert col.to_list() == items
    assert [col[i] for i in range(len(items))] == items
    assert col.offsets.typecode == "i" and col.offsets[0] == 0
    assert col.lengths() == [len(x) for x in items]
    arrow = pa.Array.from_buffers(
        pa.binary(), len(col), [None, pa.py_buffer(col.offsets), pa.py_buffer(col.data)]
    )
    arrow.validate(full=True)
    assert arrow.to_pylist() == items


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@PROPS
@given(data=st.data())
def test_split_value_columns_match_the_oracle(fmt, data):
    raws = data.draw(st.lists(stored_value(fmt), max_size=12))
    parts = [o.split(ofmt(fmt), r) for r in raws]
    cols = split_value_columns(fmt, raws)
    check_layout(cols.values, [v for v, _, _ in parts])
    check_layout(cols.headers, [hb for _, _, hb in parts])
    assert cols.timestamps.typecode == "q"
    assert cols.timestamps.tolist() == [-1 if ts is None else ts for _, ts, _ in parts]


@PROPS
@given(st.lists(st.tuples(keys, timestamps, seqs), max_size=12))
def test_window_key_columns_match_the_oracle(items):
    raws = [o.window_key(k, ts, seq) for k, ts, seq in items]
    cols = window_key_columns(raws)
    check_layout(cols.keys, [k for k, _, _ in items])
    assert cols.first.tolist() == [ts for _, ts, _ in items]
    assert cols.second.typecode == "i"
    assert cols.second.tolist() == [seq for _, _, seq in items]


@PROPS
@given(st.lists(st.tuples(keys, timestamps, timestamps), max_size=12))
def test_session_key_columns_match_the_oracle(items):
    raws = [o.session_key(k, start, end) for k, start, end in items]
    cols = session_key_columns(raws)
    check_layout(cols.keys, [k for k, _, _ in items])
    assert cols.first.tolist() == [end for _, _, end in items]  # [key][end][start]
    assert cols.second.typecode == "q"
    assert cols.second.tolist() == [start for _, start, _ in items]


def test_empty_batches_give_empty_columns():
    for fmt in FORMATS:
        cols = split_value_columns(fmt, [])
        assert len(cols.values) == len(cols.headers) == len(cols.timestamps) == 0
    assert len(window_key_columns([]).keys) == 0
    assert session_key_columns([]).second.tolist() == []


def test_column_data_outlives_the_call():
    # the values column is C's output buffer: it must stay valid after the call returns
    cols = [split_value_columns(VF.TIMESTAMPED, [bytes(8) + bytes([i]) * 50]) for i in range(200)]
    junk = [split_value_columns(VF.PLAIN, [b"\xff" * 50]) for _ in range(200)]
    assert [c.values[0] for c in cols] == [bytes([i]) * 50 for i in range(200)]
    assert len(junk) == 200


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_garbage_values_get_the_oracles_verdict_with_their_index(fmt, data):
    good = data.draw(st.lists(stored_value(fmt), max_size=3))
    bad = data.draw(garbage(stored_value(fmt)))
    raws = [*good, bad]
    try:
        expected = o.split(ofmt(fmt), bad)
    except o.OracleError:
        with pytest.raises(SerializationError, match=f"{fmt.name} value at index {len(good)}"):
            split_value_columns(fmt, raws)
    else:
        assert split_value_columns(fmt, raws).values[len(good)] == expected[0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=6))
def test_short_keys_are_refused_with_their_index(raws):
    for columns, size in ((window_key_columns, 12), (session_key_columns, 16)):
        short = [i for i, r in enumerate(raws) if len(r) < size]
        if short:
            with pytest.raises(SerializationError, match=f"at index {short[0]}: input is trunc"):
                columns(raws)
        else:
            assert columns(raws).keys.to_list() == [r[:-size] for r in raws]


def test_none_items_are_refused_with_their_index():
    with pytest.raises(InvalidArgumentError, match="HEADERS value at index 1 is None"):
        anyc(VF.HEADERS, [o.pack(o.Fmt(2), b"v", 1, b""), None])
    with pytest.raises(InvalidArgumentError, match="window store key at index 0 is None"):
        window_key_columns([None])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="session store key at index 2 is None"):
        session_key_columns([bytes(16), bytes(16), None])  # type: ignore[list-item]


def test_wrong_types_and_formats_are_typed_errors():
    with pytest.raises(InvalidTypeError, match="stored value must be bytes, got str"):
        anyc(VF.PLAIN, [b"ok", "text"])
    with pytest.raises(InvalidArgumentError, match="unknown value format 9"):
        anyc(9, [b"x"])
    # bytes-like items are taken as their bytes
    cols = split_value_columns(VF.PLAIN, [bytearray(b"ab"), memoryview(b"cd")])  # type: ignore[list-item]
    assert cols.values.to_list() == [b"ab", b"cd"]


def test_binary_column_indexing():
    col = BinaryColumn(b"abcde", array("i", [0, 2, 2, 5]))
    assert (col[0], col[1], col[2], col[-3]) == (b"ab", b"", b"cde", b"ab")
    for i in (3, -4):
        with pytest.raises(IndexError, match=f"column index {i} out of range for 3 items"):
            col[i]
    assert repr(col) == "BinaryColumn(3 items, 5 bytes)"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_columns_in_arrow_buffers_equal_the_default(fmt, data):
    # the Spark reader passes Arrow's allocator: the data buffers are then Arrow's own
    raws = data.draw(st.lists(stored_value(fmt), max_size=8))
    cols = split_value_columns(fmt, raws, pa.allocate_buffer)
    assert isinstance(cols.values.data, pa.Buffer) and isinstance(cols.headers.data, pa.Buffer)
    expected = split_value_columns(fmt, raws)
    assert cols.values.to_list() == expected.values.to_list()
    assert cols.headers.to_list() == expected.headers.to_list()
    assert cols.timestamps == expected.timestamps
    wk = [o.window_key(r[:3], 5, 1) for r in raws]
    assert window_key_columns(wk, pa.allocate_buffer).keys.to_list() == [r[:3] for r in raws]
    sk = [o.session_key(r[:3], 1, 2) for r in raws]
    assert session_key_columns(sk, pa.allocate_buffer).keys.to_list() == [r[:3] for r in raws]


def test_a_bad_buffer_from_allocate_is_a_typed_error_not_a_write_past_it():
    with pytest.raises(InvalidTypeError, match="allocate must return a writable buffer, got b"):
        split_value_columns(VF.PLAIN, [b"abc"], lambda n: bytes(n))
    with pytest.raises(InvalidArgumentError, match=r"allocate\(16\) returned a buffer of 2 bytes"):
        window_key_columns([bytes(16)], lambda n: bytearray(2))


def test_the_default_pool_reuses_only_memory_no_column_holds():
    from txstore.codecs._native import _BufferPool

    pool = _BufferPool(max_bytes=3 * 400_001)  # room for exactly three buffers
    raws = [bytes([i % 251]) * 100 for i in range(4000)]  # 400 kB: above MIN_BYTES
    kept = split_value_columns(VF.PLAIN, raws, pool.allocate)
    alive = pool.allocate(400_000)  # a buffer someone still holds
    other = split_value_columns(VF.PLAIN, [b"\xee" * 100] * 4000, pool.allocate)
    assert kept.values.to_list() == raws  # not overwritten by the later calls
    assert other.values[0] == b"\xee" * 100
    arrow = pa.py_buffer(other.values.data)  # an export keeps the buffer in use
    del other
    # only other.headers is released: `kept`, `alive` and `arrow` hold the rest
    assert [cap for cap, _ in pool._free] == [400_001]
    assert arrow.to_pybytes()[:100] == b"\xee" * 100
    del arrow, alive
    assert len(pool._free) == 3  # released: other.values, other.headers, alive
    again = split_value_columns(VF.PLAIN, raws, pool.allocate)
    assert len(pool._free) == 1 and again.values.to_list() == raws  # two reused
    del kept, again
    assert pool._kept == 3 * 400_001  # bounded: of the 5 buffers released, 3 are kept


# ---------------------------------------------------------------------------- input forms


def test_long_inputs_of_mixed_lengths_make_one_layout():
    # The C builtins size the columns in a first pass over the list, then write them: a short
    # first item and long later ones, thousands of them, still give one layout.
    values = [b"a"] + [bytes([i % 251]) * (1 + i % 700) for i in range(1, 6000)]
    raws = [o.pack(ofmt(VF.TIMESTAMPED), v, i, b"") for i, v in enumerate(values)]
    cols = split_value_columns(VF.TIMESTAMPED, raws)
    check_layout(cols.values, values)
    assert cols.timestamps.tolist() == list(range(6000))
    keys_ = [bytes([i % 256]) * (i % 40) for i in range(9000)]
    check_layout(
        window_key_columns([o.window_key(k, i, 7) for i, k in enumerate(keys_)]).keys, keys_
    )
    sk = session_key_columns(tuple(o.session_key(k, i, i + 1) for i, k in enumerate(keys_)))
    check_layout(sk.keys, keys_)
    assert sk.first.tolist() == [i + 1 for i in range(9000)]  # ends
    assert sk.second.tolist() == list(range(9000))  # starts


def test_every_bytes_like_item_and_sequence_gives_the_same_columns():
    raws = [o.window_key(b"key%d" % i, i, i) for i in range(50)]
    expected = window_key_columns(raws).keys.to_list()
    from collections import UserList

    as_arrays = [memoryview(array("q", r[:8] * 3)) for r in raws]  # len() counts 8-byte items
    assert window_key_columns(as_arrays).keys.to_list() == [bytes(m)[:-12] for m in as_arrays]  # type: ignore[arg-type]
    for form in (tuple(raws), UserList(raws), [bytearray(r) for r in raws]):
        assert window_key_columns(form).keys.to_list() == expected  # type: ignore[arg-type]


def test_a_list_changed_by_allocate_is_never_written_past_its_buffer():
    # allocate is caller code: it may change the list between the sizing pass and the copy.
    # Longer items then do not fit; the packed path re-reads the list and gives the columns
    # of what it holds now (or the typed error), never a write past the buffer.
    raws = [o.window_key(b"k%d" % i, i, i) for i in range(100)]

    def grow(n: int) -> bytearray:
        if raws[0] == o.window_key(b"k0", 0, 0):
            raws[:] = [o.window_key(b"longer key %d" % i, i, i) for i in range(100)]
        return bytearray(n)

    cols = window_key_columns(raws, grow)
    assert cols.keys.to_list() == [b"longer key %d" % i for i in range(100)]

    values = [o.pack(ofmt(VF.TIMESTAMPED), b"v", i, b"") for i in range(10)]

    def shrink(n: int) -> bytearray:
        del values[5:]
        return bytearray(n)

    got = split_value_columns(VF.TIMESTAMPED, values, shrink)
    assert got.values.to_list() == [b"v"] * 5 and got.timestamps.tolist() == list(range(5))


def test_many_calls_on_good_and_bad_input_keep_memory_flat():
    psutil = pytest.importorskip("psutil")
    good = [o.pack(ofmt(VF.HEADERS), b"x" * 50, i, b"") for i in range(200)]
    bad = [*good[:100], b"\x7f", *good[100:]]  # a headers size past the end at index 100
    keys = [o.session_key(b"k" * 20, i, i + 5) for i in range(200)]
    rss = psutil.Process().memory_info

    def rounds(k: int) -> None:
        for _ in range(k):
            split_value_columns(VF.HEADERS, good)
            session_key_columns(keys)
            with pytest.raises(SerializationError):
                split_value_columns(VF.HEADERS, bad)
            with pytest.raises(InvalidArgumentError):
                window_key_columns([*keys[:3], None])  # type: ignore[list-item]

    rounds(2000)
    before = rss().rss
    rounds(20000)
    assert rss().rss - before < 8 << 20  # a leaked buffer or list a call would be 20k of them


def test_a_bad_item_deep_in_a_long_input_is_named_by_its_index():
    raws: list[Any] = [bytes(20)] * 5000
    for bad, error, text in (
        (None, InvalidArgumentError, "window store key at index 4321 is None"),
        (12, InvalidTypeError, "window store key must be bytes, got int"),
        ("text", InvalidTypeError, "window store key must be bytes, got str"),
        (bytes(5), SerializationError, "at index 4321: input is trunc"),
    ):
        items = list(raws)
        items[4321] = bad
        with pytest.raises(error, match=text):
            window_key_columns(items)
