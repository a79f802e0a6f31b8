"""The Task API as a new user meets it: what it refuses (a plain store, writes before
initialize, a commit that is not the task's), what it names (open_changelog, changelog,
store_names) and what it reports (an unclean shutdown, discarded and dropped records)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import txstore
from txstore import Serdes, Stores
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    StoreNotChangeloggedError,
    UncommittedWritesWarning,
    UnsupportedOperationError,
)
from txstore.runtime import admin
from txstore.runtime.task import Task, TaskChangelog

ROOT = str(Path(__file__).resolve().parents[2])


def counts_builder() -> object:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )


def open_counts(path: Path) -> tuple[Task, txstore.KeyValueStore[str, int]]:
    task = Task(path)
    return task, task.key_value_store(counts_builder())  # type: ignore[arg-type]


def test_a_plain_store_opened_as_a_task_is_refused_without_advice_to_wipe(tmp_path: Path) -> None:
    """A store committed by txstore.open (no changelog) opened in a Task: a typed error that
    says the data is only in the store and does not advise wiping it; nothing is created (no
    empty changelog that would make `txstore check` see a store ahead of its changelog), and
    the data is still there. (It raised TaskCorruptedError '...wipe the store and restore it
    from the changelog', the changelog being empty.)"""
    with txstore.open(tmp_path) as db:
        counts = db.key_value_store("counts", Serdes.string(), Serdes.long())
        counts.put("a", 1)
        db.commit({"counts": 5})
    task = Task(tmp_path)
    with task, pytest.raises(StoreNotChangeloggedError) as err:
        task.key_value_store(counts_builder())  # type: ignore[arg-type]
    text = str(err.value)
    assert "Do not wipe it" in text and "txstore.open" in text and "offset 5" in text
    assert "wipe the store and restore" not in text
    assert not (tmp_path / "changelog" / "counts").exists()
    with txstore.open(tmp_path, readonly=True) as db:
        assert db.key_value_store("counts", Serdes.string(), Serdes.long()).get("a") == 1


def test_a_plain_store_committed_at_offset_0_is_refused_too(tmp_path: Path) -> None:
    """Offset 0 is a commit too: its rows would be in the store and in no changelog."""
    with txstore.open(tmp_path) as db:
        counts = db.key_value_store("counts", Serdes.string(), Serdes.long())
        counts.put("a", 1)
        db.commit({"counts": 0})
    with Task(tmp_path) as task, pytest.raises(StoreNotChangeloggedError, match="offset 0"):
        task.key_value_store(counts_builder())  # type: ignore[arg-type]


def test_a_changelog_that_lost_every_record_gets_no_advice_to_wipe(tmp_path: Path) -> None:
    """The store is ahead of a changelog that holds nothing: wiping the store would leave
    nothing, so the message does not say to."""
    task, counts = open_counts(tmp_path)
    with task:
        task.initialize()
        counts.put("a", 1)
        task.commit(1)
    for f in (tmp_path / "changelog" / "counts").glob("*.log"):
        f.unlink()
    task, counts = open_counts(tmp_path)
    with task, pytest.raises(txstore.StorageError) as err:
        task.initialize()
    assert "holds no records" in str(err.value) and "Do not wipe" in str(err.value)


def test_writes_before_initialize_are_refused(tmp_path: Path) -> None:
    """A put before initialize() raises (as commit() does) before the store is written;
    the writes used to be accepted and then vanish at initialize()."""
    task, counts = open_counts(tmp_path)
    with task:
        clicks = task.window_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("clicks", 3_600_000, 60_000, False),
                Serdes.string(),
                Serdes.long(),
            )
        )
        with pytest.raises(InvalidStateStoreError, match=r"before task\.initialize\(\)"):
            counts.put("a", 1)
        with pytest.raises(InvalidStateStoreError, match="nothing was written"):
            clicks.put("a", 1, 60_000)
        assert counts.get("a") is None
        task.initialize()
        counts.put("a", 2)
        task.commit(1)
        assert counts.get("a") == 2


def test_a_plain_commit_of_a_tasks_changelog_is_refused(tmp_path: Path) -> None:
    """FileChangelog.commit on a task's changelog wrote a marker without a task sequence
    number: the next Task forgot its input position and numbered its commits from 1 again.
    Now it is refused before writing; the next task resumes where the task committed."""
    task, counts = open_counts(tmp_path)
    with task:
        task.initialize()
        counts.put("a", 1)
        task.commit(7)
        log = task.changelog("counts")
        assert isinstance(log, TaskChangelog)
        counts.put("a", 2)
        with pytest.raises(UnsupportedOperationError, match=r"Task\.commit"):
            log.commit(8)
        assert log.committed_end_offset == 1
        task.abort()
    task, counts = open_counts(tmp_path)
    with task:
        task.initialize()
        assert (task.input_position, task.commit_sequence, counts.get("a")) == (7, 1, 1)


