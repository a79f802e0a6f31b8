"""A task commit that fails, then is retried, followed by another commit, aborted or closed.

Issue 15: a ``Task.commit`` retried after it failed while the changelogs were being written
committed the changelogs that already had the commit *again* under the same sequence number;
after the next recovery those changelogs still held the commit's records while the input was
re-read from the commit before (their stores counted the records twice), and ``txstore check``
saw nothing wrong. A commit that failed for any reason is now finished by its retry (the
changelogs that have it are skipped), undone by ``abort()``, refused otherwise; a changelog
that hit an I/O error refuses every write until the task is reopened.

The task has a store of every kind (``tests/runtime/_all_kinds.py``). Every scenario processes
records 0-59 with a commit every 10 records; the commit at 30 fails (a named fault point armed
to raise, a write or sync that fails as on a full disk), then the scenario goes on as a caller
would, reopening the task when it is refused. At the end every store equals a clean run's,
equals a restore from its changelog (byte for byte, in LMDB), and no changelog holds a
sequence number twice.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tests._children import run_child
from tests.runtime._all_kinds import (
    STORES,
    FailingWrite,
    Interrupted,
    changelog,
    open_task,
    process,
    state,
)
from txstore import faults
from txstore.changelog.log import FileChangelog
from txstore.errors import (
    IllegalStateError,
    InvalidTypeError,
    OffsetError,
    StorageError,
    TxStoreError,
)
from txstore.runtime import admin
from txstore.runtime.task import Task

pytestmark = pytest.mark.filterwarnings("error")

TOTAL, EVERY, FAILING = 60, 10, 30


def committed_bytes(path: Path) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Every named database of the partition's LMDB environment, as rows."""
    env = lmdb.open(str(path / "data"), readonly=True, max_dbs=1024, lock=True)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            return {n: list(txn.cursor(env.open_db(n, txn=txn, create=False))) for n in names}
    finally:
        env.close()


def seqs(path: Path, store: str) -> list[int]:
    """The task commit sequence numbers in a changelog, oldest first."""
    with FileChangelog(path / "changelog" / store, readonly=True) as log:
        return [json.loads(c.metadata)["seq"] for c in reversed(log.recent_commits(10**6))]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Any]:
    """``reference(n)``: the state of a clean run that committed records 0..n-1 (reopened)."""
    base = tmp_path_factory.mktemp("reference")
    cache: dict[int, Any] = {}

    def get(n: int) -> Any:
        if n not in cache:
            path = base / str(n)
            with open_task(path, sync=False) as task:
                task.initialize()
                for i in range(n):
                    process(task, i)
                    if (i + 1) % EVERY == 0:
                        task.commit(i + 1)
            with open_task(path, sync=False) as task:
                task.initialize()
                cache[n] = state(task)
        return cache[n]

    return get


# --------------------------------------------------------------------------- failures


def fault_point(name: str) -> Callable[[Task], contextlib.AbstractContextManager[object]]:
    @contextlib.contextmanager
    def armed(_task: Task) -> Iterator[None]:
        faults.arm(name, 1, "raise")
        try:
            yield
        finally:
            faults.disarm(name)

    return armed


def write_error(
    store: str, nth: int, raising: BaseException | None = None
) -> Callable[[Task], contextlib.AbstractContextManager[object]]:
    return lambda task: FailingWrite(task, store, nth, raising=raising)


def sync_error(store: str, nth: int) -> Callable[[Task], contextlib.AbstractContextManager[object]]:
    """The ``nth`` fdatasync of ``store``'s changelog fails with EIO (1 = the records, 2 = the
    commit marker)."""

    @contextlib.contextmanager
    def failing(task: Task) -> Iterator[None]:
        log = changelog(task, store)
        real = os.fdatasync
        calls = [0]

        def fdatasync(fd: int) -> None:
            if fd == log._fd:
                calls[0] += 1
                if calls[0] == nth:
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)

        setattr(os, "fdatasync", fdatasync)  # noqa: B010 (a function of the os module)
        try:
            yield
        finally:
            setattr(os, "fdatasync", real)  # noqa: B010

    return failing


FAILURES = {
    "task.before_changelog_commit": fault_point("task.before_changelog_commit"),
    "changelog.after_append": fault_point("changelog.after_append"),
    "task.between_changelog_commits": fault_point("task.between_changelog_commits"),
    "task.after_changelog_commit": fault_point("task.after_changelog_commit"),
    "partition.mid_commit": fault_point("partition.mid_commit"),
    "task.after_store_commit": fault_point("task.after_store_commit"),
    "marker write of the 1st changelog": write_error("counts", 2),
    "marker write of the 3rd changelog": write_error("sessions", 2),
    "batch write of the 2nd changelog": write_error("dups", 1),
    "records sync of the last changelog": sync_error("views", 1),
    "marker sync of the 2nd changelog": sync_error("dups", 2),
    "marker write of the 2nd changelog interrupted": write_error("dups", 2, Interrupted()),
}


