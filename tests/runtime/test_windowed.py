"""Windowed serdes and windowed/sessioned tables (KIP-300).

The central property: a table materialized from a store's changelog equals the store. The
originals are written through a :class:`~txstore.runtime.task.Task` (change logging, commits, late
records into expired segments, deletes), then their changelog directories are materialized into
a fresh partition; the two partitions must hold the same bytes in every database of the store
(segments and segment registry) and return the same windows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

import txstore
from txstore import (
    AggregationWithHeaders,
    Headers,
    InvalidArgumentError,
    InvalidTypeError,
    OffsetError,
    Serdes,
    SerializationError,
    SessionWindow,
    Stores,
    TimeWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
    codecs,
)
from txstore.changelog.log import FileChangelog
from txstore.engine import checksums
from txstore.runtime.task import Task
from txstore.runtime.windowed_tables import (
    Materialized,
    MaterializeProgress,
    SessionWindowedSerde,
    TimeWindowedSerde,
    WindowedSerdes,
    sessioned_table,
    windowed_serde_by_name,
    windowed_table,
)
from txstore.stores.serdes import register_serde, serde_by_name

LONG_MAX = 2**63 - 1
RETENTION, WINDOW = 120_000, 60_000
SIZE_TWICE = (
    "Window size should not be set in both the time windowed deserializer constructor and "
    "the window.size.ms config"
)
SIZE_NEVER = (
    "Window size needs to be set either through the time windowed deserializer constructor or "
    "the window.size.ms config but not both"
)

WINDOW_STORES: dict[ValueFormat, tuple[Callable[..., Any], Callable[..., Any]]] = {
    ValueFormat.PLAIN: (Stores.persistent_window_store, Stores.window_store_builder),
    ValueFormat.TIMESTAMPED: (
        Stores.persistent_timestamped_window_store,
        Stores.timestamped_window_store_builder,
    ),
    ValueFormat.HEADERS: (
        Stores.persistent_timestamped_window_store_with_headers,
        Stores.timestamped_window_store_with_headers_builder,
    ),
    ValueFormat.PLAIN_HEADERS: (
        Stores.persistent_window_store_with_headers,
        Stores.window_store_with_headers_builder,
    ),
}
SESSION_STORES: dict[ValueFormat, tuple[Callable[..., Any], Callable[..., Any]]] = {
    ValueFormat.PLAIN: (Stores.persistent_session_store, Stores.session_store_builder),
    ValueFormat.PLAIN_HEADERS: (
        Stores.persistent_session_store_with_headers,
        Stores.session_store_with_headers_builder,
    ),
}


def window_builder(fmt: ValueFormat, retain_duplicates: bool = False, name: str = "views") -> Any:
    supplier, builder = WINDOW_STORES[fmt]
    return builder(
        supplier(name, RETENTION, WINDOW, retain_duplicates), Serdes.string(), Serdes.long()
    )


def session_builder(fmt: ValueFormat, name: str = "sessions") -> Any:
    supplier, builder = SESSION_STORES[fmt]
    return builder(supplier(name, RETENTION), Serdes.string(), Serdes.long())


def wrap(fmt: ValueFormat, value: int, ts: int, headers: Headers, session: bool = False) -> Any:
    """The value object a store of ``fmt`` takes."""
    if fmt == ValueFormat.TIMESTAMPED:
        return ValueAndTimestamp(value, ts)
    if fmt == ValueFormat.HEADERS:
        return ValueTimestampHeaders(value, ts, headers)
    if fmt == ValueFormat.PLAIN_HEADERS:
        return (
            AggregationWithHeaders(value, headers) if session else ValueAndHeaders(value, headers)
        )
    return value


def new_task(path: Path) -> Task:
    return Task(path, sync=False, changelog_options={"segment_bytes": 4096})


def produce_windows(path: Path, builder: Any, first: int = 0, last: int = 300) -> None:
    """Records ``first .. last-1`` through a task: a window per page and minute, a delete every
    11th record (a no-op with duplicates), a late write three windows back every 13th (dropped
    once that segment expired), a commit every 25 records."""
    fmt = builder.format
    with new_task(path) as task:
        store = task.window_store(builder)
        task.initialize()
        for i in range(first, last):
            ts = 1_000 * i
            headers = Headers([("i", str(i).encode()), ("n", None)])
            task.context.timestamp = ts + 7
            task.context.headers = codecs.encode_headers(headers)
            key, start = f"p{i % 5}", ts // WINDOW * WINDOW
            if i % 11 == 10:
                store.put(key, None, start)
            else:
                store.put(key, wrap(fmt, i, ts, headers), start)
            if i % 13 == 0:
                store.put(key, wrap(fmt, -i, ts, headers), max(0, start - 3 * WINDOW))
            if i % 25 == 24 or i == last - 1:
                task.commit(i + 1)


def produce_sessions(path: Path, builder: Any, first: int = 0, last: int = 300) -> None:
    """Session merging with a 3 s inactivity gap (a break every 10 records), and a late
    session every 17th record (dropped once its segment expired)."""
    fmt, gap = builder.format, 3_000
    with new_task(path) as task:
        store = task.session_store(builder)
        task.initialize()
        for i in range(first, last):
            ts = 1_000 * i + (i // 10) * 2_000
            headers = Headers([("i", str(i).encode())])
            task.context.timestamp = ts
            task.context.headers = codecs.encode_headers(headers)
            user = f"u{i % 3}"
            start, total = ts, 1
            with store.find_sessions(user, ts - gap, ts + gap) as it:
                found = list(it)
            for kv in found:
                start = min(start, kv.key.window.start)
                agg = kv.value.aggregation if fmt == ValueFormat.PLAIN_HEADERS else kv.value
                total += agg
                store.remove(kv.key)
            store.put(Windowed(user, SessionWindow(start, ts)), wrap(fmt, total, ts, headers, True))
            if i % 17 == 0 and ts > 200_000:
                late = ts - 200_000
                store.put(
                    Windowed(user, SessionWindow(late, late)), wrap(fmt, -1, ts, headers, True)
                )
            if i % 25 == 24 or i == last - 1:
                task.commit(i + 1)
        assert store.dropped_records > 0


def unnumbered(dbs: dict[bytes, list[tuple[bytes, bytes]]]) -> dict[bytes, Any]:
    """:func:`store_bytes` with the sequence numbers cut off the window segments' keys. With
    duplicates the changelog numbers its keys with its own counter, which also counts the null
    puts the store skips (kafka-formats.md 4.4), and restored keys follow the changelog's
    numbering, as in Kafka: a restored store equals the original but for those numbers."""
    return {n: [(k[:-4], v) for k, v in r] if b"." in n else r for n, r in dbs.items()}


def store_bytes(path: Path, name: str) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """The store's databases (segment registry and segments) in the partition, as rows."""
    env = lmdb.open(str(path / "data"), readonly=True, max_dbs=1024, lock=True)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            out = {}
            for db_name in names:
                if db_name == name.encode() or db_name.startswith(name.encode() + b"."):
                    db = env.open_db(db_name, txn=txn, create=False)
                    # the stored rows, checksums checked and stripped: the Kafka-format bytes
                    out[db_name] = checksums.unseal_rows(list(txn.cursor(db)))
        return out
    finally:
        env.close()


