"""Interactive-query benchmark: local composite point queries against a direct store ``get``,
and HTTP point queries through the query service with keep-alive.

**Local** (one process, interleaved rounds, medians; see ``_harness.py``). An application with
``P`` partitions of a plain key-value store (string keys ``key-<i>``, long values, every key
committed) answers point queries for ``K`` keys in random order:

* ``direct get``: the writer's own typed store of the key's partition, ``store.get(key)`` (the
  partition looked up beforehand: the cost of the read alone);
* ``composite get``: ``app.store(StoreQueryParameters...key_value_store()).get(key)``, the
  read-uncommitted default: serializes the key once, computes its partition (murmur2), takes the
  partition's guard and reads the bytes store under it;
* references: the read-committed composite (``enable_read_committed()``: LMDB committed data
  through the shared-reader path other threads use) and Kafka's unrouted lookup
  (``route_keys=False``: every local partition in turn; absent keys cost ``P`` reads).

**HTTP**: ``txstore serve`` in a child process serves the same state directory; this process
queries it. Variants: one ``QueryClient`` (routing by metadata, JSON decoding) over one
keep-alive connection, sequential; raw ``http.client`` on one keep-alive connection (the
server's own cost); and 4 client threads with their own connections (the server's one-thread-
per-connection model under concurrency; the client shares this process's GIL).

Run ``python perf/bench_queries.py [--quick] [--json PATH]``. The output ends with two
``figure:`` lines: ``iq_local_vs_direct`` (composite get rate / direct get rate; goal >= 0.8)
and ``http_queries_per_s`` (the sequential ``QueryClient`` rate over keep-alive). The JSON record
(``_record.py``; default ``perf/out/queries.json``) holds them, every local round's timings,
the HTTP rates (as one time per request each) and the environment.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import Settings, Timing, compare, fmt_ns, fmt_ratio, table
from _record import Record, add_json_argument

from txstore import Serdes, Stores
from txstore.queries import (
    Application,
    HostInfo,
    QueryableStoreTypes,
    QueryClient,
    StoreQueryParameters,
)

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def build(state: Path, partitions: int, n: int) -> Application:
    app = Application(
        "bench",
        state,
        [
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            )
        ],
        num_partitions=partitions,
        task_options={"sync": False},
    )
    app.start()
    for p in app.active_partitions:
        with app.writer(p) as w:
            store = w.store("counts")
            for i in range(n):
                k = f"key-{i}"
                if app.partition_for_key("counts", k) == p:
                    store.put(k, i)
            w.commit(1)
    return app


def local_section(app: Application, keys: list[str], settings: Settings) -> dict[str, Timing]:
    qt = QueryableStoreTypes.key_value_store()
    params = StoreQueryParameters.from_name_and_type("counts", qt)
    composite = app.store(params)
    committed = app.store(params.enable_read_committed())
    direct = {p: app._active[p].stores["counts"] for p in app.active_partitions}
    pairs = [(k, direct[app.partition_for_key("counts", k)].get) for k in keys]
    expected = [int(k[4:]) for k in keys]
    assert [composite.get(k) for k in keys] == expected
    assert [g(k) for k, g in pairs] == expected
    cget, rget = composite.get, committed.get

    def v_direct() -> None:
        for k, g in pairs:
            g(k)

    def v_composite() -> None:
        for k in keys:
            cget(k)

    def v_committed() -> None:
        for k in keys:
            rget(k)

    res = compare(
        {"direct get": v_direct, "composite get": v_composite, "composite rc": v_committed},
        len(keys),
        settings,
    )
    app.route_keys = False  # read when a composite resolves its partitions
    unrouted = app.store(params)
    uget = unrouted.get

    def v_unrouted() -> None:
        for k in keys:
            uget(k)

    res.update(compare({"unrouted": v_unrouted}, len(keys), Settings(3, settings.target_ns)))
    app.route_keys = True
    base = res["direct get"].median_ns
    rows = [
        ("direct store.get (writer's store)", "direct get"),
        ("composite get (read-uncommitted, routed)", "composite get"),
        ("composite get (read-committed)", "composite rc"),
        ("composite get, Kafka's unrouted lookup", "unrouted"),
    ]
    print(
        table(
            ["local point query", "ns/query", "queries/s", "vs direct"],
            [
                (
                    label,
                    fmt_ns(res[name].median_ns),
                    f"{1e9 / res[name].median_ns:,.0f}",
                    fmt_ratio(base / res[name].median_ns),
                )
                for label, name in rows
            ],
        )
    )
    spread = max(t.spread for t in res.values())
    print(f"  ({res['direct get'].samples} interleaved rounds; largest spread {spread:.0%})")
    return res


def wait_running(host: HostInfo, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection(host.host, host.port, timeout=2)
            c.request("GET", "/v1/health")
            r = c.getresponse()
            ok = r.status == 200 and b'"RUNNING"' in r.read()
            c.close()
            if ok:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("the query server did not start")


def http_section(state: Path, keys: list[str], seconds: float) -> dict[str, float]:
    """Requests per second of each HTTP variant (``client``: the figure's)."""
    host = HostInfo("127.0.0.1", free_port())
    proc = subprocess.Popen(
        [sys.executable, "-m", "txstore", "serve", str(state), "--application-id", "bench",
         "--application-server", str(host), "-q"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_running(host, time.monotonic() + 60)
        rows = []

        def timed(fn: Any, threads: int = 1) -> float:
            done = [0] * threads
            stop = threading.Event()

            def run(i: int) -> None:
                n = 0
                rnd = random.Random(i)
                while not stop.is_set():
                    fn(i, keys[rnd.randrange(len(keys))])
                    n += 1
                done[i] = n

            workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            time.sleep(seconds)
            stop.set()
            for w in workers:
                w.join()
            return sum(done) / (time.perf_counter() - t0)

        client = QueryClient(str(host))
        assert client.get("counts", keys[0]) == int(keys[0][4:])
        raw = [http.client.HTTPConnection(host.host, host.port, timeout=10) for _ in range(4)]

        def via_client(i: int, k: str) -> None:
            client.get("counts", k)

        def via_raw(i: int, k: str) -> None:
            c = raw[i]
            c.request("GET", f"/v1/stores/counts/get?key={k}")
            r = c.getresponse()
            r.read()

        timed(via_client)  # warm-up (connections, caches)
        rate_client = timed(via_client)
        rate_raw = timed(via_raw)
        rate_threads = timed(via_client, 4)
        rows = [
            ("QueryClient.get, 1 keep-alive connection", rate_client),
            ("raw http.client GET, 1 keep-alive connection", rate_raw),
            ("QueryClient.get, 4 threads x 1 connection", rate_threads),
        ]
        print(
            table(
                ["HTTP point query (server in a child process)", "req/s", "us/req"],
                [(label, f"{r:,.0f}", f"{1e6 / r:,.0f}") for label, r in rows],
            )
        )
        client.close()
        for c in raw:
            c.close()
        return {"client": rate_client, "raw": rate_raw, "client x4 threads": rate_threads}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run (under a minute)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=0, help="keys in the store")
    add_json_argument(parser, "queries")
    args = parser.parse_args(argv)
    n = args.keys or (50_000 if args.quick else 200_000)
    queries = 10_000 if args.quick else 50_000
    settings = Settings(repeats=7 if args.quick else 15, target_ns=60_000_000)
    seconds = 2.0 if args.quick else 5.0
    record = Record(
        "queries",
        quick=args.quick,
        workload={
            "keys": n,
            "partitions": args.partitions,
            "queries_per_round": queries,
            "rounds": settings.repeats,
            "http_seconds_per_variant": seconds,
        },
        argv=argv,
    )
    print(
        f"txstore interactive-query benchmark ({'quick' if args.quick else 'full'}): "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; {n:,} keys in {args.partitions} partitions, "
        f"{queries:,} point queries per round"
    )
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-queries-"))
    try:
        app = build(root / "state", args.partitions, n)
        rnd = random.Random(7)
        keys = [f"key-{rnd.randrange(n)}" for _ in range(queries)]
        local = local_section(app, keys, settings)
        app.close()
        rates = http_section(root / "state", keys, seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"total {time.perf_counter() - started:.1f} s")
    record.add_timings("local", local, per="query")
    # one measurement per HTTP variant: requests in ``seconds``, kept as ns per request
    record.add_timings("http", {k: Timing.of([1e9 / r]) for k, r in rates.items()}, per="request")
    record.figure(
        "iq_local_vs_direct",
        local["direct get"].median_ns / local["composite get"].median_ns,
        "x",
        based_on=["local/direct get", "local/composite get"],
    )
    record.figure(
        "http_queries_per_s", rates["client"], "req/s", digits=0, based_on=["http/client"]
    )
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
