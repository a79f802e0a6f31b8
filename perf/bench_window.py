"""Benchmark of txstore's window stores against Quix Streams' windowed RocksDB store partition.

Both run in this process on the same workload, interleaved (see ``_harness.py``), median of
the rounds:

* **put + commit**: ``K`` keys x 4 tumbling windows of 15 s (starts 0, 15000, 30000, 45000),
  100-character string values; then one commit. txstore: ``WindowStore.put`` into a
  transactional persistent window store (retention 120 s, so one 60 s segment), then
  ``commit`` (one LMDB write transaction, **fsynced**). Quix: ``update_window`` in a
  ``WindowedRocksDBPartitionTransaction``, then ``prepare()`` + ``flush()`` (a RocksDB write
  batch; RocksDB does not fsync its WAL by default). Rounds after the warm-up overwrite the same
  windows in both stores. Reported per put, commit included.
* **fetch**: for every key, all its windows (4): ``WindowStore.fetch(key, 0, 60000)`` consumed
  in a ``with`` block, against ``get_windows(start_from_ms=-1, start_to_ms=60000, prefix=key)``
  (Quix's lower bound is exclusive). Reported per fetch.
* **bytes per record**: the same records with one 16-byte header in a timestamped window store
  with headers (``[headersSize][headers][ts][value]``) and in the plain window store with
  headers (``[headersSize][headers][value]``); the difference of the stored value sizes summed
  over LMDB, and of the LMDB pages in use, per record.

Values go through each store's own serializer (txstore: ``Serdes.string()``; Quix: its default
JSON ``dumps``/``loads``), keys are the same strings (Quix takes the UTF-8 bytes as its prefix).
Quix Streams is driven standalone: no Kafka broker, no changelog producer.

* **entry checksums** (issue 24): the same window store with checksums (the default) and
  without (``checksums=False``), put + commit and fetches (the writer's, a read-committed
  view's): ``window_checksum_*_overhead``, time with / time without (goal <= 1.05).

* **read-committed view's fetch** (issue 27): the same fetch through ``read_committed()``:
  ``window_view_fetch_vs_quix`` (Quix's time over the view's; goal >= 1.5) and
  ``window_view_fetch_over_store_fetch`` (the view's time over the writer's; goal <= 2).

Run ``python perf/bench_window.py [--quick] [--json PATH]``. The output ends with eight
``figure:`` lines; the JSON record (``_record.py``; default ``perf/out/window.json``) holds them,
every round's timings and the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import tempfile
import warnings
from collections import deque
from typing import Any

from _harness import Settings, compare, fmt_ns, fmt_ratio, table
from _record import Record, add_json_argument

import txstore
from txstore import Headers, Serdes, Stores, ValueAndHeaders, ValueTimestampHeaders

STARTS = (0, 15_000, 30_000, 45_000)
SIZE = 15_000
RETENTION = 120_000
VALUE = "x" * 100
HEADERS, PLAIN_HEADERS = txstore.ValueFormat.HEADERS, txstore.ValueFormat.PLAIN_HEADERS


def quix_partition(path: str) -> Any:
    # quixstreams' dependencies print deprecation warnings at import: keep the output clean
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        from quixstreams.state.rocksdb.options import RocksDBOptions
        from quixstreams.state.rocksdb.windowed.partition import WindowedRocksDBStorePartition

    return WindowedRocksDBStorePartition(path, options=RocksDBOptions())


def bench_speed(root: str, n_keys: int, settings: Settings) -> dict[str, Any]:
    keys = [f"user-{i:06d}" for i in range(n_keys)]
    bkeys = [k.encode() for k in keys]
    db = txstore.open(os.path.join(root, "txstore"))
    store = Stores.window_store_builder(
        Stores.persistent_window_store("w", RETENTION, SIZE, False),
        Serdes.string(),
        Serdes.string(),
    ).build(db)
    quix = quix_partition(os.path.join(root, "quix"))
    offset = [0]

    def tx_put() -> None:
        put = store.put
        for start in STARTS:
            for k in keys:
                put(k, VALUE, start)
        offset[0] += 1
        store.commit(offset[0])

    def quix_put() -> None:
        tx = quix.begin()
        update = tx.update_window
        for start in STARTS:
            for k in bkeys:
                update(
                    start_ms=start, end_ms=start + SIZE, value=VALUE, timestamp_ms=start, prefix=k
                )
        tx.prepare()
        offset[0] += 1
        tx.flush(changelog_offset=offset[0])

    puts = compare({"txstore": tx_put, "quix": quix_put}, n_keys * len(STARTS), settings)

    fetch = store.fetch
    view = store.read_committed()
    quix_tx = quix.begin()
    get_windows = quix_tx.get_windows
    assert len(get_windows(start_from_ms=-1, start_to_ms=60_000, prefix=bkeys[0])) == 4
    with fetch(keys[0], 0, 60_000) as it:
        assert len(list(it)) == 4

    def tx_fetch() -> None:
        for k in keys:
            with fetch(k, 0, 60_000) as it:
                deque(it, maxlen=0)

    def tx_fetch_committed_view() -> None:
        vfetch = view.fetch
        for k in keys:
            with vfetch(k, 0, 60_000) as it:
                deque(it, maxlen=0)

    def quix_fetch() -> None:
        for k in bkeys:
            get_windows(start_from_ms=-1, start_to_ms=60_000, prefix=k)

    fetches = compare(
        {"txstore": tx_fetch, "txstore read-committed view": tx_fetch_committed_view,
         "quix": quix_fetch},
        n_keys,
        settings,
    )  # fmt: skip
    # txstore only: a fetch while the overlay holds uncommitted writes of the same segment
    for k in keys[::2]:
        store.put(k, VALUE + "!", 0)
    dirty = compare({"txstore (dirty overlay)": tx_fetch}, n_keys, settings)
    store.recover(offset[0])
    view.close()
    db.close()
    quix.close()
    return {"puts": puts, "fetches": fetches, "dirty": dirty}


def bench_checksums(root: str, n_keys: int, settings: Settings) -> dict[str, Any]:
    """Entry checksums on (the default) against off (``checksums=False``, the legacy layout):
    the same window store in two partitions, put + commit and single-key fetches (the
    writer's and a read-committed view's), interleaved (issue 24)."""
    keys = [f"user-{i:06d}" for i in range(n_keys)]
    label = {True: "checksums on", False: "checksums off"}
    dbs, stores, views = [], {}, {}
    for on in (True, False):
        db = txstore.open(os.path.join(root, f"checksums-{on}"), checksums=on)
        dbs.append(db)
        stores[on] = Stores.window_store_builder(
            Stores.persistent_window_store("w", RETENTION, SIZE, False),
            Serdes.string(),
            Serdes.string(),
        ).build(db)
    offset = [0]

    def put(on: bool) -> Any:
        store = stores[on]

        def run() -> None:
            for start in STARTS:
                for k in keys:
                    store.put(k, VALUE, start)
            offset[0] += 1
            store.commit(offset[0])

        return run

    def fetch(source: Any) -> Any:
        def run() -> None:
            f = source.fetch
            for k in keys:
                with f(k, 0, 60_000) as it:
                    deque(it, maxlen=0)

        return run

    try:
        puts = compare({label[on]: put(on) for on in (True, False)}, n_keys * len(STARTS), settings)
        for on in (True, False):
            views[on] = stores[on].read_committed()
            with stores[on].fetch(keys[0], 0, 60_000) as it:
                assert len(list(it)) == 4
        fetches = compare({label[on]: fetch(stores[on]) for on in (True, False)}, n_keys, settings)
        viewed = compare({label[on]: fetch(views[on]) for on in (True, False)}, n_keys, settings)
    finally:
        for view in views.values():
            view.close()
        for db in dbs:
            db.close()
    return {"puts": puts, "fetches": fetches, "views": viewed}


def bench_bytes(root: str, n_keys: int) -> tuple[float, float]:
    """Stored bytes per record: timestamped-with-headers minus plain-with-headers."""
    headers = Headers([("trace-id", b"0123456789abcdef")])
    sizes = {}
    pages = {}
    for name, fmt, make in (
        ("ts_headers", HEADERS, lambda: ValueTimestampHeaders(VALUE, 7, headers)),
        ("plain_headers", PLAIN_HEADERS, lambda: ValueAndHeaders(VALUE, headers)),
    ):
        with txstore.open(os.path.join(root, name)) as db:
            w = db.window_store(
                "w", Serdes.string(), Serdes.string(), retention_period=RETENTION, window_size=SIZE,
                format=fmt,
            )  # fmt: skip
            value = make()
            for start in STARTS:
                for i in range(n_keys):
                    w.put(f"user-{i:06d}", value, start)
            w.commit(1)
            env: Any = db.partition._sh.env  # type: ignore[union-attr]
            with env.begin() as txn:
                h = env.open_db(b"w.0", txn=txn, create=False)
                sizes[name] = sum(len(v) for v in txn.cursor(h).iternext(keys=False))
                st = txn.stat(h)
                pages[name] = st["psize"] * (
                    st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
                )
    records = n_keys * len(STARTS)
    by_values = (sizes["ts_headers"] - sizes["plain_headers"]) / records
    by_pages = (pages["ts_headers"] - pages["plain_headers"]) / records
    return by_values, by_pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer keys and rounds (< 1 minute)")
    add_json_argument(ap, "window")
    args = ap.parse_args()
    if args.quick:
        n_keys, settings = 10_000, Settings(repeats=3, target_ns=200_000_000, warmup=1)
    else:
        n_keys, settings = 50_000, Settings(repeats=7, target_ns=1_000_000_000, warmup=1)
    record = Record(
        "window",
        quick=args.quick,
        workload={
            "keys": n_keys,
            "windows_per_key": len(STARTS),
            "value_chars": len(VALUE),
            "rounds": settings.repeats,
            "sample_target_ns": settings.target_ns,
        },
    )
    print(
        f"txstore window stores vs Quix Streams {quix_version()}; Python "
        f"{platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"workload: {n_keys} keys x {len(STARTS)} windows, 100-character values; "
          f"{settings.repeats} interleaved rounds, median\n")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_window_") as root:
        r = bench_speed(root, n_keys, settings)
        by_values, by_pages = bench_bytes(root, n_keys)
        ck = bench_checksums(root, n_keys, settings)
    puts, fetches = r["puts"], r["fetches"]
    q_put, t_put = puts["quix"], puts["txstore"]
    q_fetch, t_fetch = fetches["quix"], fetches["txstore"]
    view = fetches["txstore read-committed view"]
    dirty = r["dirty"]["txstore (dirty overlay)"]

    def row(label: str, ours: Any, theirs: Any, reference: Any) -> list[str]:
        """Table row; the ratio is Quix's time over ours (> 1: txstore faster)."""
        spread = max(ours.spread, theirs.spread if theirs else 0.0)
        return [
            label,
            fmt_ns(ours.median_ns),
            fmt_ns(theirs.median_ns) if theirs else "-",
            fmt_ratio(reference.median_ns / ours.median_ns) if reference else "-",
            f"{spread:.0%}",
        ]

    rows = [
        row("put + commit (ns / put)", t_put, q_put, q_put),
        row("fetch 4 windows (ns / fetch)", t_fetch, q_fetch, q_fetch),
        row("fetch, read-committed view", view, None, q_fetch),
        row("fetch, uncommitted writes in overlay", dirty, None, q_fetch),
    ]
    print(table(["operation", "txstore", "quix", "quix / txstore", "spread"], rows))
    print(f"\nstored value bytes per record, timestamped-with-headers minus plain-with-headers: "
          f"{by_values:.2f} B (LMDB pages in use: {by_pages:+.2f} B per record)\n")  # fmt: skip
    record.add_timings("put_commit", puts, per="put")
    record.add_timings("fetch", fetches, per="fetch")
    record.add_timings("fetch_dirty", r["dirty"], per="fetch")
    record.figure(
        "window_put_commit_vs_quix",
        q_put.median_ns / t_put.median_ns,
        "x",
        based_on=["put_commit/quix", "put_commit/txstore"],
    )
    record.figure(
        "window_fetch_vs_quix",
        q_fetch.median_ns / t_fetch.median_ns,
        "x",
        based_on=["fetch/quix", "fetch/txstore"],
    )
    record.figure("plain_headers_bytes_saved_per_record", by_values, "B", digits=0)
    checksum_figures(ck, record)
    # the read-committed view's fetch: goals >= 1.5x Quix, and within 2x of the store's own
    record.figure(
        "window_view_fetch_over_store_fetch",
        view.median_ns / t_fetch.median_ns,
        "x",
        based_on=["fetch/txstore read-committed view", "fetch/txstore"],
    )
    record.figure(
        "window_view_fetch_vs_quix",
        q_fetch.median_ns / view.median_ns,
        "x",
        based_on=["fetch/quix", "fetch/txstore read-committed view"],
    )
    record.finish(args.json)


