"""The page walk of data.mdb (txstore.engine.lmdb_pages.walk_data_file) against a raw scan.

Writes an LMDB file with py-lmdb (three named databases of 16-byte keys and 100-byte values,
every 200th value 6 KiB: overflow pages), then times, alternately, ``walk_data_file`` (every
page the newest snapshot uses, read with pread and checked by the C walk of csrc/lmdbwalk.c:
headers, nodes, key order within each page and within its parent's bounds; the meta pages and
the confirmation logic in Python) and a raw py-lmdb full scan of the same
file (one read transaction, ``iternext`` over every database, keys and values). The file is in
the page cache for both (written just before; each round reads it again). Both are printed side
by side, with the ratio of their times.

Ends with ``figure: page_walk_mib_per_s = <n> MiB/s`` (used pages checked per second),
``figure: page_walk_pages_per_s = <n> pages/s`` and ``figure: page_walk_vs_lmdb_scan = <x> x``
(the walk's time over the scan's: below 1, the walk is the faster). ``--quick``: a 32 MiB file
instead of 256 MiB. Usage: ``python perf/bench_page_walk.py [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import lmdb
from _record import Record, add_json_argument

from txstore.engine.lmdb_pages import walk_data_file


def write(path: Path, mib: int, rng: random.Random) -> int:
    """An environment of about ``mib`` MiB at ``path``; its entry count."""
    env = lmdb.open(str(path), map_size=4 * mib << 20, max_dbs=4, sync=False)
    dbs = [env.open_db(b"store%d" % i) for i in range(3)]
    n = 0
    while os.path.getsize(path / "data.mdb") < mib << 20:
        with env.begin(write=True) as txn:
            for _ in range(20_000):
                value = rng.randbytes(6144 if n % 200 == 0 else 100)
                txn.put(b"%016d" % rng.randrange(10**15), value, db=dbs[n % 3])
                n += 1
    env.close()
    return n


def scan(path: Path) -> int:
    env = lmdb.open(str(path), readonly=True, max_dbs=4, lock=False)
    try:
        rows = 0
        with env.begin() as txn:
            for i in range(3):
                for _k, _v in txn.cursor(env.open_db(b"store%d" % i, txn=txn)).iternext():
                    rows += 1
        return rows
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 32 MiB file, 9 rounds")
    add_json_argument(parser, "page_walk")
    args = parser.parse_args()
    mib, rounds = (32, 9) if args.quick else (256, 7)  # the C walk takes milliseconds: more rounds
    record = Record("page_walk", quick=args.quick, workload={"file_mib": mib, "rounds": rounds})
    with tempfile.TemporaryDirectory(prefix="bench_page_walk_") as tmp:
        path = Path(tmp)
        entries = write(path, mib, random.Random(15))
        size = os.path.getsize(path / "data.mdb")
        walks, scans = [], []
        for _ in range(rounds):  # interleaved
            t0 = time.perf_counter()
            walk = walk_data_file(path / "data.mdb")
            walks.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rows = scan(path)
            scans.append(time.perf_counter() - t0)
    walk_s, scan_s = statistics.median(walks), statistics.median(scans)
    used_mib = walk.bytes / 2**20
    print(f"# file {size / 2**20:.0f} MiB, {entries:,} puts, {rows:,} rows; used pages "
          f"{walk.pages:,} ({used_mib:.0f} MiB), free pages {walk.free_pages:,}")  # fmt: skip
    print(f"C page walk      {walk_s * 1e3:9.1f} ms  {walk.pages / walk_s:12,.0f} pages/s  "
          f"{used_mib / walk_s:8.0f} MiB/s")  # fmt: skip
    print(f"py-lmdb scan     {scan_s * 1e3:9.1f} ms  {rows / scan_s:12,.0f} rows/s   "
          f"{used_mib / scan_s:8.0f} MiB/s")  # fmt: skip
    print(f"walk / scan      {walk_s / scan_s:9.2f} x  (the walk's time over the scan's, "
          f"medians of {rounds} interleaved rounds)")  # fmt: skip
    record.details = {"walk_s": walks, "scan_s": scans, "pages": walk.pages, "rows": rows}
    record.figure("page_walk_pages_per_s", walk.pages / walk_s, "pages/s", digits=0)
    record.figure("page_walk_vs_lmdb_scan", walk_s / scan_s, "x")
    record.figure("page_walk_mib_per_s", used_mib / walk_s, "MiB/s", digits=0)
    record.finish(args.json)


if __name__ == "__main__":
    main()
