"""A task restores an empty key-value store by sorted runs (:mod:`txstore.runtime.restore_sorted`)
when its changelog is longer than one restore batch: the same bytes as a chunked restore, a
SIGKILL in either phase leaves the store empty (the next restore starts over and completes),
and no run file is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._children import run_child as _run
from tests._task_child import model, open_task, state
from tests.restore.test_runs import dump
from txstore import faults
from txstore.runtime import restore_sorted, task_support
from txstore.runtime import task as task_module
from txstore.runtime.task_support import RestoreProgress

ROOT = str(Path(__file__).resolve().parents[2])
STORES = ("counts", "latest", "tagged")  # PLAIN, TIMESTAMPED and HEADERS, with deletes
BATCH = 50  # the restore batch of these tests: 300 records make 6 runs a store


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_module, "RESTORE_BATCH", BATCH)


def changelogs_only(path: Path, n: int = 300) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Process ``n`` records in a child (a commit every 30), then delete the stores: only
    the changelogs are left. Returns what the stores held."""
    assert _run("_task_child.py", path, n, 30, "") == 0
    before = dump(path)
    for f in (path / "data").iterdir():
        f.unlink()
    return before


def files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if "changelog" not in p.parts}


def test_sorted_restore_writes_what_the_stores_held(tmp_path: Path, small_batches: None) -> None:
    before = changelogs_only(tmp_path)
    seen: list[RestoreProgress] = []
    faults.arm("task.restore_batch", 10**9, "raise")  # armed to count the hits, never reached
    try:
        with open_task(str(tmp_path)) as task:
            report = task.initialize(progress=seen.append)
            assert report.restored == dict.fromkeys(STORES, 300)
            assert state(task) == model(300)
        hits = faults.hits("task.restore_batch")
    finally:
        faults.disarm()
    assert dump(tmp_path) == before
    for name in STORES:  # after each of the 6 runs, then after the commit
        counts = [p.restored for p in seen if p.store == name]
        assert counts == [50, 100, 150, 200, 250, 300, 300]
        assert {p.total for p in seen if p.store == name} == {300}
    assert hits == 3 * 7


def test_a_store_that_holds_data_restores_chunk_by_chunk(
    tmp_path: Path, small_batches: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    changelogs_only(tmp_path)
    with open_task(str(tmp_path)) as task:
        task.initialize()
    used: list[str] = []
    sorted_restore = restore_sorted.restore_sorted

    def spy(entry: Any, *args: Any) -> int:
        used.append(entry.name)
        return sorted_restore(entry, *args)

    monkeypatch.setattr(task_support, "restore_sorted", spy)
    assert (
        _run("_task_child.py", tmp_path, 600, 600, "task.after_changelog_commit=1")
        == -signal.SIGKILL
    )
    with open_task(str(tmp_path)) as task:  # 300 more records for stores that hold 300
        report = task.initialize()
        assert report.restored == dict.fromkeys(STORES, 300)
        assert state(task) == model(600)
    assert used == []


def restore_in_child(path: Path, fault: str) -> int:
    code = (
        f"import sys; sys.path.insert(0, {ROOT!r})\n"
        f"import txstore.runtime.task as t; t.RESTORE_BATCH = {BATCH}\n"
        "from tests._task_child import open_task\n"
        f"open_task({str(path)!r}).initialize()\n"
    )
    env = dict(os.environ, TXSTORE_FAULTS=fault)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    return proc.returncode


@pytest.mark.parametrize(
    "fault",
    [
        "task.restore_batch=3",  # phase 1: three runs of the first store written
        "partition.mid_commit=1",  # phase 2: every row in the write transaction, no commit
        "task.restore_batch=7",  # the first store committed, the second not begun
    ],
)
def test_a_restore_killed_in_either_phase_starts_over_and_completes(
    tmp_path: Path, small_batches: None, fault: str
) -> None:
    before = changelogs_only(tmp_path)
    with open_task(str(tmp_path)):
        pass  # the stores registered, empty
    empty = files(tmp_path)
    assert restore_in_child(tmp_path, fault) == -signal.SIGKILL
    assert files(tmp_path) <= empty  # no run file, even after a SIGKILL
    with open_task(str(tmp_path)) as task:
        committed = {name: task.store(name).approximate_num_entries() for name in STORES}
        report = task.initialize()
        assert state(task) == model(300)
    if fault == "task.restore_batch=7":  # 6 runs and the commit: counts was restored
        assert committed["counts"] > 0
        assert report.restored == {"counts": 0, "latest": 300, "tagged": 300}
    else:
        assert committed == dict.fromkeys(STORES, 0)  # nothing of the killed restore
        assert report.restored == dict.fromkeys(STORES, 300)
    assert dump(tmp_path) == before
    assert files(tmp_path) <= empty | {"data/closed-cleanly"}  # no run file left
