"""The read-committed view's window fetch read and decoded in C in one read transaction
(``SegmentedReadCommittedView.fetch_window_items``), with its registry kept by LMDB
transaction id: it must equal the writer's fetch of committed data over random workloads,
across commits, segment rolls and drops, and see every commit made after the view opened."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Serdes
from txstore.errors import StoreClosedError

pytestmark = pytest.mark.filterwarnings("error")

RETENTION, SIZE, INTERVAL = 180_000, 1_000, 90_000
ROOT = str(Path(__file__).resolve().parents[2])
KEYS = ["a", "aa", "a\x00", "ab", "b", "k" * 20]


def pairs(it: Any) -> list[tuple[int, Any]]:
    with it:
        return [(kv.key, kv.value) for kv in it]


def fast(view: Any, key: str, t0: int, t1: int) -> bool | None:
    """Which path the view's byte store takes for this fetch: True: pairs made in C, False:
    rows for the typed layer, None: the general path."""
    got = view._inner.fetch_window_items(key.encode(), t0, t1, False, None)
    return None if got is None else got[2]


@pytest.mark.parametrize("serde", ["string", "bytes"])
def test_view_fetch_equals_store_fetch_of_committed_data(tmp_path: Path, serde: str) -> None:
    rnd = random.Random(27 if serde == "string" else 28)
    vserde = Serdes.string() if serde == "string" else Serdes.bytes()

    def val(step: int) -> Any:
        return f"v{step}" if serde == "string" else b"\xff%d" % step  # bytes: not UTF-8

    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), vserde, retention_period=RETENTION, window_size=SIZE
        )
        view = w.read_committed()  # opened before anything was committed
        for key in KEYS:
            assert pairs(view.fetch(key, 0, 2**62)) == []
        offset = 0
        seen: set[int] = set()  # every segment id the writer had
        snap = view.snapshot()  # one committed state, read by the general path: the oracle
        for step in range(900):
            op = rnd.random()
            key = rnd.choice(KEYS)
            t = rnd.randrange(0, step // 6 + 5) * 4_000 + rnd.choice([0, 0, 7])  # moves on
            if op < 0.55:
                w.put(key, val(step), t)
            elif op < 0.62:
                w.put(key, None, t)
            else:
                t0 = rnd.choice([0, rnd.randrange(0, 400_000)])
                t1 = rnd.choice([t0 + rnd.randrange(0, 200_000), 2**62])
                # writes staged: the view reads the last commit, never them
                got = pairs(view.fetch(key, t0, t1))
                assert got == pairs(snap.fetch(key, t0, t1)), (key, t0, t1)
                if rnd.random() < 0.3:
                    assert pairs(view.backward_fetch(key, t0, t1)) == got[::-1]
                offset += 1
                w.commit(offset)
                seen.update(w.bytes_store.segment_ids())
                snap.close()
                snap = view.snapshot()
                # nothing staged: the writer's fetch is of committed data
                assert pairs(view.fetch(key, t0, t1)) == pairs(w.fetch(key, t0, t1)), (t0, t1)
        snap.close()
        live = w.bytes_store.segment_ids()
        assert len(seen) >= 5 and len(live) < len(seen)  # segments rolled and were dropped
        if serde == "string":
            assert fast(view, "a", 0, 2**62) is True  # the C path was the one compared
        else:
            assert fast(view, "a", 0, 2**62) is False  # not UTF-8: rows, decoded in Python
        view.close()


def test_view_sees_segments_committed_after_its_registry_was_kept(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=RETENTION, window_size=SIZE
        )
        view = w.read_committed()
        w.put("k", "v0", 0)
        w.commit(1)
        assert pairs(view.fetch("k", 0, 2**62)) == [(0, "v0")]
        assert fast(view, "k", 0, 2**62) is True
        # a new segment in the span of the kept plan: the fetch reads the registry again in
        # its transaction and runs again with the new segment's database named
        w.put("k", "v1", INTERVAL + 5)
        w.put("k", "staged", 7)  # uncommitted: never seen
        assert pairs(view.fetch("k", 0, 2**62)) == [(0, "v0")]
        w.commit(2)
        assert pairs(view.fetch("k", 0, 2**62)) == [(0, "v0"), (7, "staged"), (INTERVAL + 5, "v1")]
        # the first segment dropped by a commit: gone from the view at once
        w.put("k", "v2", 3 * INTERVAL)
        w.commit(3)
        assert pairs(view.fetch("k", 0, 2**62)) == [(INTERVAL + 5, "v1"), (3 * INTERVAL, "v2")]
        assert pairs(w.fetch("k", 0, 2**62)) == pairs(view.fetch("k", 0, 2**62))


def test_view_fetch_iterator_ends_when_its_segment_drop_commits(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=RETENTION, window_size=SIZE
        )
        view = w.read_committed()
        w.put("k", "v0", 0)
        w.put("k", "v1", 10)
        w.commit(1)
        it = view.fetch("k", 0, 100)
        assert next(it).value == "v0"
        w.put("k", "late", 3 * INTERVAL)  # rolls segment 0 out of the retention
        w.commit(2)
        assert list(it) == []  # the rest of a dropped segment is not returned
        it.close()
        view.close()


def test_view_fetch_of_a_closed_store_raises(tmp_path: Path) -> None:
    db = txstore.open(tmp_path / "p")
    w = db.window_store("w", Serdes.string(), Serdes.string(), retention_period=RETENTION,
                        window_size=SIZE)  # fmt: skip
    w.put("k", "v0", 0)
    w.commit(1)
    view = w.read_committed()
    assert pairs(view.fetch("k", 0, 10)) == [(0, "v0")]
    db.close()
    with pytest.raises(StoreClosedError):
        view.fetch("k", 0, 10)
    view.close()


WRITER = """
import sys, txstore
from txstore import Serdes
db = txstore.open(sys.argv[1])
w = db.window_store(
    "w", Serdes.string(), Serdes.string(), retention_period=int(sys.argv[2]),
    window_size=int(sys.argv[3]),
)
for step, line in enumerate(sys.stdin):
    w.put("k", f"v{step}", int(line))
    w.commit(step + 1)
    print("OK", flush=True)
db.close()
"""


def test_view_in_another_process_sees_each_commit(tmp_path: Path) -> None:
    path = tmp_path / "p"
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [sys.executable, "-W", "error", "-c", WRITER, str(path), str(RETENTION), str(SIZE)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None

    def commit(t: int) -> None:
        proc.stdin.write(f"{t}\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert proc.stdout.readline() == "OK\n"  # type: ignore[union-attr]

    try:
        commit(0)
        with txstore.open(path, readonly=True) as db:
            w = db.window_store(
                "w", Serdes.string(), Serdes.string(), retention_period=RETENTION, window_size=SIZE
            )
            view = w.read_committed()
            assert pairs(view.fetch("k", 0, 2**62)) == [(0, "v0")]
            assert fast(view, "k", 0, 2**62) is True
            commit(5)  # the same segment: a new transaction id, the same plan
            assert pairs(view.fetch("k", 0, 2**62)) == [(0, "v0"), (5, "v1")]
            commit(INTERVAL + 1)  # a new segment, committed by the other process
            assert pairs(view.fetch("k", 0, 2**62))[-1] == (INTERVAL + 1, "v2")
            commit(3 * INTERVAL)  # segment 0 dropped by the other process
            assert pairs(view.fetch("k", 0, 2**62)) == [(INTERVAL + 1, "v2"), (3 * INTERVAL, "v3")]
            view.close()
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()
