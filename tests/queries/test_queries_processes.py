"""Three instances in separate processes (``txstore serve``) on loopback ports with a static
assignment: every key's query through any instance reaches its owner; a partition moved
between instances keeps answering after re-discovery; ZooKeeper members (tests/queries/zk_member.py,
writing as they serve) take over the partitions of one that was SIGKILLed during a query load."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from txstore import Serdes, Stores, ValueAndTimestamp
from txstore.errors import StateStoreMigratedError
from txstore.queries import Application, HostInfo, QueryClient, StaticAssignment

ROOT = str(Path(__file__).resolve().parents[2])
N = 6
KEYS = [f"user-{i}" for i in range(120)]
DEADLINE = 30.0  # seconds any wait in this file may take


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def load_state(state: Path) -> None:
    """Write every key once, in this process, through an all-local application."""
    app = Application(
        "app",
        state,
        [
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            ),
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store("latest"),
                Serdes.string(),
                Serdes.json(),
            ),
        ],
        num_partitions=N,
        task_options={"sync": False},
    )
    app.start()
    for i, k in enumerate(KEYS):
        with app.writer(app.partition_for_key("counts", k)) as w:
            w.store("counts").put(k, i)
            w.store("latest").put(k, ValueAndTimestamp({"i": i}, 1000 + i))
    for p in app.active_partitions:
        with app.writer(p) as w:
            w.commit(1)
    app.close()


def serve(state: Path, server: str, *membership: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "txstore", "serve", str(state), "--application-id", "app",
         "--application-server", server, "--refresh-interval", "0.1", "-q", *membership],
        env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def get(host: str, path: str) -> tuple[int, Any]:
    h = HostInfo.parse(host)
    c = http.client.HTTPConnection(h.host, h.port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def wait_for(predicate: Any, what: str, procs: list[subprocess.Popen[bytes]] | None = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        dead = [p.args for p in procs or () if p.poll() is not None]
        if dead:
            raise AssertionError(f"a server exited while waiting for {what}")
        try:
            if predicate():
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stop(procs: list[subprocess.Popen[bytes]]) -> tuple[list[int], list[str]]:
    """SIGTERM every process; their exit codes and standard errors."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes, errors = [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        codes.append(p.returncode)
        errors.append(err.decode(errors="replace"))
    return codes, errors


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("cluster")
    state, assignment = root / "state", root / "assignment.json"
    load_state(state)
    hosts = [f"127.0.0.1:{p}" for p in free_ports(3)]
    StaticAssignment.write(
        assignment,
        {
            "application_id": "app",
            "num_partitions": N,
            "instances": {
                hosts[0]: {"active": [0, 1], "standby": [2]},
                hosts[1]: {"active": [2, 3], "standby": [4]},
                hosts[2]: {"active": [4, 5], "standby": [0]},
            },
        },
    )
    procs = [serve(state, h, "--assignment", str(assignment)) for h in hosts]
    try:
        for h in hosts:
            wait_for(
                lambda h=h: get(h, "/v1/health")[1]["state"] == "RUNNING", f"{h} running", procs
            )
        yield {"hosts": hosts, "assignment": assignment, "procs": procs}
    finally:
        codes, errors = stop(procs)
        assert codes == [0, 0, 0], errors


def test_every_key_through_any_instance_reaches_its_owner(cluster: dict[str, Any]) -> None:
    hosts = cluster["hosts"]
    metas = [get(h, "/v1/metadata")[1] for h in hosts]
    assert metas[0] == metas[1] == metas[2]
    owners = {p: f"127.0.0.1:{m['port']}" for m in metas[0]["instances"] for p in m["partitions"]}
    assert sorted(owners) == list(range(N))
    requests = 0
    for bootstrap in hosts:
        with QueryClient(bootstrap) as client:
            values = [client.get("counts", k) for k in KEYS]
            assert values == list(range(len(KEYS)))
            assert client.get("latest", "user-7") == ValueAndTimestamp({"i": 7}, 1007)
            assert client.get("latest", "user-7", type="key_value_store") == {"i": 7}
            requests += len(KEYS) + 2
            everything = client.all("counts")
            assert sorted(kv.value for kv in everything) == list(range(len(KEYS)))
    assert requests == 3 * (len(KEYS) + 2)
    # a non-owner names the owner; a standby answers stale queries
    for k in KEYS[:12]:
        status, kq = get(hosts[0], f"/v1/metadata/stores/counts/key?key={k}")
        owner = owners[kq["partition"]]
        assert f"{kq['active_host']['host']}:{kq['active_host']['port']}" == owner
        for h in hosts:
            status, doc = get(h, f"/v1/stores/counts/get?key={k}")
            if h == owner:
                assert (status, doc["value"]) == (200, int(k[5:]))
            else:
                assert (status, doc["active_host"]) == (409, owner)
    k0 = next(k for k in KEYS if kq_partition(hosts[0], k) == 0)
    status, doc = get(hosts[2], f"/v1/stores/counts/get?key={k0}&stale=true")
    assert (status, doc["value"]) == (200, int(k0[5:]))  # hosts[2] keeps a standby of 0


