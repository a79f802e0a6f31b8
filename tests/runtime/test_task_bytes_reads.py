"""A task's key-value store with bytes serdes reads the bytes store under its change logging
in one call (the typed store's get fast path, as a database's store does): the same answers
as the change-logging layer's own get for staged, committed, overwritten, deleted and missing
keys, through commit, abort and reopen; a damaged entry and a closed task raise as the
general path does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from txstore import Serdes, Stores
from txstore.engine.checksums import seal
from txstore.errors import DamagedFileError, InvalidArgumentError, StoreClosedError
from txstore.runtime.task import Task

KEYS = [f"k{i:03d}".encode() for i in range(40)]


def kv(task: Task) -> Any:
    return task.key_value_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("raw"), Serdes.bytes(), Serdes.bytes()
        )
    )


def agree(store: Any, expected: dict[bytes, bytes]) -> None:
    """Every key reads the same through the typed store, the layer under it and the model."""
    for k in [*KEYS, b"missing"]:
        assert store.get(k) == store.bytes_store.get(k) == expected.get(k), k


def test_a_tasks_bytes_store_reads_staged_committed_and_aborted_writes(tmp_path: Path) -> None:
    model: dict[bytes, bytes] = {}
    with Task(tmp_path) as task:
        store = kv(task)
        task.initialize()
        for k in KEYS[:20]:
            store.put(k, k + b"-1")
            model[k] = k + b"-1"
        agree(store, model)  # staged only
        task.commit(input_position=1)
        agree(store, model)  # committed only
        store.put(KEYS[0], b"new")
        store.delete(KEYS[1])
        store.put(KEYS[30], b"added")
        agree(store, {**{k: v for k, v in model.items() if k != KEYS[1]},
                      KEYS[0]: b"new", KEYS[30]: b"added"})  # fmt: skip
        task.abort()  # the staged writes go; the committed stay
        agree(store, model)
        store.put(KEYS[2], b"kept")
        model[KEYS[2]] = b"kept"
        task.commit(input_position=2)
    with Task(tmp_path) as task:
        store = kv(task)
        task.initialize()
        agree(store, model)
    with pytest.raises(StoreClosedError):
        store.get(KEYS[0])


def test_bad_keys_get_the_general_paths_errors(tmp_path: Path) -> None:
    with Task(tmp_path) as task:
        store = kv(task)
        task.initialize()
        for bad in (b"", None, b"x" * 600):
            with pytest.raises(InvalidArgumentError):
                store.get(bad)


def test_a_damaged_value_is_refused_not_served(tmp_path: Path) -> None:
    with Task(tmp_path) as task:
        store = kv(task)
        task.initialize()
        store.put(b"victim", b"value-of-the-victim")
        task.commit(input_position=1)
    data = bytearray((tmp_path / "data" / "data.mdb").read_bytes())
    stored = b"victim" + seal(b"victim", b"value-of-the-victim")
    at = data.find(stored)
    assert at >= 0
    data[at + len(b"victim") + 3] ^= 0x10
    (tmp_path / "data" / "data.mdb").write_bytes(bytes(data))
    with Task(tmp_path) as task:
        store = kv(task)
        task.initialize()
        with pytest.raises(DamagedFileError) as err:
            store.get(b"victim")
        assert err.value.key == b"victim"
