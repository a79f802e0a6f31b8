"""The key-value store contract, run against every combination of persistent / in-memory,
transactional / write-through and the three value formats."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import txstore
from txstore import (
    ConfigConflictError,
    Headers,
    InvalidArgumentError,
    InvalidTypeError,
    OffsetError,
    Serdes,
    StoreClosedError,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
)
from txstore.runtime import admin
from txstore.stores.factories import Stores
from txstore.stores.kv import KeyValueStore

FORMATS = [ValueFormat.PLAIN, ValueFormat.TIMESTAMPED, ValueFormat.HEADERS]
SUPPLIERS = {
    (True, ValueFormat.PLAIN): Stores.persistent_key_value_store,
    (True, ValueFormat.TIMESTAMPED): Stores.persistent_timestamped_key_value_store,
    (True, ValueFormat.HEADERS): Stores.persistent_timestamped_key_value_store_with_headers,
    (False, ValueFormat.PLAIN): Stores.in_memory_key_value_store,
    (False, ValueFormat.TIMESTAMPED): Stores.in_memory_timestamped_key_value_store,
    (False, ValueFormat.HEADERS): Stores.in_memory_timestamped_key_value_store_with_headers,
}
BUILDERS: dict[ValueFormat, Any] = {
    ValueFormat.PLAIN: Stores.key_value_store_builder,
    ValueFormat.TIMESTAMPED: Stores.timestamped_key_value_store_builder,
    ValueFormat.HEADERS: Stores.timestamped_key_value_store_with_headers_builder,
}


def wrap(fmt: ValueFormat, value: Any, ts: int = 7) -> Any:
    """The value object a store of ``fmt`` takes for the plain ``value``."""
    if value is None:
        return None
    if fmt == ValueFormat.TIMESTAMPED:
        return ValueAndTimestamp(value, ts)
    if fmt == ValueFormat.HEADERS:
        return ValueTimestampHeaders(value, ts, Headers([("h", b"x"), ("n", None)]))
    return value


class Env:
    """Opens stores of one configuration, and reopens them to check durability."""

    def __init__(self, tmp_path: Any, persistent: bool, transactional: bool, fmt: ValueFormat):
        self.tmp_path = tmp_path
        self.persistent = persistent
        self.transactional = transactional
        self.fmt = fmt
        self.db: txstore.Database | None = None

    def open(self, name: str = "store", **db_kwargs: Any) -> KeyValueStore[str, Any]:
        supplier = SUPPLIERS[(self.persistent, self.fmt)](name, transactional=self.transactional)
        builder = BUILDERS[self.fmt](supplier, Serdes.string(), Serdes.string())
        store: KeyValueStore[str, Any]
        if not self.persistent:
            store = builder.build()
            return store
        if self.db is None or self.db.closed:
            self.db = txstore.open(self.tmp_path / "p0", **db_kwargs)
        store = builder.build(self.db)
        return store

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


@pytest.fixture(
    params=[(p, t, f) for p in (True, False) for t in (True, False) for f in FORMATS],
    ids=lambda c: f"{'lmdb' if c[0] else 'mem'}-{'tx' if c[1] else 'direct'}-{c[2].name}",
)
def env(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Env]:
    persistent, transactional, fmt = request.param
    e = Env(tmp_path, persistent, transactional, fmt)
    yield e
    e.close()


def items(it: Any) -> list[tuple[Any, Any]]:
    with it:
        return [(kv.key, kv.value) for kv in it]


def test_put_get_delete_round_trip(env: Env) -> None:
    s = env.open()
    f = env.fmt
    assert s.get("a") is None
    s.put("a", wrap(f, "1"))
    assert s.get("a") == wrap(f, "1")
    s.put("a", wrap(f, "2", ts=9))
    assert s.get("a") == wrap(f, "2", ts=9)
    assert s.delete("a") == wrap(f, "2", ts=9)
    assert s.get("a") is None
    assert s.delete("a") is None


def test_none_value_and_wrapper_of_none_delete(env: Env) -> None:
    s = env.open()
    s.put("a", wrap(env.fmt, "1"))
    s.put("a", None)
    assert s.get("a") is None
    if env.fmt != ValueFormat.PLAIN:
        s.put("b", wrap(env.fmt, "1"))
        # Kafka: a wrapper with a null value serializes to null, i.e. a delete.
        s.put("b", ValueAndTimestamp(None, 5) if env.fmt == ValueFormat.TIMESTAMPED
              else ValueTimestampHeaders(None, 5))  # fmt: skip
        assert s.get("b") is None


def test_put_if_absent_keeps_existing(env: Env) -> None:
    s = env.open()
    assert s.put_if_absent("a", wrap(env.fmt, "1")) is None
    assert s.put_if_absent("a", wrap(env.fmt, "2")) == wrap(env.fmt, "1")
    assert s.get("a") == wrap(env.fmt, "1")


def test_put_all_and_ranges_are_inclusive_and_ordered(env: Env) -> None:
    s = env.open()
    keys = ["a", "b", "c", "d", "e"]
    s.put_all([(k, wrap(env.fmt, k.upper())) for k in keys])
    assert [k for k, _ in items(s.range("b", "d"))] == ["b", "c", "d"]
    assert [k for k, _ in items(s.reverse_range("b", "d"))] == ["d", "c", "b"]
    assert [k for k, _ in items(s.range(None, "b"))] == ["a", "b"]
    assert [k for k, _ in items(s.range("d", None))] == ["d", "e"]
    assert [k for k, _ in items(s.all())] == keys
    assert [k for k, _ in items(s.reverse_all())] == keys[::-1]
    assert dict(items(s.all()))["c"] == wrap(env.fmt, "C")
    assert s.approximate_num_entries() == 5


def test_range_from_greater_than_to_is_empty_and_warns(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    s = env.open()
    s.put("a", wrap(env.fmt, "1"))
    s.put("z", wrap(env.fmt, "1"))
    with caplog.at_level(logging.WARNING, logger="txstore"):
        assert items(s.range("z", "a")) == []
    assert "Returning empty iterator for fetch with invalid key range: from > to" in caplog.text


def test_prefix_scan(env: Env) -> None:
    s = env.open()
    for k in ["app", "apple", "apply", "b", "ap"]:
        s.put(k, wrap(env.fmt, k))
    assert [k for k, _ in items(s.prefix_scan("app", Serdes.string()))] == [
        "app",
        "apple",
        "apply",
    ]


def test_iterator_peek_and_has_next(env: Env) -> None:
    s = env.open()
    s.put("a", wrap(env.fmt, "1"))
    s.put("b", wrap(env.fmt, "2"))
    with s.all() as it:
        assert it.peek_next_key() == "a"
        assert it.has_next()
        assert next(it).key == "a"
        assert it.peek_next_key() == "b"
        next(it)
        assert not it.has_next()
        assert it.peek_next_key() is None


def test_store_close_closes_iterators_and_rejects_use(env: Env) -> None:
    s = env.open()
    s.put("a", wrap(env.fmt, "1"))
    it = s.all()
    s.close()
    s.close()  # idempotent
    assert not s.is_open
    assert list(it) == []  # closed iterators report no next element, no exception
    with pytest.raises(StoreClosedError):
        s.get("a")
    with pytest.raises(StoreClosedError):
        s.put("a", wrap(env.fmt, "1"))


def test_null_key_and_wrong_types_are_typed_errors_and_lose_nothing(env: Env) -> None:
    s = env.open()
    s.put("keep", wrap(env.fmt, "v"))
    s.commit(1)
    with pytest.raises(InvalidArgumentError):
        s.put(None, wrap(env.fmt, "v"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        s.get(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        s.put(b"bytes-key", wrap(env.fmt, "v"))  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        s.put("k", wrap(env.fmt, 123))  # an int through the string serde
    if env.fmt != ValueFormat.PLAIN:
        with pytest.raises(InvalidTypeError):
            s.put("k", "bare value in a wrapped format")
    assert s.get("keep") == wrap(env.fmt, "v")
    assert s.get("k") is None


def test_commit_records_offset_and_rejects_going_back(env: Env) -> None:
    s = env.open()
    assert s.committed_offset is None
    s.put("a", wrap(env.fmt, "1"))
    s.commit(10)
    assert s.committed_offset == 10
    s.put("b", wrap(env.fmt, "2"))
    with pytest.raises(OffsetError):
        s.commit(9)
    assert s.committed_offset == 10
    assert s.get("a") == wrap(env.fmt, "1")
    assert s.get("b") == wrap(env.fmt, "2")  # the rejected commit discarded nothing
    s.commit(10)  # the same offset again is allowed
    with pytest.raises((InvalidArgumentError, InvalidTypeError)):
        s.commit(-5)
    with pytest.raises(InvalidTypeError):
        s.commit("11")  # type: ignore[arg-type]


def test_recover_discards_uncommitted_writes(env: Env) -> None:
    s = env.open()
    s.put("a", wrap(env.fmt, "committed"))
    s.commit(5)
    s.put("a", wrap(env.fmt, "uncommitted"))
    s.put("b", wrap(env.fmt, "uncommitted"))
    assert s.recover(5) is True
    assert s.recover(6) is False
    if env.transactional:
        assert s.get("a") == wrap(env.fmt, "committed")
        assert s.get("b") is None
        assert s.approximate_num_uncommitted_bytes() == 0
    else:
        # Write-through stores have nothing to discard: the writes are already in the store.
        assert s.get("a") == wrap(env.fmt, "uncommitted")


def test_read_committed_view_isolation(env: Env) -> None:
    s = env.open()
    s.put("a", wrap(env.fmt, "1"))
    s.commit(0)
    s.put("a", wrap(env.fmt, "2"))
    s.put("b", wrap(env.fmt, "3"))
    view = s.read_committed()
    if env.transactional:
        assert view.get("a") == wrap(env.fmt, "1")
        assert view.get("b") is None
        assert items(view.all()) == [("a", wrap(env.fmt, "1"))]
        assert s.approximate_num_uncommitted_bytes() > 0
    else:
        assert view.get("a") == wrap(env.fmt, "2")
    s.commit(1)
    assert view.get("b") == wrap(env.fmt, "3")
    assert not hasattr(view, "put")


@pytest.mark.parametrize("transactional", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_reopen_keeps_committed_state_only(
    tmp_path: Any, transactional: bool, fmt: ValueFormat
) -> None:
    env = Env(tmp_path, True, transactional, fmt)
    s = env.open()
    s.put("a", wrap(env.fmt, "1"))
    s.commit(3)
    s.put("b", wrap(env.fmt, "2"))
    env.close()
    s2 = env.open()
    assert s2.committed_offset == 3
    assert s2.get("a") == wrap(env.fmt, "1")
    assert s2.get("b") == (None if env.transactional else wrap(env.fmt, "2"))
    env.close()


def test_stored_bytes_are_kafka_layout(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.string(), Serdes.string(), format=ValueFormat.HEADERS)
        s.put("k", ValueTimestampHeaders("val", 1000, Headers([("k", b"v")])))
        s.commit(0)
        assert s._inner.get(b"k") == bytes.fromhex("0a02026b027600000000000003e876616c")
        t = db.key_value_store("t", Serdes.string(), Serdes.long(), format=ValueFormat.TIMESTAMPED)
        t.put("k", ValueAndTimestamp(5, 1000))
        assert t._inner.get(b"k") == bytes.fromhex("00000000000003e80000000000000005")


def test_conflicting_reopen_is_an_error_and_keeps_data(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.string(), Serdes.long())
        s.put("a", 1)
        s.commit(0)
    with txstore.open(tmp_path / "p") as db:
        # A later format is an upgrade, an earlier one a downgrade:
        # tests/bytestores/test_upgrades.py.
        with pytest.raises(ConfigConflictError):
            db.key_value_store("s", Serdes.string(), Serdes.string())
        assert db.key_value_store("s", Serdes.string(), Serdes.long()).get("a") == 1


def test_reopen_with_the_other_transactional_flag_is_accepted(tmp_path: Any) -> None:
    """``transactional`` is how a process writes a store, not what its data is (as in Kafka
    Streams): reopening with the other value is accepted and takes effect, the metadata (which
    never records the flag) stays the same, so no tool reports a stale value. Serdes that
    contradict the metadata still raise."""
    path = tmp_path / "p"
    with txstore.open(path) as db:
        kv = db.key_value_store("kv", Serdes.string(), Serdes.long(), transactional=True)
        win = db.window_store(
            "win", Serdes.string(), Serdes.long(), retention_period=100, window_size=10
        )
        kv.put("a", 1)
        win.put("a", 1, 5)
        db.commit({"kv": 1, "win": 1})
        metas = {n: db.partition.store_meta(n) for n in ("kv", "win")}
    with txstore.open(path) as db:
        kv = db.key_value_store("kv", Serdes.string(), Serdes.long(), transactional=False)
        win = db.window_store(
            "win", Serdes.string(), Serdes.long(), retention_period=100, window_size=10,
            transactional=False,
        )  # fmt: skip
        assert not kv.transactional and kv.get("a") == 1 and win.fetch("a", 5) == 1
        kv.put("b", 2)  # written through: committed data at once
        assert kv.read_committed().get("b") == 2
        assert {n: db.partition.store_meta(n) for n in ("kv", "win")} == metas
    with txstore.open(path) as db:
        with pytest.raises(ConfigConflictError, match="value_serde"):
            db.key_value_store("kv", Serdes.string(), Serdes.string(), transactional=False)
        kv = db.key_value_store("kv", Serdes.string(), Serdes.long(), transactional=True)
        assert kv.transactional and kv.get("b") == 2
        kv.put("c", 3)  # buffered again until commit
        assert kv.read_committed().get("c") is None
        kv.commit(2)
        assert kv.read_committed().get("c") == 3
        assert db.partition.store_meta("kv") == metas["kv"]
    assert all("transactional" not in row["config"] for row in admin.stat(path))


def test_timestamped_builder_over_plain_supplier_adapts(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        plain = Stores.persistent_key_value_store("s")
        s = Stores.timestamped_key_value_store_builder(plain, Serdes.string(), Serdes.long()).build(
            db
        )
        s.put("a", ValueAndTimestamp(5, 1000))
        # Kafka's adapter: the timestamp is dropped on write and read back as -1.
        assert s.get("a") == ValueAndTimestamp(5, -1)
        assert s._inner.get(b"a") == (5).to_bytes(8, "big")


def test_downgrade_is_refused(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        ts = Stores.persistent_timestamped_key_value_store("s")
        with pytest.raises(InvalidArgumentError, match="downgrades are not supported"):
            Stores.key_value_store_builder(ts, Serdes.string(), Serdes.long()).build(db)


def test_persistent_builder_without_database_is_an_error() -> None:
    b = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("s"), Serdes.string(), Serdes.long()
    )
    with pytest.raises(InvalidArgumentError, match="needs a database"):
        b.build()


@pytest.mark.parametrize(
    "factory",
    [
        Stores.key_value_store_builder,
        Stores.timestamped_key_value_store_builder,
        Stores.timestamped_key_value_store_with_headers_builder,
    ],
)
@pytest.mark.parametrize(
    "supplier",
    [
        Stores.persistent_window_store("w", 60_000, 1_000, False),
        Stores.persistent_timestamped_window_store("w", 60_000, 1_000, False),
        Stores.persistent_session_store("s", 60_000),
        "not a supplier",
    ],
)
def test_key_value_builders_reject_a_supplier_of_another_kind(factory: Any, supplier: Any) -> None:
    # Was accepted, and build(db) opened a key-value store ignoring retention and window size.
    with pytest.raises(InvalidTypeError, match="needs a KeyValueStoreSupplier"):
        factory(supplier, Serdes.string(), Serdes.long())


def test_bad_factory_arguments() -> None:
    with pytest.raises(InvalidArgumentError):
        Stores.persistent_key_value_store("")
    with pytest.raises(InvalidTypeError):
        Stores.persistent_key_value_store(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("s"),
            "not a serde",  # type: ignore[arg-type]
            Serdes.long(),
        )


def test_serde_returning_none_deletes(tmp_path: Any) -> None:
    class DropEmpty:
        name = "drop-empty"

        def serialize(self, value: str | None) -> bytes | None:
            return None if not value else value.encode()

        def deserialize(self, data: bytes | None) -> str | None:
            return None if data is None else data.decode()

    for fmt in FORMATS:
        s = BUILDERS[fmt](SUPPLIERS[(False, fmt)]("s"), Serdes.string(), DropEmpty()).build()
        s.put("a", wrap(fmt, "x"))
        s.put("a", wrap(fmt, ""))
        assert s.get("a") is None, fmt
        s.close()


def test_multi_store_commit_is_atomic_across_stores(tmp_path: Any) -> None:
    with txstore.open(tmp_path / "p") as db:
        a = db.key_value_store("a", Serdes.string(), Serdes.long())
        b = db.key_value_store("b", Serdes.string(), Serdes.long())
        a.put("x", 1)
        b.put("y", 2)
        db.commit({"a": 4, "b": 7})
        assert (a.committed_offset, b.committed_offset) == (4, 7)
        a.put("x", 10)
        b.put("y", 20)
        with pytest.raises(OffsetError):
            db.commit({"a": 5, "b": 6})  # b would go backwards: nothing is written
        assert a.read_committed().get("x") == 1
        assert (a.committed_offset, b.committed_offset) == (4, 7)
    with txstore.open(tmp_path / "p") as db:
        assert sorted(db.store_names()) == ["a", "b"]
