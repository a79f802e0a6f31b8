"""Real processes and real signals: SIGKILL with spilled writes, concurrent reader and writer."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import _engine_child as child
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.partition import Partition
from txstore.errors import SnapshotInvalidatedError

# A leaked iterator or snapshot (ResourceWarning) fails the test, whatever the config.
pytestmark = pytest.mark.filterwarnings("error")


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def test_sigkill_with_spilled_uncommitted_writes(tmp_path: Path) -> None:
    path = tmp_path / "p"
    n_committed, n_uncommitted = 2000, 30_000
    proc = child.spawn("hold-spill", path, n_committed, n_uncommitted)
    try:
        child.wait_line(proc, "READY")
        assert (path / "spill").is_dir()  # spilled, uncommitted state is on disk
    finally:
        _kill(proc)
    with Partition(path) as p:
        assert not (path / "spill").exists()  # deleted at open
        store = BytesKeyValueStore("kv", p)
        assert store.recover(7) is True and store.recover(8) is False
        rows = list(store.all())
        assert rows == [(b"c%06d" % i, b"committed") for i in range(n_committed)]
        assert store.get(b"u0000001") is None and store.committed_offset == 7
        assert store.approximate_num_uncommitted_bytes() == 0
        assert not (path / "spill").exists()
        store.put(b"after", b"crash")  # the store is fully usable again
        store.commit(8)
        assert store.read_committed().get(b"after") == b"crash"


def test_reader_process_sees_only_whole_commits(tmp_path: Path) -> None:
    """The writer process commits N keys = commit number (and grows its map from 1 MiB); this
    process reads read-committed snapshots in a loop and checks each is one whole commit."""
    path = tmp_path / "p"
    n_keys, commits = 40, 400
    proc = child.spawn("writer-loop", path, n_keys, commits)
    reads = invalidated = 0
    last = 0
    try:
        child.wait_line(proc, "READY")
        with Partition(path, readonly=True, map_size=1 << 20) as p:
            first_map = p.info()["map_size"]
            state = BytesKeyValueStore("state", p)
            view = state.read_committed()
            while proc.poll() is None or reads < 5:
                try:
                    with view.snapshot() as snap:
                        rows = list(snap.all())
                        offset = snap.committed_offset
                except SnapshotInvalidatedError:
                    invalidated += 1
                    continue
                assert len(rows) == n_keys, f"partial snapshot: {len(rows)} keys"
                values = {v for _, v in rows}
                assert len(values) == 1, f"torn snapshot at offset {offset}: {sorted(values)}"
                assert offset is not None and int(values.pop()) == offset
                assert offset >= last, f"offset went back {last} -> {offset}"
                last = offset
                reads += 1
                # plain (non-snapshot) reads work too while the map grows
                assert view.get(b"key0000") is not None
            # this process adopted the grown map (MapResizedError -> set_mapsize(0))
            assert p.info()["map_size"] > first_map
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert proc.returncode == 0, err
    assert reads > 10 and last <= commits
    summary = out.strip().splitlines()[-1]
    assert '"commits": 400' in summary
    map_size = int(summary.split('"map_size": ')[1].split(",")[0])
    assert map_size > 1 << 20  # the writer grew the map while this process was reading
    with Partition(path, readonly=True) as p:
        assert p.committed_offset("state") == commits


def test_multi_store_commit_survives_sigkill_atomically(tmp_path: Path) -> None:
    path = tmp_path / "p"
    rnd = random.Random(11)
    for _ in range(3):
        proc = child.spawn("atomic-loop", path)
        try:
            child.wait_line(proc, "READY")
            time.sleep(rnd.uniform(0.05, 0.3))  # kill at a random point of the commit loop
        finally:
            _kill(proc)
        with Partition(path) as p:
            a = BytesKeyValueStore("a", p)
            b = BytesKeyValueStore("b", p)
            offset = a.committed_offset
            assert offset is not None and offset == b.committed_offset
            assert a.recover(offset) and b.recover(offset)
            assert a.get(b"x") == b.get(b"y") == b"%d" % offset
            assert b.approximate_num_entries() == 1 + offset  # every commit's row, no more
            assert not (path / "spill").exists()
