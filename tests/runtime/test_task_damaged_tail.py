"""Zeros over the last marker pair of a task's changelog: refused, never rolled back (issue 15).

``crashtest --damage 100 --seed 11`` (trial 35) zeroed a page of the last changelog of the commit
order over its last marker pair, up to the end of the file. The scan took the zeros for a torn
tail, so that changelog lacked the last task commit while the others held it: exactly what a
crash between changelog commits leaves, and ``Task.initialize`` rolled the commit back in every
other changelog (committed data of healthy stores destroyed, the input position moved back).
Now the scan refuses bytes no crash leaves (``tests/changelog/test_changelog_tail.py``) and
no file of any store changes; the way out its message gives (``truncate -s <pos> <file>``, for
a power loss) makes the task recover as from a crash. Real SIGKILLs of a child writing the task
never meet a refusal.

The task (``tests/_task_child.py``) has three stores committed in name order: counts, latest,
tagged; a commit every 10 records.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._children import ROOT
from tests._children import run_child as _run
from tests._task_child import model, open_task, process, state
from tests.runtime.test_task_damage import last_segment, snapshot
from txstore.changelog.markers import read_last_marker
from txstore.errors import ChangelogCorruptionError, TaskCorruptedError
from txstore.runtime.task import Task

pytestmark = pytest.mark.filterwarnings("error")

PAGE = 4096


def zero_last_pair(path: Path, store: str, start: str) -> Path:
    """Zero the last segment of ``store``'s changelog from ``start`` to its end: "marker" = the
    first byte of its last marker pair, "page" = the start of the 4 KiB page holding it (but
    not before the last commit's first frame, so that the commits before it stay whole)."""
    seg = last_segment(path, store)
    data = seg.read_bytes()
    with open(seg, "rb") as f:
        m = read_last_marker(f.fileno(), len(data))
    assert m is not None and m.commit_end_pos == len(data) and m.txn_start_pos < m.pos
    at = m.pos if start == "marker" else max(m.pos // PAGE * PAGE, m.txn_start_pos)
    seg.write_bytes(data[:at] + b"\0" * (len(data) - at))
    return seg


def way_out(err: ChangelogCorruptionError) -> str:
    """The truncate command the message gives."""
    found = re.search(r"`(truncate -s \d+ \S+)`", str(err))
    assert found is not None, str(err)
    return found.group(1)


def two_store_task(path: Path) -> Task:
    """The task with 'counts' and 'latest' open only: 'tagged' is checked as a changelog."""
    return open_task(str(path), tagged=False)


@pytest.mark.parametrize("start", ["marker", "page"])
def test_zeros_over_the_last_pair_of_the_last_changelog_change_no_file(
    tmp_path: Path, start: str
) -> None:
    """Killed after every changelog committed task commit 3, before the stores did; then the
    last marker pair of 'tagged' (last in commit order) zeroed to the end of its file. Opening
    the task, with or without the 'tagged' store, raises ChangelogCorruptionError naming that
    file and changes no file (it used to roll 'counts' and 'latest' back to commit 2). After
    the truncate command of the message, the task recovers as from a crash between changelog
    commits: 'counts' and 'latest' roll back, the input is re-read from 20, and it goes on."""
    assert _run("_task_child.py", tmp_path, 30, 10, "task.after_changelog_commit=3") != 0
    seg = zero_last_pair(tmp_path, "tagged", start)
    before = snapshot(tmp_path)
    with pytest.raises(ChangelogCorruptionError) as err, open_task(str(tmp_path)) as task:
        task.initialize()
    assert err.value.path == str(seg) and err.value.offset is not None
    assert snapshot(tmp_path) == before
    with two_store_task(tmp_path) as task, pytest.raises(ChangelogCorruptionError) as err2:
        task.initialize()
    assert (err2.value.path, err2.value.position) == (str(seg), err.value.position)
    assert snapshot(tmp_path) == before
    subprocess.run(way_out(err.value), shell=True, check=True)
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert sorted(report.rolled_back) == ["counts", "latest"]
        assert task.input_position == 20 and state(task) == model(20)
        for i in range(20, 30):
            process(task, i)
        task.commit(30)
    with open_task(str(tmp_path)) as task:
        task.initialize()
        assert task.input_position == 30 and state(task) == model(30)


def test_the_same_zeros_in_the_first_changelog_are_refused(tmp_path: Path) -> None:
    """The same damage in 'counts' (first in commit order): refused, no file changed; after
    the truncate command too (the order rule: 'counts' lacking commit 3 while 'latest' and
    'tagged' hold it is no crash), and still nothing else changes."""
    assert _run("_task_child.py", tmp_path, 30, 10, "task.after_changelog_commit=3") != 0
    seg = zero_last_pair(tmp_path, "counts", "page")
    before = snapshot(tmp_path)
    with pytest.raises(ChangelogCorruptionError) as err, open_task(str(tmp_path)) as task:
        task.initialize()
    assert err.value.path == str(seg)
    assert snapshot(tmp_path) == before
    subprocess.run(way_out(err.value), shell=True, check=True)
    before = snapshot(tmp_path)
    match = "store 'counts' lacks task commit 3"
    with pytest.raises(TaskCorruptedError, match=match), open_task(str(tmp_path)) as task:
        task.initialize()
    assert snapshot(tmp_path) == before


def test_the_way_out_after_a_commit_the_stores_hold_is_refused_too(tmp_path: Path) -> None:
    """Task commit 3 complete (stores included), then zeros over the last pair of 'tagged':
    refused. Cutting the file as the message says (wrongly here: no power loss lost that
    commit) still changes nothing else: the stores prove commit 3 was complete."""
    assert _run("_task_child.py", tmp_path, 30, 10) == 0
    seg = zero_last_pair(tmp_path, "tagged", "marker")
    before = snapshot(tmp_path)
    with pytest.raises(ChangelogCorruptionError) as err, open_task(str(tmp_path)) as task:
        task.initialize()
    assert err.value.path == str(seg) and snapshot(tmp_path) == before
    subprocess.run(way_out(err.value), shell=True, check=True)
    before = snapshot(tmp_path)
    with open_task(str(tmp_path)) as task, pytest.raises(TaskCorruptedError, match="'tagged'"):
        task.initialize()
    assert snapshot(tmp_path) == before


def _log_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("changelog/*/*.log"))


@pytest.mark.parametrize("kills", [30, pytest.param(100, marks=pytest.mark.slow)])
def test_sigkill_at_random_points_is_never_refused(tmp_path: Path, kills: int) -> None:
    """A child processing and committing (every 2 records) is SIGKILLed at a random moment
    once it has written to its changelogs, ``kills`` times; every reopen recovers, no refusal
    (a torn tail is always the prefix of what the writer wrote), and the stores hold exactly
    the committed input."""
    rng = random.Random(29)
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TXSTORE_FAULTS", None)
    script = str(Path(ROOT) / "tests" / "_task_child.py")
    positions = []
    for _ in range(kills):
        written = _log_bytes(tmp_path)
        proc = subprocess.Popen(
            [sys.executable, script, str(tmp_path), "1000000", "2"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while _log_bytes(tmp_path) == written and proc.poll() is None:
                assert time.monotonic() < deadline, "the child wrote nothing in 60 s"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err
        with open_task(str(tmp_path)) as task:
            task.initialize()
            pos = task.input_position or 0
            assert state(task) == model(pos)
        positions.append(pos)
    assert positions == sorted(positions) and positions[-1] > 2 * kills
