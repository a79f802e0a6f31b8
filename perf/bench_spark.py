"""Spark benchmark: a txstore store read through the data source vs the same rows from Parquet.

Workload (issue 8): ``N`` = 1,000,000 rows in one key-value store (``string`` keys
``user-00000042``, ``long`` values), spread over ``--partitions`` partitions (default 4) of a
state directory. The same rows are written once as Parquet by Spark itself (from the data
source, untimed). Then, in one local Spark session (``local[2]`` by default, loopback, no UI),
interleaved rounds in a rotating order, each variant runs the same query from scratch::

    spark.read.<source>.load(path).agg(count("*"), sum("value"), sum(length("key"))).collect()

* ``txstore live``: ``format("txstore")`` over the live state directory (plan-time cut, each
  task verifies its partition's LMDB transaction and reads it in one read transaction);
* ``txstore snapshot``: the same over a snapshot directory (``txstore snapshot``), what a
  cluster reads;
* ``parquet``: ``spark.read.parquet`` over the Parquet copy (vectorized reader, column
  pruning: the baseline a data engineer would compare with).

Each query's wall time includes planning (a Python planner worker for the data source, file
listing and footers for Parquet), the scan and the aggregation. The three results are checked
equal. For context, the executor-side Python cost is timed without Spark too (the ``read_task``
generator of every partition in this process: LMDB scan, decoding, Arrow batches).

Run ``python perf/bench_spark.py [--quick] [--json PATH]`` (``--quick``: 3 rounds, under two
minutes; full: 7 rounds). The output ends with ``figure: spark_read_vs_parquet = <x> x`` (median
``txstore live`` time / median ``parquet`` time; goal <= 1) and ``figure: spark_rows_per_s =
<n> rows/s`` (``N`` / median ``txstore live`` time). The JSON record (``_record.py``; default
``perf/out/spark.json``) holds them, every round's query time and the environment.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import Timing, fmt_ratio, table
from _record import Record, add_json_argument

ROOT = Path(__file__).resolve().parent.parent
STORE = "counts"


def build_state(root: Path, rows: int, partitions: int) -> float:
    """Write ``rows`` rows round-robin into ``partitions`` partitions; returns seconds."""
    import txstore
    from txstore import Serdes

    t0 = time.perf_counter()
    for p in range(partitions):
        with txstore.open(root / str(p), map_size=1 << 30) as db:
            kv = db.key_value_store(STORE, Serdes.string(), Serdes.long())
            kv.put_all((f"user-{i:08d}", i) for i in range(p, rows, partitions))
            db.commit({STORE: rows})
    return time.perf_counter() - t0


def start_spark(cores: int) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("txstore-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(cores))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import txstore.spark

    txstore.spark.register(spark)
    return spark


def python_read_seconds(state: Path) -> tuple[float, int]:
    """Executor-side work without Spark: every partition's ``read_task``, in this process."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from txstore.spark.options import parse_options
    from txstore.spark.plan import plan, resolve
    from txstore.spark.reader import read_task
    from txstore.spark.schema import layout

    opts = parse_options({"path": str(state), "store": STORE})
    _, spec = resolve(opts)
    lay = layout(spec, opts)
    schema = to_arrow_schema(lay.schema, timezone="UTC")
    t0 = time.perf_counter()
    _, tasks = plan(opts, spec)
    n = sum(b.num_rows for t in tasks for b in read_task(t, lay, schema, opts.batch_size))
    return time.perf_counter() - t0, n


# -- issue 22: window stores, key lookups, live reads next to a committing Task ------------------

WINDOW_STORE = "clicks"
WINDOW_MS = 60_000

_LIVE_WRITER = """
import sys, time
from txstore import Serdes, Stores
from txstore.runtime.task import Task
path, seconds, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
with Task(path) as task:
    store = task.key_value_store(Stores.key_value_store_builder(
        Stores.persistent_key_value_store("live"), Serdes.string(), Serdes.long()))
    task.initialize()
    store.put_all((f"k{i:06d}", 0) for i in range(20_000))
    task.commit(input_position=0)
    print("READY", flush=True)
    end, c = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        c += 1
        store.put_all((f"k{(c * 97 + i) % 20_000:06d}", c) for i in range(200))
        task.commit(input_position=c)
        time.sleep(max(0.0, c / rate - (time.monotonic() - end + seconds)))
    print("COMMITS", c, flush=True)
"""


