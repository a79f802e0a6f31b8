"""Key-value benchmark: txstore against raw py-lmdb and Quix Streams' RocksDB store partition.

Everything runs side by side in one process (see ``_harness.py``): interleaved rounds in a
rotating order, medians, and ratios between variants measured in the same run (the machine is
shared and drifts by about 30%, so the ratios are what counts).

Workload (issue 3): ``N`` = 200,000 distinct random 16-byte keys with random 100-byte values,
put in random order into an empty store, then committed; then every key is read back (in
another random order; ``--quick`` reads 50,000 of them) from the committed store. Variants:

* ``lmdb``: raw py-lmdb, one write transaction of ``txn.put`` in random order, then
  ``commit()`` with ``sync=True`` (txstore's default durability); gets in one read transaction.
  References, not figures: sorted ``putmulti(append=True)``, and one read transaction per get.
* ``txstore tx``: a transactional store (``txstore.open(path)``, ``db.key_value_store(name,
  Serdes.bytes(), Serdes.bytes())``, default ``sync=True``): puts go to the overlay,
  ``commit(offset)`` applies them in one synced LMDB transaction. Measured at two levels:
  **typed** (the ``KeyValueStore`` users get, with bytes serdes; used for the figures) and
  **bytes** (``BytesKeyValueStore``, the engine's bytes store underneath).
* ``txstore non-tx``: ``transactional=False``. Every ``put()`` is its own synced LMDB write
  transaction (one fsync per put), so a 200k-key load through ``put()`` would take minutes: it
  is timed on the first 5,000 keys only (500 with ``--quick``), as a rate per key; ``put_all``
  (one transaction) runs the full load.
* ``quix``: ``quixstreams.state.rocksdb.RocksDBStorePartition(path, RocksDBOptions(),
  changelog_producer=None)``, no broker: ``tx = partition.begin()``, ``tx.set_bytes(key, value,
  prefix=b"")``, ``tx.prepare()``, ``tx.flush(changelog_offset=...)``; gets through a new
  transaction's ``get_bytes(key, b"")`` (``partition.get`` as a reference). Quix's flush is a
  RocksDB ``WriteBatch`` written **without sync** (WAL in the page cache: survives a process
  crash, not a power loss), which is what txstore's ``sync=False`` promises, so that txstore
  variant is shown too; the figures use txstore's durable default.

Further sections: a full scan through the read-uncommitted merge iterator over the committed
``N`` keys with 10% of them changed in the overlay (40% updates, 30% deletes, 30% inserts);
``recover()`` with a large and a small committed store (2M and 100k keys; ``--quick``: 1M and
100k) and the same 10,000-put uncommitted overlay; and, in a fresh subprocess, the RSS held by
2M uncommitted puts under a 4 MiB overlay budget (they spill to disk).

The garbage collector is off inside timed sections (as in :mod:`timeit`), on in between.

Run ``python perf/bench_kv.py [--quick] [--json PATH]``. The output ends with eight
``figure:`` lines: ``kv_put_commit_vs_lmdb`` (goal >= 0.7), ``kv_put_commit_vs_quix`` (>= 1.5),
``kv_get_vs_lmdb`` (>= 0.75), ``kv_get_vs_quix`` (>= 3), ``kv_merged_scan_rows_per_s``
(>= 2,000,000), ``recover_ms_ratio_large_small`` (<= 1.5) and ``spill_rss_growth_mib`` (<= 64),
``kv_task_put_commit_vs_lmdb_changelog`` (no goal: a task's store, put + task commit, against a
raw LMDB put plus the same changelog append, both committed and synced), then four of entry
checksums (issue 24; the same store with ``checksums=False`` side by side, 100k keys):
``checksum_get_overhead``, ``checksum_put_commit_overhead`` and
``checksum_scan_overhead`` (time with / time without, goal <= 1.05 each) and
``checksum_bytes_per_entry`` (<= 4).
The JSON record (``_record.py``; default ``perf/out/kv.json``) holds them, every round's timings,
the spill child's memory readings and the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import lmdb
from _harness import Settings, Timing, compare, compare_staged, consume, fmt_ratio, table
from _record import Record, add_json_argument

from txstore.bytestores.kv import BytesKeyValueStore
from txstore.changelog.log import FileChangelog

# Submodules, not ``import txstore``: the editable install registers ``txstore`` as a namespace
# package, so its ``__init__`` (and ``txstore.open``) is not loaded when run from perf/.
from txstore.runtime.database import Database
from txstore.runtime.database import open as open_database
from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import Serdes

MiB = 2**20
MAP_SIZE = 2**30  # raw LMDB map (txstore grows its own map by doubling)
KEY_SIZE = 16
VALUE_SIZE = 100
STORE = "kv"
PREFIX = b""  # Quix key prefix: empty, so Quix stores exactly the same key bytes
OVERLAY_KEYS = 10_000  # uncommitted puts discarded by each recover()
LOAD_BATCH = 200_000  # keys per commit when loading the recover() stores (fits the budget)
SPILL_BUDGET = 4 * MiB
LEVELS = (
    "  txstore: the typed KeyValueStore with Serdes.bytes(), unless marked bytes level\n"
    "  (BytesKeyValueStore); noise = (max - min) / median over the rounds"
)
Phases = dict[str, int]
LMDB_CHANGELOG = "lmdb + changelog: txn.put + append + commits"
TASK = "txstore task: put + task.commit"


def now() -> int:
    return time.perf_counter_ns()


# --------------------------------------------------------------------------- data


@dataclass
class Data:
    """Seeded inputs: ``items`` in put order, ``lookup`` (same keys) in get order, and the
    overlay changes of the scan section."""

    items: list[tuple[bytes, bytes]]
    lookup: list[bytes]
    updates: list[tuple[bytes, bytes]]
    deletes: list[bytes]
    inserts: list[tuple[bytes, bytes]]
    overlay: list[tuple[bytes, bytes]]  # the recover() overlay: new keys

    @classmethod
    def make(cls, n: int, seed: int = 20260603) -> Data:
        rng = random.Random(seed)
        changed = n // 10
        n_upd, n_del = changed * 4 // 10, changed * 3 // 10
        n_ins = changed - n_upd - n_del
        want = n + n_ins + OVERLAY_KEYS
        keys: dict[bytes, None] = {}
        while len(keys) < want:
            raw = rng.randbytes(KEY_SIZE * (want - len(keys)))
            keys.update(dict.fromkeys(raw[i : i + KEY_SIZE] for i in range(0, len(raw), KEY_SIZE)))
        all_keys = list(keys)
        values = rng.randbytes(VALUE_SIZE * want)
        vals = [values[i * VALUE_SIZE : (i + 1) * VALUE_SIZE] for i in range(want)]
        items = list(zip(all_keys[:n], vals[:n], strict=True))
        lookup = all_keys[:n]
        rng.shuffle(lookup)
        sample = rng.sample(range(n), n_upd + n_del)
        updates = [(all_keys[i], vals[(i + 1) % n]) for i in sample[:n_upd]]
        deletes = [all_keys[i] for i in sample[n_upd:]]
        inserts = list(zip(all_keys[n : n + n_ins], vals[n : n + n_ins], strict=True))
        overlay = list(zip(all_keys[n + n_ins :], vals[n + n_ins :], strict=True))
        return cls(items, lookup, updates, deletes, inserts, overlay)


def sorted_keys(n: int, tag: int) -> Iterator[bytes]:
    """``n`` ascending 16-byte keys (for fast loads of the recover() stores)."""
    base = tag << 96
    for i in range(n):
        yield (base + i).to_bytes(KEY_SIZE, "big")


class Workdir:
    """Fresh directories under one root, removed at the end."""

    def __init__(self, root: str | None) -> None:
        self.root = tempfile.mkdtemp(prefix="txstore-bench-kv-", dir=root)
        self._n = 0

    def fresh(self, label: str) -> str:
        self._n += 1
        path = os.path.join(self.root, f"{self._n:04d}-{label}")
        os.makedirs(path)
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- stores


def open_lmdb(path: str) -> Any:
    return lmdb.open(path, map_size=MAP_SIZE, sync=True, subdir=True)


def open_txstore(
    path: str, *, transactional: bool = True, sync: bool = True, **kwargs: Any
) -> tuple[Database, KeyValueStore[bytes, bytes]]:
    db = open_database(path, sync=sync, **kwargs)
    store: KeyValueStore[bytes, bytes] = db.key_value_store(
        STORE, Serdes.bytes(), Serdes.bytes(), transactional=transactional
    )
    return db, store


def bytes_level(store: KeyValueStore[bytes, bytes]) -> BytesKeyValueStore:
    """The engine's bytes store under a typed store."""
    return store.bytes_store  # type: ignore[no-any-return]


