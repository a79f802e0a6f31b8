"""Paging of the HTTP query service: with a tiny ``max_results`` and more items than that on
several partitions, every iterator query of the client returns exactly what the local stores
return (forward and backward), page boundaries falling between windows of one key, among keys
sharing prefixes, across segments, and within a run of duplicates; a page resumed after
concurrent commits returns nothing twice and misses nothing committed after its position."""

from __future__ import annotations

from typing import Any

import pytest

from txstore import Serdes, SessionWindow, Stores, Windowed
from txstore.errors import InvalidArgumentError
from txstore.queries import (
    Application,
    QueryableStoreTypes,
    QueryClient,
    QueryServer,
    StoreQueryParameters,
)

N = 3
HOUR = 3_600_000  # retention; segments of 1_800_000 ms
LONG_MAX = 2**63 - 1
KEYS = ["a", "a\x00", "a\x00b", "aa", "aab", "ab", "b", "ba", "\u00e9"] + [
    f"user-{i}" for i in range(25)
]
STARTS = [0, 700_000, 1_400_000, 1_750_000, 2_100_000, 2_800_000]
SESSIONS = [(0, 1_000), (500_000, 1_900_000), (2_000_000, 2_500_000), (3_000_000, 3_000_000)]


def builders() -> list[Any]:
    return [
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("kv"), Serdes.string(), Serdes.long()
        ),
        Stores.window_store_builder(
            Stores.persistent_window_store("win", HOUR, 1_000, False),
            Serdes.string(),
            Serdes.long(),
        ),
        Stores.window_store_builder(
            Stores.persistent_window_store("dups", HOUR, 1_000, True),
            Serdes.string(),
            Serdes.long(),
        ),
        Stores.session_store_builder(
            Stores.persistent_session_store("sess", HOUR), Serdes.string(), Serdes.long()
        ),
    ]


