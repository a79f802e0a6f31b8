"""Small surprises of the Python API a newcomer met: a file given as a partition, a window
put with a datetime."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

import txstore
from txstore import Serdes
from txstore.errors import InvalidArgumentError
from txstore.runtime.task import Task


def test_a_file_is_not_a_partition(tmp_path: Path) -> None:
    """txstore.open(<a file>) and Task(<a file>) raised a bare NotADirectoryError."""
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    with pytest.raises(InvalidArgumentError, match="is a file: a partition is a directory"):
        txstore.open(f)
    with pytest.raises(InvalidArgumentError, match="is a file"):
        Task(f)
    assert f.read_text() == "hello"


def test_window_put_takes_a_datetime_as_fetch_does(tmp_path: Path) -> None:
    at = dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.UTC)
    with txstore.open(tmp_path) as db:
        clicks = db.window_store(
            "clicks", Serdes.string(), Serdes.long(), retention_period=dt.timedelta(days=7),
            window_size=60_000,
        )  # fmt: skip
        clicks.put("ada", 3, at)
        assert clicks.fetch("ada", at) == 3
        assert clicks.fetch("ada", int(at.timestamp() * 1000)) == 3
        with pytest.raises(InvalidArgumentError, match="timezone-aware"):
            clicks.put("ada", 4, at.replace(tzinfo=None))
        clicks.commit(1)