def checksum_figures(ck: dict[str, Any], record: Record) -> None:
    """Print the checksums on/off table and record its figures (time with / time without;
    goal <= 1.05 each)."""
    print("entry checksums on / off (the same window store; time with / time without):")
    rows = []
    for key, what in (("puts", "put + commit"), ("fetches", "fetch"), ("views", "fetch, view")):
        on, off = ck[key]["checksums on"], ck[key]["checksums off"]
        spread = max(on.spread, off.spread)
        rows.append(
            [what, fmt_ns(on.median_ns), fmt_ns(off.median_ns),
             f"{on.median_ns / off.median_ns:.3f}", f"{spread:.0%}"]
        )  # fmt: skip
    print(table(["operation", "on", "off", "on / off", "spread"], rows))
    record.add_timings("checksums_put_commit", ck["puts"], per="put")
    record.add_timings("checksums_fetch", ck["fetches"], per="fetch")
    record.add_timings("checksums_fetch_view", ck["views"], per="fetch")
    for name, key, series in (
        ("window_checksum_put_commit_overhead", "puts", "checksums_put_commit"),
        ("window_checksum_fetch_overhead", "fetches", "checksums_fetch"),
        ("window_checksum_view_fetch_overhead", "views", "checksums_fetch_view"),
    ):
        value = ck[key]["checksums on"].median_ns / ck[key]["checksums off"].median_ns
        record.figure(name, value, "x", digits=3, based_on=[series])


def quix_version() -> str:
    try:
        from importlib.metadata import version

        return version("quixstreams")
    except Exception:  # pragma: no cover - reported, not fatal
        return "?"


if __name__ == "__main__":
    main()
