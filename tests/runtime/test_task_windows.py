"""Window and session stores through the task: change logging, crashes, restore.

The reference for each crash is a clean run of the same workload to the recovered input
position, in another directory: after recovery, every committed LMDB database (segments,
segment registries, offsets) must hold exactly the same bytes as there. Comparing bytes rather
than what the stores return matters: the observed stream time that filters expired windows is
in memory only (as in Kafka), so two equal stores can answer differently right after opening.
"""

from __future__ import annotations

import signal
from pathlib import Path

import lmdb
import pytest

from tests._children import run_child as _run
from tests._task_windows_child import open_task, state


def run_child(path: Path, total: int, every: int, faults: str = "") -> int:
    return _run("_task_windows_child.py", path, total, every, faults)


def committed_bytes(path: Path) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Every named database of the partition's LMDB environment, as sorted rows."""
    env = lmdb.open(str(path / "data"), readonly=True, max_dbs=1024, lock=True)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            out = {}
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                out[name] = list(txn.cursor(db))
        return out
    finally:
        env.close()


def recovered(path: Path) -> tuple[int, dict[str, list[object]], dict[str, int]]:
    with open_task(str(path)) as task:
        report = task.initialize()
        return task.input_position or 0, state(task), report.restored


def reference(tmp_path: Path, position: int) -> dict[str, list[object]]:
    ref = tmp_path / f"reference-{position}"
    if position:
        assert run_child(ref, position, 30) == 0
    with open_task(str(ref)) as task:
        task.initialize()
        assert (task.input_position or 0) == position
        return state(task)


@pytest.mark.parametrize(
    "point",
    [
        "task.between_changelog_commits=7",
        "task.after_changelog_commit=4",
        "partition.mid_commit=5",
        "segments.drop=2",
    ],
)
def test_crash_then_recover_equals_a_clean_run(tmp_path: Path, point: str) -> None:
    assert run_child(tmp_path / "crashed", 300, 30, point) == -signal.SIGKILL
    pos, st, _ = recovered(tmp_path / "crashed")
    assert pos % 30 == 0 and pos < 300
    reference(tmp_path, pos)
    assert committed_bytes(tmp_path / "crashed") == committed_bytes(tmp_path / f"reference-{pos}")
    assert st["views"] and st["sessions"]


def test_restore_rebuilds_windows_and_sessions_byte_for_byte(tmp_path: Path) -> None:
    assert run_child(tmp_path / "a", 240, 30) == 0
    expected = reference(tmp_path, 240)
    # Wipe the LMDB environment: restore must rebuild every store from the changelogs alone.
    for f in (tmp_path / "a" / "data").iterdir():
        f.unlink()
    pos, st, restored = recovered(tmp_path / "a")
    assert pos == 240
    assert restored["views"] > 0 and restored["sessions"] > 0
    assert committed_bytes(tmp_path / "a") == committed_bytes(tmp_path / "reference-240")
    # Restore advanced the observed stream time, so expired windows are filtered out here
    # and not in the freshly reopened reference: what is returned is a subset of it.
    for name in expected:
        assert set(map(repr, st[name])) <= set(map(repr, expected[name]))
        assert st[name]