def window_rows(path: Path, builder: Any) -> list[Any]:
    with txstore.open(path, sync=False) as db, builder.build(db).all() as it:
        return [(kv.key, kv.value) for kv in it]


def session_rows(path: Path, builder: Any) -> list[Any]:
    with txstore.open(path, sync=False) as db, builder.build(db).fetch(None, None) as it:
        return [(kv.key, kv.value) for kv in it]


def full_materialized(name: str = "w", fmt: ValueFormat = ValueFormat.TIMESTAMPED) -> Materialized:
    return Materialized(
        name,
        Serdes.string(),
        Serdes.long(),
        retention=RETENTION,
        segment_interval=60_000,
        format=fmt,
    )


# ---- serdes ---------------------------------------------------------------------------------


def test_time_windowed_byte_examples_of_section_5() -> None:
    s = TimeWindowedSerde(Serdes.string(), 60_000)
    assert s.serialize(Windowed("a", TimeWindow(1000, 61_000))) == bytes.fromhex(
        "61 00000000000003e8"
    )
    i = TimeWindowedSerde(Serdes.integer(), 60_000)
    raw = i.serialize(Windowed(5, TimeWindow(0, 60_000)))
    assert raw == bytes.fromhex("00000005 0000000000000000")
    assert i.deserialize(raw) == Windowed(5, TimeWindow(0, 60_000))
    # The serializer writes no end: any window of the same start gives the same bytes.
    assert s.serialize(Windowed("a", TimeWindow(1000, 2000))) == bytes.fromhex("6100000000000003e8")
    assert s.serialize_base_key(Windowed("a", TimeWindow(1000, 2000))) == b"a"