def build_window_state(root: Path, rows: int, partitions: int) -> float:
    """``rows`` window-store records (HEADERS format) over ``partitions``; returns seconds."""
    import txstore
    from txstore import Headers, Serdes, ValueFormat, ValueTimestampHeaders

    t0 = time.perf_counter()
    headers = Headers([("source", b"web")])
    keys = max(1, rows // 16)
    for p in range(partitions):
        with txstore.open(root / str(p), map_size=1 << 31) as db:
            w = db.window_store(
                WINDOW_STORE,
                Serdes.string(),
                Serdes.long(),
                retention_period=1 << 40,
                window_size=WINDOW_MS,
                format=ValueFormat.HEADERS,
            )
            for i in range(p, rows, partitions):
                start = (i // keys) * WINDOW_MS
                w.put(f"page-{i % keys:07d}", ValueTimestampHeaders(i, start, headers), start)
            db.commit({WINDOW_STORE: rows})
    return time.perf_counter() - t0


def median_seconds(run: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    results, times = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        results.append(run())
        times.append(time.perf_counter() - t)
    assert all(r == results[0] for r in results), results
    return statistics.median(times), results[0]


def window_and_lookup(spark: Any, work: Path, state: Path, pq: Path, args: Any) -> dict[str, float]:
    """The window-store read and the key lookup, each against its Parquet copy."""
    from pyspark.sql import functions as F

    rounds = 3 if args.quick else 7
    out: dict[str, float] = {}
    wstate, wpq = work / "wstate", work / "wparquet"
    wrows = args.rows // 4 if args.quick else args.rows
    print(f"window store load ({wrows:,} rows): {build_window_state(wstate, wrows, 4):.1f} s")
    spark.read.format("txstore").load(str(wstate)).write.parquet(str(wpq))

    def wquery(df: Any) -> Any:
        agg = df.agg(F.count("*"), F.sum("value"), F.max("window.start"), F.sum(F.size("headers")))
        return tuple(agg.collect()[0])

    tx, r1 = median_seconds(lambda: wquery(spark.read.format("txstore").load(str(wstate))), rounds)
    pq_s, r2 = median_seconds(lambda: wquery(spark.read.parquet(str(wpq))), rounds)
    assert r1 == r2 and r1[0] == wrows, (r1, r2)
    print(f"window store read: txstore {tx:.3f} s, parquet {pq_s:.3f} s ({tx / pq_s:.2f}x)")
    out["spark_read_window_vs_parquet"] = tx / pq_s
    key = f"user-{args.rows // 2 + 7:08d}"

    def lookup(df: Any) -> Any:
        return [tuple(r) for r in df.where(F.col("key") == key).select("key", "value").collect()]

    tx, r1 = median_seconds(lambda: lookup(spark.read.format("txstore").load(str(state))), rounds)
    pq_s, r2 = median_seconds(lambda: lookup(spark.read.parquet(str(pq))), rounds)
    assert r1 == r2 and len(r1) == 1, (r1, r2)
    print(f"key lookup: txstore {tx:.3f} s, parquet {pq_s:.3f} s ({tx / pq_s:.2f}x)")
    out["spark_key_lookup_vs_parquet"] = tx / pq_s
    return out


def live_read_refusals(spark: Any, work: Path, seconds: float) -> tuple[int, int, int]:
    """Reads while a Task in another process commits 10 times a second: (refused, reads,
    commits). Each read must see every key at one commit per partition."""
    import subprocess

    path = work / "live" / "0"
    path.parent.mkdir(parents=True)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", _LIVE_WRITER, str(path), str(seconds), "10"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    refused = reads = 0
    try:
        while proc.poll() is None:
            try:
                n = spark.read.format("txstore").option("store", "live").load(str(path)).count()
                assert n == 20_000, n
            except Exception as exc:  # a refusal: counted, and its class named
                refused += 1
                print("refused:", str(exc).strip().splitlines()[-1][:200])
            reads += 1
        tail = proc.communicate()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    commits = int(tail.split()[-1]) if "COMMITS" in tail else -1
    return refused, reads, commits


# -- writing and the change feed (issue 22: spark-write) ----------------------------------------


def write_and_change_feed(
    spark: Any, work: Path, rows: int, partitions: int, rounds: int
) -> dict[str, list[float]]:
    """``df.write.format("txstore")`` against ``df.write.parquet`` for the same ``rows`` rows
    (generated by Spark from ``range``: the same plan for both), each round into a fresh
    directory, interleaved; then the change feed of the last store written, read as a batch
    (``readChangeFeed``) and aggregated. Returns seconds per variant."""
    from pyspark.sql import functions as F

    def frame() -> Any:
        return spark.range(rows, numPartitions=2).select(
            F.format_string("user-%08d", "id").alias("key"), F.col("id").alias("value")
        )

    def txstore_write(dest: Path) -> None:
        frame().write.format("txstore").mode("append").option("store", STORE).option(
            "numPartitions", str(partitions)
        ).save(str(dest))

    def parquet_write(dest: Path) -> None:
        frame().write.mode("overwrite").parquet(str(dest))

    variants = {"txstore write": txstore_write, "parquet write": parquet_write}
    samples: dict[str, list[float]] = {name: [] for name in [*variants, "change feed read"]}
    for name, fn in variants.items():  # warm-up (untimed)
        fn(work / f"w-warm-{name.split()[0]}")
    last = work / "w-warm-txstore"
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            dest = work / f"w-{r}-{name.split()[0]}"
            t = time.perf_counter()
            variants[name](dest)
            samples[name].append(time.perf_counter() - t)
            if name == "txstore write":
                last = dest
    written = spark.read.format("txstore").option("store", STORE).load(str(last))
    assert written.count() == rows
    for _ in range(rounds):
        t = time.perf_counter()
        feed = (
            spark.read.format("txstore")
            .option("readChangeFeed", "true")
            .option("store", STORE)
            .load(str(last))
        )
        got = feed.agg(F.count("*"), F.sum("value")).collect()[0]
        samples["change feed read"].append(time.perf_counter() - t)
        assert tuple(got) == (rows, rows * (rows - 1) // 2), got
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 rounds (under two minutes)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N] (default 2)")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds (override)")
    parser.add_argument(
        "--write-rows",
        type=int,
        default=0,
        help="rows of the write benchmark (default: --rows; --quick: a fifth)",
    )
    add_json_argument(parser, "spark")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    record = Record(
        "spark",
        quick=args.quick,
        workload={
            "rows": args.rows,
            "partitions": args.partitions,
            "spark_cores": args.cores,
            "rounds": rounds,
        },
        argv=argv,
    )
    started = time.perf_counter()
    print(
        f"txstore Spark benchmark ({'quick' if args.quick else 'full'}): Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{args.rows:,} rows in {args.partitions} partitions, local[{args.cores}], "
        f"{rounds} interleaved rounds"
    )
    work = Path(tempfile.mkdtemp(prefix="txstore-bench-spark-"))
    try:
        state, snap, pq = work / "state", work / "snap", work / "parquet"
        print(f"load: {build_state(state, args.rows, args.partitions):.1f} s")
        from txstore.runtime.snapshot import snapshot_state_dir

        t0 = time.perf_counter()
        snapshot_state_dir(state, snap)
        print(f"snapshot: {time.perf_counter() - t0:.2f} s")
        py_runs = [python_read_seconds(state) for _ in range(2)]
        py_s, py_n = min(py_runs)
        assert py_n == args.rows
        record.add_timings(
            "python_read",
            {"read_task, 1 core": Timing.of([s * 1e9 / n for s, n in py_runs])},
            per="row",
        )
        print(
            f"executor-side Python alone (LMDB scan + decode + Arrow, 1 core): {py_s:.2f} s, "
            f"{py_n / py_s:,.0f} rows/s"
        )
        t0 = time.perf_counter()
        spark = start_spark(args.cores)
        from pyspark.sql import functions as F

        print(f"Spark session: {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        spark.read.format("txstore").load(str(state)).write.parquet(str(pq))
        print(
            f"Parquet copy written by Spark from the data source: {time.perf_counter() - t0:.1f} s"
        )

        def query(load: Callable[[], Any]) -> Callable[[], tuple[float, Any]]:
            def run() -> tuple[float, Any]:
                t = time.perf_counter()
                df = load()
                result = df.agg(F.count("*"), F.sum("value"), F.sum(F.length("key"))).collect()
                return time.perf_counter() - t, tuple(result[0])

            return run

        variants = {
            "txstore live": query(lambda: spark.read.format("txstore").load(str(state))),
            "txstore snapshot": query(lambda: spark.read.format("txstore").load(str(snap))),
            "parquet": query(lambda: spark.read.parquet(str(pq))),
        }
        names = list(variants)
        results = {name: variants[name]()[1] for name in names}  # warm-up, and the check
        assert len(set(results.values())) == 1, results
        assert results["parquet"][0] == args.rows
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            if r % 2:
                order.reverse()
            for name in order:
                seconds, result = variants[name]()
                assert result == results[name]
                samples[name].append(seconds)
        med = {name: statistics.median(s) for name, s in samples.items()}
        base = med["parquet"]
        print()
        print("Query wall time, seconds (median of rounds; noise = (max - min) / median)")
        print(
            table(
                ["variant", "median", "min", "max", "vs parquet", "rows/s", "noise"],
                [
                    [
                        name,
                        f"{med[name]:.3f}",
                        f"{min(s):.3f}",
                        f"{max(s):.3f}",
                        fmt_ratio(med[name] / base),
                        f"{args.rows / med[name]:,.0f}",
                        f"{(max(s) - min(s)) / med[name]:.0%}",
                    ]
                    for name, s in samples.items()
                ],
            )
        )
        extra = window_and_lookup(spark, work, state, pq, args)
        live_s = 8.0 if args.quick else 30.0
        refused, reads, commits = live_read_refusals(spark, work, live_s)
        print(
            f"live reads next to a Task committing 10/s for {live_s:.0f} s: {reads} reads, "
            f"{refused} refused, {commits} commits"
        )
        write_rows = args.write_rows or (args.rows // 5 if args.quick else args.rows)
        write_s = write_and_change_feed(spark, work, write_rows, args.partitions, min(rounds, 3))
        wmed = {name: statistics.median(s) for name, s in write_s.items()}
        print()
        print(f"Writing {write_rows:,} rows (median of {len(write_s['parquet write'])} rounds)")
        print(
            table(
                ["variant", "median s", "min s", "rows/s", "vs parquet write"],
                [
                    [
                        name,
                        f"{wmed[name]:.3f}",
                        f"{min(s):.3f}",
                        f"{write_rows / wmed[name]:,.0f}",
                        fmt_ratio(wmed[name] / wmed["parquet write"]),
                    ]
                    for name, s in write_s.items()
                ],
            )
        )
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"elapsed {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f}")
    record.add_timings(
        "query", {name: Timing.of([x * 1e9 for x in s]) for name, s in samples.items()}, per="query"
    )
    record.figure(
        "spark_read_vs_parquet",
        med["txstore live"] / base,
        "x",
        based_on=["query/txstore live", "query/parquet"],
    )
    record.figure(
        "spark_rows_per_s",
        args.rows / med["txstore live"],
        "rows/s",
        digits=0,
        based_on=["query/txstore live"],
    )
    for name, value in extra.items():
        record.figure(name, value, "x")
    record.figure("spark_live_read_refusals", refused, "reads", digits=0)
    record.add_timings(
        "write", {name: Timing.of([x * 1e9 for x in s]) for name, s in write_s.items()}, per="query"
    )
    record.figure(
        "spark_write_vs_parquet",
        wmed["txstore write"] / wmed["parquet write"],
        "x",
        based_on=["write/txstore write", "write/parquet write"],
    )
    record.figure(
        "changefeed_rows_per_s",
        write_rows / wmed["change feed read"],
        "rows/s",
        digits=0,
        based_on=["write/change feed read"],
    )
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
