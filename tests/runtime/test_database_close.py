"""Closing a database with uncommitted writes: discarded as in Kafka, with a warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import txstore
from txstore import Serdes
from txstore.errors import UncommittedWritesWarning


def test_close_with_uncommitted_writes_warns_and_discards(tmp_path: Path) -> None:
    """A sqlite3 or py-lmdb user expects a commit at close, or at least a word: the writes
    are discarded (Kafka's semantics) with an UncommittedWritesWarning naming the stores."""
    db = txstore.open(tmp_path)
    users = db.key_value_store("users", Serdes.string(), Serdes.long())
    db.key_value_store("idle")
    users.put("ada", 1)
    with pytest.warns(UncommittedWritesWarning, match=r"stores \['users'\]"):
        db.close()
    with txstore.open(tmp_path, readonly=True) as db:
        assert db.key_value_store("users", Serdes.string(), Serdes.long()).get("ada") is None


def test_no_warning_after_a_commit_or_when_a_with_block_raises(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with txstore.open(tmp_path) as db:
            users = db.key_value_store("users", Serdes.string(), Serdes.long())
            users.put("ada", 1)
            db.commit({"users": 1})
        with pytest.raises(ValueError), txstore.open(tmp_path) as db:
            users = db.key_value_store("users", Serdes.string(), Serdes.long())
            users.put("bob", 2)
            raise ValueError("bad input: roll back")
        db.close()  # closed already: nothing to say
    with txstore.open(tmp_path) as db:
        users = db.key_value_store("users", Serdes.string(), Serdes.long())
        assert users.get("ada") == 1 and users.get("bob") is None
        assert db.uncommitted_stores() == []
        users.put("bob", 2)
        assert db.uncommitted_stores() == ["users"]
        users.commit(2)
