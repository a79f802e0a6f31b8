"""Timestamped session stores (``TIMESTAMPED`` and ``HEADERS`` session values; KIP-258 names the
store, Kafka never shipped it): stored layout, adapters, lazy upgrades of real files, changelog
records and restore in a task, interactive queries, the CLI and bad inputs. The contract every
session store keeps runs over these formats in ``test_session_contract.py``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
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
    Stores,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.bytestores import adapters as ad
from txstore.changelog.log import FileChangelog
from txstore.queries import QueryableStoreTypes
from txstore.runtime.task import Task
from txstore.stores.materialized import Materialized, session_builder

ROOT = Path(__file__).resolve().parents[2]
P, T, H, PH = (
    ValueFormat.PLAIN,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
    ValueFormat.PLAIN_HEADERS,
)
RETENTION = 120_000  # segments of 60_000 ms, by session end
NO_TS = b"\xff" * 8
HDRS = Headers([("h", b"x")])
HB = bytes.fromhex("0a 02 02 68 02 78")  # varint(5) + the headers above


def sk(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, SessionWindow(start, end))


def skey(key: str, start: int, end: int) -> bytes:
    return key.encode() + end.to_bytes(8, "big") + start.to_bytes(8, "big")


def session(db: txstore.Database, fmt: ValueFormat, name: str = "s") -> Any:
    return db.session_store(
        name, Serdes.string(), Serdes.long(), retention_period=RETENTION, format=fmt
    )


def test_stored_layouts(tmp_path: Path) -> None:
    """``[L(ts)][agg]`` and ``[varint(len h)][h][L(ts)][agg]``, as Kafka's ValueAndTimestamp and
    KIP-1271 layouts; a wrapper of ``None`` deletes."""
    with txstore.open(tmp_path / "p") as db:
        ts, th = session(db, T, "ts"), session(db, H, "th")
        ts.put(sk("a", 10, 20), ValueAndTimestamp(5, 1000))
        th.put(sk("a", 10, 20), ValueTimestampHeaders(5, 1000, HDRS))
        ts.put(sk("gone", 0, 1), ValueAndTimestamp(1, 1))
        ts.put(sk("gone", 0, 1), ValueAndTimestamp(None, 2))  # None inside: a delete
        th.put(sk("gone", 0, 1), None)
        db.commit({"ts": 0, "th": 0})
        five = (5).to_bytes(8, "big")
        assert db.partition.get(b"ts.0", skey("a", 10, 20)) == (1000).to_bytes(8, "big") + five
        assert db.partition.get(b"th.0", skey("a", 10, 20)) == (
            HB + (1000).to_bytes(8, "big") + five
        )
        assert ts.fetch_session("a", 10, 20) == ValueAndTimestamp(5, 1000)
        assert ts.fetch_session("gone", 0, 1) is None
        assert th.fetch_session("a", 10, 20) == ValueTimestampHeaders(5, 1000, HDRS)


def test_upgrade_plain_to_timestamped_on_real_files(tmp_path: Path) -> None:
    """Old sessions read with the surrogate timestamp -1; old segments keep their format until
    written; new segments are timestamped; expiry by session end is unchanged; a downgrade is
    refused."""
    path = tmp_path / "p"
    with txstore.open(path) as db:
        s = session(db, P)
        s.put(sk("a", 0, 10), 1)  # segment 0
        s.put(sk("a", 50_000, 70_000), 2)  # segment 1
        s.put(sk("b", 61_000, 62_000), 3)  # segment 1
        s.commit(1)
    with txstore.open(path) as db:
        s = session(db, T)
        bs = s.bytes_store
        assert (bs.segment_format(0), bs.segment_format(1)) == (P, P)
        assert s.fetch_session("a", 0, 10) == ValueAndTimestamp(1, -1)
        assert s.read_committed().fetch_session("b", 61_000, 62_000) == ValueAndTimestamp(3, -1)
        s.put(sk("b", 61_000, 62_000), ValueAndTimestamp(4, 777))  # old segment 1: converted
        s.put(sk("c", 0, 120_000), ValueAndTimestamp(5, 888))  # new segment 2
        s.commit(2)
        assert (bs.segment_format(0), bs.segment_format(1), bs.segment_format(2)) == (P, T, T)
        assert db.partition.get(b"s.0", skey("a", 0, 10)) == (1).to_bytes(8, "big")
        assert db.partition.get(b"s.60000", skey("a", 50_000, 70_000)) == (
            NO_TS + (2).to_bytes(8, "big")
        )
        with s.fetch("a", "c") as it:
            assert [(kv.key.key, kv.value) for kv in it] == [
                ("a", ValueAndTimestamp(1, -1)),
                ("a", ValueAndTimestamp(2, -1)),
                ("b", ValueAndTimestamp(4, 777)),
                ("c", ValueAndTimestamp(5, 888)),
            ]
    with txstore.open(path) as db:  # per-segment formats survive a reopen
        s = session(db, T)
        assert s.bytes_store.segment_format(0) == P
        assert s.fetch_session("a", 0, 10) == ValueAndTimestamp(1, -1)
        # stream time 180_000: sessions ending before 60_001 expire, and segment 0 with them
        s.put(sk("d", 0, 180_000), ValueAndTimestamp(6, 9))
        s.commit(3)
        assert s.fetch_session("a", 0, 10) is None
        assert 0 not in s.bytes_store.segment_ids()
        assert s.fetch_session("b", 61_000, 62_000) == ValueAndTimestamp(4, 777)
        s.close()
        with pytest.raises(ConfigConflictError, match="downgrades are not supported"):
            session(db, P)
        with pytest.raises(ConfigConflictError, match="downgrades are not supported"):
            session(db, PH)  # it would drop the timestamps
        with pytest.raises(InvalidArgumentError, match="downgrades are not supported"):
            Stores.session_store_builder(  # a plain builder over a timestamped supplier
                Stores.persistent_timestamped_session_store("s", RETENTION),
                Serdes.string(),
                Serdes.long(),
            ).build(db)
        h = session(db, H)  # timestamped -> timestamped with headers: an upgrade
        assert h.fetch_session("b", 61_000, 62_000) == ValueTimestampHeaders(4, 777, Headers())


def test_upgrade_headers_session_to_timestamped_headers(tmp_path: Path) -> None:
    """KIP-1271's session store with headers gains timestamps (-1) and keeps its headers; it
    cannot become a TIMESTAMPED store (that would drop the headers)."""
    path = tmp_path / "p"
    with txstore.open(path) as db:
        s = session(db, PH)
        s.put(sk("a", 0, 10), AggregationWithHeaders(1, HDRS))
        s.commit(1)
    with txstore.open(path) as db:
        with pytest.raises(ConfigConflictError, match="downgrades are not supported"):
            session(db, T)
        s = session(db, H)
        assert s.fetch_session("a", 0, 10) == ValueTimestampHeaders(1, -1, HDRS)
        assert db.partition.store_meta("s")["format"] == "HEADERS"  # type: ignore[index]


def test_timestamped_builders_over_older_persistent_suppliers(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = Stores.timestamped_session_store_builder(
            Stores.persistent_session_store("a", RETENTION), Serdes.string(), Serdes.long()
        ).build(db)
        assert s.adapter is ad.SessionToTimestampedSessionByteStoreAdapter
        s.put(sk("k", 0, 1), ValueAndTimestamp(3, 99))
        assert s.fetch_session("k", 0, 1) == ValueAndTimestamp(3, -1)  # the timestamp dropped
        assert s.bytes_store.get(skey("k", 0, 1)) == (3).to_bytes(8, "big")
        h = Stores.timestamped_session_store_with_headers_builder(
            Stores.persistent_session_store_with_headers("b", RETENTION),
            Serdes.string(),
            Serdes.long(),
        ).build(db)
        assert h.adapter is ad.PlainHeadersToHeadersSessionStoreAdapter
        h.put(sk("k", 0, 1), ValueTimestampHeaders(3, 99, HDRS))
        assert h.fetch_session("k", 0, 1) == ValueTimestampHeaders(3, -1, HDRS)  # headers kept
        with pytest.raises(InvalidArgumentError, match="downgrades are not supported"):
            Stores.timestamped_session_store_builder(  # TIMESTAMPED over PLAIN_HEADERS
                Stores.persistent_session_store_with_headers("c", RETENTION),
                Serdes.string(),
                Serdes.long(),
            ).build(db)


def test_bad_inputs_are_typed(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = session(db, T)
        with pytest.raises(InvalidTypeError, match="takes ValueAndTimestamp values, got int"):
            s.put(sk("a", 0, 1), 5)
        with pytest.raises(InvalidTypeError, match="got ValueTimestampHeaders"):
            s.put(sk("a", 0, 1), ValueTimestampHeaders(5, 1, HDRS))
        with pytest.raises(InvalidTypeError):
            s.put(sk("a", 0, 1), ValueAndTimestamp("not a long", 1))
        h = session(db, H, "h")
        with pytest.raises(InvalidTypeError, match="takes ValueTimestampHeaders values"):
            h.put(sk("a", 0, 1), ValueAndTimestamp(5, 1))
        with pytest.raises(InvalidArgumentError, match="unknown value format 7"):
            db.session_store("x", retention_period=RETENTION, format=7)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="unknown value format 'TIMESTAMPED'"):
            db.session_store("x", retention_period=RETENTION, format="TIMESTAMPED")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="retentionPeriod cannot be negative"):
            Stores.persistent_timestamped_session_store("x", -1)
        with pytest.raises(InvalidTypeError):
            Stores.in_memory_timestamped_session_store_with_headers("x", RETENTION, transactional=1)  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="SessionBytesStoreSupplier"):
            Stores.timestamped_session_store_builder(
                Stores.persistent_timestamped_window_store("x", RETENTION, 1, False),  # type: ignore[arg-type]
                Serdes.string(),
                Serdes.long(),
            )
        assert s.fetch_session("a", 0, 1) is None  # nothing refused was written


def test_materialized_sessioned_table_takes_timestamped_formats() -> None:
    for fmt in (T, H):
        m = Materialized.as_("v").with_retention(RETENTION).with_format(fmt)
        builder = session_builder(m.with_segment_interval(60_000))
        assert builder.format == fmt and builder.supplier.format == fmt
    with pytest.raises(InvalidArgumentError, match="PLAIN, TIMESTAMPED, HEADERS or PLAIN_HEADERS"):
        session_builder(Materialized.as_("v").with_retention(RETENTION))


def test_sessioned_table_into_timestamped_formats(tmp_path: Path) -> None:
    """KIP-300's sessioned table: the topic's plain values take each record's timestamp (and
    headers) through the record converter of the store's format."""
    serde = txstore.SessionWindowedSerde(Serdes.string())
    key = serde.serialize(Windowed("u1", SessionWindow(0, 9_000)))
    hdr = txstore.codecs.encode_headers(HDRS)
    records = [(key, (3).to_bytes(8, "big"), 9_500, hdr)]
    with txstore.open(tmp_path / "p") as db:
        for fmt, expected in (
            (T, ValueAndTimestamp(3, 9_500)),
            (H, ValueTimestampHeaders(3, 9_500, HDRS)),
        ):
            m = txstore.Materialized(
                f"s_{fmt.name}",
                Serdes.string(),
                Serdes.long(),
                retention=600_000,
                segment_interval=300_000,
                format=fmt,
            )
            store = txstore.sessioned_table(records, m, db=db)
            assert store.fetch_session("u1", 0, 9_000) == expected


