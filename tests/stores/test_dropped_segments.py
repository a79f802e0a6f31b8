"""An open iterator never returns rows of a segment that retention dropped while it was open
(Kafka's ``SegmentIterator`` skips a segment that is no longer open), forward and backward, on
persistent and in-memory window and session stores, transactional and write-through, and on
read-committed views once the drop is committed.

Every store here has a retention of 120 s, so 60 s segments: rows at 0-2 s are in segment 0,
rows at 61-63 s in segment 1. A put at 180 s moves the observed stream time so that segment 0
(only) is dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import txstore
from txstore import Serdes, SessionWindow, Stores, TimeWindow, Windowed
from txstore.errors import SnapshotInvalidatedError
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

RETENTION = 120_000
DROPS_SEGMENT_0 = 180_000  # observed - retention = 60 s: segment 0 goes, segment 1 stays
LONG_MAX = 2**63 - 1


class Env:
    def __init__(self, tmp_path: Any, persistent: bool, tx: bool) -> None:
        self.tmp_path, self.persistent, self.tx = tmp_path, persistent, tx
        self.db: txstore.Database | None = None

    def _build(self, builder: Any) -> Any:
        if not self.persistent:
            return builder.build()
        if self.db is None:
            self.db = txstore.open(self.tmp_path / "p0")
        return builder.build(self.db)

    def window(self) -> WindowStore[str, str]:
        supplier = (
            Stores.persistent_window_store if self.persistent else Stores.in_memory_window_store
        )("w", RETENTION, 1_000, False, transactional=self.tx)
        w: WindowStore[str, str] = self._build(
            Stores.window_store_builder(supplier, Serdes.string(), Serdes.string())
        )
        for key, t in (("a", 0), ("b", 1_000), ("c", 2_000), ("a", 61_000), ("b", 62_000)):
            w.put(key, f"{key}{t}", t)
        w.put("c", "c63000", 63_000)
        return w

    def session(self) -> SessionStore[str, int]:
        supplier = (
            Stores.persistent_session_store if self.persistent else Stores.in_memory_session_store
        )("s", RETENTION, transactional=self.tx)
        s: SessionStore[str, int] = self._build(
            Stores.session_store_builder(supplier, Serdes.string(), Serdes.long())
        )
        for key, start, end in (("a", 0, 10), ("b", 0, 1_000), ("a", 61_000, 61_010)):
            s.put(Windowed(key, SessionWindow(start, end)), end)
        s.put(Windowed("b", SessionWindow(62_000, 62_500)), 62_500)
        return s

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


@pytest.fixture(
    params=[(p, t) for p in (True, False) for t in (True, False)],
    ids=lambda c: f"{'lmdb' if c[0] else 'mem'}-{'tx' if c[1] else 'direct'}",
)
def env(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Env]:
    e = Env(tmp_path, *request.param)
    yield e
    e.close()


def drain_after_drop(it: Any, drop: Callable[[], None]) -> tuple[Any, list[Any]]:
    """The first value, then what the iterator returns after ``drop`` ran."""
    with it:
        first = next(it).value
        assert it.has_next()
        drop()
        return first, [kv.value for kv in it]


WINDOW_CASES: dict[str, tuple[Callable[[WindowStore[str, str]], Any], str, list[str]]] = {
    # name: (open the iterator, its first value, what follows once segment 0 is dropped)
    "all": (lambda w: w.all(), "a0", ["a61000", "b62000", "c63000"]),
    "backward_all": (lambda w: w.backward_all(), "c63000", ["b62000", "a61000"]),
    "fetch_all": (lambda w: w.fetch_all(0, 100_000), "a0", ["a61000", "b62000", "c63000"]),
    "backward_fetch_all": (
        lambda w: w.backward_fetch_all(0, 100_000), "c63000", ["b62000", "a61000"]
    ),
    "key_range": (lambda w: w.fetch("a", "b", 0, 100_000), "a0", ["a61000", "b62000"]),
    "backward_key_range": (lambda w: w.backward_fetch("a", "b", 0, 100_000), "b62000", ["a61000"]),
    "single_key": (lambda w: w.fetch("a", 0, 100_000), "a0", ["a61000"]),
    "backward_single_key": (lambda w: w.backward_fetch("a", 0, 100_000), "a61000", []),
}  # fmt: skip


@pytest.mark.parametrize("case", list(WINDOW_CASES))
def test_window_iterator_skips_segment_dropped_while_open(env: Env, case: str) -> None:
    w = env.window()
    open_it, first, rest = WINDOW_CASES[case]
    got = drain_after_drop(open_it(w), lambda: w.put("z", "z", DROPS_SEGMENT_0))
    assert got == (first, rest)


def test_window_iterator_mid_segment(env: Env) -> None:
    """Segment 0 dropped after two of its three rows were returned: the third is not, and
    a segment created after the iterator was opened is not read either."""
    w = env.window()
    with w.all() as it:
        assert [next(it).value, next(it).value] == ["a0", "b1000"]
        w.put("z", "z", DROPS_SEGMENT_0)
        rest = [kv.value for kv in it]
    assert rest == ["a61000", "b62000", "c63000"]


def test_window_peek_and_has_next_skip_dropped_rows(env: Env) -> None:
    w = env.window()
    with w.fetch("b", 0, 100_000) as single, w.fetch_all(0, 100_000) as ranged:
        w.put("z", "z", DROPS_SEGMENT_0)
        assert single.peek_next_key() == 62_000
        assert ranged.peek_next_key() == Windowed("a", TimeWindow(61_000, 62_000))
        assert [kv.value for kv in single] == ["b62000"]
    with w.fetch("a", 0, 1_000) as only_dropped:  # nothing left of segment 0
        assert not only_dropped.has_next()


@pytest.mark.parametrize("how", ["all", "single_key"])
def test_read_committed_view_skips_segment_once_its_drop_is_committed(env: Env, how: str) -> None:
    w = env.window()
    w.commit(1)
    ro = w.read_committed()
    it: Any = ro.all() if how == "all" else ro.fetch("a", 0, 100_000)
    with it:
        assert next(it).value == "a0"
        w.put("z", "z", DROPS_SEGMENT_0)
        if env.tx:  # the drop is staged: the view shows committed data, segment 0 included
            assert it.has_next()
            assert ro.fetch("b", 1_000) == "b1000"
            w.commit(2)
        rest = [kv.value for kv in it]
    assert rest == (["a61000", "b62000", "c63000"] if how == "all" else ["a61000"])


@pytest.mark.parametrize("tx", [True, False], ids=["tx", "direct"])
def test_snapshot_view_is_invalidated_by_a_committed_drop(tmp_path: Any, tx: bool) -> None:
    """A snapshot is one committed state; a segment drop committed while it is open drops an
    LMDB database, which invalidates the snapshot: its iterators' next read raises."""
    env = Env(tmp_path, True, tx)
    try:
        w = env.window()
        w.commit(1)
        with w.read_committed().snapshot() as snap, snap.all() as it:
            assert next(it).value == "a0"
            w.put("z", "z", DROPS_SEGMENT_0)
            w.commit(2)
            with pytest.raises(SnapshotInvalidatedError):
                list(it)
    finally:
        env.close()


