"""Format adapters (each Kafka adapter's conversion) and lazy upgrades of data on disk:
key-value stores keep the old-format database beside the new one; window and session stores
keep old segments in their format. Downgrades are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import (
    AggregationWithHeaders,
    ConfigConflictError,
    Headers,
    InvalidArgumentError,
    Serdes,
    SessionWindow,
    Stores,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.bytestores import adapters as ad
from txstore.bytestores.upgrade import UpgradingBytesKeyValueStore

PLAIN, TS, HEADERS, PH = (
    ValueFormat.PLAIN,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
    ValueFormat.PLAIN_HEADERS,
)
H = Headers([("k", b"v")])
HB = bytes.fromhex("0a02026b0276")  # varint(5) + the headers k=v
L5 = (5).to_bytes(8, "big")
NO_TS = b"\xff" * 8
RETENTION = 120_000


# ---- the named adapters ----------------------------------------------------------------

V, TV, HTV, HV = b"v", L5 + b"v", HB + L5 + b"v", HB + b"v"
ADAPTER_CASES = [
    # adapter, stored value -> read as, written value -> stored as
    (ad.KeyValueToTimestampedKeyValueByteStoreAdapter, V, NO_TS + V, TV, V),
    (ad.PlainToHeadersStoreAdapter, V, b"\x00" + NO_TS + V, HTV, V),
    (ad.TimestampedToHeadersStoreAdapter, TV, b"\x00" + TV, HTV, TV),
    (ad.WindowToTimestampedWindowByteStoreAdapter, V, NO_TS + V, TV, V),
    (ad.PlainToHeadersWindowStoreAdapter, V, b"\x00" + NO_TS + V, HTV, V),
    (ad.TimestampedToHeadersWindowStoreAdapter, TV, b"\x00" + TV, HTV, TV),
    # the three plain-headers window adapters (WindowStoreWithHeaders proposal)
    (ad.PlainToPlainHeadersWindowStoreAdapter, V, b"\x00v", HV, V),
    (ad.TimestampedToPlainHeadersWindowStoreAdapter, TV, b"\x00v", HV, NO_TS + V),
    (ad.TimestampedHeadersToPlainHeadersWindowStoreAdapter, HTV, HV, HV, HB + NO_TS + V),
    (ad.SessionToHeadersStoreAdapter, V, b"\x00v", HV, V),
    # timestamped session stores (txstore's: Kafka never shipped one)
    (ad.SessionToTimestampedSessionByteStoreAdapter, V, NO_TS + V, TV, V),
    (ad.PlainToHeadersSessionStoreAdapter, V, b"\x00" + NO_TS + V, HTV, V),
    (ad.TimestampedToHeadersSessionStoreAdapter, TV, b"\x00" + TV, HTV, TV),
    (ad.PlainHeadersToHeadersSessionStoreAdapter, HV, HB + NO_TS + V, HTV, HV),
]


@pytest.mark.parametrize("case", ADAPTER_CASES, ids=lambda c: c[0].name)
def test_named_adapter_conversions(case: Any) -> None:
    adapter, stored, read_as, written, stored_as = case
    assert adapter.from_stored(stored) == read_as
    assert adapter.to_stored(written) == stored_as
    assert adapter.from_stored(None) is None and adapter.to_stored(None) is None
    assert ad.find_adapter(adapter.kind, adapter.stored, adapter.used) is adapter


def test_no_adapter_for_downgrades_or_same_format() -> None:
    assert ad.find_adapter("window", TS, TS) is None
    for kind, stored, used in [("window", PH, HEADERS), ("key_value", HEADERS, PLAIN),
                               ("session", PH, PLAIN), ("window", HEADERS, TS),
                               ("session", TS, PH), ("session", PH, TS),
                               ("session", HEADERS, TS)]:  # fmt: skip
        with pytest.raises(InvalidArgumentError, match="downgrades are not supported"):
            ad.find_adapter(kind, stored, used)
    with pytest.raises(InvalidArgumentError, match="cannot have the PLAIN_HEADERS format"):
        ad.find_adapter("key_value", PH, PH)


def test_window_builders_over_older_suppliers(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        plain = Stores.window_store_with_headers_builder(
            Stores.persistent_window_store("a", RETENTION, 1, False), Serdes.string(),
            Serdes.string()).build(db)  # fmt: skip
        assert plain.adapter is ad.PlainToPlainHeadersWindowStoreAdapter
        plain.put("k", ValueAndHeaders("x", H), 0)
        assert plain.fetch("k", 0) == ValueAndHeaders("x")  # headers stripped on write
        assert plain.bytes_store.get(b"k" + bytes(12)) == b"x"
        ts = Stores.window_store_with_headers_builder(
            Stores.persistent_timestamped_window_store("b", RETENTION, 1, False),
            Serdes.string(), Serdes.string()).build(db)  # fmt: skip
        ts.put("k", ValueAndHeaders("x", H), 0)
        assert ts.bytes_store.get(b"k" + bytes(12)) == NO_TS + b"x"
        assert ts.fetch("k", 0) == ValueAndHeaders("x")
        th = Stores.window_store_with_headers_builder(
            Stores.persistent_timestamped_window_store_with_headers("c", RETENTION, 1, False),
            Serdes.string(), Serdes.string()).build(db)  # fmt: skip
        th.put("k", ValueAndHeaders("x", H), 0)
        assert th.bytes_store.get(b"k" + bytes(12)) == HB + NO_TS + b"x"
        assert th.fetch("k", 0) == ValueAndHeaders("x", H)  # headers kept
        tsb = Stores.timestamped_window_store_builder(
            Stores.persistent_window_store("d", RETENTION, 1, False), Serdes.string(),
            Serdes.string()).build(db)  # fmt: skip
        tsb.put("k", ValueAndTimestamp("x", 9), 0)
        assert tsb.fetch("k", 0) == ValueAndTimestamp("x", -1)
        with pytest.raises(InvalidArgumentError, match="downgrades"):
            Stores.window_store_builder(
                Stores.persistent_window_store_with_headers("e", RETENTION, 1, False),
                Serdes.string(), Serdes.string()).build(db)  # fmt: skip


def test_session_and_kv_builders_over_older_suppliers(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        s = Stores.session_store_with_headers_builder(
            Stores.persistent_session_store("s", RETENTION), Serdes.string(), Serdes.long()
        ).build(db)
        assert s.adapter is ad.SessionToHeadersStoreAdapter
        s.put(Windowed("a", SessionWindow(0, 1)), AggregationWithHeaders(3, H))
        assert s.fetch_session("a", 0, 1) == AggregationWithHeaders(3)
        kv = Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store("kv"), Serdes.string(), Serdes.long()
        ).build(db)
        kv.put("a", ValueTimestampHeaders(1, 5, H))
        assert kv.get("a") == ValueTimestampHeaders(1, 5)
        assert kv._inner.get(b"a") == L5 + (1).to_bytes(8, "big")


def test_in_memory_suppliers_keep_the_builders_format() -> None:
    """Kafka's in-memory stores are format-agnostic (InMemory*StoreMarker): no adapter."""
    w = Stores.timestamped_window_store_builder(
        Stores.in_memory_window_store("w", RETENTION, 1, False), Serdes.string(), Serdes.long()
    ).build()
    w.put("a", ValueAndTimestamp(1, 5), 0)
    assert w.fetch("a", 0) == ValueAndTimestamp(1, 5)
    w.close()


