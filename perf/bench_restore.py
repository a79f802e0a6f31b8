"""Restore benchmark: txstore's changelog replay (``Task.initialize()``) against Quix Streams'.

Issue 5. A store that lost its local state (a new machine, a wiped disk, a corrupted store) is
rebuilt by replaying its whole changelog; this measures how fast, in changelog records per
second, on the same records for both libraries. Everything runs in one process, interleaved
(see ``_harness.compare_staged``): each round restores every variant once, in a rotated order,
and each variant's figure is the median over the rounds.

Workloads (seeded), ``N`` = 1,000,000 changelog records per store (``--quick``: 200,000):

* **timestamped key-value store**: 16-byte random keys drawn from ``0.6 N`` distinct ones (so
  about a third of the records overwrite an earlier one), 100-byte random (incompressible)
  values, increasing record timestamps, 2% tombstones.
* **window store**: changelog keys ``[key 16][window start 8][seq 4]`` (Kafka's window key
  schema, seq 0), 100-byte values, record timestamps increasing over 10 tumbling windows of
  5 minutes (a 1-hour retention keeps them all live, in two 30-minute segments); ``N / 20``
  distinct record keys, so each window of a key is updated about twice, as an aggregation
  does.

txstore: the changelogs are written with :class:`~txstore.changelog.log.FileChangelog` directly
(what a task would have logged: the plain value, the stored timestamp as the record timestamp,
a task commit marker every 1,000 records). Each restore starts from a wiped partition directory
(everything but ``changelog/`` removed, so the LMDB environment is new and the whole changelog
is replayed) and runs the product path: ``Task(path)`` and the store
(``Stores.persistent_timestamped_key_value_store`` / ``persistent_timestamped_window_store``
with ``Serdes.bytes()``) = **open**; ``Task.initialize()`` = **restore** (recover, read the
changelog in columnar batches; key-value: the store is empty and the changelog longer than one
batch, so the sorted restore (``bytestores/restore_runs.py``: each batch made into a sorted run
by one C pass over the changelog's buffers, the runs merged into ONE synced LMDB commit);
window: convert, ``SegmentedBytesStore.restore`` and commit, one LMDB commit per
``RESTORE_BATCH`` records);
``Task.close()`` = **close**. ``sync=True`` (txstore's default: each restore commit is
fsynced) gives the figures; ``sync=False`` (what Quix's RocksDB writes promise: no sync) is shown
as a reference. The ``instrumented`` rows are the same run with timers around the four stages
of the restore loop (see :class:`Probe`): they say where the time goes.

Quix Streams, standalone (no broker): a fresh ``RocksDBStorePartition`` (windows:
``WindowedRocksDBStorePartition``) under a ``RecoveryPartition``, and for every changelog
record ``RecoveryPartition.recover_from_changelog_message(msg)``, what Quix's recovery loop
calls per consumed message: it parses the message headers (column family, processed offsets),
checks the processed offset and writes the record plus the changelog offset as one RocksDB
``WriteBatch`` (no sync). Then ``complete_recovery()`` and ``close()``. The messages are built
before the timed part (``msg.key()``, ``value()``, ``offset()``, ``headers()`` with the headers
Quix's changelog producer writes); consuming them from Kafka is not timed at all, while
txstore's figure includes reading and checking its changelog files, so the ratio favours Quix.
Quix's keys are the same bytes for the key-value store and Quix's own window key layout
(``key|start|end``) for the window store; the values are the same. Quix's key-value partition
(not its windowed one) also records each replayed key in its ``__ttl_backfill_pending__``
column family, in the same ``WriteBatch`` (its legacy-TTL migration census, emptied by
``complete_recovery()``): that is its restore path as shipped, so it is timed.

Run ``python perf/bench_restore.py [--quick] [--profile] [--json PATH]``. ``--profile`` adds a
cProfile of one txstore restore of each store. The output ends with
``figure: restore_records_per_s = <n> rec/s`` (txstore, timestamped key-value store, durable
default, open + restore + close) and ``figure: restore_vs_quix = <x> x`` (txstore records/s over
Quix's on the same key-value records; goal >= 3), then ``figure: restore_window_vs_quix = <x> x``
(the same ratio for the window store, held to the same goal). The JSON record (``_record.py``;
default ``perf/out/restore.json``) holds them, every round's phase timings and the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import random
import shutil
import struct
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from _harness import Timing, compare_staged, fmt_ns, fmt_ratio, table
from _record import Record, add_json_argument

# Submodules, not ``import txstore``: the editable install registers ``txstore`` as a namespace
# package, so its ``__init__`` is not loaded when run from perf/.
import txstore.codecs
from txstore.bytestores.restore_runs import SortedRuns
from txstore.changelog.log import FileChangelog
from txstore.runtime.task import (
    CHANGELOG_ADDITIONAL_RETENTION_MS,
    RESTORE_BATCH,
    Task,
    _commit_metadata,
)
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes

KEY_SIZE = 16
VALUE_SIZE = 100
DISTINCT_KEY_SHARE = 0.6  # key-value store: distinct keys / records
TOMBSTONE_SHARE = 0.02
COMMIT_EVERY = 1_000  # records per task commit in the changelogs
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00Z, a multiple of the window size
WINDOW_SIZE = 5 * 60_000
WINDOWS = 10
RETENTION = 3_600_000
KEYS_PER_WINDOW_RECORDS = 20  # window store: records / distinct record keys
CHECKS = 2_000  # restored keys compared with the expected final state after every restore
KV, WINDOW = "kv", "window"
QUIX_TOPIC = "input"  # the input topic named in Quix's processed-offsets header
_QI = struct.Struct(">qI")
Phases = dict[str, int]


def now() -> int:
    return time.perf_counter_ns()


# --------------------------------------------------------------------------- workloads


@dataclass
class Workload:
    """One store's changelog records, in both libraries' key layouts, and a sample of the
    final state (``expected``: the last value and timestamp of a key, None if deleted)."""

    kind: str
    keys: list[bytes]  # txstore changelog keys (the store keys)
    quix_keys: list[bytes]  # the same records' keys in Quix's layout
    values: list[bytes | None]
    stamps: list[int]
    expected: list[tuple[Any, bytes, tuple[bytes, int] | None]]  # (lookup, quix key, state)

    def __len__(self) -> int:
        return len(self.keys)


def distinct_keys(rng: random.Random, n: int) -> list[bytes]:
    keys: dict[bytes, None] = {}
    while len(keys) < n:
        raw = rng.randbytes(KEY_SIZE * (n - len(keys)))
        keys.update(dict.fromkeys(raw[i : i + KEY_SIZE] for i in range(0, len(raw), KEY_SIZE)))
    return list(keys)


def random_values(rng: random.Random, n: int) -> list[bytes]:
    blob = rng.randbytes(VALUE_SIZE * n)
    return [blob[i : i + VALUE_SIZE] for i in range(0, len(blob), VALUE_SIZE)]


def make_kv(n: int, seed: int = 20260605) -> Workload:
    rng = random.Random(seed)
    pool = distinct_keys(rng, max(1, int(n * DISTINCT_KEY_SHARE)))
    keys = rng.choices(pool, k=n)
    values: list[bytes | None] = list(random_values(rng, n))
    for i in rng.sample(range(n), int(n * TOMBSTONE_SHARE)):
        values[i] = None
    stamps = [BASE_MS + i for i in range(n)]
    final: dict[bytes, tuple[bytes, int] | None] = {}
    for k, v, ts in zip(keys, values, stamps, strict=True):
        final[k] = None if v is None else (v, ts)
    sample = rng.sample(sorted(final), min(CHECKS, len(final)))
    expected = [(k, k, final[k]) for k in sample]
    return Workload(KV, keys, keys, values, stamps, expected)


def make_window(n: int, seed: int = 20260606) -> Workload:
    with quiet_imports():
        from quixstreams.state.metadata import SEPARATOR
        from quixstreams.state.serialization import encode_integer_pair

    rng = random.Random(seed)
    pool = distinct_keys(rng, max(1, n // KEYS_PER_WINDOW_RECORDS))
    record_keys = rng.choices(pool, k=n)
    values: list[bytes | None] = list(random_values(rng, n))
    span = WINDOWS * WINDOW_SIZE
    stamps = [BASE_MS + i * span // n for i in range(n)]
    keys: list[bytes] = []
    quix_keys: list[bytes] = []
    final: dict[tuple[bytes, int], tuple[bytes, int]] = {}
    qkey: dict[tuple[bytes, int], bytes] = {}
    for k, v, ts in zip(record_keys, values, stamps, strict=True):
        start = ts - (ts - BASE_MS) % WINDOW_SIZE
        keys.append(k + _QI.pack(start, 0))
        q = k + SEPARATOR + encode_integer_pair(start, start + WINDOW_SIZE)
        quix_keys.append(q)
        assert v is not None
        final[k, start] = (v, ts)
        qkey[k, start] = q
    sample = rng.sample(sorted(final), min(CHECKS, len(final)))
    expected: list[tuple[Any, bytes, tuple[bytes, int] | None]]
    expected = [(ks, qkey[ks], final[ks]) for ks in sample]
    return Workload(WINDOW, keys, quix_keys, values, stamps, expected)


# --------------------------------------------------------------------------- txstore


def open_store(task: Task, kind: str) -> Any:
    if kind == KV:
        return task.key_value_store(
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store(KV), Serdes.bytes(), Serdes.bytes()
            )
        )
    return task.window_store(
        Stores.timestamped_window_store_builder(
            Stores.persistent_timestamped_window_store(WINDOW, RETENTION, WINDOW_SIZE, False),
            Serdes.bytes(),
            Serdes.bytes(),
        )
    )


def write_changelog(task_dir: str, w: Workload) -> None:
    """The changelog a task with this store would have written (no fsync: set-up only)."""
    options: dict[str, Any] = {"cleanup_policy": "compact"}
    if w.kind == WINDOW:
        options = {
            "cleanup_policy": "compact,delete",
            "retention_ms": RETENTION + CHANGELOG_ADDITIONAL_RETENTION_MS,
        }
    path = os.path.join(task_dir, "changelog", w.kind)
    with FileChangelog(path, fsync=False, **options) as log:
        append = log.append
        keys, values, stamps = w.keys, w.values, w.stamps
        n = len(w)
        for seq, start in enumerate(range(0, n, COMMIT_EVERY), 1):
            stop = min(n, start + COMMIT_EVERY)
            for i in range(start, stop):
                append(keys[i], values[i], stamps[i])
            log.commit(stop, _commit_metadata(seq, [w.kind]))
        assert log.committed_end_offset == n


def wipe_state(task_dir: str) -> None:
    """Remove everything but the changelogs: the next open creates a new LMDB environment."""
    for name in os.listdir(task_dir):
        if name != "changelog":
            path = os.path.join(task_dir, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def check_txstore(store: Any, w: Workload) -> None:
    for lookup, _, state in w.expected:
        got = store.get(lookup) if w.kind == KV else store.fetch(lookup[0], lookup[1])
        want = None if state is None else (state[0], state[1])
        have = None if got is None else (got.value, got.timestamp)
        if have != want:
            raise AssertionError(f"txstore {w.kind}: {lookup!r} restored as {have!r}, not {want!r}")


class Probe:
    """Timers around the four stages of ``Task._restore`` (instance attributes and one module
    attribute, swapped for timed wrappers and restored afterwards; product code unchanged):

    * ``decode``: ``FileChangelog.read_committed_batches`` and every ``next()`` of its batch
      iterator (read the segment files, check the batch CRCs, decode the columns);
    * ``convert``: ``codecs.records_to_values`` (the C record converter, per restore batch);
    * ``apply``: the raw store's ``put_all`` (key-value: validate, put into the overlay) or
      ``restore`` (window: validate, pick the segment, put into its overlay);
    * ``commit``: the raw store's ``commit`` (one LMDB write transaction per restore batch:
      sort, ``putmulti``, the offset, fsync); for the key-value store, ``restore_records``,
      which converts, applies and commits in one (the C pass: the last record of a key,
      sorted, converted, sealed; then ``putmulti``, the offset, fsync), so its ``convert``
      and ``apply`` are 0.

    The sorted restore of an empty key-value store (``bytestores/restore_runs.py``, what the
    key-value workload takes: more than one restore batch) is timed as ``convert`` for
    ``SortedRuns.add_frames`` (the C pass making each chunk's sorted run, and its write when
    it goes to the run file) and ``commit`` for ``SortedRuns.commit`` (the k-way merge,
    ``putmulti`` with append, the offset, one fsync).

    The rest of ``initialize()`` (collecting the columns, slicing, ``zip``, recovery, the
    changelog repair check) is ``other``. A few thousand timer calls per million records.
    Each commit's duration and offset are kept too (:meth:`commit_growth`).
    """

    STAGES = ("decode", "convert", "apply", "commit")

    def __init__(self) -> None:
        self.ns = dict.fromkeys(self.STAGES, 0)
        self.commits: list[tuple[int, int]] = []  # (ns, changelog offset) of each commit

    def commit_growth(self) -> tuple[float, float]:
        """Commit ns per record over the first and the last tenth of the restore commits
        (the store grows from empty to full in between)."""
        rows, prev = [], 0
        for ns, offset in self.commits:
            rows.append((ns, offset - prev))
            prev = offset
        k = max(1, len(rows) // 10)
        first, last = rows[:k], rows[-k:]
        return (
            sum(ns for ns, _ in first) / max(1, sum(r for _, r in first)),
            sum(ns for ns, _ in last) / max(1, sum(r for _, r in last)),
        )

    def timed(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        ns = self.ns

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                ns[stage] += time.perf_counter_ns() - t0

        return wrapper

    def attach(self, task: Task, kind: str) -> None:
        entry = task._entries[kind]
        raw, log = entry.raw, entry.log
        commit, ns, commits = raw.commit, self.ns, self.commits

        def timed_commit(offset: int) -> None:
            t0 = time.perf_counter_ns()
            try:
                commit(offset)
            finally:
                dt = time.perf_counter_ns() - t0
                ns["commit"] += dt
                commits.append((dt, offset))

        raw.commit = timed_commit
        if kind == KV:
            raw.put_all = self.timed("apply", raw.put_all)
            # restore_records / restore_batch convert (restore_records: in C), apply and
            # commit in one transaction: timed as "commit"
            raw.restore_records = self.timed("commit", raw.restore_records)
            raw.restore_batch = self.timed("commit", raw.restore_batch)
            if hasattr(raw, "restore_frames"):  # the same, reading the changelog in place
                raw.restore_frames = self.timed("commit", raw.restore_frames)
        else:
            raw.restore = self.timed("apply", raw.restore)
        read = log.read_committed_batches
        probe = self

        def read_committed_batches(from_offset: int = 0) -> _TimedBatches:
            t0 = time.perf_counter_ns()
            it = read(from_offset)
            probe.ns["decode"] += time.perf_counter_ns() - t0
            return _TimedBatches(it, probe.ns)

        log.read_committed_batches = read_committed_batches  # type: ignore[method-assign,assignment]
        read_frames = getattr(log, "read_committed_frames", None)
        if read_frames is not None:  # key-value restore's undecoded batches

            def read_committed_frames(from_offset: int = 0) -> _TimedBatches:
                t0 = time.perf_counter_ns()
                it = read_frames(from_offset)
                probe.ns["decode"] += time.perf_counter_ns() - t0
                return _TimedBatches(it, probe.ns)

            log.read_committed_frames = read_committed_frames  # type: ignore[method-assign,assignment]

    @contextlib.contextmanager
    def converter(self) -> Iterator[None]:
        """Time the module-level converter and the sorted restore's two phases."""
        original = txstore.codecs.records_to_values
        add_frames, commit = SortedRuns.add_frames, SortedRuns.commit
        txstore.codecs.records_to_values = self.timed("convert", original)
        SortedRuns.add_frames = self.timed("convert", add_frames)  # type: ignore[method-assign]
        SortedRuns.commit = self.timed("commit", commit)  # type: ignore[method-assign]
        try:
            yield
        finally:
            txstore.codecs.records_to_values = original
            SortedRuns.add_frames, SortedRuns.commit = add_frames, commit  # type: ignore[method-assign]


