"""``txstore check`` compares the task commit sequence numbers of a partition's changelogs
(:mod:`txstore.runtime.changelog_check`).

Real task directories are built with :class:`txstore.Task` (three stores: ``counts``,
``latest``, ``tagged``; 4 KiB changelog segments), then one changelog is rewritten through the
changelog's own writer API to hold a duplicate, a decreasing or a missing sequence number, or
two participant lists for one commit. ``check`` must report each as a problem (the CLI exits
1), while a healthy task passes: after compaction (which removes markers) and with an
incomplete last task commit left by a real kill between the changelog commits (a note:
``initialize()`` rolls it back).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._children import run_child
from tests._task_child import open_task, process
from txstore.changelog.coordination import commit_metadata, read_commit_metadata
from txstore.changelog.log import FileChangelog
from txstore.runtime import admin
from txstore.runtime.changelog_check import check_sequences, read_log_commits

ROOT = str(Path(__file__).resolve().parents[2])
STORES = ["counts", "latest", "tagged"]


def make_task(path: Path, commits: int = 12) -> None:
    with open_task(str(path)) as task:
        task.initialize()
        for i in range(commits):
            process(task, i)
            task.commit(i + 1)


def last_seq(path: Path, store: str) -> int:
    with FileChangelog(path / "changelog" / store, readonly=True) as log:
        return read_commit_metadata(log.last_committed_metadata)[0]


def commit_with(path: Path, store: str, seq: int, position: int, stores: list[str]) -> None:
    """Append one record to ``store``'s changelog and commit it as task commit ``seq``."""
    with FileChangelog(path / "changelog" / store) as log:
        log.append(b"k0", b"\x00" * 8, 1_000)
        log.commit(position, commit_metadata(seq, stores))


def problems(path: Path) -> list[str]:
    report = admin.check(path)
    return [f"{p.what}: {p.detail}" for p in report.problems]


def cli_check(path: Path) -> tuple[int, str]:
    """``txstore check PATH`` in a real process: its exit code and output."""
    proc = subprocess.run(
        [sys.executable, "-m", "txstore", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return proc.returncode, proc.stdout


def test_a_healthy_task_passes(tmp_path: Path) -> None:
    make_task(tmp_path)
    report = admin.check(tmp_path)
    assert report.ok, report.problems
    assert not [n for n in report.notes if "task commit" in n.what]
    assert cli_check(tmp_path)[0] == 0


def test_a_compacted_task_passes(tmp_path: Path) -> None:
    make_task(tmp_path, 40)
    with open_task(str(tmp_path)) as task:
        task.initialize()
        task.clean_changelogs()
    # compaction removed markers: some log no longer holds every commit
    with FileChangelog(tmp_path / "changelog" / "counts", readonly=True) as log:
        lc = read_log_commits(log)
    assert len(lc.seqs) < 40 and lc.seqs[0] > 1
    assert lc.seqs[-1] == 40
    assert check_sequences(tmp_path / "changelog").problems == []
    assert admin.check(tmp_path).ok


def test_an_incomplete_last_commit_is_a_recoverable_note(tmp_path: Path) -> None:
    # Two "between" points per commit: the 5th is inside the 3rd commit, after "counts"
    # committed it and before the others did (a real SIGKILL).
    rc = run_child("_task_child.py", tmp_path, 100, 10, "task.between_changelog_commits=5")
    assert rc == -signal.SIGKILL
    assert [last_seq(tmp_path, s) for s in STORES] == [3, 2, 2]
    report = admin.check(tmp_path)
    assert report.ok, report.problems
    (note,) = [n for n in report.notes if n.what == "last task commit"]
    assert "task commit 3 is incomplete" in note.detail and "recoverable" in note.detail
    assert "initialize() rolls it back" in note.detail
    code, out = cli_check(tmp_path)
    assert code == 0 and "NOTE last task commit" in out


def test_a_duplicate_sequence_number_is_a_problem(tmp_path: Path) -> None:
    make_task(tmp_path)
    commit_with(tmp_path, "latest", 12, 12, STORES)  # task commit 12 written again
    found = problems(tmp_path)
    assert any("changelog 'latest': holds task commit 12 twice" in p for p in found), found
    code, out = cli_check(tmp_path)
    assert code == 1 and "holds task commit 12 twice" in out


def test_a_decreasing_sequence_number_is_a_problem(tmp_path: Path) -> None:
    make_task(tmp_path)
    commit_with(tmp_path, "tagged", 7, 12, STORES)
    found = problems(tmp_path)
    assert any("task commit 7 follows task commit 12" in p for p in found), found
    assert cli_check(tmp_path)[0] == 1


def test_a_missing_sequence_number_is_a_problem(tmp_path: Path) -> None:
    make_task(tmp_path)
    with FileChangelog(tmp_path / "changelog" / "latest") as log:
        log.rollback_last_commit()  # task commit 12 gone from "latest" only...
    for store in STORES:  # ...and task commit 13 in every changelog
        commit_with(tmp_path, store, 13, 13, STORES)
    found = problems(tmp_path)
    assert any(
        "changelog 'latest': lacks task commit 12" in p and "lost a committed" in p for p in found
    ), found
    assert cli_check(tmp_path)[0] == 1


def test_two_participant_lists_for_one_commit_are_a_problem(tmp_path: Path) -> None:
    make_task(tmp_path)
    for store in STORES:
        commit_with(tmp_path, store, 13, 13, STORES if store != "tagged" else ["tagged"])
    found = problems(tmp_path)
    assert any("task commit 13: its changelogs name different stores" in p for p in found)
    assert cli_check(tmp_path)[0] == 1


@pytest.mark.parametrize("lagging", ["counts", "tagged"])
def test_a_changelog_behind_by_more_than_a_crash_is_a_problem(tmp_path: Path, lagging: str) -> None:
    make_task(tmp_path)
    for seq in (13, 14):
        for store in STORES:
            if store != lagging:
                commit_with(tmp_path, store, seq, seq, STORES)
    found = problems(tmp_path)
    assert any(f"changelog {lagging!r}: ends at task commit 12" in p for p in found), found
    assert cli_check(tmp_path)[0] == 1