# ---- key-value stores: lazy upgrade in a second database -------------------------------


def kv(db: txstore.Database, fmt: ValueFormat, tx: bool = True) -> Any:
    return db.key_value_store("s", Serdes.string(), Serdes.long(), format=fmt, transactional=tx)


@pytest.mark.parametrize("tx", [True, False], ids=["tx", "direct"])
def test_kv_plain_to_timestamped_upgrade(tmp_path: Path, tx: bool) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        s = kv(db, PLAIN, tx)
        s.put_all([(k, i) for i, k in enumerate("abcde")])
        s.commit(1)
    with txstore.open(path) as db:
        s = kv(db, TS, tx)
        meta = db.partition.store_meta("s")
        assert meta is not None
        assert (meta["format"], meta["db"], meta["legacy"]) == (
            "TIMESTAMPED", "keyValueWithTimestamp", [[None, "PLAIN"]]
        )  # fmt: skip
        inner = s._inner
        assert isinstance(inner, UpgradingBytesKeyValueStore)
        view = s.read_committed()
        assert view.get("a") == ValueAndTimestamp(0, -1)  # converted, not moved
        assert s.get("a") == ValueAndTimestamp(0, -1)  # converted and moved
        s.put("b", ValueAndTimestamp(10, 5))  # new database; deleted from the old one
        s.delete("c")
        assert s.get("c") is None
        assert [(x.key, x.value) for x in s.range("a", "d")] == [
            ("a", ValueAndTimestamp(0, -1)), ("b", ValueAndTimestamp(10, 5)),
            ("d", ValueAndTimestamp(3, -1)),
        ]  # fmt: skip
        assert s.approximate_num_entries() >= 4
        s.commit(2)
        p = db.partition
        assert p.get(b"s", b"a") is None and p.get(b"s", b"c") is None
        assert p.get(b"s.keyValueWithTimestamp", b"a") == NO_TS + bytes(8)
        assert p.get(b"s.keyValueWithTimestamp", b"b") == L5 + (10).to_bytes(8, "big")
        assert p.get(b"s", b"d") == (3).to_bytes(8, "big")  # untouched: still old format
        with view.snapshot() as snap:
            assert [x.key for x in snap.all()] == ["a", "b", "d", "e"]
            assert snap.approximate_num_entries() == 4


