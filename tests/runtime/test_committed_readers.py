"""Readers after a crash serve what was committed (docs/recovery.md, "What a reader sees").

A real task child (tests/_task_child.py: three key-value stores in plain, timestamped and
headers formats) is SIGKILLed at each fault point of its third commit, then every reader opens
the partition: ``txstore.open(readonly=True)``, a snapshot, the admin functions behind the
command line and the command line itself. Each must give the rows and input position that a
restarted task serves (found by restarting a task on a copy), and none may change a file of
the partition.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import txstore
from tests._children import run_child
from tests._task_child import model, open_task, state
from txstore import Serdes, Stores
from txstore.engine.partition import Partition
from txstore.engine.replayed import ReplayedPartition
from txstore.errors import TaskCorruptedError
from txstore.runtime import admin
from txstore.runtime.committed import open_committed
from txstore.runtime.snapshot import snapshot_partition

ROOT = Path(__file__).resolve().parents[2]

#: The fault points of a task commit, and the input position a restarted task resumes from
#: when the child (commit every 10 records) is killed at the point's 3rd visit.
POINTS = {
    "task.before_changelog_commit": 20,
    "task.between_changelog_commits": 10,  # visited twice a commit (three stores)
    "task.after_changelog_commit": 30,
    "task.after_store_commit": 30,
}


def files_of(path: Path) -> dict[str, tuple[str, int]]:
    """Content hash and mtime of every file of a partition but LMDB's reader table."""
    out = {}
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.name != "lock.mdb":
            out[str(f.relative_to(path))] = (
                hashlib.sha256(f.read_bytes()).hexdigest(),
                f.stat().st_mtime_ns,
            )
    return out


def restarted(path: Path, tmp: Path) -> tuple[dict[str, dict[str, Any]], int | None]:
    """What a task restarted on a copy of ``path`` serves: its stores and input position."""
    copy = tmp / "restarted"
    shutil.copytree(path, copy)
    with open_task(str(copy)) as task:
        task.initialize()
        return state(task), task.input_position


def read_only_state(db: txstore.Database) -> dict[str, dict[str, Any]]:
    builders = {
        "counts": Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        ),
        "latest": Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("latest"), Serdes.string(), Serdes.long()
        ),
        "tagged": Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store_with_headers("tagged"),
            Serdes.string(),
            Serdes.string(),
        ),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, builder in builders.items():
        store = builder.build(db)
        with store.all() as it:
            out[name] = {kv.key: kv.value for kv in it}
    return out


