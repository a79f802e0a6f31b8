"""A writable environment's table of named-database handles starts small and grows by reopening
the environment (:mod:`txstore.engine.lmdb_sizing`): what a reopen must never break. Staged
writes, open iterators (read-uncommitted and read-committed), read-only partitions sharing the
environment, readers in other processes, the writer lock and the clean-close marker; snapshots
are waited for, and invalidated (as by a map resize) only when held past the wait."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine import partition_writes
from txstore.engine.lmdb_sizing import (
    MIN_DBI_TABLE,
    SNAPSHOT_WAIT_S,
    grown_dbi_table,
    initial_dbi_table,
    tune_malloc,
)
from txstore.engine.partition import Partition, writer_probe
from txstore.errors import InvalidStateStoreError, SnapshotInvalidatedError, StorageError

pytestmark = pytest.mark.filterwarnings("error")

ROWS = 3000  # more than one iterator chunk: the iterators read again after the reopens


def _key(i: int) -> bytes:
    return b"k%05d" % i


def _filled(p: Partition, name: str = "s0") -> BytesKeyValueStore:
    s = BytesKeyValueStore(name, p)
    for i in range(ROWS):
        s.put(_key(i), b"v%d" % i)
    s.commit(0)
    return s


def test_table_sizes() -> None:
    assert initial_dbi_table(0, 256) == MIN_DBI_TABLE == 16
    assert initial_dbi_table(100, 256) == 128 and initial_dbi_table(100, 50) == 50
    assert grown_dbi_table(14, 16, 256) == 32 and grown_dbi_table(14, 16, 20) == 20


def test_writer_outgrows_its_table_with_open_iterators_and_staged_writes(
    tmp_path: Path,
) -> None:
    """40 stores created one commit at a time (the table grows 16 -> 32 -> 64) while
    iterators are open over a store with staged writes, and other stores hold staged writes:
    nothing is lost, every iterator carries on, a read-only partition sharing the environment
    reads every store."""
    path = tmp_path / "p"
    with Partition(path, sync=False) as p:
        assert p.info()["dbi_table"] == 16 and p.info()["max_dbs"] == 256
        s0 = _filled(p)
        s0.put(_key(1), b"staged")  # read-uncommitted iterators see it
        s0.put(_key(ROWS), b"new")
        staged = BytesKeyValueStore("staged", p)
        staged.put(b"a", b"uncommitted")
        committed_it = s0.read_committed().all()
        uncommitted_it = s0.all()
        head = [next(committed_it), next(committed_it)]
        uhead = [next(uncommitted_it), next(uncommitted_it)]
        ro = Partition(path, readonly=True)  # shares the writer's environment
        try:
            ro_s0 = BytesKeyValueStore("s0", ro)
            ro_it = ro_s0.all()
            assert next(ro_it) == (_key(0), b"v0")
            stores = []
            for i in range(40):
                s = BytesKeyValueStore(f"n{i}", p)
                s.put(b"k", b"%d" % i)
                s.commit(1)
                stores.append(s)
            info = p.info()
            assert info["dbi_table"] == 64 and info["dbi_reopens"] == 2
            assert head + list(committed_it) == [(_key(i), b"v%d" % i) for i in range(ROWS)]
            want = [(_key(i), b"v%d" % i) for i in range(ROWS)]
            want[1] = (_key(1), b"staged")
            assert uhead + list(uncommitted_it) == [*want, (_key(ROWS), b"new")]
            assert len(list(ro_it)) == ROWS - 1
            committed_it.close()
            uncommitted_it.close()
            ro_it.close()
            assert staged.get(b"a") == b"uncommitted"  # still staged, not committed
            assert staged.read_committed().get(b"a") is None
            p.commit_stores({"s0": 2, "staged": 2})
            assert staged.read_committed().get(b"a") == b"uncommitted"
            assert s0.read_committed().get(_key(1)) == b"staged"
            assert [BytesKeyValueStore(f"n{i}", ro).get(b"k") for i in range(40)] == [
                b"%d" % i for i in range(40)
            ]
        finally:
            ro.close()
    with Partition(path) as p:  # the table is sized from the file at open: no reopen
        assert p.last_writer_closed_cleanly is True
        assert p.info()["dbi_table"] == 64 and p.info()["dbi_reopens"] == 0
        views = [BytesKeyValueStore(f"n{i}", p).read_committed() for i in range(40)]
        out: list[bytes | None] = []
        t = threading.Thread(target=lambda: out.extend(v.get(b"k") for v in views))
        t.start()
        t.join(30)
        assert out == [b"%d" % i for i in range(40)]


def test_one_write_creating_many_databases(tmp_path: Path) -> None:
    """One commit creates 100 databases: the full table aborts it, the environment reopens
    twice as large until it fits, and the whole write is replayed once, atomically."""
    with Partition(tmp_path / "p", sync=False) as p:
        s0 = _filled(p)
        stores = [BytesKeyValueStore(f"n{i}", p) for i in range(3)]
        assert p.overlay is not None
        for i in range(100):
            p.overlay.db("n0", p.db_name("n0", str(i))).put(b"k", b"%d" % i)
        p.commit_stores({"n0": 5})
        assert p.info()["dbi_table"] == 128
        assert [p.get(p.db_name("n0", str(i)), b"k") for i in range(100)] == [
            b"%d" % i for i in range(100)
        ]
        assert p.committed_offset("n0") == 5 and s0.get(_key(7)) == b"v7"
        assert stores[2].committed_offset is None


def test_table_cannot_grow_past_max_dbs(tmp_path: Path) -> None:
    """``max_dbs`` stays the limit of the writer's handles: a write needing more is a typed
    error, and nothing committed or staged is lost."""
    with Partition(tmp_path / "p", sync=False, max_dbs=20) as p:
        s0 = _filled(p)
        for i in range(18):
            BytesKeyValueStore(f"n{i}", p)
        assert p.info()["dbi_table"] == 20 and p.info()["dbi_slots"] == 20
        s0.put(_key(1), b"staged")
        with pytest.raises(StorageError, match="max_dbs"):
            BytesKeyValueStore("one-too-many", p)
        assert s0.get(_key(1)) == b"staged" and s0.read_committed().get(_key(1)) == b"v1"
        assert len(p.store_names()) == 19


def test_snapshots_are_waited_for_then_invalidated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unforced growth waits for no snapshot (it tries again at a later commit); a forced one
    waits for open snapshots to close (up to SNAPSHOT_WAIT_S), then reopens and invalidates
    them. The wait is set long for the first part and short for the second, so that neither
    depends on how fast the machine is."""
    assert SNAPSHOT_WAIT_S > 0
    monkeypatch.setattr(partition_writes, "SNAPSHOT_WAIT_S", 60.0)
    with Partition(tmp_path / "p", sync=False) as p:
        s0 = _filled(p)
        snap = s0.snapshot()
        for i in range(12):  # 14 databases: past the headroom of 16, the growth is deferred
            BytesKeyValueStore(f"n{i}", p)
        assert p.info()["dbi_table"] == 16 and snap.get(_key(3)) == b"v3"
        seen: list[bytes | None] = []

        def read_then_close() -> None:  # raises if the reopen did not wait for the close
            seen.append(snap.get(_key(3)))
            snap.close()

        closer = threading.Timer(0.2, read_then_close)  # another thread, while we wait
        closer.start()
        for i in range(12, 15):  # 17 databases: the table is full, the growth is forced
            BytesKeyValueStore(f"n{i}", p)
        closer.join()
        assert seen == [b"v3"] and p.info()["dbi_table"] == 32
        monkeypatch.setattr(partition_writes, "SNAPSHOT_WAIT_S", 0.05)
        held = s0.snapshot()
        for i in range(15, 31):  # fills 32: forced, held past the wait
            BytesKeyValueStore(f"n{i}", p)
        assert p.info()["dbi_table"] == 64
        with pytest.raises(SnapshotInvalidatedError):
            held.get(_key(3))
        held.close()
        with s0.snapshot() as again:
            assert again.get(_key(3)) == b"v3"


