"""What ``txstore check --deep`` costs, in store rows per second, against a plain full scan.

Two partition directories, each written by a real :class:`~txstore.runtime.task.Task` (so the
changelog is what a task logs: one commit every 10,000 records), ``N`` = 200,000 rows each
(``--quick``: 50,000), seeded:

* **kv**: a timestamped key-value store (``Serdes.bytes()``), 16-byte random keys, 100-byte
  random values, every key written once;
* **window**: a window store with headers (``PLAIN_HEADERS``), ``N / 20`` 16-byte keys in 20
  one-minute windows each, 100-byte values, one header; retention keeps every window live.

Variants, timed interleaved (``_harness.compare``: each round runs each once, in a rotated
order; the figure is the median), on an already open read-only partition except the two
``admin.check`` rows, which open it themselves as the command does:

* **scan (baseline)**: every committed row through a read-committed view (``open_view`` +
  ``rows()``), kept nowhere: the least any check of every row must do;
* **check**: ``admin.check(path)``, what ``txstore check`` does (rows decoded with the
  store's format, every changelog record's checksum);
* **check --deep**: ``admin.check(path, deep=True)``, what ``txstore check --deep`` does (the
  above, plus the changelog replayed into the expected map and every row compared and
  checked against its format);
* **deep compare only**: ``deep_check.check_store`` for the one store (no checksum pass).

Run ``python perf/bench_check.py [--quick] [--json PATH]``. The output ends with
``figure: check_deep_rows_per_s = <n> rows/s`` (kv, ``check --deep``),
``figure: check_deep_vs_scan = <x> x`` (its time over the baseline scan's on the same store)
and ``figure: check_deep_window_rows_per_s = <n> rows/s``. The JSON record (``_record.py``;
default ``perf/out/check.json``) holds them, every round's timings and the environment.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from _harness import Settings, Timing, compare, consume, table
from _record import Record, add_json_argument

from txstore import Headers, Serdes, Stores, ValueAndHeaders, ValueAndTimestamp
from txstore.engine.partition import Partition
from txstore.runtime import admin, deep_check
from txstore.runtime.catalog import open_view
from txstore.runtime.task import Task

WINDOWS = 20
WINDOW_MS = 60_000
COMMIT_EVERY = 10_000


def write_kv(path: Path, n: int, rng: random.Random) -> None:
    with Task(path, sync=False) as task:
        store = task.key_value_store(
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store("kv"), Serdes.bytes(), Serdes.bytes()
            )
        )
        task.initialize()
        for i in range(n):
            task.context.timestamp = 1_000 + i
            store.put(rng.randbytes(16), ValueAndTimestamp(rng.randbytes(100), 1_000 + i))
            if (i + 1) % COMMIT_EVERY == 0:
                task.commit(i + 1)
        task.commit(n)


def write_window(path: Path, n: int, rng: random.Random) -> None:
    keys = [rng.randbytes(16) for _ in range(n // WINDOWS)]
    retention = 10 * WINDOWS * WINDOW_MS
    headers = Headers([("source", b"bench")])
    with Task(path, sync=False) as task:
        store = task.window_store(
            Stores.window_store_with_headers_builder(
                Stores.persistent_window_store_with_headers("win", retention, WINDOW_MS, False),
                Serdes.bytes(),
                Serdes.bytes(),
            )
        )
        task.initialize()
        i = 0
        for w in range(WINDOWS):
            for key in keys:
                task.context.timestamp = w * WINDOW_MS
                store.put(key, ValueAndHeaders(rng.randbytes(100), headers), w * WINDOW_MS)
                i += 1
                if i % COMMIT_EVERY == 0:
                    task.commit(i)
        task.commit(i)


def measure(path: Path, store: str, rows: int, settings: Settings) -> dict[str, Timing]:
    """Nanoseconds per row of each variant over partition ``path``'s store ``store``."""
    with Partition(path, readonly=True) as part:

        def scan() -> None:
            with open_view(part, store) as view, view.rows() as it:
                consume(it)

        def deep_only() -> None:
            res = deep_check.check_store(part, store, path / "changelog" / store)
            assert res.rows == rows and not res.differences, res.findings

        def check() -> None:
            assert admin.check(path).ok

        def check_deep() -> None:
            report = admin.check(path, deep=True)
            assert report.ok and report.rows_verified == rows, report.problems

        timings = compare(
            {
                "scan (baseline)": scan,
                "check": check,
                "check --deep": check_deep,
                "deep compare only": deep_only,
            },
            rows,
            settings,
        )
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="50,000 rows, fewer rounds")
    add_json_argument(parser, "check")
    args = parser.parse_args()
    n = 50_000 if args.quick else 200_000
    settings = Settings(repeats=3 if args.quick else 7, target_ns=200_000_000, warmup=1)
    record = Record(
        "check",
        quick=args.quick,
        workload={
            "rows_per_store": n,
            "window_store_windows": WINDOWS,
            "task_commit_every": COMMIT_EVERY,
            "rounds": settings.repeats,
            "sample_target_ns": settings.target_ns,
        },
    )
    rng = random.Random(15)
    with tempfile.TemporaryDirectory(prefix="bench_check_") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        write_kv(root / "kv", n, rng)
        write_window(root / "window", n, rng)
        print(f"# {n:,} rows per store written in {time.perf_counter() - t0:.1f} s "
              f"(pid {os.getpid()})")  # fmt: skip
        timings = {
            "kv": measure(root / "kv", "kv", n, settings),
            "window": measure(root / "window", "win", n, settings),
        }
    results = {
        store: {name: t.median_ns * 1e-9 for name, t in per.items()}
        for store, per in timings.items()
    }
    rows = []
    for store, per in results.items():
        base = per["scan (baseline)"]
        for name, secs in per.items():
            rows.append([f"{store}: {name}", f"{1 / secs:,.0f}", f"{secs / base:.2f}x"])
    print(table(["variant", "rows/s", "time vs scan"], rows))
    for store, per_store in timings.items():
        record.add_timings(store, per_store, per="row")
    kv = results["kv"]
    record.figure(
        "check_deep_rows_per_s",
        1 / kv["check --deep"],
        "rows/s",
        digits=0,
        based_on=["kv/check --deep"],
    )
    record.figure(
        "check_deep_vs_scan",
        kv["check --deep"] / kv["scan (baseline)"],
        "x",
        based_on=["kv/check --deep", "kv/scan (baseline)"],
    )
    record.figure(
        "check_deep_window_rows_per_s",
        1 / results["window"]["check --deep"],
        "rows/s",
        digits=0,
        based_on=["window/check --deep"],
    )
    record.finish(args.json)


if __name__ == "__main__":
    main()
