"""The window store contract, run against every combination of persistent / in-memory,
transactional / write-through and the four value formats."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import txstore
from txstore import (
    ConfigConflictError,
    Headers,
    InvalidArgumentError,
    InvalidTypeError,
    OffsetError,
    Serdes,
    StoreClosedError,
    TimeWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.stores.factories import Stores
from txstore.stores.window import WindowStore

FORMATS = list(ValueFormat)
RETENTION, SIZE = 120_000, 1_000
SUPPLIERS = {
    (True, ValueFormat.PLAIN): Stores.persistent_window_store,
    (True, ValueFormat.TIMESTAMPED): Stores.persistent_timestamped_window_store,
    (True, ValueFormat.HEADERS): Stores.persistent_timestamped_window_store_with_headers,
    (True, ValueFormat.PLAIN_HEADERS): Stores.persistent_window_store_with_headers,
    (False, ValueFormat.PLAIN): Stores.in_memory_window_store,
    (False, ValueFormat.TIMESTAMPED): Stores.in_memory_timestamped_window_store,
    (False, ValueFormat.HEADERS): Stores.in_memory_timestamped_window_store_with_headers,
    (False, ValueFormat.PLAIN_HEADERS): Stores.in_memory_window_store_with_headers,
}
BUILDERS: dict[ValueFormat, Any] = {
    ValueFormat.PLAIN: Stores.window_store_builder,
    ValueFormat.TIMESTAMPED: Stores.timestamped_window_store_builder,
    ValueFormat.HEADERS: Stores.timestamped_window_store_with_headers_builder,
    ValueFormat.PLAIN_HEADERS: Stores.window_store_with_headers_builder,
}
H = Headers([("h", b"x"), ("n", None)])


def wrap(fmt: ValueFormat, value: Any, ts: int = 7) -> Any:
    """The value object a store of ``fmt`` takes for the plain ``value``."""
    if value is None:
        return None
    if fmt == ValueFormat.TIMESTAMPED:
        return ValueAndTimestamp(value, ts)
    if fmt == ValueFormat.HEADERS:
        return ValueTimestampHeaders(value, ts, H)
    if fmt == ValueFormat.PLAIN_HEADERS:
        return ValueAndHeaders(value, H)
    return value


def plain(value: Any) -> Any:
    """The inner value of a wrapper (or the value itself)."""
    return getattr(value, "value", value)


class Env:
    def __init__(self, tmp_path: Any, persistent: bool, tx: bool, fmt: ValueFormat) -> None:
        self.tmp_path, self.persistent, self.tx, self.fmt = tmp_path, persistent, tx, fmt
        self.db: txstore.Database | None = None

    def open(
        self, name: str = "w", retain: bool = False, key_serde: Any = None, **kw: Any
    ) -> WindowStore[Any, Any]:
        retention, size = kw.pop("retention", RETENTION), kw.pop("size", SIZE)
        supplier = SUPPLIERS[(self.persistent, self.fmt)](
            name, retention, size, retain, transactional=self.tx
        )
        builder = BUILDERS[self.fmt](supplier, key_serde or Serdes.string(), Serdes.string())
        store: WindowStore[Any, Any]
        if not self.persistent:
            store = builder.build()
            return store
        if self.db is None or self.db.closed:
            self.db = txstore.open(self.tmp_path / "p0")
        store = builder.build(self.db)
        return store

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


@pytest.fixture(
    params=[(p, t, f) for p in (True, False) for t in (True, False) for f in FORMATS],
    ids=lambda c: f"{'lmdb' if c[0] else 'mem'}-{'tx' if c[1] else 'direct'}-{c[2].name}",
)
def env(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Env]:
    e = Env(tmp_path, *request.param)
    yield e
    e.close()


def single(it: Any) -> list[tuple[int, Any]]:
    with it:
        return [(kv.key, plain(kv.value)) for kv in it]


def ranged(it: Any) -> list[tuple[Any, int, Any]]:
    with it:
        return [(kv.key.key, kv.key.window.start, plain(kv.value)) for kv in it]


def test_put_fetch_single_window_and_overwrite(env: Env) -> None:
    w = env.open()
    f = env.fmt
    assert w.fetch("a", 0) is None
    w.put("a", wrap(f, "1"), 0)
    w.put("a", wrap(f, "2", ts=9), 0)  # same window: overwritten
    assert w.fetch("a", 0) == wrap(f, "2", ts=9)
    w.put("a", None, 0)  # deletes the window
    assert w.fetch("a", 0) is None
    if f != ValueFormat.PLAIN:  # a wrapper of None serializes to None: a delete
        w.put("b", wrap(f, "1"), 0)
        w.put(
            "b", type(wrap(f, "x")).make_allow_nullable(None, *([5] if f.has_timestamp else [])), 0
        )
        assert w.fetch("b", 0) is None


def test_fetch_ranges_are_inclusive_ordered_and_backward(env: Env) -> None:
    w = env.open()
    for t in (0, 1_000, 2_000, 3_000):
        w.put("k", wrap(env.fmt, f"v{t}"), t)
    assert single(w.fetch("k", 1_000, 3_000)) == [
        (1_000, "v1000"),
        (2_000, "v2000"),
        (3_000, "v3000"),
    ]
    assert single(w.backward_fetch("k", 1_000, 2_000)) == [(2_000, "v2000"), (1_000, "v1000")]
    assert single(w.fetch("k", 3_001, 9_000)) == []
    assert single(w.fetch("k", 5_000, 1_000)) == []  # time_from > time_to
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    instant = single(w.fetch("k", epoch + dt.timedelta(seconds=1), epoch + dt.timedelta(seconds=2)))
    assert instant == [(1_000, "v1000"), (2_000, "v2000")]


def test_single_key_fetch_never_returns_a_longer_key(env: Env) -> None:
    w = env.open()
    for k in ("a", "aa", "a\x00", "ab", "b"):
        w.put(k, wrap(env.fmt, k), 100)
    assert single(w.fetch("a", 0, 1_000)) == [(100, "a")]
    assert w.fetch("a", 100) == wrap(env.fmt, "a")
    b = env.open("bytes", key_serde=Serdes.bytes())
    for kb in (b"\x00", b"\x00\x00", b"\x00\x00\x00\x00"):
        b.put(kb, wrap(env.fmt, kb.hex()), 0)
    assert single(b.fetch(b"\x00", 0, 10)) == [(0, "00")]
    assert single(b.fetch(b"\x00\x00", 0, 10)) == [(0, "0000")]


# Rows whose key order and time order differ, in two segments (60 s each): persistent stores
# return segment, then key, then time (Kafka's RocksDBWindowStore over WindowKeySchema keys);
# in-memory stores return time, then key, then sequence number (Kafka's InMemoryWindowStore).
ORDER_ROWS = (("c", 500), ("b", 0), ("a", 1_000), ("a", 0), ("d", 70_000), ("a", 71_000))
SEGMENT_KEY_TIME = [("a", 0), ("a", 1_000), ("b", 0), ("c", 500), ("a", 71_000), ("d", 70_000)]
TIME_KEY = [("a", 0), ("b", 0), ("c", 500), ("a", 1_000), ("d", 70_000), ("a", 71_000)]


def put_order_rows(env: Env, w: WindowStore[Any, Any]) -> list[tuple[str, int]]:
    """Write :data:`ORDER_ROWS`; return the order this backend iterates them in."""
    for k, t in ORDER_ROWS:
        w.put(k, wrap(env.fmt, f"{k}{t}"), t)
    return SEGMENT_KEY_TIME if env.persistent else TIME_KEY


def keys_times(it: Any) -> list[tuple[str, int]]:
    got = ranged(it)
    assert all(v == f"{k}{t}" for k, t, v in got)
    return [(k, t) for k, t, _ in got]


def test_key_range_fetch_order_per_backend(env: Env) -> None:
    w = env.open()
    order = put_order_rows(env, w)
    in_range = [r for r in order if "a" <= r[0] <= "c"]
    assert keys_times(w.fetch("a", "c", 0, 100_000)) == in_range
    assert keys_times(w.backward_fetch("a", "c", 0, 100_000)) == in_range[::-1]
    assert keys_times(w.fetch(None, "b", 0, 0)) == [("a", 0), ("b", 0)]
    assert keys_times(w.fetch("c", None, 0, 80_000)) == [r for r in order if r[0] >= "c"]
    assert keys_times(w.fetch(None, None, 0, 100_000)) == order
    # a single key's windows are in time order on both backends
    assert single(w.fetch("a", 0, 100_000)) == [(0, "a0"), (1_000, "a1000"), (71_000, "a71000")]
    assert [t for t, _ in single(w.backward_fetch("a", 0, 100_000))] == [71_000, 1_000, 0]
    with w.fetch("a", "a", 0, 0) as it:
        kv = next(it)
        assert kv.key == Windowed("a", TimeWindow(0, SIZE))


def test_fetch_all_and_all_order_per_backend(env: Env) -> None:
    w = env.open()
    order = put_order_rows(env, w)
    first_segment = [r for r in order if r[1] <= 1_000]
    assert keys_times(w.fetch_all(0, 1_000)) == first_segment
    assert keys_times(w.backward_fetch_all(0, 1_000)) == first_segment[::-1]
    assert keys_times(w.fetch_all(0, 100_000)) == order
    assert keys_times(w.all()) == order
    assert keys_times(w.backward_all()) == order[::-1]
    ro = w.read_committed()  # a read-committed view iterates in its store's order
    w.commit(1)
    assert keys_times(ro.all()) == order
    assert keys_times(ro.backward_fetch_all(0, 100_000)) == order[::-1]
    assert keys_times(ro.fetch("a", "c", 0, 100_000)) == [r for r in order if r[0] <= "c"]


def test_retained_duplicates_order_per_backend(env: Env) -> None:
    """With duplicates, Kafka's in-memory store orders one start time's rows by the bytes
    ``key || I(seqnum)``: one key's duplicates in put order."""
    w = env.open("dups", retain=True)
    for k, t, v in (("b", 0, "b1"), ("a", 1_000, "a2"), ("a", 0, "a3"), ("b", 0, "b4")):
        w.put(k, wrap(env.fmt, v), t)
    got = [(k, t, v) for k, t, v in ranged(w.all())]
    if env.persistent:
        assert got == [("a", 0, "a3"), ("a", 1_000, "a2"), ("b", 0, "b1"), ("b", 0, "b4")]
    else:
        assert got == [("a", 0, "a3"), ("b", 0, "b1"), ("b", 0, "b4"), ("a", 1_000, "a2")]
    assert ranged(w.backward_fetch("a", "b", 0, 1_000)) == got[::-1]