def test_changelog_mode_reads_store_keys() -> None:
    s = TimeWindowedSerde(Serdes.string(), 60_000, for_changelog=True)
    assert s.is_changelog_topic and s.name == "time-windowed-changelog(string,60000)"
    key = bytes.fromhex("61 00000000000003e8 00000007")
    assert s.deserialize(key) == Windowed("a", TimeWindow(1000, 61_000))
    w = Windowed("a", TimeWindow(1000, 61_000))
    assert s.serialize_store_key(w, 7) == key
    # As in Kafka, forChangelog only changes the deserializer.
    assert s.serialize(w) == bytes.fromhex("6100000000000003e8")
    topic = s.for_changelog(False)
    assert not topic.is_changelog_topic and s.is_changelog_topic
    assert topic.deserialize(bytes.fromhex("6100000000000003e8")) == w


def test_session_windowed_bytes_and_round_trip() -> None:
    s = SessionWindowedSerde(Serdes.string())
    assert s.name == "session-windowed(string)"
    w = Windowed("key", SessionWindow(1000, 5000))
    raw = s.serialize(w)
    assert raw == bytes.fromhex("6b6579 0000000000001388 00000000000003e8")
    assert s.deserialize(raw) == w
    assert s.deserialize(bytes.fromhex("61 0000000000000000 0000000000000000")) == Windowed(
        "a", SessionWindow(0, 0)
    )
    assert s.serialize_base_key(w) == b"key"


@pytest.mark.parametrize(
    "serde",
    [
        TimeWindowedSerde(Serdes.string(), 10),
        TimeWindowedSerde(Serdes.string(), 10, for_changelog=True),
        SessionWindowedSerde(Serdes.string()),
    ],
    ids=["time", "time-changelog", "session"],
)
def test_null_and_empty_data_give_none(serde: Any) -> None:
    assert serde.deserialize(None) is None
    assert serde.deserialize(b"") is None
    assert serde.serialize(None) is None


@given(
    key=st.text(max_size=20),
    start=st.integers(0, LONG_MAX - 1),
    size=st.integers(1, LONG_MAX),
    seq=st.integers(0, 2**31 - 1),
)
def test_round_trips(key: str, start: int, size: int, seq: int) -> None:
    window = TimeWindow.for_size(start, size)
    w = Windowed(key, window)
    topic = TimeWindowedSerde(Serdes.string(), size)
    assert topic.deserialize(topic.serialize(w)) == w
    log = topic.for_changelog()
    assert log.deserialize(log.serialize_store_key(w, seq)) == w
    session = SessionWindowedSerde(Serdes.string())
    sw = Windowed(key, SessionWindow(start, max(start, window.end - 1)))
    assert session.deserialize(session.serialize(sw)) == sw


def test_window_end_is_clamped_on_overflow(caplog: pytest.LogCaptureFixture) -> None:
    # Kafka's WindowKeySchemaTest.testSerializeDeserializeOverflowWindowSize.
    s = TimeWindowedSerde(Serdes.string(), LONG_MAX - 1)
    with caplog.at_level(logging.WARNING, "txstore"):
        w = s.deserialize(codecs.time_windowed_key(b"a", 5))
    assert w == Windowed("a", TimeWindow(5, LONG_MAX))
    assert "truncated to Long.MAX" in caplog.text


def test_window_size_is_set_exactly_once() -> None:
    with pytest.raises(InvalidArgumentError) as e:
        TimeWindowedSerde(Serdes.string(), 100).configure({"window.size.ms": 100})
    assert str(e.value) == SIZE_TWICE
    with pytest.raises(InvalidArgumentError) as e:
        TimeWindowedSerde(Serdes.string()).configure({})
    assert str(e.value) == SIZE_NEVER
    with pytest.raises(InvalidArgumentError) as e:
        TimeWindowedSerde(Serdes.string()).deserialize(b"a" + bytes(8))
    assert str(e.value) == SIZE_NEVER
    # Once through the config (a String value is parsed as a long), then never again.
    s = TimeWindowedSerde(Serdes.string()).configure({"window.size.ms": "60000"})
    assert s.window_size == 60_000 and s.name == "time-windowed(string,60000)"
    with pytest.raises(InvalidArgumentError) as e:
        s.configure({"window.size.ms": 60_000})
    assert str(e.value) == SIZE_TWICE
    # The serializer needs no window size.
    assert TimeWindowedSerde(Serdes.string()).serialize(Windowed("a", TimeWindow(0, 1))) == (
        b"a" + bytes(8)
    )


def test_window_size_values() -> None:
    import datetime as dt

    assert TimeWindowedSerde(Serdes.string(), dt.timedelta(minutes=1)).window_size == 60_000
    for bad in (0, -5):
        with pytest.raises(InvalidArgumentError, match="must be larger than zero"):
            TimeWindowedSerde(Serdes.string(), bad)
    with pytest.raises(InvalidArgumentError, match="must be larger than zero"):
        TimeWindowedSerde(Serdes.string()).configure({"window.size.ms": "0"})
    with pytest.raises(InvalidArgumentError, match="not a long"):
        TimeWindowedSerde(Serdes.string()).configure({"window.size.ms": "60s"})
    for wrong in (True, 1.5):
        with pytest.raises(InvalidTypeError):
            TimeWindowedSerde(Serdes.string(), wrong)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        TimeWindowedSerde(Serdes.string()).configure({"window.size.ms": 1.5})
    with pytest.raises(InvalidTypeError):
        TimeWindowedSerde(Serdes.string(), 5, for_changelog=1)  # type: ignore[arg-type]