def open_quix(path: str) -> Any:
    """A standalone Quix Streams RocksDB store partition (no broker, no changelog)."""
    # Imported here, not at the top, so that the spill subprocess does not load it. Recording
    # the warnings hides the deprecation warning its dependencies emit at import time (a plain
    # "ignore" filter does not: authlib installs its own "always" filter while importing).
    with warnings.catch_warnings(record=True):
        from quixstreams.state.rocksdb import RocksDBOptions, RocksDBStorePartition

    return RocksDBStorePartition(
        os.path.join(path, "rocksdb"), RocksDBOptions(), changelog_producer=None
    )


def quix_load(partition: Any, items: Sequence[tuple[bytes, bytes]], offset: int) -> None:
    tx = partition.begin()
    set_bytes = tx.set_bytes
    for k, v in items:
        set_bytes(k, v, PREFIX)
    tx.prepare()
    tx.flush(changelog_offset=offset)


# --------------------------------------------------------------------------- put + commit


def put_commit_variants(
    data: Data, work: Workdir, nontx_keys: int
) -> tuple[dict[str, Callable[[], Phases]], dict[str, int]]:
    """Variants of the load: each opens a fresh empty store, times its puts and its commit,
    checks the result (untimed) and deletes the store. Also returns each variant's key count."""
    items = data.items
    n = len(items)

    def lmdb_put() -> Phases:
        path = work.fresh("lmdb")
        env = open_lmdb(path)
        try:
            t0 = now()
            txn = env.begin(write=True)
            put = txn.put
            for k, v in items:
                put(k, v)
            t1 = now()
            txn.commit()
            t2 = now()
            assert env.stat()["entries"] == n
        finally:
            env.close()
            shutil.rmtree(path)
        return {"put": t1 - t0, "commit": t2 - t1}

    def lmdb_append() -> Phases:
        path = work.fresh("lmdb-append")
        env = open_lmdb(path)
        try:
            t0 = now()
            rows = sorted(items, key=itemgetter(0))
            txn = env.begin(write=True)
            _, added = txn.cursor().putmulti(rows, False, True, True)
            t1 = now()
            txn.commit()
            t2 = now()
            assert added == n
        finally:
            env.close()
            shutil.rmtree(path)
        return {"put": t1 - t0, "commit": t2 - t1}

    def txstore_put(*, transactional: bool, sync: bool, typed: bool, mode: str) -> Phases:
        path = work.fresh("txstore")
        db, store = open_txstore(path, transactional=transactional, sync=sync)
        target: Any = store if typed else bytes_level(store)
        try:
            rows = items[:nontx_keys] if mode == "put-subset" else items
            t0 = now()
            if mode == "put_all":
                target.put_all(rows)
            else:
                put = target.put
                for k, v in rows:
                    put(k, v)
            t1 = now()
            target.commit(1)
            t2 = now()
            assert store.approximate_num_entries() == len(rows)
        finally:
            db.close()
            shutil.rmtree(path)
        return {"put": t1 - t0, "commit": t2 - t1}

    def lmdb_changelog_put() -> Phases:
        # what a task's put does at the least: the LMDB put and the changelog record, then
        # both committed (changelog first, synced)
        path = work.fresh("lmdb-changelog")
        env = open_lmdb(os.path.join(path, "data"))
        log = FileChangelog(os.path.join(path, "changelog"))
        try:
            t0 = now()
            txn = env.begin(write=True)
            put, append = txn.put, log.append
            for k, v in items:
                put(k, v)
                append(k, v, -1, b"")
            t1 = now()
            log.commit(1)
            txn.commit()
            t2 = now()
            assert env.stat()["entries"] == n and log.committed_end_offset == n
        finally:
            log.close()
            env.close()
            shutil.rmtree(path)
        return {"put": t1 - t0, "commit": t2 - t1}

    def task_put() -> Phases:
        path = work.fresh("task")
        with Task(path) as task:
            store = task.key_value_store(
                Stores.key_value_store_builder(
                    Stores.persistent_key_value_store(STORE), Serdes.bytes(), Serdes.bytes()
                )
            )
            task.initialize()
            t0 = now()
            put = store.put
            for k, v in items:
                put(k, v)
            t1 = now()
            task.commit(1)
            t2 = now()
            assert store.approximate_num_entries() == n
        shutil.rmtree(path)
        return {"put": t1 - t0, "commit": t2 - t1}

    def quix_put() -> Phases:
        path = work.fresh("quix")
        partition = open_quix(path)
        try:
            t0 = now()
            tx = partition.begin()
            set_bytes = tx.set_bytes
            for k, v in items:
                set_bytes(k, v, PREFIX)
            t1 = now()
            tx.prepare()
            tx.flush(changelog_offset=1)
            t2 = now()
            assert partition.get_changelog_offset() == 1
        finally:
            partition.close()
            shutil.rmtree(path)
        return {"put": t1 - t0, "commit": t2 - t1}

    def tx(transactional: bool, sync: bool, typed: bool, mode: str) -> Callable[[], Phases]:
        return lambda: txstore_put(transactional=transactional, sync=sync, typed=typed, mode=mode)

    variants: dict[str, Callable[[], Phases]] = {
        "lmdb: txn.put + commit": lmdb_put,
        "lmdb: sort + putmulti(append) + commit": lmdb_append,
        "txstore tx: put + commit": tx(True, True, True, "put"),
        "txstore tx: put + commit (bytes level)": tx(True, True, False, "put"),
        "txstore tx sync=False: put + commit": tx(True, False, True, "put"),
        "txstore non-tx: put_all + commit": tx(False, True, True, "put_all"),
        f"txstore non-tx: put() x {nontx_keys:,} + commit": tx(False, True, True, "put-subset"),
        "quix: set_bytes + prepare + flush": quix_put,
        LMDB_CHANGELOG: lmdb_changelog_put,
        TASK: task_put,
    }
    counts = {name: n for name in variants}
    counts[f"txstore non-tx: put() x {nontx_keys:,} + commit"] = nontx_keys
    return variants, counts


