"""The task lifecycle: commit, crash at every point, recover and restore without a wipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._children import run_child as _run
from tests._task_child import model, open_task, process, state
from txstore.errors import InvalidStateStoreError, StoreClosedError
from txstore.runtime.task import TaskCorruptedError

ROOT = str(Path(__file__).resolve().parents[2])


def run_child(path: Path, total: int, every: int, faults: str = "", budget: int = 0) -> int:
    extra = {"TASK_CHILD_OVERLAY_BUDGET": str(budget)} if budget else {}
    return _run("_task_child.py", path, total, every, faults, **extra)


def recovered_state(path: Path) -> tuple[int, dict[str, dict[str, object]]]:
    with open_task(str(path)) as task:
        task.initialize()
        return task.input_position or 0, state(task)


def test_commit_and_reopen(tmp_path: Path) -> None:
    with open_task(str(tmp_path)) as task:
        task.initialize()
        for i in range(30):
            process(task, i)
        task.commit(30)
        for i in range(30, 35):
            process(task, i)  # never committed
    pos, st = recovered_state(tmp_path)
    assert pos == 30
    assert st == model(30)


@pytest.mark.parametrize(
    "point",
    [
        "task.before_changelog_commit",
        "changelog.after_append",
        "task.between_changelog_commits",
        "task.after_changelog_commit",
        "partition.mid_commit",
        "task.after_store_commit",
    ],
)
def test_crash_at_each_commit_point_loses_nothing_and_leaks_nothing(
    tmp_path: Path, point: str
) -> None:
    # The 3rd time the point is reached the writer is SIGKILLed.
    assert run_child(tmp_path, 200, 20, f"{point}=3") == -signal.SIGKILL
    pos, st = recovered_state(tmp_path)
    assert pos % 20 == 0 and 0 <= pos <= 60
    assert st == model(pos), "recovered state differs from the committed input"
    # Resuming finishes the stream exactly once.
    assert run_child(tmp_path, 200, 20) == 0
    pos, st = recovered_state(tmp_path)
    assert (pos, st) == (200, model(200))


def test_crash_while_spilling_leaves_only_committed_state(tmp_path: Path) -> None:
    # A 1 KiB overlay budget spills every few records; the 5th spill is SIGKILLed.
    assert run_child(tmp_path, 300, 100, "overlay.spill=5", budget=1024) == -signal.SIGKILL
    assert (tmp_path / "spill").exists()  # the crash left spilled data behind
    pos, st = recovered_state(tmp_path)
    assert not (tmp_path / "spill").exists() or not any((tmp_path / "spill").iterdir())
    assert st == model(pos)
    assert run_child(tmp_path, 300, 100, budget=1024) == 0
    assert recovered_state(tmp_path) == (300, model(300))


def test_crash_between_changelog_commits_rolls_back_the_ones_ahead(tmp_path: Path) -> None:
    # Two "between" points per commit (three changelogs): the 5th is inside the 3rd commit,
    # after the first changelog ("counts") committed it and before the others did.
    assert run_child(tmp_path, 100, 10, "task.between_changelog_commits=5") == -signal.SIGKILL
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert report.rolled_back == {"counts": 10}
        assert task.input_position == 20
        assert state(task) == model(20)


def test_crash_after_changelog_commit_replays_the_missing_range(tmp_path: Path) -> None:
    assert run_child(tmp_path, 100, 10, "task.after_changelog_commit=2") == -signal.SIGKILL
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert task.input_position == 20
        assert report.restored["counts"] == 10  # the second commit's records, nothing more
        assert state(task) == model(20)


def test_crash_during_restore_resumes(tmp_path: Path) -> None:
    from txstore.runtime import task as task_module

    # The stores commit 10 records (not empty: a chunked restore, not a sorted one; see
    # tests/restore for the sorted restore, which starts over after a crash)...
    assert run_child(tmp_path, 10, 10) == 0
    # ...then 390 more reach the changelogs but never the stores...
    assert run_child(tmp_path, 400, 400, "task.after_changelog_commit=1") == -signal.SIGKILL
    # ...then crash the restoring process after its first restore batch.
    code = (
        f"import sys; sys.path.insert(0, {ROOT!r})\n"
        "import txstore.runtime.task as t; t.RESTORE_BATCH = 50\n"
        "from tests._task_child import open_task\n"
        f"open_task({str(tmp_path)!r}).initialize()\n"
    )
    env = dict(os.environ, TXSTORE_FAULTS="task.restore_batch=2")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    old = task_module.RESTORE_BATCH
    task_module.RESTORE_BATCH = 50
    try:
        with open_task(str(tmp_path)) as task:
            report = task.initialize()
            assert 0 < report.restored["counts"] < 390  # resumed, not restarted
            assert state(task) == model(400)
    finally:
        task_module.RESTORE_BATCH = old


def test_store_ahead_of_its_changelog_is_task_corruption(tmp_path: Path) -> None:
    run_child(tmp_path, 20, 10)
    for f in (tmp_path / "changelog" / "counts").glob("*.log"):
        f.unlink()
    with open_task(str(tmp_path)) as task, pytest.raises(TaskCorruptedError):
        task.initialize()


def test_lifecycle_errors(tmp_path: Path) -> None:
    task = open_task(str(tmp_path))
    with pytest.raises(InvalidStateStoreError, match="initialize"):
        task.commit(1)
    task.initialize()
    with pytest.raises(InvalidStateStoreError, match="before initialize"):
        open_task_store = task.key_value_store  # adding a store after initialize
        from txstore import Serdes, Stores

        open_task_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("late"), Serdes.string(), Serdes.long()
            )
        )
    task.close()
    task.close()
    with pytest.raises(StoreClosedError):
        task.commit(1)


def test_abort_discards_since_last_commit(tmp_path: Path) -> None:
    with open_task(str(tmp_path)) as task:
        task.initialize()
        for i in range(10):
            process(task, i)
        task.commit(10)
        for i in range(10, 20):
            process(task, i)
        task.abort()
        assert state(task) == model(10)
        for i in range(10, 20):
            process(task, i)
        task.commit(20)
    assert recovered_state(tmp_path) == (20, model(20))


def test_restore_into_each_key_value_format_is_byte_exact(tmp_path: Path) -> None:
    import lmdb

    def committed(path: Path) -> dict[bytes, list[tuple[bytes, bytes]]]:
        env = lmdb.open(str(path / "data"), readonly=True, max_dbs=64, lock=True)
        try:
            with env.begin() as txn:
                names = [k for k, _ in txn.cursor()]
                return {n: list(txn.cursor(env.open_db(n, txn=txn, create=False))) for n in names}
        finally:
            env.close()

    assert run_child(tmp_path / "a", 90, 30) == 0
    before = committed(tmp_path / "a")
    for f in (tmp_path / "a" / "data").iterdir():
        f.unlink()  # only the changelogs are left
    with open_task(str(tmp_path / "a")) as task:
        report = task.initialize()
        assert report.restored == {"counts": 90, "latest": 90, "tagged": 90}
        assert state(task) == model(90)
    assert committed(tmp_path / "a") == before


def test_a_write_its_changelog_refuses_is_not_written_to_the_store(tmp_path: Path) -> None:
    """The change-logging layer wrote the store, then appended to the changelog: a record the
    changelog refused (here a record timestamp below -1) raised after the store had the write,
    and the next commit made the store differ from a restore of its changelog. The record is
    checked first now, and nothing is written."""
    from txstore import ValueAndTimestamp
    from txstore.errors import InvalidArgumentError

    with open_task(str(tmp_path)) as task:
        task.initialize()
        process(task, 0)
        task.context.timestamp = -5
        with pytest.raises(InvalidArgumentError, match="timestamp -5"):
            task.store("counts").put("bad", 1)
        with pytest.raises(InvalidArgumentError, match="timestamp -7"):
            task.store("latest").put("bad", ValueAndTimestamp(1, -7))
        with pytest.raises(InvalidArgumentError, match="timestamp -5"):
            task.store("tagged").delete("k0")
        assert task.store("counts").get("bad") is None
        assert task.store("latest").get("bad") is None
        task.context.timestamp = 0
        task.commit(1)
        assert state(task) == model(1)
    for f in (tmp_path / "data").iterdir():
        f.unlink()  # restore every store from its changelog alone
    assert recovered_state(tmp_path) == (1, model(1))
