"""One stack per store, whichever way it is opened (issue 14).

Every way of opening a store of a task must give a handle whose writes reach the changelog:
proved by writing through each handle, committing the task, deleting the partition's LMDB
files (``data/``) and restoring from the changelogs alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import (
    InvalidArgumentError,
    InvalidStateStoreError,
    Serdes,
    StoreClosedError,
    Stores,
    UnsupportedOperationError,
)
from txstore.runtime.task import Task

HOUR = 3_600_000


def kv_builder(name: str = "counts") -> Any:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store(name), Serdes.string(), Serdes.long()
    )


def window_builder(name: str = "clicks") -> Any:
    return Stores.window_store_builder(
        Stores.persistent_window_store(name, HOUR, 60_000, False), Serdes.string(), Serdes.long()
    )


def session_builder(name: str = "visits") -> Any:
    return Stores.session_store_builder(
        Stores.persistent_session_store(name, HOUR), Serdes.string(), Serdes.long()
    )


# Every way a user can get a writable handle on a task's store. Each returns the handle.
OPENERS: dict[str, Callable[[Task], Any]] = {
    "task.key_value_store": lambda t: t.key_value_store(kv_builder()),
    "builder.build(task.db)": lambda t: kv_builder().build(t.db),
    "task.db.open_store": lambda t: t.db.open_store(kv_builder()),
    "task.db.open_key_value_store": lambda t: t.db.open_key_value_store(kv_builder()),
    "task.db.key_value_store": lambda t: t.db.key_value_store(
        "counts", Serdes.string(), Serdes.long()
    ),
    "task.db.store after task.key_value_store": lambda t: (
        t.key_value_store(kv_builder()),
        t.db.store("counts"),
    )[1],
    "task.store after builder.build(task.db)": lambda t: (
        kv_builder().build(t.db),
        t.store("counts"),
    )[1],
}


def restored_value(path: Path) -> Any:
    """Delete the LMDB files, reopen the task with the store and restore it from its changelog."""
    shutil.rmtree(path / "data")
    with Task(path) as task:
        counts = task.key_value_store(kv_builder())
        report = task.initialize()
        assert report.restored["counts"] >= 1
        return counts.get("alice")


@pytest.mark.parametrize("way", sorted(OPENERS))
def test_no_way_of_opening_a_task_store_skips_the_changelog(tmp_path: Path, way: str) -> None:
    with Task(tmp_path) as task:
        counts = OPENERS[way](task)
        task.initialize()
        counts.put("alice", 7)
        task.commit(input_position=1)
    assert restored_value(tmp_path) == 7


@pytest.mark.parametrize("kind", ["window", "session"])
def test_window_and_session_handles_from_task_db_are_logged(tmp_path: Path, kind: str) -> None:
    builder = window_builder() if kind == "window" else session_builder()
    with Task(tmp_path) as task:
        builder.build(task.db)
        task.initialize()
        store = task.db.store(builder.name)
        if kind == "window":
            store.put("alice", 3, 120_000)
        else:
            store.put(txstore.Windowed("alice", txstore.SessionWindow(10, 20)), 3)
        task.commit(input_position=1)
    shutil.rmtree(tmp_path / "data")
    with Task(tmp_path) as task:
        store = builder.build(task.db)
        task.initialize()
        if kind == "window":
            assert store.fetch("alice", 120_000) == 3
        else:
            assert store.fetch_session("alice", 10, 20) == 3


def test_asking_again_gives_the_same_handle_or_a_typed_refusal(tmp_path: Path) -> None:
    with Task(tmp_path) as task:
        counts = task.key_value_store(kv_builder())
        assert task.db.store("counts") is counts
        assert task.store("counts") is counts
        with pytest.raises(InvalidArgumentError, match="already open"):
            kv_builder().build(task.db)
        with pytest.raises(InvalidArgumentError, match="already open"):
            task.key_value_store(kv_builder())
    with txstore.open(tmp_path / "plain") as db:
        kv: Any = db.key_value_store("kv")
        assert db.store("kv") is kv
        with pytest.raises(InvalidArgumentError, match="already open"):
            db.key_value_store("kv")


def test_a_task_store_commits_only_with_its_task(tmp_path: Path) -> None:
    """Committing or recovering one store of a task alone would part it from its changelog."""
    with Task(tmp_path) as task:
        counts = task.key_value_store(kv_builder())
        task.initialize()
        counts.put("alice", 1)
        with pytest.raises(UnsupportedOperationError, match=r"Task\.commit"):
            counts.commit(5)
        with pytest.raises(UnsupportedOperationError, match=r"Task\.abort"):
            counts.recover(0)
        with pytest.raises(UnsupportedOperationError, match=r"Task\.commit"):
            task.db.commit({"counts": 5})
        assert counts.get("alice") == 1  # nothing was discarded by the refusals
        task.commit(input_position=1)
        assert counts.committed_offset == 1


def test_a_running_task_refuses_new_stores_whichever_way(tmp_path: Path) -> None:
    with Task(tmp_path) as task:
        task.key_value_store(kv_builder())
        task.initialize()
        with pytest.raises(InvalidStateStoreError, match="before initialize"):
            window_builder().build(task.db)
        with pytest.raises(InvalidStateStoreError, match="before initialize"):
            task.db.key_value_store("other")
        assert task.store_names == ["counts"]
        assert not (tmp_path / "changelog" / "other").exists()


@pytest.mark.parametrize("kind", ["key_value", "window", "session"])
def test_snapshot_on_a_task_store(tmp_path: Path, kind: str) -> None:
    """Bug 1 of issue 14: ``snapshot()`` of a store opened through a Task raised AttributeError."""
    builder = {"key_value": kv_builder, "window": window_builder, "session": session_builder}[
        kind
    ]()
    key: Any = "alice"
    with Task(tmp_path) as task:
        store = builder.build(task.db)
        task.initialize()
        if kind == "key_value":
            store.put(key, 1)
        elif kind == "window":
            store.put(key, 1, 60_000)
        else:
            key = txstore.Windowed("alice", txstore.SessionWindow(10, 20))
            store.put(key, 1)
        task.commit(input_position=1)
        if kind == "key_value":
            store.put(key, 2)  # uncommitted: a snapshot does not see it
        with store.snapshot() as snap:
            assert snap.committed_offset == 1
            if kind == "key_value":
                assert snap.get("alice") == 1
            elif kind == "window":
                assert snap.fetch("alice", 60_000) == 1
            else:
                assert snap.fetch_session("alice", 10, 20) == 1


SURFACE = ("snapshot", "read_committed", "commit", "recover", "close", "committed_offset")


def test_every_handle_has_the_same_surface(tmp_path: Path) -> None:
    handles: list[Any] = []
    with txstore.open(tmp_path / "db") as db, Task(tmp_path / "task") as task:
        handles.append(db.key_value_store("a"))
        handles.append(kv_builder().build(db))
        handles.append(task.key_value_store(kv_builder()))
        in_memory = Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("m"), Serdes.string(), Serdes.long()
        ).build()
        assert in_memory.persistent is False
        handles.append(in_memory)
        for handle in handles:
            assert type(handle) is type(handles[0])
            for name in SURFACE:
                assert hasattr(handle, name), (handle, name)
        task.initialize()
        for handle in handles:
            with handle.snapshot() as snap, handle.read_committed() as view:
                assert snap.committed_offset == view.committed_offset


def test_database_store_after_close_is_refused(tmp_path: Path) -> None:
    db = txstore.open(tmp_path)
    db.key_value_store("kv")
    db.close()
    with pytest.raises(StoreClosedError):
        db.store("kv")
    with pytest.raises(StoreClosedError):
        db.snapshot(tmp_path / "snap")
