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

**HTTP**: ``txstore serve`` (Starlette on uvicorn) in a child process serves the same state
directory; this process queries it, side by side in one run:

* ``QueryClient.get`` (httpx; routing by metadata, JSON decoding), one client shared by 4
  threads over a pool of 4 keep-alive connections: its rate (``http_queries_per_s``, goal >=
  8,000 req/s on 2 cores) and p99 latency (``http_p99_ms``, goal <= 5);
* raw ``http.client`` GETs of the query endpoint and of the trivial ``/v1/ping`` route of the
  same server stack: their ratio is what the query path costs over the framework's floor
  (``http_vs_bare_ratio``, goal >= 0.7): the ratio of the median latencies on one connection,
  in alternating blocks of 50 (the rates of 4 threads, also printed, swing with the load of a
  shared machine);
* a fresh client's point queries (5 s timeout, no retries) while 64 connections send their
  headers one byte a second and 200 sit idle, all reopened when the server closes them
  (``http_slowloris_answered_ratio``, goal 1.0).

**Failover**: a ZooKeeper server (PySpark's jar) and three members writing and serving
(``tests/queries/zk_member.py``, 4 s session timeout); one is SIGKILLed and a probe asks for a
key of one of its partitions until the new owner answers (``failover_seconds``, goal <= 5).

Run ``python perf/bench_queries.py [--quick] [--json PATH]``. The output ends with the
``figure:`` lines: ``iq_local_vs_direct`` (composite get rate / direct get rate; goal >= 0.8)
and the figures above. The JSON record (``_record.py``; default ``perf/out/queries.json``) holds
them, every local round's timings, the HTTP rates (as one time per request each) and the
environment.
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
import statistics
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


def timed(fn: Any, keys: list[str], seconds: float, threads: int) -> tuple[float, list[float]]:
    """Run ``fn(thread, key)`` in ``threads`` threads for ``seconds``: requests per second and
    every request's latency (seconds)."""
    lat: list[list[float]] = [[] for _ in range(threads)]
    stop = threading.Event()

    def run(i: int) -> None:
        rnd = random.Random(i)
        mine = lat[i]
        clock = time.perf_counter
        while not stop.is_set():
            t = clock()
            fn(i, keys[rnd.randrange(len(keys))])
            mine.append(clock() - t)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    every = [x for xs in lat for x in xs]
    return len(every) / (time.perf_counter() - t0), every


def p99(latencies: list[float]) -> float:
    xs = sorted(latencies)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))] if xs else float("nan")


def serve(state: Path, host: HostInfo) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "txstore", "serve", str(state), "--application-id", "bench",
         "--application-server", str(host), "-q"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def http_section(state: Path, keys: list[str], seconds: float) -> dict[str, Any]:
    """The HTTP figures against ``txstore serve`` in a child process (see the module
    docstring)."""
    host = HostInfo("127.0.0.1", free_port())
    proc = serve(state, host)
    try:
        wait_running(host, time.monotonic() + 60)
        client = QueryClient(str(host), max_connections=4)
        assert client.get("counts", keys[0]) == int(keys[0][4:])
        raw = [http.client.HTTPConnection(host.host, host.port, timeout=10) for _ in range(4)]

        def via_client(i: int, k: str) -> None:
            client.get("counts", k)

        def raw_get(i: int, k: str) -> None:
            c = raw[i]
            c.request("GET", f"/v1/stores/counts/get?key={k}")
            c.getresponse().read()

        def raw_ping(i: int, k: str) -> None:
            c = raw[i]
            c.request("GET", "/v1/ping")
            c.getresponse().read()

        timed(via_client, keys, seconds / 4, 4)  # warm-up (connections, caches)
        rate_client, lat = timed(via_client, keys, seconds, 4)
        queries, pings = [], []
        for _ in range(5):  # interleaved rounds, medians: drift hits both alike
            queries.append(timed(raw_get, keys, seconds / 5, 4)[0])
            pings.append(timed(raw_ping, keys, seconds / 5, 4)[0])
        rate_query, rate_ping = statistics.median(queries), statistics.median(pings)
        # The figure: one connection, blocks of 50 requests alternating, the median latency of
        # each (robust on a loaded machine, where 4-thread rates swing with the load).
        lat_query, lat_ping = [], []
        for r in range(max(10, int(seconds * 6))):
            for i in range(50):
                t = time.perf_counter()
                raw_get(0, keys[(r * 50 + i) % len(keys)])
                lat_query.append(time.perf_counter() - t)
            for i in range(50):
                t = time.perf_counter()
                raw_ping(0, keys[i])
                lat_ping.append(time.perf_counter() - t)
        med_query, med_ping = statistics.median(lat_query), statistics.median(lat_ping)
        answered = slowloris(host, keys, seconds)
        rows = [
            ("QueryClient.get, 4 threads, pool of 4", f"{rate_client:,.0f}"),
            ("  its p99 latency", f"{p99(lat) * 1000:.2f} ms"),
            ("raw GET .../get, 4 threads x 1 connection", f"{rate_query:,.0f}"),
            ("raw GET /v1/ping, 4 threads x 1 connection", f"{rate_ping:,.0f}"),
            ("  their ratio (swings with the machine's load)", f"{rate_query / rate_ping:.2f}x"),
            ("raw GET .../get, 1 connection, median", f"{med_query * 1e6:,.0f} us"),
            ("raw GET /v1/ping, 1 connection, median", f"{med_ping * 1e6:,.0f} us"),
            ("query endpoint / trivial route (rates)", f"{med_ping / med_query:.2f}x"),
            ("answered with 64 slowloris + 200 idle", f"{answered:.0%}"),
        ]
        print(table(["HTTP (server in a child process)", "value"], rows))
        client.close()
        for c in raw:
            c.close()
        return {
            "client": rate_client,
            "raw query": rate_query,
            "raw ping": rate_ping,
            "median query": med_query,
            "median ping": med_ping,
            "p99_ms": p99(lat) * 1000,
            "slowloris_answered": answered,
        }
    finally:
        stop_process(proc)


