"""Segments, retention and expiry of window and session stores (kafka-formats.md section 4),
with the worked examples of section 4.6 reproduced on real LMDB files."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Serdes, SessionWindow, Stores, Windowed
from txstore.bytestores.schemas import SessionKeySchema, WindowKeySchema
from txstore.bytestores.segments import SegmentedBytesStore
from txstore.codecs import ValueFormat, window_key
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, InvalidTypeError, ReadOnlyError, StorageError
from txstore.stores.window import WindowStore

INTERVAL = 60_000
RETENTION = 2 * INTERVAL
K0 = b"\x00\x00\x00\x00"  # Serdes.integer() of 0


def window_store(
    db: txstore.Database, *, retain: bool = True, tx: bool = True, name: str = "w"
) -> WindowStore[int, str]:
    supplier = Stores.persistent_window_store(name, RETENTION, 3, retain, transactional=tx)
    return Stores.window_store_builder(supplier, Serdes.integer(), Serdes.string()).build(db)


def segment_dbs(db: txstore.Database, name: str = "w") -> set[int]:
    """The segment databases that exist in LMDB (Kafka's "segment dirs"), by segment id (not
    the store's other databases, such as ``<name>.seq``, its last sequence number)."""
    names = [n.decode() for n in db.partition._db_names()]
    suffixes = [n[len(name) + 1 :] for n in names if n.startswith(name + ".")]
    return {int(s) // INTERVAL for s in suffixes if s.isdigit()}


def count(it: Any) -> int:
    with it:
        return sum(1 for _ in it)


@pytest.mark.parametrize("tx", [True, False], ids=["tx", "direct"])
def test_segment_maintenance(tmp_path: Path, tx: bool) -> None:
    """AbstractRocksDBWindowStoreTest.testSegmentMaintenance (section 4.6)."""
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, tx=tx)
        assert w.segment_interval == INTERVAL

        def step(ts: int, expected: set[int]) -> None:
            w.put(0, "v", ts)
            w.commit(ts)
            assert set(w.bytes_store.segment_ids()) == expected
            assert segment_dbs(db) == expected  # whole databases dropped on disk

        step(0, {0})
        w.put(0, "v", INTERVAL - 1)  # a duplicate (retain_duplicates)
        step(INTERVAL - 1, {0})
        step(INTERVAL, {0, 1})
        assert count(w.fetch(0, 0, INTERVAL * 4)) == 4
        step(INTERVAL * 3, {1, 3})
        # actualFrom = 180000 - 120000 + 1 = 60001: the record at 60000 is hidden
        assert count(w.fetch(0, 0, INTERVAL * 4)) == 1
        step(INTERVAL * 5, {3, 5})
        assert count(w.fetch(0, INTERVAL * 4, INTERVAL * 10)) == 1
        assert w.observed_stream_time == INTERVAL * 5


def test_rolling_hides_records_below_actual_from(tmp_path: Path) -> None:
    """testRolling: the record at 150000 is in live segment 2 but below 270000-120000+1."""
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        start, inc = INTERVAL * 2, INTERVAL // 2
        for k, mult in [(0, 0), (1, 1), (2, 2), (4, 4), (5, 5)]:
            w.put(k, f"v{k}", start + inc * mult)
        w.commit(1)
        assert segment_dbs(db) == {2, 3, 4}
        assert w.fetch(1, start + inc) is None  # single-window get applies the filter too
        with w.fetch(1, start + inc - 3, start + inc + 3) as it:
            assert list(it) == []
        with w.fetch(2, start + 2 * inc - 3, start + 2 * inc + 3) as it:
            assert [kv.value for kv in it] == ["v2"]
        with w.all() as it:
            assert [kv.key.key for kv in it] == [2, 4, 5]


def test_initial_loading_drops_expired_existing_segments(tmp_path: Path) -> None:
    """testInitialLoading: segments 0..6 exist; a put at 6 * interval leaves {4, 5, 6}."""
    path = tmp_path / "p"
    with txstore.open(path) as db:
        window_store(db)  # registers the store's metadata
    with Partition(path) as p:  # pre-existing segments, as Kafka's test creates directories
        raw = SegmentedBytesStore(
            "w", p, schema=WindowKeySchema(), retention=2**40, segment_interval=INTERVAL
        )
        for sid in range(7):
            raw.put(window_key(K0, sid * INTERVAL, 1), b"v")
        raw.commit(1)
    with txstore.open(path) as db:
        w = window_store(db)
        assert w.bytes_store.segment_ids() == list(range(7))  # the registry survived reopen
        w.put(0, "v", 6 * INTERVAL)
        w.commit(2)
        assert segment_dbs(db) == {4, 5, 6}


def test_late_record_in_live_segment_is_kept_but_filtered(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        w.put(1, "new", 200_000)  # observed 200000: min live segment = seg(80000) = 1
        assert w.dropped_records == 0
        w.put(1, "late", 70_000)  # segment 1 is live: accepted although 70000 <= 80000
        assert w.dropped_records == 0
        assert w.bytes_store.get(window_key(K0[:3] + b"\x01", 70_000)) is None  # filtered
        w.put(1, "expired", 59_999)  # segment 0 < 1: dropped and counted
        assert w.dropped_records == 1
        assert 0 not in w.bytes_store.segment_ids()


def test_in_memory_expiry_is_per_record(caplog: pytest.LogCaptureFixture) -> None:
    """In-memory stores drop a put with ts <= observed - retention, segment or not."""
    supplier = Stores.in_memory_window_store("m", RETENTION, 3, False)
    with Stores.window_store_builder(supplier, Serdes.integer(), Serdes.string()).build() as w:
        w.put(1, "new", 200_000)
        with caplog.at_level(logging.WARNING, logger="txstore"):
            w.put(1, "late", 70_000)  # same segment as 80000 - but 70000 <= 80000: dropped
        assert "Skipping record for expired segment." in caplog.text
        assert w.dropped_records == 1
        w.put(1, "kept", 80_001)
        assert w.dropped_records == 1
        assert w.fetch(1, 80_001) == "kept"


def test_session_segments_by_end_and_in_memory_remove() -> None:
    s_persistent = SessionKeySchema()
    key = b"a" + bytes.fromhex("0000000000000014 000000000000000a")
    assert s_persistent.segment_timestamp(key) == 20
    supplier = Stores.in_memory_session_store("s", RETENTION)
    with Stores.session_store_builder(supplier, Serdes.string(), Serdes.long()).build() as s:
        s.put(Windowed("a", SessionWindow(0, 200_000)), 1)
        s.remove(Windowed("a", SessionWindow(0, 500_000)))  # in memory: no time advance
        assert s.observed_stream_time == 200_000


def test_persistent_session_remove_advances_observed_time(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION)
        s.put(Windowed("a", SessionWindow(0, 10)), 1)
        s.remove(Windowed("b", SessionWindow(0, 500_000)))
        assert s.observed_stream_time == 500_000
        assert s.fetch_session("a", 0, 10) is None  # expired by the advanced time


def test_recover_discards_staged_segment_drops(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        w.put(1, "a", 0)
        w.put(1, "b", INTERVAL + 5_000)
        w.commit(5)
        w.put(1, "c", 3 * INTERVAL)  # stages the drop of segment 0, creates segment 3
        assert w.bytes_store.segment_ids() == [1, 3]
        assert segment_dbs(db) == {0, 1}  # nothing applied before commit
        view = w.read_committed()
        # committed observed time 65000: "a" is not expired for committed readers
        assert [kv.value for kv in view.fetch(1, 0, 10 * INTERVAL)] == ["a", "b"]
        assert w.recover(5) is True
        assert w.bytes_store.segment_ids() == [0, 1]
        assert w.observed_stream_time == INTERVAL + 5_000  # as of the last commit
        with w.fetch(1, 0, 10 * INTERVAL) as it:
            assert [kv.value for kv in it] == ["a", "b"]
        assert segment_dbs(db) == {0, 1}


def test_segment_overlays_are_released_after_commit(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        for i in range(30):
            w.put(1, "v", i * INTERVAL)
            w.commit(i)
        overlay = db.partition.overlay
        assert overlay is not None
        names = [ov.name for ov in overlay.dbs("w")]
        assert len(names) <= 5, names  # registry + live segments (+ the last dropped one)


def test_read_committed_snapshot_and_read_only_partition(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        w = window_store(db, retain=False)
        w.put(1, "one", 1_000)
        w.commit(1)
        with w.read_committed().snapshot() as snap:
            w.put(1, "two", 1_000)
            w.commit(2)
            assert snap.fetch(1, 1_000) == "one"
            assert snap.committed_offset == 1
        assert w.read_committed().fetch(1, 1_000) == "two"
    with Partition(path, readonly=True) as p:
        raw = SegmentedBytesStore(
            "w", p, schema=WindowKeySchema(), retention=RETENTION, segment_interval=INTERVAL
        )
        assert raw.get(window_key(b"\x00\x00\x00\x01", 1_000)) == b"two"
        with pytest.raises(ReadOnlyError):
            raw.put(window_key(b"\x00\x00\x00\x01", 2_000), b"x")


def test_restore_advances_time_first_then_skips_expired(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        rows = [
            (window_key(K0, 0), b"old"),
            (window_key(K0, 2 * INTERVAL), b"mid"),
            (window_key(K0, 5 * INTERVAL), b"new"),
            (window_key(K0, 5 * INTERVAL + 1), None),
        ]
        assert w.bytes_store.restore(rows) == 2  # observed 300000 first: min live segment 3
        assert w.observed_stream_time == 5 * INTERVAL + 1
        assert w.bytes_store.segment_ids() == [5]
        w.commit(9)
        assert w.fetch(0, 5 * INTERVAL) == "new"


def test_restore_keeps_changelog_order_within_each_segment(tmp_path: Path) -> None:
    """Records of one batch interleaved over two segments: the last record of a key wins in
    each segment, and tombstones delete what an earlier record of the batch wrote."""
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        t0, t1 = 3 * INTERVAL, 4 * INTERVAL
        rows = [
            (window_key(K0, t0), b"a1"),
            (window_key(K0, t1), b"b1"),
            (window_key(K0, t0), b"a2"),
            (window_key(K0, t1), None),
            (window_key(K0, t1 + 1), b"c1"),
            (window_key(K0, t0), b"a3"),
        ]
        assert w.bytes_store.restore(rows) == 6
        assert w.bytes_store.segment_ids() == [3, 4]
        w.commit(6)
        assert (w.fetch(0, t0), w.fetch(0, t1), w.fetch(0, t1 + 1)) == ("a3", None, "c1")


def test_restore_rejects_bad_records_before_applying_any(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        w.put(1, "keep", 1_000)
        w.commit(1)
        good = (window_key(K0, 2_000), b"x")
        for bad, error, match in [
            (("not bytes", b"x"), InvalidTypeError, "store key must be bytes"),
            ((b"k" * 600, b"x"), InvalidArgumentError, "maximum key size"),
            ((window_key(K0, 3_000), 5), InvalidTypeError, "value must be bytes or None"),
            ((b"short", b"x"), InvalidArgumentError, "shorter than its 12-byte suffix"),
            ((window_key(K0, -1), b"x"), InvalidArgumentError, "negative timestamps"),
        ]:
            with pytest.raises(error, match=match):
                w.bytes_store.restore([good, bad])  # type: ignore[list-item]
        w.commit(1)
        assert w.fetch(1, 1_000) == "keep" and w.fetch(0, 2_000) is None  # nothing applied


def test_bad_input_is_typed_and_loses_nothing(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        w.put(1, "keep", 1_000)
        w.commit(1)
        with pytest.raises(InvalidArgumentError, match="negative"):
            w.put(1, "x", -5)
        with pytest.raises(InvalidArgumentError):
            w.bytes_store.put(b"short", b"x")  # not a window store key
        with pytest.raises(InvalidArgumentError, match="key cannot be null"):
            w.put(None, "x", 5)  # type: ignore[arg-type]
        assert w.fetch(1, 1_000) == "keep"
        assert w.bytes_store.segment_ids() == [0]


def test_corrupt_registry_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        window_store(db)
    with Partition(path) as p:
        p.write_through(b"w", [(b"not-a-segment-id", b"\x00")])
    with txstore.open(path) as db, pytest.raises(StorageError, match="segment registry"):
        window_store(db)


def test_segment_names_and_store_name_collisions(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window_store(db, retain=False)
        w.put(1, "v", 65_000)
        assert w.bytes_store.segment_db(1) == b"w.60000"
        with pytest.raises(InvalidArgumentError, match="collides"):
            db.key_value_store("w.60000")
        with pytest.raises(InvalidArgumentError, match="collides"):
            db.window_store("w.120000", retention_period=RETENTION, window_size=1)


def test_validation_messages_are_kafkas() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^retentionPeriod cannot be negative$"):
        Stores.persistent_window_store("w", -1, 0, False)
    with pytest.raises(InvalidArgumentError, match=r"^windowSize cannot be negative$"):
        Stores.persistent_window_store("w", 10, -1, False)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^The retention period of the window store w must be no smaller than its window "
        r"size\. Got size=\[20\], retention=\[10\]$",
    ):
        Stores.in_memory_window_store("w", 10, 20, False)
    with pytest.raises(InvalidArgumentError, match=r"^retentionPeriod cannot be negative$"):
        Stores.persistent_session_store("s", -1)
    with pytest.raises(InvalidArgumentError, match="segmentInterval cannot be zero"):
        SegmentedBytesStore("x", schema=WindowKeySchema(), retention=1, segment_interval=0)
    assert Stores.persistent_window_store("w", 1_000_000, 1, False).segment_interval == 500_000
    assert Stores.persistent_session_store("s", 1_000).segment_interval == 60_000


def test_in_memory_time_only_find_sessions_is_end_ordered() -> None:
    supplier = Stores.in_memory_session_store("s", 10 * INTERVAL)
    with Stores.session_store_builder(supplier, Serdes.string(), Serdes.long()).build() as s:
        s.put(Windowed("b", SessionWindow(0, 10)), 1)
        s.put(Windowed("a", SessionWindow(5, 30)), 2)
        s.put(Windowed("a", SessionWindow(0, 10)), 3)
        s.put(Windowed("c", SessionWindow(0, 70_000)), 4)
        with s.find_sessions(10, 70_000) as it:
            got = [(kv.key.key, kv.key.window.start, kv.key.window.end) for kv in it]
        assert got == [("a", 0, 10), ("b", 0, 10), ("a", 5, 30), ("c", 0, 70_000)]
        with s.find_sessions(11, 69_999) as it:
            assert [kv.value for kv in it] == [2]


def test_segmented_store_format_is_recorded_per_segment(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w: WindowStore[bytes, Any] = db.window_store(
            "w", retention_period=RETENTION, window_size=1, format=ValueFormat.HEADERS
        )
        w.put(b"k", txstore.ValueTimestampHeaders(b"v", 5), 0)
        assert w.bytes_store.segment_format(0) == ValueFormat.HEADERS
        db.commit({"w": 0})
        assert db.partition.get(b"w", bytes(8)) == bytes([ValueFormat.HEADERS])
