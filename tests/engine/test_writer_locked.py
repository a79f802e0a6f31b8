"""Another process holding the writer lock is :class:`~txstore.errors.WriterLockedError`
(issue 15, item 9), which subclasses ``InvalidStateStoreError`` (what the open raised before),
so callers that catch that still do. The lock is held by a real second process."""

from __future__ import annotations

from pathlib import Path

import pytest

import txstore
from tests import _engine_child as child
from txstore import Serdes
from txstore.engine.partition import Partition
from txstore.errors import InvalidStateStoreError, TxStoreError, WriterLockedError
from txstore.runtime.task import Task


def test_writer_locked_error_is_an_invalid_state_store_error() -> None:
    assert issubclass(WriterLockedError, InvalidStateStoreError)
    assert issubclass(WriterLockedError, TxStoreError)


def test_a_second_writer_process_gets_writer_locked_error(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        db.key_value_store("s", Serdes.bytes(), Serdes.bytes()).put(b"k", b"v")
        db.commit({"s": 1})
    proc = child.spawn("hold-writer", path)
    try:
        child.wait_line(proc, "READY")
        with pytest.raises(WriterLockedError, match="open for writing by another process"):
            txstore.open(path)
        with pytest.raises(WriterLockedError):
            Partition(path)
        with pytest.raises(WriterLockedError), Task(path):
            pass
        with pytest.raises(InvalidStateStoreError):  # what callers caught before
            txstore.open(path)
        with txstore.open(path, readonly=True) as ro:  # readers are welcome
            assert ro.key_value_store("s", Serdes.bytes(), Serdes.bytes()).get(b"k") == b"v"
    finally:
        child.kill(proc)
    with txstore.open(path) as db:  # the lock died with the process
        assert db.store_names() == ["s"]