def slowloris(host: HostInfo, keys: list[str], seconds: float) -> float:
    """The share of a fresh client's queries answered (within 5 s each) while 64 connections
    send their headers one byte a second and 200 sit idle (both reopened when closed)."""
    addr = (host.host, host.port)
    stop = threading.Event()

    def attack() -> None:
        slow = [socket.create_connection(addr) for _ in range(64)]
        idle = [socket.create_connection(addr) for _ in range(200)]
        for s in slow:
            s.sendall(b"GET /v1/health HTTP/1.1\r\n")
        while not stop.wait(1.0):
            for i, s in enumerate(slow):
                try:
                    s.sendall(b"X")
                except OSError:  # closed by the server's header deadline: come back
                    s.close()
                    slow[i] = socket.create_connection(addr)
                    slow[i].sendall(b"GET /v1/health HTTP/1.1\r\n")
        for s in slow + idle:
            s.close()

    attacker = threading.Thread(target=attack)
    attacker.start()
    time.sleep(1.5)
    ok = tried = 0
    deadline = time.monotonic() + seconds
    with QueryClient(str(host), timeout=5, retry_timeout=0) as fresh:
        while time.monotonic() < deadline:
            tried += 1
            try:
                fresh.get("counts", keys[tried % len(keys)])
                ok += 1
            except Exception:  # counted as not answered
                pass
    stop.set()
    attacker.join()
    return ok / tried


def start_zookeeper(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """PySpark's ZooKeeper server on a free port (tick 500 ms: sessions of 1 to 10 s)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    port = free_port()
    proc = subprocess.Popen(
        ["java", "-Xmx128m", "-Dzookeeper.admin.enableServer=false",
         "-Dzookeeper.4lw.commands.whitelist=srvr", "-cp", f"{jars}/*",
         "org.apache.zookeeper.server.ZooKeeperServerMain", str(port), str(data), "500"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"srvr")
                if b"Zookeeper version" in s.recv(4096):
                    return proc, f"127.0.0.1:{port}"
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("ZooKeeper did not start")


def failover_section(root: Path) -> float:
    """Seconds from SIGKILLing one of three ZooKeeper members (4 s session timeout) to the
    first answer, from its partitions' new owner, to a query on a key it owned."""
    zk_proc, zk = start_zookeeper(root / "zk")
    member = ROOT / "tests" / "queries" / "zk_member.py"
    hosts = [HostInfo("127.0.0.1", free_port()) for _ in range(3)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(member),
                str(root / "zkstate"),
                str(h),
                zk,
                "/bench",
                "--session-timeout",
                "4",
            ],
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.DEVNULL,
        )
        for h in hosts
    ]
    try:
        for h in hosts:
            wait_running(h, time.monotonic() + 60)
        with QueryClient([str(h) for h in hosts], retry_timeout=30) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # every partition assigned and written
                parts = {p for m in client.metadata() for p in m.partitions}
                if len(parts) == 6 and len(client.all("counts")) == 120:
                    break
                time.sleep(0.1)
            victim = next(m for m in client.metadata() if m.host_info == hosts[2])
            p = min(victim.partitions)
            key = next(f"user-{i}" for i in range(120) if client_partition(f"user-{i}") == p)
            assert client.get("counts", key) is not None
        probe = QueryClient([str(h) for h in hosts[:2]], timeout=1, retry_timeout=0)
        t0 = time.monotonic()
        procs[2].kill()
        while True:
            try:
                probe.refresh()
                if probe.get("counts", key) is not None:
                    break
            except Exception:  # not moved yet
                time.sleep(0.01)
        elapsed = time.monotonic() - t0
        probe.close()
        print(f"failover: partition {p} answered by its new owner {elapsed:.2f} s after SIGKILL")
        return elapsed
    finally:
        for proc in procs:
            stop_process(proc)
        stop_process(zk_proc)


def client_partition(key: str) -> int:
    from txstore.codecs import partition_for_key

    return partition_for_key(key.encode(), 6)


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
        failover = failover_section(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"total {time.perf_counter() - started:.1f} s")
    record.add_timings("local", local, per="query")
    timings = {k: Timing.of([1e9 / rates[k]]) for k in ("client", "raw query", "raw ping")}
    timings["median query"] = Timing.of([rates["median query"] * 1e9])
    timings["median ping"] = Timing.of([rates["median ping"] * 1e9])
    record.add_timings("http", timings, per="request")
    record.figure(
        "iq_local_vs_direct",
        local["direct get"].median_ns / local["composite get"].median_ns,
        "x",
        based_on=["local/direct get", "local/composite get"],
    )
    record.figure(
        "http_queries_per_s", rates["client"], "req/s", digits=0, based_on=["http/client"]
    )
    record.figure("http_p99_ms", rates["p99_ms"], "ms", digits=2, based_on=["http/client"])
    record.figure(
        "http_vs_bare_ratio",
        rates["median ping"] / rates["median query"],
        "x",
        based_on=["http/median query", "http/median ping"],
    )
    record.figure("failover_seconds", failover, "s", digits=2)
    record.figure("http_slowloris_answered_ratio", rates["slowloris_answered"], "x", digits=3)
    record.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