class _TimedBatches:
    """A batch iterator whose ``next()`` is timed (``decode``)."""

    def __init__(self, inner: Any, ns: dict[str, int]) -> None:
        self._inner = inner
        self._ns = ns

    def __enter__(self) -> _TimedBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()

    def __iter__(self) -> _TimedBatches:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return next(self._inner)
        finally:
            self._ns["decode"] += time.perf_counter_ns() - t0


def txstore_restore(task_dir: str, w: Workload, *, sync: bool, probe: bool = False) -> Phases:
    """One restore of the whole changelog into a wiped partition; ns per phase."""
    wipe_state(task_dir)
    p = Probe()
    t0 = now()
    task = Task(task_dir, sync=sync)
    try:
        store = open_store(task, w.kind)
        if probe:
            p.attach(task, w.kind)
        t1 = now()
        with p.converter() if probe else contextlib.nullcontext():
            report = task.initialize()
        t2 = now()
        if report.restored != {w.kind: len(w)}:
            raise AssertionError(f"restored {report.restored}, expected {len(w)} records")
        check_txstore(store, w)
    except BaseException:
        task.close()
        raise
    t3 = now()
    task.close()
    t4 = now()
    phases = {"open": t1 - t0, "restore": t2 - t1, "close": t4 - t3, "total": t4 - t3 + t2 - t0}
    if probe:
        phases.update(p.ns)
        phases["other"] = phases["restore"] - sum(p.ns.values())
        # ns per record of the first and last tenth of the commits, scaled by the record count
        # (compare_staged divides every phase by it)
        first, last = p.commit_growth()
        phases["commit_first"], phases["commit_last"] = round(first * len(w)), round(last * len(w))
    return phases