def test_inner_serde_rules() -> None:
    # From the config, by registered name (Kafka's class name); the deprecated key works too.
    s: TimeWindowedSerde[Any] = TimeWindowedSerde().configure(
        {"window.size.ms": 10, "windowed.inner.deserializer.class": "integer"}
    )
    assert s.inner is Serdes.integer()
    s2: SessionWindowedSerde[Any] = SessionWindowedSerde().configure(
        {"windowed.inner.class.serde": "string"}
    )
    assert s2.inner is Serdes.string()
    # The same serde twice is fine; a different one is an error.
    TimeWindowedSerde(Serdes.long(), 10).configure({"windowed.inner.class.serde": "long"})
    with pytest.raises(InvalidArgumentError) as e:
        TimeWindowedSerde(Serdes.string()).configure(
            {"window.size.ms": 10, "windowed.inner.deserializer.class": "long"}
        )
    assert str(e.value) == (
        "Inner class deserializer set using constructor (string) is different from the one set "
        "in windowed.inner.deserializer.class config (long)."
    )
    with pytest.raises(InvalidArgumentError, match="should be set either via constructor"):
        TimeWindowedSerde(None, 10).configure({})
    with pytest.raises(InvalidArgumentError, match="should be set either via constructor"):
        SessionWindowedSerde().configure({})
    with pytest.raises(InvalidArgumentError, match="no serde named"):
        TimeWindowedSerde("nope", 10)
    # Used without an inner serde: Kafka's NullPointerException messages.
    with pytest.raises(InvalidArgumentError, match=r"^Inner serializer is `null`"):
        TimeWindowedSerde(None, 10).serialize(None)
    with pytest.raises(InvalidArgumentError, match=r"^Inner deserializer is `null`"):
        TimeWindowedSerde(None, 10).deserialize(b"")
    with pytest.raises(InvalidArgumentError, match="SessionWindowedDeserializer"):
        SessionWindowedSerde().deserialize(None)
    with pytest.raises(InvalidArgumentError, match="cannot be session-windowed"):
        TimeWindowedSerde(SessionWindowedSerde(Serdes.string()), 1)


def test_bad_input() -> None:
    s = TimeWindowedSerde(Serdes.string(), 10)
    with pytest.raises(SerializationError):
        s.deserialize(b"1234567")  # shorter than the start
    with pytest.raises(SerializationError):
        s.for_changelog().deserialize(b"12345678901")
    with pytest.raises(SerializationError):
        SessionWindowedSerde(Serdes.string()).deserialize(bytes(15))
    with pytest.raises(InvalidArgumentError, match="cannot be negative"):
        s.deserialize(b"a" + codecs.time_windowed_key(b"", -1))
    with pytest.raises(InvalidArgumentError, match="cannot be smaller"):
        SessionWindowedSerde(Serdes.string()).deserialize(codecs.session_key(b"a", 10, 5))
    with pytest.raises(InvalidTypeError, match="needs a Windowed"):
        s.serialize(("a", 0))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="cannot be null"):
        s.serialize_base_key(None)  # type: ignore[arg-type]
    null_key = TimeWindowedSerde(Serdes.string(), 10)
    with pytest.raises(InvalidArgumentError, match="into null"):
        null_key.serialize(Windowed(None, TimeWindow(0, 10)))  # type: ignore[arg-type]


def test_names_and_registry() -> None:
    for serde in (
        TimeWindowedSerde(Serdes.string(), 60_000),
        TimeWindowedSerde(Serdes.long(), 5, for_changelog=True),
        TimeWindowedSerde(Serdes.string()),
        SessionWindowedSerde(Serdes.integer()),
    ):
        again = windowed_serde_by_name(serde.name)
        assert type(again) is type(serde) and again.name == serde.name
        register_serde(serde)
        assert serde_by_name(serde.name) is serde
    assert WindowedSerdes.time_windowed_serde_from("long", 7).name == "time-windowed(long,7)"
    assert WindowedSerdes.session_windowed_serde_from(Serdes.long()).name == (
        "session-windowed(long)"
    )
    for bad in ("time-windowed", "session-windowed(string,5)", "windowed(string)"):
        with pytest.raises(InvalidArgumentError):
            windowed_serde_by_name(bad)


