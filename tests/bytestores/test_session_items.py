"""The C reader of single-key session searches (``txstore._checksums.session_items``) and the
writer's path that uses it (``WindowFetches.fetch_session_items``): on real LMDB cursors, for
each case it must hand over to the general path (None) or raise, and a seeded random workload
(keys that are prefixes of one another, several segments, overwrites, removes, commits)
against a model of the visible sessions, with a count of the searches the C reader served.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import lmdb
import pytest

import txstore
from txstore import KeyValue, Serdes, SessionWindow, Windowed
from txstore._checksums import ChecksumError, seal, session_items
from txstore.bytestores import window_fetch
from txstore.errors import DamagedFileError
from txstore.stores.decoded import session_windowed

pytestmark = pytest.mark.filterwarnings("error")

QQ = struct.Struct(">qq")
LONG_MAX = 2**63 - 1


def row(key: bytes, start: int, end: int) -> bytes:
    return key + QQ.pack(end, start)


@pytest.fixture
def cursor(tmp_path: Path) -> Any:
    env = lmdb.open(str(tmp_path / "env"), map_size=2**24)
    txn = env.begin(write=True)
    yield txn.cursor()
    txn.abort()
    env.close()


def search(cursor: Any, key: bytes, end_from: int, start_to: int, **kw: Any) -> Any:
    return session_items(
        cursor, key, end_from, start_to, kw.get("limit", 64), KeyValue, session_windowed,
        key.decode(), kw.get("decode"), kw.get("sealed", True),
    )  # fmt: skip


def test_reads_one_keys_sessions_by_end_then_start(cursor: Any) -> None:
    rows = {row(b"k", s, e): f"{s}-{e}".encode() for s, e in [(0, 10), (5, 10), (20, 30), (40, 50)]}
    rows[row(b"j", 0, 100)] = b"other key"
    rows[row(b"kk", 0, 100)] = b"another key, between k's bounds: skipped"
    for k, v in rows.items():
        cursor.put(k, seal(k, v))

    def pairs(end_from: int, start_to: int) -> list[tuple[int, int, str]]:
        got = search(cursor, b"k", end_from, start_to)
        assert got is not None
        return [(kv.key.window.start, kv.key.window.end, kv.value) for kv in got]

    assert pairs(0, LONG_MAX) == [
        (0, 10, "0-10"),
        (5, 10, "5-10"),
        (20, 30, "20-30"),
        (40, 50, "40-50"),
    ]
    assert pairs(11, 40) == [(20, 30, "20-30"), (40, 50, "40-50")]
    assert pairs(0, 4) == [(0, 10, "0-10")]  # sessions starting later are skipped, not the end
    assert pairs(51, LONG_MAX) == []
    got = search(cursor, b"k", 0, 0)
    assert got == [KeyValue(Windowed("k", SessionWindow(0, 10)), "0-10")]


def test_hands_over_and_raises(cursor: Any) -> None:
    k = row(b"a", 1, 2)
    cursor.put(k, seal(k, b"x"))
    assert search(cursor, b"a", 0, 9, limit=0) is None  # more rows than the limit
    for i in range(3):  # longer keys' rows between a's bounds: skipped, up to the limit
        longer = row(b"a\x00" + bytes([i]), 0, 1)
        cursor.put(longer, seal(longer, b"y"))
    assert search(cursor, b"a", 0, 9, limit=3) == [
        KeyValue(Windowed("a", SessionWindow(1, 2)), "x")
    ]
    assert search(cursor, b"a", 0, 9, limit=2) is None
    assert search(cursor, b"b", 0, 9) == []
    bad = row(b"c", 1, 2)
    cursor.put(bad, seal(bad, b"\xc0"))  # not UTF-8: the general path's serde raises
    assert search(cursor, b"c", 0, 9) is None
    damaged = bytearray(seal(bad, b"ok"))
    damaged[0] ^= 1
    cursor.put(bad, bytes(damaged))
    with pytest.raises(ChecksumError) as err:
        search(cursor, b"c", 0, 9)
    assert err.value.args == (bad, "checksum mismatch")
    cursor.put(bad, seal(bad, b"ok"))
    assert search(cursor, b"c", 0, 9, decode=bytes)[0].value == b"ok"
    with pytest.raises(TypeError, match="callable"):
        session_items(cursor, b"c", 0, 9, 64, KeyValue, None, "c", None, True)
    with pytest.raises(TypeError, match="10 arguments"):
        session_items(cursor, b"c", 0)  # type: ignore[call-arg]


KEYS = ["a", "aa", "a\x00", "b"]


@pytest.mark.parametrize("checksums", [True, False], ids=["checksums", "legacy"])
def test_random_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checksums: bool) -> None:
    served = [0]
    real = session_items

    def counting(*args: Any) -> Any:
        out = real(*args)
        served[0] += out is not None
        return out

    monkeypatch.setattr(window_fetch, "session_items", counting)  # (a private import)
    rnd = random.Random(2727)
    with txstore.open(tmp_path / "p", checksums=checksums) as db:
        s = db.session_store("s", Serdes.string(), Serdes.string(), retention_period=10**9)
        model: dict[tuple[str, int, int], str] = {}
        for step in range(600):
            key = rnd.choice(KEYS)
            start = rnd.randrange(0, 400_000)
            end = start + rnd.choice([0, 5, 70_000])
            op = rnd.random()
            if op < 0.6:
                s.put(Windowed(key, SessionWindow(start, end)), f"v{step}")
                model[(key, start, end)] = f"v{step}"
            elif op < 0.7 and model:
                k, st, en = rnd.choice(sorted(model))
                s.remove(Windowed(k, SessionWindow(st, en)))
                del model[(k, st, en)]
            elif op < 0.8:
                s.commit(step)
            for k in KEYS:
                t0 = rnd.randrange(0, 500_000)
                t1 = rnd.choice([LONG_MAX, rnd.randrange(0, 500_000)])
                expect = sorted(
                    ((e // s.segment_interval, e, st), v)
                    for (kk, st, e), v in model.items()
                    if kk == k and e >= t0 and st <= t1
                )
                with s.find_sessions(k, t0, t1) as it:
                    got = [((kv.key.window.end, kv.key.window.start), kv.value) for kv in it]
                assert got == [((e, st), v) for (_, e, st), v in expect], (step, k, t0, t1)
        s.commit(10_000)
    assert served[0] > 100  # the C reader served a good share of the searches


def test_damage_found_by_the_c_reader_names_the_database(tmp_path: Path) -> None:
    with txstore.open(tmp_path) as db:
        s = db.session_store("sess", Serdes.string(), Serdes.string(), retention_period=10**6)
        s.put(Windowed("k", SessionWindow(5, 7)), "Zq" * 12)
        s.put(Windowed("j", SessionWindow(5, 7)), "fine")
        s.commit(1)
    data = tmp_path / "data" / "data.mdb"
    raw = bytearray(data.read_bytes())
    raw[raw.find(b"Zq" * 12) + 5] ^= 0x01
    data.write_bytes(bytes(raw))
    with txstore.open(tmp_path) as db:
        s = db.session_store("sess", Serdes.string(), Serdes.string(), retention_period=10**6)
        with s.find_sessions("j", 0, 100) as it:  # opens the writer's cursor
            assert [kv.value for kv in it] == ["fine"]
        with pytest.raises(DamagedFileError) as err:
            s.find_sessions("k", 0, 100)
        assert err.value.key == b"k" + QQ.pack(7, 5)


def test_a_tasks_change_logged_stores_take_the_c_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from txstore import Stores
    from txstore.runtime.task import Task

    calls: list[str] = []
    for name in ("window_items", "session_items"):
        real = getattr(window_fetch, name)

        def counting(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        monkeypatch.setattr(window_fetch, name, counting)
    task = Task(str(tmp_path / "task"))
    try:
        task.window_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("w", 120_000, 1_000, False),
                Serdes.string(),
                Serdes.long(),
            )
        )
        task.session_store(
            Stores.session_store_builder(
                Stores.persistent_session_store("s", 120_000), Serdes.string(), Serdes.string()
            )
        )
        task.initialize()
        w, s = task.store("w"), task.store("s")
        for t in (0, 1_000, 2_000):
            w.put("k", t, t)
            s.put(Windowed("k", SessionWindow(t, t + 10)), f"s{t}")
        task.commit(3)
        for _ in range(2):  # the first reads open the writer's cursor
            with w.fetch("k", 0, 5_000) as it:
                assert [(kv.key, kv.value) for kv in it] == [(0, 0), (1_000, 1_000), (2_000, 2_000)]
            with s.find_sessions("k", 0, 5_000) as it:
                assert [kv.value for kv in it] == ["s0", "s1000", "s2000"]
        assert "window_items" in calls and "session_items" in calls
        calls.clear()
        w.put("k", 7, 500)  # logged and staged: the C reader merges it
        with w.fetch("k", 0, 5_000) as it:
            assert [kv.key for kv in it] == [0, 500, 1_000, 2_000]
        assert calls == ["window_items"]
    finally:
        task.close()
