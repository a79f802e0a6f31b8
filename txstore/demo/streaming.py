"""The demo's pipeline as a Spark Structured Streaming job (what ``make demo`` runs).

The page views are written as JSON files, one per micro-batch, in event-time order (a file
source stands in for a Kafka topic). The job reads one file per micro-batch and hands it to a
:class:`~txstore.spark.streaming.StatefulStep` that routes every view to its user's partition
(Kafka's default partitioner) and applies it to the three stores of
:mod:`txstore.demo.pipeline` in that partition's Task, committing with the micro-batch id. Each
view's running count per user is emitted to Parquet files, once per micro-batch and partition.

The job runs in a child process (``python -m txstore.demo.child stream OUT PARTITIONS``) so that
the demo can SIGKILL it, driver and JVM together, and restart it from its checkpoint. A
stream-stream join, or any other step, can be added as one more processor over the same input.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from txstore.demo import analytics as an
from txstore.demo import pipeline as pl
from txstore.spark.export import local_session
from txstore.types import ValueTimestampHeaders

if TYPE_CHECKING:
    from txstore.spark.streaming import PartitionContext, StatefulStep

__all__ = ["SparkRun", "batch_files", "demo_step", "run_query", "write_batches"]

SCHEMA = "user string, page string, ts long, source string"


def process_views(ctx: PartitionContext, records: Any) -> None:
    """The step's processor: every view of the batch (sorted by time) applied to the three
    stores, as :func:`txstore.demo.pipeline.process`; emits each view's running user total.
    ``$DEMO_PACE_MS`` sleeps per partition and batch (the demo's way to make a run last)."""
    totals = ctx.store("user-totals")
    out: list[dict[str, Any]] = []
    columns = [records.column(c).to_pylist() for c in ("user", "page", "ts", "source")]
    for user, page, ts, source in zip(*columns, strict=True):
        pl.process(ctx.task, pl.Event(user, page, ts, source))
        total: ValueTimestampHeaders[int] = totals.get(user)
        out.append({"user": user, "ts": ts, "views": total.value})
    ctx.emit(out)
    pace = float(os.environ.get("DEMO_PACE_MS", "0"))
    if pace:
        time.sleep(pace / 1000)


def demo_step(out: Path, partitions: int) -> StatefulStep:
    """The demo's stateful step over ``out/state`` (outputs in ``out/output``). Imports PySpark's
    side of txstore on first use: the demo without Spark (``--no-spark``) does not need it."""
    import pyarrow as pa  # type: ignore[import-untyped]

    from txstore.spark.streaming import StatefulStep

    return StatefulStep(
        state_dir=str(out / "state"),
        num_partitions=partitions,
        key="user",
        processor=process_views,
        stores=pl.builders,
        output_dir=str(out / "output"),
        output_schema=pa.schema([("user", pa.string()), ("ts", pa.int64()), ("views", pa.int64())]),
        order_by=("ts",),
        overlay_budget_bytes=8 * 2**20,
    )


def batch_files(events: int) -> int:
    """How many micro-batches (input files) the demo splits ``events`` page views into."""
    return max(6, min(12, events // 5_000))


def write_batches(events: list[pl.Event], input_dir: Path, files: int) -> list[list[pl.Event]]:
    """Write ``events`` (in time order) as ``files`` JSON files with increasing modification
    times (the order the file source reads them in); the events of each file."""
    input_dir.mkdir(parents=True, exist_ok=True)
    size = -(-len(events) // files)
    chunks = [events[i : i + size] for i in range(0, len(events), size)]
    base = time.time() - len(chunks)
    for i, chunk in enumerate(chunks):
        path = input_dir / f"views-{i:04d}.json"
        with open(path, "w", encoding="utf-8") as f:
            for e in chunk:
                f.write(json.dumps(e.__dict__) + "\n")
        os.utime(path, (base + i, base + i))
    return chunks


def run_query(out: Path, partitions: int) -> None:
    """The streaming job (the child process): read ``out/input`` one file per micro-batch
    until it is consumed (``availableNow``), checkpointing in ``out/checkpoint``; prints one
    JSON line per micro-batch, then ``done``. Then, with the same Spark session (one JVM start
    less), it waits for one line ``SNAPSHOT_DIR RESULT_JSON`` on stdin and runs the demo's Spark
    analytics (:func:`txstore.demo.analytics.spark_analytics`); an empty line ends it."""
    spark = local_session("local[2]", "txstore-demo-stream", jvm_stderr=str(out / "jvm.log"))
    step = demo_step(out, partitions)

    def apply(df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        step.foreach_batch(df, batch_id)
        rows = step.last_batch
        line = {
            "event": "batch",
            "batch_id": batch_id,
            "records": sum(r["records"] for r in rows),
            "skipped": sum(1 for r in rows if r["skipped"]),
            "seconds": round(time.perf_counter() - started, 3),
        }
        print(json.dumps(line), flush=True)

    views = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(out / "input"))
    query = (
        views.writeStream.foreachBatch(apply)
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        step.release()
    print(json.dumps({"event": "done"}), flush=True)
    request = sys.stdin.readline().split()
    if len(request) == 2:
        result = an.spark_analytics(Path(request[0]))  # stops the session
        Path(request[1]).write_text(json.dumps(result))
    else:
        spark.stop()


def committed_batches(out: Path) -> int:
    """How many micro-batches the job's checkpoint says are committed."""
    d = out / "checkpoint" / "commits"
    return sum(1 for f in d.iterdir() if f.name.isdigit()) if d.is_dir() else 0


def emitted_totals(out: Path) -> dict[str, list[int]]:
    """Every running total the job emitted, per user (sorted): exactly ``1..n`` when every
    view's output was written once."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    found: dict[str, list[int]] = {}
    for path in sorted((out / "output").rglob("*.parquet")):
        table = pq.read_table(path, columns=["user", "views"])
        for user, views in zip(
            *(table.column(c).to_pylist() for c in ("user", "views")), strict=True
        ):
            found.setdefault(user, []).append(views)
    return {u: sorted(v) for u, v in found.items()}


class SparkRun:
    """The demo's steps 3 and 4 on Spark: run the job in a child process, SIGKILL it (its whole
    process group: driver and JVM; PySpark's worker daemon, in a group of its own, ends its
    Python workers when the JVM is gone) mid-stream, restart it from its checkpoint.
    ``say``/``check``/``bar`` are the demo's output helpers."""

    def __init__(self, out: Path, partitions: int, env: dict[str, str], ui: Any) -> None:
        self.out = out
        self.partitions = partitions
        self.env = env
        self.ui = ui

    def start(self) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "txstore.demo.child", "stream", str(self.out)]
        return subprocess.Popen(
            [*cmd, str(self.partitions)],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def crash(self, files: int) -> int:
        """Run the job until a third of the micro-batches are committed, then SIGKILL it inside
        the next one; the number of committed micro-batches when it died."""
        proc = self.start()
        kill_at = max(1, files // 3)
        while proc.poll() is None:
            done = committed_batches(self.out)
            self.ui.bar("micro-batches", min(done, files), files)
            if done >= kill_at:
                time.sleep(random.Random(done).uniform(0.05, 0.3))  # into the next batch
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        _, err = proc.communicate()
        print(flush=True)
        killed_at = committed_batches(self.out)
        ok = proc.returncode == -signal.SIGKILL and killed_at < files
        self.ui.check(
            ok,
            f"Spark job SIGKILLed mid-stream (driver and JVM; their Python workers end with "
            f"them), after "
            f"{killed_at} of {files} micro-batches"
            + ("" if proc.returncode == -signal.SIGKILL else f": it ended first: {err[-500:]}"),
        )
        return killed_at

    def restart(
        self, on_batch: Callable[[dict[str, Any]], None]
    ) -> tuple[float, list[dict[str, Any]]]:
        """Restart the job from its checkpoint and let it finish; the seconds from the restart
        to its first committed micro-batch, and its batch lines (``on_batch`` gets each one).
        The child stays, for :meth:`analytics`."""
        t0 = time.perf_counter()
        self.proc = proc = self.start()
        first = float("nan")
        lines: list[dict[str, Any]] = []
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not raw.startswith("{"):
                continue
            line = json.loads(raw)
            if line["event"] == "done":
                break
            if line["event"] == "batch":
                if not lines:
                    first = time.perf_counter() - t0
                lines.append(line)
                self.ui.say(
                    f"micro-batch {line['batch_id']}: {line['records']:,} views"
                    + (
                        f", {line['skipped']} partition(s) already applied: skipped"
                        if line["skipped"]
                        else ""
                    )
                )
                on_batch(line)
        ok = proc.poll() is None
        self.ui.check(
            ok,
            "restarted from the checkpoint and finished"
            + ("" if ok else f": {proc.communicate()[1][-800:]}"),
        )
        return first, lines

    def analytics(self, snapshot: Path) -> dict[str, Any]:
        """The demo's Spark analytics of ``snapshot``, run by the restarted job's child (its
        Spark session is up already)."""
        result = self.out / "spark-result.json"
        _, err = self.proc.communicate(f"{snapshot} {result}\n", timeout=900)
        if self.proc.returncode != 0:
            raise RuntimeError(f"Spark analytics failed:\n{err[-3000:]}")
        found: dict[str, Any] = json.loads(result.read_text())
        return found

    def stop(self) -> None:
        """End the child if it still waits (the demo failed before its analytics)."""
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.communicate("\n", timeout=120)
