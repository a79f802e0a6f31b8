"""The killed driver: a real Structured Streaming query in a child process (driver and JVM in
one process group; PySpark's worker daemon, in its own, ends the Python workers when the JVM is
gone, and a worker that still holds a Task lets go when asked) is SIGKILLed mid-stream,
restarted from its checkpoint, and its state and outputs must be exact. The first attempt of
the tasks of one micro-batch fails after writing the stores, so Spark's own task retry is
covered too."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from .common import counting_step, expected, rows, state

ROOT = Path(__file__).resolve().parents[3]
FILES = 6


def child(root: Path) -> subprocess.Popen[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.pipeline._query_child", str(root)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the JVM dies with it
    )


def commits(root: Path) -> int:
    d = root / "checkpoint" / "commits"
    return sum(1 for f in d.iterdir() if f.name.isdigit()) if d.is_dir() else 0


def test_a_driver_killed_mid_stream_restarts_from_its_checkpoint_exactly(tmp_path: Path) -> None:
    (tmp_path / "input").mkdir()
    batches = [rows(150 + 10 * i, users=13 + i) for i in range(FILES)]
    for i, data in enumerate(batches):
        with open(tmp_path / "input" / f"part-{i:03d}.json", "w", encoding="utf-8") as f:
            for user, v in data:
                f.write(json.dumps({"user": user, "v": v, "sleep_ms": 250, "fail_once": i == 1}))
                f.write("\n")
    proc = child(tmp_path)
    deadline = time.monotonic() + 240
    while commits(tmp_path) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.5))  # somewhere inside the next micro-batch
    killed_at = commits(tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    assert 2 <= killed_at < FILES, f"killed after {killed_at} of {FILES} micro-batches"
    proc = child(tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "done" in out, err[-3000:]
    step = counting_step(tmp_path)
    counts, positions = state(step)
    assert counts == expected(*batches)  # 0 lost, 0 counted twice
    # Every partition is at the last micro-batch + 1 (after a restart, Spark may put two
    # files in one micro-batch: count the committed micro-batches, not the files).
    assert set(positions.values()) == {commits(tmp_path)}
    # Outputs: every user's running counts 1..n exactly once, across all batch files.
    emitted: dict[str, list[int]] = {}
    for path in sorted((tmp_path / "out").rglob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            emitted.setdefault(row["user"], []).append(row["count"])
    assert {u: sorted(c) for u, c in emitted.items()} == {
        u: list(range(1, n + 1)) for u, n in counts.items()
    }
    summaries = [json.loads(x) for x in (tmp_path / "summaries.jsonl").read_text().splitlines()]
    assert any(r["attempt"] == 1 for r in summaries)  # Spark retried the failed tasks
