"""Partitions: layout, metadata, offsets, atomic multi-store commit, map growth, processes."""

from __future__ import annotations

import os
import threading
import time
import traceback
from pathlib import Path

import pytest

from tests import _engine_child as child
from txstore.bytestores.kv import BytesKeyValueStore, MemoryPartition
from txstore.engine.base import PartitionBase
from txstore.engine.iterators import KeyRange
from txstore.engine.partition import Partition, writer_probe
from txstore.errors import (
    ConfigConflictError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
    SnapshotInvalidatedError,
    StorageError,
)

META = {"kind": "key_value", "format": "plain", "config": {"retention": 10}, "format_version": 1}

# A leaked iterator or snapshot (ResourceWarning) fails the test, whatever the config.
pytestmark = pytest.mark.filterwarnings("error")


def test_layout(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path, overlay_budget_bytes=1024) as p:
        assert p.path == str(path) and not p.closed and p.persistent
        assert sorted(os.listdir(path)) == ["data", "writer.lock"]
        assert sorted(os.listdir(path / "data")) == ["data.mdb", "lock.mdb"]
        s = BytesKeyValueStore("kv", p)
        s.put_all((b"%05d" % i, b"x" * 20) for i in range(200))
        assert (path / "spill").is_dir()  # the overlay spilled past its 1 KiB budget
        s.commit(1)
        assert not (path / "spill").exists()  # deleted after the commit that emptied it
    assert p.closed
    p.close()  # idempotent


def test_leftover_spill_is_deleted_at_open(tmp_path: Path) -> None:
    path = tmp_path / "p"
    Partition(path).close()
    (path / "spill").mkdir()
    (path / "spill" / "data.mdb").write_bytes(b"junk from a crashed writer")
    with Partition(path):
        assert not (path / "spill").exists()


def test_register_store_and_conflicts(tmp_path: Path) -> None:
    with Partition(tmp_path / "p") as p:
        assert p.register_store("a", META) == META
        assert p.register_store("a", dict(META)) == META  # same meta: fine
        assert p.store_meta("a") == META and p.store_meta("zz") is None
        p.register_store("b", {"kind": "window"})
        assert p.store_names() == ["a", "b"]
        changed = {**META, "format": "timestamped", "config": {"retention": 20}}
        with pytest.raises(ConfigConflictError) as err:
            p.register_store("a", changed)
        msg = str(err.value)
        assert "format: 'plain' on disk, requested 'timestamped'" in msg
        assert "config.retention: 10 on disk, requested 20" in msg
        with pytest.raises(ConfigConflictError, match="extra: absent on disk"):
            p.register_store("a", {**META, "extra": 1})
        assert p.store_meta("a") == META  # nothing changed on disk
    with Partition(tmp_path / "p") as p:  # survives reopening
        assert p.store_meta("a") == META
        with pytest.raises(ConfigConflictError, match="kind: 'window' on disk"):
            p.register_store("b", {"kind": "session"})


@pytest.mark.parametrize(
    ("name", "error"),
    [
        (None, InvalidTypeError),
        (b"bytes", InvalidTypeError),
        ("", InvalidArgumentError),
        ("a\x00b", InvalidArgumentError),
        ("x" * 250, InvalidArgumentError),  # Kafka's topic-name limit is 249 characters
        ("__txstore_meta__", InvalidArgumentError),
    ],
)
def test_bad_store_names(tmp_path: Path, name: object, error: type[Exception]) -> None:
    with Partition(tmp_path / "p") as p:
        with pytest.raises(error):
            p.register_store(name, META)  # type: ignore[arg-type]
        assert p.store_names() == []


def test_bad_meta(tmp_path: Path) -> None:
    with Partition(tmp_path / "p") as p:
        with pytest.raises(InvalidTypeError, match="must be a dict"):
            p.register_store("a", ["not", "a", "dict"])  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="JSON-serializable"):
            p.register_store("a", {"x": object()})
        assert p.store_names() == []


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_offsets_and_backwards_offset_loses_nothing(tmp_path: Path, kind: str) -> None:
    p: PartitionBase = Partition(tmp_path / "p") if kind == "lmdb" else MemoryPartition()
    with p:
        s = BytesKeyValueStore("kv", p)
        assert p.committed_offset("kv") is None
        s.put(b"a", b"1")
        p.commit_stores({"kv": 5})
        assert p.committed_offset("kv") == 5
        s.put(b"b", b"2")
        with pytest.raises(OffsetError, match="would go backwards: 4 < committed 5"):
            p.commit_stores({"kv": 4})
        # nothing lost: committed data and offset intact, the staged write still staged
        assert p.committed_offset("kv") == 5
        assert s.read_committed().get(b"b") is None and s.get(b"b") == b"2"
        p.commit_stores({"kv": 5})  # the same offset again is allowed
        assert s.read_committed().get(b"b") == b"2"