# ---- changelog and restore -------------------------------------------------------------------


def ts_builder(fmt: ValueFormat, persistent: bool = True) -> Any:
    if fmt == T:
        make = (
            Stores.persistent_timestamped_session_store
            if persistent
            else Stores.in_memory_timestamped_session_store
        )
        return Stores.timestamped_session_store_builder(
            make("s", RETENTION), Serdes.string(), Serdes.long()
        )
    make = (
        Stores.persistent_timestamped_session_store_with_headers
        if persistent
        else Stores.in_memory_timestamped_session_store_with_headers
    )
    return Stores.timestamped_session_store_with_headers_builder(
        make("s", RETENTION), Serdes.string(), Serdes.long()
    )


def wrapped(fmt: ValueFormat, v: int, ts: int) -> Any:
    return ValueAndTimestamp(v, ts) if fmt == T else ValueTimestampHeaders(v, ts, HDRS)


def all_sessions(store: Any) -> list[tuple[Any, Any]]:
    with store.fetch(None, None) as it:
        return [(kv.key, kv.value) for kv in it]


@pytest.mark.parametrize("persistent", [True, False], ids=["lmdb", "mem"])
@pytest.mark.parametrize("fmt", [T, H], ids=lambda f: f.name)
def test_changelog_records_are_plain_and_restore_equals(
    tmp_path: Path, fmt: ValueFormat, persistent: bool
) -> None:
    """The changelog keeps plain values with the stored timestamp as record timestamp and the
    stored headers as record headers; deleting ``data/`` and restoring gives equal values (an
    in-memory store restores from its changelog on every start)."""
    with Task(tmp_path) as task:
        s = task.session_store(ts_builder(fmt, persistent))
        task.initialize()
        task.context.timestamp = 5  # the input record's timestamp: not the stored one
        for i in range(30):
            s.put(sk(f"u{i % 3}", i * 1_000, i * 1_000 + 100), wrapped(fmt, i, 1_000 + i))
        s.remove(sk("u0", 0, 100))
        task.commit(input_position=30)
        before = all_sessions(s)
        log = next(st.changelog for st in task.db.stacks() if st.name == "s")
        assert isinstance(log, FileChangelog)
        with log.read_committed() as records:
            recs = list(records)
        first = recs[0]
        assert (first.key, first.value) == (skey("u0", 0, 100), (0).to_bytes(8, "big"))
        assert first.timestamp == 1_000
        assert first.headers == (HB[1:] if fmt == H else b"")
        assert recs[-1].value is None and recs[-1].timestamp == 5  # the delete
    assert len(before) == 29 and dict(before)[sk("u0", 3_000, 3_100)] == wrapped(fmt, 3, 1_003)
    shutil.rmtree(tmp_path / "data")
    with Task(tmp_path) as task:
        s = task.session_store(ts_builder(fmt, persistent))
        report = task.initialize()
        assert report.restored["s"] == 31
        assert all_sessions(s) == before


