"""Scale benchmark: how txstore's cost per operation grows with the store and the process.

Issue 27. Two parts:

* **Keys.** For each size ``N`` (100k, 1M and 10M keys; ``--quick``: 10k, 100k, 1M), a task
  changelog of ``N`` distinct keys is written (:class:`~txstore.changelog.log.FileChangelog`,
  16-byte keys in random order, 32-byte values, a task commit every 10,000 records) and a
  fresh partition **restores** it (``Task.initialize()``, synced, the product path; records
  per second). Then, on the restored store (a persistent key-value store with bytes serdes,
  through its task):

  - **get**: committed keys in random order, nothing staged (ns per get);
  - **put+commit**: rounds of 5,000 puts of existing keys in random order, each round ended by
    one synced ``Task.commit`` (changelog and store; ns per put, the commit included);
  - **scan**: ``range(key, None)`` from a random key, 50,000 rows (ns per row);
  - **recover**: close the task, then open it again and ``initialize()`` (nothing to replay:
    the store is at the changelog's end), as after a clean restart (ms).

  The same key is measured the same way at every size: what changes is the tree's depth and
  how much of it the page cache holds.
* **Partitions.** ``P`` partitions (1, 100 and 1,000; ``--quick``: 1, 10, 100), each created
  once (``Partition(path)`` plus a transactional bytes store: two synced LMDB transactions,
  the metadata database and the store's registration) and closed; then all opened again side
  by side in this process (as after a restart), and one synced commit of one key in each:
  milliseconds per creation, per open and per commit, and per partition the file
  descriptors, the address space (``VmSize``) and the resident memory (``VmRSS``, once open
  and idle) the process gained, from ``/proc/self``. Each count runs in a fresh process
  (spawned): in the process that ran the key sizes, the partitions' allocations reused the
  heap those freed, and the resident memory per partition came out ~10 KiB lower than what
  opening them costs a process that has not restored 10M keys before.

Run ``python perf/bench_scale.py [--quick] [--json PATH]`` (full sizes: a few minutes and
~2 GB of disk in a temporary directory). The output ends with lines ``figure: <name> = <value>
<unit>``: ``scale_get_10m_vs_100k`` and
``scale_put_commit_10m_vs_100k`` (time per operation at the largest size over the smallest
(10M over 100k; ``--quick``: 1M over 10k; goal <= 1.5 each),
``lmdb_get_10m_vs_100k`` and ``lmdb_put_commit_10m_vs_100k`` (the same ratios for bare py-lmdb,
measured beside it: ``perf/_scale_lmdb.py``), ``scale_get_10m_vs_lmdb`` and
``scale_put_commit_10m_vs_lmdb`` (speed against bare py-lmdb at the largest size, as
``kv_get_vs_lmdb``: above 1 is faster), ``scale_restore_10m_records_per_s`` (restore rate at the
largest size; goal >= 1,000,000),
``partition_open_ms`` (opening an existing partition and its store, per partition at the
largest count; goal <= 2) and
``partition_rss_kib`` (per open, idle partition at the largest count; goal <= 64).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from _harness import Timing, table
from _record import Record, add_json_argument
from _scale_lmdb import measure_lmdb

from txstore.bytestores.kv import BytesKeyValueStore
from txstore.changelog.log import FileChangelog
from txstore.engine.partition import Partition
from txstore.runtime.task import Task, _commit_metadata
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes

STORE = "kv"
VALUE_SIZE = 32
COMMIT_EVERY = 10_000
GETS, PUTS_PER_ROUND, PUT_ROUNDS, SCAN_ROWS = 20_000, 5_000, 4, 50_000
_KEY = struct.Struct(">QQ")
_MIX = 0x9E3779B97F4A7C15  # odd: i -> i * _MIX mod 2**64 is a permutation of the key space


def key_of(i: int) -> bytes:
    """The ``i``-th key: 16 bytes whose order is unrelated to ``i`` (random insert order)."""
    return _KEY.pack((i * _MIX) & 0xFFFF_FFFF_FFFF_FFFF, i)


def status() -> dict[str, int]:
    """Open file descriptors and ``VmSize``/``VmRSS`` (KiB) of this process."""
    out = {"fds": len(os.listdir("/proc/self/fd"))}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmSize", "VmRSS"):
                out[name] = int(rest.split()[0])
    return out


def open_task(path: str) -> tuple[Task, Any]:
    task = Task(path, sync=True)
    store = task.key_value_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store(STORE), Serdes.bytes(), Serdes.bytes()
        )
    )
    return task, store


def write_changelog(task_dir: str, n: int) -> None:
    value = bytes(range(VALUE_SIZE))
    with FileChangelog(
        os.path.join(task_dir, "changelog", STORE), fsync=False, cleanup_policy="compact"
    ) as log:
        append = log.append
        for seq, start in enumerate(range(0, n, COMMIT_EVERY), 1):
            stop = min(n, start + COMMIT_EVERY)
            for i in range(start, stop):
                append(key_of(i), value, i)
            log.commit(stop, _commit_metadata(seq, [STORE]))


def measure_keys(root: str, n: int, rng: random.Random) -> dict[str, float]:
    """Restore ``n`` keys, then time get, put+commit, scan and recover on them."""
    task_dir = os.path.join(root, f"keys-{n}")
    t0 = time.perf_counter()
    write_changelog(task_dir, n)
    written = time.perf_counter() - t0
    # The set-up's changelog (written without fsync) goes to disk before the timed restore,
    # whose one synced commit would otherwise wait behind its writeback (10M: ~0.6 GB).
    os.sync()
    task, store = open_task(task_dir)
    try:
        t0 = time.perf_counter()
        report = task.initialize()
        restore_s = time.perf_counter() - t0
        if report.restored != {STORE: n}:
            raise AssertionError(f"restored {report.restored}, expected {n}")
        picks = [key_of(rng.randrange(n)) for _ in range(GETS)]
        get = store.get
        gc.disable()
        rounds = []
        for part in range(0, GETS, GETS // 4):  # the best of 4 rounds (a warm-up, noise)
            some = picks[part : part + GETS // 4]
            t0 = time.perf_counter_ns()
            for k in some:
                get(k)
            rounds.append((time.perf_counter_ns() - t0) / len(some))
        get_ns = min(rounds)
        gc.enable()
        if get(picks[0]) is None:
            raise AssertionError("a restored key is missing")
        put_rounds = []  # the median of the rounds
        position = n + 1  # the changelog was committed at input position n
        for _ in range(PUT_ROUNDS):
            ks = [key_of(rng.randrange(n)) for _ in range(PUTS_PER_ROUND)]
            put, value = store.put, rng.randbytes(VALUE_SIZE)
            t0 = time.perf_counter_ns()
            for k in ks:
                put(k, value)
            task.commit(position)
            put_rounds.append((time.perf_counter_ns() - t0) / PUTS_PER_ROUND)
            position += 1
        start = key_of(rng.randrange(n))
        rows = 0
        t0 = time.perf_counter_ns()
        with store.range(start, None) as it:
            for _ in it:
                rows += 1
                if rows == SCAN_ROWS:
                    break
        scan_ns = (time.perf_counter_ns() - t0) / max(1, rows)
    finally:
        task.close()
    t0 = time.perf_counter()
    task, store = open_task(task_dir)
    try:
        task.initialize()
        recover_ms = (time.perf_counter() - t0) * 1000
    finally:
        task.close()
    lmdb_bytes = sum(
        os.path.getsize(os.path.join(dp, f))
        for dp, _, fs in os.walk(task_dir)
        if "changelog" not in dp
        for f in fs
    )
    shutil.rmtree(task_dir)
    return {
        "changelog_write_s": written,
        "restore_records_per_s": n / restore_s,
        "get_ns": get_ns,
        "put_commit_ns": statistics.median(put_rounds),
        "scan_ns_per_row": scan_ns,
        "recover_ms": recover_ms,
        "lmdb_mib": lmdb_bytes / 2**20,
    }


def measure_partitions(root: str, count: int) -> dict[str, float]:
    """Create ``count`` partitions (each with its store and one commit) and close them; then
    open them again side by side and make one synced commit in each."""
    base = os.path.join(root, f"parts-{count}")
    t0 = time.perf_counter()
    for i in range(count):
        with Partition(os.path.join(base, str(i)), sync=True) as p:
            BytesKeyValueStore(STORE, p, transactional=True)
    create_s = time.perf_counter() - t0
    gc.collect()
    before = status()
    parts: list[Partition] = []
    stores: list[BytesKeyValueStore] = []
    try:
        t0 = time.perf_counter()
        for i in range(count):
            p = Partition(os.path.join(base, str(i)), sync=True)
            parts.append(p)
            stores.append(BytesKeyValueStore(STORE, p, transactional=True))
        open_s = time.perf_counter() - t0
        opened = status()
        t0 = time.perf_counter()
        for s in stores:
            s.put(b"key", b"value")
            s.commit(1)
        commit_s = time.perf_counter() - t0
        gc.collect()
        idle = status()
    finally:
        for p in parts:
            p.close()
    shutil.rmtree(base)
    return {
        "create_ms": create_s * 1000 / count,
        "open_ms": open_s * 1000 / count,
        "commit_ms": commit_s * 1000 / count,
        "fds": (opened["fds"] - before["fds"]) / count,
        "vm_kib": (idle["VmSize"] - before["VmSize"]) / count,
        "rss_open_kib": (opened["VmRSS"] - before["VmRSS"]) / count,
        "rss_kib": (idle["VmRSS"] - before["VmRSS"]) / count,
    }


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10k/100k/1M keys, 1/10/100 parts")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    add_json_argument(parser, "scale")
    args = parser.parse_args(argv)
    sizes = [10_000, 100_000, 1_000_000] if args.quick else [100_000, 1_000_000, 10_000_000]
    counts = [1, 10, 100] if args.quick else [1, 100, 1000]
    record = Record(
        "scale",
        quick=args.quick,
        workload={"sizes": sizes, "partitions": counts, "value_size": VALUE_SIZE},
        argv=argv,
    )
    print(
        f"txstore scale benchmark ({'quick' if args.quick else 'full'}): keys "
        f"{', '.join(map(_size, sizes))}; partitions {', '.join(map(str, counts))}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="txstore-scale-", dir=args.dir)
    rng = random.Random(27)
    try:
        keys = {n: measure_keys(root, n, rng) for n in sizes}
        raw = {
            n: measure_lmdb(
                root,
                n,
                rng,
                key_of,
                value_size=VALUE_SIZE,
                gets=GETS,
                puts_per_round=PUTS_PER_ROUND,
                put_rounds=PUT_ROUNDS,
            )
            for n in sizes
        }
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=spawn, max_tasks_per_child=1) as fresh:
            parts = {c: fresh.submit(measure_partitions, root, c).result() for c in counts}
    finally:
        shutil.rmtree(root, ignore_errors=True)

    small, big = sizes[0], sizes[-1]
    print()
    print("Keys: per operation at each store size (restore: records/s, synced, product path)")
    print(
        table(
            [
                "keys",
                "restore rec/s",
                "get ns",
                "put+commit ns",
                "scan ns/row",
                "recover ms",
                "LMDB MiB",
                "raw get ns",
                "raw put+commit ns",
            ],
            [
                [
                    _size(n),
                    f"{k['restore_records_per_s']:,.0f}",
                    f"{k['get_ns']:,.0f}",
                    f"{k['put_commit_ns']:,.0f}",
                    f"{k['scan_ns_per_row']:,.0f}",
                    f"{k['recover_ms']:,.1f}",
                    f"{k['lmdb_mib']:,.0f}",
                    f"{raw[n]['get_ns']:,.0f}",
                    f"{raw[n]['put_commit_ns']:,.0f}",
                ]
                for n, k in keys.items()
            ],
        )
    )
    print("  (raw: bare py-lmdb, the same keys and operations: how much of the growth is LMDB's)")
    print()
    print(
        "Partitions: created (a store, one commit) and closed; then opened again side by side"
        " in one process, and one synced commit each"
    )
    print(
        table(
            [
                "partitions",
                "create ms",
                "open ms",
                "commit ms",
                "fds",
                "VmSize KiB",
                "RSS open KiB",
                "RSS idle KiB",
            ],
            [
                [
                    str(c),
                    f"{p['create_ms']:.2f}",
                    f"{p['open_ms']:.2f}",
                    f"{p['commit_ms']:.2f}",
                    f"{p['fds']:.1f}",
                    f"{p['vm_kib']:,.0f}",
                    f"{p['rss_open_kib']:,.0f}",
                    f"{p['rss_kib']:,.0f}",
                ]
                for c, p in parts.items()
            ],
        )
    )
    print("  (per partition: what this process gained, divided by the count)")
    print(f"\nelapsed {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f}")
    for n, k in keys.items():
        record.add_timings(
            f"keys {_size(n)}",
            {
                op: Timing.of([k[f]])
                for op, f in (
                    ("get", "get_ns"),
                    ("put_commit", "put_commit_ns"),
                    ("scan", "scan_ns_per_row"),
                )
            },
            per="operation",
        )
        record.add_timings(
            f"raw lmdb {_size(n)}",
            {op: Timing.of([raw[n][f"{op}_ns"]]) for op in ("get", "put_commit")},
            per="operation",
        )
    for c, p in parts.items():
        record.add_timings(
            f"partitions {c}", {"open": Timing.of([p["open_ms"] * 1e6])}, per="partition"
        )
    print(f"ratios: {_size(big)} keys over {_size(small)}")
    record.figure(
        "scale_get_10m_vs_100k",
        keys[big]["get_ns"] / keys[small]["get_ns"],
        "x",
        based_on=[f"keys {_size(big)}/get", f"keys {_size(small)}/get"],
    )
    record.figure(
        "scale_put_commit_10m_vs_100k",
        keys[big]["put_commit_ns"] / keys[small]["put_commit_ns"],
        "x",
        based_on=[f"keys {_size(big)}/put_commit", f"keys {_size(small)}/put_commit"],
    )
    record.figure(
        "lmdb_get_10m_vs_100k",
        raw[big]["get_ns"] / raw[small]["get_ns"],
        "x",
        based_on=[f"raw lmdb {_size(big)}/get", f"raw lmdb {_size(small)}/get"],
    )
    record.figure(
        "lmdb_put_commit_10m_vs_100k",
        raw[big]["put_commit_ns"] / raw[small]["put_commit_ns"],
        "x",
        based_on=[f"raw lmdb {_size(big)}/put_commit", f"raw lmdb {_size(small)}/put_commit"],
    )
    record.figure(
        "scale_get_10m_vs_lmdb",
        raw[big]["get_ns"] / keys[big]["get_ns"],
        "x",
        based_on=[f"raw lmdb {_size(big)}/get", f"keys {_size(big)}/get"],
    )
    record.figure(
        "scale_put_commit_10m_vs_lmdb",
        raw[big]["put_commit_ns"] / keys[big]["put_commit_ns"],
        "x",
        based_on=[f"raw lmdb {_size(big)}/put_commit", f"keys {_size(big)}/put_commit"],
    )
    record.figure(
        "scale_restore_10m_records_per_s",
        keys[big]["restore_records_per_s"],
        "rec/s",
        digits=0,
    )
    record.figure(
        "partition_open_ms",
        parts[counts[-1]]["open_ms"],
        "ms",
        based_on=[f"partitions {counts[-1]}/open"],
    )
    record.figure("partition_rss_kib", parts[counts[-1]]["rss_kib"], "KiB", digits=1)
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
