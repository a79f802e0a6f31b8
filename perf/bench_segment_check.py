"""The segment key check of a window store opened after an unclean shutdown
(txstore.bytestores.segment_check) on a store of 1M rows.

Writes a persistent window store of ``--rows`` rows (10,000 record keys of 8 bytes, windows
15 minutes apart, segments of an hour: about 25 segments; 8-byte values) through the bytes
store's batch ``restore``, commits and closes. Then, alternately: opens the partition with the
``closed-cleanly`` marker removed (the page walk runs; not timed) and times the store's
constructor (which checks every key), and opens it after a clean close and times the same
constructor (nothing checked). The difference is the check.

Ends with ``figure: segment_check_keys_per_s = <n> keys/s``. Usage:
``python perf/bench_segment_check.py [--rows N] [--rounds R] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _record import Record, add_json_argument

from txstore.bytestores.schemas import WindowKeySchema
from txstore.bytestores.segments import SegmentedBytesStore
from txstore.codecs import window_key
from txstore.engine.partition import Partition
from txstore.engine.writer_lock import CLEAN_CLOSE

HOUR = 3_600_000


def open_store(part: Partition) -> SegmentedBytesStore:
    return SegmentedBytesStore(
        "w", part, schema=WindowKeySchema(), retention=100 * HOUR, segment_interval=HOUR
    )


def write(path: Path, rows: int) -> None:
    windows = max(1, rows // 10_000)
    with Partition(path, sync=False, map_size=8 << 30) as part:
        store = open_store(part)
        for w in range(windows):
            ts = w * 15 * 60_000
            batch = [(window_key(b"k%07d" % k, ts, 0), b"v" * 8) for k in range(rows // windows)]
            store.restore(batch)
            store.commit(w)
        store.close()


def timed_open(path: Path, crashed: bool) -> float:
    if crashed:
        os.unlink(path / CLEAN_CLOSE)
    with Partition(path, sync=False, map_size=8 << 30) as part:
        assert (part.page_walk is not None) == crashed
        t = time.perf_counter()
        store = open_store(part)
        elapsed = time.perf_counter() - t
        store.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="rows written (default 1M, 100k quick)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="100k rows, 3 rounds")
    add_json_argument(ap, "segment_check")
    args = ap.parse_args()
    if args.rows is None:
        args.rows = 100_000 if args.quick else 1_000_000
    if args.quick:
        args.rounds = min(args.rounds, 3)
    workload = {"rows": args.rows, "rounds": args.rounds}
    rec = Record("segment_check", quick=args.quick, workload=workload)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p"
        write(path, args.rows)
        checked, clean = [], []
        for _ in range(args.rounds):
            checked.append(timed_open(path, True))
            clean.append(timed_open(path, False))
        t_checked, t_clean = statistics.median(checked), statistics.median(clean)
        rate = args.rows / max(t_checked - t_clean, 1e-9)
        print(f"open after a crash (keys checked): {t_checked * 1e3:.1f} ms")
        print(f"open after a clean close:          {t_clean * 1e3:.1f} ms")
    rec.details = {"checked_s": checked, "clean_s": clean}
    rec.figure("segment_check_keys_per_s", rate, "keys/s", digits=0)
    rec.finish(args.json)


if __name__ == "__main__":
    main()