def kq_partition(host: str, key: str) -> int:
    partition: int = get(host, f"/v1/metadata/stores/counts/key?key={key}")[1]["partition"]
    return partition


def test_moved_partition_keeps_answering_after_rediscovery(cluster: dict[str, Any]) -> None:
    hosts, path = cluster["hosts"], cluster["assignment"]
    moved = [k for k in KEYS if kq_partition(hosts[0], k) == 0]
    stale_client = QueryClient(hosts[2])
    assert stale_client.get("counts", moved[0]) == int(moved[0][5:])  # caches the metadata
    StaticAssignment.write(
        path,
        {
            "application_id": "app",
            "num_partitions": N,
            "instances": {
                hosts[0]: {"active": [1], "standby": [2]},
                hosts[1]: {"active": [0, 2, 3], "standby": [4]},
                hosts[2]: {"active": [4, 5], "standby": [1]},
            },
        },
    )
    new_port = HostInfo.parse(hosts[1]).port
    for h in hosts:  # every instance re-read the assignment
        wait_for(
            lambda h=h: any(
                m["port"] == new_port and 0 in m["partitions"]
                for m in get(h, "/v1/metadata")[1]["instances"]
            ),
            f"{h} to see the new assignment",
        )
    wait_for(lambda: 0 in get(hosts[1], "/v1/health")[1]["active_partitions"], "the handover")
    wait_for(lambda: get(hosts[1], "/v1/health")[1]["state"] == "RUNNING", "the restore")
    status, doc = get(hosts[0], f"/v1/stores/counts/get?key={moved[0]}")
    assert (status, doc["error"], doc["active_host"]) == (409, "StateStoreMigratedError", hosts[1])
    # the client still believes hosts[0] owns partition 0: one 409, a refresh, one retry
    assert [stale_client.get("counts", k) for k in moved] == [int(k[5:]) for k in moved]
    with QueryClient(hosts[0]) as fresh:
        assert [fresh.get("counts", k) for k in KEYS] == list(range(len(KEYS)))
    stale_client.close()
    # a client whose re-discovery keeps pointing at the old owner gives up after retry_timeout
    stuck = QueryClient(hosts[0], retry_timeout=0.3)
    stuck.refresh()
    assert stuck._meta is not None
    stuck._meta = dataclasses.replace(stuck._meta, owners={0: HostInfo.parse(hosts[0])})

    def no_refresh() -> Any:
        yield from ()

    stuck._refresh = no_refresh  # type: ignore[method-assign]
    t0 = time.monotonic()
    with pytest.raises(StateStoreMigratedError):
        stuck.get("counts", moved[0])
    assert time.monotonic() - t0 >= 0.1  # retried with backoff (20, 40, 80 ms...) until then
    stuck.close()


