"""The typed key-value store's get without a Python frame (csrc/kv_get.c, issue 27).

A transactional store with bytes serdes on an LMDB partition gets a C builtin as its ``get``:
it reads the overlay's memory tier, then the writer's read transaction, and hands anything else
to the Python ``KeyValueStore.get``. Each test says what the builtin gives where the two could
differ: a closed store, bad keys, a spilled overlay, staged deletes, a damaged value, reads
after commit, recover and the partition's read transaction renewals, and a random sequence
compared with the Python path at every step.
"""

from __future__ import annotations

import gc
import random
import weakref
from pathlib import Path
from types import MethodType
from typing import Any

import pytest

import txstore
from txstore import Serdes
from txstore.engine.checksums import recorded_damage, seal
from txstore.errors import (
    DamagedFileError,
    InvalidArgumentError,
    InvalidStateStoreError,
    StoreClosedError,
)
from txstore.stores.kv import KeyValueStore


def is_native(store: Any) -> bool:
    return type(store.get).__name__ == "builtin_function_or_method"


def python_get(store: Any) -> Any:
    """The Python path the builtin falls back to, for comparison."""
    return MethodType(KeyValueStore.get, store)


def test_a_bytes_store_on_lmdb_gets_the_builtin_and_others_keep_the_python_get(
    tmp_path: Path,
) -> None:
    with txstore.open(tmp_path / "a") as db:
        assert is_native(db.key_value_store("b", Serdes.bytes(), Serdes.bytes()))
        assert not is_native(db.key_value_store("s", Serdes.string(), Serdes.long()))
        assert not is_native(
            db.key_value_store("n", Serdes.bytes(), Serdes.bytes(), transactional=False)
        )


def test_read_your_writes_deletes_commit_and_recover(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        assert is_native(s)
        assert s.get(b"a") is None
        s.put(b"a", b"1")
        assert s.get(b"a") == b"1"  # the overlay's memory tier
        s.commit(changelog_offset=0)
        assert s.get(b"a") == b"1"  # committed: the writer's read transaction, renewed
        s.put(b"a", None)
        assert s.get(b"a") is None  # a staged delete hides the committed value
        s.put(b"b", b"2")
        s.recover(0)  # discards the staged writes
        assert s.get(b"a") == b"1" and s.get(b"b") is None
        s.put(b"a", b"3")
        s.commit(changelog_offset=1)
        assert s.get(b"a") == b"3"
    with txstore.open(tmp_path / "p") as db:  # reopened: committed values only
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        assert s.get(b"a") == b"3" and s.get(b"b") is None


def test_a_closed_store_raises_store_closed(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"a", b"1")
        s.commit(changelog_offset=0)
        get = s.get
        s.close()
        with pytest.raises(StoreClosedError):
            get(b"a")
        with pytest.raises(StoreClosedError):
            s.get(b"a")
    with pytest.raises(StoreClosedError):  # the database closed too
        get(b"a")


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (None, InvalidArgumentError),  # Kafka's null key
        (b"", InvalidArgumentError),  # LMDB rejects zero-length keys
        (b"k" * 512, InvalidArgumentError),  # past LMDB's key size
        ("text", TypeError),  # the bytes serde's own error for a str
        (bytearray(b"a"), None),  # not bytes exactly: the Python path, same value
    ],
)
def test_bad_keys_get_the_python_paths_error(
    tmp_path: Path, key: Any, error: type[Exception] | None
) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"a", b"1")
        s.commit(changelog_offset=0)
        py = python_get(s)
        if error is None:
            assert s.get(key) == py(key) == b"1"
            return
        with pytest.raises(Exception) as native_err:
            s.get(key)
        with pytest.raises(Exception) as py_err:
            py(key)
        assert type(native_err.value) is type(py_err.value)
        assert isinstance(native_err.value, error)
        assert str(native_err.value) == str(py_err.value)


