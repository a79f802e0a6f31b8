"""Interactive queries on one instance: store types, composite stores, lifecycle, every error
with Kafka's message, discovery, membership and partition migration (in one process)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from txstore import (
    AggregationWithHeaders,
    Headers,
    Serdes,
    SessionWindow,
    Stores,
    ValueAndTimestamp,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.codecs import ValueFormat, partition_for_key
from txstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    InvalidTypeError,
    StateStoreMigratedError,
    StateStoreNotAvailableError,
    StreamsNotRunningError,
    StreamsNotStartedError,
    StreamsRebalancingError,
    TaskMigratedError,
    UnknownStateStoreError,
)
from txstore.queries import (
    Application,
    Assignment,
    HostInfo,
    KeyQueryMetadata,
    QueryableStoreTypes,
    State,
    StaticAssignment,
    StoreQueryParameters,
    ThreadState,
)
from txstore.queries.local import GONE_MESSAGE
from txstore.queries.membership import balanced

QT = QueryableStoreTypes
N = 4
KEYS = [f"user-{i}" for i in range(200)]


def builders() -> list[Any]:
    return [
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        ),
        Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("latest"),
            Serdes.string(),
            Serdes.string(),
        ),
        Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store_with_headers("tagged"),
            Serdes.string(),
            Serdes.long(),
        ),
    ]


def params(store: str = "counts", qtype: Any = None) -> StoreQueryParameters:
    return StoreQueryParameters.from_name_and_type(store, qtype or QT.key_value_store())


def make_app(state: Path, **kwargs: Any) -> Application:
    kwargs.setdefault("task_options", {"sync": False})
    if "membership" not in kwargs:
        kwargs.setdefault("num_partitions", N)
    return Application("app", state, kwargs.pop("stores", None) or builders(), **kwargs)


def load(app: Application, keys: list[str] = KEYS, version: int = 0) -> None:
    for k in keys:
        i = int(k.split("-")[1])
        with app.writer(app.partition_for_key("counts", k)) as w:
            w.store("counts").put(k, i + version)
            w.store("latest").put(k, ValueAndTimestamp(f"v{i}", 1000 + i))
            w.store("tagged").put(k, ValueTimestampHeaders(i, 7, Headers([("h", b"x")])))
    for p in app.active_partitions:
        with app.writer(p) as w:
            w.commit(version + 1)


@pytest.fixture
def app(tmp_path: Path) -> Any:
    a = make_app(tmp_path / "state")
    a.start()
    load(a)
    yield a
    a.close()


# ---- types ---------------------------------------------------------------------------------


def test_accepts_follows_kafka() -> None:
    kv, ts, th = (
        QT.key_value_store(),
        QT.timestamped_key_value_store(),
        QT.timestamped_key_value_store_with_headers(),
    )
    P, T, H, PH = (
        ValueFormat.PLAIN,
        ValueFormat.TIMESTAMPED,
        ValueFormat.HEADERS,
        ValueFormat.PLAIN_HEADERS,
    )
    assert [kv.accepts(("key_value", f)) for f in (P, T, H)] == [True, True, True]
    assert [ts.accepts(("key_value", f)) for f in (P, T, H)] == [False, True, True]
    assert [th.accepts(("key_value", f)) for f in (P, T, H)] == [False, False, True]
    w, tw, twh, wh = (
        QT.window_store(),
        QT.timestamped_window_store(),
        QT.timestamped_window_store_with_headers(),
        QT.window_store_with_headers(),
    )
    assert [w.accepts(("window", f)) for f in (P, T, H, PH)] == [True] * 4
    assert [tw.accepts(("window", f)) for f in (P, T, H, PH)] == [False, True, True, False]
    assert [twh.accepts(("window", f)) for f in (P, T, H, PH)] == [False, False, True, False]
    assert [wh.accepts(("window", f)) for f in (P, T, H, PH)] == [False, False, False, True]
    s, sh = QT.session_store(), QT.session_store_with_headers()
    assert [s.accepts(("session", f)) for f in (P, PH)] == [True, True]
    assert [sh.accepts(("session", f)) for f in (P, PH)] == [False, True]
    assert not kv.accepts(("window", P)) and not w.accepts(("key_value", P))
    # a real store object
    store = Stores.timestamped_key_value_store_builder(
        Stores.in_memory_timestamped_key_value_store("x"), Serdes.string(), Serdes.long()
    ).build()
    assert kv.accepts(store) and ts.accepts(store) and not th.accepts(store)
    assert not kv.accepts(object())
    store.close()
    assert QT.by_name("session_store") is s
    with pytest.raises(InvalidArgumentError, match="unknown queryable store type"):
        QT.by_name("nope")


def test_store_query_parameters_are_immutable() -> None:
    base = params()
    p = base.with_partition(2).enable_stale_stores().enable_read_committed()
    assert (base.partition, base.stale_stores, base.read_committed) == (None, False, False)
    assert (p.partition, p.stale_stores_enabled(), p.read_committed) == (2, True, True)
    assert p.with_all_partitions().partition is None
    with pytest.raises(InvalidArgumentError):
        base.with_partition(-1)
    with pytest.raises(InvalidTypeError):
        StoreQueryParameters("counts", "key_value_store")  # type: ignore[arg-type]


def test_host_info_and_key_query_metadata() -> None:
    assert (
        HostInfo.parse("[::1]:80") == HostInfo("::1", 80) and str(HostInfo("::1", 80)) == "[::1]:80"
    )
    assert HostInfo.unavailable() == HostInfo("unavailable", -1)
    assert sorted([HostInfo("b", 1), HostInfo("a", 9), HostInfo("a", 2)])[0] == HostInfo("a", 2)
    for bad in ("nohost", "h:99999", ":1", "h:x"):
        with pytest.raises(InvalidArgumentError):
            HostInfo.parse(bad)
    na = KeyQueryMetadata.NOT_AVAILABLE
    assert (na.active_host, na.standby_hosts, na.partition) == (
        HostInfo.unavailable(),
        frozenset(),
        -1,
    )
    assert KeyQueryMetadata.from_json(na.to_json()) == na


# ---- composite key-value stores --------------------------------------------------------------


def test_composite_reads_every_local_partition(app: Application) -> None:
    store = app.store(params())
    assert [store.get(k) for k in KEYS] == list(range(len(KEYS)))
    assert store.get("absent") is None
    with store.all() as it:
        assert sorted(kv.value for kv in it) == list(range(len(KEYS)))
    with store.reverse_all() as it:
        assert len(list(it)) == len(KEYS)
    with store.range("user-10", "user-12") as it:
        assert sorted(kv.key for kv in it) == sorted(k for k in KEYS if "user-10" <= k <= "user-12")
    with store.prefix_scan("user-19", Serdes.string()) as it:
        assert sorted(kv.key for kv in it) == ["user-19", *[f"user-19{i}" for i in range(10)]]
    assert store.approximate_num_entries() == len(KEYS)
    # a single partition
    for p in range(N):
        with app.store(params().with_partition(p)).all() as it:
            keys = [kv.key for kv in it]
        assert keys and all(app.partition_for_key("counts", k) == p for k in keys)
    # Kafka's way: every partition asked in turn
    app.route_keys = False  # applies to the composite store already handed out
    assert not app.route_keys
    assert [store.get(k) for k in KEYS[:20]] == list(range(20))


def test_iterators_peek_and_close(app: Application) -> None:
    it = app.store(params()).all()
    first = it.peek_next_key()
    assert it.has_next() and next(it).key == first
    it.close()
    assert not it.has_next() and it.peek_next_key() is None
    with pytest.raises(StopIteration):
        next(it)


def test_timestamped_stores_through_facades(app: Application) -> None:
    assert app.store(params("latest", QT.timestamped_key_value_store())).get("user-3") == (
        ValueAndTimestamp("v3", 1003)
    )
    assert app.store(params("latest")).get("user-3") == "v3"
    th = QT.timestamped_key_value_store_with_headers()
    assert app.store(params("tagged", th)).get("user-4") == ValueTimestampHeaders(
        4, 7, Headers([("h", b"x")])
    )
    assert app.store(params("tagged", QT.timestamped_key_value_store())).get("user-4") == (
        ValueAndTimestamp(4, 7)
    )
    assert app.store(params("tagged")).get("user-4") == 4
    with app.store(params("tagged")).range("user-4", "user-4") as it:
        assert list(it) == [("user-4", 4)]


def test_read_committed_sees_only_commits(app: Application) -> None:
    p = app.partition_for_key("counts", "user-1")
    rc = app.store(params().enable_read_committed())
    ru = app.store(params())
    with app.writer(p) as w:
        w.store("counts").put("user-1", -1)
        assert ru.get("user-1") == -1  # the writer's own thread reads uncommitted
        assert rc.get("user-1") == 1
    assert ru.get("user-1") == -1 and rc.get("user-1") == 1
    with app.writer(p) as w:
        w.commit(9)
    assert rc.get("user-1") == -1
    with rc.all() as it:
        assert len(list(it)) == len(KEYS)


def test_read_committed_never_waits_for_the_writer(app: Application) -> None:
    """A writer block holds the partition's guard: read-committed queries from other threads
    go on, read-uncommitted ones wait for the block to end."""
    p = app.partition_for_key("counts", "user-1")
    rc, ru = app.store(params().enable_read_committed()), app.store(params())
    results: dict[str, Any] = {}

    def read(name: str, store: Any) -> None:
        results[name] = (store.get("user-1"), time.monotonic())

    with app.writer(p) as w:
        w.store("counts").put("user-1", 1000)
        t_rc = threading.Thread(target=read, args=("rc", rc))
        t_ru = threading.Thread(target=read, args=("ru", ru))
        t_rc.start()
        t_ru.start()
        t_rc.join(5)
        assert results["rc"][0] == 1  # answered while the block is open
        time.sleep(0.05)
        assert "ru" not in results  # still waiting
        released = time.monotonic()
    t_ru.join(5)
    assert results["ru"][0] == 1000 and results["ru"][1] >= released


# ---- window and session stores -------------------------------------------------------------


def windowed_builders() -> list[Any]:
    hour = 3_600_000
    return [
        Stores.timestamped_window_store_builder(
            Stores.persistent_timestamped_window_store("clicks", hour, 60_000, False),
            Serdes.string(),
            Serdes.long(),
        ),
        Stores.session_store_with_headers_builder(
            Stores.persistent_session_store_with_headers("visits", hour),
            Serdes.string(),
            Serdes.long(),
        ),
    ]


def test_window_and_session_composites(tmp_path: Path) -> None:
    app = make_app(tmp_path, stores=windowed_builders())
    app.start()
    try:
        for i in range(40):
            k = f"k{i}"
            with app.writer(app.partition_for_key("clicks", k)) as w:
                w.store("clicks").put(k, ValueAndTimestamp(i, 10 + i), 60_000)
                w.store("clicks").put(k, ValueAndTimestamp(i * 10, 20 + i), 120_000)
                agg = AggregationWithHeaders(i, Headers([("s", b"1")]))
                w.store("visits").put(Windowed(k, SessionWindow(1000, 2000)), agg)
                w.commit(1)
        clicks = app.store(params("clicks", QT.window_store()))
        assert clicks.fetch("k3", 60_000) == 3 and clicks.fetch("k3", 5) is None
        with clicks.fetch("k3", 0, 200_000) as it:
            assert list(it) == [(60_000, 3), (120_000, 30)]
        with clicks.backward_fetch("k3", 0, 200_000) as it:
            assert [kv.key for kv in it] == [120_000, 60_000]
        with clicks.fetch("absent", 0, 200_000) as it:
            assert list(it) == []
        with clicks.fetch_all(0, 200_000) as it:
            assert len(list(it)) == 80
        with clicks.fetch("k1", "k2", 0, 60_000) as it:
            assert sorted(kv.key.key for kv in it) == ["k1", *[f"k1{i}" for i in range(10)], "k2"]
        with clicks.all() as it, clicks.backward_fetch_all(0, 200_000) as back:
            assert len(list(it)) == len(list(back)) == 80
        ts = app.store(params("clicks", QT.timestamped_window_store()))
        assert ts.fetch("k3", 60_000) == ValueAndTimestamp(3, 13)
        committed = app.store(params("clicks", QT.window_store()).enable_read_committed())
        with committed.fetch_all(0, 200_000) as it:
            assert len(list(it)) == 80 and committed.fetch("k3", 120_000) == 30
        committed_visits = app.store(params("visits", QT.session_store()).enable_read_committed())
        assert committed_visits.fetch_session("k5", 1000, 2000) == 5
        with pytest.raises(InvalidStateStoreError, match="does not accept"):
            app.store(params("clicks", QT.timestamped_window_store_with_headers())).fetch("k3", 0)
        visits = app.store(params("visits", QT.session_store()))
        with visits.find_sessions("k4", 0, 5000) as it:
            assert list(it) == [(Windowed("k4", SessionWindow(1000, 2000)), 4)]
        assert visits.fetch_session("k4", 1000, 2000) == 4
        with visits.find_sessions("k0", "k9", 0, 5000) as it:
            assert len(list(it)) == 40
        with visits.fetch("k5") as it, visits.backward_fetch("k5") as back:
            assert len(list(it)) == len(list(back)) == 1
        with visits.fetch("k0", "k1") as it:
            assert [kv.key.key for kv in it] == ["k0", "k1"]  # "k10" > "k1" as bytes
        with visits.backward_find_sessions("k4", 0, 5000) as it:
            assert len(list(it)) == 1
        sh = app.store(params("visits", QT.session_store_with_headers()))
        assert sh.fetch_session("k4", 1000, 2000) == AggregationWithHeaders(
            4, Headers([("s", b"1")])
        )
        with pytest.raises(InvalidArgumentError):
            clicks.fetch("k1")
        with pytest.raises(InvalidStateStoreError, match="does not accept"):
            app.store(params("clicks", QT.session_store())).fetch_session("k1", 0, 1)
    finally:
        app.close()


# ---- lifecycle and errors ------------------------------------------------------------------


def test_lifecycle_and_state_listener(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    seen: list[tuple[State, State]] = []
    app.set_state_listener(lambda new, old: seen.append((new, old)))
    assert app.state.name == "CREATED" and app.thread_state.name == "CREATED"
    with pytest.raises(StreamsNotStartedError) as exc:
        app.store(params())
    assert (
        str(exc.value) == "KafkaStreams has not been started, you can retry after calling start()"
    )
    with pytest.raises(StreamsNotStartedError):
        app.metadata_for_all_streams_clients()
    app.start()
    assert app.state is State.RUNNING and app.active_partitions == list(range(N))
    with pytest.raises(IllegalStateError, match="cannot re-start"):
        app.start()
    store = app.store(params())
    app.close()
    app.close()  # idempotent
    assert seen == [
        (State.REBALANCING, State.CREATED),
        (State.RUNNING, State.REBALANCING),
        (State.PENDING_SHUTDOWN, State.RUNNING),
        (State.NOT_RUNNING, State.PENDING_SHUTDOWN),
    ]
    with pytest.raises(StreamsNotRunningError) as nr:
        app.store(params())
    assert str(nr.value) == "KafkaStreams is not running. State is NOT_RUNNING."
    with pytest.raises(StateStoreNotAvailableError) as na:
        store.get("user-1")  # a store kept from before the close
    assert str(na.value) == "The state store, counts, may have migrated to another instance."
    with pytest.raises(TaskMigratedError), app.writer(0):
        pass


def test_unknown_store_partition_and_type_errors(app: Application) -> None:
    with pytest.raises(UnknownStateStoreError) as unknown:
        app.store(params("nope"))
    assert str(unknown.value) == (
        "Cannot get state store nope because no such store is registered in the topology."
    )
    with pytest.raises(InvalidStateStorePartitionError) as part:
        app.store(params().with_partition(99)).get("user-1")
    assert str(part.value) == "The specified partition 99 for store counts does not exist."
    with pytest.raises(InvalidStateStoreError) as mismatch:
        app.store(params("counts", QT.timestamped_key_value_store())).get("user-1")
    assert str(mismatch.value) == (
        "Cannot get state store counts because the queryable store type "
        "[txstore.queries.QueryableStoreTypes$TimestampedKeyValueStoreType] does not accept the "
        "actual store type [key_value store in format PLAIN]."
    )
    with pytest.raises(InvalidArgumentError, match="null"):
        app.store(params()).get(None)
    with pytest.raises(TaskMigratedError), app.writer(99):
        pass


def test_queried_while_restoring(tmp_path: Path) -> None:
    state = tmp_path / "state"
    app = make_app(state)
    app.start()
    load(app)
    app.close()
    restoring = 2
    shutil.rmtree(state / str(restoring) / "data")  # the changelog restores it
    entered, release = threading.Event(), threading.Event()

    def listener(partition: int, progress: Any) -> None:
        if partition == restoring:
            entered.set()
            assert release.wait(10)

    app = make_app(state, restore_listener=listener)
    app.start(timeout=0)
    try:
        assert entered.wait(10)
        assert app.state is State.REBALANCING
        assert app.thread_state is ThreadState.PARTITIONS_ASSIGNED
        with pytest.raises(StreamsRebalancingError) as exc:
            app.store(params()).get("user-1")
        assert str(exc.value) == (
            "Cannot get state store counts because the stream thread is PARTITIONS_ASSIGNED, "
            "not RUNNING"
        )
        stale = app.store(params().enable_stale_stores())
        ready = [k for k in KEYS if app.partition_for_key("counts", k) < restoring]
        assert [stale.get(k) for k in ready] == [int(k[5:]) for k in ready]
        assert app.metadata_for_all_streams_clients()  # discovery works while rebalancing
        release.set()
        app.wait_until_running(10)
        assert [app.store(params()).get(k) for k in KEYS] == list(range(len(KEYS)))
    finally:
        release.set()
        app.close()


# ---- discovery -----------------------------------------------------------------------------


def test_metadata_and_key_partitions(app: Application) -> None:
    me = app.host_info
    [meta] = app.metadata_for_all_streams_clients()
    assert meta.host_info == me and meta.partitions == list(range(N))
    assert meta.state_store_names == {"counts", "latest", "tagged"}
    assert {tp.topic for tp in meta.topic_partitions} == {"app"}
    assert (
        app.streams_metadata_for_store("counts") == [meta] == app.all_metadata_for_store("latest")
    )
    assert app.streams_metadata_for_store("nope") == []
    for k in KEYS[:50]:
        kq = app.query_metadata_for_key("counts", k)
        assert kq is not None
        assert (
            kq.partition == partition_for_key(k.encode(), N) == app.partition_for_key("counts", k)
        )
        assert kq.active_host == me and kq.standby_hosts == frozenset()
    assert app.query_metadata_for_key("counts", "x", Serdes.string()) == app.query_metadata_for_key(
        "counts", "x", lambda key: key.encode()
    )
    assert app.query_metadata_for_key("nope", "x") is None
    custom = app.query_metadata_for_key("counts", "x", partitioner=lambda t, k, v, n: {3})
    assert custom is not None and custom.partition == 3
    with pytest.raises(InvalidArgumentError, match="singleton"):
        app.query_metadata_for_key("counts", "x", partitioner=lambda t, k, v, n: {1, 2})
    with pytest.raises(InvalidArgumentError):
        app.query_metadata_for_key("counts", "x", partitioner=lambda t, k, v, n: 7)


def test_kafka_partitioner_vectors() -> None:
    # Kafka's DefaultPartitioner: toPositive(murmur2(bytes)) % n (values from Kafka's tests)
    assert partition_for_key(b"key", 3) == 1
    assert [partition_for_key(f"user-{i}".encode(), 6) for i in range(3)] == [
        (partition_for_key(f"user-{i}".encode(), 12)) % 6 for i in range(3)
    ]


# ---- membership ----------------------------------------------------------------------------


def two_host_assignment(
    a: HostInfo, b: HostInfo, a_parts: list[int], a_standby: list[int] | None = None
) -> dict[str, Any]:
    rest = [p for p in range(N) if p not in a_parts]
    return {
        "application_id": "app",
        "num_partitions": N,
        "instances": {
            str(a): {"active": a_parts, "standby": rest[:1] if a_standby is None else a_standby},
            str(b): {"active": rest},
        },
    }


def test_assignment_validation(tmp_path: Path) -> None:
    good = two_host_assignment(HostInfo("h", 1), HostInfo("h", 2), [0, 1])
    a = Assignment.from_json(good)
    assert a.standby_partitions(HostInfo("h", 1)) == {2}
    assert Assignment.from_json(a.to_json()).version == a.version
    bad_docs = [
        {"num_partitions": 2, "instances": {"h:1": {"active": [0]}, "h:2": {"active": [0]}}},
        {"num_partitions": 2, "instances": {"h:1": {"active": [5]}}},
        {"num_partitions": 2, "instances": {"h:1": {"active": [0], "standby": [0]}}},
        {"num_partitions": 0, "instances": {}},
        {"num_partitions": 2, "instances": {"nohost": {"active": [0]}}},
        {"num_partitions": 2, "instances": {"h:1": {"active": ["0"]}}},
        {"instances": {}},
        [],
    ]
    for doc in bad_docs:
        with pytest.raises((InvalidArgumentError, InvalidTypeError)):
            Assignment.from_json(doc)
    path = tmp_path / "assignment.json"
    StaticAssignment.write(path, good)
    sa = StaticAssignment(path)
    assert sa.current().version == a.version
    path.write_text("{ not json")
    assert sa.current().version == a.version  # a bad edit keeps the last good assignment
    other = dict(good, application_id="other")
    StaticAssignment.write(path, other)
    with pytest.raises(InvalidArgumentError, match="application"):
        StaticAssignment(path).join("app", HostInfo("h", 1), [])


def test_balanced_assignment_is_even_and_stable() -> None:
    hosts = [HostInfo("h", p) for p in (1, 2, 3)]
    a = balanced(hosts, 12)
    assert sorted(list(a.values()).count(h) for h in hosts) == [4, 4, 4]
    b = balanced([*hosts, HostInfo("h", 4)], 12)
    moved = sum(1 for p in range(12) if a[p] != b[p])
    assert moved <= 6  # a fourth member takes a share without reshuffling everything
    assert balanced(hosts, 12) == a and balanced([], 3) == {}


def test_partition_migrates_between_instances(tmp_path: Path) -> None:
    """Two instances in one process share a state directory; moving partitions closes them
    on one (queries there raise migrated) and recovers + restores them on the other."""
    state, path = tmp_path / "state", tmp_path / "assignment.json"
    ha, hb = HostInfo("127.0.0.1", 7001), HostInfo("127.0.0.1", 7002)
    StaticAssignment.write(path, two_host_assignment(ha, hb, [0, 1]))
    a = make_app(
        state, application_server=str(ha), membership=StaticAssignment(path, refresh_interval=3600)
    )
    b = make_app(
        state, application_server=str(hb), membership=StaticAssignment(path, refresh_interval=3600)
    )
    a.start()
    b.start()
    a.rebalance()  # b created partition 2: a opens its standby now
    try:
        assert (a.active_partitions, b.active_partitions) == ([0, 1], [2, 3])
        assert a.standby_partitions == [2]  # b's partition 2 has a read-only standby on a
        for app in (a, b):
            load(
                app,
                [k for k in KEYS if app.partition_for_key("counts", k) in app.active_partitions],
            )
        kq = a.query_metadata_for_key("counts", "user-1")
        assert kq is not None and kq.active_host == (ha if kq.partition < 2 else hb)
        assert kq.standby_hosts == ({ha} if kq.partition == 2 else frozenset())
        on_a = a.store(params())
        k0 = next(k for k in KEYS if a.partition_for_key("counts", k) == 0)
        it = on_a.all()  # an iterator open on a's partitions when they move
        next(it)
        stale_a = a.store(params().enable_stale_stores().enable_read_committed())
        k2 = next(k for k in KEYS if a.partition_for_key("counts", k) == 2)
        assert stale_a.get(k2) == int(k2[5:])  # served by the standby

        # partition 0 and 1 move to b
        # (no standby on a: in one process a read-only standby would hold the partition's
        # environment, which b opens for writing; separate processes have no such limit)
        StaticAssignment.write(path, two_host_assignment(ha, hb, [], []))
        a.rebalance()
        b.rebalance()
        assert (a.active_partitions, b.active_partitions) == ([], [0, 1, 2, 3])
        with pytest.raises(StateStoreMigratedError) as gone:
            list(it)
        assert str(gone.value) == GONE_MESSAGE
        with pytest.raises(StateStoreMigratedError) as moved:
            on_a.get(k0)
        assert str(moved.value) == "The state store, counts, may have migrated to another instance."
        with pytest.raises(InvalidStateStorePartitionError):
            a.store(params().with_partition(0)).get(k0)
        with pytest.raises(TaskMigratedError), a.writer(0):
            pass
        kq0 = a.query_metadata_for_key("counts", k0)
        assert kq0 is not None and kq0.active_host == hb
        # re-discovered: b answers with what a committed
        assert [b.store(params()).get(k) for k in KEYS] == list(range(len(KEYS)))
        assert [m.partitions for m in b.metadata_for_all_streams_clients()] == [[], [0, 1, 2, 3]]
    finally:
        a.close()
        b.close()


def test_store_not_open(app: Application) -> None:
    """A store closed inside a running partition (Kafka: a closed store in a running task)."""
    store = app.store(params())
    with app.writer(3) as w:
        w.store("counts").close()
    with pytest.raises(StateStoreMigratedError) as exc:
        store.get("user-1")
    assert str(exc.value) == (
        "Cannot get state store counts for task 0_3 because the store is not open. "
        "The state store may have migrated to another instance."
    )


def test_revocation_waits_for_the_writer_block(app: Application, tmp_path: Path) -> None:
    """Revoking a partition waits for the writer's block on it; meanwhile queries see the
    rebalance (Kafka: the stream thread is PARTITIONS_REVOKED), then the new assignment."""
    path = tmp_path / "assignment.json"
    me = app.host_info
    StaticAssignment.write(
        path,
        {
            "num_partitions": N,
            "instances": {str(me): {"active": [0, 1, 2]}, "h:9": {"active": [3]}},
        },
    )
    app.membership = StaticAssignment(path)
    store = app.store(params())
    inside, leave = threading.Event(), threading.Event()

    def writer() -> None:
        with app.writer(3) as w:
            inside.set()
            leave.wait(10)
            w.store("counts").put("late", 1)  # still allowed: the block was entered before

    t = threading.Thread(target=writer)
    t.start()
    assert inside.wait(5)
    r = threading.Thread(target=app.rebalance)
    r.start()
    deadline = time.monotonic() + 5
    while app.thread_state is not ThreadState.PARTITIONS_REVOKED and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(StreamsRebalancingError, match="PARTITIONS_REVOKED, not RUNNING"):
        store.get("user-1")
    time.sleep(0.05)
    assert r.is_alive() and 3 in app.active_partitions  # waiting for the block
    leave.set()
    t.join(5)
    r.join(5)
    assert app.active_partitions == [0, 1, 2] and app.state is State.RUNNING
    with pytest.raises(TaskMigratedError), app.writer(3):
        pass
    k1 = next(k for k in KEYS if app.partition_for_key("counts", k) == 1)
    assert store.get(k1) == int(k1[5:])


def test_serve_command_reports_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from txstore.cli.main import main

    def serve(state: Path, *extra: str, server: str = "127.0.0.1:0") -> int:
        args = ["serve", str(state), "--application-id", "app", "--application-server", server]
        return main([*args, *extra])

    assert serve(tmp_path / "missing") == 2  # exit codes: docs/cli.md
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert serve(tmp_path / "empty") == 2
    assert "no stores found" in capsys.readouterr().err
    app = make_app(tmp_path / "state")
    app.start()
    app.close()
    bad = tmp_path / "assignment.json"
    bad.write_text('{"num_partitions": 2, "instances": {"h:1": {"active": [7]}}}')
    assert serve(tmp_path / "state", "--assignment", str(bad)) == 2
    assert "outside 0..1" in capsys.readouterr().err
    assert serve(tmp_path / "state", server="10.9.8.7:7070") == 2
    err = capsys.readouterr().err
    assert "loopback" in err and "--allow-remote" in err and "allow_remote" not in err
    # issue 26: a partition directory, a port in use, a state directory another serve holds
    assert serve(tmp_path / "state" / "0") == 2
    err = capsys.readouterr().err
    assert err.startswith("txstore serve: error:") and "partition directory" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert serve(tmp_path / "state", server=f"127.0.0.1:{port}") == 2
        err = capsys.readouterr().err
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err
    holder = make_app(tmp_path / "state")
    holder.start()
    try:
        t0 = time.monotonic()
        assert serve(tmp_path / "state", "-q") == 3
        err = capsys.readouterr().err
        assert err.startswith("txstore serve: ") and "held by another process" in err
        assert time.monotonic() - t0 < 30  # was: retrying forever
    finally:
        holder.close()
