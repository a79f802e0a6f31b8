"""Benchmark of the file changelog: append + commit throughput, and read-committed replay.

Workload (the brief's): 16-byte keys, 100-byte values, a timestamp per record, no headers, a
commit (two ``fdatasync``) every 4096 records, on the real file system.

Variants, interleaved in one process (see ``_harness.compare_staged``):

* ``txstore``: :class:`txstore.changelog.log.FileChangelog` with its defaults (durable: fsync on).
  Records are buffered as columns and written as one batch frame per 1 MiB / commit, one
  CRC32 per batch.
* ``per-record``: the obvious layout the batch format was measured against: every record its
  own frame ``[len u32][crc u32][offset i64][ts i64][klen u32][vlen i32][key][value]`` with a
  CRC per record, appended to a ``bytearray`` and written at commit, with the same two syncs.
  Replay parses and checks it record by record. No validation, no recovery: a lower bound for
  that design in Python.

Replay is timed over the same 1M-record log, as :class:`ChangelogRecord` tuples
(``read_committed``) and as columnar batches (``read_committed_batches``, restore's input).

Run ``python perf/bench_changelog.py [--quick] [--json PATH]``. The output ends with:
``figure: changelog_append_per_s = <n> rec/s`` (goal >= 300k) and
``figure: changelog_replay_per_s = <n> rec/s`` (``read_committed`` records; goal >= 1M). The
JSON record (``_record.py``; default ``perf/out/changelog.json``) holds them, every round's
timings and the environment.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Mapping

from _harness import compare_staged, fmt_ns, table
from _record import Record, add_json_argument

from txstore.changelog.log import FileChangelog

COMMIT_EVERY = 4096
_REC = struct.Struct("<IIqqIi")  # len, crc, offset, ts, klen, vlen


def make_data(n: int, seed: int = 20260601) -> tuple[list[bytes], list[bytes], list[int]]:
    rng = random.Random(seed)
    keys = [rng.randbytes(16) for _ in range(n)]
    pool = [rng.randbytes(100) for _ in range(4096)]
    values = [pool[i % 4096] for i in range(n)]
    timestamps = [1_700_000_000_000 + i for i in range(n)]
    return keys, values, timestamps


def txstore_append(
    root: str, keys: list[bytes], values: list[bytes], tss: list[int]
) -> Mapping[str, int]:
    path = tempfile.mkdtemp(dir=root)
    try:
        with FileChangelog(path) as log:
            append, commit = log.append, log.commit
            t_append = t_commit = 0
            n = len(keys)
            for start in range(0, n, COMMIT_EVERY):
                t0 = time.perf_counter_ns()
                for i in range(start, min(n, start + COMMIT_EVERY)):
                    append(keys[i], values[i], tss[i])
                t1 = time.perf_counter_ns()
                commit(start)
                t_commit += time.perf_counter_ns() - t1
                t_append += t1 - t0
        return {"append": t_append, "commit": t_commit}
    finally:
        shutil.rmtree(path)


def per_record_append(
    root: str, keys: list[bytes], values: list[bytes], tss: list[int]
) -> Mapping[str, int]:
    path = tempfile.mkdtemp(dir=root)
    try:
        fd = os.open(os.path.join(path, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        pack, crc32, tail = _REC.pack, zlib.crc32, struct.Struct("<qqIi").pack
        buf = bytearray()
        t_append = t_commit = 0
        n = len(keys)
        for start in range(0, n, COMMIT_EVERY):
            t0 = time.perf_counter_ns()
            for i in range(start, min(n, start + COMMIT_EVERY)):
                k, v = keys[i], values[i]
                fixed = tail(i, tss[i], len(k), len(v))
                body_crc = crc32(v, crc32(k, crc32(fixed)))
                buf += pack(24 + len(k) + len(v), body_crc, i, tss[i], len(k), len(v))
                buf += k
                buf += v
            t1 = time.perf_counter_ns()
            os.write(fd, buf)
            buf.clear()
            os.fdatasync(fd)
            os.write(fd, struct.pack("<Iq", 0xFFFFFFFF, start))  # the commit marker
            os.fdatasync(fd)
            t_commit += time.perf_counter_ns() - t1
            t_append += t1 - t0
        os.close(fd)
        return {"append": t_append, "commit": t_commit}
    finally:
        shutil.rmtree(path)


def write_per_record_log(path: str, keys: list[bytes], values: list[bytes], tss: list[int]) -> None:
    tail = struct.Struct("<qqIi").pack
    with open(path, "wb") as f:
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            fixed = tail(i, tss[i], len(k), len(v))
            crc = zlib.crc32(v, zlib.crc32(k, zlib.crc32(fixed)))
            f.write(_REC.pack(24 + len(k) + len(v), crc, i, tss[i], len(k), len(v)) + k + v)


def per_record_replay(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    unpack, crc32, n, pos, end = _REC.unpack_from, zlib.crc32, 0, 0, len(data)
    mv = memoryview(data)
    out = []
    while pos < end:
        length, crc, offset, ts, klen, vlen = unpack(data, pos)
        body = pos + 8
        if crc32(mv[body : body + length]) != crc:
            raise ValueError("crc")
        k0 = pos + 32
        out.append((offset, data[k0 : k0 + klen], data[k0 + klen : k0 + klen + vlen], ts, b""))
        pos = body + length
        n += 1
    return n


def timed(fn: object) -> Mapping[str, int]:
    t0 = time.perf_counter_ns()
    fn()  # type: ignore[operator]
    return {"replay": time.perf_counter_ns() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200k records, 3 rounds")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    add_json_argument(parser, "changelog")
    args = parser.parse_args()
    n, rounds = (200_000, 3) if args.quick else (1_000_000, 5)
    record = Record(
        "changelog",
        quick=args.quick,
        workload={
            "records": n,
            "key_bytes": 16,
            "value_bytes": 100,
            "commit_every": COMMIT_EVERY,
            "rounds": rounds,
        },
    )
    root = tempfile.mkdtemp(prefix="bench_changelog_", dir=args.dir)
    print(f"python {sys.version.split()[0]} on {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"{n:,} records (16-byte keys, 100-byte values), commit every {COMMIT_EVERY}, in {root}")
    try:
        keys, values, tss = make_data(n)
        append = compare_staged(
            {
                "txstore": lambda: txstore_append(root, keys, values, tss),
                "per-record": lambda: per_record_append(root, keys, values, tss),
            },
            n,
            rounds,
        )
        print("\nappend + commit, ns per record (median of interleaved rounds)")
        print(
            table(
                ["variant", "append", "commit", "total", "records/s"],
                [
                    [
                        name,
                        fmt_ns(t["append"].median_ns),
                        fmt_ns(t["commit"].median_ns),
                        fmt_ns(t["total"].median_ns),
                        f"{1e9 / t['total'].median_ns:,.0f}",
                    ]
                    for name, t in append.items()
                ],
            )
        )

        log_dir = os.path.join(root, "replay")
        with FileChangelog(log_dir) as log:
            for start in range(0, n, COMMIT_EVERY):
                stop = min(n, start + COMMIT_EVERY)
                for i in range(start, stop):
                    log.append(keys[i], values[i], tss[i])
                log.commit(start)
        flat = os.path.join(root, "per-record.log")
        write_per_record_log(flat, keys, values, tss)
        reader = FileChangelog(log_dir, readonly=True)

        def records() -> None:
            count = 0
            for _ in reader.read_committed():
                count += 1
            assert count == n

        def batches() -> None:
            with reader.read_committed_batches() as it:
                assert sum(len(b) for b in it) == n

        def baseline() -> None:
            assert per_record_replay(flat) == n

        replay = compare_staged(
            {
                "txstore records": lambda: timed(records),
                "txstore batches": lambda: timed(batches),
                "per-record": lambda: timed(baseline),
            },
            n,
            rounds,
        )
        reader.close()
        print("\nread-committed replay, ns per record")
        print(
            table(
                ["variant", "ns/record", "records/s", "spread"],
                [
                    [
                        name,
                        fmt_ns(t["replay"].median_ns),
                        f"{1e9 / t['replay'].median_ns:,.0f}",
                        f"{t['replay'].spread:.0%}",
                    ]
                    for name, t in replay.items()
                ],
            )
        )
        record.add_timings("append", append, per="record")
        record.add_timings("replay", replay, per="record")
        print()
        record.figure(
            "changelog_append_per_s",
            1e9 / append["txstore"]["total"].median_ns,
            "rec/s",
            digits=0,
            based_on=["append/txstore/total"],
        )
        record.figure(
            "changelog_replay_per_s",
            1e9 / replay["txstore records"]["replay"].median_ns,
            "rec/s",
            digits=0,
            based_on=["replay/txstore records/replay"],
        )
        record.finish(args.json)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