def test_plain_changelog_restores_into_timestamped_store_with_record_timestamps(
    tmp_path: Path,
) -> None:
    """KIP-258's record converter: a changelog a plain session store wrote, restored into a
    timestamped one, gives each session the timestamp of its changelog record."""
    with Task(tmp_path) as task:
        s = task.session_store(
            Stores.session_store_builder(
                Stores.persistent_session_store("s", RETENTION), Serdes.string(), Serdes.long()
            )
        )
        task.initialize()
        for i in range(4):
            task.context.timestamp = 10_000 + i
            s.put(sk("k", i * 100, i * 100 + 10), i)
        task.commit(input_position=4)
    shutil.rmtree(tmp_path / "data")
    with Task(tmp_path) as task:
        s = task.session_store(ts_builder(T))
        task.initialize()
        assert [v for _, v in all_sessions(s)] == [
            ValueAndTimestamp(i, 10_000 + i) for i in range(4)
        ]


# ---- interactive queries and the CLI ----------------------------------------------------------


def test_interactive_queries_return_the_wrapper_or_the_plain_aggregation(tmp_path: Path) -> None:
    from txstore.queries import Application, StoreQueryParameters

    QT = QueryableStoreTypes
    app = Application(
        "app",
        tmp_path,
        [ts_builder(H)],
        num_partitions=1,
        task_options={"sync": False},
    )
    app.start()
    try:
        with app.writer(0) as w:
            w.store("s").put(sk("k", 0, 10), ValueTimestampHeaders(7, 70, HDRS))
            w.commit(1)

        def query(qtype: Any) -> Any:
            return app.store(StoreQueryParameters.from_name_and_type("s", qtype))

        assert query(QT.timestamped_session_store_with_headers()).fetch_session("k", 0, 10) == (
            ValueTimestampHeaders(7, 70, HDRS)
        )
        assert query(QT.timestamped_session_store()).fetch_session("k", 0, 10) == (
            ValueAndTimestamp(7, 70)
        )
        plain = query(QT.session_store())
        assert plain.fetch_session("k", 0, 10) == 7
        with plain.find_sessions("k", 0, 100) as it:
            assert [kv.value for kv in it] == [7]
        with pytest.raises(txstore.InvalidStateStoreError, match="does not accept"):
            query(QT.session_store_with_headers()).fetch_session("k", 0, 10)
    finally:
        app.close()
    T_, H_ = QT.timestamped_session_store(), QT.timestamped_session_store_with_headers()
    assert [T_.accepts(("session", f)) for f in (P, T, H, PH)] == [False, True, True, False]
    assert [H_.accepts(("session", f)) for f in (P, T, H, PH)] == [False, False, True, False]
    assert [QT.session_store().accepts(("session", f)) for f in (P, T, H, PH)] == [True] * 4
    assert QT.default_for("session", T) is T_ and QT.by_name("timestamped_session_store") is T_


def test_cli_dump_and_stat_show_the_timestamp(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "0") as db:
        session(db, T, "ts").put(sk("a", 0, 10), ValueAndTimestamp(5, 1_700_000_000_000))
        session(db, H, "th").put(sk("a", 0, 10), ValueTimestampHeaders(6, 42, HDRS))
        db.commit({"ts": 0, "th": 0})

    def cli(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "txstore", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=True,
        )
        return proc.stdout

    text = cli("dump", str(tmp_path), "ts")
    assert text.split("\t")[2].strip() == '{"value":5,"timestamp":1700000000000}'
    rec = json.loads(cli("dump", str(tmp_path), "th", "--json-lines"))
    assert rec["key"] == {"key": "a", "window": {"start": 0, "end": 10}}
    assert rec["value"] == {"value": 6, "timestamp": 42, "headers": [{"key": "h", "value": "78"}]}
    stat = {
        r["store"]: r
        for r in map(json.loads, cli("stat", str(tmp_path), "--json-lines").split("\n")[:-1])
    }
    assert (stat["ts"]["kind"], stat["ts"]["format"]) == ("session", "TIMESTAMPED")
    assert stat["th"]["format"] == "HEADERS"
