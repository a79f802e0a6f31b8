"""Read-committed views of window and session stores filter expired records with the observed
stream time *as of the last commit*: an uncommitted put that advances stream time past the
retention must not hide committed records from them (real LMDB files, real processes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Serdes, SessionWindow, Stores, Windowed
from txstore.queries import Application, QueryableStoreTypes, StoreQueryParameters

RETENTION = 120_000
LATE = 300_000  # LATE - RETENTION + 1 > 0: everything at time 0 is expired by a put at LATE


def window(db: txstore.Database, memory: bool, name: str = "w") -> Any:
    make = Stores.in_memory_window_store if memory else Stores.persistent_window_store
    supplier = make(name, RETENTION, 1000, False)
    builder = Stores.window_store_builder(supplier, Serdes.string(), Serdes.string())
    return builder.build() if memory else builder.build(db)


def session(db: txstore.Database, memory: bool, name: str = "s") -> Any:
    make = Stores.in_memory_session_store if memory else Stores.persistent_session_store
    builder = Stores.session_store_builder(make(name, RETENTION), Serdes.string(), Serdes.string())
    return builder.build() if memory else builder.build(db)


def values(it: Any) -> list[Any]:
    with it:
        return [kv.value for kv in it]


@pytest.mark.parametrize("memory", [False, True], ids=["persistent", "in-memory"])
def test_window_read_committed_ignores_uncommitted_stream_time(
    tmp_path: Path, memory: bool
) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window(db, memory)
        w.put("a", "A0", 0)
        w.commit(1)
        rc = w.read_committed()
        assert rc.fetch("a", 0) == "A0"
        w.put("b", "B", LATE)  # uncommitted, advances the writer's stream time past retention
        assert w.fetch("a", 0) is None  # the writer's own (read-uncommitted) view expires it
        assert rc.fetch("a", 0) == "A0"
        assert values(rc.fetch("a", 0, LATE)) == ["A0"]
        assert values(rc.all()) == ["A0"]
        assert values(rc.fetch_all(0, LATE)) == ["A0"]
        assert rc.fetch("b", LATE) is None
        snap = rc.snapshot() if hasattr(rc, "snapshot") else None
        if snap is not None:
            with snap:
                assert snap.fetch("a", 0) == "A0" and values(snap.all()) == ["A0"]
        assert w.recover(1) is True
        assert rc.fetch("a", 0) == "A0" and w.fetch("a", 0) == "A0"
        assert values(rc.all()) == ["A0"] and values(w.all()) == ["A0"]
        w.put("b", "B", LATE)
        w.commit(2)  # now committed: the committed stream time expires "a"
        assert rc.fetch("a", 0) is None and rc.fetch("b", LATE) == "B"
        assert values(rc.all()) == ["B"]
        assert w.recover(2) is True
        assert rc.fetch("a", 0) is None and w.fetch("a", 0) is None
        assert w.observed_stream_time == LATE


@pytest.mark.parametrize("memory", [False, True], ids=["persistent", "in-memory"])
def test_session_read_committed_ignores_uncommitted_stream_time(
    tmp_path: Path, memory: bool
) -> None:
    a0 = Windowed("a", SessionWindow(0, 10))
    late = Windowed("b", SessionWindow(LATE, LATE))
    with txstore.open(tmp_path / "p") as db:
        s = session(db, memory)
        s.put(a0, "A0")
        s.commit(1)
        rc = s.read_committed()
        assert rc.fetch_session("a", 0, 10) == "A0"
        s.put(late, "B")
        assert s.fetch_session("a", 0, 10) is None
        assert rc.fetch_session("a", 0, 10) == "A0"
        assert values(rc.fetch("a")) == ["A0"]
        assert values(rc.find_sessions("a", 0, LATE)) == ["A0"]
        assert s.recover(1) is True
        assert rc.fetch_session("a", 0, 10) == "A0" and s.fetch_session("a", 0, 10) == "A0"
        s.put(late, "B")
        s.commit(2)
        assert rc.fetch_session("a", 0, 10) is None and values(rc.fetch("b")) == ["B"]


def test_staged_segment_drop_is_invisible_to_read_committed(tmp_path: Path) -> None:
    """The put at LATE stages the drop of segment 0 (in the overlay); committed readers keep
    reading it until the commit applies the drop."""
    with txstore.open(tmp_path / "p") as db:
        w = window(db, False)
        w.put("a", "A0", 0)
        w.commit(1)
        w.put("b", "B", LATE)
        assert 0 not in w.bytes_store.segment_ids()
        rc = w.read_committed()
        assert values(rc.fetch("a", 0, LATE)) == ["A0"]
        w.commit(2)
        assert values(rc.fetch("a", 0, LATE)) == []


READER = textwrap.dedent(
    """
    import sys, txstore
    from txstore import Serdes, Stores
    with txstore.open(sys.argv[1], readonly=True) as db:
        w = Stores.window_store_builder(
            Stores.persistent_window_store("w", 120000, 1000, False),
            Serdes.string(), Serdes.string()).build(db)
        print(w.fetch("a", 0), w.read_committed().fetch("a", 0))
    """
)


def test_writer_read_committed_agrees_with_another_process(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = window(db, False)
        w.put("a", "A0", 0)
        w.commit(1)
        w.put("b", "B", LATE)  # uncommitted
        out = subprocess.run(
            [sys.executable, "-c", READER, str(tmp_path / "p")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out == ["A0", "A0"]
        assert w.read_committed().fetch("a", 0) == "A0"


def test_interactive_query_read_committed_window_and_session(tmp_path: Path) -> None:
    builders: list[Any] = [
        Stores.window_store_builder(
            Stores.persistent_window_store("w", RETENTION, 1000, False),
            Serdes.string(),
            Serdes.string(),
        ),
        Stores.session_store_builder(
            Stores.persistent_session_store("s", RETENTION), Serdes.string(), Serdes.string()
        ),
    ]
    app = Application("app", tmp_path, builders, num_partitions=1, task_options={"sync": False})
    app.start()
    try:
        qt = QueryableStoreTypes
        rcw = app.store(
            StoreQueryParameters.from_name_and_type("w", qt.window_store()).enable_read_committed()
        )
        rcs = app.store(
            StoreQueryParameters.from_name_and_type("s", qt.session_store()).enable_read_committed()
        )
        with app.writer(0) as w:
            w.store("w").put("a", "A0", 0)
            w.store("s").put(Windowed("a", SessionWindow(0, 10)), "A0")
            w.commit(1)
        with app.writer(0) as w:
            w.store("w").put("b", "B", LATE)
            w.store("s").put(Windowed("b", SessionWindow(LATE, LATE)), "B")
            assert rcw.fetch("a", 0) == "A0"
            assert rcs.fetch_session("a", 0, 10) == "A0"
            assert values(rcw.all()) == ["A0"]
        assert rcw.fetch("a", 0) == "A0" and rcs.fetch_session("a", 0, 10) == "A0"
        with app.writer(0) as w:
            w.commit(2)
        assert rcw.fetch("a", 0) is None and rcs.fetch_session("a", 0, 10) is None
    finally:
        app.close()
