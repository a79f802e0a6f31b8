"""Store names are validated in one place, ``txstore.engine.base.check_store_name``, with
Kafka's rules for topic names (issue 15, item 6): ``[a-zA-Z0-9._-]``, 1 to 249 characters, not
``.`` or ``..``, and not txstore's reserved ``__txstore`` prefix. A name like ``../escape`` used
to be accepted, and a task then wrote its changelog outside ``changelog/``."""

from __future__ import annotations

from pathlib import Path

import pytest

import txstore
from txstore import Serdes, Stores
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.base import MAX_STORE_NAME_LENGTH, check_store_name
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.runtime.task import Task

GOOD = ["a", "counts", "KSTREAM-AGGREGATE-STATE-STORE-0000000001", "a.b_c-D9", "...", "x" * 249]
BAD = {
    "../escape": "may only contain",
    "a/b": "may only contain",
    "a\\b": "may only contain",
    "a b": "may only contain",
    "a\x00b": "may only contain",
    "caf\u00e9": "may only contain",
    "a:b": "may only contain",
    "\u0430": "may only contain",  # Cyrillic a: looks like "a"
    "": "must not be empty",
    ".": "not allowed",
    "..": "not allowed",
    "x" * 250: "longer than 249",
    "__txstore_meta__": "reserved prefix",
    "__txstore": "reserved prefix",
}


@pytest.mark.parametrize("name", GOOD)
def test_legal_names(name: str) -> None:
    assert check_store_name(name) == name


@pytest.mark.parametrize(("name", "rule"), sorted(BAD.items()))
def test_illegal_names_name_the_rule(name: str, rule: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rule):
        check_store_name(name)


def test_the_rule_is_kafkas() -> None:
    assert MAX_STORE_NAME_LENGTH == 249
    with pytest.raises(InvalidTypeError):
        check_store_name(b"bytes")
    with pytest.raises(InvalidArgumentError) as info:
        check_store_name("../escape")
    assert "a-z, A-Z, 0-9, '.', '_', '-'" in str(info.value)
    assert "'/'" in str(info.value)


@pytest.mark.parametrize("name", ["../escape", "a/b", ".."])
def test_every_layer_refuses_them(tmp_path: Path, name: str) -> None:
    with Partition(tmp_path / "p") as p:
        with pytest.raises(InvalidArgumentError):
            p.register_store(name, {"kind": "key_value"})
        with pytest.raises(InvalidArgumentError):
            BytesKeyValueStore(name, p)
        assert p.store_names() == []
    with txstore.open(tmp_path / "db") as db:
        with pytest.raises(InvalidArgumentError):
            db.key_value_store(name)
        with pytest.raises(InvalidArgumentError):
            db.window_store(name, retention_period=10_000, window_size=1_000)
        assert db.store_names() == []


def test_a_task_never_writes_a_changelog_outside_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "task"
    with Task(path) as task, pytest.raises(InvalidArgumentError, match="may only contain"):
        builder = Stores.key_value_store_builder(
            Stores.persistent_key_value_store("../escape"), Serdes.string(), Serdes.string()
        )
        task.key_value_store(builder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["task"]  # no tmp_path/escape
    assert not (path / "escape").exists()
    changelogs = path / "changelog"
    assert not changelogs.exists() or list(changelogs.iterdir()) == []
