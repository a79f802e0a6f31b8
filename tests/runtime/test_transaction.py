"""``with db.transaction(offsets):`` commits on success and rolls back on an exception."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import (
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    Serdes,
    UnsupportedOperationError,
)


def open_two(
    db: txstore.Database,
) -> tuple[txstore.KeyValueStore[str, int], txstore.WindowStore[str, int]]:
    kv = db.key_value_store("kv", Serdes.string(), Serdes.long())
    w = db.window_store(
        "w", Serdes.string(), Serdes.long(), retention_period=3_600_000, window_size=60_000
    )
    return kv, w


def test_a_clean_block_commits_every_named_store_together(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        kv, w = open_two(db)
        with db.transaction({"kv": 3, "w": 3}) as tx:
            kv.put("a", 1)
            w.put("a", 1, 60_000)
            assert tx.state == "open"
        assert tx.state == "committed"
        assert kv.committed_offset == w.committed_offset == 3
        with kv.read_committed() as view:
            assert view.get("a") == 1
    with txstore.open(tmp_path) as db:  # durable: a new process would see the same
        kv, w = open_two(db)
        assert kv.get("a") == 1 and w.fetch("a", 60_000) == 1


def test_an_exception_rolls_back_to_the_last_commit(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        kv, w = open_two(db)
        with db.transaction(1):
            kv.put("kept", 1)
        kv.put("before", 2)  # uncommitted when the block starts: part of it
        with pytest.raises(ZeroDivisionError), db.transaction(2) as tx:
            kv.put("inside", 3)
            w.put("inside", 3, 60_000)
            kv.delete("kept")
            _ = 1 / 0
        assert tx.state == "rolled back"
        assert kv.get("kept") == 1
        assert kv.get("before") is None and kv.get("inside") is None
        assert w.fetch("inside", 60_000) is None
        assert kv.committed_offset == w.committed_offset == 1
        assert kv.approximate_num_uncommitted_bytes() == 0


def test_a_refused_commit_rolls_back_and_raises(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        kv, _ = open_two(db)
        with db.transaction({"kv": 5}):
            kv.put("a", 1)
        with pytest.raises(OffsetError), db.transaction({"kv": 4}) as tx:  # backwards
            kv.put("a", 2)
        assert tx.state == "rolled back"
        assert kv.get("a") == 1 and kv.committed_offset == 5


def test_rollback_inside_the_block(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        kv, _ = open_two(db)
        with db.transaction({"kv": 1}) as tx:
            kv.put("a", 1)
            tx.rollback()
        assert kv.get("a") is None and kv.committed_offset is None
        with pytest.raises(InvalidStateStoreError, match="rolled back"):
            tx.rollback()
        with pytest.raises(InvalidStateStoreError, match="rolled back"), tx:
            pass


def test_bad_arguments_are_refused_before_the_block(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        kv, _ = open_two(db)
        kv.put("a", 1)
        with pytest.raises(InvalidArgumentError, match="not open"):
            db.transaction({"nope": 1})
        with pytest.raises(InvalidTypeError):
            db.transaction("kv")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            db.transaction(True)
        assert kv.get("a") == 1  # nothing was discarded by the refusals


def test_a_tasks_database_is_refused(tmp_path: Path) -> None:
    with txstore.Task(tmp_path) as task:
        task.db.key_value_store("kv")
        task.initialize()
        with pytest.raises(UnsupportedOperationError, match=r"task\.transaction"):
            task.db.transaction(1)


def test_retention_is_the_deprecated_spelling_of_retention_period(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        with pytest.warns(DeprecationWarning, match="retention_period"):
            w: Any = db.window_store("w", retention=3_600_000, window_size=60_000)
        assert w.retention_period == 3_600_000
        with pytest.warns(DeprecationWarning):
            s: Any = db.session_store("s", retention=600_000)
        assert s.retention_period == 600_000
        with pytest.raises(InvalidArgumentError, match="retention_period only"):
            db.window_store("x", retention=1, retention_period=1, window_size=1)
        with pytest.raises(InvalidArgumentError, match="required"):
            db.session_store("y")


def test_task_transaction_commits_or_aborts(tmp_path: Path) -> None:
    builder = txstore.Stores.key_value_store_builder(
        txstore.Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    with txstore.Task(tmp_path) as task:
        counts = task.key_value_store(builder)
        task.initialize()
        with task.transaction(input_position=1) as tx:
            counts.put("a", 1)
        assert tx.state == "committed" and task.input_position == 1
        with pytest.raises(RuntimeError), task.transaction(input_position=2):
            counts.put("a", 2)
            counts.put("b", 2)
            raise RuntimeError("a bad record")
        assert counts.get("a") == 1 and counts.get("b") is None
        with pytest.raises(OffsetError), task.transaction(input_position=0):  # backwards
            counts.put("c", 3)
        assert counts.get("c") is None and task.input_position == 1
        with task.transaction(input_position=3):
            counts.put("d", 4)
    # what the changelog holds is exactly what was committed: restore from it alone
    shutil.rmtree(tmp_path / "data")
    with txstore.Task(tmp_path) as task:
        counts = task.key_value_store(builder)
        task.initialize()
        assert task.input_position == 3
        with counts.all() as it:
            assert [(kv.key, kv.value) for kv in it] == [("a", 1), ("d", 4)]
