"""Crash and recover with buffered segment drops: a real child process SIGKILLed while it holds
a staged segment drop, a staged segment creation and spilled uncommitted writes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import txstore
from tests import _engine_child, _window_child
from txstore import Serdes


def test_sigkill_with_staged_segment_drops(tmp_path: Path) -> None:
    path = tmp_path / "p"
    proc = _window_child.spawn("hold-drops", path)
    try:
        _engine_child.wait_line(proc, "READY")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == -signal.SIGKILL
    with txstore.open(path) as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=120_000, window_size=1
        )
        assert w.recover(7) is True and w.recover(8) is False
        assert not (path / "spill").exists()
        assert w.bytes_store.segment_ids() == [0, 1]  # the staged drop never happened
        names = {n for n in db.partition._db_names() if n.startswith(b"w.")}
        assert names == {b"w.0", b"w.60000"}
        n = _window_child.N
        with w.all() as it:
            rows = [(kv.key.key, kv.key.window.start, kv.value) for kv in it]
        expected = [(f"k{i:04d}", 1_000, "seg0") for i in range(n)]
        expected += [(f"k{i:04d}", 61_000, "seg1") for i in range(n)]
        assert rows == expected
        assert w.fetch("late", 180_000) is None
        w.put("after", "crash", 180_000)  # usable again: now the drop happens, and commits
        w.commit(8)
        assert {n for n in db.partition._db_names() if n.startswith(b"w.")} == {
            b"w.60000",
            b"w.180000",
        }