# --------------------------------------------------------------------------- quix


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    # quixstreams' dependencies emit deprecation warnings at import time
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


class QuixMessage:
    """The part of ``confluent_kafka.Message`` Quix's recovery reads."""

    __slots__ = ("_headers", "_key", "_offset", "_value")

    def __init__(
        self, key: bytes, value: bytes | None, offset: int, headers: list[tuple[str, bytes]]
    ) -> None:
        self._key = key
        self._value = value
        self._offset = offset
        self._headers = headers

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers


def quix_messages(w: Workload) -> list[QuixMessage]:
    """The changelog as Quix's producer writes it: one message per record with the column
    family and processed-offsets headers (one header list per commit, shared by its records)."""
    with quiet_imports():
        from quixstreams.state.metadata import (
            CHANGELOG_CF_MESSAGE_HEADER,
            CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER,
        )
    msgs: list[QuixMessage] = []
    n = len(w)
    for start in range(0, n, COMMIT_EVERY):
        headers = [
            (CHANGELOG_CF_MESSAGE_HEADER, b"default"),
            (
                CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER,
                json.dumps({QUIX_TOPIC: start}).encode(),
            ),
        ]
        for i in range(start, min(n, start + COMMIT_EVERY)):
            msgs.append(QuixMessage(w.quix_keys[i], w.values[i], i, headers))
    return msgs


