"""``verify`` of :func:`txstore.open`, :class:`~txstore.runtime.database.Database` and
:class:`~txstore.runtime.task.Task` reaches the partition: after a clean close the default
opens without walking ``data.mdb``'s pages, ``verify="always"`` walks them and refuses a
damaged page with :class:`DamagedFileError`, and a bad value is an ``InvalidArgumentError``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import txstore
from txstore import Serdes, Stores
from txstore.engine.lmdb_pages import page_kinds
from txstore.engine.writer_lock import CLEAN_CLOSE
from txstore.errors import DamagedFileError, InvalidArgumentError
from txstore.runtime.task import Task
from txstore.stores.builders import KeyValueStoreBuilder


def _builder() -> KeyValueStoreBuilder[str, str]:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store("kv"), Serdes.string(), Serdes.string()
    )


def _zero_a_leaf(path: Path) -> int:
    data = path / "data" / "data.mdb"
    kinds = page_kinds(data)
    pgno = min(p for p, k in kinds.items() if k == ("leaf", "database 'kv'"))
    page_size = os.sysconf("SC_PAGE_SIZE")  # LMDB's page size is the OS page size
    with open(data, "r+b") as f:
        f.seek(pgno * page_size)
        f.write(bytes(page_size))
    return pgno


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, int]:
    """A task partition closed cleanly, then one leaf page of store 'kv' zeroed."""
    path = tmp_path / "p"
    with Task(path) as task:
        kv = task.key_value_store(_builder())
        task.initialize()
        for i in range(3000):
            kv.put(f"key-{i:05d}", "v" * 40)
        task.commit(1)
    assert (path / CLEAN_CLOSE).exists()
    return path, _zero_a_leaf(path)


def test_open_walks_only_when_asked_after_a_clean_close(damaged: tuple[Path, int]) -> None:
    path, pgno = damaged
    with txstore.open(path, readonly=True, verify="never") as db:
        assert db.partition.page_walk is None
    with pytest.raises(DamagedFileError, match=rf"page {pgno}\b") as refused:
        txstore.open(path, verify="always")
    assert "data.mdb" in str(refused.value)
    with pytest.raises(DamagedFileError, match=rf"page {pgno}\b"):
        txstore.open(path, readonly=True, verify="always")


def test_a_task_passes_verify_to_its_partition(damaged: tuple[Path, int]) -> None:
    path, pgno = damaged
    with pytest.raises(DamagedFileError, match=rf"page {pgno}\b"):
        Task(path, verify="always")
    with Task(path, verify="never") as task:
        assert task.db.partition.page_walk is None


def test_a_bad_verify_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="verify must be one of"):
        txstore.open(tmp_path / "p", verify="sometimes")
    with pytest.raises(InvalidArgumentError, match="verify must be one of"):
        Task(tmp_path / "q", verify="yes")