def test_key_range_upper_bound_truncation(env: Env) -> None:
    """OrderedBytes.upperRange: a key in range whose timestamp's first byte is above the next
    key byte would sort past an untruncated bound ("a" at ts 0x63.. > "ab" + suffix)."""
    w = env.open("big", retention=2**62, size=1)
    huge = 0x63_00_00_00_00_00_00_00  # L(huge) starts with 0x63 > 'b' (0x62)
    w.put("ab", wrap(env.fmt, "ab"), huge)
    w.put("a", wrap(env.fmt, "a"), huge)  # raw key 61 63 00.. sorts after 61 62 ..
    w.put("ab\x00", wrap(env.fmt, "ab0"), huge)
    w.put("b", wrap(env.fmt, "b"), huge)
    got = ranged(w.fetch("a", "ab", 0, 2**63 - 1))
    assert sorted(v for _, _, v in got) == ["a", "ab"]
    assert sorted(k for k, _, _ in ranged(w.fetch_all(0, 2**63 - 1))) == ["a", "ab", "ab\x00", "b"]


def test_from_greater_than_to_is_empty_and_warns(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    w = env.open()
    w.put("a", wrap(env.fmt, "1"), 0)
    w.put("z", wrap(env.fmt, "1"), 0)
    with caplog.at_level(logging.WARNING, logger="txstore"):
        assert ranged(w.fetch("z", "a", 0, 10)) == []
        assert ranged(w.backward_fetch("z", "a", 0, 10)) == []
    assert "Returning empty iterator for fetch with invalid key range: from > to" in caplog.text


def test_retain_duplicates(env: Env) -> None:
    w = env.open("dups", retain=True)
    w.put("k", wrap(env.fmt, "1"), 5)
    w.put("k", wrap(env.fmt, "2"), 5)
    w.put("k", None, 5)  # a no-op with duplicates: nothing deleted, no sequence number used
    w.put("k", wrap(env.fmt, "3"), 6)
    assert single(w.fetch("k", 0, 10)) == [(5, "1"), (5, "2"), (6, "3")]
    assert w.seqnum == 3
    assert plain(w.fetch("k", 6)) == "3"  # the single-window fetch uses the current seqnum
    assert w.fetch("k", 5) is None
    raw = w.bytes_store
    keys = []
    with raw.all() as it:
        keys = [k for k, _ in it]
    assert keys == [
        b"k" + (t).to_bytes(8, "big") + s.to_bytes(4, "big") for t, s in ((5, 1), (5, 2), (6, 3))
    ]


def test_window_end_is_start_plus_size_clamped(env: Env) -> None:
    w = env.open("wide", retention=2**63 - 1, size=2**63 - 2)
    w.put("k", wrap(env.fmt, "v"), 5)
    with w.all() as it:
        assert next(it).key.window == TimeWindow(5, 2**63 - 1)


def test_iterators_peek_close_and_store_close(env: Env) -> None:
    w = env.open()
    w.put("a", wrap(env.fmt, "1"), 0)
    w.put("a", wrap(env.fmt, "2"), 10)
    with w.fetch("a", 0, 10) as it:
        assert it.peek_next_key() == 0 and it.has_next()
        assert next(it).key == 0
        assert it.peek_next_key() == 10
        next(it)
        assert not it.has_next() and it.peek_next_key() is None
    it1 = w.fetch("a", 0, 10)
    it2 = w.all()
    w.close()
    w.close()
    assert list(it1) == [] and list(it2) == []
    with pytest.raises(StoreClosedError):
        w.fetch("a", 0)
    with pytest.raises(StoreClosedError):
        w.put("a", wrap(env.fmt, "1"), 0)


def test_writes_while_iterating_do_not_break_the_iterator(env: Env) -> None:
    w = env.open()
    for t in range(0, 400_000, 1_000):
        w.put("k", wrap(env.fmt, str(t)), t)  # later puts expire earlier segments
    with w.fetch("k", 0, 2**40) as it:
        first = next(it)
        for t in range(400_000, 450_000, 1_000):
            w.put("k", wrap(env.fmt, str(t)), t)
        rest = list(it)
    assert first.key == 280_000  # observed 399000: actual from 279001
    assert all(a.key < b.key for a, b in zip([first, *rest], rest, strict=False))


def test_bad_input_typed_errors_lose_nothing(env: Env) -> None:
    w = env.open()
    w.put("keep", wrap(env.fmt, "v"), 0)
    w.commit(1)
    with pytest.raises(InvalidArgumentError):
        w.put(None, wrap(env.fmt, "v"), 0)
    with pytest.raises(InvalidArgumentError):
        w.fetch(None, 0, 10)
    with pytest.raises(InvalidTypeError):
        w.put(b"bytes-key", wrap(env.fmt, "v"), 0)
    with pytest.raises(InvalidTypeError):
        w.put("k", wrap(env.fmt, 123), 0)
    with pytest.raises(InvalidTypeError):
        w.put("k", wrap(env.fmt, "v"), "0")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        w.put("k", wrap(env.fmt, "v"), -1)
    with pytest.raises(InvalidArgumentError):
        w.put("x" * 600, wrap(env.fmt, "v"), 0)
    with pytest.raises(InvalidTypeError):
        w.fetch("k", 0, 1, 2, 3)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError):
        w.fetch("k", dt.datetime(2024, 1, 1), 5)  # naive datetime
    if env.fmt != ValueFormat.PLAIN:
        with pytest.raises(InvalidTypeError):
            w.put("k", "bare value in a wrapped format", 0)
    assert plain(w.fetch("keep", 0)) == "v"
    assert single(w.fetch("k", 0, 10)) == []


