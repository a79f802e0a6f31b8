"""Benchmark of txstore's windowed stream-stream join against Quix Streams' interval join.

The input: ``N`` records per side, left and right alternating, one millisecond apart, keys
drawn from ``K`` keys, 24-character string values. The join windows are ``W`` milliseconds
both ways with ``W / K = 2``, so a record has about two records of the other side with its key
in its window: about ``2 N`` join results.

* **txstore** (``join_records_per_s``): an inner :class:`txstore.joins.StreamJoin` in a
  persistent :class:`txstore.Task` (buffers are plain window stores with headers, retaining
  duplicates, change-logged), ``process`` on batches of 10,000 records, each followed by
  ``Task.commit`` (changelogs and LMDB, **fsynced**).
* **Quix Streams** 3.28 (``join_vs_quix``): the logic of ``StreamingDataFrame.join_interval``
  (``quixstreams/dataframe/joins/join_interval.py``: a record is stored with
  ``set_for_timestamp`` in its side's timestamped RocksDB store with ``keep_duplicates``, then
  joined with ``get_interval`` over the other side's store), driven without a broker as
  ``bench_window.py`` drives Quix's stores: two ``TimestampedStorePartition`` (``grace_ms = W``,
  ``backward_ms = forward_ms = W``), a transaction each, ``prepare()`` + ``flush()`` every 10,000
  records (RocksDB does not fsync by default). The same pairs are joined; values go through each
  side's own serializer (txstore ``Serdes.string()``, Quix JSON).
* **bytes per record** (``join_store_bytes_per_record_saved``): the same join with its buffers
  kept as timestamped window stores with headers (``buffer_format=HEADERS``, what Kafka's join
  used before the WindowStoreWithHeaders proposal, through the adapter) and as plain window
  stores with headers (the default): stored value bytes per buffered record, read from LMDB.

The two join variants run in turn, ``--rounds`` times (median). Run ``python
perf/bench_join.py [--quick] [--json PATH]``; the output ends with three ``figure:`` lines.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import random
import statistics
import tempfile
import time
import warnings
from typing import Any

import lmdb
from _record import Record, add_json_argument

from txstore import Serdes, Task, ValueFormat
from txstore.joins import JoinRecord, JoinWindows, StreamJoin

COMMIT_EVERY = 10_000
VALUE_CHARS = 24


def make_input(n: int, keys: int, seed: int = 7) -> list[JoinRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(2 * n):
        key = f"user-{rng.randrange(keys):06d}"
        value = f"{i:012d}" + "v" * (VALUE_CHARS - 12)
        out.append(JoinRecord("left" if i % 2 == 0 else "right", key, value, i))
    return out


def pair(key: Any, left: Any, right: Any) -> tuple[Any, Any]:
    return (left.value, right.value)


def run_txstore(
    path: str, records: list[JoinRecord], window: int, fmt: ValueFormat = ValueFormat.PLAIN_HEADERS
) -> tuple[float, int]:
    """Seconds and join results of the whole input."""
    started = time.perf_counter()
    results = 0
    with Task(path) as task:
        join: StreamJoin[str, Any] = StreamJoin(
            task,
            "j",
            JoinWindows.of_time_difference_without_grace(window),
            "inner",
            left_serde=Serdes.string(),
            right_serde=Serdes.string(),
            joiner=pair,
            buffer_format=fmt,
        )
        task.initialize()
        for start in range(0, len(records), COMMIT_EVERY):
            results += len(join.process(records[start : start + COMMIT_EVERY]))
            task.commit(start + COMMIT_EVERY)
    return time.perf_counter() - started, results


def quix_partition(path: str, grace_ms: int) -> Any:
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        from quixstreams.state.rocksdb.options import RocksDBOptions
        from quixstreams.state.rocksdb.timestamped import TimestampedStorePartition

    return TimestampedStorePartition(
        path, grace_ms=grace_ms, keep_duplicates=True, options=RocksDBOptions()
    )


def run_quix(path: str, records: list[JoinRecord], window: int) -> tuple[float, int]:
    """Quix's ``join_interval`` (inner) logic over its timestamped stores."""
    started = time.perf_counter()
    parts = [quix_partition(os.path.join(path, side), window) for side in ("left", "right")]
    backward_ms = forward_ms = window
    results = 0
    offset = 0
    try:
        for start in range(0, len(records), COMMIT_EVERY):
            left_tx, right_tx = parts[0].begin(), parts[1].begin()
            for side, key, value, ts, _headers in records[start : start + COMMIT_EVERY]:
                if side == "left":  # left_func of join_interval.py
                    left_tx.set_for_timestamp(timestamp=ts, value=value, prefix=key)
                    found = right_tx.get_interval(start=ts - backward_ms, end=ts + 1, prefix=key)
                    results += len([(value, r) for r in found])
                else:  # right_func
                    right_tx.set_for_timestamp(timestamp=ts, value=value, prefix=key)
                    found = left_tx.get_interval(start=ts - forward_ms, end=ts + 1, prefix=key)
                    results += len([(lv, value) for lv in found])
            offset += 1
            for tx in (left_tx, right_tx):
                tx.prepare()
                tx.flush(changelog_offset=offset)
    finally:
        for p in parts:
            p.close()
    return time.perf_counter() - started, results


