"""A partition that lost ``data/`` is never served as empty stores (issue 15, item 5).

``txstore.open`` of a directory whose ``data/data.mdb`` is missing or empty used to create a
fresh environment and serve empty stores as if nothing had ever been written. It now refuses
with :class:`~txstore.errors.PartitionDataLostError` when the directory shows that it held data
(changelogs, a spill directory, a snapshot manifest, a writer's lock file), naming what is
missing and what to do; a :class:`~txstore.runtime.task.Task` over it restores every store
from its changelog.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import txstore
from tests import _engine_child as child
from txstore import Serdes, SessionWindow, Stores, Windowed
from txstore.errors import PartitionDataLostError, StorageError
from txstore.runtime import admin
from txstore.runtime.snapshot import snapshot_partition
from txstore.runtime.statedir import partition_dirs
from txstore.runtime.task import Task


def kv() -> Any:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )


def windows() -> Any:
    return Stores.window_store_builder(
        Stores.persistent_window_store("clicks", 3_600_000, 60_000, False),
        Serdes.string(),
        Serdes.long(),
    )


def sessions() -> Any:
    return Stores.session_store_builder(
        Stores.persistent_session_store("visits", 3_600_000), Serdes.string(), Serdes.long()
    )


def fill_task(path: Path) -> None:
    with Task(path) as task:
        counts = task.key_value_store(kv())
        clicks = task.window_store(windows())
        visits = task.session_store(sessions())
        task.initialize()
        for i in range(50):
            counts.put(f"u{i}", i)
            clicks.put(f"u{i}", i, 120_000)
        visits.put(Windowed("u1", SessionWindow(10, 20)), 3)
        task.commit(input_position=50)


def assert_refused(path: Path, *words: str) -> PartitionDataLostError:
    for readonly in (False, True):
        with pytest.raises(PartitionDataLostError) as info:
            txstore.open(path, readonly=readonly)
        for word in words:
            assert word in str(info.value), str(info.value)
    assert isinstance(info.value, StorageError)  # what a read-only open raised before
    return info.value


def test_a_task_partition_without_data_is_refused_and_a_task_restores_it(tmp_path: Path) -> None:
    path = tmp_path / "p"
    fill_task(path)
    shutil.rmtree(path / "data")
    err = assert_refused(path, "data/ is missing", "'clicks', 'counts', 'visits'", "Task")
    assert err.path == str(path)
    assert "changelog/" in " ".join(err.evidence)
    assert not (path / "data").exists()  # the refusal created nothing
    with Task(path) as task:
        counts = task.key_value_store(kv())
        clicks = task.window_store(windows())
        visits = task.session_store(sessions())
        report = task.initialize()
        assert set(report.restored) == {"counts", "clicks", "visits"}
        assert all(n > 0 for n in report.restored.values())
        assert counts.get("u7") == 7
        assert clicks.fetch("u9", 120_000) == 9
        assert visits.fetch_session("u1", 10, 20) == 3
        assert task.input_position == 50
    with txstore.open(path) as db:  # restored: a plain open serves it again
        assert db.store_names() == ["clicks", "counts", "visits"]
        assert db.key_value_store("counts", Serdes.string(), Serdes.long()).get("u3") == 3


def test_an_empty_data_file_counts_as_lost(tmp_path: Path) -> None:
    path = tmp_path / "p"
    fill_task(path)
    os.truncate(path / "data" / "data.mdb", 0)
    assert_refused(path, "data/data.mdb is empty")
    os.remove(path / "data" / "data.mdb")
    assert_refused(path, "data/data.mdb is missing")


def test_a_plain_database_without_changelogs_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        db.key_value_store("s", Serdes.bytes(), Serdes.bytes()).put(b"k", b"v")
        db.commit({"s": 1})
    shutil.rmtree(path / "data")
    err = assert_refused(path, "writer.lock", "No changelog", "snapshot or backup")
    assert err.missing == "data/ is missing"


def test_a_spill_directory_is_evidence(tmp_path: Path) -> None:
    """A writer killed with spilled uncommitted writes leaves spill/ (deleted at the next
    open): spill/ only ever exists next to the data it spilled over."""
    path = tmp_path / "p"
    proc = child.spawn("hold-spill", path, 200, 3000)
    try:
        child.wait_line(proc, "READY")
    finally:
        child.kill(proc)
    assert (path / "spill").is_dir()
    shutil.rmtree(path / "data")
    os.remove(path / "writer.lock")
    err = assert_refused(path, "spill/")
    assert err.evidence == ["a writer's spill directory (spill/)"]


def test_a_snapshot_that_lost_its_data_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with txstore.open(src) as db:
        db.key_value_store("s", Serdes.bytes(), Serdes.bytes()).put(b"k", b"v")
        db.commit({"s": 1})
    snapshot_partition(src, tmp_path / "snap")
    data = tmp_path / "snap" / "data"
    os.chmod(data / "data.mdb", 0o644)
    shutil.rmtree(data)
    assert_refused(tmp_path / "snap", "manifest.json")


def test_no_evidence_no_refusal(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "new") as db:  # a new partition
        assert db.store_names() == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("unrelated")
    (tmp_path / "other" / "changelog").mkdir()  # empty: no changelog was ever written
    with txstore.open(tmp_path / "other") as db:
        assert db.store_names() == []
    with pytest.raises(StorageError, match=r"missing data/data\.mdb"):
        txstore.open(tmp_path / "nothing", readonly=True)  # as before


def test_a_state_directory_lists_a_partition_that_lost_its_data(tmp_path: Path) -> None:
    """stat, check and Spark planning list the partitions of a state directory: one that lost
    data/ but shows it held data is listed (and refused when opened), never silently left out."""
    for n in (0, 1):
        with Task(tmp_path / str(n)) as task:
            counts = task.key_value_store(
                Stores.key_value_store_builder(
                    Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
                )
            )
            task.initialize()
            counts.put("a", n)
            task.commit(input_position=1)
    shutil.rmtree(tmp_path / "1" / "data")
    (tmp_path / "2").mkdir()  # no data, no evidence: not a partition
    assert sorted(partition_dirs(tmp_path)) == [0, 1]
    with pytest.raises(StorageError):
        admin.stat(tmp_path)
    report = admin.check(tmp_path)
    assert not report.ok
    assert any(p.partition == 1 for p in report.problems)