def test_changelog_accessor_open_changelog_and_store_names(tmp_path: Path) -> None:
    """task.changelog(name) is the public accessor of a store's changelog (it read
    Task._entries before); open_changelog creates one, changelog_for is its deprecated name;
    store_names reads as a list and is called as Database.store_names() is; a StoreStack's
    unlogged store is unlogged_store (bytes_store, its old name, meant something else on a
    typed store)."""
    task, counts = open_counts(tmp_path)
    with task:
        assert task.store_names == ["counts"] and task.store_names() == ["counts"]
        with pytest.raises(InvalidArgumentError, match=r"its stores: \['counts'\]"):
            task.changelog("count")
        with pytest.warns(DeprecationWarning, match="open_changelog"):
            extra = task.changelog_for("extra", "key_value", None)
        extra.close()
        task.initialize()
        counts.put("a", 1)
        task.commit(3)
        with task.changelog("counts").read_committed() as records:
            assert [(r.key, r.offset) for r in records] == [(b"a", 0)]
        # One name, one thing: the bottom of the stack is its unlogged store; a typed store's
        # bytes_store is the layer right under it (here the change-logging one).
        [stack] = task.db.stacks()
        assert stack.bytes_store is stack.unlogged_store is not counts.bytes_store
        assert counts.bytes_store.changelog is task.changelog("counts")


KILLED_CHILD = """
import os, signal, sys
from txstore import Serdes, Stores
from txstore.runtime.task import Task
task = Task(sys.argv[1])
counts = task.key_value_store(Stores.key_value_store_builder(
    Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()))
task.initialize()
counts.put("a", 1)
task.commit(1)
for i in range(50):
    counts.put(f"k{i}", i)
task.changelog("counts").sync_records()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_report_after_a_sigkill_says_what_was_discarded(tmp_path: Path) -> None:
    """After a SIGKILL with 50 uncommitted writes, the report says the last writer did not
    close cleanly and that 50 uncommitted records were discarded (it said
    rolled_back={}, discarded_uncommitted=False), and `txstore check` notes the unclean
    shutdown (it said ok, nothing more); after a clean close neither says so."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(KILLED_CHILD))
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, str(script), str(state)], env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL
    checked = admin.check(state)
    assert checked.ok and [n.what for n in checked.notes] == ["unclean shutdown"]
    task, counts = open_counts(state)
    with task:
        report = task.initialize()
        assert report.unclean_shutdown and report.discarded_uncommitted
        assert report.discarded == {"counts": 50} and report.rolled_back == {}
        assert counts.get("a") == 1 and counts.get("k0") is None
    task, _ = open_counts(state)
    with task:
        report = task.initialize()
        assert not report.unclean_shutdown and not report.discarded_uncommitted
        assert report.discarded == {}
    assert admin.check(state).notes == []


def test_records_an_in_memory_window_store_drops_on_restore_are_counted(tmp_path: Path) -> None:
    """Restoring an in-memory window store drops the records of expired windows and counts
    them in dropped_records, as Kafka's in-memory window store does (they were not counted)."""

    def open_task() -> tuple[Task, txstore.WindowStore[str, int]]:
        task = Task(tmp_path)
        store = task.window_store(
            Stores.window_store_builder(
                Stores.in_memory_window_store("w", 10_000, 1_000, False),
                Serdes.string(),
                Serdes.long(),
            )
        )
        return task, store

    task, store = open_task()
    with task:
        task.initialize()
        store.put("old", 1, 0)
        store.put("new", 2, 100_000)  # stream time 100 s: the window at 0 expired
        task.commit(1)
        assert store.dropped_records == 0
    task, store = open_task()
    with task:
        report = task.initialize()
        assert report.restored == {"w": 2}
        assert store.dropped_records == 1
        assert store.fetch("old", 0) is None and store.fetch("new", 100_000) == 2


def test_closing_a_task_with_uncommitted_writes_warns(tmp_path: Path) -> None:
    """close() keeps Kafka's semantics (uncommitted work is discarded) and says so with an
    UncommittedWritesWarning naming the store; leaving a with block by an exception aborts
    without a warning; a close after a commit is silent."""
    task, counts = open_counts(tmp_path)
    task.initialize()
    counts.put("a", 1)
    with pytest.warns(UncommittedWritesWarning, match=r"stores \['counts'\]"):
        task.close()
    task, counts = open_counts(tmp_path)
    with pytest.raises(KeyError), task:
        task.initialize()
        counts.put("a", 1)
        raise KeyError("bad input")
    task, counts = open_counts(tmp_path)
    with task:
        task.initialize()
        assert counts.get("a") is None
        counts.put("a", 2)
        task.commit(1)