def buffer_bytes(path: str) -> tuple[int, int]:
    """Stored value bytes and rows of the join's buffers (``j-left.*``, ``j-right.*``
    segments), read from LMDB."""
    env = lmdb.open(os.path.join(path, "data"), readonly=True, max_dbs=4096, lock=True)
    total = rows = 0
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            for name in names:
                store, _, suffix = name.partition(b".")
                if store in (b"j-left", b"j-right") and suffix.isdigit():
                    db = env.open_db(name, txn=txn, create=False)
                    for v in txn.cursor(db).iternext(keys=False):
                        total += len(v)
                        rows += 1
    finally:
        env.close()
    return total, rows


def quix_version() -> str:
    try:
        from importlib.metadata import version

        return version("quixstreams")
    except Exception:  # pragma: no cover - reported, not fatal
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 records per side, 1 round")
    ap.add_argument("--rounds", type=int, help="rounds of the two variants (median)")
    add_json_argument(ap, "join")
    args = ap.parse_args()
    n = 100_000 if args.quick else 1_000_000
    rounds = args.rounds or (1 if args.quick else 2)
    keys = 10_000 if not args.quick else 2_000
    window = 2 * keys  # a record meets 2 W / K / 2 = 2 records of the other side with its key
    record = Record(
        "join",
        quick=args.quick,
        workload={"records_per_side": n, "keys": keys, "window_ms": window,
                  "commit_every": COMMIT_EVERY, "value_chars": VALUE_CHARS, "rounds": rounds},
    )  # fmt: skip
    print(
        f"txstore stream-stream join vs Quix Streams {quix_version()} join_interval; Python "
        f"{platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"workload: {n:,} records per side, {keys:,} keys, window +-{window:,} ms, "
          f"commit every {COMMIT_EVERY:,} records; {rounds} round(s), median\n")  # fmt: skip
    records = make_input(n, keys)
    times: dict[str, list[float]] = {"txstore": [], "quix": []}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench_join_") as root:
        for r in range(rounds):
            order = ("txstore", "quix") if r % 2 == 0 else ("quix", "txstore")
            for name in order:
                path = os.path.join(root, f"{name}-{r}")
                run = run_txstore if name == "txstore" else run_quix
                seconds, results = run(path, records, window)
                times[name].append(seconds)
                counts[name] = results
                print(f"  round {r + 1}: {name:8s} {seconds:8.2f} s  {results:,} join results")
        # bytes: the same join (a tenth of the input) with each buffer format
        sample = records[: max(20_000, len(records) // 10)]
        per_record = {}
        for fmt in (ValueFormat.HEADERS, ValueFormat.PLAIN_HEADERS):
            path = os.path.join(root, f"bytes-{fmt.name}")
            run_txstore(path, sample, window, fmt)
            total, rows = buffer_bytes(path)
            per_record[fmt] = total / rows
    if counts["txstore"] != counts["quix"]:
        raise SystemExit(f"the joins disagree: {counts}")
    t, q = statistics.median(times["txstore"]), statistics.median(times["quix"])
    rate = 2 * n / t
    saved = per_record[ValueFormat.HEADERS] - per_record[ValueFormat.PLAIN_HEADERS]
    print(f"\ntxstore: {rate:,.0f} records/s ({t:.2f} s); Quix: {2 * n / q:,.0f} records/s "
          f"({q:.2f} s); {counts['txstore']:,} join results each")  # fmt: skip
    print(f"buffer value bytes per record: timestamped with headers "
          f"{per_record[ValueFormat.HEADERS]:.1f}, plain with headers "
          f"{per_record[ValueFormat.PLAIN_HEADERS]:.1f}\n")  # fmt: skip
    record.details = {"seconds": times, "join_results": counts, "bytes_per_record": {
        f.name: v for f, v in per_record.items()}}  # fmt: skip
    record.figure("join_records_per_s", rate, "records/s", digits=0)
    record.figure("join_store_bytes_per_record_saved", saved, "B", digits=1)
    record.figure("join_vs_quix", q / t, "x")
    record.finish(args.json)


if __name__ == "__main__":
    main()