# --------------------------------------------------------------------------- reads


@dataclass
class Loaded:
    """The committed stores the get and scan sections read."""

    env: Any
    tx_db: Database
    tx: KeyValueStore[bytes, bytes]
    nontx_db: Database
    nontx: KeyValueStore[bytes, bytes]
    quix: Any

    def close(self) -> None:
        self.env.close()
        self.tx_db.close()
        self.nontx_db.close()
        self.quix.close()


def load_stores(data: Data, work: Workdir) -> Loaded:
    items = data.items
    env = open_lmdb(work.fresh("get-lmdb"))
    with env.begin(write=True) as txn:
        for k, v in items:
            txn.put(k, v)
    tx_db, tx = open_txstore(work.fresh("get-txstore"))
    tx.put_all(items)
    tx.commit(1)
    nontx_db, nontx = open_txstore(work.fresh("get-txstore-nontx"), transactional=False)
    nontx.put_all(items)
    nontx.commit(1)
    quix = open_quix(work.fresh("get-quix"))
    quix_load(quix, items, 1)
    return Loaded(env, tx_db, tx, nontx_db, nontx, quix)


def get_variants(data: Data, s: Loaded, lookup: list[bytes]) -> dict[str, Callable[[], object]]:
    env = s.env

    def lmdb_get() -> None:
        with env.begin() as txn:
            consume(map(txn.get, lookup))

    def lmdb_get_txn_each() -> None:
        begin = env.begin

        def get(key: bytes) -> bytes | None:
            txn = begin()
            try:
                value: bytes | None = txn.get(key)
                return value
            finally:
                txn.abort()

        consume(map(get, lookup))

    def quix_get() -> None:
        tx = s.quix.begin()
        consume(map(tx.get_bytes, lookup, repeat(PREFIX)))

    view = s.tx.read_committed()
    variants: dict[str, Callable[[], object]] = {
        "lmdb: get (one read txn)": lmdb_get,
        "lmdb: begin + get + abort per key": lmdb_get_txn_each,
        "txstore tx: get": lambda: consume(map(s.tx.get, lookup)),
        "txstore tx: get (bytes level)": lambda: consume(map(bytes_level(s.tx).get, lookup)),
        "txstore tx: read_committed().get": lambda: consume(map(view.get, lookup)),
        "txstore non-tx: get": lambda: consume(map(s.nontx.get, lookup)),
        "quix: tx.get_bytes": quix_get,
        "quix: partition.get (below the tx API)": lambda: consume(map(s.quix.get, lookup)),
    }
    # Check every variant finds every value (untimed).
    expected = dict(data.items)
    quix_tx = s.quix.begin()
    with env.begin() as txn:
        for k in lookup[:1000]:
            v = expected[k]
            assert txn.get(k) == s.tx.get(k) == s.nontx.get(k) == view.get(k) == v
            assert quix_tx.get_bytes(k, PREFIX) == v
    return variants


