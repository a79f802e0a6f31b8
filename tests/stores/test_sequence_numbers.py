"""Sequence numbers of retain_duplicates window stores continue across restarts and restores
(txstore/bytestores/sequence.py): no duplicate written before a restart is overwritten by one
written after it, for persistent stores (transactional or not, with a task or without) and for
in-memory stores restored by a task; the changelog keeps Kafka's layout, numbered on."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import txstore
from txstore import Serdes, Stores, Task
from txstore.changelog.log import FileChangelog


def values(store: txstore.WindowStore[str, int], key: str = "a", t: int = 10) -> list[int]:
    with store.fetch(key, t, t) as it:
        return [kv.value for kv in it]


@pytest.mark.parametrize("transactional", [True, False])
def test_a_reopened_persistent_store_numbers_on(tmp_path: Path, transactional: bool) -> None:
    for lifetime in range(3):
        with txstore.open(tmp_path) as db:
            store = db.window_store(
                "w",
                retention_period=60_000,
                window_size=1_000,
                retain_duplicates=True,
                key_serde=Serdes.string(),
                value_serde=Serdes.long(),
                transactional=transactional,
            )
            store.put("a", 2 * lifetime, 10)
            store.put("a", 2 * lifetime + 1, 10)
            store.commit(lifetime + 1)
    with txstore.open(tmp_path) as db:
        store = db.window_store(
            "w",
            retention_period=60_000,
            window_size=1_000,
            retain_duplicates=True,
            key_serde=Serdes.string(),
            value_serde=Serdes.long(),
        )
        assert values(store) == [0, 1, 2, 3, 4, 5]
        assert store.seqnum == 6


def open_task(path: Path, persistent: bool) -> tuple[Task, txstore.WindowStore[str, int]]:
    task = Task(path, sync=False)
    supplier = (Stores.persistent_window_store if persistent else Stores.in_memory_window_store)(
        "w", 60_000, 1_000, True
    )
    store = task.window_store(Stores.window_store_builder(supplier, Serdes.string(), Serdes.long()))
    task.initialize()
    return task, store


@pytest.mark.parametrize("persistent", [True, False])
def test_a_task_store_numbers_on_after_a_restart_and_a_restore(
    tmp_path: Path, persistent: bool
) -> None:
    """Each lifetime puts two duplicates and a null (which only the changelog numbers), then a
    third duplicate it never commits (a crash); the changelog keys stay unique."""
    for lifetime in range(3):
        task, store = open_task(tmp_path, persistent)
        with task:
            assert values(store) == list(range(2 * lifetime))
            store.put("a", 2 * lifetime, 10)
            store.put("a", None, 10)
            store.put("a", 2 * lifetime + 1, 10)
            task.commit(lifetime + 1)
            store.put("a", 99, 10)  # lost with the task: closed without commit
    with FileChangelog(tmp_path / "changelog" / "w") as log, log.read_committed() as it:
        seqs = [struct.unpack(">I", r.key[-4:])[0] for r in it]
    assert seqs == list(range(1, 10))  # [key][10][seq], Kafka's layout, never reused
    task, store = open_task(tmp_path, persistent)
    with task:
        assert values(store) == [0, 1, 2, 3, 4, 5]


def test_a_persistent_store_behind_its_changelog_numbers_after_the_replayed_records(
    tmp_path: Path,
) -> None:
    """The store lost its last commit (its LMDB files wiped; the changelog has it): the
    restore replays the changelog and the next put numbers after its last record."""
    task, store = open_task(tmp_path, True)
    with task:
        store.put("a", 0, 10)
        store.put("a", 1, 10)
        task.commit(1)
    for f in (tmp_path / "data").iterdir():
        f.unlink()
    task, store = open_task(tmp_path, True)
    with task:
        store.put("a", 2, 10)
        assert values(store) == [0, 1, 2]


def test_a_store_named_like_the_sequence_database_of_another_is_refused(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        db.window_store(
            "w",
            Serdes.string(),
            Serdes.long(),
            retention_period=60_000,
            window_size=1_000,
            retain_duplicates=True,
        )
        with pytest.raises(txstore.InvalidArgumentError, match="collides"):
            db.key_value_store("w.seq")