_READER = """
import sys
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.partition import Partition
path, rounds = sys.argv[1], int(sys.argv[2])
seen = 0
for _ in range(rounds):
    with Partition(path, readonly=True) as p:
        names = p.store_names()
        for name in names:
            value = BytesKeyValueStore(name, p).get(b"k")
            assert value in (None, name.encode()), (name, value)
        seen = max(seen, len(names))
print(seen)
"""


def test_readers_in_other_processes_while_the_table_grows(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path, sync=False) as p:
        BytesKeyValueStore("s", p).commit(0)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        child = subprocess.Popen(
            [sys.executable, "-c", _READER, str(path), "200"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            for i in range(60):
                s = BytesKeyValueStore(f"n{i}", p)
                s.put(b"k", f"n{i}".encode())
                s.commit(1)
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 0, err.decode()
        assert int(out) >= 1
        assert p.info()["dbi_reopens"] >= 2
        with writer_probe(path) as alive:
            assert alive is True  # the writer lock survived the reopens
        with pytest.raises(InvalidStateStoreError):
            Partition(path)
    with Partition(path, readonly=True) as ro:
        assert len(ro.store_names()) == 61


def test_tune_malloc_opt_out(tmp_path: Path) -> None:
    code = "from txstore.engine.lmdb_sizing import tune_malloc; print(tune_malloc())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    off = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env, TXSTORE_MALLOC_TUNING="0"),
        capture_output=True,
        check=True,
    )
    assert off.stdout.strip() == b"False"
    user = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env, MALLOC_MMAP_THRESHOLD_="65536"),
        capture_output=True,
        check=True,
    )
    assert user.stdout.strip() == b"False"
    assert tune_malloc() is tune_malloc()  # once per process, then the same answer