def test_a_spilled_overlay_is_still_read(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p", overlay_budget_bytes=4096) as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"gone", b"committed")
        s.commit(changelog_offset=0)
        s.put(b"gone", None)  # staged delete, then spilled with the rest
        rows = {b"k%04d" % i: b"v%04d" % i + b"x" * 100 for i in range(200)}
        for k, v in rows.items():
            s.put(k, v)
        assert s.bytes_store.db_overlay.layered  # spilled: the memory tier is not all
        assert s.get(b"gone") is None
        assert all(s.get(k) == v for k, v in rows.items())
        s.commit(changelog_offset=1)
        assert not s.bytes_store.db_overlay.layered
        assert s.get(b"gone") is None and s.get(b"k0007") == rows[b"k0007"]


def test_a_damaged_value_raises_and_is_recorded(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"good", b"fine-value")
        s.put(b"bad", b"flipped-value")
        s.commit(changelog_offset=0)
    data = bytearray((tmp_path / "data" / "data.mdb").read_bytes())
    stored = b"bad" + seal(b"bad", b"flipped-value")
    at = data.find(stored)
    assert at >= 0
    while at >= 0:
        data[at + len(b"bad") + 2] ^= 0x40
        at = data.find(stored, at + 1)
    (tmp_path / "data" / "data.mdb").write_bytes(bytes(data))
    with txstore.open(tmp_path) as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        assert is_native(s)
        assert s.get(b"good") == b"fine-value"
        with pytest.raises(DamagedFileError) as err:
            s.get(b"bad")  # never the flipped value
        assert err.value.database == "s" and err.value.key == b"bad"
        assert recorded_damage(str(tmp_path)) == {b"s"}  # the partition's record
        s.put(b"bad", b"new")  # read-your-writes still ahead of the damaged row
        assert s.get(b"bad") == b"new"


def test_a_values_bytes_are_its_own_and_a_transaction_ended_is_not_read(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        t = db.key_value_store("t", Serdes.bytes(), Serdes.bytes())
        s.put(b"a", b"value-a")
        t.put(b"a", b"value-t")
        db.commit({"s": 0, "t": 0})
        first = s.get(b"a")
        assert first == b"value-a" and t.get(b"a") == b"value-t"  # each store its own handle
        for i in range(3):  # each commit ends the writer's read transaction
            s.put(b"a", b"v%d" % i)
            db.commit({"s": i + 1, "t": i + 1})
            assert s.get(b"a") == b"v%d" % i and t.get(b"a") == b"value-t"
        assert first == b"value-a"  # a value handed out is never changed afterwards


def test_the_store_and_its_builtin_are_freed(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"a", b"1")
        s.commit(changelog_offset=0)
        assert s.get(b"a") == b"1"
        ref = weakref.ref(s)
        s.close()
        del s
    del db  # the database keeps its stores
    gc.collect()
    assert ref() is None  # the builtin's state (a cycle through the store) is collected


def test_random_sequence_matches_the_python_path(tmp_path: Path) -> None:
    rnd = random.Random(27)
    keys = [b"k%03d" % i for i in range(60)]
    with txstore.open(tmp_path / "p", overlay_budget_bytes=8192) as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        py = python_get(s)
        model: dict[bytes, bytes] = {}
        committed: dict[bytes, bytes] = {}
        offset = 0
        for step in range(1500):
            op = rnd.random()
            k = rnd.choice(keys)
            if op < 0.45:
                v = rnd.randbytes(rnd.randrange(1, 200))
                s.put(k, v)
                model[k] = v
            elif op < 0.6:
                s.put(k, None)
                model.pop(k, None)
            elif op < 0.65:
                s.commit(changelog_offset=offset)
                offset += 1
                committed = dict(model)
            elif op < 0.67 and offset:
                s.recover(offset - 1)
                model = dict(committed)
            got = s.get(k)
            assert got == py(k) == model.get(k), step
        s.commit(changelog_offset=offset)


def test_a_store_opened_after_the_first_read_gets_its_own_handle(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"a", b"from-s")
        s.commit(changelog_offset=0)
        assert s.get(b"a") == b"from-s"  # the writer's read transaction began without "t"
        t = db.key_value_store("t", Serdes.bytes(), Serdes.bytes())
        assert t.get(b"a") is None
        t.put(b"a", b"from-t")
        t.commit(changelog_offset=0)
        assert t.get(b"a") == b"from-t" and s.get(b"a") == b"from-s"
        u = db.key_value_store("u", Serdes.bytes(), Serdes.bytes())  # never committed to
        assert u.get(b"a") is None and s.get(b"a") == b"from-s"


def test_an_lmdb_error_in_the_read_is_typed_on_both_paths(tmp_path: Path) -> None:
    # The writer's read transaction ended under the store (as a bug in txstore or a caller
    # reaching into the partition would end it): py-lmdb raises its own lmdb.Error from
    # txn.get; the builtin hands the key to the Python path, which raises txstore's error.
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        s.put(b"a", b"1")
        s.commit(changelog_offset=0)
        assert s.get(b"a") == b"1"  # the builtin now holds the writer's read transaction
        part: Any = db.partition
        part.writer_txn.abort()
        for get in (s.get, python_get(s)):
            with pytest.raises(InvalidStateStoreError, match="was closed"):
                get(b"a")
        part.writer_txn = None  # the partition begins a fresh one at the next read
        assert s.get(b"a") == b"1"
