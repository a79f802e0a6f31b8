"""The single-key window fetch's fast paths against a model: the writer's rows read through its
kept cursor, the overlay's bisected small reads, the read-committed view's one-transaction
read, and the general (streaming) path they shortcut.

A seeded random workload over keys that are prefixes of one another, several segments,
overwrites, deletes, commits, recoveries, spills and expiry checks every fetch against a plain
dict of what is visible (read-uncommitted) and of what is committed (read-committed).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Serdes
from txstore.bytestores.segment_reads import SMALL_READ_LIMIT
from txstore.engine.iterators import KeyRange
from txstore.engine.overlay import Overlay
from txstore.engine.partition import Partition

pytestmark = pytest.mark.filterwarnings("error")

RETENTION, SIZE, INTERVAL = 180_000, 1_000, 90_000  # segments of max(retention / 2, 60 s)
KEYS = ["a", "aa", "a\x00", "ab", "b", "b" * 30]


def visible(
    model: dict[tuple[str, int], str], key: str, t0: int, t1: int, low: int
) -> list[tuple[int, str]]:
    """The windows of ``key`` starting in ``[max(t0, low), t1]``, ascending."""
    return sorted((t, v) for (k, t), v in model.items() if k == key and max(t0, low) <= t <= t1)


def check_fetches(w: Any, model: dict[tuple[str, int], str], rnd: random.Random) -> None:
    low = w.observed_stream_time - RETENTION + 1
    for key in KEYS:
        t0 = rnd.choice([-5, 0, rnd.randrange(0, 500_000)])
        t1 = rnd.choice([t0 + rnd.randrange(0, 200_000), 2**63 - 1, t0 - 1])
        expect = visible(model, key, t0, t1, low)
        with w.fetch(key, t0, t1) as it:
            assert [(kv.key, kv.value) for kv in it] == expect, (key, t0, t1)
        with w.backward_fetch(key, t0, t1) as it:
            assert [(kv.key, kv.value) for kv in it] == expect[::-1], (key, t0, t1)


@pytest.mark.parametrize(
    ("budget", "commits"), [(64 * 2**20, 0.06), (4096, 0.01)], ids=["memory", "spilling"]
)
def test_random_model(tmp_path: Path, budget: int, commits: float) -> None:
    rnd = random.Random(4242 + budget)
    with txstore.open(tmp_path / "p", overlay_budget_bytes=budget) as db:
        w = db.window_store(
            "w",
            Serdes.string(),
            Serdes.string(),
            retention_period=RETENTION,
            window_size=SIZE,
        )
        assert w.segment_interval == INTERVAL
        view = w.read_committed()
        model: dict[tuple[str, int], str] = {}  # read-uncommitted
        committed: dict[tuple[str, int], str] = {}
        committed_observed = -1  # views filter expiry with the observed time of the last commit
        offset = 0
        for step in range(1200):
            op = rnd.random()
            key = rnd.choice(KEYS)
            t = rnd.randrange(0, step // 8 + 5) * 3_000 + rnd.choice([0, 0, 7])  # moves on
            if op < 0.5:
                w.put(key, f"v{step}", t)
                if t // INTERVAL >= (w.observed_stream_time - RETENTION) // INTERVAL:
                    model[(key, t)] = f"v{step}"  # else dropped: its segment expired
            elif op < 0.6:
                w.put(key, None, t)
                model.pop((key, t), None)
            elif op < 0.6 + commits:
                offset += 1
                w.commit(offset)
                committed = dict(model)
                committed_observed = w.observed_stream_time
            elif op < 0.62 + commits:
                w.recover(offset)
                model = dict(committed)
            else:
                check_fetches(w, model, rnd)
                if rnd.random() < 0.3:
                    low = committed_observed - RETENTION + 1
                    key = rnd.choice(KEYS)
                    with view.fetch(key, 0, 2**62) as it:
                        got = [(kv.key, kv.value) for kv in it]
                    assert got == visible(committed, key, 0, 2**62, low)
            # segments below the live ones are dropped: forget their windows
            live = set(w.bytes_store.segment_ids())
            model = {kt: v for kt, v in model.items() if kt[1] // INTERVAL in live}
        view.close()


def test_overlay_small_reads_match_chunk_reads() -> None:
    rnd = random.Random(7)
    ov = Overlay(1 << 30, None).db("s", b"s")
    keys = [bytes([rnd.randrange(3)]) * rnd.randrange(1, 4) + b"%d" % i for i in range(400)]
    for step in range(3000):
        k = rnd.choice(keys)
        ov.put(k, None if rnd.random() < 0.2 else b"v%d" % step)
        if step % 7 == 0:
            lo, hi = sorted(rnd.sample(keys, 2))
            if rnd.random() < 0.3:
                hi = lo
            rows, frontier = ov.read_chunk(KeyRange(lo, hi), False, 1 << 30)
            small = ov.read_small(lo, hi, SMALL_READ_LIMIT)
            assert frontier is None
            assert small == (rows if len(rows) <= SMALL_READ_LIMIT else None), (lo, hi)
    ov.drop()
    assert ov.read_small(b"", b"\xff", SMALL_READ_LIMIT) is None  # a staged drop: not alone


def test_writer_cursor_is_kept_until_the_transaction_ends(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=1000, window_size=10
        )
        w.put("k", "v0", 0)
        w.commit(1)
        part = db.partition
        assert isinstance(part, Partition)
        with w.fetch("k", 0, 100) as it:
            assert [kv.value for kv in it] == ["v0"]
        cursors = dict(part.writer_cursors)
        assert list(cursors) == [b"w.0"]
        with w.fetch("k", 0, 100) as it:
            assert [kv.value for kv in it] == ["v0"]
        assert part.writer_cursors == cursors  # the same cursor, reused
        w.put("k", "v1", 10)
        w.commit(2)  # a write transaction ends the read transaction and its cursors
        assert part.writer_cursors == {}
        with w.fetch("k", 0, 100) as it:
            assert [kv.value for kv in it] == ["v0", "v1"]
    assert part.writer_cursors == {}


def test_fork_child_forgets_the_writer_cursors(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=1000, window_size=10
        )
        w.put("k", "v0", 0)
        w.commit(1)
        with w.fetch("k", 0, 100) as it:
            assert len(list(it)) == 1
        part = db.partition
        assert isinstance(part, Partition) and part.writer_cursors
        pid = os.fork()
        if pid == 0:  # never return into pytest from the child
            os._exit(0 if not part.writer_cursors and part.writer_txn is None else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        with w.fetch("k", 0, 100) as it:  # the parent's cursor still works
            assert [kv.value for kv in it] == ["v0"]


def test_many_windows_of_one_key_stream(tmp_path: Path) -> None:
    """More windows than the one-go limit in a segment: the streaming iterator, same rows."""
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.long(), retention_period=10_000, window_size=1
        )
        n = SMALL_READ_LIMIT * 3
        for t in range(n):
            w.put("k", t, t)
        w.put("k0", -1, 5)
        for commit in (False, True):
            if commit:
                w.commit(1)
            with w.fetch("k", 0, n) as it:
                assert [(kv.key, kv.value) for kv in it] == [(t, t) for t in range(n)]
            with w.read_committed().fetch("k", 0, n) as it:
                assert len(list(it)) == (n if commit else 0)
