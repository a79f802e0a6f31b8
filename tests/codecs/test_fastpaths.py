"""The C fast paths of the single-item codecs (``csrc/fastpaths.c``): each builtin must give
what the Python function behind it gives, for every input, and leave every error to it."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oracle as o
from txstore import codecs as c
from txstore.codecs import LONG_MAX, keys, records, values
from txstore.codecs import ValueFormat as VF
from txstore.codecs.converters import value_converter
from txstore.codecs.values import pack_value, split_value
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError

FORMATS = list(VF)
cx: Any = c  # for calls with the wrong types on purpose


def stored(rng: random.Random, fmt: VF) -> bytes:
    """A well-formed stored value of ``fmt`` (headers sizes of one and of two varint bytes)."""
    headers = rng.randbytes(rng.choice((0, 1, 63, 64, 300)))
    ts = rng.randint(-(2**63), 2**63 - 1)
    return pack_value(fmt, rng.randbytes(rng.randint(0, 40)), ts, headers)


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
def test_each_conversion_gives_what_split_and_pack_give(src: VF, dst: VF) -> None:
    rng = random.Random(int(src) * 4 + int(dst))
    convert = value_converter(src, dst)
    for _ in range(300):
        raw = stored(rng, src)
        value, ts, headers = split_value(src, raw)
        want = pack_value(dst, value, -1 if ts is None else ts, headers)
        got = convert(raw)
        assert got == want and type(got) is bytes
        if src == dst:
            assert got is raw  # unchanged: the same object
    assert convert(None) is None


ODD = [b"", b"\x00", b"1234567", b"\x01" + bytes(20), b"\x81\x00" + bytes(20), b"\x06\x00"]


def checked(raw: bytes, src: VF, dst: VF) -> bytes | type[Exception]:
    try:
        value, ts, headers = split_value(src, raw)
        return pack_value(dst, value, -1 if ts is None else ts, headers)
    except (SerializationError, InvalidTypeError) as exc:
        return type(exc)


@pytest.mark.parametrize("src", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dst", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("raw", ODD, ids=repr)
def test_what_c_does_not_take_goes_to_the_python_function(src: VF, dst: VF, raw: bytes) -> None:
    # Too short, a negative or a non-canonical headers size, buffers that are not bytes:
    # the typed error or the bytes the checked path gives.
    convert = value_converter(src, dst)
    want = checked(raw, src, dst)
    for item in (raw, bytearray(raw), memoryview(raw)):
        if isinstance(want, bytes):
            assert convert(item) == want  # type: ignore[arg-type]
        else:
            with pytest.raises(want):
                convert(item)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        convert("text")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.integers(0, 10**6),
        st.sampled_from([0, 1, -1, LONG_MAX, LONG_MAX + 1, -LONG_MAX - 1]),
    ),
    st.one_of(st.integers(1, 1000), st.integers(1, LONG_MAX)),
)
def test_segment_function_matches_the_oracle(ts: int, interval: int) -> None:
    segment_of = c.segment_id_function(interval)
    if -LONG_MAX - 1 <= ts <= LONG_MAX:
        assert segment_of(ts) == o.segment_id(ts, interval) == c.segment_id(ts, interval)
    else:
        with pytest.raises(InvalidArgumentError):
            segment_of(ts)


@pytest.mark.parametrize(("bad", "error"), [(1.5, InvalidTypeError), ("1", InvalidTypeError)])
def test_segment_function_leaves_bad_timestamps_to_the_checked_path(
    bad: object, error: type
) -> None:
    with pytest.raises(error):
        c.segment_id_function(60_000)(bad)  # type: ignore[arg-type]
    with pytest.raises(error):
        c.segment_id(bad, 60_000)  # type: ignore[arg-type]


INT_MIN = -(2**31)


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=40),
    st.integers(-LONG_MAX - 1, LONG_MAX),
    st.integers(INT_MIN, 2**31 - 1),
    st.integers(-LONG_MAX - 1, LONG_MAX),
)
def test_key_functions_give_what_the_python_functions_give(
    key: bytes, ts: int, seq: int, end: int
) -> None:
    wk = c.window_key(key, ts, seq)
    assert wk == keys._window_key(key, ts, seq) and c.window_key(key, ts) == key + ts.to_bytes(
        8, "big", signed=True
    ) + bytes(4)
    assert c.extract_window_key(wk) == keys._extract_window_key(wk) == (key, ts, seq)
    sk = c.session_key(key, ts, end)
    assert sk == keys._session_key(key, ts, end)
    assert c.extract_session_key(sk) == keys._extract_session_key(sk) == (key, ts, end)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: cx.window_key("k", 1, 0), InvalidTypeError),
        (lambda: c.window_key(b"k", 2**63, 0), InvalidArgumentError),
        (lambda: c.window_key(b"k", 1, 2**31), InvalidArgumentError),
        (lambda: cx.window_key(b"k", 1.5, 0), InvalidTypeError),
        (lambda: cx.session_key(b"k", 1, None), InvalidTypeError),
        (lambda: c.extract_window_key(b"\x00" * 11), SerializationError),
        (lambda: c.extract_session_key(b"\x00" * 15), SerializationError),
        (lambda: cx.extract_session_key("text"), InvalidTypeError),
    ],
)
def test_key_functions_leave_bad_input_to_the_python_functions(call: Any, error: type) -> None:
    with pytest.raises(error):
        call()


def test_key_functions_take_buffers_and_keywords_as_the_python_functions_do() -> None:
    buf: Any = bytearray(b"a")
    assert cx.window_key(buf, 1, seq=2) == keys._window_key(buf, 1, 2)
    assert cx.extract_window_key(memoryview(c.window_key(b"a", 1, 2))) == (b"a", 1, 2)
    assert c.session_key(key=b"a", start=1, end=2) == keys._session_key(b"a", 1, 2)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(FORMATS),
    st.binary(max_size=30),
    st.integers(-LONG_MAX - 1, LONG_MAX),
    st.binary(max_size=100),
    st.integers(INT_MIN, 2**31 - 1),
)
def test_value_functions_give_what_the_python_functions_give(
    fmt: VF, value: bytes, ts: int, headers: bytes, n: int
) -> None:
    raw = c.pack_value(fmt, value, ts, headers)
    assert raw == values._pack_value(fmt, value, ts, headers)
    assert c.pack_value(fmt, value) == values._pack_value(fmt, value)
    assert c.split_value(fmt, raw) == values._split_value(fmt, raw)
    assert c.record_to_value(fmt, value, ts, headers) == records._record_to_value(
        fmt, value, ts, headers
    )
    assert c.record_to_value(fmt, None, ts, headers) is None
    enc = c.encode_varint(n)
    assert enc == values._encode_varint(n)
    assert (
        c.decode_varint(b"x" + enc, 1) == values._decode_varint(b"x" + enc, 1) == (n, len(enc) + 1)
    )


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: cx.encode_varint(2**31), InvalidArgumentError),
        (lambda: cx.encode_varint("1"), InvalidTypeError),
        (lambda: cx.decode_varint(b"\x80"), SerializationError),
        (lambda: cx.decode_varint(b"\x00", 1), SerializationError),
        (lambda: cx.decode_varint("a"), InvalidTypeError),
        (lambda: cx.split_value(VF.TIMESTAMPED, b"1234567"), SerializationError),
        (lambda: cx.split_value(VF.HEADERS, b"\x06\x00"), SerializationError),
        (lambda: cx.split_value(7, b"x"), InvalidArgumentError),
        (lambda: cx.pack_value(VF.HEADERS, "v", 1, b""), InvalidTypeError),
        (lambda: cx.pack_value(VF.TIMESTAMPED, b"v", 2**63), InvalidArgumentError),
        (lambda: cx.record_to_value(VF.HEADERS, b"v", 1, "h"), InvalidTypeError),
    ],
)
def test_value_functions_leave_bad_input_to_the_python_functions(call: Any, error: type) -> None:
    with pytest.raises(error):
        call()


def test_value_functions_take_other_forms_as_the_python_functions_do() -> None:
    # plain ints for formats, buffers, keywords, negative offsets: the Python function's answer
    assert cx.split_value(1, b"\x00" * 8 + b"v") == (b"v", 0, b"")
    assert cx.pack_value(VF.TIMESTAMPED, bytearray(b"v"), timestamp=3) == bytes(7) + b"\x03v"
    assert cx.decode_varint(b"\x02\x04", offset=-1) == values._decode_varint(b"\x02\x04", -1)
    assert cx.split_value(VF.HEADERS, memoryview(b"\x00" + bytes(8))) == (b"", 0, b"")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(max_size=70), st.one_of(st.none(), st.binary(max_size=70))),
        max_size=4,
    )
)
def test_decode_headers_gives_what_the_python_function_gives(
    pairs: list[tuple[str, bytes | None]],
) -> None:
    buf = c.encode_headers(pairs)
    got = c.decode_headers(buf)
    assert got == values._decode_headers(buf) and list(got.pairs) == pairs
    assert c.decode_headers(b"") is values._decode_headers(b"")  # the empty headers
    assert c.decode_headers(b"\x00").pairs == []  # an explicit count of 0


@pytest.mark.parametrize(
    "bad", [b"\x02", b"\x02\x02a", b"\x02\x02\xff\x00", b"\x02\x02a\x04b", b"\x02\x00\x00\x00"]
)
def test_decode_headers_leaves_bad_input_to_the_python_function(bad: bytes) -> None:
    with pytest.raises(SerializationError):
        c.decode_headers(bad)
    with pytest.raises(SerializationError):
        values._decode_headers(bad)
