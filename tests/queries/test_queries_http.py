"""The HTTP query service and its client, in one process: endpoints, JSON forms, limits,
authentication and every error status."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from txstore import (
    Headers,
    Serdes,
    SessionWindow,
    Stores,
    TimeWindow,
    ValueAndTimestamp,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    QueryServiceError,
    UnknownStateStoreError,
)
from txstore.queries import Application, QueryClient, QueryServer, StaticAssignment

TOKEN = "t0ken"
N = 4
KEYS = [f"user-{i}" for i in range(100)]


def builders() -> list[Any]:
    return [
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        ),
        Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store_with_headers("tagged"),
            Serdes.string(),
            Serdes.json(),
        ),
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("blobs"), Serdes.bytes(), Serdes.bytes()
        ),
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("by-id"), Serdes.long(), Serdes.double()
        ),
    ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    state = tmp_path_factory.mktemp("state")
    app = Application(
        "app",
        state,
        builders(),
        application_server="127.0.0.1:0",
        num_partitions=N,
        task_options={"sync": False},
    )
    server = QueryServer(app, token=TOKEN, max_results=50, max_request_bytes=4096)
    server.start()
    app.start()
    for i, k in enumerate(KEYS):
        with app.writer(app.partition_for_key("counts", k)) as w:
            w.store("counts").put(k, i)
            w.store("tagged").put(k, ValueTimestampHeaders({"n": i}, 5, Headers([("a", b"\x01")])))
        with app.writer(app.partition_for_key("blobs", bytes([i]))) as w:
            w.store("blobs").put(bytes([i]), bytes([i, 255]))
        with app.writer(app.partition_for_key("by-id", i)) as w:
            w.store("by-id").put(i, i / 2)
    for p in app.active_partitions:
        with app.writer(p) as w:
            w.commit(1)
    yield app, server
    server.close()
    app.close()


def call(
    server: QueryServer,
    path: str,
    *,
    method: str = "GET",
    body: bytes | None = None,
    token: str | None = TOKEN,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, http.client.HTTPResponse]:
    c = http.client.HTTPConnection(server.address.host, server.address.port, timeout=10)
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None, r


def test_point_queries_and_json_forms(served: Any) -> None:
    app, server = served
    status, doc, r = call(server, "/v1/stores/counts/get?key=user-7")
    assert status == 200 and r.getheader("Content-Type") == "application/json; charset=utf-8"
    p = app.partition_for_key("counts", "user-7")
    position = doc.pop("position")  # the committed offset the answer reflects
    assert position == {str(p): app.committed_positions("counts")[p]}
    assert doc == {"key": "user-7", "value": 7, "found": True, "partition": p}
    assert call(server, "/v1/stores/counts/get?key=absent")[1]["found"] is False
    _, doc, _ = call(server, "/v1/stores/tagged/get?key=user-3")
    assert doc["value"] == {"value": {"n": 3}, "timestamp": 5, "headers": [["a", "AQ=="]]}
    _, doc, _ = call(server, "/v1/stores/tagged/get?key=user-3&type=timestamped_key_value_store")
    assert doc["value"] == {"value": {"n": 3}, "timestamp": 5}
    _, doc, _ = call(server, "/v1/stores/tagged/get?key=user-3&type=key_value_store")
    assert doc["value"] == {"n": 3}
    key = base64.b64encode(bytes([9])).decode()
    _, doc, _ = call(server, f"/v1/stores/blobs/get?key={key}")
    assert doc["value"] == base64.b64encode(bytes([9, 255])).decode()
    _, doc, _ = call(server, "/v1/stores/by-id/get?key=8&read_committed=true")
    assert doc["value"] == 4.0
    _, doc, _ = call(
        server, f"/v1/stores/counts/get?key_b64={base64.b64encode(b'user-2').decode()}"
    )
    assert doc["value"] == 2


def test_client_queries(served: Any) -> None:
    app, server = served
    with QueryClient(str(server.address), token=TOKEN) as client:
        assert [client.get("counts", k) for k in KEYS] == list(range(len(KEYS)))
        assert client.get("tagged", "user-1") == ValueTimestampHeaders(
            {"n": 1}, 5, Headers([("a", b"\x01")])
        )
        assert client.get("tagged", "user-1", type="timestamped_key_value_store") == (
            ValueAndTimestamp({"n": 1}, 5)
        )
        assert client.get("blobs", bytes([3])) == bytes([3, 255])
        assert client.get("by-id", 10, read_committed=True) == 5.0
        everything = client.all("counts")
        assert sorted(kv.value for kv in everything) == list(range(len(KEYS)))
        assert len(client.all("counts", limit=7)) == 7
        assert sorted(kv.key for kv in client.range("counts", "user-5", "user-5")) == ["user-5"]
        assert len(client.range("counts", "user-1", "user-2", reverse=True)) == 12
        assert {kv.key for kv in client.prefix_scan("counts", "user-9")} == {
            "user-9",
            *[f"user-9{i}" for i in range(10)],
        }
        assert client.approximate_num_entries("counts") == len(KEYS)
        meta = client.metadata_for_key("counts", "user-5")
        assert meta.partition == app.partition_for_key("counts", "user-5")
        assert meta.active_host == server.address
        assert [m.host_info for m in client.metadata()] == [server.address]
        assert [m.host_info for m in client.metadata_for_store("counts")] == [server.address]
        assert {s["name"] for s in client.stores()} == {"counts", "tagged", "blobs", "by-id"}
        assert client.health(server.address)["state"] == "RUNNING"
        with pytest.raises(UnknownStateStoreError, match="no such store is registered"):
            client.get("nope", "x")
        with pytest.raises(InvalidStateStoreError, match="does not accept"):
            client.get("counts", "user-1", type="timestamped_key_value_store")


def test_multi_get(served: Any) -> None:
    _, server = served
    body = json.dumps({"keys": ["user-1", "user-2", "none"]}).encode()
    status, doc, _ = call(server, "/v1/stores/counts/get", method="POST", body=body)
    assert status == 200
    assert [(r["key"], r["value"]) for r in doc["results"]] == [
        ("user-1", 1),
        ("user-2", 2),
        ("none", None),
    ]
    status, doc, _ = call(server, "/v1/stores/counts/get", method="POST", body=b"{nope")
    assert status == 400 and doc["error"] == "InvalidArgumentError"
    too_many = json.dumps({"keys": [f"k{i}" for i in range(51)]}).encode()
    assert call(server, "/v1/stores/counts/get", method="POST", body=too_many)[0] == 400
    wrong = json.dumps({"keys": [1]}).encode()
    assert call(server, "/v1/stores/counts/get", method="POST", body=wrong)[0] == 400


def test_limits(served: Any) -> None:
    _, server = served
    status, doc, _ = call(server, "/v1/stores/counts/all")
    assert status == 200 and len(doc["items"]) == 50 and doc["truncated"] is True
    assert "resume" not in doc  # several partitions chained: no position can resume it
    _, doc, _ = call(server, "/v1/stores/counts/all?limit=3&partition=0")
    assert len(doc["items"]) == 3 and doc["truncated"] is True
    _, more, _ = call(server, "/v1/stores/counts/all?limit=3&partition=0&after=" + doc["resume"])
    assert more["items"][0]["key"] > doc["items"][-1]["key"]
    with QueryClient(str(server.address), token=TOKEN) as client:  # 100 keys, 50 a page
        assert sorted(kv.key for kv in client.all("counts")) == sorted(KEYS)
    _, doc, _ = call(server, "/v1/stores/counts/range?from=user-5&to=user-5")
    assert sorted(doc.pop("position")) == ["0", "1", "2", "3"]  # every partition was read
    assert doc == {"items": [{"key": "user-5", "value": 5}], "truncated": False}
    status, doc, _ = call(server, "/v1/stores/counts/get", method="POST", body=b"x" * 5000)
    assert status == 413 and doc["error"] == "RequestTooLarge"
    status, doc, _ = call(server, "/v1/stores/counts/get?key=" + "a" * 5000)
    assert status == 414


def test_error_statuses(served: Any) -> None:
    _, server = served
    cases = [
        ("/v1/stores/nope/get?key=x", 404, "UnknownStateStoreError"),
        ("/v1/metadata/stores/nope", 404, "UnknownStateStoreError"),
        ("/v1/nothing", 404, "NotFound"),
        ("/other", 404, "NotFound"),
        ("/v1/stores/counts/explode", 404, "NotFound"),
        ("/v1/stores/counts/get", 400, "InvalidArgumentError"),
        ("/v1/stores/by-id/get?key=abc", 400, "InvalidArgumentError"),
        ("/v1/stores/by-id/get?key=99999999999999999999", 400, "InvalidArgumentError"),
        ("/v1/stores/counts/get?key=a&key=b", 400, "InvalidArgumentError"),
        ("/v1/stores/counts/get?key=a&type=bogus", 400, "InvalidArgumentError"),
        ("/v1/stores/counts/get?key=a&stale=maybe", 400, "InvalidArgumentError"),
        ("/v1/stores/counts/all?limit=0", 400, "InvalidArgumentError"),
        ("/v1/stores/counts/fetch?key=a&time=1", 400, "InvalidArgumentError"),
        ("/v1/stores/blobs/get?key=***", 400, "InvalidArgumentError"),
        (
            "/v1/stores/counts/get?key=a&type=timestamped_key_value_store",
            400,
            "InvalidStateStoreError",
        ),
        ("/v1/stores/counts/all?partition=77", 409, "InvalidStateStorePartitionError"),
    ]
    for path, status, error in cases:
        got, doc, _ = call(server, path)
        assert (got, doc["error"]) == (status, error), path
        assert doc["status"] == status and doc["message"]
    got, doc, r = call(server, "/v1/health", token=None)
    assert got == 401 and r.getheader("WWW-Authenticate", "").startswith("Bearer")
    assert call(server, "/v1/health", token="wrong")[0] == 401
    assert call(server, "/v1/health", method="DELETE")[0] == 405
    assert call(server, "/v1/stores/counts/all", method="POST", body=b"{}")[0] == 405
    chunked = {"Transfer-Encoding": "chunked"}
    got, _, _ = call(
        server, "/v1/stores/counts/get", method="POST", body=b"0\r\n\r\n", headers=chunked
    )
    assert got == 411


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_misdirected_key_names_its_owner(tmp_path: Path) -> None:
    """A key whose partition lives elsewhere gets 409 with the owner, not a false 'absent'."""
    me, other = f"127.0.0.1:{free_port()}", "127.0.0.1:1"
    assignment = {
        "num_partitions": N,
        "instances": {me: {"active": [0]}, other: {"active": [1, 2, 3]}},
    }
    app = Application(
        "app",
        tmp_path,
        builders()[:1],
        application_server=me,
        task_options={"sync": False},
        membership=StaticAssignment(assignment=assignment),
    )
    server = QueryServer(app).start()
    app.start()
    try:
        key = next(k for k in KEYS if app.partition_for_key("counts", k) == 2)
        status, doc, _ = call(server, f"/v1/stores/counts/get?key={key}", token=None)
        assert status == 409 and doc["error"] == "StateStoreMigratedError"
        assert doc["active_host"] == other and doc["partition"] == 2
        assert doc["message"] == "The specified partition 2 for store counts does not exist."
        status, doc, _ = call(server, f"/v1/metadata/stores/counts/key?key={key}", token=None)
        assert doc["active_host"] == {"host": "127.0.0.1", "port": 1}
    finally:
        server.close()
        app.close()


def test_keep_alive_and_connection_limit(tmp_path: Path) -> None:
    app = Application(
        "app",
        tmp_path,
        builders()[:1],
        application_server="127.0.0.1:0",
        num_partitions=1,
        task_options={"sync": False},
    )
    server = QueryServer(app, max_connections=2, idle_timeout=5)
    server.start()
    app.start()
    try:
        c = http.client.HTTPConnection(server.address.host, server.address.port, timeout=5)
        for _ in range(20):  # one connection, many requests
            c.request("GET", "/v1/stores/counts/get?key=x")
            r = c.getresponse()
            assert r.status == 200 and not r.will_close
            r.read()
        held = [
            socket.create_connection((server.address.host, server.address.port)) for _ in range(2)
        ]
        time.sleep(0.2)
        extra = http.client.HTTPConnection(server.address.host, server.address.port, timeout=5)
        extra.request("GET", "/v1/health")
        assert extra.getresponse().status == 503
        for s in held:
            s.close()
        c.close()
        extra.close()
    finally:
        server.close()
        app.close()


def test_server_refuses_remote_binding_by_default(tmp_path: Path) -> None:
    app = Application(
        "app", tmp_path, builders()[:1], application_server="10.1.2.3:7070", num_partitions=1
    )
    with pytest.raises(InvalidArgumentError, match="loopback"):
        QueryServer(app)
    with pytest.raises(InvalidArgumentError, match="token"):
        QueryServer(app, host="127.0.0.1", port=0, token="two words")


def test_client_reports_unreachable_instances() -> None:
    client = QueryClient(f"127.0.0.1:{free_port()}", timeout=2, retry_timeout=0.3)
    with pytest.raises(QueryServiceError) as exc:
        client.get("counts", "x")
    assert exc.value.status == 0 and exc.value.error == "ConnectionError"
    client.close()


def test_client_asks_the_next_instance_when_one_is_not_running(served: Any, tmp_path: Path) -> None:
    # An instance whose server answers while its application is not started (or stopped)
    # answers /v1/metadata with 503 and a typed error; the client must try the next one.
    _, server = served
    idle = Application(
        "app", tmp_path, builders(), application_server="127.0.0.1:0", num_partitions=N
    )
    with QueryServer(idle, token=TOKEN) as idle_server:
        for _ in ("not started", "stopped"):
            with QueryClient([str(idle_server.address), str(server.address)], token=TOKEN) as c:
                assert c.get("counts", "user-7") == 7
                assert [m.host_info for m in c.metadata()] == [server.address]
            idle.close()


@pytest.fixture(scope="module")
def windowed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    hour = 3_600_000
    app = Application(
        "win",
        tmp_path_factory.mktemp("windowed"),
        [
            Stores.timestamped_window_store_builder(
                Stores.persistent_timestamped_window_store("clicks", hour, 60_000, False),
                Serdes.string(),
                Serdes.long(),
            ),
            Stores.session_store_builder(
                Stores.persistent_session_store("visits", hour), Serdes.string(), Serdes.long()
            ),
        ],
        application_server="127.0.0.1:0",
        num_partitions=N,
        task_options={"sync": False},
    )
    server = QueryServer(app).start()
    app.start()
    for i in range(20):
        k = f"k{i}"
        with app.writer(app.partition_for_key("clicks", k)) as w:
            w.store("clicks").put(k, ValueAndTimestamp(i, 100 + i), 60_000)
            w.store("clicks").put(k, ValueAndTimestamp(10 * i, 200 + i), 120_000)
            w.store("visits").put(Windowed(k, SessionWindow(1_000, 2_000 + i)), i)
            w.commit(1)
    yield app, server
    server.close()
    app.close()


def test_window_and_session_endpoints(windowed: Any) -> None:
    _, server = windowed
    ok = lambda path: call(server, path, token=None)[1]  # noqa: E731
    assert ok("/v1/stores/clicks/fetch?key=k3&time=60000")["value"] == {
        "value": 3,
        "timestamp": 103,
    }
    assert ok("/v1/stores/clicks/fetch?key=k3&time=60000&type=window_store")["value"] == 3
    assert ok("/v1/stores/clicks/fetch?key=k3&time=5")["found"] is False
    doc = ok("/v1/stores/clicks/fetch?key=k3&time_from=0&time_to=200000&type=window_store")
    assert doc["items"] == [{"timestamp": 60000, "value": 3}, {"timestamp": 120000, "value": 30}]
    doc = ok("/v1/stores/clicks/fetch?key=k3&time_from=0&time_to=200000&backward=true")
    assert [d["timestamp"] for d in doc["items"]] == [120000, 60000]
    doc = ok("/v1/stores/clicks/fetch?key_from=k1&key_to=k1&time_from=0&time_to=60000")
    assert doc["items"] == [
        {
            "key": {"key": "k1", "window": {"start": 60000, "end": 120000}},
            "value": {"value": 1, "timestamp": 101},
        }
    ]
    assert len(ok("/v1/stores/clicks/fetch_all?time_from=0&time_to=60000")["items"]) == 20
    assert len(ok("/v1/stores/clicks/all?type=window_store")["items"]) == 40
    doc = ok("/v1/stores/visits/sessions?key=k4&earliest_end=0&latest_start=5000")
    assert doc["items"] == [
        {"key": {"key": "k4", "window": {"start": 1000, "end": 2004}}, "value": 4}
    ]
    doc = ok("/v1/stores/visits/sessions?key_from=k0&key_to=k9&earliest_end=0&latest_start=5000")
    assert len(doc["items"]) == 20
    doc = ok("/v1/stores/visits/session?key=k4&start=1000&end=2004")
    assert doc.pop("position") and doc == {"value": 4, "found": True}
    for path in (
        "/v1/stores/clicks/range",
        "/v1/stores/visits/all",
        "/v1/stores/visits/fetch?key=k1&time=1",
        "/v1/stores/clicks/sessions?key=k1&earliest_end=0&latest_start=1",
        "/v1/stores/clicks/fetch?key=k1&time_from=0",
        "/v1/stores/clicks/fetch?key=k1&time=x",
    ):
        assert call(server, path, token=None)[0] == 400, path


def test_window_and_session_client(windowed: Any) -> None:
    _, server = windowed
    with QueryClient(str(server.address)) as client:
        assert client.fetch("clicks", "k3", 60_000) == ValueAndTimestamp(3, 103)
        assert client.fetch("clicks", "k3", 60_000, type="window_store") == 3
        assert client.fetch("clicks", "k3", 0, 200_000, type="window_store") == [
            (60_000, 3),
            (120_000, 30),
        ]
        ranged = client.fetch("clicks", "k1", "k1", 0, 60_000)
        assert ranged == [(Windowed("k1", TimeWindow(60_000, 120_000)), ValueAndTimestamp(1, 101))]
        assert len(client.fetch_all("clicks", 0, 200_000, limit=25)) == 25
        assert len(client.all("clicks")) == 40
        assert client.find_sessions("visits", "k4", 0, 5_000) == [
            (Windowed("k4", SessionWindow(1_000, 2_004)), 4)
        ]
        assert len(client.find_sessions("visits", None, None, 0, 5_000)) == 20
        assert client.fetch_session("visits", "k4", 1_000, 2_004) == 4
        assert client.fetch_session("visits", "k4", 1_000, 9) is None
        with pytest.raises(InvalidArgumentError):
            client.fetch("clicks", "k1")


def test_malformed_requests_get_json_errors(served: Any) -> None:
    _, server = served
    """A header block above 16 KiB: 431; a request without Host: 400; JSON bodies."""
    for headers, status in (
        (b"Host: x\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"y" * 250) for i in range(400)), 431),
        (b"".join(b"X-%d: y\r\n" % i for i in range(120)), 400),
    ):
        with socket.create_connection((server.address.host, server.address.port), timeout=5) as s:
            s.sendall(b"GET /v1/health HTTP/1.1\r\n" + headers + b"\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0].startswith(b"HTTP/1.1 %d " % status)
        assert json.loads(body)["status"] == status
    status, doc, _ = call(server, "/v1/health", method="HEAD")
    assert status == 405 and doc is None


def test_stale_queries_fall_back_to_a_standby(tmp_path: Path) -> None:
    """The active owner is unreachable: a stale query retries on a standby of the partition."""
    a_host, b_host = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    plan = {
        "num_partitions": N,
        "instances": {a_host: {"active": [0, 1, 2, 3]}, b_host: {"standby": [0, 1, 2, 3]}},
    }
    apps, servers = [], []
    for host in (a_host, b_host):
        app = Application(
            "app",
            tmp_path,
            builders()[:1],
            application_server=host,
            membership=StaticAssignment(assignment=plan),
            task_options={"sync": False},
        )
        servers.append(QueryServer(app).start())
        app.start()
        apps.append(app)
        if host == a_host:  # the standby opens (read-only) what a committed
            for i, k in enumerate(KEYS):
                with app.writer(app.partition_for_key("counts", k)) as w:
                    w.store("counts").put(k, i)
            for p in app.active_partitions:
                with app.writer(p) as w:
                    w.commit(1)
    try:
        assert apps[1].standby_partitions == [0, 1, 2, 3]
        client = QueryClient([a_host, b_host], timeout=2, rebalance_wait=1)
        assert client.get("counts", "user-5") == 5
        servers[0].close()  # the owner's service goes away
        assert client.get("counts", "user-5", stale=True) == 5
        assert len(client.all("counts", stale=True)) == len(KEYS)
        with pytest.raises(QueryServiceError) as exc:
            client.get("counts", "user-5")
        assert exc.value.status == 0
        client.close()
    finally:
        for s in servers:
            s.close()
        for app in reversed(apps):
            app.close()


def test_async_client(served: Any) -> None:
    """AsyncQueryClient: the same queries, awaited, over one httpx.AsyncClient pool."""
    import asyncio

    from txstore.queries import AsyncQueryClient

    _, server = served

    async def main() -> tuple[list[Any], list[str], int, Any]:
        async with AsyncQueryClient(str(server.address), token=TOKEN) as client:
            values = await asyncio.gather(*(client.get("counts", k) for k in KEYS[:20]))
            keys = [kv.key for kv in await client.all("counts")]
            total = await client.approximate_num_entries("counts")
            try:
                await client.get("nope", "x")
            except UnknownStateStoreError as exc:
                return list(values), keys, total, exc
            return list(values), keys, total, None

    values, keys, total, error = asyncio.run(main())
    assert values == list(range(20))
    assert sorted(keys) == sorted(KEYS) and total >= len(KEYS)
    assert isinstance(error, UnknownStateStoreError)


def test_asgi_app_mounts_under_a_prefix(served: Any) -> None:
    """asgi_app in a user's Starlette app, under a mount path: same answers, same errors."""
    import asyncio

    import httpx
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from txstore.queries import asgi_app

    app, _ = served
    site = Starlette(routes=[Mount("/state/queries", app=asgi_app(app, token=TOKEN))])

    async def ask() -> list[tuple[int, Any]]:
        transport = httpx.ASGITransport(app=site)
        headers = {"Authorization": f"bearer {TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://x", headers=headers
        ) as h:
            out = []
            for path in (
                "/state/queries/v1/stores/counts/get?key=user-7",
                "/state/queries/v1/stores/nope/get?key=x",
                "/state/queries/v1/ping",
            ):
                r = await h.get(path)
                out.append((r.status_code, r.json()))
            return out

    (s1, d1), (s2, d2), (s3, d3) = asyncio.run(ask())
    assert s1 == 200 and d1["value"] == 7
    assert s2 == 404 and d2["error"] == "UnknownStateStoreError"
    assert (s3, d3) == (200, {"ok": True})


def test_a_client_created_before_its_server_waits_for_it(tmp_path: Path) -> None:
    """The first metadata read is inside the retry loop: a query sent while no instance
    listens yet is answered once one starts (it used to fail at once)."""
    import threading

    port = free_port()
    app = Application(
        "late",
        tmp_path,
        builders()[:1],
        application_server=f"127.0.0.1:{port}",
        num_partitions=1,
        task_options={"sync": False},
    )
    started: list[QueryServer] = []

    def start_later() -> None:
        time.sleep(0.5)
        started.append(QueryServer(app).start())
        app.start()

    t = threading.Thread(target=start_later)
    t.start()
    try:
        with QueryClient(f"127.0.0.1:{port}", retry_timeout=20) as client:
            assert client.get("counts", "nobody") is None
    finally:
        t.join()
        for s in started:
            s.close()
        app.close()