SESSION_CASES: dict[str, tuple[Callable[[SessionStore[str, int]], Any], int, list[int]]] = {
    "range": (lambda s: s.fetch("a", "b"), 10, [61_010, 62_500]),
    "backward_range": (lambda s: s.backward_fetch("a", "b"), 62_500, [61_010]),
    "single_key": (lambda s: s.fetch("a"), 10, [61_010]),
    "backward_single_key": (lambda s: s.backward_find_sessions("b", 0, LONG_MAX), 62_500, []),
    "find_range": (lambda s: s.find_sessions(None, None, 0, LONG_MAX), 10, [61_010, 62_500]),
}


@pytest.mark.parametrize("case", list(SESSION_CASES))
def test_session_iterator_skips_segment_dropped_while_open(env: Env, case: str) -> None:
    s = env.session()
    open_it, first, rest = SESSION_CASES[case]
    dropper = Windowed("z", SessionWindow(DROPS_SEGMENT_0, DROPS_SEGMENT_0))
    got = drain_after_drop(open_it(s), lambda: s.put(dropper, 0))
    assert got == (first, rest)


@pytest.mark.parametrize("tx", [True, False], ids=["tx", "direct"])
def test_session_time_only_search_skips_dropped_segment(tmp_path: Any, tx: bool) -> None:
    """The time-only ``findSessions`` (in-memory stores only, as in Kafka)."""
    s = Env(tmp_path, False, tx).session()
    dropper = Windowed("z", SessionWindow(DROPS_SEGMENT_0, DROPS_SEGMENT_0))
    got = drain_after_drop(s.find_sessions(0, 100_000), lambda: s.put(dropper, 0))
    assert got == (10, [61_010, 62_500])
