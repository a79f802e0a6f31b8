"""The raw py-lmdb baseline of ``perf/bench_scale.py``: the same keys, values and operations on a
bare LMDB environment, at each store size, so that the growth of txstore's cost with the size
can be told from LMDB's own (a deeper B-tree, a tree larger than the CPU caches, more pages
copied on write per commit).

For ``n`` keys (``key_of(0..n-1)``, 16 bytes, 32-byte values): the environment is filled in key
order with ``append=True`` (the fastest load LMDB has: the baseline's fill is not measured), then

* **get**: ``txn.get`` of random committed keys in one read transaction (ns per get, the best of
  4 rounds: as bench_scale measures txstore);
* **put+commit**: rounds of 5,000 ``txn.put`` of random existing keys in one synced write
  transaction each (ns per put, the commit included; the median of the rounds).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import time
from collections.abc import Callable

import lmdb


def measure_lmdb(
    root: str,
    n: int,
    rng: random.Random,
    key_of: Callable[[int], bytes],
    *,
    value_size: int,
    gets: int,
    puts_per_round: int,
    put_rounds: int,
) -> dict[str, float]:
    """Fill a bare environment with ``n`` keys, time get and put+commit; then delete it."""
    path = os.path.join(root, f"lmdb-{n}")
    env = lmdb.open(path, map_size=1 << 40, sync=True, max_dbs=2, max_spare_txns=1)
    try:
        value = bytes(range(value_size))
        keys = sorted(key_of(i) for i in range(n))
        for start in range(0, n, 1_000_000):
            with env.begin(write=True) as txn:
                cur = txn.cursor()
                cur.putmulti(((k, value) for k in keys[start : start + 1_000_000]), append=True)
        del keys
        picks = [key_of(rng.randrange(n)) for _ in range(gets)]
        rounds = []
        with env.begin() as txn:
            get = txn.get
            for part in range(0, gets, gets // 4):
                some = picks[part : part + gets // 4]
                t0 = time.perf_counter_ns()
                for k in some:
                    get(k)
                rounds.append((time.perf_counter_ns() - t0) / len(some))
        put_ns = []
        for _ in range(put_rounds):
            ks = [key_of(rng.randrange(n)) for _ in range(puts_per_round)]
            new = rng.randbytes(value_size)
            t0 = time.perf_counter_ns()
            with env.begin(write=True) as txn:
                put = txn.put
                for k in ks:
                    put(k, new)
            put_ns.append((time.perf_counter_ns() - t0) / puts_per_round)
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)
    return {"get_ns": min(rounds), "put_commit_ns": statistics.median(put_ns)}
