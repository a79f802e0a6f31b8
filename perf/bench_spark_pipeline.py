"""Benchmark: a Structured Streaming job whose state is txstore, against Spark's own state.

The job: per-key running count and a one-minute tumbling window count per key, over ``--records``
input records (``--keys`` keys, timestamps increasing) in micro-batches of ``--batch`` records
(one Parquet file per micro-batch, read with ``maxFilesPerTrigger=1`` and ``availableNow``),
on ``local[2]`` with 2 state partitions. Side by side, in one Spark session:

* ``txstore``: :class:`txstore.spark.streaming.StatefulStep` with a key-value store (counts)
  and a window store (window counts); the processor aggregates each partition's batch with
  pyarrow and does one read-modify-write per key and per (key, window);
* ``spark``: ``groupBy(key).applyInPandasWithState`` on the RocksDB state store provider,
  keeping the count and the current window's count per key (less than txstore keeps: every
  window of the retention), output to the ``noop`` sink.

Then the txstore job runs in a child process that is SIGKILLed (process group: driver, JVM,
workers) after two committed micro-batches and restarted from its checkpoint; the restart time
is measured from the kill to the first micro-batch the restarted job commits, and every key's
count and window counts are compared with a plain-Python reference.

Run ``python perf/bench_spark_pipeline.py [--quick]`` (``--quick``: 200k records in batches of
50k, 2,000 keys; full: 1M in batches of 100k, 10,000 keys). The output ends with lines
``figure: <name> = <value> <unit>`` for ``pipeline_records_per_s``,
``pipeline_vs_spark_state`` (Spark's time / txstore's; goal >= 1), ``pipeline_restart_seconds``
and ``pipeline_exactness_errors`` (goal 0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Timing
from _record import Record, add_json_argument

from txstore.spark.export import local_session
from txstore.spark.streaming import PartitionContext, StatefulStep
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes

WINDOW_MS = 60_000
RETENTION_MS = 7 * 24 * 3600 * 1000
START_MS = 1_793_491_200_000
PARTITIONS = 2
SCHEMA = "key string, ts long"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# ---- the input and its reference ------------------------------------------------------------


def write_input(root: Path, records: int, batch: int, keys: int) -> None:
    """``records`` records in Parquet files of ``batch`` records; 20 ms apart in time."""
    (root / "input").mkdir(parents=True)
    base = time.time() - records // batch - 1
    for i, start in enumerate(range(0, records, batch)):
        n = min(batch, records - start)
        idx = pa.array(range(start, start + n), type=pa.int64())
        table = pa.table(
            {
                "key": _mod_keys(idx, keys),
                "ts": pc.add(pc.multiply(idx, 20), START_MS),
            }
        )
        path = root / "input" / f"batch-{i:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + i, base + i))


def _mod_keys(idx: pa.Array, keys: int) -> pa.Array:
    spread = pc.bit_wise_and(pc.multiply(idx, 2_654_435_761), 0xFFFFFFFF)
    return pc.binary_join_element_wise(
        "key-", pc.cast(pc.divide(spread, max(1, 2**32 // keys)), pa.string()), ""
    )


def reference(root: Path) -> tuple[Counter[str], Counter[tuple[str, int]]]:
    counts: Counter[str] = Counter()
    windows: Counter[tuple[str, int]] = Counter()
    for path in sorted((root / "input").iterdir()):
        t = pq.read_table(path)
        keys, stamps = t.column("key").to_pylist(), t.column("ts").to_pylist()
        counts.update(keys)
        windows.update(zip(keys, (s // WINDOW_MS * WINDOW_MS for s in stamps), strict=True))
    return counts, windows


# ---- txstore ---------------------------------------------------------------------------------


def stores() -> list[Any]:
    return [
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        ),
        Stores.window_store_builder(
            Stores.persistent_window_store("windows", RETENTION_MS, WINDOW_MS, False),
            Serdes.string(),
            Serdes.long(),
        ),
    ]


def count_and_window(ctx: PartitionContext, records: pa.Table) -> None:
    """Aggregate the partition's batch with pyarrow, then one read-modify-write per key and
    per (key, window)."""
    counts, windows = ctx.store("counts"), ctx.store("windows")
    per_key = records.group_by("key").aggregate([("key", "count")])
    keys, ns = per_key.column("key").to_pylist(), per_key.column("key_count").to_pylist()
    for key, n in zip(keys, ns, strict=True):
        counts.put(key, (counts.get(key) or 0) + n)
    start = pc.multiply(pc.divide(records.column("ts"), WINDOW_MS), WINDOW_MS)
    per_window = (
        pa.table({"key": records.column("key"), "w": start})
        .group_by(["key", "w"])
        .aggregate([("key", "count")])
    )
    cols = [per_window.column(c).to_pylist() for c in ("key", "w", "key_count")]
    for key, w, n in zip(*cols, strict=True):
        windows.put(key, (windows.fetch(key, w) or 0) + n, w)


def txstore_step(root: Path) -> StatefulStep:
    return StatefulStep(
        state_dir=str(root / "state"),
        num_partitions=PARTITIONS,
        key="key",
        processor=count_and_window,
        stores=stores,
    )


def run_txstore(spark: Any, root: Path, on_batch: Any = None) -> float:
    step = txstore_step(root)

    def apply(df: Any, batch_id: int) -> None:
        step.foreach_batch(df, batch_id)
        if on_batch is not None:
            on_batch(batch_id)

    t0 = time.perf_counter()
    source = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
    query = (
        source.parquet(str(root / "input"))
        .writeStream.foreachBatch(apply)
        .option("checkpointLocation", str(root / "checkpoint-txstore"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    step.release()
    return seconds


# ---- Spark's own state ----------------------------------------------------------------------


def spark_state_func(key: tuple[str], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd  # type: ignore[import-untyped]

    total, wstart, wcount = state.get if state.exists else (0, -1, 0)
    for pdf in pdfs:
        total += len(pdf)
        for w, n in (
            (pdf["ts"] // WINDOW_MS * WINDOW_MS).value_counts(sort=False).sort_index().items()
        ):
            if w == wstart:
                wcount += int(n)
            else:
                wstart, wcount = int(w), int(n)
    state.update((total, wstart, wcount))
    yield pd.DataFrame({"key": [key[0]], "total": [total], "window": [wstart], "wcount": [wcount]})


def run_spark_state(spark: Any, root: Path) -> float:
    from pyspark.sql.streaming.state import GroupStateTimeout

    t0 = time.perf_counter()
    source = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
    query = (
        source.parquet(str(root / "input"))
        .groupBy("key")
        .applyInPandasWithState(
            spark_state_func,
            "key string, total long, window long, wcount long",
            "total long, window long, wcount long",
            "update",
            GroupStateTimeout.NoTimeout,
        )
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(root / "checkpoint-spark"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - t0


def session() -> Any:
    spark = local_session("local[2]", "txstore-bench-pipeline", jvm_stderr=os.devnull)
    spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    return spark


# ---- the killed driver -----------------------------------------------------------------------


def child(root: Path) -> None:
    """The txstore job alone (run as ``--child ROOT``): prints ``batch <id> <time>`` per
    committed micro-batch."""
    spark = session()

    def told(batch_id: int) -> None:
        print(f"batch {batch_id} {time.time():.3f}", flush=True)

    run_txstore(spark, root, told)
    spark.stop()


def kill_and_restart(root: Path) -> float:
    """SIGKILL the job after two committed micro-batches, restart it; the seconds from the
    kill to the restarted job's first committed micro-batch."""
    cmd = [sys.executable, __file__, "--child", str(root)]

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip

    proc = start()
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("batch ")
        if seen >= 2:
            break
    killed = time.time()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    proc = start()
    first = float("nan")
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("batch ") and first != first:
            first = float(line.split()[2]) - killed
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(err[-3000:])
    return first


