"""Change-logged in-memory stores in a task (issue 17): every in-memory kind and format.

A task keeps its in-memory stores in one :class:`~txstore.engine.memory.MemoryPartition`,
change-logged like persistent ones: written to their changelogs on commit, restored from the
changelog's start on the next ``initialize`` (they start empty), committed offsets kept as for
persistent stores. The task (``tests/runtime/_in_memory_kinds.py``) holds a persistent store
and one in-memory store of every kind and format. Before this, opening an in-memory supplier
in a task raised ``InvalidArgumentError`` ("build it without a database").
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime._in_memory_kinds import KINDS, PERSISTENT, open_task, process, state
from txstore import Serdes, Stores, faults
from txstore.changelog.log import FileChangelog
from txstore.errors import InvalidArgumentError, InvalidStateStoreError
from txstore.runtime import admin
from txstore.runtime.database import Database
from txstore.runtime.task import Task

pytestmark = pytest.mark.filterwarnings("error")

ROOT = Path(__file__).resolve().parents[2]
EVERY = 10


def run(task: Task, start: int, end: int, every: int = EVERY) -> None:
    """Process records ``start .. end-1``, committing every ``every`` records."""
    for i in range(start, end):
        process(task, i)
        if (i + 1) % every == 0:
            task.commit(i + 1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, Any]]:
    """``reference(n)``: the state of a clean run that committed records 0..n-1, reopened."""
    base = tmp_path_factory.mktemp("reference")
    cache: dict[int, dict[str, Any]] = {}

    def get(n: int) -> dict[str, Any]:
        if n not in cache:
            with open_task(base / str(n), sync=False) as task:
                task.initialize()
                run(task, 0, n)
                cache[n] = state(task)
        return cache[n]

    return get


def log_end(path: Path, name: str) -> int:
    with FileChangelog(path / "changelog" / name, readonly=True) as log:
        return log.committed_end_offset


@pytest.mark.parametrize("name", list(KINDS))
def test_committed_state_is_restored_and_uncommitted_is_gone(
    tmp_path: Path, name: str, reference: Callable[[int], dict[str, Any]]
) -> None:
    with open_task(tmp_path, [name]) as task:
        task.initialize()
        run(task, 0, 30)
        committed = state(task)
        assert committed[name] == reference(30)[name]
        for i in range(30, 37):  # processed, never committed
            process(task, i)
        assert state(task)[name] != committed[name]
        store = task.store(name)
        assert store.committed_offset == log_end(tmp_path, name) > 0
    assert (tmp_path / "changelog" / name).is_dir()
    with open_task(tmp_path, [name]) as task:
        assert task.store(name).committed_offset is None  # it starts empty
        report = task.initialize()
        assert report.restored[name] > 0 and report.restored[PERSISTENT] == 0
        assert task.input_position == 30
        assert state(task) == committed
        assert task.store(name).committed_offset == log_end(tmp_path, name)
        run(task, 30, 50)  # and it goes on as a clean run does
        assert state(task)[name] == reference(50)[name]


def test_every_way_of_opening_gives_a_change_logged_store(tmp_path: Path) -> None:
    def builder(n: str) -> Any:
        return Stores.key_value_store_builder(
            Stores.in_memory_key_value_store(n), Serdes.string(), Serdes.long()
        )

    for _ in range(2):
        with Task(tmp_path) as task:
            stores = [
                task.key_value_store(builder("a")),
                builder("b").build(task.db),
                task.db.open_store(builder("c")),
                task.db.open_key_value_store(builder("d")),
            ]
            task.initialize()
            for s in stores:
                assert s.get("x") in (None, 1)
                s.put("x", 1)
                s.put("y", 2)
            task.commit(1)
    with Task(tmp_path) as task:
        stores = [task.key_value_store(builder(n)) for n in "abcd"]
        task.initialize()
        assert [(s.get("x"), s.get("y")) for s in stores] == [(1, 2)] * 4
        assert task.store_names == ["a", "b", "c", "d"]
    # Nothing of them is in the partition's LMDB catalog: their changelog is their only copy.
    with Database(tmp_path, readonly=True) as db:
        assert db.store_names() == []
    assert sorted(p.name for p in (tmp_path / "changelog").iterdir()) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("name", list(KINDS))
def test_a_database_without_a_task_refuses_an_in_memory_supplier(tmp_path: Path, name: str) -> None:
    with Database(tmp_path) as db:
        with pytest.raises(InvalidArgumentError, match="in-memory; build it without a database"):
            db.open_store(KINDS[name].builder(name))
        with pytest.raises(InvalidArgumentError, match="in-memory"):
            KINDS[name].builder(name).build(db)
        assert db.stacks() == []


def test_a_running_task_refuses_a_new_in_memory_store(tmp_path: Path) -> None:
    with open_task(tmp_path, ["m_kv_plain"]) as task:
        task.initialize()
        with pytest.raises(InvalidStateStoreError, match="before initialize"):
            task.db.open_store(KINDS["m_win_plain"].builder("m_win_plain"))


# --------------------------------------------------------------------------- crashes


def test_sigkill_mid_processing_leaves_exactly_the_committed_state(
    tmp_path: Path, reference: Callable[[int], dict[str, Any]]
) -> None:
    """A real child process with every kind, killed with SIGKILL between commits; reopened,
    every store holds exactly what was committed (twice, the second time after a restore)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), IN_MEMORY_SLOW="0.002")
    env.pop("TXSTORE_FAULTS", None)
    script = str(ROOT / "tests" / "runtime" / "_in_memory_kinds.py")
    for kill_after in (2, 3):
        child = subprocess.Popen(
            [sys.executable, script, str(tmp_path), "200", str(EVERY)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        acked = [int(child.stdout.readline()) for _ in range(kill_after)]
        time.sleep(0.01)  # mid-processing: records after the last commit are in the overlays
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL, err
        with open_task(tmp_path) as task:
            report = task.initialize()
            position = task.input_position
            assert position is not None and acked[-1] <= position < acked[-1] + 2 * EVERY
            assert all(report.restored[n] > 0 for n in KINDS)
            assert state(task) == reference(position)


# --------------------------------------------------------------------------- failed commits


def _armed(point: str) -> Callable[[], contextlib.AbstractContextManager[object]]:
    @contextlib.contextmanager
    def armed() -> Iterator[None]:
        faults.arm(point, 1, "raise")
        try:
            yield
        finally:
            faults.disarm(point)

    return armed


POINTS = [
    "task.before_changelog_commit",
    "task.between_changelog_commits",
    "task.after_changelog_commit",
    "partition.mid_commit",
    "task.after_store_commit",
]
#: Whether the commit is durable when the point raises (every changelog holds it).
DURABLE = {p: p not in POINTS[:2] for p in POINTS}


@pytest.mark.parametrize("then", ["abort", "retry", "reopen"])
@pytest.mark.parametrize("point", POINTS)
def test_a_failed_commit_with_in_memory_and_persistent_stores(
    tmp_path: Path, point: str, then: str, reference: Callable[[int], dict[str, Any]]
) -> None:
    """Records 0-29 committed, 30-39 processed, the commit at 40 fails at ``point``; then
    abort (back to 30, or to 40 if the changelogs hold it), a retry, or a close and reopen.
    Every store (in-memory and persistent) ends as a clean run's, and its committed offset at
    its changelog's committed end."""
    task = open_task(tmp_path)
    try:
        task.initialize()
        run(task, 0, 30)
        run(task, 30, 40, every=10**6)
        with _armed(point)(), pytest.raises(faults.InjectedFault):
            task.commit(40)
        durable = DURABLE[point]
        if then == "abort":
            task.abort()
            at = 40 if durable else 30
            assert task.input_position == at
            assert state(task) == reference(at)
            run(task, at, 60)
        elif then == "retry":
            task.commit(40)
            run(task, 40, 60)
        else:
            task.close()
            task = open_task(tmp_path)
            task.initialize()
            at = 40 if durable else 30
            assert task.input_position == at and state(task) == reference(at)
            run(task, at, 60)
        assert task.input_position == 60
        assert state(task) == reference(60)
        for name in task.store_names:
            assert task.store(name).committed_offset == log_end(tmp_path, name)
    finally:
        task.close()
    with open_task(tmp_path) as task:
        task.initialize()
        assert state(task) == reference(60)


# --------------------------------------------------------------------------- check


def test_check_deep_reports_an_in_memory_changelog_and_reads_it(tmp_path: Path) -> None:
    with open_task(tmp_path, ["m_kv_headers", "m_win_plain"]) as task:
        task.initialize()
        run(task, 0, 20)
    for deep in (False, True):
        report = admin.check(tmp_path, deep=deep)
        assert report.ok, report.problems
        notes = {n.what: n.detail for n in report.notes}
        for name in ("m_kv_headers", "m_win_plain"):
            assert "in-memory store, changelog only" in notes[f"changelog {name!r}"]
        assert report.changelog_records >= 2 * log_end(tmp_path, "m_win_plain")
    # damage in the committed data of an in-memory store's changelog is a problem
    seg = sorted((tmp_path / "changelog" / "m_win_plain").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    report = admin.check(tmp_path, deep=True)
    problems = {p.what: p.detail for p in report.problems}
    assert "changelog 'm_win_plain'" in problems
    assert not [w for w in problems if "m_kv_headers" in w or w.startswith("store")]