def stage_scan_overlay(data: Data, store: KeyValueStore[bytes, bytes]) -> int:
    """Change 10% of the committed keys in the overlay; return the expected row count."""
    for k, v in data.updates:
        store.put(k, v)
    for k in data.deletes:
        store.delete(k)
    for k, v in data.inserts:
        store.put(k, v)
    return len(data.items) - len(data.deletes) + len(data.inserts)


def scan_variants(s: Loaded) -> dict[str, Callable[[], object]]:
    env = s.env
    inner = bytes_level(s.tx)
    view = inner.read_committed()

    def lmdb_scan() -> None:
        with env.begin() as txn:
            consume(txn.cursor().iternext())

    return {
        "lmdb: cursor.iternext() (committed only)": lmdb_scan,
        "txstore tx: all(), merged (bytes level)": lambda: consume(inner.all()),
        "txstore tx: reverse_all(), merged (bytes level)": lambda: consume(inner.reverse_all()),
        "txstore tx: all(), merged (typed)": lambda: consume(s.tx.all()),
        "txstore tx: read_committed().all() (bytes level)": lambda: consume(view.all()),
    }


# --------------------------------------------------------------------------- recover


def load_sorted(store: KeyValueStore[bytes, bytes], n: int, tag: int) -> int:
    """Commit ``n`` ascending keys in batches; returns the last committed offset."""
    pool = [random.Random(tag).randbytes(VALUE_SIZE) for _ in range(1024)]
    keys = sorted_keys(n, tag)
    offset = 0
    done = 0
    put = store.put
    while done < n:
        m = min(LOAD_BATCH, n - done)
        for i in range(done, done + m):
            put(next(keys), pool[i & 1023])
        offset += 1
        store.commit(offset)
        done += m
    return offset


def recover_variant(
    store: KeyValueStore[bytes, bytes], overlay: Sequence[tuple[bytes, bytes]], offset: int
) -> Callable[[], Phases]:
    def run() -> Phases:
        put = store.put
        for k, v in overlay:
            put(k, v)
        assert store.approximate_num_uncommitted_bytes() > 0
        t0 = now()
        ok = store.recover(offset)
        t1 = now()
        assert ok and store.approximate_num_uncommitted_bytes() == 0
        return {"recover": t1 - t0}

    return run


# --------------------------------------------------------------------------- spill RSS


def _status_kib() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile in KiB from /proc/self/status (Linux); else psutil."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}
    except (OSError, KeyError):
        import psutil

        rss = int(psutil.Process().memory_info().rss) // 1024
        return {"VmRSS": rss, "VmHWM": rss, "RssAnon": rss, "RssFile": 0}


def spill_child(path: str, n: int, budget: int, commit: bool) -> dict[str, Any]:
    """Run in a fresh process: hold ``n`` uncommitted puts under ``budget`` and report RSS."""
    db, store = open_txstore(path, overlay_budget_bytes=budget)
    mult = 0x9E3779B97F4A7C15F39CC0605CEDC835  # odd: i -> i * mult mod 2**128 is a bijection
    mask = 2**128 - 1
    put = store.put
    # Warm up allocator and LMDB with a small committed batch, so the baseline is the store
    # ready for work, not a half-imported interpreter.
    for i in range(1000):
        k = ((i + n) * mult & mask).to_bytes(16, "big")
        put(k, k * 6 + k[:4])
    store.commit(1)
    base = _status_kib()
    peak = dict(base)
    written = _wchar()
    t0 = time.perf_counter()
    for i in range(n):
        k = (i * mult & mask).to_bytes(16, "big")
        put(k, k * 6 + k[:4])  # a fresh 100-byte value per key
        if i % 50_000 == 0:
            cur = _status_kib()
            for f in ("VmRSS", "RssAnon", "RssFile"):
                peak[f] = max(peak[f], cur[f])
    put_s = time.perf_counter() - t0
    written = _wchar() - written
    held = _status_kib()
    for f in ("VmRSS", "RssAnon", "RssFile"):
        peak[f] = max(peak[f], held[f])
    result: dict[str, Any] = {
        "n": n,
        "budget": budget,
        "put_s": put_s,
        "base": base,
        "held": held,
        "peak": peak,
        "hwm": held["VmHWM"],
        "uncommitted_bytes": store.approximate_num_uncommitted_bytes(),
        "spill_file": _du(os.path.join(path, "spill")),
        "written": written,
    }
    if commit:
        t0 = time.perf_counter()
        store.commit(2)
        result["commit_s"] = time.perf_counter() - t0
        result["commit_hwm"] = _status_kib()["VmHWM"]
        assert store.approximate_num_entries() == n + 1000
    db.close()
    return result