# --------------------------------------------------------------------------- scenarios


class Run:
    """The scenario's task, reopened (and checked against the clean run) when refused."""

    def __init__(self, path: Path, reference: Callable[[int], Any]) -> None:
        self.path = path
        self.reference = reference
        self.task = self.open()
        self.reopened = 0

    def open(self) -> Task:
        task = open_task(self.path)
        task.initialize()
        return task

    def reopen(self) -> None:
        self.task.close()
        self.task = self.open()
        self.reopened += 1
        pos = self.task.input_position or 0
        assert pos in (FAILING - EVERY, FAILING), pos
        assert state(self.task) == self.reference(pos)

    def process(self, first: int, last: int) -> None:
        for i in range(first, last):
            process(self.task, i)

    def finish(self) -> None:
        """Go on from the committed position to TOTAL, committing every EVERY records."""
        pos = self.task.input_position or 0
        while pos < TOTAL:
            self.process(pos, pos + EVERY)
            pos += EVERY
            self.task.commit(pos)
        self.task.close()


def scenario(path: Path, reference: Callable[[int], Any], failure: str, then: str) -> Run:
    run = Run(path, reference)
    for pos in range(0, FAILING - EVERY, EVERY):  # commits at 10 and 20
        run.process(pos, pos + EVERY)
        run.task.commit(pos + EVERY)
    run.process(FAILING - EVERY, FAILING)
    with pytest.raises((TxStoreError, Interrupted)), FAILURES[failure](run.task):
        run.task.commit(FAILING)
    if then == "retry":
        try:
            run.task.commit(FAILING)
        except StorageError:  # a changelog hit an I/O error: refused, reopen
            run.reopen()
    elif then == "next commit":
        try:
            run.process(FAILING, FAILING + EVERY)  # a changelog that failed refuses writes
            run.task.commit(FAILING + EVERY)
        except IllegalStateError:  # some changelogs hold the failed commit: undo it
            run.task.abort()
        except StorageError:
            run.reopen()
    elif then == "abort":
        try:
            run.task.abort()
        except StorageError:
            run.reopen()
    else:
        assert then == "close"
        run.reopen()
    run.finish()
    return run


def check_final(path: Path, reference: Callable[[int], Any]) -> None:
    for store in STORES:
        numbers = seqs(path, store)
        assert numbers == sorted(set(numbers)), f"{store}: a sequence number twice: {numbers}"
    with open_task(path) as task:
        report = task.initialize()
        assert report.rolled_back == {} and set(report.restored.values()) == {0}
        assert task.input_position == TOTAL
        assert state(task) == reference(TOTAL)
    recovered = committed_bytes(path)
    # every store equals a restore from its changelog: rebuild them from the changelogs alone
    restored = path.parent / (path.name + "-restored")
    shutil.copytree(path, restored)
    for f in (restored / "data").iterdir():
        f.unlink()
    with open_task(restored) as task:
        task.initialize()
    assert committed_bytes(restored) == recovered
    assert admin.check(path).ok


