"""The windowed keys that window and session reads make from stored bytes
(``txstore.stores.decoded.time_windowed`` / ``session_windowed``, which skip the dataclass
constructors when the stored times are in order) equal the constructors' objects, and raise
what the constructors raise for times out of order (a damaged key of a legacy partition)."""

from __future__ import annotations

import random

import pytest

import txstore
from txstore import Serdes, SessionWindow, TimeWindow, Windowed
from txstore.errors import InvalidArgumentError
from txstore.stores.decoded import session_windowed, time_windowed

LONG_MAX = 2**63 - 1


def test_equal_to_the_constructors() -> None:
    rnd = random.Random(27)
    times = [0, 1, 2**31, LONG_MAX - 1, LONG_MAX] + [rnd.randrange(LONG_MAX) for _ in range(50)]
    for start in times:
        for end in times:
            if start <= end:
                got = session_windowed("k", start, end)
                assert got == Windowed("k", SessionWindow(start, end))
                assert hash(got) == hash(Windowed("k", SessionWindow(start, end)))
        for size in (1, 10, LONG_MAX):
            if start < LONG_MAX:
                got = time_windowed(b"k", start, size)
                assert got == Windowed(b"k", TimeWindow.for_size(start, size))
                assert type(got.window) is TimeWindow


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [(-1, 5, "cannot be negative"), (7, 5, "cannot be smaller")],
)
def test_sessions_out_of_order_raise_as_the_constructor(start: int, end: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        session_windowed("k", start, end)


@pytest.mark.parametrize(
    ("start", "size", "message"),
    [(-1, 5, "cannot be negative"), (LONG_MAX, 5, "must be greater")],
)
def test_windows_out_of_order_raise_as_the_constructor(start: int, size: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        time_windowed("k", start, size)


def test_session_fetch_of_the_empty_key(tmp_path: object) -> None:
    with txstore.open(str(tmp_path)) as db:
        s = db.session_store("s", Serdes.string(), Serdes.string(), retention_period=10**6)
        s.put(Windowed("", SessionWindow(1, 2)), "a")
        s.put(Windowed("", SessionWindow(3, 4)), "b")
        s.put(Windowed("x", SessionWindow(3, 4)), "c")
        expect = [
            (Windowed("", SessionWindow(1, 2)), "a"),
            (Windowed("", SessionWindow(3, 4)), "b"),
        ]
        with s.find_sessions("", 0, 100) as it:
            assert list(it) == expect
        s.commit(1)
        with s.find_sessions("", 0, 100) as it:
            assert list(it) == expect
