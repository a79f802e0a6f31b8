"""Tests of the value types in ``txstore.types`` (Kafka Streams' names and null rules)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from txstore import codecs
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.types import (
    NO_TIMESTAMP,
    AggregationWithHeaders,
    Header,
    Headers,
    KeyValue,
    SessionWindow,
    TimeWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueTimestampHeaders,
    Windowed,
)

LONG_MAX = 2**63 - 1

# Kafka's messages (org.apache.kafka.streams.kstream.Window and TimeWindow)
START_NEGATIVE = "Window startMs time cannot be negative."
END_BEFORE_START = "Window endMs time cannot be smaller than window startMs time."
END_EQUALS_START = "Window endMs must be greater than window startMs."


def _any(x: object) -> Any:
    """Pass a deliberately wrong argument (or mutate a frozen object) past the type checker."""
    return x


# ============================================================================ Headers


def test_headers_keep_insertion_order_and_duplicates():
    hs = Headers([("b", b"1"), ("a", None), ("b", b"2"), ("c", b"")])
    assert len(hs) == 4
    assert [h.key for h in hs] == ["b", "a", "b", "c"]
    assert [h.value for h in hs] == [b"1", None, b"2", b""]
    assert hs[0] == Header("b", b"1")
    assert hs[-1] == Header("c", b"")
    assert hs[1:3] == (Header("a", None), Header("b", b"2"))
    assert hs.to_list() == [
        Header("b", b"1"),
        Header("a", None),
        Header("b", b"2"),
        Header("c", b""),
    ]
    assert isinstance(hs[0], Header)
    assert hs[0].key == "b"
    assert hs[0].value == b"1"


def test_headers_empty_forms_are_equal_and_falsy():
    assert Headers() == Headers(None) == Headers([]) == Headers(iter(()))
    assert not Headers()
    assert len(Headers()) == 0
    assert list(Headers()) == []
    assert Headers([("k", None)])  # a header with a null value still counts


def test_headers_equality_is_ordered_and_by_content():
    a = Headers([("k", b"1"), ("j", None)])
    assert a == Headers([("k", b"1"), ("j", None)])
    assert a != Headers([("j", None), ("k", b"1")])  # order matters
    assert a != Headers([("k", b"1")])
    assert a != Headers([("k", b"1"), ("j", b"")])  # null value is not the empty value
    assert a != Headers([("k", b"1"), ("j", None), ("j", None)])  # duplicates count
    # not equal to a plain list (no implicit coercion)
    assert a != [("k", b"1"), ("j", None)]
    assert (a == [("k", b"1"), ("j", None)]) is False


def test_headers_hash_follows_equality():
    a = Headers([("k", b"1"), ("j", None)])
    b = Headers([("k", _any(bytearray(b"1"))), ("j", None)])  # bytes-like values are coerced
    assert a == b
    assert hash(a) == hash(b)
    assert hash(Headers()) == hash(Headers(None))
    assert len({a, b, Headers(), Headers([])}) == 2
    assert {a: 1}[b] == 1


def test_decoded_headers_behave_as_constructed_headers():
    # decode_headers hands its pairs over without the constructor's checks (Headers.from_pairs)
    # and Header tuples are made on first access: nothing of that may show
    pairs = [("b", b"1"), ("a", None), ("b", b"2"), ("c", b"")]
    built = Headers(pairs)
    decoded = codecs.decode_headers(codecs.encode_headers(pairs))
    assert decoded == built
    assert hash(decoded) == hash(built)
    assert repr(decoded) == repr(built) == f"Headers({pairs!r})"
    assert decoded.last_header("b") == b"2"
    assert decoded.headers("b") == [b"1", b"2"]
    for hs in (decoded, built):
        first = list(hs)
        assert all(type(x) is Header for x in first)
        assert first == [Header(k, v) for k, v in pairs]
        assert list(hs) == first and all(a is b for a, b in zip(hs, first, strict=True))
        assert hs[1] == Header("a", None) and hs[1].value is None
        assert hs[1:3] == (Header("a", None), Header("b", b"2"))
        assert hs.to_list() == first
        assert hs.add("d", None) == Headers([*pairs, ("d", None)])
    assert Headers.from_pairs([("k", b"v")]) == Headers([("k", b"v")])


def test_last_header():
    hs = Headers([("k", b"1"), ("j", b"x"), ("k", b"2")])
    assert hs.last_header("k") == b"2"
    assert hs.last_header("j") == b"x"
    assert hs.last_header("missing") is None
    assert Headers().last_header("k") is None
    # the last one wins even if its value is null
    assert Headers([("k", b"1"), ("k", None)]).last_header("k") is None
    assert Headers([("k", None), ("k", b"1")]).last_header("k") == b"1"


def test_headers_by_key():
    hs = Headers([("k", b"1"), ("j", b"x"), ("k", None), ("k", b"3")])
    assert hs.headers("k") == [b"1", None, b"3"]
    assert hs.headers("j") == [b"x"]
    assert hs.headers("missing") == []
    assert hs.headers("K") == []  # keys are case-sensitive


def test_headers_add_returns_new_headers_and_keeps_the_old():
    hs = Headers([("a", b"1")])
    hs2 = hs.add("a", None)
    hs3 = hs2.add("b", b"2")
    assert hs == Headers([("a", b"1")])  # unchanged: Headers are immutable
    assert hs2 == Headers([("a", b"1"), ("a", None)])
    assert hs3 == Headers([("a", b"1"), ("a", None), ("b", b"2")])
    assert hs2.headers("a") == [b"1", None]
    assert hs3 is not hs2
    assert Headers().add("k", b"v") == Headers([("k", b"v")])


def test_headers_are_immutable():
    hs = Headers([("a", b"1")])
    with pytest.raises(AttributeError):
        _any(hs).extra = 1
    with pytest.raises(TypeError):
        _any(hs)[0] = ("b", b"2")


def test_headers_of():
    hs = Headers([("a", b"1")])
    assert Headers.of(hs) is hs
    assert Headers.of(None) == Headers()
    assert Headers.of([("a", b"1")]) == hs
    assert Headers.of((("a", b"1"),)) == hs


def test_headers_coerce_bytes_like_values():
    hs = Headers([("a", bytearray(b"x")), ("b", memoryview(b"y"))])  # type: ignore[list-item]
    assert hs == Headers([("a", b"x"), ("b", b"y")])
    assert all(type(h.value) is bytes for h in hs)


def test_headers_repr():
    assert (
        repr(Headers([("a", None), ("bc", b"\x01")])) == "Headers([('a', None), ('bc', b'\\x01')])"
    )
    assert repr(Headers()) == "Headers([])"


@pytest.mark.parametrize(
    ("why", "items"),
    [
        ("key is bytes, not str", [(b"k", b"v")]),
        ("key is None", [(None, b"v")]),
        ("key is an int", [(1, b"v")]),
        ("value is str, not bytes", [("k", "v")]),
        ("value is an int", [("k", 1)]),
        ("value is a list", [("k", [1])]),
        ("item is a 3-tuple", [("k", b"v", b"w")]),
        ("item is a 1-tuple", [("k",)]),
        ("item is not iterable", [5]),
        ("item is None", [None]),
        ("a two-character str unpacks to a str value", ["kv"]),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_headers_validation_errors(why, items):
    with pytest.raises(InvalidTypeError) as info:
        Headers(items)
    assert isinstance(info.value, TypeError)


def test_headers_add_validates():
    with pytest.raises(InvalidTypeError):
        Headers().add(_any(b"k"), b"v")
    with pytest.raises(InvalidTypeError):
        Headers().add("k", _any("v"))


def test_headers_round_trip_through_the_codec():
    hs = Headers([("a", None), ("bc", b"\x01\x02"), ("a", b"")])
    enc = codecs.encode_headers(hs)
    assert enc == codecs.encode_headers(list(hs))
    assert codecs.decode_headers(enc) == hs


# ============================================================================ ValueAndTimestamp


def test_value_and_timestamp_make_none_is_none():
    assert ValueAndTimestamp.make(None, 23) is None
    assert ValueAndTimestamp.make(None, NO_TIMESTAMP) is None


def test_value_and_timestamp_make():
    vat = ValueAndTimestamp.make("v", 100)
    assert vat == ValueAndTimestamp("v", 100)
    assert vat is not None
    assert vat.value == "v"
    assert vat.timestamp == 100
    # falsy values are still values: only None means "delete"
    assert ValueAndTimestamp.make(b"", 1) == ValueAndTimestamp(b"", 1)
    assert ValueAndTimestamp.make(0, 1) == ValueAndTimestamp(0, 1)


def test_value_and_timestamp_make_validates_the_timestamp():
    with pytest.raises(InvalidTypeError):
        ValueAndTimestamp.make("v", _any(1.5))
    with pytest.raises(InvalidTypeError):
        ValueAndTimestamp.make("v", _any("100"))
    with pytest.raises(InvalidTypeError):
        ValueAndTimestamp.make("v", _any(True))
    with pytest.raises(InvalidArgumentError):
        ValueAndTimestamp.make("v", 2**63)
    with pytest.raises(InvalidArgumentError):
        ValueAndTimestamp.make("v", -(2**63) - 1)
    assert ValueAndTimestamp.make("v", LONG_MAX) == ValueAndTimestamp("v", LONG_MAX)
    assert ValueAndTimestamp.make("v", -(2**63)) == ValueAndTimestamp("v", -(2**63))


def test_value_and_timestamp_constructor_allows_none_like_make_allow_nullable():
    vat = ValueAndTimestamp(None, 5)
    assert vat.value is None
    assert ValueAndTimestamp.value_or_none(vat) is None


def test_value_or_none():
    assert ValueAndTimestamp.value_or_none(None) is None
    assert ValueAndTimestamp.value_or_none(ValueAndTimestamp("v", 1)) == "v"
    assert ValueAndTimestamp.value_or_none(ValueAndTimestamp(b"", 1)) == b""


def test_value_and_timestamp_str_is_kafkas_to_string():
    assert str(ValueAndTimestamp("v", 100)) == "<v,100>"
    assert str(ValueAndTimestamp(5, -1)) == "<5,-1>"
    assert str(ValueAndTimestamp("a b", LONG_MAX)) == f"<a b,{LONG_MAX}>"


def test_value_and_timestamp_equality_compares_value_and_timestamp():
    assert ValueAndTimestamp("v", 1) == ValueAndTimestamp("v", 1)
    assert ValueAndTimestamp("v", 1) != ValueAndTimestamp("v", 2)
    assert ValueAndTimestamp("v", 1) != ValueAndTimestamp("w", 1)
    assert hash(ValueAndTimestamp("v", 1)) == hash(ValueAndTimestamp("v", 1))


def test_value_and_timestamp_is_frozen():
    vat = ValueAndTimestamp("v", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        _any(vat).timestamp = 2


# ============================================================================ header value types


def test_value_timestamp_headers_make():
    assert ValueTimestampHeaders.make(None, 5, [("k", b"v")]) is None
    assert ValueTimestampHeaders.make(None, 5) is None
    vth = ValueTimestampHeaders.make("v", 5)
    assert vth is not None
    assert vth.headers == Headers()  # null headers are treated as empty headers
    assert isinstance(vth.headers, Headers)
    vth2 = ValueTimestampHeaders.make("v", 5, None)
    assert vth2 == vth
    vth3 = ValueTimestampHeaders.make("v", 5, [("k", b"v")])
    assert vth3 is not None
    assert isinstance(vth3.headers, Headers)
    assert vth3.headers == Headers([("k", b"v")])
    hs = Headers([("k", b"v")])
    vth4 = ValueTimestampHeaders.make("v", 5, hs)
    assert vth4 is not None
    assert vth4.headers is hs


def test_value_timestamp_headers_make_validates():
    with pytest.raises(InvalidTypeError):
        ValueTimestampHeaders.make("v", _any(1.5))
    with pytest.raises(InvalidArgumentError):
        ValueTimestampHeaders.make("v", 2**63)
    with pytest.raises(InvalidTypeError):
        ValueTimestampHeaders.make("v", 1, [("k", "not bytes")])
    with pytest.raises(InvalidTypeError):
        ValueTimestampHeaders.make("v", 1, [(b"k", b"v")])


def test_value_timestamp_headers_constructor_coerces_headers():
    vth = ValueTimestampHeaders("v", 5, _any([("k", b"v")]))
    assert isinstance(vth.headers, Headers)
    assert vth.headers == Headers([("k", b"v")])
    assert ValueTimestampHeaders("v", 5, _any(None)).headers == Headers()
    assert ValueTimestampHeaders("v", 5).headers == Headers()
    with pytest.raises(InvalidTypeError):
        ValueTimestampHeaders("v", 5, _any([("k", 1)]))
    # coerced headers are hashable, so the value is too
    assert hash(vth) == hash(ValueTimestampHeaders("v", 5, Headers([("k", b"v")])))


def test_value_timestamp_headers_equality_compares_value_timestamp_and_headers():
    base = ValueTimestampHeaders("v", 5, Headers([("k", b"v")]))
    assert base == ValueTimestampHeaders("v", 5, Headers([("k", b"v")]))
    assert base != ValueTimestampHeaders("w", 5, Headers([("k", b"v")]))
    assert base != ValueTimestampHeaders("v", 6, Headers([("k", b"v")]))
    assert base != ValueTimestampHeaders("v", 5, Headers([("k", b"w")]))
    assert base != ValueTimestampHeaders("v", 5)


@pytest.mark.parametrize("cls", [ValueAndHeaders, AggregationWithHeaders])
def test_plain_header_types_make(cls):
    assert cls.make(None) is None
    assert cls.make(None, [("k", b"v")]) is None
    made = cls.make("agg")
    assert made is not None
    assert made.headers == Headers()
    assert isinstance(made.headers, Headers)
    made2 = cls.make("agg", [("k", None)])
    assert made2 is not None
    assert made2.headers == Headers([("k", None)])
    assert isinstance(made2.headers, Headers)
    assert made2 == cls("agg", Headers([("k", None)]))
    assert made2 != cls("agg")
    assert made2 != cls("other", Headers([("k", None)]))
    hs = Headers([("k", b"v")])
    made3 = cls.make("agg", hs)
    assert made3 is not None
    assert made3.headers is hs
    # falsy but not None values are values
    assert cls.make(b"") is not None
    with pytest.raises(InvalidTypeError):
        cls.make("agg", [("k", "str value")])


@pytest.mark.parametrize("cls", [ValueAndHeaders, AggregationWithHeaders])
def test_plain_header_types_constructor_coerces_headers(cls):
    made = cls("x", [("k", b"v")])
    assert isinstance(made.headers, Headers)
    assert made.headers == Headers([("k", b"v")])
    assert cls("x", None).headers == Headers()
    assert hash(made) == hash(cls("x", Headers([("k", b"v")])))
    with pytest.raises(InvalidTypeError):
        cls("x", [(1, b"v")])


def test_aggregation_field_name():
    assert AggregationWithHeaders("agg").aggregation == "agg"
    assert ValueAndHeaders("val").value == "val"


# ============================================================================ windows


def test_time_window_valid():
    w = TimeWindow(0, 10)
    assert (w.start, w.end) == (0, 10)
    assert TimeWindow(0, LONG_MAX).end == LONG_MAX
    assert TimeWindow(LONG_MAX - 1, LONG_MAX).start == LONG_MAX - 1


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (-1, 5, START_NEGATIVE),
        (-1, -2, START_NEGATIVE),  # the start check comes first
        (-(2**63), 0, START_NEGATIVE),
        (5, 4, END_BEFORE_START),
        (5, 0, END_BEFORE_START),
        (5, 5, END_EQUALS_START),  # a TimeWindow cannot be empty
        (0, 0, END_EQUALS_START),
    ],
)
def test_time_window_errors_have_kafkas_messages(start, end, message):
    with pytest.raises(InvalidArgumentError) as info:
        TimeWindow(start, end)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_window_bounds_are_type_and_range_checked():
    with pytest.raises(InvalidTypeError):
        TimeWindow(_any(1.5), 2)
    with pytest.raises(InvalidTypeError):
        TimeWindow(0, _any("2"))
    with pytest.raises(InvalidTypeError):
        SessionWindow(_any(False), 2)
    with pytest.raises(InvalidArgumentError):
        TimeWindow(0, 2**63)
    with pytest.raises(InvalidArgumentError):
        SessionWindow(0, 2**63)


def test_time_window_for_size():
    assert TimeWindow.for_size(100, 50) == TimeWindow(100, 150)
    assert TimeWindow.for_size(0, LONG_MAX) == TimeWindow(0, LONG_MAX)  # no overflow yet
    assert TimeWindow.for_size(LONG_MAX - 1, 1) == TimeWindow(LONG_MAX - 1, LONG_MAX)
    with pytest.raises(InvalidArgumentError, match="greater than"):
        TimeWindow.for_size(10, 0)  # an empty TimeWindow is still refused


@pytest.mark.parametrize(
    ("start", "size"),
    [(50, LONG_MAX - 1), (1, LONG_MAX), (LONG_MAX - 1, 2), (LONG_MAX - 1, LONG_MAX)],
)
def test_time_window_for_size_overflow_clamps_to_long_max(start, size):
    # In Java start + size wraps to a negative long and timeWindowForSize clamps it.
    assert TimeWindow.for_size(start, size) == TimeWindow(start, LONG_MAX)


def test_serialize_deserialize_overflow_window_size():
    # WindowKeySchemaTest.testSerializeDeserializeOverflowWindowSize: a store key for a window
    # starting at 50, read back with windowSize = Long.MAX_VALUE - 1, gives [50, Long.MAX).
    key, start, _seq = codecs.extract_window_key(codecs.window_key(b"key", 50, 0))
    windowed = Windowed(key, TimeWindow.for_size(start, LONG_MAX - 1))
    assert windowed == Windowed(b"key", TimeWindow(50, LONG_MAX))


def test_session_window():
    assert SessionWindow(5, 5) == SessionWindow(5, 5)  # a single-event session is allowed
    assert SessionWindow(0, 0).end == 0
    assert SessionWindow(1, LONG_MAX).end == LONG_MAX
    with pytest.raises(InvalidArgumentError) as info:
        SessionWindow(-1, 5)
    assert str(info.value) == START_NEGATIVE
    with pytest.raises(InvalidArgumentError) as info:
        SessionWindow(5, 4)
    assert str(info.value) == END_BEFORE_START


def test_windows_are_frozen_ordered_and_hashable():
    assert TimeWindow(0, 10) < TimeWindow(0, 11) < TimeWindow(1, 2)
    assert sorted([SessionWindow(3, 4), SessionWindow(1, 9), SessionWindow(1, 2)]) == [
        SessionWindow(1, 2),
        SessionWindow(1, 9),
        SessionWindow(3, 4),
    ]
    assert len({TimeWindow(0, 1), TimeWindow(0, 1), TimeWindow(0, 2)}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        _any(TimeWindow(0, 1)).end = 5


def test_time_and_session_windows_with_the_same_bounds_differ():
    # Kafka's Window.equals compares classes too
    assert TimeWindow(0, 1) != _any(SessionWindow(0, 1))


def test_windowed():
    w = Windowed("k", TimeWindow(0, 10))
    assert w.key == "k"
    assert w.window == TimeWindow(0, 10)
    assert w == Windowed("k", TimeWindow(0, 10))
    assert w != Windowed("k", TimeWindow(0, 11))
    assert w != Windowed("j", TimeWindow(0, 10))
    assert w != Windowed("k", SessionWindow(0, 10))
    assert hash(w) == hash(Windowed("k", TimeWindow(0, 10)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        _any(w).key = "j"


def test_windowed_session_key_round_trip_through_the_codec():
    w = Windowed(b"a", SessionWindow(10, 20))
    raw = codecs.session_key(w.key, w.window.start, w.window.end)
    assert raw.hex() == "61" + "0000000000000014" + "000000000000000a"
    key, start, end = codecs.extract_session_key(raw)
    assert Windowed(key, SessionWindow(start, end)) == w


# ============================================================================ KeyValue


def test_key_value():
    kv = KeyValue("k", 1)
    assert kv.key == "k"
    assert kv.value == 1
    key, value = kv
    assert (key, value) == ("k", 1)
    assert kv == ("k", 1)
    assert kv != KeyValue("k", 2)
    assert kv[0] == "k"
    assert len(kv) == 2
    assert hash(kv) == hash(("k", 1))
    assert KeyValue[str, int]("a", 2) == KeyValue("a", 2)
    assert KeyValue("k", None).value is None
    with pytest.raises(AttributeError):
        _any(kv).key = "j"


def test_no_timestamp_is_kafkas():
    assert NO_TIMESTAMP == -1
