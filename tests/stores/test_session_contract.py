"""The session store contract: persistent / in-memory x transactional / write-through x the four
value formats (plain, with headers, timestamped, timestamped with headers; kafka-formats.md
sections 1.4, 3.3, 4.3 and 4.5)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import txstore
from txstore import (
    AggregationWithHeaders,
    ConfigConflictError,
    Headers,
    InvalidArgumentError,
    InvalidTypeError,
    Serdes,
    SessionWindow,
    StoreClosedError,
    TimeWindow,
    UnsupportedOperationError,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.stores.factories import Stores
from txstore.stores.session import SessionStore

FORMATS = [
    ValueFormat.PLAIN,
    ValueFormat.PLAIN_HEADERS,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
]
RETENTION = 120_000
SUPPLIERS = {
    (True, ValueFormat.PLAIN): Stores.persistent_session_store,
    (True, ValueFormat.PLAIN_HEADERS): Stores.persistent_session_store_with_headers,
    (False, ValueFormat.PLAIN): Stores.in_memory_session_store,
    (False, ValueFormat.PLAIN_HEADERS): Stores.in_memory_session_store_with_headers,
    (True, ValueFormat.TIMESTAMPED): Stores.persistent_timestamped_session_store,
    (True, ValueFormat.HEADERS): Stores.persistent_timestamped_session_store_with_headers,
    (False, ValueFormat.TIMESTAMPED): Stores.in_memory_timestamped_session_store,
    (False, ValueFormat.HEADERS): Stores.in_memory_timestamped_session_store_with_headers,
}
BUILDERS: dict[ValueFormat, Any] = {
    ValueFormat.PLAIN: Stores.session_store_builder,
    ValueFormat.PLAIN_HEADERS: Stores.session_store_with_headers_builder,
    ValueFormat.TIMESTAMPED: Stores.timestamped_session_store_builder,
    ValueFormat.HEADERS: Stores.timestamped_session_store_with_headers_builder,
}


def wrap(fmt: ValueFormat, value: Any) -> Any:
    if value is None or fmt == ValueFormat.PLAIN:
        return value
    if fmt == ValueFormat.TIMESTAMPED:
        return ValueAndTimestamp(value, 42)
    if fmt == ValueFormat.HEADERS:
        return ValueTimestampHeaders(value, 42, Headers([("h", b"x")]))
    return AggregationWithHeaders(value, Headers([("h", b"x")]))


def agg(value: Any) -> Any:
    if isinstance(value, (ValueAndTimestamp, ValueTimestampHeaders)):
        assert value.timestamp == 42  # the timestamp comes back with the aggregation
        return value.value
    return getattr(value, "aggregation", value)


def sk(key: Any, start: int, end: int) -> Windowed[Any]:
    return Windowed(key, SessionWindow(start, end))


class Env:
    def __init__(self, tmp_path: Any, persistent: bool, tx: bool, fmt: ValueFormat) -> None:
        self.tmp_path, self.persistent, self.tx, self.fmt = tmp_path, persistent, tx, fmt
        self.db: txstore.Database | None = None

    def open(self, name: str = "s", key_serde: Any = None) -> SessionStore[Any, Any]:
        supplier = SUPPLIERS[(self.persistent, self.fmt)](name, RETENTION, transactional=self.tx)
        builder = BUILDERS[self.fmt](supplier, key_serde or Serdes.string(), Serdes.long())
        store: SessionStore[Any, Any]
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


def sessions(it: Any) -> list[tuple[Any, int, int, Any]]:
    with it:
        return [(kv.key.key, kv.key.window.start, kv.key.window.end, agg(kv.value)) for kv in it]


def test_put_fetch_session_remove(env: Env) -> None:
    s = env.open()
    s.put(sk("a", 10, 20), wrap(env.fmt, 1))
    assert s.fetch_session("a", 10, 20) == wrap(env.fmt, 1)
    assert s.fetch_session("a", 10, 21) is None  # exact match only
    s.put(sk("a", 10, 20), wrap(env.fmt, 2))
    assert agg(s.fetch_session("a", 10, 20)) == 2
    s.put(sk("a", 10, 20), None)  # None deletes
    assert s.fetch_session("a", 10, 20) is None
    s.put(sk("a", 30, 40), wrap(env.fmt, 3))
    s.remove(sk("a", 30, 40))
    assert s.fetch_session("a", 30, 40) is None
    s.remove(sk("zz", 0, 0))  # nothing to remove: no error


def test_find_sessions_earliest_end_latest_start(env: Env) -> None:
    s = env.open()
    for start, end in ((0, 5), (10, 20), (30, 40), (50, 50)):
        s.put(sk("a", start, end), wrap(env.fmt, start))
    s.put(sk("aa", 10, 20), wrap(env.fmt, 99))  # never in a single-key search of "a"
    # end >= 15 and start <= 30
    assert sessions(s.find_sessions("a", 15, 30)) == [("a", 10, 20, 10), ("a", 30, 40, 30)]
    assert sessions(s.backward_find_sessions("a", 15, 30)) == [
        ("a", 30, 40, 30),
        ("a", 10, 20, 10),
    ]
    assert [x[1] for x in sessions(s.fetch("a"))] == [0, 10, 30, 50]
    assert [x[1] for x in sessions(s.backward_fetch("a"))] == [50, 30, 10, 0]


def test_key_range_find_sessions_and_fetch(env: Env) -> None:
    s = env.open()
    for key in ("c", "a", "b", "d"):
        s.put(sk(key, 0, 10), wrap(env.fmt, 1))
        s.put(sk(key, 100, 70_000), wrap(env.fmt, 2))  # a second segment (by end)
    got = sessions(s.find_sessions("a", "c", 0, 2**62))
    assert [(k, e) for k, _, e, _ in got] == [
        ("a", 10), ("b", 10), ("c", 10), ("a", 70_000), ("b", 70_000), ("c", 70_000)
    ]  # fmt: skip
    assert sessions(s.backward_find_sessions("a", "c", 0, 2**62)) == got[::-1]
    assert [k for k, *_ in sessions(s.fetch("c", None))] == ["c", "d", "c", "d"]
    assert [k for k, *_ in sessions(s.fetch(None, "a"))] == ["a", "a"]
    assert len(sessions(s.backward_fetch(None, None))) == 8


# Sessions whose key order and end order differ, two with the same key and end, in two 60 s
# segments (by end). Persistent stores return segment, then key, end, start (Kafka's
# RocksDBSessionStore over SessionKeySchema keys); in-memory stores return end, then key, then
# start **descending** (Kafka's InMemorySessionStore: end -> key -> start, the starts of one
# end and key walked from the latest).
ORDER_SESSIONS = (("c", 0, 100), ("b", 0, 100), ("a", 10, 200), ("a", 50, 200),
                  ("b", 65_000, 65_000), ("a", 0, 70_000))  # fmt: skip
SEGMENT_KEY_END_START = [("a", 10, 200), ("a", 50, 200), ("b", 0, 100), ("c", 0, 100),
                         ("a", 0, 70_000), ("b", 65_000, 65_000)]  # fmt: skip
END_KEY_START_DESC = [("b", 0, 100), ("c", 0, 100), ("a", 50, 200), ("a", 10, 200),
                      ("b", 65_000, 65_000), ("a", 0, 70_000)]  # fmt: skip


def test_iteration_order_per_backend(env: Env) -> None:
    s = env.open()
    for key, start, end in ORDER_SESSIONS:
        s.put(sk(key, start, end), wrap(env.fmt, start))
    order = SEGMENT_KEY_END_START if env.persistent else END_KEY_START_DESC

    def kse(it: Any) -> list[tuple[str, int, int]]:
        got = sessions(it)
        assert all(v == start for _, start, _, v in got)
        return [(k, start, end) for k, start, end, _ in got]

    assert kse(s.fetch(None, None)) == order
    assert kse(s.backward_fetch(None, None)) == order[::-1]
    assert kse(s.find_sessions("a", "b", 0, 2**62)) == [r for r in order if r[0] <= "b"]
    assert kse(s.backward_find_sessions("b", "c", 0, 2**62)) == [
        r for r in order[::-1] if r[0] >= "b"
    ]
    one_key = [r for r in order if r[0] == "a"]  # single key: end, then start (per backend)
    assert kse(s.fetch("a")) == one_key
    assert kse(s.backward_fetch("a")) == one_key[::-1]
    assert kse(s.find_sessions("a", 150, 2**62)) == one_key
    if not env.persistent:  # the time-only search: end, key, start descending
        assert kse(s.find_sessions(100, 200)) == order[:4]
    ro = s.read_committed()  # a view iterates in its store's order
    s.commit(1)
    assert kse(ro.fetch(None, None)) == order


def test_key_range_from_greater_than_to(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    s = env.open()
    s.put(sk("a", 0, 1), wrap(env.fmt, 1))
    with caplog.at_level(logging.WARNING, logger="txstore"):
        assert sessions(s.find_sessions("z", "a", 0, 100)) == []
    assert "invalid key range: from > to" in caplog.text


def test_time_only_find_sessions(env: Env) -> None:
    s = env.open()
    s.put(sk("b", 0, 10), wrap(env.fmt, 1))
    s.put(sk("a", 0, 20), wrap(env.fmt, 2))
    if env.persistent:
        with pytest.raises(UnsupportedOperationError, match="not supported"):
            s.find_sessions(0, 100)
    else:
        assert [x[0] for x in sessions(s.find_sessions(0, 100))] == ["b", "a"]  # by end
        assert [x[0] for x in sessions(s.find_sessions(15, 100))] == ["a"]


def test_expiry_by_session_end(env: Env) -> None:
    s = env.open()
    s.put(sk("a", 0, 10), wrap(env.fmt, 1))
    s.put(sk("a", 100_000, 200_000), wrap(env.fmt, 2))  # observed 200000: from 80001
    assert s.fetch_session("a", 0, 10) is None
    assert [x[3] for x in sessions(s.fetch("a"))] == [2]
    s.put(sk("b", 0, 70_000), wrap(env.fmt, 3))  # persistent: live segment 1; in memory: late
    assert s.dropped_records == (0 if env.persistent else 1)
    s.put(sk("b", 0, 10), wrap(env.fmt, 3))  # segment 0 expired everywhere
    assert s.dropped_records == (1 if env.persistent else 2)
    assert s.bytes_store.segment_ids()[0] >= 1


def test_bad_input_typed_errors(env: Env) -> None:
    s = env.open()
    s.put(sk("keep", 0, 1), wrap(env.fmt, 1))
    with pytest.raises(InvalidArgumentError, match="sessionKey can't be null"):
        s.put(None, wrap(env.fmt, 1))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"sessionKey.key\(\) can't be null"):
        s.put(sk(None, 0, 1), wrap(env.fmt, 1))
    with pytest.raises(InvalidTypeError):
        s.put(Windowed("a", TimeWindow(0, 1)), wrap(env.fmt, 1))
    with pytest.raises(InvalidTypeError):
        s.put(("a", 0, 1), wrap(env.fmt, 1))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        s.find_sessions(None, 0, 1)
    with pytest.raises(InvalidTypeError):
        s.put(sk("a", 0, 1), wrap(env.fmt, "not a long"))
    with pytest.raises(InvalidTypeError):
        s.backward_find_sessions(0, 1)  # type: ignore[call-overload]
    if env.fmt != ValueFormat.PLAIN:
        with pytest.raises(InvalidTypeError, match="values, got int"):
            s.put(sk("a", 0, 1), 5)
        # a wrapper of another format is refused too (a TIMESTAMPED store takes no headers...)
        foreign = ValueAndTimestamp(5, 1)
        if env.fmt != ValueFormat.PLAIN_HEADERS:
            foreign = AggregationWithHeaders(5, Headers())  # type: ignore[assignment]
        with pytest.raises(InvalidTypeError):
            s.put(sk("a", 0, 1), foreign)
    assert agg(s.fetch_session("keep", 0, 1)) == 1


def test_commit_recover_read_committed_and_close(env: Env) -> None:
    s = env.open()
    s.put(sk("a", 0, 1), wrap(env.fmt, 1))
    s.commit(3)
    s.put(sk("a", 0, 1), wrap(env.fmt, 2))
    view = s.read_committed()
    assert agg(view.fetch_session("a", 0, 1)) == (1 if env.tx else 2)
    assert s.recover(3) is True
    assert agg(s.fetch_session("a", 0, 1)) == (1 if env.tx else 2)
    it = s.fetch("a")
    s.close()
    assert list(it) == []
    with pytest.raises(StoreClosedError):
        s.fetch_session("a", 0, 1)


def test_stored_bytes_are_kafka_layout(tmp_path: Any) -> None:
    """Section 3.3 keys and the section 1.4 example ``08 02 02 61 01 00000005``."""
    with txstore.open(tmp_path / "p") as db:
        s = db.session_store("s", Serdes.string(), Serdes.integer(), retention_period=RETENTION,
                             format=ValueFormat.PLAIN_HEADERS)  # fmt: skip
        s.put(sk("a", 10, 20), AggregationWithHeaders(5, Headers([("a", None)])))
        s.put(sk("key", 1000, 5000), AggregationWithHeaders(6))
        p = db.session_store("p", Serdes.string(), Serdes.integer(), retention_period=RETENTION)
        p.put(sk("a", 0, 0), 7)
        db.commit({"s": 0, "p": 0})
        get = db.partition.get
        assert get(b"s.0", bytes.fromhex("61 0000000000000014 000000000000000a")) == bytes.fromhex(
            "08 02 02 61 01 00000005"
        )
        assert get(b"s.0", bytes.fromhex("6b6579 0000000000001388 00000000000003e8")) == (
            bytes.fromhex("00 00000006")
        )
        assert get(b"p.0", bytes.fromhex("61" + "00" * 16)) == bytes.fromhex("00000007")


def test_reopen_and_conflicts(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION)
        s.put(sk("a", 0, 70_000), 1)
        s.commit(1)
        s.put(sk("b", 0, 1), 2)
    with txstore.open(tmp_path / "p") as db:
        with pytest.raises(ConfigConflictError):
            db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION + 1)
        s = db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION)
        assert s.fetch_session("a", 0, 70_000) == 1 and s.fetch_session("b", 0, 1) is None
        assert s.bytes_store.segment_ids() == [1]
