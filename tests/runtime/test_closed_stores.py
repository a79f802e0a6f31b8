"""A store closed on its own leaves its database and its task at once.

A database used to keep every store it opened until it closed itself, so a long-lived database
that opened and closed stores grew; a task's store closed alone kept its changelog, and the next
task commit made the store's discarded writes durable in the changelog only (the store never
replayed them). Now ``store.close()`` drops the store: the database holds no reference to it
(checked with ``weakref`` after ``gc.collect()``), commits and transactions leave it out, the
name can be opened again and sees what was committed, and the closed handle raises
:class:`~txstore.errors.StoreClosedError`. A task's closed store takes its changelog with it:
its uncommitted records go as its staged writes did.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Serdes, Stores, faults
from txstore.errors import IllegalStateError, InvalidArgumentError, StoreClosedError
from txstore.faults import InjectedFault
from txstore.runtime.task import Task

pytestmark = pytest.mark.filterwarnings("error")


def open_kinds(db: txstore.Database) -> dict[str, Any]:
    """One store of each kind (a window store that keeps duplicates has a sequence counter)."""
    return {
        "kv": db.key_value_store("kv", Serdes.string(), Serdes.long()),
        "win": db.window_store(
            "win", Serdes.string(), Serdes.long(), retention_period=10_000, window_size=100
        ),
        "dups": db.window_store(
            "dups",
            Serdes.string(),
            Serdes.long(),
            retention_period=10_000,
            window_size=100,
            retain_duplicates=True,
        ),
        "sess": db.session_store("sess", Serdes.string(), Serdes.long(), retention_period=10_000),
    }


USE = {
    "kv": lambda s: s.put("k", 3),
    "win": lambda s: s.fetch("k", 100),
    "dups": lambda s: s.put("k", 3, 100),
    "sess": lambda s: s.fetch_session("k", 100, 200),
}


def write(stores: dict[str, Any], value: int) -> None:
    stores["kv"].put("k", value)
    stores["win"].put("k", value, 100)
    stores["dups"].put("k", value, 100)
    stores["sess"].put(txstore.Windowed("k", txstore.SessionWindow(100, 200)), value)


def read(stores: dict[str, Any]) -> tuple[Any, ...]:
    with stores["dups"].fetch("k", 0, 1_000) as it:
        dups = [kv.value for kv in it]
    return (
        stores["kv"].get("k"),
        stores["win"].fetch("k", 100),
        dups,
        stores["sess"].fetch_session("k", 100, 200),
    )


def refs_of(store: Any) -> list[weakref.ref[Any]]:
    """Weak references to a typed store and the bytes store under it."""
    return [weakref.ref(store), weakref.ref(store.bytes_store)]


def test_a_closed_store_is_freed_and_reopens_with_its_committed_data(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        stores = open_kinds(db)
        write(stores, 1)
        db.commit(dict.fromkeys(stores, 1))
        write(stores, 2)  # staged, then discarded by the close
        refs = [r for s in stores.values() for r in refs_of(s)]
        closed = list(stores.values())
        for store in closed:
            store.close()
        assert db.stacks() == [] and db.uncommitted_stores() == []
        for name, store in stores.items():
            # a closed handle: a typed error on use, and the database no longer knows it
            with pytest.raises(StoreClosedError):
                USE[name](store)
            with pytest.raises(InvalidArgumentError, match="no store"):
                db.store(name)
        del stores, closed, store
        gc.collect()
        assert [r() for r in refs] == [None] * len(refs)
        again = open_kinds(db)  # the same names open again, with what was committed
        assert read(again) == (1, 1, [1], 1)
        assert db.store("kv") is again["kv"]
    with txstore.open(tmp_path, readonly=True) as db:  # the same for a reader
        stores = open_kinds(db)
        refs = [r for s in stores.values() for r in refs_of(s)]
        for store in stores.values():
            store.close()
        del stores, store
        gc.collect()
        assert [r() for r in refs] == [None] * len(refs) and db.stacks() == []
        assert read(open_kinds(db)) == (1, 1, [1], 1)


def test_open_and_close_many_times_keeps_nothing(tmp_path: Path) -> None:
    """The leak the issue describes: a long-lived database that opens and closes stores."""
    with txstore.open(tmp_path) as db:
        refs = []
        for i in range(50):
            store = db.key_value_store(f"s{i % 5}", Serdes.string(), Serdes.long())
            store.put("k", i)
            store.commit(i)
            refs.append(weakref.ref(store))
            store.close()
        del store
        gc.collect()
        assert [r() for r in refs] == [None] * 50 and db.stacks() == []
        assert db.key_value_store("s4", Serdes.string(), Serdes.long()).get("k") == 49


def test_commits_and_transactions_leave_a_closed_store_out(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        a = db.key_value_store("a", Serdes.string(), Serdes.long())
        b = db.key_value_store("b", Serdes.string(), Serdes.long())
        db.commit({"a": 1, "b": 1})
        a.put("x", 1)
        b.put("x", 1)
        a.close()  # its staged write is discarded, with no warning at the database's close
        with db.transaction(2):  # an int: every open store, "a" no longer among them
            b.put("y", 2)
        assert b.committed_offset == 2 and b.get("x") == 1
        a = db.key_value_store("a", Serdes.string(), Serdes.long())
        assert a.committed_offset == 1  # the transaction did not commit it
        a.close()
        # naming the closed store explicitly still records its offset (it is in the
        # partition), with nothing staged to write
        db.commit({"a": 3})
        a = db.key_value_store("a", Serdes.string(), Serdes.long())
        assert a.committed_offset == 3 and a.get("x") is None
        with pytest.raises(InvalidArgumentError, match="already open"):
            db.key_value_store("a", Serdes.string(), Serdes.long())


def builder(name: str, persistent: bool = True) -> Any:
    supplier = (
        Stores.persistent_key_value_store(name)
        if persistent
        else Stores.in_memory_key_value_store(name)
    )
    return Stores.key_value_store_builder(supplier, Serdes.string(), Serdes.long())


def test_a_task_store_closed_before_initialize_can_be_opened_again(tmp_path: Path) -> None:
    with Task(tmp_path) as task:
        first = task.key_value_store(builder("s"))
        first.close()  # its changelog is released too, else the reopen would find it locked
        store = task.key_value_store(builder("s"))
        task.initialize()
        store.put("k", 1)
        task.commit(1)
        with pytest.raises(StoreClosedError):
            first.get("k")
    with Task(tmp_path) as task:
        store = task.key_value_store(builder("s"))
        task.initialize()
        assert store.get("k") == 1


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "in-memory"])
def test_a_running_task_store_closed_alone_takes_its_changelog(
    tmp_path: Path, persistent: bool
) -> None:
    """Before, the next task commit committed the closed store's changelog records although
    its overlay was gone: the changelog said ``k = 2`` while the store kept 1 and never
    replayed it. Now the record goes with the store, and the other stores commit as usual."""
    with Task(tmp_path) as task:
        s = task.key_value_store(builder("s", persistent))
        other = task.key_value_store(builder("other"))
        task.initialize()
        s.put("k", 1)
        other.put("k", 1)
        task.commit(1)
        s.put("k", 2)
        other.put("k", 2)
        ref = weakref.ref(s)
        s.close()
        assert task.store_names() == ["other"]
        with pytest.raises(InvalidArgumentError, match="no store 's'"):
            task.store("s")
        with pytest.raises(InvalidArgumentError, match="no open store 's'"):
            task.changelog("s")
        task.commit(2)
        del s
        gc.collect()
        assert ref() is None
    with Task(tmp_path) as task:
        s = task.key_value_store(builder("s", persistent))
        other = task.key_value_store(builder("other"))
        report = task.initialize()
        assert task.input_position == 2 and (s.get("k"), other.get("k")) == (1, 2)
        assert [r.value for r in task.changelog("s").read_committed()] == [b"\0" * 7 + b"\1"]
        assert report.rolled_back == {} and report.discarded == {}


def test_closing_a_store_after_a_commit_failed_part_way_undoes_its_part(tmp_path: Path) -> None:
    """Commit 2 reached the changelog of ``a`` only; closing ``a`` rolls that back (as
    ``abort()`` would), the retry is refused (the participants changed), ``abort()`` and a new
    commit go on, and the next start finds every changelog consistent."""
    with Task(tmp_path) as task:
        a = task.key_value_store(builder("a"))
        b = task.key_value_store(builder("b"))
        task.initialize()
        a.put("k", 1)
        b.put("k", 1)
        task.commit(1)
        a.put("k", 2)
        b.put("k", 2)
        faults.arm("task.between_changelog_commits", 1, "raise")
        try:
            with pytest.raises(InjectedFault):
                task.commit(2)
        finally:
            faults.disarm()
        a.close()
        with pytest.raises(IllegalStateError, match="failed after the changelogs"):
            task.commit(2)
        task.abort()
        b.put("k", 3)
        task.commit(3)
    with Task(tmp_path) as task:
        a = task.key_value_store(builder("a"))
        b = task.key_value_store(builder("b"))
        report = task.initialize()
        assert (task.input_position, task.commit_sequence) == (3, 2)
        assert (a.get("k"), b.get("k")) == (1, 3) and report.rolled_back == {}