# ---- tables from changelogs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "dups"),
    [(f, False) for f in WINDOW_STORES] + [(ValueFormat.PLAIN, True), (ValueFormat.HEADERS, True)],
    ids=lambda v: v.name if isinstance(v, ValueFormat) else ("dups" if v else "unique"),
)
def test_windowed_table_from_changelog_equals_the_store(
    tmp_path: Path, fmt: ValueFormat, dups: bool
) -> None:
    builder = window_builder(fmt, dups)
    orig, copy = tmp_path / "orig", tmp_path / "copy"
    produce_windows(orig, builder)
    seen: list[MaterializeProgress] = []
    with txstore.open(copy, sync=False) as db:
        table = windowed_table(
            orig / "changelog" / "views", None, builder, db=db, batch_size=97, progress=seen.append
        )
        with FileChangelog(orig / "changelog" / "views", readonly=True) as log:
            end = log.committed_end_offset
        assert table.committed_offset == end
        assert table.window_size == WINDOW and table.format == fmt
    assert seen[-1].consumed == seen[-1].total == end
    assert seen[-1].applied + seen[-1].dropped + seen[-1].skipped == end
    assert seen[-1].dropped > 0  # late records into expired segments, dropped again
    assert len(seen) == -(-end // 97)
    expected = store_bytes(orig, "views")
    assert len(expected) > 2  # the registry and several segments
    got = store_bytes(copy, "views")
    if dups:
        assert got != expected  # the null puts took changelog sequence numbers
        assert unnumbered(got) == unnumbered(expected)
    else:
        assert got == expected
    rows = window_rows(copy, builder)
    assert rows and rows == window_rows(orig, builder)


@pytest.mark.parametrize("fmt", list(SESSION_STORES), ids=lambda f: f.name)
def test_sessioned_table_from_changelog_equals_the_store(tmp_path: Path, fmt: ValueFormat) -> None:
    builder = session_builder(fmt)
    orig, copy = tmp_path / "orig", tmp_path / "copy"
    produce_sessions(orig, builder)
    with (
        txstore.open(copy, sync=False) as db,
        FileChangelog(orig / "changelog" / "sessions", readonly=True) as log,
    ):
        table = sessioned_table(log, builder, db=db)
        assert table.committed_offset == log.committed_end_offset
    expected = store_bytes(orig, "sessions")
    assert len(expected) > 2
    assert store_bytes(copy, "sessions") == expected
    rows = session_rows(copy, builder)
    assert rows and rows == session_rows(orig, builder)


def test_materializing_again_resumes_where_the_store_is(tmp_path: Path) -> None:
    builder = window_builder(ValueFormat.HEADERS)
    orig, copy = tmp_path / "orig", tmp_path / "copy"
    produce_windows(orig, builder, 0, 150)
    source = orig / "changelog" / "views"
    with txstore.open(copy, sync=False) as db:
        windowed_table(source, WINDOW, builder, db=db).close()
    produce_windows(orig, builder, 150, 300)
    seen: list[MaterializeProgress] = []
    with txstore.open(copy, sync=False) as db:
        windowed_table(source, WINDOW, builder, db=db, progress=seen.append)
    with FileChangelog(source, readonly=True) as log:
        end = log.committed_end_offset
    total = seen[-1].total
    # Only what was committed since the first call is read.
    assert total is not None and 0 < total == seen[-1].consumed < end
    assert seen[-1].offset == end
    assert store_bytes(copy, "views") == store_bytes(orig, "views")
    # An explicit offset: at the end nothing is read; past it is an error.
    with txstore.open(copy, sync=False) as db:
        seen.clear()
        windowed_table(source, WINDOW, builder, db=db, from_offset=end, progress=seen.append)
        assert [(p.consumed, p.offset) for p in seen] == [(0, end)]
    with txstore.open(copy, sync=False) as db, pytest.raises(OffsetError, match="beyond"):
        windowed_table(source, WINDOW, builder, db=db, from_offset=end + 1)
    # A store ahead of the changelog was filled from another source.
    with FileChangelog(tmp_path / "short") as log:
        log.append(codecs.window_key(b"a", 0), b"v", 0)
        log.commit(1)
    with txstore.open(copy, sync=False) as db, pytest.raises(InvalidArgumentError, match="fresh"):
        windowed_table(tmp_path / "short", WINDOW, builder, db=db)


# ---- tables from topic records --------------------------------------------------------------


def test_windowed_table_from_topic_records_equals_the_store(tmp_path: Path) -> None:
    """A windowed topic as ``KTable<Windowed<K>, V>.toStream().to(topic)`` writes it (key
    ``[key][start]``, plain value, record timestamp and headers) reads back to the store."""
    builder = window_builder(ValueFormat.HEADERS)
    orig = tmp_path / "orig"
    produce_windows(orig, builder)
    key_serde = TimeWindowedSerde(Serdes.string(), WINDOW)
    with txstore.open(orig, sync=False) as db, builder.build(db).all() as it:
        topic = [
            (
                key_serde.serialize(kv.key),
                Serdes.long().serialize(kv.value.value),
                kv.value.timestamp,
                kv.value.headers,  # a Headers object is accepted too
            )
            for kv in it
        ]
    # A record with a null key is skipped (KTable source semantics) and a tombstone deletes.
    gone = topic[3]
    topic += [(None, b"x", 0, b""), (b"", b"x", 0, b""), (gone[0], None, gone[2], b"")]
    seen: list[MaterializeProgress] = []
    with txstore.open(tmp_path / "copy", sync=False) as db:
        table = windowed_table(topic, WINDOW, builder, db=db, batch_size=50, progress=seen.append)
        assert table.committed_offset == len(topic)
        window = key_serde.deserialize(gone[0])
        assert window is not None and table.fetch(window.key, window.window.start) is None
    assert seen[-1].skipped == 2 and seen[-1].dropped == 0
    want = [r for r in window_rows(orig, builder) if r[0] != window]
    assert window_rows(tmp_path / "copy", builder) == want


def test_window_changelog_records_as_an_iterable(tmp_path: Path) -> None:
    builder = window_builder(ValueFormat.PLAIN_HEADERS, True)
    orig = tmp_path / "orig"
    produce_windows(orig, builder)
    with FileChangelog(orig / "changelog" / "views", readonly=True) as log:
        records = [(r.key, r.value, r.timestamp, r.headers) for r in log.read_committed()]
    with txstore.open(tmp_path / "copy", sync=False) as db:
        windowed_table(records, None, builder, db=db, for_changelog=True)
    got, expected = store_bytes(tmp_path / "copy", "views"), store_bytes(orig, "views")
    assert unnumbered(got) == unnumbered(expected)
    assert window_rows(tmp_path / "copy", builder) == window_rows(orig, builder)


def test_topic_values_take_the_record_timestamp_and_headers(tmp_path: Path) -> None:
    key = TimeWindowedSerde(Serdes.string(), WINDOW).serialize(
        Windowed("a", TimeWindow(60_000, 120_000))
    )
    h = Headers([("k", b"v")])
    records = [(key, Serdes.long().serialize(7), 61_234, codecs.encode_headers(h))]
    with txstore.open(tmp_path, sync=False) as db:
        for fmt, expected in [
            (ValueFormat.PLAIN, 7),
            (ValueFormat.TIMESTAMPED, ValueAndTimestamp(7, 61_234)),
            (ValueFormat.HEADERS, ValueTimestampHeaders(7, 61_234, h)),
            (ValueFormat.PLAIN_HEADERS, ValueAndHeaders(7, h)),
        ]:
            table = windowed_table(records, WINDOW, full_materialized(f"w-{fmt.name}", fmt), db=db)
            assert table.fetch("a", 60_000) == expected
            with table.all() as it:
                assert [kv.key for kv in it] == [Windowed("a", TimeWindow(60_000, 120_000))]
        # Three-field records have no headers.
        t = windowed_table([records[0][:3]], WINDOW, full_materialized("w-3", fmt), db=db)
        assert t.fetch("a", 60_000) == ValueAndHeaders(7, Headers())


def test_topic_duplicates_are_numbered_like_puts(tmp_path: Path) -> None:
    key = codecs.time_windowed_key(b"a", 0)
    records = [(key, b"1", 0, b""), (key, None, 0, b""), (key, b"2", 0, b"")]
    m = full_materialized(fmt=ValueFormat.PLAIN).with_retain_duplicates()
    m = m.with_value_serde(Serdes.bytes())
    with txstore.open(tmp_path, sync=False) as db:
        table = windowed_table(records, WINDOW, m, db=db)
        with table.bytes_store.all() as it:
            assert [(k, v) for k, v in it] == [
                (codecs.window_key(b"a", 0, 1), b"1"),
                (codecs.window_key(b"a", 0, 2), b"2"),
            ]
        table.put("a", b"3", 0)  # later puts continue the numbering
        with table.fetch("a", 0, 0) as it:
            assert [kv.value for kv in it] == [b"1", b"2", b"3"]


def test_sessioned_table_from_topic_records(tmp_path: Path) -> None:
    serde = SessionWindowedSerde(Serdes.string())
    w1, w2 = Windowed("u", SessionWindow(0, 5_000)), Windowed("v", SessionWindow(100, 100))
    records = [
        (serde.serialize(w1), b"\x00\x00\x00\x00\x00\x00\x00\x02", 5_000, b""),
        (serde.serialize(w2), b"\x00\x00\x00\x00\x00\x00\x00\x01", 100, b""),
        (serde.serialize(w1), None, 6_000, b""),  # the session merged away
    ]
    m = full_materialized("s", ValueFormat.PLAIN)
    with txstore.open(tmp_path, sync=False) as db:
        table = sessioned_table(records, m, db=db)
        with table.fetch(None, None) as it:
            assert [(kv.key, kv.value) for kv in it] == [(w2, 1)]


def test_in_memory_table_needs_no_database() -> None:
    key = codecs.time_windowed_key(b"a", 0)
    table = windowed_table(
        [(key, b"\x00\x00\x00\x00\x00\x00\x00\x05", 3, b"")],
        WINDOW,
        full_materialized().in_memory(),
    )
    assert not table.persistent and table.fetch("a", 0) == ValueAndTimestamp(5, 3)
    table.close()


# ---- expiry ---------------------------------------------------------------------------------


def test_records_of_expired_segments_are_dropped_as_kafka_does(tmp_path: Path) -> None:
    """Kafka's testSegmentMaintenance (retention 120000, segments of 60000): segments {0} ->
    {0, 1} -> {1, 3} -> {3, 5}; a late record for segment 0 is then dropped."""
    starts = [0, 59_999, 59_999, 60_000, 180_000, 300_000, 30_000]
    records = [(codecs.time_windowed_key(b"k", s), b"v%d" % s, s, b"") for s in starts]
    m = Materialized(
        "w",
        retention=120_000,
        window_size=1_000,
        segment_interval=60_000,
        format=ValueFormat.PLAIN,
        retain_duplicates=True,
    )
    steps: list[tuple[list[int], int, int]] = []
    with txstore.open(tmp_path / "one", sync=False) as db:

        def step(p: MaterializeProgress) -> None:
            store = db.store("w")
            with store.fetch(b"k", 0, 600_000) as it:
                steps.append((store.bytes_store.segment_ids(), len(list(it)), p.dropped))

        windowed_table(records, None, m, db=db, batch_size=1, progress=step)
    assert steps == [
        ([0], 1, 0),
        ([0], 2, 0),
        ([0], 3, 0),
        ([0, 1], 4, 0),
        ([1, 3], 1, 0),  # 60000 is stored but below observed - retention + 1: not returned
        ([3, 5], 1, 0),
        ([3, 5], 1, 1),  # the late record's segment expired: dropped
    ]
    # Per-record puts of the typed store (Kafka's processing path) leave the same bytes; so
    # does one batch, where the observed time first advances to the batch's largest start.
    with txstore.open(tmp_path / "puts", sync=False) as db:
        ref: Any = db.window_store(
            "w", retention_period=120_000, window_size=1_000, retain_duplicates=True
        )
        for s in starts:
            ref.put(b"k", b"v%d" % s, s)
        ref.commit(len(starts))
        assert ref.dropped_records == 1
    seen: list[MaterializeProgress] = []
    with txstore.open(tmp_path / "batch", sync=False) as db:
        batch = windowed_table(records, None, m, db=db, progress=seen.append)
        assert batch.dropped_records == 5
    assert seen[-1].applied == 2 and seen[-1].dropped == 5
    assert store_bytes(tmp_path / "one", "w") == store_bytes(tmp_path / "puts", "w")
    assert store_bytes(tmp_path / "batch", "w") == store_bytes(tmp_path / "puts", "w")


# ---- missing and contradictory settings -----------------------------------------------------


def test_missing_materialized_settings_are_named_with_kafkas_reasons() -> None:
    with pytest.raises(InvalidArgumentError) as e:
        windowed_table([], None, Materialized("w"))
    msg = str(e.value)
    assert "'w' is missing" in msg
    for needed in ("window size", "[key][L(start)]", "KIP-300", "retention", "segment interval"):
        assert needed in msg
    assert "format" in msg and "PLAIN_HEADERS" in msg
    with pytest.raises(InvalidArgumentError) as e:
        windowed_table([], WINDOW, Materialized("w", retention=RETENTION, format=ValueFormat.PLAIN))
    msg = str(e.value)
    assert "segment interval" in msg and "60000 for this retention" in msg
    assert "window size" not in msg and "retention (" not in msg
    with pytest.raises(InvalidArgumentError) as e:
        sessioned_table([], Materialized("s", segment_interval=60_000))
    msg = str(e.value)
    assert "retention" in msg and "session" in msg
    assert "PLAIN, TIMESTAMPED, HEADERS or PLAIN_HEADERS" in msg  # timestamped sessions too
    assert "window size" not in msg


def test_contradictory_settings() -> None:
    m = full_materialized()
    with pytest.raises(InvalidArgumentError, match="window size is set once"):
        windowed_table([], 1_000, m.with_window_size(2_000))
    with pytest.raises(InvalidArgumentError, match="window size is set once"):
        windowed_table([], 1_000, window_builder(ValueFormat.PLAIN))
    with pytest.raises(InvalidArgumentError, match="no smaller than its window size"):
        windowed_table([], RETENTION + 1, m.in_memory())
    with pytest.raises(InvalidArgumentError, match="sessions have none"):
        sessioned_table([], m.with_window_size(5))
    with pytest.raises(InvalidArgumentError, match="retains duplicates"):
        sessioned_table([], m.with_retain_duplicates())
    sessions = sessioned_table([], m.in_memory())  # a timestamped session store (issue 17)
    assert sessions.codec.format == ValueFormat.TIMESTAMPED
    sessions.close()
    with pytest.raises(InvalidArgumentError, match="use sessioned_table"):
        windowed_table([], None, session_builder(ValueFormat.PLAIN))
    with pytest.raises(InvalidArgumentError, match="use windowed_table"):
        sessioned_table([], window_builder(ValueFormat.PLAIN))
    with pytest.raises(InvalidTypeError):
        windowed_table([], WINDOW, "w")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not time-windowed"):
        Materialized("w", key_serde=TimeWindowedSerde(Serdes.string(), 5))
    with pytest.raises(InvalidArgumentError, match="needs a database"):
        windowed_table([], WINDOW, m)
    with pytest.raises(InvalidArgumentError, match="changelog sources only"):
        windowed_table([], WINDOW, m.in_memory(), from_offset=3)
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        windowed_table([], WINDOW, m.in_memory(), batch_size=0)
    for source in (b"abc", 42):
        with pytest.raises(InvalidTypeError, match="source must be"):
            windowed_table(source, WINDOW, m.in_memory())  # type: ignore[arg-type]


def test_bad_records_name_the_record_and_keep_committed_batches(tmp_path: Path) -> None:
    good = [(codecs.time_windowed_key(b"a", 1_000 * i), b"v", i, b"") for i in range(5)]
    m = full_materialized(fmt=ValueFormat.PLAIN).with_value_serde(Serdes.bytes())
    cases: list[tuple[Any, type[Exception], str]] = [
        (
            (b"short", b"v", 0, b""),
            SerializationError,
            r"record #5 of the source: its key has 5 bytes",
        ),
        ((codecs.time_windowed_key(b"a", -1), b"v", 0, b""), InvalidArgumentError, "negative"),
        (("a", b"v", 0, b""), InvalidTypeError, "record #5 of the source: its key"),
        ((good[0][0], b"v"), InvalidTypeError, "a record is"),
        ((good[0][0], b"v", "0", b""), InvalidTypeError, "record #5 of the source: timestamp"),
        ((good[0][0], b"v", 0, 5), InvalidTypeError, "record #5 of the source: its headers"),
    ]
    for n, (bad, exc, match) in enumerate(cases):
        path = tmp_path / str(n)
        with txstore.open(path, sync=False) as db:
            with pytest.raises(exc, match=match):
                windowed_table([*good, bad, *good], WINDOW, m, db=db, batch_size=2)
            with pytest.raises(InvalidArgumentError, match="no store 'w' is open"):
                db.store("w")  # the failed load closed it, and the database forgot it
        with txstore.open(path, sync=False) as db:
            table = db.window_store(
                "w", Serdes.string(), Serdes.bytes(), retention_period=RETENTION, window_size=WINDOW
            )
            assert table.committed_offset == 4  # two committed batches of two
            with table.all() as it:
                assert len(list(it)) == 4
    with (
        txstore.open(tmp_path / "s", sync=False) as db,
        pytest.raises(
            InvalidArgumentError, match=r"record #0 of the source: invalid session \[10, 5\]"
        ),
    ):
        sessioned_table([(codecs.session_key(b"a", 10, 5), b"v", 0, b"")], m, db=db)


def test_a_changelog_of_another_kind_is_rejected(tmp_path: Path) -> None:
    with FileChangelog(tmp_path / "log") as log:
        log.append(b"key", b"value", 0)
        log.commit(1)
    with (
        txstore.open(tmp_path / "db", sync=False) as db,
        pytest.raises(
            SerializationError, match=r"record at offset 0 of changelog .*window changelog key"
        ),
    ):
        windowed_table(tmp_path / "log", WINDOW, full_materialized(), db=db)