def member(state: Path, host: str, zookeeper: str, root: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("zk_member.py")), str(state), host,
         zookeeper, root, "--session-timeout", "2"],
        env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def test_failover_keeps_answering_consistently(zookeeper: str, tmp_path: Path) -> None:
    """Three instances on ZooKeeper, writing and serving; one is SIGKILLed during a query load:
    every query is answered (the client retries the dead instance's partitions until their new
    owner serves them), and no answer mixes two committed states of a partition."""
    hosts = [f"127.0.0.1:{p}" for p in free_ports(3)]
    root = f"/failover{os.getpid()}"
    procs = [member(tmp_path, h, zookeeper, root) for h in hosts]
    answered: list[int] = [0]
    failures: list[str] = []
    mixed: list[tuple[int, list[Any]]] = []
    stop_load = threading.Event()
    seen: dict[int, int] = {}

    def load() -> None:
        with QueryClient(hosts, retry_timeout=30) as client:
            while not stop_load.is_set():
                try:
                    items = client.all("counts", read_committed=True)
                except Exception as exc:  # recorded: the assertion below shows it
                    failures.append(repr(exc))
                    continue
                by_partition: dict[int, set[int]] = {}
                for kv in items:
                    by_partition.setdefault(partition_of(kv.key), set()).add(kv.value)
                for p, values in by_partition.items():
                    if len(values) != 1:
                        mixed.append((p, sorted(values)))  # two committed states
                    elif min(values) < seen.get(p, 0):
                        mixed.append((p, ["went back", seen[p], min(values)]))
                    else:
                        seen[p] = min(values)
                answered[0] += 1

    try:

        def split() -> bool:
            docs = [get(h, "/v1/health")[1] for h in hosts]
            parts = sorted(p for d in docs for p in d["active_partitions"])
            return all(d["state"] == "RUNNING" for d in docs) and parts == list(range(N))

        wait_for(split, "three members sharing the partitions", procs)
        wait_for(lambda: len(seen_keys(hosts[0])) == len(KEYS), "every key written", procs)
        loader = threading.Thread(target=load)
        loader.start()
        wait_for(lambda: answered[0] >= 5, "queries answered before the kill")
        victim = get(hosts[2], "/v1/health")[1]["active_partitions"]
        procs[2].kill()  # no goodbye: its ZooKeeper session expires after 2 s
        before = answered[0]

        def moved() -> bool:
            docs = [get(h, "/v1/health")[1] for h in hosts[:2]]
            parts = sorted(p for d in docs for p in d["active_partitions"])
            return parts == list(range(N)) and all(d["state"] == "RUNNING" for d in docs)

        wait_for(moved, f"the survivors to take partitions {victim}", procs[:2])
        wait_for(lambda: answered[0] >= before + 5, "queries answered after the move")
        stop_load.set()
        loader.join(30)
        assert not failures and not mixed, (failures[:3], mixed[:3])
        assert all(seen.get(p, 0) > 0 for p in victim)  # the new owners kept writing
    finally:
        stop_load.set()
        codes, errors = stop(procs)
    assert codes[:2] == [0, 0] and codes[2] == -signal.SIGKILL, errors


def partition_of(key: str) -> int:
    """The partition of ``key`` (Kafka's partitioner over the string serde's bytes)."""
    from txstore.codecs import partition_for_key

    return partition_for_key(key.encode(), N)


def seen_keys(host: str) -> list[Any]:
    with QueryClient(host) as client:
        return client.all("counts")


def test_serve_zookeeper_members_take_over_a_killed_member(zookeeper: str, tmp_path: Path) -> None:
    """Two ``txstore serve --zookeeper`` processes share the partitions; one is SIGKILLed and
    the other takes them all once its ZooKeeper session expires; the client keeps answering."""
    state = tmp_path / "state"
    load_state(state)
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    args = ["--zookeeper", zookeeper, "--zookeeper-root", f"/serve{os.getpid()}",
            "--num-partitions", str(N), "--session-timeout", "1.5"]  # fmt: skip
    procs = [serve(state, h, *args) for h in hosts]
    try:

        def split() -> bool:
            docs = [get(h, "/v1/health")[1] for h in hosts]
            parts = [d["active_partitions"] for d in docs]
            return (
                all(d["state"] == "RUNNING" for d in docs)
                and sorted(p for ps in parts for p in ps) == list(range(N))
                and all(parts)
            )

        wait_for(split, "the two members to share the partitions", procs)
        with QueryClient(hosts) as client:
            assert [client.get("counts", k) for k in KEYS] == list(range(len(KEYS)))
        procs[1].kill()  # no goodbye: its session expires
        with QueryClient(hosts, retry_timeout=30) as client:  # retried until the move
            assert [client.get("counts", k) for k in KEYS] == list(range(len(KEYS)))
        assert get(hosts[0], "/v1/health")[1]["active_partitions"] == list(range(N))
    finally:
        codes, errors = stop(procs)
    assert codes[0] == 0 and codes[1] == -signal.SIGKILL, errors