def exactness_errors(root: Path) -> int:
    counts, windows = reference(root)
    step = txstore_step(root)
    got: Counter[str] = Counter()
    got_windows: Counter[tuple[str, int]] = Counter()
    for p in range(PARTITIONS):
        with step.open_task(p) as task:
            with task.store("counts").all() as it:
                got.update({kv.key: kv.value for kv in it})
            with task.store("windows").all() as it:
                got_windows.update({(kv.key.key, kv.key.window.start): kv.value for kv in it})
    bad = {k for k in counts.keys() | got.keys() if counts[k] != got[k]}
    both = windows.keys() | got_windows.keys()
    bad |= {key for key, w in both if windows[(key, w)] != got_windows[(key, w)]}
    return len(bad)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200k records (a few minutes)")
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--keys", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_json_argument(parser, "spark_pipeline")
    args = parser.parse_args(argv)
    if args.child:
        child(Path(args.child))
        return 0
    records = args.records or (200_000 if args.quick else 1_000_000)
    batch = args.batch or (50_000 if args.quick else 100_000)
    keys = args.keys or (2_000 if args.quick else 10_000)
    record = Record(
        "spark_pipeline",
        quick=args.quick,
        workload={"records": records, "batch": batch, "keys": keys, "partitions": PARTITIONS},
        argv=argv,
    )
    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        write_input(work / "run", records, batch, keys)
        spark = session()
        print(f"{records:,} records in batches of {batch:,}, {keys:,} keys, local[2]")
        t_tx = run_txstore(spark, work / "run")
        print(f"  txstore StatefulStep                      {t_tx:7.1f} s")
        t_sp = run_spark_state(spark, work / "run")
        print(f"  Spark applyInPandasWithState (RocksDB)    {t_sp:7.1f} s")
        spark.stop()
        shutil.copytree(work / "run" / "input", work / "kill" / "input")
        restart = kill_and_restart(work / "kill")
        errors = exactness_errors(work / "kill")
        print(f"  SIGKILL to first batch after the restart  {restart:7.1f} s")
        print(f"  keys differing from the reference         {errors:7d}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record.add_timings(
        "job",
        {"txstore": Timing.of([t_tx * 1e9]), "spark state": Timing.of([t_sp * 1e9])},
        per="job",
    )
    record.figure(
        "pipeline_records_per_s", records / t_tx, "records/s", digits=0, based_on=["job/txstore"]
    )
    record.figure(
        "pipeline_vs_spark_state",
        t_sp / t_tx,
        "x",
        based_on=["job/txstore", "job/spark state"],
    )
    record.figure("pipeline_restart_seconds", restart, "s", digits=1)
    record.figure("pipeline_exactness_errors", errors, "keys", digits=0)
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