def quix_restore(path: str, w: Workload, msgs: Sequence[Any]) -> Phases:
    with quiet_imports():
        from quixstreams.state.recovery import RecoveryPartition
        from quixstreams.state.rocksdb import RocksDBOptions, RocksDBStorePartition
        from quixstreams.state.rocksdb.windowed.partition import WindowedRocksDBStorePartition

    shutil.rmtree(path, ignore_errors=True)
    n = len(msgs)
    t0 = now()
    cls = RocksDBStorePartition if w.kind == KV else WindowedRocksDBStorePartition
    partition: Any = cls(path, RocksDBOptions(), changelog_producer=None)
    try:
        rp: Any = RecoveryPartition(
            changelog_name=f"changelog__{w.kind}",
            partition_num=0,
            store_partition=partition,
            committed_offsets={QUIX_TOPIC: n + 1},
            lowwater=0,
            highwater=n,
        )
        t1 = now()
        recover = rp.recover_from_changelog_message
        for msg in msgs:
            recover(changelog_message=msg)
        rp.complete_recovery()
        t2 = now()
        if partition.get_changelog_offset() != n - 1:
            raise AssertionError(f"quix: changelog offset {partition.get_changelog_offset()}")
        for _, qkey, state in w.expected:
            got = partition.get(qkey)
            want = state[0] if state is not None else None
            if (got if isinstance(got, bytes) else None) != want:
                raise AssertionError(f"quix {w.kind}: {qkey!r} restored as {got!r}")
    except BaseException:
        partition.close()
        raise
    t3 = now()
    partition.close()
    t4 = now()
    return {"open": t1 - t0, "restore": t2 - t1, "close": t4 - t3}  # total: their sum


