"""LMDB's table of named-database handles (dbi slots) over the life of long-running processes.

Window and session stores keep one named database per time segment; expiry drops segments and
new ones appear as stream time advances. LMDB frees a dbi slot only through ``mdb_dbi_close``
(not exposed by py-lmdb) or ``mdb_drop`` (the writer's segment drop). A read-only process opens
one slot per segment it reads and, before the fix, failed with ``MDB_DBS_FULL`` after about
``max_dbs`` segment generations (at generation 254 with the default 256). These tests run a real
writer process that rolls segments while this process keeps reading, for more generations than
the reader's ``max_dbs``; and a long-running writer that rolls segments with a tiny ``max_dbs``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import txstore
from tests._segment_roll_child import STEP, Writer
from txstore import Serdes
from txstore.bytestores.schemas import WindowKeySchema
from txstore.bytestores.segments import SegmentedBytesStore
from txstore.engine.lmdb_env import DEFAULT_MAX_DBS, dbi_reopen_threshold
from txstore.engine.partition import Partition
from txstore.errors import SnapshotInvalidatedError, StorageError

pytestmark = pytest.mark.filterwarnings("error")


def _open_reader(path: Path, max_dbs: int | None = None) -> tuple[txstore.Database, object]:
    db = txstore.open(path, readonly=True, max_dbs=max_dbs)
    w = db.window_store("w", Serdes.string(), Serdes.string(), retention_period=STEP, window_size=1)
    return db, w.read_committed()


def _check_generation(view: object, gen: int, keys: int) -> None:
    """What a read-committed reader must see right after the writer committed ``gen``."""
    expected = [((g * STEP), f"g{g}") for g in (gen - 1, gen) if g >= 1]
    with view.fetch("k00000", 0, 2**62) as it:  # type: ignore[attr-defined]
        assert [(kv.key, kv.value) for kv in it] == expected
    assert view.fetch(f"k{keys - 1:05d}", gen * STEP) == f"g{gen}"  # type: ignore[attr-defined]
    with view.all() as it:  # type: ignore[attr-defined]
        rows = [(kv.key.window.start, kv.value) for kv in it]
    assert len(rows) == keys * len(expected)
    assert {r for r in rows} == set(expected)


def test_readonly_reader_outlives_max_dbs_segment_generations(tmp_path: Path) -> None:
    """Default ``max_dbs`` (256): more than twice that many segments are created and dropped
    while one read-only partition, opened once, reads after every commit."""
    path, keys = tmp_path / "p", 3
    generations = 2 * DEFAULT_MAX_DBS + 40
    writer = Writer(path, keys)
    try:
        db, view = _open_reader(path)
        with db:
            for _ in range(generations):
                gen = writer.step()
                _check_generation(view, gen, keys)
            info = db.partition.info()
            assert info["max_dbs"] == DEFAULT_MAX_DBS
            assert info["dbi_reopens"] >= 2
            assert info["dbi_slots"] <= dbi_reopen_threshold(DEFAULT_MAX_DBS)
    finally:
        writer.close()  # the writer rolled just as many segments: its table never fills either


def test_open_iterators_and_snapshots_across_reopens(tmp_path: Path) -> None:
    """A tiny reader table (16 slots): iterators opened before a reopen keep working; an open
    snapshot defers the reopen until the table is full, then raises the typed error."""
    path, keys, max_dbs = tmp_path / "p", 300, 16
    writer = Writer(path, keys)
    try:
        db, view = _open_reader(path, max_dbs)
        with db:
            part = db.partition
            gen = writer.step()
            snap = view.snapshot()  # type: ignore[attr-defined]
            snap_rows = [(kv.key.window.start, kv.value) for kv in snap.fetch_all(0, 2**62)]
            assert snap_rows == [(STEP, "g1")] * keys
            it = None
            seen: list[tuple[int, str]] = []
            invalidated_at = None
            for _ in range(6 * max_dbs):
                gen = writer.step()
                _check_generation(view, gen, keys)
                if invalidated_at is None:
                    try:
                        rows = [(kv.key.window.start, kv.value) for kv in snap.fetch_all(0, 2**62)]
                        assert rows == snap_rows  # the snapshot still sees generation 1
                    except SnapshotInvalidatedError:
                        invalidated_at = gen
                        snap.close()
                        assert part.info()["dbi_reopens"] == 1  # the first reopen was forced
                # A chunked iterator read a little per generation, so that it spans reopens:
                # it yields valid rows in order (segments dropped meanwhile read as empty).
                if it is None:
                    it, seen = view.all(), []  # type: ignore[attr-defined]
                for _ in range(70):
                    kv = next(it, None)
                    if kv is None:
                        it.close()
                        it = None
                        break
                    seen.append((kv.key.window.start, kv.value))
                    start, value = seen[-1]
                    assert value == f"g{start // STEP}"
                    assert sorted(seen) == seen
            if it is not None:
                it.close()
            assert invalidated_at is not None, "the snapshot was never invalidated"
            # Every slot was needed before the forced reopen: the open snapshot deferred it.
            assert invalidated_at > dbi_reopen_threshold(max_dbs)
            info = part.info()
            assert info["dbi_reopens"] >= 4
            with view.snapshot() as snap2:  # type: ignore[attr-defined]
                values = [kv.value for kv in snap2.fetch_all(0, 2**62)]
                assert values == [f"g{gen - 1}"] * keys + [f"g{gen}"] * keys
    finally:
        writer.close()


def test_snapshot_needing_more_databases_than_max_dbs_is_a_typed_error(tmp_path: Path) -> None:
    path, keys = tmp_path / "p", 2
    writer = Writer(path, keys)
    try:
        for _ in range(3):
            writer.step()  # meta, registry and two live segments: 4 databases
        db, view = _open_reader(path, max_dbs=3)
        with db:
            _check_generation(view, 3, keys)  # plain reads need one database at a time
            with pytest.raises(StorageError, match="max_dbs"):
                view.snapshot()  # type: ignore[attr-defined]
            _check_generation(view, 3, keys)
    finally:
        writer.close()


def test_long_running_writer_reuses_dropped_slots(tmp_path: Path) -> None:
    """A writer rolls segments far past its ``max_dbs``: ``mdb_drop`` frees each dropped
    segment's slot, so its table never fills. Reads of every kind run in the writer's process
    meanwhile (its own store, read-committed views, snapshots, a read-only partition sharing
    its environment), transactional and write-through stores alike."""
    path, max_dbs = tmp_path / "p", 12
    schema = WindowKeySchema()
    with Partition(path, sync=False, max_dbs=max_dbs) as p:
        tx = SegmentedBytesStore("tx", p, schema=schema, retention=10, segment_interval=5)
        wt = SegmentedBytesStore(
            "wt", p, schema=schema, retention=10, segment_interval=5, transactional=False
        )
        ro = Partition(path, readonly=True)
        try:
            ro_store = SegmentedBytesStore(
                "tx", ro, schema=schema, retention=10, segment_interval=5
            )
            views = [tx.read_committed(), wt.read_committed(), ro_store.read_committed()]
            for gen in range(10 * max_dbs):
                key = b"k" + (gen * 5).to_bytes(8, "big") + (0).to_bytes(4, "big")
                for store in (tx, wt):
                    store.put(key, b"v%d" % gen)
                    with store.all() as it:
                        assert [v for _, v in it][-1] == b"v%d" % gen
                    store.commit(gen)
                for view in views:
                    assert view.get(key) == b"v%d" % gen
                    with view.snapshot() as snap, snap.all() as it:
                        assert [v for _, v in it][-1] == b"v%d" % gen
            info = p.info()
            assert info["dbi_slots"] <= 3 + 2 * 3  # meta, two registries, 3 live segments each
            assert info["dbi_reopens"] == 0
        finally:
            ro.close()