@pytest.fixture(scope="module", params=sorted(POINTS))
def crashed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A partition whose writer was SIGKILLed at a fault point of its 3rd commit, with what a
    restarted task serves."""
    point = request.param
    tmp = tmp_path_factory.mktemp(point.replace(".", "_"))
    path = tmp / "p0"
    assert run_child("_task_child.py", path, 100, 10, f"{point}=3") < 0
    rows, position = restarted(path, tmp)
    assert position == POINTS[point]
    assert rows == model(position)
    return point, path, rows, position


def test_read_only_open_serves_what_a_restarted_task_serves(crashed: Any) -> None:
    point, path, rows, position = crashed
    before = files_of(path)
    with txstore.open(path, readonly=True) as db:
        assert db.input_position == position
        assert read_only_state(db) == rows
        for name in rows:
            assert db.partition.committed_offset(name) is not None
        lagging = isinstance(db.partition, ReplayedPartition)
    # Only a kill between the changelog commits and the store commit leaves a lag to replay.
    assert lagging == (point == "task.after_changelog_commit")
    assert files_of(path) == before


def test_snapshot_holds_the_committed_state(crashed: Any, tmp_path: Path) -> None:
    _, path, rows, _ = crashed
    before = files_of(path)
    manifest = snapshot_partition(path, tmp_path / "snap")
    with txstore.open(tmp_path / "snap", readonly=True) as snap:
        assert read_only_state(snap) == rows
        assert not isinstance(snap.partition, ReplayedPartition)  # the copy holds the tail
        offsets = {n: snap.partition.committed_offset(n) for n in rows}
    assert {n: s.committed_offset for n, s in manifest.partitions[0].stores.items()} == offsets
    assert files_of(path) == before


def test_admin_readers_serve_the_committed_state(crashed: Any) -> None:
    _, path, rows, position = crashed
    before = files_of(path)
    dumped = {(r["key"], r["value"]) for r in admin.dump(path, "counts")}
    assert dumped == set(rows["counts"].items())
    assert admin.get(path, "counts", "k3")[1] == rows["counts"]["k3"]
    for row in admin.offsets(path):
        assert row["input_position"] == position
        assert row["store_offset"] == row["changelog_end"]
    entries = {r["store"]: r["entries"] for r in admin.stat(path)}
    assert entries == {n: len(v) for n, v in rows.items()}
    assert files_of(path) == before


def test_the_command_line_prints_the_committed_value(crashed: Any) -> None:
    _, path, rows, _ = crashed
    out = subprocess.run(
        [sys.executable, "-m", "txstore", "get", str(path), "counts", "k2", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    ).stdout
    assert json.loads(out.splitlines()[0])["value"] == rows["counts"]["k2"]


def test_a_writer_that_comes_back_is_followed(tmp_path: Path) -> None:
    """A reader opened over a lagging partition keeps serving the committed state when the
    writer restarts, restores and commits further: the replayed tail is dropped once the files
    move past it."""
    path = tmp_path / "p0"
    assert run_child("_task_child.py", path, 100, 10, "task.after_changelog_commit=3") < 0
    with txstore.open(path, readonly=True) as db:
        assert isinstance(db.partition, ReplayedPartition)
        counts = Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        ).build(db)
        assert dict(counts.all()) == model(30)["counts"]
        assert run_child("_task_child.py", path, 50, 10) == 0  # the writer comes back
        with counts.all() as it:
            assert {kv.key: kv.value for kv in it} == model(50)["counts"]
        assert counts.get("k0") == model(50)["counts"]["k0"]


def test_a_clean_partition_is_not_wrapped(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    assert run_child("_task_child.py", path, 40, 10) == 0
    part, state_ = open_committed(path)
    with part:
        assert isinstance(part, Partition)
        assert state_.input_position == 40 and state_.tails == {}
    with txstore.open(tmp_path / "plain") as db:  # no changelogs at all
        db.key_value_store("kv", Serdes.string(), Serdes.long()).put("a", 1)
        db.commit({"kv": 5})
    with txstore.open(tmp_path / "plain", readonly=True) as db:
        assert db.input_position is None
        assert db.key_value_store("kv", Serdes.string(), Serdes.long()).get("a") == 1


def test_a_lag_over_damaged_changelogs_is_refused_as_the_writer_refuses(tmp_path: Path) -> None:
    """Stores lag a commit and a changelog lost its last segment: the reader raises the typed
    error a restarted task raises (each says which changelog lost committed data), and
    changes no file."""
    path = tmp_path / "p0"
    assert run_child("_task_child.py", path, 100, 10, "task.after_changelog_commit=3") < 0
    for seg in sorted((path / "changelog" / "counts").glob("*.log"))[-1:]:
        seg.unlink()
    shutil.copytree(path, tmp_path / "copy")
    with (
        pytest.raises(TaskCorruptedError, match="'counts'"),
        open_task(str(tmp_path / "copy")) as task,
    ):
        task.initialize()
    before = files_of(path)
    with pytest.raises(
        TaskCorruptedError, match=r"changelog of store 'counts'.*lost committed data"
    ):
        txstore.open(path, readonly=True)
    with pytest.raises(TaskCorruptedError, match="lost committed data"):
        admin.offsets(path)
    assert files_of(path) == before


def test_a_clean_partition_is_served_from_its_files_whatever_its_changelogs(
    tmp_path: Path,
) -> None:
    """No store lags: the reader reads one commit marker and the files, which hold every
    commit; damage to a changelog the reader does not need is for ``txstore check`` to find
    (and a task refuses it on initialize())."""
    path = tmp_path / "p0"
    assert run_child("_task_child.py", path, 40, 10) == 0
    for seg in sorted((path / "changelog" / "counts").glob("*.log"))[-1:]:
        seg.unlink()
    with txstore.open(path, readonly=True) as db:
        assert db.input_position == 40
        assert read_only_state(db) == model(40)


def test_an_interrupted_first_creation_reads_as_no_changelog(tmp_path: Path) -> None:
    """A kill while a task creates its stores can leave a changelog directory holding only
    its lock file (``changelog.json`` is written next): readers see a store with nothing
    committed, never a configuration conflict."""
    path = tmp_path / "p0"
    assert run_child("_task_child.py", path, 10, 10, "task.before_changelog_commit=1") < 0
    log_dir = path / "changelog" / "counts"
    for f in log_dir.iterdir():
        if f.name != "writer.lock":
            f.unlink()  # what a kill before changelog.json was written leaves
    rows = {r["store"]: r for r in admin.offsets(path)}
    assert rows["counts"]["changelog_end"] is None and rows["counts"]["lag"] is None
    assert rows["latest"]["changelog_end"] == 0 and rows["latest"]["input_position"] is None
    with txstore.open(path, readonly=True) as db:
        assert db.input_position is None
        assert db.store_names() == ["counts", "latest", "tagged"]
    with open_task(str(path)) as task:  # the writer completes the creation
        task.initialize()
        assert task.input_position is None
