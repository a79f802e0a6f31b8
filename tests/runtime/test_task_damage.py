"""A task over damaged changelogs: damage in one store's files never changes another's.

The task's changelogs are written by a real child process (``tests/_task_child.py``: three
key-value stores in three formats, a commit every 10 records), then damaged on disk.
``Task.initialize`` checks every changelog and every store before it writes anything: damaged
committed data raises ``ChangelogCorruptionError`` and a changelog that lost a commit the
stores already hold raises ``TaskCorruptedError``, with every file as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests._children import run_child as _run
from tests._task_child import model, open_task, process, state
from txstore import Serdes, Stores, faults
from txstore.changelog.coordination import commit_metadata
from txstore.changelog.log import FileChangelog
from txstore.changelog.markers import marker_pair_size, read_last_marker
from txstore.engine.writer_lock import CLEAN_CLOSE
from txstore.errors import ChangelogCorruptionError, TaskCorruptedError
from txstore.runtime.task import Task

pytestmark = pytest.mark.filterwarnings("error")

DATA = Path(__file__).parents[1] / "changelog" / "data" / "v1" / "task"
STORES = ["counts", "latest", "tagged"]


def run_child(path: Path, total: int, every: int) -> None:
    assert _run("_task_child.py", path, total, every) == 0


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file of the partition directory (changelogs and LMDB environment) but locks and
    the clean-close marker (a close writes it once the opening walked data.mdb's pages)."""
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock") and p.name not in ("lock.mdb", CLEAN_CLOSE)
    }


def last_segment(path: Path, store: str) -> Path:
    return sorted((path / "changelog" / store).glob("*.log"))[-1]


def seqs(path: Path, store: str) -> list[int]:
    """The task commit sequence numbers in a changelog, oldest first."""
    with FileChangelog(path / "changelog" / store, readonly=True) as log:
        return [json.loads(c.metadata)["seq"] for c in reversed(log.recent_commits(10**6))]