@pytest.mark.parametrize("then", ["retry", "next commit", "abort", "close"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_commit_then_any_follow_up_leaves_stores_equal_to_their_changelogs(
    tmp_path: Path, reference: Callable[[int], Any], failure: str, then: str
) -> None:
    scenario(tmp_path / "p", reference, failure, then)
    check_final(tmp_path / "p", reference)


def test_a_retry_after_a_failed_changelog_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """The bug itself: the marker write of 'sessions' fails after 'counts' and 'dups' committed
    task commit 3. The retry used to commit 'counts' and 'dups' again (sequence number 3
    twice) before failing on 'sessions'; after reopening, their stores held commit 3's records
    while the input was re-read from 20. Now the retry is refused before anything is written,
    and reopening undoes commit 3 everywhere."""
    path = tmp_path / "p"
    with open_task(path) as task:
        task.initialize()
        for i in range(FAILING):
            process(task, i)
            if (i + 1) % EVERY == 0 and i + 1 < FAILING:
                task.commit(i + 1)
        with pytest.raises(StorageError, match="No space left"), FailingWrite(task, "sessions"):
            task.commit(FAILING)
        sizes = {s: os.path.getsize(changelog(task, s).path + "/00000000000000000000.log")
                 for s in STORES}  # fmt: skip
        with pytest.raises(StorageError, match=r"sessions.*I/O error"):
            task.commit(FAILING)
        assert {s: os.path.getsize(changelog(task, s).path + "/00000000000000000000.log")
                for s in STORES} == sizes  # fmt: skip
    assert [seqs(path, s) for s in STORES] == [[1, 2, 3], [1, 2, 3], [1, 2], [1, 2]]
    with open_task(path) as task:
        report = task.initialize()
        assert set(report.rolled_back) == {"counts", "dups"}
        assert task.input_position == FAILING - EVERY
        assert [seqs(path, s) for s in STORES] == [[1, 2]] * 4


def test_the_retry_finishes_the_commit_and_anything_else_is_refused(
    tmp_path: Path, reference: Callable[[int], Any]
) -> None:
    path = tmp_path / "p"
    task = open_task(path)
    try:
        task.initialize()
        for i in range(FAILING):
            process(task, i)
            if (i + 1) % EVERY == 0 and i + 1 < FAILING:
                task.commit(i + 1)
        with (
            pytest.raises(faults.InjectedFault),
            fault_point("task.between_changelog_commits")(task),
        ):
            task.commit(FAILING)
        assert [seqs(path, s)[-1] for s in STORES] == [3, 2, 2, 2]  # 'counts' has it
        with pytest.raises(IllegalStateError, match=r"retry commit\(30\)"):
            task.commit(FAILING + 1)  # another position
        process(task, FAILING)
        with pytest.raises(IllegalStateError, match=r"stores \['counts', .*written since"):
            task.commit(FAILING)  # the same position, but processing went on
        task.abort()  # undoes commit 3 in 'counts', discards the rest
        assert [seqs(path, s) for s in STORES] == [[1, 2]] * 4
        assert task.input_position == FAILING - EVERY
        for i in range(FAILING - EVERY, FAILING):
            process(task, i)
        with (
            pytest.raises(faults.InjectedFault),
            fault_point("task.between_changelog_commits")(task),
        ):
            task.commit(FAILING)
        task.commit(FAILING)  # the retry: 'counts' is skipped
        assert [seqs(path, s) for s in STORES] == [[1, 2, 3]] * 4
        assert state(task) == reference(FAILING)
    finally:
        task.close()


def test_input_positions_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    """``Task.commit(input_position)`` took any value: a negative one, one below the last
    commit's (the input would be re-read from there after a crash), a string."""
    path = tmp_path / "p"
    with open_task(path) as task:
        task.initialize()
        for i in range(10):
            process(task, i)
        with pytest.raises(OffsetError, match=">= 0"):
            task.commit(-1)
        task.commit(10)
        ends = {s: changelog(task, s).end_offset for s in STORES}
        process(task, 10)
        for bad, error in [(9, OffsetError), (-5, OffsetError), ("11", InvalidTypeError),
                           (11.0, InvalidTypeError), (True, InvalidTypeError),
                           (None, InvalidTypeError)]:  # fmt: skip
            with pytest.raises(error):
                task.commit(bad)  # type: ignore[arg-type]
            assert task.input_position == 10 and task.commit_sequence == 1
        assert all(changelog(task, s).committed_end_offset == ends[s] for s in STORES)
        task.commit(10)  # the same position again is allowed (nothing new was read)
        task.commit(11)
        assert task.commit_sequence == 3
    with open_task(path) as task:
        task.initialize()
        assert task.input_position == 11
        with pytest.raises(OffsetError, match="below the last committed input position 11"):
            task.commit(10)


def test_a_crash_after_a_refused_retry_recovers(
    tmp_path: Path, reference: Callable[[int], Any]
) -> None:
    """A real process: its commit at 30 fails on the marker of 'sessions' (the third changelog),
    the retry is refused, the process is SIGKILLed. Recovery undoes commit 3 in 'counts' and
    'dups'; a second process finishes the input exactly once."""
    path = tmp_path / "p"
    code = run_child("runtime/_all_kinds.py", path, TOTAL, EVERY, ALL_KINDS_FAIL="sessions:3")
    assert code == -signal.SIGKILL
    assert [seqs(path, s) for s in STORES] == [[1, 2, 3], [1, 2, 3], [1, 2], [1, 2]]
    with open_task(path) as task:
        task.initialize()
        assert task.input_position == FAILING - EVERY
        assert state(task) == reference(FAILING - EVERY)
    assert run_child("runtime/_all_kinds.py", path, TOTAL, EVERY) == 0
    check_final(path, reference)


def test_a_full_disk_under_one_changelog(tmp_path: Path, reference: Callable[[int], Any]) -> None:
    """A real full disk: the changelog of 'sessions' lives on a 96 KiB tmpfs; the task commits
    until a write fails with ENOSPC, retries (refused), is closed and reopened: every store is
    at the last complete commit."""
    path = tmp_path / "p"
    mount = path / "changelog" / "sessions"
    mount.mkdir(parents=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        task = open_task(path, changelog_options={"segment_bytes": 1 << 20})
        try:
            task.initialize()
            pos = 0
            with pytest.raises(StorageError, match="No space left on device"):
                while pos < 5000:
                    for i in range(pos, pos + EVERY):
                        process(task, i)
                    task.commit(pos + EVERY)
                    pos += EVERY
            failed_at = pos + EVERY
            with pytest.raises(StorageError, match="I/O error"):
                task.commit(failed_at)
        finally:
            task.close()
        for store in STORES:
            numbers = seqs(path, store)
            assert numbers == sorted(set(numbers)), numbers
        with open_task(path) as task:
            task.initialize()
            assert task.input_position == pos and pos >= 2 * EVERY
            assert state(task) == reference(pos)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