def test_commit_offsets_and_recover(env: Env) -> None:
    w = env.open()
    assert w.committed_offset is None
    w.put("a", wrap(env.fmt, "committed"), 0)
    w.commit(5)
    with pytest.raises(OffsetError):
        w.commit(4)
    w.put("a", wrap(env.fmt, "uncommitted"), 0)
    w.put("b", wrap(env.fmt, "uncommitted"), 0)
    assert w.recover(5) is True and w.recover(6) is False
    if env.tx:
        assert plain(w.fetch("a", 0)) == "committed" and w.fetch("b", 0) is None
        assert w.approximate_num_uncommitted_bytes() == 0
    else:
        assert plain(w.fetch("a", 0)) == "uncommitted"


def test_read_committed_view_isolation(env: Env) -> None:
    w = env.open()
    w.put("a", wrap(env.fmt, "1"), 0)
    w.commit(0)
    w.put("a", wrap(env.fmt, "2"), 0)
    w.put("b", wrap(env.fmt, "3"), 70_000)
    view = w.read_committed()
    if env.tx:
        assert plain(view.fetch("a", 0)) == "1" and view.fetch("b", 70_000) is None
        assert ranged(view.all()) == [("a", 0, "1")]
    else:
        assert plain(view.fetch("a", 0)) == "2"
    w.commit(1)
    assert plain(view.fetch("b", 70_000)) == "3"
    assert not hasattr(view, "put") and not hasattr(view, "commit")
    view.close()