@pytest.mark.parametrize(
    ("offset", "error"),
    [
        (True, InvalidTypeError),
        (1.0, InvalidTypeError),
        ("3", InvalidTypeError),
        (None, InvalidTypeError),
        (-1, OffsetError),
        (2**63, OffsetError),
    ],
)
def test_bad_offsets(tmp_path: Path, offset: object, error: type[Exception]) -> None:
    with Partition(tmp_path / "p") as p:
        s = BytesKeyValueStore("kv", p)
        s.put(b"a", b"1")
        s.commit(3)
        s.put(b"a", b"2")
        with pytest.raises(error):
            p.commit_stores({"kv": offset})  # type: ignore[dict-item]
        assert issubclass(OffsetError, InvalidArgumentError)
        assert p.committed_offset("kv") == 3 and s.read_committed().get(b"a") == b"1"


def test_commit_of_unknown_store_or_bad_mapping(tmp_path: Path) -> None:
    with Partition(tmp_path / "p") as p:
        with pytest.raises(InvalidArgumentError, match="not registered"):
            p.commit_stores({"nope": 1})
        with pytest.raises(InvalidTypeError, match="mapping"):
            p.commit_stores([("kv", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_multi_store_commit_is_atomic(tmp_path: Path, kind: str) -> None:
    p: PartitionBase = Partition(tmp_path / "p") if kind == "lmdb" else MemoryPartition()
    with p:
        a = BytesKeyValueStore("a", p)
        b = BytesKeyValueStore("b", p)
        a.put(b"x", b"1")
        b.put(b"y", b"1")
        p.commit_stores({"a": 1, "b": 10})
        assert (p.committed_offset("a"), p.committed_offset("b")) == (1, 10)
        a.put(b"x", b"2")
        b.put(b"y", b"2")
        # one bad offset: neither store is written
        with pytest.raises(OffsetError):
            p.commit_stores({"a": 2, "b": 9})
        assert a.read_committed().get(b"x") == b"1" and b.read_committed().get(b"y") == b"1"
        assert (p.committed_offset("a"), p.committed_offset("b")) == (1, 10)
        # committing only "a" leaves "b" staged
        p.commit_stores({"a": 2})
        assert a.read_committed().get(b"x") == b"2" and b.read_committed().get(b"y") == b"1"
        assert b.get(b"y") == b"2" and b.approximate_num_uncommitted_bytes() > 0
        p.commit_stores({"a": 2, "b": 11})
        assert b.read_committed().get(b"y") == b"2"


def test_map_grows_from_one_mib(tmp_path: Path) -> None:
    payload = [(b"k%05d" % i, os.urandom(1000)) for i in range(6000)]  # ~6 MB
    with Partition(tmp_path / "p", map_size=1 << 20, sync=False) as p:
        s = BytesKeyValueStore("kv", p)
        direct = BytesKeyValueStore("direct", p, transactional=False)
        view = s.read_committed()
        it = view.all()  # an open iterator across the resize
        assert it.peek_next_key() is None
        s.put_all(payload)
        s.commit(1)
        direct.put_all(payload[:2000])  # write-through path grows too
        direct.commit(1)
        for i in range(2000, 3000):  # many small write-through transactions
            direct.put(*payload[i])
        assert p.info()["map_size"] > 1 << 20
        assert list(s.all()) == payload and list(view.all()) == payload
        assert direct.get(b"k02999") == payload[2999][1]
        it.close()
    with Partition(tmp_path / "p", map_size=1 << 20) as p:  # reopens at the grown size
        s = BytesKeyValueStore("kv", p)
        assert s.approximate_num_entries() == 6000 and s.get(b"k05999") == payload[5999][1]


def test_snapshot_is_invalidated_by_a_resize(tmp_path: Path) -> None:
    with Partition(tmp_path / "p", map_size=1 << 20, sync=False) as p:
        s = BytesKeyValueStore("kv", p)
        s.put(b"a", b"1")
        s.commit(1)
        with s.read_committed().snapshot() as snap:
            assert snap.get(b"a") == b"1" and snap.committed_offset == 1
            s.put_all((b"k%05d" % i, os.urandom(1000)) for i in range(3000))
            s.commit(2)  # grows the map
            with pytest.raises(SnapshotInvalidatedError, match="take a new snapshot"):
                snap.get(b"a")
        with s.read_committed().snapshot() as snap:
            assert snap.committed_offset == 2 and snap.approximate_num_entries() == 3001


def test_same_path_twice_in_one_process(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path) as p:
        s = BytesKeyValueStore("kv", p)
        s.put(b"a", b"1")
        s.commit(1)
        with pytest.raises(
            InvalidStateStoreError, match="already open for writing in this process"
        ):
            Partition(path)
        with Partition(path, readonly=True) as ro:  # shares the environment
            r = BytesKeyValueStore("kv", ro)
            assert r.get(b"a") == b"1" and r.committed_offset == 1
            with pytest.raises(ReadOnlyError):
                r.put(b"a", b"2")
            with pytest.raises(ReadOnlyError):
                ro.commit_stores({"kv": 2})
            with pytest.raises(ReadOnlyError, match="does not exist"):
                BytesKeyValueStore("other", ro)
        s.put(b"b", b"2")  # the writer is unaffected by the reader's close
        s.commit(2)
        with pytest.raises(InvalidStateStoreError, match="already open on this partition"):
            BytesKeyValueStore("kv", p)
    with (
        Partition(path, readonly=True),
        pytest.raises(InvalidStateStoreError, match="already open read-only"),
    ):
        Partition(path)
    with Partition(path) as p:  # everything closed: a writer may open again
        assert p.committed_offset("kv") == 2


def test_readonly_open_of_missing_partition(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no txstore partition"):
        Partition(tmp_path / "missing", readonly=True)
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"map_size": 0}, InvalidArgumentError),
        ({"max_dbs": "4"}, InvalidTypeError),
        ({"overlay_budget_bytes": True}, InvalidTypeError),
    ],
)
def test_bad_partition_arguments(tmp_path: Path, kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        Partition(tmp_path / "p", **kwargs)  # type: ignore[arg-type]


def test_closed_partition_refuses_use(tmp_path: Path) -> None:
    p = Partition(tmp_path / "p")
    s = BytesKeyValueStore("kv", p)
    p.close()
    assert not s.is_open  # closing the partition closes its stores
    with pytest.raises(InvalidStateStoreError, match="is closed"):
        p.committed_offset("kv")


def test_readonly_open_from_a_spawned_process(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path) as p:
        s = BytesKeyValueStore("kv", p)
        s.put_all([(b"a", b"1"), (b"b", b"2")])
        s.commit(42)
        s.put(b"c", b"uncommitted")
        # the writer stays open while another process reads committed data
        out = child.run("read-once", path, "kv")
    assert out == {"items": [["61", "31"], ["62", "32"]], "offset": 42, "write": "ReadOnlyError"}


def test_second_writer_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p"
    Partition(path).close()
    proc = child.spawn("hold-writer", path)
    try:
        child.wait_line(proc, "READY")
        with pytest.raises(InvalidStateStoreError, match="open for writing by another process"):
            Partition(path)
        with Partition(path, readonly=True) as ro:  # readers are welcome
            assert ro.store_names() == []
    finally:
        child.kill(proc)
    with Partition(path):  # the lock died with the process
        pass


def test_opening_writer_waits_out_an_inspector_probe(tmp_path: Path) -> None:
    """An inspector asking whether a writer is alive (``writer_probe``, as ``txstore check``
    does) holds ``writer.lock`` shared for a moment; a writer process opening the partition
    meanwhile waits for it rather than failing as if another writer held the lock. A live
    writer is seen as alive, and no longer once SIGKILLed (the OS drops its flock)."""
    path = tmp_path / "p"
    Partition(path).close()
    with writer_probe(path) as alive:
        assert alive is False
        proc = child.spawn("open-then-hold-writer", path)
        child.wait_line(proc, "OPENING")
        time.sleep(0.7)  # the child is trying to take the lock now
        assert proc.poll() is None
    try:
        child.wait_line(proc, "READY")  # opened once the probe ended
        with writer_probe(path) as alive:
            assert alive is True
        with pytest.raises(InvalidStateStoreError, match="open for writing by another process"):
            Partition(path)  # a second writer still fails at once
    finally:
        child.kill(proc)
    with writer_probe(path) as alive:
        assert alive is False
    with writer_probe(tmp_path / "never-opened") as alive:
        assert alive is False  # no writer.lock: no writer ever opened it


def test_inherited_partition_is_unusable_after_fork(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path) as p:
        s = BytesKeyValueStore("kv", p)
        s.put(b"a", b"1")
        s.commit(1)
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code, never return into pytest
            code = 0
            try:
                try:
                    p.committed_offset("kv")
                    code = 1
                except InvalidStateStoreError as exc:
                    code = 0 if "before a fork" in str(exc) else 2
                if code == 0:
                    with Partition(path, readonly=True) as ro:  # a fresh open works
                        code = 0 if ro.committed_offset("kv") == 1 else 3
            except BaseException:
                (tmp_path / "err.txt").write_text(traceback.format_exc())
                code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        err = tmp_path / "err.txt"
        assert os.WEXITSTATUS(status) == 0, err.read_text() if err.exists() else status
        # the child closed its inherited environment: the parent's reader slots are intact
        assert s.get(b"a") == b"1" and list(s.read_committed().all()) == [(b"a", b"1")]


def test_reader_check_and_info(tmp_path: Path) -> None:
    with Partition(tmp_path / "p") as p:
        assert p.reader_check() == 0
        info = p.info()
        assert info["map_size"] >= 64 * 2**20 and info["path"] == str(tmp_path / "p")


def test_store_owning_several_databases_and_dropping_one(tmp_path: Path) -> None:
    """A later window store keeps one database per segment and drops whole segments."""
    with Partition(tmp_path / "p") as p:
        p.register_store("w", {"kind": "window"})
        assert p.overlay is not None
        seg100, seg200 = p.db_name("w", "100"), p.db_name("w", "200")
        assert seg100 == b"w.100"
        p.overlay.db("w", seg100).put(b"k1", b"a")
        p.overlay.db("w", seg200).put(b"k2", b"b")
        p.commit_stores({"w": 1})
        assert p.get(seg100, b"k1") == b"a" and p.count(seg200) == 1
        snap = p.snapshot()
        assert snap.get(seg100, b"k1") == b"a"
        ov = p.overlay.db("w", seg100)
        ov.drop()  # staged: the whole segment disappears at the next commit
        assert ov.get(b"k1") is None and p.get(seg100, b"k1") == b"a"
        p.commit_stores({"w": 2})
        assert p.get(seg100, b"k1") is None and p.count(seg100) == 0
        assert seg100 not in p._db_names() and seg200 in p._db_names()
        with pytest.raises(SnapshotInvalidatedError):
            snap.get(seg100, b"k1")  # a drop in this process invalidates older snapshots
        snap.close()
        p.overlay.db("w", seg100).put(b"k3", b"c")  # the name can be used again
        p.commit_stores({"w": 3})
        assert list(p.source(seg100).read_chunk(KeyRange(), False, 10)[0]) == [(b"k3", b"c")]


def test_reader_threads_while_the_writer_creates_databases(tmp_path: Path) -> None:
    """Handle opening is coordinated: no deadlock, no invalid handle, under contention."""
    with Partition(tmp_path / "p", sync=False) as p:
        stores = [BytesKeyValueStore("s0", p)]
        stores[0].put(b"k", b"0")
        stores[0].commit(0)
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                while not stop.is_set():
                    for i in range(len(stores)):
                        view = stores[i].read_committed()
                        view.get(b"k")
                        with view.snapshot() as snap:
                            list(snap.all())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(1, 40):
                s = BytesKeyValueStore(f"s{i}", p)
                s.put(b"k", b"%d" % i)
                stores.append(s)
                p.commit_stores({f"s{j}": i for j in range(i + 1)})
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert not any(t.is_alive() for t in threads), "reader thread deadlocked"
        assert errors == []
        assert [s.read_committed().get(b"k") for s in stores[1:3]] == [b"1", b"2"]
