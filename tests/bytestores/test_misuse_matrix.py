"""Misuse never surfaces as a raw py-lmdb exception (issue 15, item 7).

A matrix of misuses of persistent stores, at the engine (``Partition``), bytes-store and typed-
store levels: each must raise a :class:`~txstore.errors.TxStoreError` subclass, and the one the
table names (exactly, not a subclass), never an ``lmdb.Error``. Before the engine translated
LMDB's exceptions at its boundaries (``txstore.engine.lmdb_errors``), the writer's read
transaction leaked ``lmdb.ReadersFullError`` when the reader table was full, an empty key or
database name at the partition level leaked ``lmdb.BadValsizeError``, and a write LMDB refused
for a key's size was a generic ``StorageError`` instead of ``InvalidArgumentError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
import pytest

import txstore
from txstore import Serdes, SessionWindow, Windowed
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.base import Snapshot
from txstore.engine.lmdb_errors import lmdb_error
from txstore.engine.partition import Partition
from txstore.errors import (
    DamagedFileError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
    StorageError,
    StorageFullError,
    StoreClosedError,
    TxStoreError,
)

BIG = b"x" * 600
CLOSED = InvalidStateStoreError


def drain(result: Any) -> Any:
    """Consume an iterator (reads happen chunk by chunk), and close it however that ends."""
    if hasattr(result, "__next__"):
        try:
            return list(result)
        finally:
            result.close()
    return result


def check(fn: Callable[[], Any], expected: type[TxStoreError]) -> None:
    try:
        drain(fn())
    except lmdb.Error as exc:  # pragma: no cover - the failure this test is about
        pytest.fail(f"raw LMDB error escaped: {type(exc).__name__}: {exc}")
    except TxStoreError as exc:
        assert type(exc) is expected, f"{type(exc).__name__} ({exc}), expected {expected.__name__}"
        return
    pytest.fail(f"no error, expected {expected.__name__}")


# ---- engine and bytes stores ----------------------------------------------------------------


@dataclass
class Bytes:
    path: Path
    part: Partition
    kv: BytesKeyValueStore
    nt: BytesKeyValueStore
    closed: BytesKeyValueStore
    ro: Partition
    ro_kv: BytesKeyValueStore
    snaps: list[Any] = field(default_factory=list)
    """Snapshots and views the cases opened, closed after the test."""


@pytest.fixture
def b(tmp_path: Path) -> Iterator[Bytes]:
    path = tmp_path / "p"
    part = Partition(path)
    kv = BytesKeyValueStore("kv", part)
    nt = BytesKeyValueStore("nt", part, transactional=False)
    closed = BytesKeyValueStore("closed", part)
    kv.put(b"a", b"1")
    nt.put(b"a", b"1")
    part.commit_stores({"kv": 5, "closed": 5})
    closed.close()
    ro = Partition(path, readonly=True)
    w = Bytes(path, part, kv, nt, closed, ro, BytesKeyValueStore("kv", ro))
    yield w
    for snap in w.snaps:
        snap.close()
    ro.close()
    part.close()


def keep(w: Bytes, snap: Any) -> Any:
    """``snap``, closed after the test."""
    w.snaps.append(snap)
    return snap


BYTES_CASES: dict[str, tuple[Callable[[Bytes], Any], type[TxStoreError]]] = {
    # the partition (engine) level
    "partition get empty key": (lambda w: w.part.get(b"kv", b""), InvalidArgumentError),
    "partition shared get empty key": (
        lambda w: w.part.get(b"kv", b"", shared=True),
        InvalidArgumentError,
    ),
    "partition get empty db name": (lambda w: w.part.get(b"", b"a"), InvalidArgumentError),
    "read-only partition get empty key": (lambda w: w.ro.get(b"kv", b""), InvalidArgumentError),
    "partition write empty key": (
        lambda w: w.part.write_through(b"nt", [(b"", b"v")]),
        InvalidArgumentError,
    ),
    "partition write 600-byte key": (
        lambda w: w.part.write_through(b"nt", [(BIG, b"v")]),
        InvalidArgumentError,
    ),
    "partition write, read-only": (
        lambda w: w.ro.write_through(b"nt", [(b"k", b"v")]),
        ReadOnlyError,
    ),
    "partition commit, read-only": (lambda w: w.ro.commit_stores({"kv": 9}), ReadOnlyError),
    "partition snapshot get empty key": (
        lambda w: keep(w, w.part.snapshot()).get(b"kv", b""),
        InvalidArgumentError,
    ),
    "partition commit backwards": (lambda w: w.part.commit_stores({"kv": 1}), OffsetError),
    "partition commit unknown store": (
        lambda w: w.part.commit_stores({"nope": 1}),
        InvalidArgumentError,
    ),
    "partition commit bad store name": (
        lambda w: w.part.commit_stores({"../x": 1}),
        InvalidArgumentError,
    ),
    # the bytes store
    "get empty key": (lambda w: w.kv.get(b""), InvalidArgumentError),
    "get 600-byte key": (lambda w: w.kv.get(BIG), InvalidArgumentError),
    "get None": (lambda w: w.kv.get(None), InvalidArgumentError),  # type: ignore[arg-type]
    "get str": (lambda w: w.kv.get("a"), InvalidTypeError),  # type: ignore[arg-type]
    "put empty key": (lambda w: w.kv.put(b"", b"v"), InvalidArgumentError),
    "put 600-byte key": (lambda w: w.kv.put(BIG, b"v"), InvalidArgumentError),
    "put str value": (lambda w: w.kv.put(b"k", "v"), InvalidTypeError),  # type: ignore[arg-type]
    "non-transactional put 600-byte key": (lambda w: w.nt.put(BIG, b"v"), InvalidArgumentError),
    "put_all bad pair": (lambda w: w.kv.put_all([(b"k",)]), InvalidTypeError),  # type: ignore[list-item]
    "read-committed get empty key": (
        lambda w: w.kv.read_committed().get(b""),
        InvalidArgumentError,
    ),
    "snapshot get 600-byte key": (
        lambda w: keep(w, w.kv.snapshot()).get(BIG),
        InvalidArgumentError,
    ),
    "commit negative offset": (lambda w: w.kv.commit(-1), OffsetError),
    "commit backwards": (lambda w: w.kv.commit(1), OffsetError),
    "commit str offset": (lambda w: w.kv.commit("7"), InvalidTypeError),  # type: ignore[arg-type]
    "recover negative offset": (lambda w: w.kv.recover(-1), OffsetError),
    "closed get": (lambda w: w.closed.get(b"a"), StoreClosedError),
    "closed put": (lambda w: w.closed.put(b"a", b"2"), StoreClosedError),
    "closed all": (lambda w: w.closed.all(), StoreClosedError),
    "closed commit": (lambda w: w.closed.commit(9), StoreClosedError),
    "closed read_committed": (lambda w: w.closed.read_committed(), StoreClosedError),
    "read-only put": (lambda w: w.ro_kv.put(b"a", b"2"), ReadOnlyError),
    "read-only commit": (lambda w: w.ro_kv.commit(9), ReadOnlyError),
    "read-only new store": (lambda w: BytesKeyValueStore("new", w.ro), ReadOnlyError),
    "read-only get empty key": (lambda w: w.ro_kv.get(b""), InvalidArgumentError),
    "bad store name": (lambda w: BytesKeyValueStore("a/b", w.part), InvalidArgumentError),
    "store opened twice": (lambda w: BytesKeyValueStore("kv", w.part), InvalidStateStoreError),
    "second writer in this process": (lambda w: Partition(w.path), InvalidStateStoreError),
}


@pytest.mark.parametrize("case", sorted(BYTES_CASES))
def test_bytes_level_misuse(b: Bytes, case: str) -> None:
    fn, expected = BYTES_CASES[case]
    check(lambda: fn(b), expected)


def test_closed_partition(b: Bytes) -> None:
    view = b.kv.read_committed()
    it = b.kv.all()
    b.part.close()
    for fn, expected in [
        (lambda: b.part.get(b"kv", b"a"), InvalidStateStoreError),
        (lambda: b.part.get(b"kv", b"a", shared=True), InvalidStateStoreError),
        (lambda: b.part.read_range(b"kv", b"a", b"z"), InvalidStateStoreError),
        (lambda: b.part.snapshot(), InvalidStateStoreError),
        (lambda: b.part.info(), InvalidStateStoreError),
        (lambda: b.kv.get(b"a"), StoreClosedError),
        (lambda: view.get(b"a"), StoreClosedError),
    ]:
        check(fn, expected)
    assert list(it) == []  # a closed iterator yields nothing


def fill_reader_table(take: Callable[[], Snapshot], snaps: list[Any]) -> None:
    """Take snapshots (one LMDB reader slot each) until the reader table is full."""
    with pytest.raises(StorageError, match="reader table"):
        for _ in range(5000):
            snaps.append(take())


def test_reader_table_full_at_the_bytes_level(tmp_path: Path) -> None:
    snaps: list[Any] = []
    with Partition(tmp_path / "p", max_readers=8) as part:
        kv = BytesKeyValueStore("kv", part)
        kv.put_all([(b"k%03d" % i, b"v") for i in range(300)])
        kv.commit(1)  # ends the writer's read transaction
        try:
            fill_reader_table(part.snapshot, snaps)
            for fn in (
                lambda: kv.get(b"k001"),
                lambda: kv.all(),
                lambda: kv.range(b"k1", b"k2"),
                lambda: kv.approximate_num_entries(),
                lambda: kv.committed_offset,
                lambda: kv.read_committed().get(b"k001"),
                lambda: part.read_range(b"kv", b"k1", b"k2"),
                lambda: part.get(b"kv", b"k001"),
            ):
                check(fn, StorageError)
        finally:
            for snap in snaps:
                snap.close()
        assert kv.get(b"k001") == b"v"  # slots free again: reads work


# ---- typed stores ----------------------------------------------------------------------------


@dataclass
class Typed:
    db: txstore.Database
    kv: Any
    ws: Any
    ss: Any
    ro: txstore.Database
    ro_kv: Any
    ro_ws: Any
    closed_db: txstore.Database
    closed_kv: Any
    closed_ws: Any


@pytest.fixture
def t(tmp_path: Path) -> Iterator[Typed]:
    s = Serdes.string()
    db = txstore.open(tmp_path / "p")
    kv = db.key_value_store("kv", s, s)
    ws = db.window_store("ws", s, s, retention_period=100_000, window_size=1000)
    ss = db.session_store("ss", s, s, retention_period=100_000)
    kv.put("a", "1")
    ws.put("a", "1", 5000)
    ss.put(Windowed("a", SessionWindow(1, 2)), "1")
    db.commit({"kv": 5, "ws": 5, "ss": 5})
    ro = txstore.open(tmp_path / "p", readonly=True)
    closed_db = txstore.open(tmp_path / "q")
    closed_kv = closed_db.key_value_store("kv", s, s)
    closed_ws = closed_db.window_store("ws", s, s, retention_period=100_000, window_size=1000)
    closed_db.close()
    yield Typed(
        db,
        kv,
        ws,
        ss,
        ro,
        ro.key_value_store("kv", s, s),
        ro.window_store("ws", s, s, retention_period=100_000, window_size=1000),
        closed_db,
        closed_kv,
        closed_ws,
    )
    ro.close()
    db.close()


LONG = "x" * 600
TYPED_CASES: dict[str, tuple[Callable[[Typed], Any], type[TxStoreError]]] = {
    "kv get None": (lambda w: w.kv.get(None), InvalidArgumentError),
    "kv get 600-byte key": (lambda w: w.kv.get(LONG), InvalidArgumentError),
    "kv get int": (lambda w: w.kv.get(1), InvalidTypeError),
    "kv put 600-byte key": (lambda w: w.kv.put(LONG, "v"), InvalidArgumentError),
    "kv put int value": (lambda w: w.kv.put("k", 1), InvalidTypeError),
    "kv delete 600-byte key": (lambda w: w.kv.delete(LONG), InvalidArgumentError),
    "kv put_all 600-byte key": (lambda w: w.kv.put_all([(LONG, "v")]), InvalidArgumentError),
    "kv read_committed get 600-byte key": (
        lambda w: w.kv.read_committed().get(LONG),
        InvalidArgumentError,
    ),
    "ws put 600-byte key": (lambda w: w.ws.put(LONG, "v", 5000), InvalidArgumentError),
    "ws put negative time": (lambda w: w.ws.put("a", "v", -1), InvalidArgumentError),
    "ws fetch 600-byte key": (lambda w: w.ws.fetch(LONG, 5000), InvalidArgumentError),
    "ws fetch range 600-byte key": (lambda w: w.ws.fetch(LONG, 0, 9000), InvalidArgumentError),
    "ws key-range fetch 600-byte key": (
        lambda w: w.ws.fetch(LONG, LONG, 0, 9000),
        InvalidArgumentError,
    ),
    "ss put 600-byte key": (
        lambda w: w.ss.put(Windowed(LONG, SessionWindow(1, 2)), "v"),
        InvalidArgumentError,
    ),
    "ss fetch 600-byte key": (lambda w: w.ss.fetch(LONG), InvalidArgumentError),
    "commit negative": (lambda w: w.db.commit({"kv": -1}), OffsetError),
    "commit backwards": (lambda w: w.db.commit({"kv": 1}), OffsetError),
    "commit str offset": (lambda w: w.db.commit({"kv": "x"}), InvalidTypeError),  # type: ignore[dict-item]
    "commit unknown store": (lambda w: w.db.commit({"nope": 1}), InvalidArgumentError),
    "commit not a mapping": (lambda w: w.db.commit([1]), InvalidTypeError),  # type: ignore[arg-type]
    "store name with a slash": (lambda w: w.db.key_value_store("a/b"), InvalidArgumentError),
    "read-only put": (lambda w: w.ro_kv.put("a", "v"), ReadOnlyError),
    "read-only window put": (lambda w: w.ro_ws.put("a", "v", 5000), ReadOnlyError),
    "read-only commit": (lambda w: w.ro.commit({"kv": 9}), ReadOnlyError),
    "read-only new store": (lambda w: w.ro.key_value_store("new"), ReadOnlyError),
    "closed kv get": (lambda w: w.closed_kv.get("a"), StoreClosedError),
    "closed kv put": (lambda w: w.closed_kv.put("a", "v"), StoreClosedError),
    "closed kv all": (lambda w: w.closed_kv.all(), StoreClosedError),
    "closed ws fetch": (lambda w: w.closed_ws.fetch("a", 5000), StoreClosedError),
    "closed db commit": (lambda w: w.closed_db.commit({"kv": 1}), StoreClosedError),
    "closed db store": (lambda w: w.closed_db.store("kv"), StoreClosedError),
}


@pytest.mark.parametrize("case", sorted(TYPED_CASES))
def test_typed_level_misuse(t: Typed, case: str) -> None:
    fn, expected = TYPED_CASES[case]
    check(lambda: fn(t), expected)


def test_reader_table_full_at_the_typed_level(t: Typed) -> None:
    """The default table (1024 slots) filled by snapshots of this process: the writer's own
    reads, which begin a read transaction of their own, used to leak ReadersFullError."""
    snaps: list[Any] = []
    try:
        fill_reader_table(t.kv.snapshot, snaps)
        for fn in (
            lambda: t.kv.get("a"),
            lambda: t.kv.all(),
            lambda: t.kv.range("a", "z"),
            lambda: t.ws.fetch("a", 5000),
            lambda: t.ws.fetch("a", 0, 9000),
            lambda: t.ws.fetch_all(0, 9000),
            lambda: t.ss.fetch("a"),
            lambda: t.kv.read_committed().get("a"),
            lambda: t.ro_kv.get("a"),
        ):
            check(fn, StorageError)
    finally:
        for snap in snaps:
            snap.close()
    assert t.kv.get("a") == "1"


# ---- the translation itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (lmdb.MapFullError("mdb_put: MDB_MAP_FULL"), StorageFullError),
        (lmdb.ReadonlyError("mdb_txn_begin: Permission denied"), ReadOnlyError),
        (lmdb.BadValsizeError("mdb_get: MDB_BAD_VALSIZE"), InvalidArgumentError),
        (lmdb.CorruptedError("MDB_CORRUPTED"), DamagedFileError),
        (lmdb.PageNotFoundError("MDB_PAGE_NOTFOUND"), DamagedFileError),
        (lmdb.InvalidError("MDB_INVALID"), DamagedFileError),
        (lmdb.VersionMismatchError("MDB_VERSION_MISMATCH"), DamagedFileError),
        (lmdb.ReadersFullError("MDB_READERS_FULL"), StorageError),
        (lmdb.DbsFullError("MDB_DBS_FULL"), StorageError),
        (lmdb.BadDbiError("MDB_BAD_DBI"), StorageError),
        (lmdb.Error("Attempt to operate on closed/deleted/dropped object."), CLOSED),
        (lmdb.DiskError("No space left on device"), StorageError),
    ],
)
def test_every_lmdb_error_has_a_txstore_class(error: lmdb.Error, expected: type) -> None:
    err = lmdb_error(error, "/some/partition")
    assert type(err) is expected
    assert "/some/partition" in str(err)
    assert isinstance(err, TxStoreError)


def test_a_closed_environment_is_a_state_error(b: Bytes) -> None:
    """A transaction whose environment was closed under it: py-lmdb raises a plain
    ``lmdb.Error``; the engine says the state is wrong, not the storage."""
    env = lmdb.open(str(b.path / "other"))
    txn = env.begin()
    env.close()
    with pytest.raises(lmdb.Error) as info:
        txn.get(b"a")
    assert type(lmdb_error(info.value, "x")) is InvalidStateStoreError