@pytest.mark.parametrize("tx", [True, False], ids=["tx", "direct"])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_reopen_keeps_committed_state_only(tmp_path: Any, tx: bool, fmt: ValueFormat) -> None:
    env = Env(tmp_path, True, tx, fmt)
    w = env.open()
    w.put("a", wrap(fmt, "1"), 0)
    w.put("a", wrap(fmt, "2"), 65_000)
    w.commit(3)
    w.put("b", wrap(fmt, "x"), 0)
    env.close()
    w2 = env.open()
    assert w2.committed_offset == 3 and w2.observed_stream_time == -1
    assert single(w2.fetch("a", 0, 10**6)) == [(0, "1"), (65_000, "2")]
    assert w2.fetch("b", 0) == (None if tx else wrap(fmt, "x"))
    env.close()


def test_conflicting_reopen(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        db.window_store(
            "w", Serdes.string(), Serdes.long(), retention_period=RETENTION, window_size=SIZE
        )
    with txstore.open(tmp_path / "p") as db:
        kws: list[dict[str, Any]] = [
            {"retention_period": RETENTION * 2, "window_size": SIZE},
            {"retention_period": RETENTION, "window_size": SIZE + 1},
            {"retention_period": RETENTION, "window_size": SIZE, "retain_duplicates": True},
        ]
        for kw in kws:
            with pytest.raises(ConfigConflictError):
                db.window_store("w", Serdes.string(), Serdes.long(), **kw)
        with pytest.raises(ConfigConflictError, match="value_serde"):
            db.window_store(
                "w", Serdes.string(), Serdes.string(), retention_period=RETENTION, window_size=SIZE
            )
        with pytest.raises(ConfigConflictError, match="kind"):
            db.session_store("w", Serdes.string(), Serdes.long(), retention_period=RETENTION)
        with pytest.raises(ConfigConflictError, match="kind"):
            db.key_value_store("w", Serdes.string(), Serdes.long())
        w = db.window_store(
            "w", Serdes.string(), Serdes.long(), retention_period=RETENTION, window_size=SIZE
        )
        w.put("ok", 1, 0)
        with pytest.raises(InvalidArgumentError, match="already open"):
            db.window_store(
                "w", Serdes.string(), Serdes.long(), retention_period=RETENTION, window_size=SIZE
            )


def test_multi_store_commit_with_window_and_kv(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        kv = db.key_value_store("kv", Serdes.string(), Serdes.long())
        w = db.window_store(
            "w", Serdes.string(), Serdes.long(), retention_period=RETENTION, window_size=SIZE
        )
        kv.put("x", 1)
        w.put("x", 2, 0)
        db.commit({"kv": 4, "w": 4})
        assert (kv.committed_offset, w.committed_offset) == (4, 4)
        assert w.read_committed().fetch("x", 0) == 2


def test_stored_bytes_are_kafka_layout(tmp_path: Any) -> None:
    """kafka-formats.md sections 1.3, 1.5, 2.1, 3.1 and 4.4, byte for byte, as stored."""
    h = Headers([("k", b"v")])
    cases = [
        (ValueFormat.PLAIN, "val", "76616c"),
        (ValueFormat.TIMESTAMPED, ValueAndTimestamp("val", 1000), "00000000000003e876616c"),
        (ValueFormat.HEADERS, ValueTimestampHeaders("val", 1000, h),
         "0a02026b027600000000000003e876616c"),
        (ValueFormat.PLAIN_HEADERS, ValueAndHeaders("val", h), "0a02026b027676616c"),
    ]  # fmt: skip
    with txstore.open(tmp_path / "p") as db:
        for fmt, value, hex_value in cases:
            name = f"w{fmt.value}"
            w = db.window_store(name, Serdes.string(), Serdes.string(), retention_period=RETENTION,
                                window_size=SIZE, format=fmt)  # fmt: skip
            w.put("a", value, 1000)
            w.commit(0)
            key = bytes.fromhex("61 00000000000003e8 00000000")
            assert db.partition.get(f"{name}.0".encode(), key) == bytes.fromhex(hex_value)
        d = db.window_store("d", Serdes.string(), Serdes.string(), retention_period=RETENTION,
                            window_size=SIZE, retain_duplicates=True)  # fmt: skip
        d.put("a", "x", 1000)
        i = db.window_store("i", Serdes.integer(), Serdes.string(), retention_period=RETENTION,
                            window_size=SIZE)  # fmt: skip
        i.put(1, "x", 60_000)
        big = db.window_store("big", Serdes.string(), Serdes.string(),
                              retention_period=2 * 1700000000000, window_size=SIZE,
                              retain_duplicates=True)  # fmt: skip
        for _ in range(7):
            big.put("key", "x", 1700000000000)
        db.commit({"d": 0, "i": 0, "big": 0})
        assert db.partition.get(b"d.0", bytes.fromhex("61 00000000000003e8 00000001")) == b"x"
        assert db.partition.get(b"i.60000", bytes.fromhex("00000001 000000000000ea60 00000000"))
        big_db = big.bytes_store.segment_db(big.bytes_store.segment_ids()[0])
        assert db.partition.get(big_db, bytes.fromhex("6b6579 0000018bcfe56800 00000007"))
