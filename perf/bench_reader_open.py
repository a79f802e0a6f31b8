"""What opening a reader costs now that readers serve the committed state (issue: readers after
a crash), on a clean partition and on one whose writer died between its changelog and store
commits.

A partition written by a real :class:`~txstore.runtime.task.Task` with ``S`` = 3 key-value
stores (``N`` = 100,000 records each; ``--quick``: 20,000), one task commit every 1,000
records. Variants, timed interleaved (``_harness.compare``, the figure is the median):

* **lmdb.open (floor)**: py-lmdb's read-only open and close of ``data/``, nothing else;
* **Partition (before)**: ``Partition(path, readonly=True)`` open and close: what every reader
  opened before this change;
* **open_committed (clean)**: :func:`~txstore.runtime.committed.open_committed` on the same
  clean partition (each changelog's last commit marker read through its trailer);
* **open_committed (lagging)**: the same on a copy whose stores lack the last task commit
  (1,000 records per store replayed in memory): the cost a reader pays after such a crash.

Run ``python perf/bench_reader_open.py [--quick] [--json PATH]``. The output ends with
``figure: reader_open_clean_us``, ``figure: reader_open_clean_vs_partition`` (goal: about 1,
the clean cost unchanged), ``figure: reader_open_lagging_ms`` and
``figure: reader_replay_records_per_s``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import lmdb
from _harness import Settings, compare, table
from _record import Record, add_json_argument

from txstore import Serdes, Stores
from txstore.engine.partition import Partition
from txstore.runtime.committed import open_committed
from txstore.runtime.task import Task

STORES = 3
COMMIT_EVERY = 1_000


def write(path: Path, n: int, last_commit_to_stores: bool) -> None:
    """``n`` records into each store, committing every ``COMMIT_EVERY``; without
    ``last_commit_to_stores`` the last task commit reaches the changelogs only (as a writer
    killed at ``task.after_changelog_commit`` leaves it: the LMDB files are taken from a copy
    made before that commit's store commit)."""
    with Task(path, sync=False) as task:
        stores = [
            task.key_value_store(
                Stores.key_value_store_builder(
                    Stores.persistent_key_value_store(f"s{i}"), Serdes.bytes(), Serdes.bytes()
                )
            )
            for i in range(STORES)
        ]
        task.initialize()
        for start in range(0, n, COMMIT_EVERY):
            if not last_commit_to_stores and start + COMMIT_EVERY >= n:
                shutil.copytree(path / "data", path.parent / "data-before")
            for i in range(start, start + COMMIT_EVERY):
                key = b"%08d" % ((i * 7919) % n)
                for s in stores:
                    s.put(key, key * 4)
            task.commit(start + COMMIT_EVERY)
    if not last_commit_to_stores:
        shutil.rmtree(path / "data")
        (path.parent / "data-before").rename(path / "data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 records a store")
    add_json_argument(parser, "reader_open")
    args = parser.parse_args()
    n = 20_000 if args.quick else 100_000
    settings = Settings(repeats=5 if args.quick else 9, target_ns=100_000_000, warmup=2)
    record = Record(
        "reader_open",
        quick=args.quick,
        workload={"stores": STORES, "records_per_store": n, "task_commit_every": COMMIT_EVERY},
    )
    with tempfile.TemporaryDirectory(prefix="bench_reader_open_") as tmp:
        clean, lagging = Path(tmp) / "clean" / "p0", Path(tmp) / "lagging" / "p0"
        write(clean, n, True)
        write(lagging, n, False)

        def raw() -> None:
            lmdb.open(str(clean / "data"), readonly=True, lock=True, max_dbs=8).close()

        def before() -> None:
            Partition(clean, readonly=True, verify="never").close()

        def committed_clean() -> None:
            part, _ = open_committed(clean, verify="never")
            part.close()

        def committed_lagging() -> None:
            part, state = open_committed(lagging, verify="never")
            assert state.tails, "the lagging copy must lag"
            part.close()

        timings = compare(
            {
                "lmdb.open (floor)": raw,
                "Partition (before)": before,
                "open_committed (clean)": committed_clean,
                "open_committed (lagging)": committed_lagging,
            },
            1,
            settings,
        )
    us = {name: t.median_ns / 1e3 for name, t in timings.items()}
    base = us["Partition (before)"]
    print(
        table(
            ["variant", "us per open", "vs Partition"],
            [[name, f"{v:,.1f}", f"{v / base:.2f}x"] for name, v in us.items()],
        )
    )
    record.add_timings("open", timings, per="open")
    record.figure(
        "reader_open_clean_us",
        us["open_committed (clean)"],
        "us",
        based_on=["open/open_committed (clean)"],
    )
    record.figure(
        "reader_open_clean_vs_partition",
        us["open_committed (clean)"] / base,
        "x",
        based_on=["open/open_committed (clean)", "open/Partition (before)"],
    )
    record.figure("reader_open_lagging_ms", us["open_committed (lagging)"] / 1e3, "ms")
    replayed = STORES * COMMIT_EVERY
    record.figure(
        "reader_replay_records_per_s",
        replayed / ((us["open_committed (lagging)"] - us["open_committed (clean)"]) * 1e-6),
        "records/s",
        digits=0,
    )
    record.finish(args.json)


if __name__ == "__main__":
    main()