def _wchar() -> int:
    """Bytes this process passed to write() and friends so far (Linux; else 0)."""
    try:
        with open("/proc/self/io") as f:
            return int(dict(line.split(":", 1) for line in f)["wchar"])
    except (OSError, KeyError, ValueError):
        return 0


def _du(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def run_spill_child(work: Workdir, n: int, budget: int, commit: bool) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--spill-child",
        work.fresh("spill"),
        str(n),
        str(budget),
        "1" if commit else "0",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- output


def kops(ns_per_item: float) -> str:
    """Operations per second, in thousands, from ns per operation."""
    return f"{1e6 / ns_per_item:,.0f}k"


def noise(timings: Mapping[str, Timing] | Timing) -> str:
    t = timings["total"] if isinstance(timings, Mapping) else timings
    return f"{100 * t.spread:.0f}%"


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


@dataclass
class Config:
    quick: bool
    n: int
    rounds: int
    get_keys: int  # keys looked up per get sample (a prefix of the shuffled lookup order)
    nontx_keys: int
    recover_large: int
    recover_small: int
    recover_rounds: int
    scan_target_ns: int
    spill_n: int
    spill_commit: bool


@dataclass
class Figures:
    put_commit_vs_lmdb: float = 0.0
    put_commit_vs_quix: float = 0.0
    get_vs_lmdb: float = 0.0
    get_vs_quix: float = 0.0
    scan_rows_per_s: float = 0.0
    recover_ratio: float = 0.0
    spill_growth_mib: float = 0.0
    task_put_commit_vs_lmdb_changelog: float = 0.0
    #: every section's timings (``{variant: Timing}`` or ``{variant: {phase: Timing}}``) and the
    #: spill child's readings, for the JSON record
    timings: dict[str, tuple[Mapping[str, Any], str]] = field(default_factory=dict)
    spill: dict[str, Any] = field(default_factory=dict)

    def goals(self) -> list[tuple[str, float, bool]]:
        return [
            ("put+commit vs lmdb >= 0.7", self.put_commit_vs_lmdb, self.put_commit_vs_lmdb >= 0.7),
            ("put+commit vs quix >= 1.5", self.put_commit_vs_quix, self.put_commit_vs_quix >= 1.5),
            ("get vs lmdb >= 0.75", self.get_vs_lmdb, self.get_vs_lmdb >= 0.75),
            ("get vs quix >= 3", self.get_vs_quix, self.get_vs_quix >= 3),
            ("merged scan >= 2,000,000 rows/s", self.scan_rows_per_s, self.scan_rows_per_s >= 2e6),
            ("recover large/small <= 1.5", self.recover_ratio, self.recover_ratio <= 1.5),
            ("spill RSS growth <= 64 MiB", self.spill_growth_mib, self.spill_growth_mib <= 64),
        ]

    def record(self, record: Record) -> None:
        """The timings and the eight figures, into ``record``."""
        for section, (timings, per) in self.timings.items():
            record.add_timings(section, timings, per=per)
        if self.spill:
            record.details["spill"] = self.spill
        put_commit = ["put_commit/txstore tx: put + commit/total"]
        record.figure(
            "kv_put_commit_vs_lmdb",
            self.put_commit_vs_lmdb,
            "x",
            based_on=["put_commit/lmdb: txn.put + commit/total", *put_commit],
        )
        record.figure(
            "kv_put_commit_vs_quix",
            self.put_commit_vs_quix,
            "x",
            based_on=["put_commit/quix: set_bytes + prepare + flush/total", *put_commit],
        )
        record.figure(
            "kv_get_vs_lmdb",
            self.get_vs_lmdb,
            "x",
            based_on=["get/lmdb: get (one read txn)", "get/txstore tx: get"],
        )
        record.figure(
            "kv_get_vs_quix",
            self.get_vs_quix,
            "x",
            based_on=["get/quix: tx.get_bytes", "get/txstore tx: get"],
        )
        record.figure(
            "kv_merged_scan_rows_per_s",
            self.scan_rows_per_s,
            "rows/s",
            digits=0,
            based_on=["scan/txstore tx: all(), merged (bytes level)"],
        )
        record.figure("recover_ms_ratio_large_small", self.recover_ratio, "x", based_on=["recover"])
        record.figure("spill_rss_growth_mib", self.spill_growth_mib, "MiB", digits=1)
        record.figure(
            "kv_task_put_commit_vs_lmdb_changelog",
            self.task_put_commit_vs_lmdb_changelog,
            "x",
            based_on=[f"put_commit/{LMDB_CHANGELOG}/total", f"put_commit/{TASK}/total"],
        )


def section_put_commit(cfg: Config, data: Data, work: Workdir, fig: Figures) -> None:
    variants, counts = put_commit_variants(data, work, cfg.nontx_keys)
    staged = compare_staged(variants, 1, cfg.rounds, warmup=1)
    pc = {name: {p: t.scaled(counts[name]) for p, t in ph.items()} for name, ph in staged.items()}
    fig.timings["put_commit"] = (pc, "key")
    lmdb_ns = pc["lmdb: txn.put + commit"]["total"].median_ns
    quix_ns = pc["quix: set_bytes + prepare + flush"]["total"].median_ns
    print()
    print(f"Put {cfg.n:,} keys into an empty store, then commit (a fresh store every round)")
    print("  put, commit: ns per key; ops/s = keys / (put + commit); vs = throughput ratio")
    print(LEVELS)
    print(
        table(
            ["variant", "keys", "put", "commit", "ops/s", "vs lmdb", "vs quix", "noise"],
            [
                [
                    name,
                    f"{counts[name]:,}",
                    f"{t['put'].median_ns:,.0f}",
                    f"{t['commit'].median_ns:,.0f}",
                    kops(t["total"].median_ns),
                    fmt_ratio(ratio(lmdb_ns, t["total"].median_ns)),
                    fmt_ratio(ratio(quix_ns, t["total"].median_ns)),
                    noise(t),
                ]
                for name, t in pc.items()
            ],
        )
    )
    tx_ns = pc["txstore tx: put + commit"]["total"].median_ns
    fast_ns = pc["txstore tx sync=False: put + commit"]["total"].median_ns
    print(
        "  Quix's flush does not fsync; at the same durability txstore sync=False / quix = "
        f"{fmt_ratio(ratio(quix_ns, fast_ns))}"
    )
    fig.put_commit_vs_lmdb = lmdb_ns / tx_ns
    fig.put_commit_vs_quix = quix_ns / tx_ns
    task, base = pc[TASK], pc[LMDB_CHANGELOG]
    fig.task_put_commit_vs_lmdb_changelog = base["total"].median_ns / task["total"].median_ns
    print(
        f"  a task's put: {task['put'].median_ns:,.0f} ns (LMDB put + changelog append: "
        f"{base['put'].median_ns:,.0f} ns); put + commit, task vs that: "
        f"{fmt_ratio(fig.task_put_commit_vs_lmdb_changelog)}"
    )


def section_reads(cfg: Config, data: Data, work: Workdir, fig: Figures) -> None:
    stores = load_stores(data, work)
    try:
        lookup = data.lookup[: cfg.get_keys]
        gets = compare(
            get_variants(data, stores, lookup),
            len(lookup),
            Settings(repeats=cfg.rounds, target_ns=1, warmup=1),
        )
        lmdb_ns = gets["lmdb: get (one read txn)"].median_ns
        quix_ns = gets["quix: tx.get_bytes"].median_ns
        print()
        print(
            f"Get {len(lookup):,} of the {cfg.n:,} committed keys, in another random order "
            "(overlay empty)"
        )
        print(LEVELS)
        print(
            table(
                ["variant", "ns/get", "gets/s", "vs lmdb", "vs quix", "noise"],
                [
                    [
                        name,
                        f"{t.median_ns:,.0f}",
                        kops(t.median_ns),
                        fmt_ratio(ratio(lmdb_ns, t.median_ns)),
                        fmt_ratio(ratio(quix_ns, t.median_ns)),
                        noise(t),
                    ]
                    for name, t in gets.items()
                ],
            )
        )
        tx_ns = gets["txstore tx: get"].median_ns
        fig.timings["get"] = (gets, "get")
        fig.get_vs_lmdb = lmdb_ns / tx_ns
        fig.get_vs_quix = quix_ns / tx_ns

        rows = stage_scan_overlay(data, stores.tx)
        with bytes_level(stores.tx).all() as it:
            assert sum(1 for _ in it) == rows
        scans = compare(
            scan_variants(stores),
            rows,
            Settings(repeats=cfg.rounds, target_ns=cfg.scan_target_ns, warmup=1),
        )
    finally:
        stores.close()
    lmdb_ns = scans["lmdb: cursor.iternext() (committed only)"].median_ns
    print()
    print(
        f"Full scan: {cfg.n:,} committed keys; the overlay changes {cfg.n // 10:,} of them "
        f"({len(data.updates):,} updates, {len(data.deletes):,} deletes, "
        f"{len(data.inserts):,} inserts): {rows:,} rows"
    )
    print(
        table(
            ["variant", "ns/row", "rows/s", "vs lmdb", "noise"],
            [
                [
                    name,
                    f"{t.median_ns:,.1f}",
                    f"{1e9 / t.median_ns:,.0f}",
                    fmt_ratio(ratio(lmdb_ns, t.median_ns)),
                    noise(t),
                ]
                for name, t in scans.items()
            ],
        )
    )
    fig.timings["scan"] = (scans, "row")
    fig.scan_rows_per_s = 1e9 / scans["txstore tx: all(), merged (bytes level)"].median_ns


def section_recover(cfg: Config, data: Data, work: Workdir, fig: Figures) -> None:
    t0 = time.perf_counter()
    dbs: list[Database] = []
    variants: dict[str, Callable[[], Phases]] = {}
    try:
        for label, size, tag in (
            ("large", cfg.recover_large, 1),
            ("small", cfg.recover_small, 2),
        ):
            db, store = open_txstore(work.fresh(f"recover-{label}"), map_size=MAP_SIZE)
            dbs.append(db)
            offset = load_sorted(store, size, tag)
            variants[f"{size:,} committed keys"] = recover_variant(store, data.overlay, offset)
        load_s = time.perf_counter() - t0
        rec = compare_staged(variants, 1, cfg.recover_rounds, warmup=2)
    finally:
        for db in dbs:
            db.close()
    print()
    print(
        f"recover(offset): discard {len(data.overlay):,} uncommitted puts "
        f"({cfg.recover_rounds} interleaved rounds; the stores loaded in {load_s:.1f} s)"
    )
    if cfg.quick:
        print(f"  --quick: the large store has {cfg.recover_large:,} keys, not 2,000,000")
    print(
        table(
            ["store", "median ms", "min ms", "max ms"],
            [
                [
                    name,
                    f"{t['recover'].median_ns / 1e6:.3f}",
                    f"{t['recover'].min_ns / 1e6:.3f}",
                    f"{t['recover'].max_ns / 1e6:.3f}",
                ]
                for name, t in rec.items()
            ],
        )
    )
    fig.timings["recover"] = (rec, "recover() call")
    large, small = (t["recover"].median_ns for t in rec.values())
    fig.recover_ratio = large / small


def section_spill(cfg: Config, work: Workdir, fig: Figures) -> None:
    sp = run_spill_child(work, cfg.spill_n, SPILL_BUDGET, cfg.spill_commit)
    base, peak, budget_mib = sp["base"], sp["peak"], sp["budget"] / MiB
    print()
    print(
        f"Spill, in a fresh subprocess: {sp['n']:,} uncommitted puts of distinct pseudo-random "
        f"{KEY_SIZE}-byte keys and {VALUE_SIZE}-byte values under a {budget_mib:.0f} MiB overlay "
        f"budget: {sp['put_s']:.1f} s ({sp['n'] / sp['put_s'] / 1e3:,.0f}k puts/s)"
    )
    print("  RSS from /proc/self/status (VmRSS = RssAnon + RssFile + RssShmem), sampled")
    print(
        table(
            ["MiB", "before puts", "peak while putting", "growth", "growth - budget"],
            [
                [
                    f,
                    f"{base[f] / 1024:.1f}",
                    f"{peak[f] / 1024:.1f}",
                    f"{(peak[f] - base[f]) / 1024:.1f}",
                    f"{(peak[f] - base[f]) / 1024 - budget_mib:.1f}",
                ]
                for f in ("VmRSS", "RssAnon", "RssFile")
            ],
        )
    )
    raw_mib = sp["n"] * (KEY_SIZE + VALUE_SIZE) / MiB
    print(
        f"  keys + values {raw_mib:,.0f} MiB; uncommitted_bytes estimate "
        f"{sp['uncommitted_bytes'] / MiB:,.0f} MiB; spill environment on disk "
        f"{sp['spill_file'] / MiB:,.0f} MiB; written through write() while putting "
        f"{sp['written'] / MiB:,.0f} MiB ({sp['written'] / MiB / raw_mib:.1f}x the keys + values)"
    )
    if "commit_s" in sp:
        print(
            f"  then commit(2) of all of it: {sp['commit_s']:.1f} s; peak RSS (VmHWM) "
            f"{sp['commit_hwm'] / 1024:,.0f} MiB, against {sp['hwm'] / 1024:,.0f} MiB before "
            "the commit (not part of the figure)"
        )
    fig.spill = dict(sp)
    fig.spill_growth_mib = (peak["VmRSS"] - base["VmRSS"]) / 1024 - budget_mib


# --------------------------------------------------------------------------- checksums


@dataclass
class ChecksumFigures:
    """Entry checksums on against off (issue 24): time with / time without, and the bytes a
    checksum adds to each stored entry."""

    get: float = 0.0
    put_commit: float = 0.0
    scan: float = 0.0
    bytes_per_entry: float = 0.0
    timings: dict[str, tuple[Mapping[str, Any], str]] = field(default_factory=dict)

    def record(self, record: Record) -> None:
        for section, (timings, per) in self.timings.items():
            record.add_timings(section, timings, per=per)
        for name, value in (
            ("checksum_get_overhead", self.get),
            ("checksum_put_commit_overhead", self.put_commit),
            ("checksum_scan_overhead", self.scan),
        ):
            series = "checksums_" + name.removeprefix("checksum_").removesuffix("_overhead")
            record.figure(name, value, "x", digits=3, based_on=[series])
        record.figure("checksum_bytes_per_entry", self.bytes_per_entry, "B", digits=1)


def _stored_value_bytes(path: str) -> tuple[int, int]:
    """(entries, stored value bytes) of the benchmark store, read raw with py-lmdb."""
    env = lmdb.open(os.path.join(path, "data"), readonly=True, lock=False, max_dbs=8)
    try:
        with env.begin() as txn:
            cur = txn.cursor(env.open_db(STORE.encode(), txn=txn, create=False))
            sizes = [len(v) for v in cur.iternext(keys=False)]
    finally:
        env.close()
    return len(sizes), sum(sizes)


def section_checksums(cfg: Config, data: Data, work: Workdir, ck: ChecksumFigures) -> None:
    """The same store with entry checksums (the default) and without (``checksums=False``,
    the legacy layout), side by side: typed put + commit, typed get, bytes-level scan of the
    committed store, and the stored bytes per entry."""
    n = min(cfg.n, 100_000)
    items = data.items[:n]
    label = {True: "checksums on", False: "checksums off"}
    both = (True, False)

    def put_commit(on: bool) -> Callable[[], Phases]:
        def run() -> Phases:
            path = work.fresh(f"ck-put-{on}")
            db, store = open_txstore(path, checksums=on)
            try:
                t0 = now()
                for k, v in items:
                    store.put(k, v)
                t1 = now()
                store.commit(1)
                t2 = now()
            finally:
                db.close()
            return {"put": t1 - t0, "commit": t2 - t1}

        return run

    puts = compare_staged({label[on]: put_commit(on) for on in both}, n, cfg.rounds)
    paths: dict[bool, str] = {}
    stores: dict[bool, KeyValueStore[bytes, bytes]] = {}
    dbs: list[Database] = []
    try:
        for on in both:
            paths[on] = work.fresh(f"ck-read-{on}")
            db, store = open_txstore(paths[on], checksums=on)
            dbs.append(db)
            for i in range(0, n, LOAD_BATCH):
                store.put_all(items[i : i + LOAD_BATCH])
                store.commit(i + 1)
            assert store.get(items[0][0]) == items[0][1]
            stores[on] = store
        lookup = [k for k, _ in items]
        random.Random(7).shuffle(lookup)
        lookup = lookup[: cfg.get_keys]

        def get(store: KeyValueStore[bytes, bytes]) -> Callable[[], None]:
            return lambda: consume(map(store.get, lookup))

        def scan(store: KeyValueStore[bytes, bytes]) -> Callable[[], None]:
            inner = bytes_level(store)
            return lambda: consume(inner.all())

        gets = compare(
            {label[on]: get(stores[on]) for on in both},
            len(lookup),
            Settings(repeats=cfg.rounds, target_ns=1, warmup=1),
        )
        scans = compare(
            {label[on]: scan(stores[on]) for on in both},
            n,
            Settings(repeats=cfg.rounds, target_ns=cfg.scan_target_ns, warmup=1),
        )
    finally:
        for db in dbs:
            db.close()
    (n_on, bytes_on), (n_off, bytes_off) = (_stored_value_bytes(paths[on]) for on in both)
    assert n_on == n_off == n
    ck.bytes_per_entry = (bytes_on - bytes_off) / n
    ck.put_commit = puts[label[True]]["total"].median_ns / puts[label[False]]["total"].median_ns
    ck.get = gets[label[True]].median_ns / gets[label[False]].median_ns
    ck.scan = scans[label[True]].median_ns / scans[label[False]].median_ns
    ck.timings["checksums_put_commit"] = (puts, "put")
    ck.timings["checksums_get"] = (gets, "get")
    ck.timings["checksums_scan"] = (scans, "row")
    print()
    print(
        f"Entry checksums on / off ({n:,} keys; CRC32C trailer of 4 bytes, checked on every "
        "read): typed put + commit (fsync), typed get, bytes-level scan of committed data"
    )
    rows: list[tuple[str, Timing, bool]] = []
    for on in both:
        rows.append(("put + commit", puts[label[on]]["total"], on))
    rows += [("get", gets[label[on]], on) for on in both]
    rows += [("scan (committed)", scans[label[on]], on) for on in both]
    print(
        table(
            ["operation", "variant", "ns/item", "noise"],
            [[op, label[on], f"{t.median_ns:,.1f}", noise(t)] for op, t, on in rows],
        )
    )
    print(f"  stored value bytes per entry: +{ck.bytes_per_entry:.1f} with checksums")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run (under a minute)")
    parser.add_argument("--keys", type=int, default=200_000, help="keys of the workload")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds (override)")
    parser.add_argument("--dir", default=None, help="parent of the scratch directory")
    parser.add_argument("--spill-child", nargs=4, help=argparse.SUPPRESS)
    add_json_argument(parser, "kv")
    args = parser.parse_args(argv)

    if args.spill_child:
        path, n, budget, commit = args.spill_child
        print(json.dumps(spill_child(path, int(n), int(budget), commit == "1")))
        return 0

    n = args.keys
    if args.quick:
        cfg = Config(
            True, n, 3, min(n, 50_000), 500, 1_000_000, 100_000, 9, 60_000_000, 2_000_000, False
        )
    else:
        cfg = Config(False, n, 7, n, 5_000, 2_000_000, 100_000, 21, 300_000_000, 2_000_000, True)
    if args.rounds:
        cfg.rounds = args.rounds
    record = Record(
        "kv",
        quick=cfg.quick,
        workload={k: v for k, v in vars(cfg).items() if k != "quick"}
        | {"key_bytes": KEY_SIZE, "value_bytes": VALUE_SIZE, "spill_budget": SPILL_BUDGET},
        argv=argv,
    )
    started = time.perf_counter()
    print(
        f"txstore key-value benchmark ({'quick' if args.quick else 'full'}): "
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; py-lmdb {lmdb.__version__}"
    )
    print(
        f"workload: {n:,} distinct random {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values, "
        f"random order; {cfg.rounds} interleaved rounds, medians; GC off in timed sections"
    )
    fig = Figures()
    ck = ChecksumFigures()
    work = Workdir(args.dir)
    try:
        data = Data.make(n)
        sections: list[tuple[str, Callable[[], None]]] = [
            ("put + commit", lambda: section_put_commit(cfg, data, work, fig)),
            ("get + scan", lambda: section_reads(cfg, data, work, fig)),
            ("recover", lambda: section_recover(cfg, data, work, fig)),
            ("spill", lambda: section_spill(cfg, work, fig)),
            ("checksums", lambda: section_checksums(cfg, data, work, ck)),
        ]
        took = []
        for label, section in sections:
            t0 = time.perf_counter()
            section()
            took.append(f"{label} {time.perf_counter() - t0:.0f} s")
    finally:
        work.cleanup()
    print()
    print("Goals (figures: the typed store with bytes serdes; the scan figure: bytes level)")
    for label, value, ok in fig.goals():
        print(f"  {label:34s} {value:>14,.2f}  {'met' if ok else 'MISSED'}")
    for label, value, goal in (
        ("checksum get overhead <= 1.05", ck.get, 1.05),
        ("checksum put+commit overhead <= 1.05", ck.put_commit, 1.05),
        ("checksum scan overhead <= 1.05", ck.scan, 1.05),
        ("checksum bytes per entry <= 4", ck.bytes_per_entry, 4),
    ):
        print(f"  {label:34s} {value:>14,.3f}  {'met' if value <= goal else 'MISSED'}")
    print()
    print(
        f"elapsed {time.perf_counter() - started:.0f} s ({', '.join(took)}), "
        f"load {os.getloadavg()[0]:.2f}"
    )
    fig.record(record)
    ck.record(record)
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