@pytest.fixture(scope="module", params=[2, 3])
def paged(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    app = Application(
        "paging",
        tmp_path_factory.mktemp("paging"),
        builders(),
        application_server="127.0.0.1:0",
        num_partitions=N,
        task_options={"sync": False},
    )
    server = QueryServer(app, max_results=request.param).start()
    app.start()
    for i, k in enumerate(KEYS):
        with app.writer(app.partition_for_key("kv", k)) as w:
            w.store("kv").put(k, i)
            for j, t in enumerate(STARTS):
                w.store("win").put(k, 10 * i + j, t)
            for d in range(3 if i % 2 else 1):
                w.store("dups").put(k, 100 * i + d, 700_000)
                w.store("dups").put(k, 100 * i + 50 + d, 2_100_000)
            for j, (s, e) in enumerate(SESSIONS):
                w.store("sess").put(Windowed(k, SessionWindow(s, e)), 10 * i + j)
            w.commit(1)
    assert len(app.active_partitions) == N
    with QueryClient(str(server.address)) as client:
        yield app, server, client
    server.close()
    app.close()


def local(app: Application, name: str, kind: str, op: Any) -> list[Any]:
    """The answer of ``op`` on every local partition's store, in partition order."""
    qtype = getattr(QueryableStoreTypes, kind)()
    out: list[Any] = []
    for p in range(N):
        params = StoreQueryParameters.from_name_and_type(name, qtype).with_partition(p)
        with op(app.store(params)) as it:
            out += list(it)
    return out


def test_key_value_queries_page_to_the_complete_answer(paged: Any) -> None:
    app, _, client = paged
    kv = lambda op: local(app, "kv", "key_value_store", op)  # noqa: E731
    cases = [
        (client.all("kv"), kv(lambda s: s.all())),
        (client.all("kv", reverse=True), kv(lambda s: s.reverse_all())),
        (client.range("kv", "a", "b"), kv(lambda s: s.range("a", "b"))),
        (client.range("kv", "a", "b", reverse=True), kv(lambda s: s.reverse_range("a", "b"))),
        (client.range("kv", None, "aab"), kv(lambda s: s.range(None, "aab"))),
        (
            client.range("kv", "a\x00", None, reverse=True),
            kv(lambda s: s.reverse_range("a\x00", None)),
        ),
        (client.prefix_scan("kv", "a"), kv(lambda s: s.prefix_scan("a", Serdes.string()))),
        (
            client.prefix_scan("kv", "user-1"),
            kv(lambda s: s.prefix_scan("user-1", Serdes.string())),
        ),
    ]
    for got, want in cases:
        assert got == want
    assert len(cases[0][0]) == len(KEYS)
    assert len(cases[6][1]) == 6  # a, a\0, a\0b, aa, aab, ab
    assert client.all("kv", limit=5) == cases[0][1][:5]


def test_window_queries_page_to_the_complete_answer(paged: Any) -> None:
    app, _, client = paged
    win = lambda op: local(app, "win", "window_store", op)  # noqa: E731
    cases = [
        (client.all("win"), win(lambda s: s.all())),
        (client.all("win", reverse=True), win(lambda s: s.backward_all())),
        (client.fetch_all("win", 0, LONG_MAX), win(lambda s: s.fetch_all(0, LONG_MAX))),
        (
            client.fetch_all("win", 700_000, 2_100_000, backward=True),
            win(lambda s: s.backward_fetch_all(700_000, 2_100_000)),
        ),
        (
            client.fetch("win", "a", "b", 0, 2_800_000),
            win(lambda s: s.fetch("a", "b", 0, 2_800_000)),
        ),
        (
            client.fetch("win", "a", "b", 0, 2_800_000, backward=True),
            win(lambda s: s.backward_fetch("a", "b", 0, 2_800_000)),
        ),
        (
            client.fetch("win", None, "aab", 1_400_000, LONG_MAX),
            win(lambda s: s.fetch(None, "aab", 1_400_000, LONG_MAX)),
        ),
    ]
    for got, want in cases:
        assert got == want
    assert len(cases[0][0]) == len(KEYS) * len(STARTS)
    for key in ("a", "a\x00", "user-3"):  # one key's windows: boundaries between its windows
        p = app.partition_for_key("win", key)
        params = StoreQueryParameters.from_name_and_type(
            "win", QueryableStoreTypes.window_store()
        ).with_partition(p)
        store = app.store(params)
        with store.fetch(key, 0, LONG_MAX) as it:
            want = list(it)
        assert client.fetch("win", key, 0, LONG_MAX) == want and len(want) == len(STARTS)
        with store.backward_fetch(key, 700_000, 2_100_000) as it:
            want = list(it)
        assert client.fetch("win", key, 700_000, 2_100_000, backward=True) == want


def test_duplicate_windows_page_within_a_run(paged: Any) -> None:
    app, _, client = paged
    dups = lambda op: local(app, "dups", "window_store", op)  # noqa: E731
    assert client.all("dups") == dups(lambda s: s.all())
    assert client.fetch_all("dups", 0, LONG_MAX, backward=True) == dups(
        lambda s: s.backward_fetch_all(0, LONG_MAX)
    )
    assert client.fetch("dups", "a", "b", 0, LONG_MAX) == dups(
        lambda s: s.fetch("a", "b", 0, LONG_MAX)
    )
    key = "a\x00"  # three duplicates at each of two starts
    params = StoreQueryParameters.from_name_and_type(
        "dups", QueryableStoreTypes.window_store()
    ).with_partition(app.partition_for_key("dups", key))
    for back in (False, True):
        op = app.store(params).backward_fetch if back else app.store(params).fetch
        with op(key, 0, LONG_MAX) as it:
            want = list(it)
        assert len(want) == 6
        assert client.fetch("dups", key, 0, LONG_MAX, backward=back) == want


def test_session_queries_page_to_the_complete_answer(paged: Any) -> None:
    app, _, client = paged
    sess = lambda op: local(app, "sess", "session_store", op)  # noqa: E731
    for args in [(None, None, 0, LONG_MAX), ("a", "b", 1_000, 2_000_000)]:
        want = sess(lambda st, a=args: st.find_sessions(*a))
        assert client.find_sessions("sess", *args) == want
        want = sess(lambda st, a=args: st.backward_find_sessions(*a))
        assert client.find_sessions("sess", *args, backward=True) == want
    assert len(client.find_sessions("sess", None, None, 0, LONG_MAX)) == len(KEYS) * 4
    for key in ("a", "aa", "user-7"):
        params = StoreQueryParameters.from_name_and_type(
            "sess", QueryableStoreTypes.session_store()
        ).with_partition(app.partition_for_key("sess", key))
        store = app.store(params)
        with store.find_sessions(key, 0, LONG_MAX) as it:
            want = list(it)
        assert client.find_sessions("sess", key, 0, LONG_MAX) == want and len(want) == 4
        with store.backward_find_sessions(key, 0, LONG_MAX) as it:
            want = list(it)
        assert client.find_sessions("sess", key, 0, LONG_MAX, backward=True) == want


def test_resume_after_concurrent_commits(paged: Any) -> None:
    """A page resumed after commits: keys before the position are not returned again, keys
    inserted after it are, a deleted one is not; the position's own key may be gone."""
    app, server, client = paged
    p = app.partition_for_key("kv", "user-1")
    path = "/v1/stores/kv/all"
    first = client.request(server.address, path, {"partition": p})
    assert first["truncated"] and isinstance(first["resume"], str)
    last = first["items"][-1]["key"]
    with app.writer(p) as w:
        rest = [kv.key for kv in w.store("kv").range(last, None)][1:]
        w.store("kv").put(last + "\x00new", -1)  # sorts just after the position
        w.store("kv").put("\x00first", -2)  # before the position: not on later pages
        w.store("kv").delete(last)  # the position itself disappears
        if rest:
            w.store("kv").delete(rest[0])
        w.commit(2)
    try:
        keys: list[str] = []
        doc = client.request(server.address, path, {"partition": p, "after": first["resume"]})
        keys += [d["key"] for d in doc["items"]]
        while doc["truncated"]:
            doc = client.request(server.address, path, {"partition": p, "after": doc["resume"]})
            keys += [d["key"] for d in doc["items"]]
        assert keys == [last + "\x00new", *rest[1:]]
    finally:
        with app.writer(p) as w:
            w.store("kv").delete(last + "\x00new")
            w.store("kv").delete("\x00first")
            w.store("kv").put(last, KEYS.index(last))
            if rest:
                w.store("kv").put(rest[0], KEYS.index(rest[0]))
            w.commit(3)


def test_bad_resume_positions(paged: Any) -> None:
    _, server, client = paged
    for query in ({"after": "x"}, {"after": "0.-1.YQ", "partition": 0}, {"after": "0.0.YQ"}):
        with pytest.raises(InvalidArgumentError):
            client.request(server.address, "/v1/stores/kv/all", query)