# --------------------------------------------------------------------------- report


def rate(t: Timing) -> float:
    return 1e9 / t.median_ns


def restore_table(results: Mapping[str, Mapping[str, Timing]], quix: str) -> str:
    q_total = results[quix]["total"].median_ns
    rows = []
    for name, ph in results.items():
        spread = ph["total"].spread
        rows.append(
            [
                name,
                fmt_ns(ph["open"].median_ns),
                fmt_ns(ph["restore"].median_ns),
                fmt_ns(ph["close"].median_ns),
                fmt_ns(ph["total"].median_ns),
                f"{rate(ph['total']):,.0f}",
                fmt_ratio(q_total / ph["total"].median_ns),
                f"{spread:.0%}",
            ]
        )
    header = ["variant", "open", "restore", "close", "total", "records/s", "vs quix", "noise"]
    return table(header, rows)


def stage_table(results: Mapping[str, Mapping[str, Timing]]) -> str:
    stages = [*Probe.STAGES, "other"]
    rows = []
    for name, ph in results.items():
        if "decode" not in ph:
            continue
        restore = ph["restore"].median_ns
        cells = [f"{fmt_ns(ph[s].median_ns)} ({ph[s].median_ns / restore:.0%})" for s in stages]
        growth = f"{fmt_ns(ph['commit_first'].median_ns)} -> {fmt_ns(ph['commit_last'].median_ns)}"
        rows.append([name, *cells, fmt_ns(restore), growth])
    return table(["ns / record", *stages, "restore", "commit first -> last"], rows)


