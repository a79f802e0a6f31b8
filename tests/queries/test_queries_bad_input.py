"""Every bad request the query service once answered with a 500, a hang or a dropped
connection now gets a 4xx with a JSON error body; slow and idle clients do not starve others;
positions (IQv2) are reported and can be demanded.

Each test names what the bad input gets."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from txstore import Serdes, SessionWindow, Stores, ValueAndTimestamp, Windowed
from txstore.errors import NotCaughtUpError
from txstore.queries import Application, QueryClient, QueryServer

TOKEN = "s3cret"
N = 4
HOUR = 3_600_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    app = Application(
        "bad",
        tmp_path_factory.mktemp("bad"),
        [
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            ),
            Stores.timestamped_window_store_builder(
                Stores.persistent_timestamped_window_store("clicks", HOUR, 60_000, False),
                Serdes.string(),
                Serdes.long(),
            ),
            Stores.session_store_builder(
                Stores.persistent_session_store("visits", HOUR), Serdes.string(), Serdes.long()
            ),
        ],
        application_server="127.0.0.1:0",
        num_partitions=N,
        task_options={"sync": False},
    )
    server = QueryServer(
        app, token=TOKEN, body_timeout=0.5, header_timeout=0.5, max_in_flight=2
    ).start()
    app.start()
    for i in range(20):
        k = f"k{i}"
        with app.writer(app.partition_for_key("counts", k)) as w:
            w.store("counts").put(k, i)
            w.store("clicks").put(k, ValueAndTimestamp(i, 100 + i), 60_000)
            w.store("clicks").put(k, ValueAndTimestamp(i, 100 + i), 120_000)
            w.store("visits").put(Windowed(k, SessionWindow(1_000, 2_000 + i)), i)
            w.store("visits").put(Windowed(k, SessionWindow(5_000, 6_000 + i)), i)
    for p in range(N):
        with app.writer(p) as w:
            w.commit(1)
    http = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    )
    yield app, server, http
    http.close()
    server.close()
    app.close()


def raw(server: QueryServer, data: bytes, *, shut: bool = False, wait: float = 5) -> bytes:
    """Send ``data`` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection((server.address.host, server.address.port), timeout=wait) as s:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def status_and_doc(answer: bytes) -> tuple[int, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    line = head.split(b"\r\n")[0]
    assert line.startswith(b"HTTP/1.1 "), answer[:80]
    return int(line.split()[1]), json.loads(body)


def expect(http: httpx.Client, path: str, status: int, error: str, **kw: Any) -> dict[str, Any]:
    r = http.request(kw.pop("method", "GET"), path, **kw)
    doc: dict[str, Any] = r.json()
    assert (r.status_code, doc["error"]) == (status, error), (path, doc)
    assert doc["status"] == status and doc["message"]
    return doc


def test_deep_json_and_non_json_bodies_get_400(served: Any) -> None:
    _, _, http = served
    deep = b'{"keys": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"  # was RecursionError: 500
    doc = expect(
        http, "/v1/stores/counts/get", 400, "InvalidArgumentError", method="POST", content=deep
    )
    assert "deeper than 32" in doc["message"]
    for body in (b'{"keys": [NaN]}', b'{"keys": [Infinity]}', b"\xff", b'{"keys": "k1"}'):
        expect(
            http, "/v1/stores/counts/get", 400, "InvalidArgumentError", method="POST", content=body
        )
    r = http.post("/v1/stores/counts/get", content=b'{"keys": ["k1", "k2"]}')
    assert [d["value"] for d in r.json()["results"]] == [1, 2]


def test_wrong_store_kind_or_type_gets_400(served: Any) -> None:
    _, _, http = served
    # get on a window or session store, and a type= the store is not: was AttributeError: 500
    expect(http, "/v1/stores/clicks/get?key=k1", 400, "InvalidArgumentError")
    expect(http, "/v1/stores/visits/get?key=k1", 400, "InvalidArgumentError")
    expect(
        http,
        "/v1/stores/clicks/get",
        400,
        "InvalidArgumentError",
        method="POST",
        content=b'{"keys": []}',
    )
    expect(http, "/v1/stores/counts/get?key=k1&type=window_store", 400, "InvalidStateStoreError")
    expect(
        http,
        "/v1/stores/clicks/fetch?key=k1&time=60000&type=session_store",
        400,
        "InvalidStateStoreError",
    )
    expect(
        http,
        "/v1/stores/visits/sessions?key=k1&earliest_end=0&latest_start=9&type=key_value_store",
        400,
        "InvalidStateStoreError",
    )


def test_truncated_or_invalid_cursors_get_400(served: Any) -> None:
    _, _, http = served
    short = base64.urlsafe_b64encode(b"abc").decode().rstrip("=")
    cases = [  # were struct.error (500) or silently accepted
        f"/v1/stores/clicks/fetch?key=k1&time_from=0&time_to={HOUR}&after=0.0.{short}",
        f"/v1/stores/visits/sessions?key=k1&earliest_end=0&latest_start={HOUR}&after=0.0.{short}",
        "/v1/stores/counts/all?partition=0&after=0.0.!!!!",
        "/v1/stores/counts/all?partition=0&after=0.0.YW%3Dx",
        "/v1/stores/counts/all?partition=0&after=0.x.YQ",
    ]
    for path in cases:
        expect(http, path, 400, "InvalidArgumentError")


def test_a_resumed_page_still_works(served: Any) -> None:
    _, _, http = served
    first = http.get("/v1/stores/counts/all?partition=0&limit=1").json()
    assert first["truncated"]
    more = http.get(f"/v1/stores/counts/all?partition=0&after={first['resume']}").json()
    assert more["items"] and more["items"][0]["key"] > first["items"][0]["key"]


def test_short_body_gets_408_and_a_closed_one_no_500(served: Any) -> None:
    _, server, _ = served
    head = (
        b"POST /v1/stores/counts/get HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    status, doc = status_and_doc(raw(server, head + b'{"keys": ['))  # was a 30 s hang, then 500
    assert (status, doc["error"]) == (408, "RequestTimeout")
    answer = raw(server, head + b'{"keys": [', shut=True)  # the client gave up
    assert not answer or status_and_doc(answer)[0] == 400


def test_lone_surrogates_get_400(served: Any) -> None:
    _, _, http = served
    expect(http, "/v1/stores/counts/get?key=%ED%A0%80", 400, "InvalidArgumentError")
    expect(
        http,
        "/v1/stores/counts/get",
        400,
        "InvalidArgumentError",
        method="POST",
        content=b'{"keys": ["\\ud800"]}',
    )  # was a dropped connection


def test_not_http_1_1_gets_a_json_400(served: Any) -> None:
    _, server, _ = served
    for data in (
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"\x16\x03\x01garbage\r\n\r\n",
        b"HELLO\r\n\r\n",
    ):
        status, doc = status_and_doc(raw(server, data))  # was a bare body without status line
        assert (status, doc["error"]) == (400, "BadRequest")


def test_bearer_scheme_is_case_insensitive(served: Any) -> None:
    _, server, _ = served
    for scheme, status in (("bearer", 200), ("BEARER", 200), ("Bearer", 200), ("Basic", 401)):
        r = httpx.get(
            f"{server.url}/v1/health",
            headers={"Authorization": f"{scheme} {TOKEN}"},
            trust_env=False,
        )
        assert r.status_code == status, scheme
    r = httpx.get(
        f"{server.url}/v1/health", headers={"Authorization": "Bearer nope"}, trust_env=False
    )
    assert r.status_code == 401 and r.json()["error"] == "Unauthorized"


def test_a_bad_partition_on_get_is_the_error_of_all(served: Any) -> None:
    app, _, http = served
    a = expect(http, "/v1/stores/counts/all?partition=9", 409, "InvalidStateStorePartitionError")
    g = expect(
        http, "/v1/stores/counts/get?key=k1&partition=9", 409, "InvalidStateStorePartitionError"
    )
    assert a["message"] == g["message"]  # was 200, ignoring the partition
    p = app.partition_for_key("counts", "k1")
    expect(
        http, f"/v1/stores/counts/get?key=k1&partition={(p + 1) % N}", 400, "InvalidArgumentError"
    )
    assert http.get(f"/v1/stores/counts/get?key=k1&partition={p}").json()["value"] == 1


def test_slowloris_and_idle_connections_are_closed(served: Any) -> None:
    """A connection trickling its headers gets 408 after header_timeout; one that sends
    nothing is closed; other clients are answered meanwhile."""
    _, server, http = served
    addr = (server.address.host, server.address.port)
    slow = socket.create_connection(addr, timeout=5)
    idle = [socket.create_connection(addr, timeout=5) for _ in range(20)]
    t0 = time.monotonic()
    slow.sendall(b"GET /v1/health HTTP/1.1\r\n")
    got = b""
    for _ in range(40):  # one header byte every 50 ms
        try:
            slow.sendall(b"X")
        except OSError:
            break
        assert http.get("/v1/stores/counts/get?key=k3").json()["value"] == 3
        time.sleep(0.05)
    slow.settimeout(5)
    try:
        while chunk := slow.recv(4096):
            got += chunk
    except ConnectionResetError:
        pass
    assert status_and_doc(got)[0] == 408 and time.monotonic() - t0 < 3
    for s in idle:
        assert s.recv(10) == b""  # closed by the server, without an answer
        s.close()
    slow.close()


def test_in_flight_limit_answers_503(served: Any) -> None:
    _, server, http = served
    addr = (server.address.host, server.address.port)
    head = (
        b"POST /v1/stores/counts/get HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
        b"Content-Length: 50\r\n\r\n{"
    )
    held = [socket.create_connection(addr, timeout=5) for _ in range(2)]
    for s in held:  # two requests waiting for their bodies: the limit (max_in_flight=2)
        s.sendall(head)
    time.sleep(0.1)
    r = http.get("/v1/health")
    assert r.status_code == 503 and r.json()["error"] == "TooManyRequests"
    assert r.headers["retry-after"] == "1"
    for s in held:
        s.close()
    time.sleep(0.6)
    assert http.get("/v1/health").status_code == 200


def test_answers_carry_positions_and_min_position_waits(served: Any) -> None:
    app, server, http = served
    p = app.partition_for_key("counts", "k5")
    doc = http.get("/v1/stores/counts/get?key=k5").json()
    now = app.committed_positions("counts")[p]
    assert doc["position"] == {str(p): now}
    ahead = f"{p}:{now + 1}"
    doc = expect(
        http,
        f"/v1/stores/counts/get?key=k5&min_position={ahead}&wait_ms=50",
        412,
        "NotCaughtUpError",
    )
    expect(http, "/v1/stores/counts/get?key=k5&min_position=zz", 400, "InvalidArgumentError")

    def commit_soon() -> None:
        time.sleep(0.2)
        with app.writer(p) as w:
            w.store("counts").put("k5", 55)
            w.commit(2)

    t = threading.Thread(target=commit_soon)
    t.start()
    with QueryClient(str(server.address), token=TOKEN) as client:
        assert client.get("counts", "k5", min_position={p: now + 1}, wait=5) == 55
        assert client.last_position["counts"][p] >= now + 1
        with pytest.raises(NotCaughtUpError):
            client.get("counts", "k5", min_position={p: 10**9}, wait=0.05)
    t.join()


def test_random_bad_arguments_never_get_a_5xx(served: Any) -> None:
    """A fixed-seed sweep of odd parameter values over every store operation: 2xx or 4xx."""
    import random

    _, _, http = served
    values = ["", "0", "-1", "9" * 30, "-" + "9" * 30, "abc", "1e5", "%00", "%FF", "true",
              "null", "k1", "NaN", "[1]", "{}", "*", "AAAA", "!!", "%ED%A0%80",
              "0.0.AA"]  # fmt: skip
    params = ["key", "key_b64", "from", "to", "prefix", "time", "time_from", "time_to",
              "key_from", "key_to", "earliest_end", "latest_start", "start", "end", "limit",
              "partition", "after", "type", "reverse", "backward", "stale", "read_committed",
              "min_position", "wait_ms"]  # fmt: skip
    ops = ["get", "range", "prefix", "all", "count", "fetch", "fetch_all", "sessions", "session"]
    rnd = random.Random(25)
    for _ in range(400):
        store = rnd.choice(["counts", "clicks", "visits"])
        query = "&".join(
            f"{rnd.choice(params)}={rnd.choice(values)}" for _ in range(rnd.randint(0, 5))
        )
        path = f"/v1/stores/{store}/{rnd.choice(ops)}?{query}"
        r = http.get(path)
        assert r.status_code < 500, (path, r.text[:200])
        assert "error" in r.json() or r.status_code == 200