def test_kv_upgrade_recover_chain_prune_and_downgrade(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        s = kv(db, PLAIN)
        s.put_all([("a", 1), ("b", 2), ("c", 3)])
        s.commit(1)
    with txstore.open(path) as db:
        s = kv(db, TS)
        assert s.get("a") == ValueAndTimestamp(1, -1)  # a move, staged...
        assert s.recover(1) is True  # ...and discarded
        assert db.partition.get(b"s", b"a") == (1).to_bytes(8, "big")
        s.put("b", ValueAndTimestamp(20, 7))
        s.commit(2)
    with txstore.open(path) as db:  # a second upgrade over a half-migrated store
        s = kv(db, HEADERS)
        meta = db.partition.store_meta("s")
        assert meta is not None
        assert meta["legacy"] == [["keyValueWithTimestamp", "TIMESTAMPED"], [None, "PLAIN"]]
        assert [(x.key, x.value) for x in s.all()] == [
            ("a", ValueTimestampHeaders(1, -1)), ("b", ValueTimestampHeaders(20, 7)),
            ("c", ValueTimestampHeaders(3, -1)),
        ]  # fmt: skip
        for k in "abc":
            s.get(k)  # moves everything
        s.commit(3)
    with txstore.open(path) as db:
        s = kv(db, HEADERS)
        meta = db.partition.store_meta("s")
        assert meta is not None and meta["legacy"] == []  # empty legacy tiers pruned
        assert s.get("b") == ValueTimestampHeaders(20, 7)
    with txstore.open(path) as db:
        with pytest.raises(ConfigConflictError, match="downgrades are not supported"):
            kv(db, TS)
        with pytest.raises(ConfigConflictError, match="value_serde"):
            db.key_value_store("s", Serdes.string(), Serdes.string(), format=HEADERS)
        assert kv(db, HEADERS).get("a") == ValueTimestampHeaders(1, -1)


# ---- window and session stores: old segments keep their format -------------------------


def window(db: txstore.Database, fmt: ValueFormat) -> Any:
    return db.window_store("w", Serdes.string(), Serdes.string(), retention_period=RETENTION,
                           window_size=1, format=fmt)  # fmt: skip


def raw(db: txstore.Database, segment: str, key: str, ts: int) -> bytes | None:
    return db.partition.get(
        f"w.{segment}".encode(), key.encode() + ts.to_bytes(8, "big") + bytes(4)
    )


def test_window_migration_value_to_headers_value(tmp_path: Path) -> None:
    """``[value]`` -> ``[headers][value]`` (PLAIN -> PLAIN_HEADERS)."""
    path = tmp_path / "p"
    with txstore.open(path) as db:
        w = window(db, PLAIN)
        w.put("a", "v0", 0)
        w.put("a", "v1", 60_000)
        w.commit(1)
    with txstore.open(path) as db:
        w = window(db, PH)
        bs = w.bytes_store
        assert (bs.segment_format(0), bs.segment_format(1)) == (PLAIN, PLAIN)
        assert w.fetch("a", 0) == ValueAndHeaders("v0")  # old segment read through conversion
        assert w.read_committed().fetch("a", 60_000) == ValueAndHeaders("v1")
        w.put("a", ValueAndHeaders("v2", H), 100_000)  # into old segment 1: converted in place
        w.put("b", ValueAndHeaders("v3", H), 130_000)  # a new segment: new format
        w.commit(2)
        assert bs.segment_format(1) == PH and bs.segment_format(2) == PH
        assert bs.segment_format(0) == PLAIN  # untouched old segment keeps its format
        assert raw(db, "0", "a", 0) == b"v0"
        assert raw(db, "60000", "a", 60_000) == b"\x00v1"
        assert raw(db, "60000", "a", 100_000) == HB + b"v2"
        assert raw(db, "120000", "b", 130_000) == HB + b"v3"
        with w.fetch("a", 0, 200_000) as it:
            assert [(x.key, x.value) for x in it] == [
                (60_000, ValueAndHeaders("v1")), (100_000, ValueAndHeaders("v2", H))
            ]  # fmt: skip
    with txstore.open(path) as db:  # per-segment formats survive a reopen
        w = window(db, PH)
        assert w.bytes_store.segment_format(0) == PLAIN
        assert w.fetch("a", 0) == ValueAndHeaders("v0")
        with pytest.raises(ConfigConflictError, match="downgrades are not supported"):
            w.close()
            window(db, HEADERS)


def test_window_migration_headers_ts_value_to_headers_value(tmp_path: Path) -> None:
    """``[headers][timestamp][value]`` -> ``[headers][value]`` (HEADERS -> PLAIN_HEADERS)."""
    path = tmp_path / "p"
    with txstore.open(path) as db:
        w = window(db, HEADERS)
        w.put("a", ValueTimestampHeaders("v0", 5, H), 0)
        w.put("a", ValueTimestampHeaders("v1", 6, H), 60_000)
        w.commit(1)
    with txstore.open(path) as db:
        w = window(db, PH)
        assert w.fetch("a", 0) == ValueAndHeaders("v0", H)  # headers kept, 8 bytes dropped
        w.put("a", ValueAndHeaders("v2"), 61_000)  # converts segment 1 (staged)...
        assert w.bytes_store.segment_format(1) == PH
        assert w.recover(1) is True  # ...and recover discards the conversion too
        assert w.bytes_store.segment_format(1) == HEADERS
        assert raw(db, "60000", "a", 60_000) == HB + (6).to_bytes(8, "big") + b"v1"
        w.put("a", ValueAndHeaders("v2"), 61_000)
        w.commit(2)
        assert raw(db, "60000", "a", 60_000) == HB + b"v1"
        assert raw(db, "60000", "a", 61_000) == b"\x00v2"
        assert raw(db, "0", "a", 0) == HB + L5 + b"v0"  # old segment, old format


def test_session_upgrade_to_headers(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with txstore.open(path) as db:
        s = db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION)
        s.put(Windowed("a", SessionWindow(0, 10)), 1)
        s.commit(1)
    with txstore.open(path) as db:
        s = db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION,
                             format=PH)  # fmt: skip
        assert s.fetch_session("a", 0, 10) == AggregationWithHeaders(1)
        s.put(Windowed("b", SessionWindow(0, 70_000)), AggregationWithHeaders(2, H))
        s.commit(2)
        assert s.bytes_store.segment_format(0) == PLAIN
        assert s.bytes_store.segment_format(1) == PH
    with txstore.open(path) as db, pytest.raises(ConfigConflictError, match="downgrades"):
        db.session_store("s", Serdes.string(), Serdes.long(), retention_period=RETENTION)