@pytest.mark.parametrize("copy", ["first", "second"])
def test_a_flipped_byte_in_one_stores_last_marker_changes_no_file(
    tmp_path: Path, copy: str
) -> None:
    """Issue 15: one flipped byte in the last commit marker of one store's changelog made
    initialize() roll back the last commit of the two healthy changelogs (it took the damaged
    marker for a torn one, saw an incomplete task commit, undid it elsewhere), then raise
    TaskCorruptedError. Now opening the task raises ChangelogCorruptionError naming the
    damaged file, and no file of the partition changed."""
    run_child(tmp_path, 30, 10)
    seg = last_segment(tmp_path, "latest")
    data = bytearray(seg.read_bytes())
    pair = marker_pair_size(len(commit_metadata(3, STORES)))
    data[len(data) - pair + 30 + (pair // 2 if copy == "second" else 0)] ^= 0x20
    seg.write_bytes(bytes(data))
    before = snapshot(tmp_path)
    with pytest.raises(ChangelogCorruptionError) as err, open_task(str(tmp_path)) as task:
        task.initialize()
    assert err.value.path == str(seg)
    assert snapshot(tmp_path) == before
    # repaired from a backup (here: the flipped bit put back), everything is there
    data[len(data) - pair + 30 + (pair // 2 if copy == "second" else 0)] ^= 0x20
    seg.write_bytes(bytes(data))
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert report.rolled_back == {}
        assert task.input_position == 30 and state(task) == model(30)


def test_damage_in_the_changelog_of_a_store_not_opened_changes_no_file(tmp_path: Path) -> None:
    run_child(tmp_path, 30, 10)
    seg = last_segment(tmp_path, "tagged")
    data = bytearray(seg.read_bytes())
    data[40] ^= 0x01  # a record batch of the first commit
    seg.write_bytes(bytes(data))
    before = snapshot(tmp_path)
    from txstore import Serdes, Stores

    with Task(tmp_path, changelog_options={"segment_bytes": 4096}) as task:
        task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            )
        )
        with pytest.raises(ChangelogCorruptionError) as err:
            task.initialize()
    assert err.value.path == str(seg) and err.value.offset == 0
    assert snapshot(tmp_path) == before


def test_torn_tails_are_left_alone_while_another_changelog_is_damaged(tmp_path: Path) -> None:
    """Every changelog is checked before any is repaired: a torn tail of 'counts' (the next
    transaction's first bytes) stays on disk when 'tagged' turns out damaged; the file of
    'counts' used to be truncated when it was opened, before the damage was found."""
    run_child(tmp_path, 30, 10)
    counts = last_segment(tmp_path, "counts")
    with counts.open("ab") as f:
        f.write(b"TXCL\x00\x01")  # a crash while the next batch was written
    tagged = last_segment(tmp_path, "tagged")
    data = bytearray(tagged.read_bytes())
    data[len(data) // 2] ^= 0x01
    tagged.write_bytes(bytes(data))
    before = snapshot(tmp_path)
    with pytest.raises(ChangelogCorruptionError), open_task(str(tmp_path)) as task:
        task.initialize()
    assert snapshot(tmp_path) == before
    data[len(data) // 2] ^= 0x01
    tagged.write_bytes(bytes(data))
    with open_task(str(tmp_path)) as task:  # once nothing is damaged, the tail is truncated
        task.initialize()
        assert task.input_position == 30 and state(task) == model(30)
    assert counts.read_bytes() == before[str(counts.relative_to(tmp_path))][:-6]


def test_a_changelog_that_lost_its_last_commit_is_corruption_and_nothing_is_rolled_back(
    tmp_path: Path,
) -> None:
    """The file of 'latest' lost its last commit whole (cut exactly before it): that looks
    like a commit that never happened, and the others have it, so recovery would roll them
    back. But the stores committed it (their offsets say so), so it was complete: the task
    raises TaskCorruptedError naming the changelog that lost it, and no file changes. (It used
    to roll back 'counts' and 'tagged' first.)"""
    run_child(tmp_path, 30, 10)
    seg = last_segment(tmp_path, "latest")
    with open(seg, "rb") as f:
        marker = read_last_marker(f.fileno(), os.fstat(f.fileno()).st_size)
    assert marker is not None and marker.txn_start_pos > 0
    os.truncate(seg, marker.txn_start_pos)
    before = snapshot(tmp_path)
    with open_task(str(tmp_path)) as task, pytest.raises(TaskCorruptedError) as err:
        task.initialize()
    assert "'latest'" in str(err.value) and "lost committed data" in str(err.value)
    assert snapshot(tmp_path) == before


def test_a_duplicate_sequence_number_left_by_a_retried_commit_is_undone(tmp_path: Path) -> None:
    """What a retried task commit could leave before: 'counts' committed task commit 3 with
    its records, then (the retry) commit 3 again, empty; 'latest' and 'tagged' never got it.
    Rolling back one commit of 'counts' left commit 3's records in it, and they were restored
    into the store while the input was re-read from commit 2: counted twice. Recovery undoes
    both."""
    run_child(tmp_path, 20, 10)
    names = STORES
    with open_task(str(tmp_path)) as task:
        task.initialize()
        for i in range(20, 30):
            process(task, i)
        counts = task.db.stacks()[0].changelog
        assert isinstance(counts, FileChangelog) and counts.path.endswith("counts")
        counts.commit(30, commit_metadata(3, names))  # as the failed commit did
        counts.commit(30, commit_metadata(3, names))  # as its retry did
    assert seqs(tmp_path, "counts") == [1, 2, 3, 3]
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert report.rolled_back == {"counts": 10}
        assert task.input_position == 20 and state(task) == model(20)
    assert [seqs(tmp_path, s) for s in STORES] == [[1, 2]] * 3


def test_changelogs_of_format_1_restore_and_go_on(tmp_path: Path) -> None:
    """A task's changelogs written by format 1 (tests/changelog/data/v1/task, 50 records): the
    stores are restored from them, the task goes on and commits in format 2 after them."""
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert report.restored == {"counts": 50, "latest": 50, "tagged": 50}
        assert task.input_position == 50 and task.commit_sequence == 5
        assert state(task) == model(50)
        for i in range(50, 70):
            process(task, i)
            if i % 10 == 9:
                task.commit(i + 1)
    for store in STORES:
        meta = json.loads((tmp_path / "changelog" / store / "changelog.json").read_text())
        assert meta["version"] == 2
        assert seqs(tmp_path, store) == [1, 2, 3, 4, 5, 6, 7]
    with open_task(str(tmp_path)) as task:
        task.initialize()
        assert task.input_position == 70 and state(task) == model(70)


@pytest.mark.parametrize("cut", ["counts", "latest"])
def test_a_changelog_that_lost_its_last_commit_before_others_is_damage(
    tmp_path: Path, cut: str
) -> None:
    """crashtest --damage found it: after every changelog committed task commit 3, the tail of
    one changelog was cut off through its last commit. Recovery took that for a crash between
    changelog commits and rolled the other changelogs back: their committed data destroyed
    to match the damage. A task commits its changelogs in name order, so a crash leaves the
    commit in a prefix of them; 'counts' or 'latest' lacking it while a later one ('tagged')
    holds it is damage, refused with TaskCorruptedError, and no file changes."""
    # killed after every changelog committed commit 3, before the stores did
    assert _run("_task_child.py", tmp_path, 30, 10, "task.after_changelog_commit=3") != 0
    with FileChangelog(tmp_path / "changelog" / cut) as log:
        log.rollback_last_commit()  # what a cut at the commit boundary leaves
    before = snapshot(tmp_path)
    match = f"store {cut!r} lacks task commit 3"
    with pytest.raises(TaskCorruptedError, match=match), open_task(str(tmp_path)) as task:
        task.initialize()
    assert snapshot(tmp_path) == before


def test_the_last_changelog_lacking_the_commit_is_a_crash_between_commits(tmp_path: Path) -> None:
    """The same loss in the last changelog of the commit order is what a crash between
    changelog commits leaves: the others roll back and the input is re-read."""
    assert _run("_task_child.py", tmp_path, 30, 10, "task.after_changelog_commit=3") != 0
    with FileChangelog(tmp_path / "changelog" / "tagged") as log:
        log.rollback_last_commit()
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert sorted(report.rolled_back) == ["counts", "latest"]
        assert task.input_position == 20 and state(task) == model(20)


def _last_commit(path: Path, store: str) -> tuple[Path, int, int]:
    """The last segment of ``store``'s changelog, where its last commit's records start and
    where its marker pair starts."""
    seg = last_segment(path, store)
    fd = os.open(seg, os.O_RDONLY)
    try:
        marker = read_last_marker(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert marker is not None and marker.txn_start_pos >= 0
    return seg, marker.txn_start_pos, marker.pos


@pytest.mark.parametrize("where", ["inside its records", "one byte into its marker"])
def test_the_last_changelog_cut_inside_a_complete_commit_is_damage(
    tmp_path: Path, where: str
) -> None:
    """crashtest --damage found it: after every changelog committed task commit 3, the last
    changelog in commit order ('tagged') was cut inside that commit. Its records of the
    commit were synced before the first marker (Task.commit syncs every participant's records
    first, and the markers record where each participant's records end), so a crash leaves
    them all; a cut that loses some is damage: TaskCorruptedError, and no file changes."""
    assert _run("_task_child.py", tmp_path, 30, 10, "task.after_changelog_commit=3") != 0
    seg, records, marker = _last_commit(tmp_path, "tagged")
    cut = (records + marker) // 2 if where == "inside its records" else marker + 1
    os.truncate(seg, cut)
    before = snapshot(tmp_path)
    if where == "inside its records":
        match = "store 'tagged' lacks task commit 3 and holds its records only up to"
        with pytest.raises(TaskCorruptedError, match=match), open_task(str(tmp_path)) as task:
            task.initialize()
        assert snapshot(tmp_path) == before
        return
    # Every record is there and only the marker is cut: what a crash while 'tagged' wrote its
    # marker leaves, so recovery rolls commit 3 back everywhere (a cut there is not told
    # from that crash).
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert task.input_position == 20 and task.commit_sequence == 2
        assert report.rolled_back == {"counts": 10, "latest": 10}
        assert state(task) == model(20)


def test_a_task_closed_after_a_failed_commit_recovers_the_commit_as_a_crash(
    tmp_path: Path,
) -> None:
    """Closing a task after a commit failed between its changelog commits cuts the open
    transaction of the changelogs that lack the marker: nothing after their last commit,
    which recovery rolls back as a crash (it is not damage)."""
    with open_task(str(tmp_path)) as task:
        task.initialize()
        for i in range(20):
            process(task, i)
            if i % 10 == 9:
                task.commit(i + 1)
        for i in range(20, 30):
            process(task, i)
        faults.arm("task.between_changelog_commits", 1, "raise")
        try:
            with pytest.raises(faults.InjectedFault):
                task.commit(30)
        finally:
            faults.disarm("task.between_changelog_commits")
    with open_task(str(tmp_path)) as task:
        report = task.initialize()
        assert task.input_position == 20 and report.rolled_back == {"counts": 10}
        assert state(task) == model(20)


def test_the_last_changelog_losing_its_last_segment_is_refused(tmp_path: Path) -> None:
    """crashtest --damage (seed 4, trial 197): killed after every changelog committed task
    commit 3, before the stores did; then the last segment of the last changelog in commit order
    deleted, the one holding (only) its records of commit 3. That changelog then ends exactly
    at commit 2, which is also what closing the task after a failed commit leaves, and
    recovery rolled the other changelogs back: their committed commit 3 destroyed. The markers
    name the segment each participant's records were synced into; no crash or abort deletes
    it, so a missing one is refused: TaskCorruptedError, no file changed."""

    def open_two() -> tuple[Task, Any, Any]:
        task = Task(tmp_path, changelog_options={"segment_bytes": 1})  # a segment a commit
        a, b = (
            task.key_value_store(
                Stores.key_value_store_builder(
                    Stores.persistent_key_value_store(n), Serdes.string(), Serdes.long()
                )
            )
            for n in ("a", "b")
        )
        return task, a, b

    task, a, b = open_two()
    try:
        task.initialize()
        for i in range(1, 4):
            a.put(f"k{i}", i)
            b.put(f"k{i}", i)
            if i == 3:
                faults.arm("task.after_changelog_commit", action="raise")
            with pytest.raises(faults.InjectedFault) if i == 3 else contextlib.nullcontext():
                task.commit(i)
    finally:
        faults.disarm()
        task.close()
    segment = last_segment(tmp_path, "b")
    records = json.loads(read_last_marker_metadata(last_segment(tmp_path, "a")))
    assert records["seq"] == 3 and records["segments"]["b"] == int(segment.stem)
    segment.unlink()
    before = snapshot(tmp_path)
    task, a, b = open_two()
    with task, pytest.raises(TaskCorruptedError, match=r"store 'b' lacks task commit 3.*is gone"):
        task.initialize()
    assert snapshot(tmp_path) == before


def read_last_marker_metadata(segment: Path) -> bytes:
    """The metadata of the last commit marker of ``segment``."""
    fd = os.open(segment, os.O_RDONLY)
    try:
        marker = read_last_marker(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert marker is not None
    return marker.metadata