def profile_restore(task_dir: str, w: Workload, top: int) -> str:
    """cProfile of one txstore restore (durable default), top functions by own time."""
    wipe_state(task_dir)
    with Task(task_dir) as task:
        open_store(task, w.kind)
        prof = cProfile.Profile()
        prof.enable()
        task.initialize()
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    lines = out.getvalue().strip().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    title = f"\ncProfile of one txstore {w.kind} restore ({len(w):,} records), by own time:"
    return "\n".join([title, *lines[start:]])


def quix_version() -> str:
    try:
        from importlib.metadata import version

        return version("quixstreams")
    except Exception:  # pragma: no cover - reported, not fatal
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200k records, 3 rounds (< 1 min)")
    parser.add_argument("--profile", action="store_true", help="cProfile one txstore restore")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    add_json_argument(parser, "restore")
    args = parser.parse_args(argv)
    n, rounds = (200_000, 3) if args.quick else (1_000_000, 5)
    record = Record(
        "restore",
        quick=args.quick,
        workload={
            "records_per_store": n,
            "key_bytes": KEY_SIZE,
            "value_bytes": VALUE_SIZE,
            "changelog_commit_every": COMMIT_EVERY,
            "restore_batch": RESTORE_BATCH,
            "rounds": rounds,
        },
        argv=argv,
    )
    started = time.perf_counter()
    print(
        f"txstore restore benchmark ({'quick' if args.quick else 'full'}): Python "
        f"{platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"quixstreams {quix_version()}"
    )
    if args.quick:
        print(
            "  --quick: 200,000 changelog records per store (full run: 1,000,000), 3 rounds;\n"
            "  txstore's restore commits cost more as the store grows, so its figures are higher"
            "\n  than the full run's, which are the ones that count"
        )
    print(
        f"{n:,} changelog records per store, 16-byte keys, 100-byte values; a commit every "
        f"{COMMIT_EVERY:,} records in the changelog, restore commits every {RESTORE_BATCH:,}; "
        f"{rounds} interleaved rounds (+1 warm-up), median; ns per changelog record"
    )
    root = tempfile.mkdtemp(prefix="bench_restore_", dir=args.dir)
    try:
        results: dict[str, dict[str, dict[str, Timing]]] = {}
        profiles: list[str] = []
        for kind, make in ((KV, make_kv), (WINDOW, make_window)):
            w = make(n)
            task_dir = os.path.join(root, f"task-{kind}")
            write_changelog(task_dir, w)
            msgs = quix_messages(w)
            quix_dir = os.path.join(root, f"quix-{kind}")
            label = "kv" if kind == KV else "window"
            variants: dict[str, Callable[[], Mapping[str, int]]] = {
                f"txstore {label}": partial(txstore_restore, task_dir, w, sync=True),
                f"txstore {label}, instrumented": partial(
                    txstore_restore, task_dir, w, sync=True, probe=True
                ),
            }
            if kind == KV:
                variants[f"txstore {label}, sync=False"] = partial(
                    txstore_restore, task_dir, w, sync=False
                )
            variants[f"quix {label}"] = partial(quix_restore, quix_dir, w, msgs)
            results[kind] = compare_staged(variants, n, rounds)
            del variants, msgs
            if args.profile:
                profiles.append(profile_restore(task_dir, w, 18))
            shutil.rmtree(quix_dir, ignore_errors=True)

        for kind, title in ((KV, "timestamped key-value store"), (WINDOW, "window store")):
            print(f"\n{title}: restore of the whole changelog, ns per record")
            print(restore_table(results[kind], f"quix {'kv' if kind == KV else 'window'}"))
        print(
            "\n  open: Task + store (quix: partition + RecoveryPartition); restore: "
            "Task.initialize()\n  (quix: recover_from_changelog_message per record + "
            "complete_recovery()); close: Task.close()\n  (quix: partition.close()); "
            "vs quix: quix total / this total; noise: (max - min) / median\n"
            "  txstore kv / window: sync=True, txstore's default (one fsync per restore commit);"
            "\n  quix never syncs its RocksDB writes"
        )
        print("\nwhere txstore's restore time goes (instrumented runs; see Probe), ns per record")
        print(stage_table({k: v for r in results.values() for k, v in r.items()}))
        print(
            "  commit first -> last: LMDB commit ns per record over the first and the last tenth"
            "\n  of the restore commits, while the store grows from empty to full"
        )
        for text in profiles:
            print(text)

        kv = results[KV]
        tx_rate = rate(kv["txstore kv"]["total"])
        ratio = kv["quix kv"]["total"].median_ns / kv["txstore kv"]["total"].median_ns
        w_ratio = (
            results[WINDOW]["quix window"]["total"].median_ns
            / results[WINDOW]["txstore window"]["total"].median_ns
        )
        print(f"\nwindow store: txstore {rate(results[WINDOW]['txstore window']['total']):,.0f} "
              f"rec/s, {w_ratio:.2f}x Quix")  # fmt: skip
        print(f"run time {time.perf_counter() - started:.0f} s; goal: restore_vs_quix >= 3\n")
        record.add_timings("kv", kv, per="record")
        record.add_timings("window", results[WINDOW], per="record")
        record.figure(
            "restore_records_per_s", tx_rate, "rec/s", digits=0, based_on=["kv/txstore kv/total"]
        )
        record.figure(
            "restore_vs_quix", ratio, "x", based_on=["kv/quix kv/total", "kv/txstore kv/total"]
        )
        record.figure(
            "restore_window_vs_quix",
            w_ratio,
            "x",
            based_on=["window/quix window/total", "window/txstore window/total"],
        )
        record.finish(args.json)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
