"""Partitions: one LMDB environment per partition directory (a task, in Kafka's words).

Layout of a partition directory::

    <path>/
        data/         the LMDB environment (data.mdb, lock.mdb). Every store of the partition
                      is one or more named databases in it; the database ``__txstore_meta__``
                      holds, per store, its metadata (JSON) and its committed changelog offset
                      (8-byte big-endian signed), written in the same transaction as the data.
        spill/        the disposable spill environment of the overlays (sync off). It exists only
                      while some uncommitted writes are spilled; it is deleted at open, at
                      recover and after the commit that empties it. Never read by other
                      processes.
        writer.lock   ``flock``-ed by the one process that has the partition open for writing.

A store owns named databases: its main one is named after the store (UTF-8); a store of a later
kind may own more (window segments ``<store>.<segmentStart>``) and stage "drop this database".
Commit works on named databases: :meth:`Partition.commit_stores` applies the overlays of any
set of stores (their puts, deletes and database drops) and their offsets in **one** LMDB write
transaction, synced unless ``sync=False`` (``sync=False`` survives a process crash but not an OS
crash or power loss, which may lose or even corrupt the last transactions).

:class:`MemoryPartition` has the same interface with a ``SortedDict`` per database as its
committed tier: no files, no spill, offsets kept in memory. Stores take either.

Processes and threads. One process writes a partition (``writer.lock``); other processes may
open it with ``readonly=True`` (the LMDB lock file is always used) and see committed data only.
Within a process, a path is open at most once for writing; read-only partitions on the same path
share its environment (py-lmdb cannot open one path twice). A partition opened before a ``fork``
is unusable in the child, which must open it again. The writer thread (any one thread at a
time) does all writes and the read-uncommitted reads; *shared* reads (read-committed views,
read-only partitions, snapshots) may come from any thread. Every read is one short LMDB read
transaction, except in an explicit :meth:`Partition.snapshot`.

Map growth. When a write fails with ``MapFullError`` the transaction is aborted, the map is
doubled (``set_mapsize``, after in-flight shared reads of this process have finished: a gate
blocks new ones for the few microseconds of the resize), and the whole write is replayed.
Readers in other processes adopt the new size when their next transaction raises
``MapResizedError``. Open snapshots of this process are invalidated by a resize and raise
:class:`~txstore.errors.SnapshotInvalidatedError`. ``reader_check()`` runs at open and every 64
commits.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Self, TypeVar

import lmdb

from txstore.errors import (
    ConfigConflictError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
    SnapshotInvalidatedError,
    StorageError,
)
from txstore.iterators import ChunkSource, FnSource, KeyRange, Row, no_rows, read_lmdb_chunk
from txstore.overlay import Overlay, SpillEnv, remove_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MAX_KEY_SIZE",
    "META_DB",
    "Partition",
    "PartitionBase",
    "Snapshot",
    "check_offset",
    "check_store_name",
]

T = TypeVar("T")

META_DB: Final = b"__txstore_meta__"
MAX_KEY_SIZE: Final = 511
"""LMDB's maximum key size (``env.max_key_size()``); both flavours enforce it."""
MAX_STORE_NAME_BYTES: Final = 200
READER_CHECK_EVERY: Final = 64
_OFFSET: Final = struct.Struct(">q")
_META_PREFIX: Final = b"meta:"
_OFFSET_PREFIX: Final = b"offset:"

_fork_generation = [0]
_registry_lock = threading.Lock()
_registry: dict[str, _SharedEnv] = {}


def _after_fork_in_child() -> None:
    global _registry_lock
    _fork_generation[0] += 1
    _registry_lock = threading.Lock()
    for sh in _registry.values():
        # py-lmdb skips LMDB's cleanup in a forked child (the parent's readers and locks stay
        # intact) but forgets the environment, so the child may open the path afresh.
        with contextlib.suppress(Exception):
            sh.env.close()
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def check_store_name(name: object) -> str:
    """Validate a store name: non-empty ``str``, no NUL, <= 200 UTF-8 bytes, not reserved."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"store name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError("store name must not be empty")
    if "\x00" in name:
        raise InvalidArgumentError(f"store name {name!r} contains a NUL character")
    if len(name.encode()) > MAX_STORE_NAME_BYTES:
        raise InvalidArgumentError(
            f"store name {name[:40]!r}... is longer than {MAX_STORE_NAME_BYTES} UTF-8 bytes"
        )
    if name.startswith("__txstore"):
        raise InvalidArgumentError(f"store name {name!r} uses the reserved prefix '__txstore'")
    return name


def check_offset(offset: object) -> int:
    """Validate a changelog offset: an ``int`` (not ``bool``) >= 0."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InvalidTypeError(f"changelog offset must be an int, got {type(offset).__name__}")
    if offset < 0:
        raise OffsetError(f"changelog offset must be >= 0, got {offset}")
    if offset >= 2**63:
        raise OffsetError(f"changelog offset {offset} does not fit a signed 64-bit long")
    return offset


def _normalize_meta(meta: object) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        raise InvalidTypeError(f"store metadata must be a dict, got {type(meta).__name__}")
    try:
        normalized = json.loads(json.dumps(dict(meta), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"store metadata must be JSON-serializable: {exc}") from exc
    assert isinstance(normalized, dict)
    return normalized


def _meta_diff(disk: object, asked: object, path: str = "") -> list[str]:
    if isinstance(disk, dict) and isinstance(asked, dict):
        out: list[str] = []
        for k in sorted(set(disk) | set(asked)):
            p = f"{path}.{k}" if path else str(k)
            if k not in disk:
                out.append(f"{p}: absent on disk, requested {asked[k]!r}")
            elif k not in asked:
                out.append(f"{p}: {disk[k]!r} on disk, absent from the request")
            else:
                out.extend(_meta_diff(disk[k], asked[k], p))
        return out
    return [] if disk == asked else [f"{path or 'meta'}: {disk!r} on disk, requested {asked!r}"]


class _Gate:
    """Shared entries for reads from non-writer threads; exclusive for map resize and db drops."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._exclusive = False
        self.epoch = 0

    def enter(self) -> None:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._active += 1

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if not self._active:
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            while self._active:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self.epoch += 1
                self._cond.notify_all()


class _SharedEnv:
    """One open LMDB environment of this process, shared by the partitions on its path."""

    def __init__(self, key: str, env: Any, writable: bool) -> None:
        self.key = key
        self.env = env
        self.writable_env = writable
        self.writer = False
        self.refs = 0
        self.gate = _Gate()
        self.dbi_lock = threading.Lock()
        self.dbs: dict[bytes, Any] = {}


class PartitionBase:
    """What stores need from a partition; see :class:`Partition` and :class:`MemoryPartition`."""

    persistent: bool = False
    readonly: bool = False
    path: str | None = None
    overlay: Overlay | None = None

    def __init__(self) -> None:
        self._closed = False
        self._generation = _fork_generation[0]
        self._stores: dict[str, Any] = {}
        self._snapshots: weakref.WeakSet[Snapshot] = weakref.WeakSet()
        self._snapshots_lock = threading.RLock()
        self._commits = 0

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise InvalidStateStoreError(f"partition {self.path or '<memory>'} is closed")
        if self._generation != _fork_generation[0]:
            raise InvalidStateStoreError(
                f"partition {self.path} was opened before a fork: open it again in this process"
            )

    def _check_writable(self) -> None:
        self._check()
        if self.readonly:
            raise ReadOnlyError(f"partition {self.path} is open read-only")

    def attach(self, name: str, store: Any) -> None:
        """Register an open store object (closed by :meth:`close`); one per name."""
        self._check()
        if name in self._stores:
            raise InvalidStateStoreError(
                f"store {name!r} is already open on this partition: close it first or reuse it"
            )
        self._stores[name] = store

    def detach(self, name: str, store: Any) -> None:
        """Forget a store object registered with :meth:`attach`."""
        if self._stores.get(name) is store:
            del self._stores[name]

    def close(self) -> None:
        """Close the stores, snapshots and overlay of this partition. Idempotent."""
        if self._closed:
            return
        for store in list(self._stores.values()):
            store.close()
        with self._snapshots_lock:
            snapshots = list(self._snapshots)
        for snap in snapshots:
            snap.close()
        if self.overlay is not None and self._generation == _fork_generation[0]:
            self.overlay.close()
        self._closed = True
        self._release()

    def _release(self) -> None:
        pass

    def _track_snapshot(self, snap: Snapshot) -> None:
        with self._snapshots_lock:
            self._snapshots.add(snap)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stores and offsets -------------------------------------------------------------------

    @staticmethod
    def db_name(store: str, suffix: str | None = None) -> bytes:
        """The named database of ``store`` (``<store>.<suffix>`` for extra databases)."""
        return (store if suffix is None else f"{store}.{suffix}").encode()

    def register_store(self, name: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Record ``meta`` for ``name`` at first open; later opens must match. O(1) + a commit.

        Raises ``ConfigConflictError`` naming each differing field with both values.
        """
        check_store_name(name)
        asked = _normalize_meta(meta)
        self._check()
        disk = self.store_meta(name)
        if disk is None:
            if self.readonly:
                raise ReadOnlyError(
                    f"store {name!r} does not exist in read-only partition {self.path}"
                )
            self._write_meta(name, asked)
            return asked
        diffs = _meta_diff(disk, asked)
        if diffs:
            raise ConfigConflictError(
                f"store {name!r} in partition {self.path or '<memory>'} was created with a "
                f"different configuration: {'; '.join(diffs)}. Open it with the configuration "
                "on disk, or use another store name"
            )
        return disk

    def store_meta(self, name: str) -> dict[str, Any] | None:
        """The recorded metadata of ``name``, or None. O(log n)."""
        raise NotImplementedError

    def store_names(self) -> list[str]:
        """Names of the registered stores, sorted. O(stores)."""
        raise NotImplementedError

    def committed_offset(self, store: str) -> int | None:
        """The committed changelog offset of ``store`` (None: never committed). O(log n)."""
        raise NotImplementedError

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def _committed_offsets(self, stores: list[str]) -> dict[str, int | None]:
        return {s: self.committed_offset(s) for s in stores}

    def _check_commit(self, offsets: Mapping[str, int]) -> dict[str, int]:
        self._check_writable()
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError(f"offsets must be a mapping, got {type(offsets).__name__}")
        checked: dict[str, int] = {}
        for name, offset in offsets.items():
            check_store_name(name)
            checked[name] = check_offset(offset)
        current = self._committed_offsets(list(checked))
        for name, offset in checked.items():
            if self.store_meta(name) is None:
                raise InvalidArgumentError(f"store {name!r} is not registered in this partition")
            old = current[name]
            if old is not None and offset < old:
                raise OffsetError(
                    f"changelog offset of store {name!r} would go backwards: {offset} < "
                    f"committed {old}; nothing was written"
                )
        return checked

    def commit_stores(self, offsets: Mapping[str, int]) -> None:
        """Atomically commit the overlays of the given stores with their changelog offsets.

        One write transaction for all of them (synced unless ``sync=False``); the overlays are
        cleared only after it committed. An invalid or backwards offset raises before anything
        is written. Cost: O(staged rows x log N) plus one sync.
        """
        checked = self._check_commit(offsets)
        self._apply(checked)
        if self.overlay is not None:
            for name in checked:
                self.overlay.clear_store(name)
        self._commits += 1
        if self._commits % READER_CHECK_EVERY == 0:
            self.reader_check()

    def discard(self, store: str) -> None:
        """Drop everything ``store`` has staged, in memory and spilled. O(staged)."""
        self._check()
        if self.overlay is not None:
            self.overlay.clear_store(store)

    def reader_check(self) -> int:
        """Clear stale reader slots left by dead processes; returns how many. O(readers)."""
        return 0

    def _apply(self, offsets: dict[str, int]) -> None:
        raise NotImplementedError

    # -- committed tier -----------------------------------------------------------------------

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        """The committed value of ``key`` in database ``db``. O(log n), one read txn."""
        raise NotImplementedError

    def source(self, db: bytes, *, shared: bool = False) -> ChunkSource:
        """A :class:`ChunkSource` over the committed rows of ``db`` (one read txn a chunk)."""
        raise NotImplementedError

    def count(self, db: bytes, *, shared: bool = False) -> int:
        """Number of committed entries of ``db``. O(1)."""
        raise NotImplementedError

    def snapshot(self) -> Snapshot:
        """A consistent read-only view of committed data (one read txn until closed)."""
        raise NotImplementedError

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        """Non-transactional stores: apply rows (None value: delete) in one write txn."""
        raise NotImplementedError

    def record_offset(self, store: str, offset: int) -> None:
        """Non-transactional stores: record ``offset`` and flush to disk."""
        self.commit_stores({store: offset})


class Snapshot:
    """A consistent, read-only view of a partition's committed data and offsets.

    Every read sees the same committed state (data and offsets from one transaction). Keep it
    short: an LMDB snapshot pins pages (the file grows while it is open). Close it, or use it as
    a context manager; a leaked open snapshot emits ``ResourceWarning``. A map resize in this
    process invalidates it (:class:`SnapshotInvalidatedError`; take a new one).
    """

    _closed = True

    def __init__(self, partition: PartitionBase) -> None:
        self.partition = partition

    def get(self, db: bytes, key: bytes) -> bytes | None:
        """The value of ``key`` in ``db`` in this snapshot. O(log n)."""
        raise NotImplementedError

    def source(self, db: bytes) -> ChunkSource:
        """A :class:`ChunkSource` over ``db`` in this snapshot."""
        raise NotImplementedError

    def count(self, db: bytes) -> int:
        """Number of entries of ``db`` in this snapshot. O(1)."""
        raise NotImplementedError

    def committed_offset(self, store: str) -> int | None:
        """The committed offset of ``store`` in this snapshot. O(log n)."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise InvalidStateStoreError("snapshot is closed")
        self.partition._check()

    def close(self) -> None:
        """Release the snapshot. Idempotent."""
        self._closed = True

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                "unclosed txstore snapshot: close it or use it in a 'with' block",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )
            self.close()


class Partition(PartitionBase):
    """A partition directory holding one LMDB environment (see the module docstring).

    Opening costs an ``lmdb.open``, a ``reader_check`` and, when writable, deleting a leftover
    spill directory. ``map_size`` is the initial map (it doubles when full);
    ``overlay_budget_bytes`` bounds the overlays' memory before they spill; ``max_dbs`` bounds
    the named databases (stores, segments), fixed by the first opener.

    Why ``max_dbs`` defaults to 256 and spare read transactions are off: LMDB allocates per-dbi
    arrays for every new read transaction, measured at 2.4M begin+get+abort/s with 256 dbs,
    0.9M/s with 1024 and 0.28M/s with 4096. py-lmdb's spare transactions would avoid that, but
    a forked child that exits normally aborts the inherited spares and frees the parent's
    reader slots (the parent then fails with ``MDB_BAD_RSLOT``; reproduced), so they stay off.
    """

    persistent = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        sync: bool = True,
        map_size: int = 64 * 2**20,
        overlay_budget_bytes: int = 64 * 2**20,
        max_dbs: int = 256,
        max_readers: int = 1024,
    ) -> None:
        super().__init__()
        for label, value in (
            ("map_size", map_size),
            ("overlay_budget_bytes", overlay_budget_bytes),
            ("max_dbs", max_dbs),
            ("max_readers", max_readers),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{label} must be an int, got {type(value).__name__}")
            if value <= 0:
                raise InvalidArgumentError(f"{label} must be > 0, got {value}")
        self.path = os.fspath(path)
        self.readonly = bool(readonly)
        self.sync = bool(sync)
        self._closed = True  # until fully open
        self._lock_fd: int | None = None
        self._sh: _SharedEnv | None = None
        self._new_dbs: dict[bytes, Any] = {}
        self._dbi_locked = False
        data = os.path.join(self.path, "data")
        if self.readonly:
            if not os.path.isfile(os.path.join(data, "data.mdb")):
                raise StorageError(
                    f"no txstore partition at {self.path!r} (missing data/data.mdb): open it "
                    "once without readonly=True to create it"
                )
        else:
            os.makedirs(data, exist_ok=True)
        try:
            self._sh = self._acquire(data, map_size, max_dbs, max_readers)
            if not self.readonly:
                self._lock_writer()
                self.overlay = Overlay(
                    overlay_budget_bytes,
                    SpillEnv(
                        os.path.join(self.path, "spill"),
                        max_dbs=max_dbs,
                        map_size=max(64 * 2**20, 4 * overlay_budget_bytes),
                    ),
                )
                remove_dir(os.path.join(self.path, "spill"))
                self._write(lambda txn: self._write_handle(txn, META_DB), False, 0)
            self._closed = False
            self._meta = self._read(META_DB, True, lambda txn, h: h, None)
            if self._meta is None:
                raise StorageError(f"{self.path!r} is not a txstore partition (no metadata)")
            self.reader_check()
        except BaseException:
            self._closed = False
            self.close()
            raise

    # -- environment registry -----------------------------------------------------------------

    def _acquire(self, data: str, map_size: int, max_dbs: int, max_readers: int) -> _SharedEnv:
        key = os.path.realpath(data)
        with _registry_lock:
            sh = _registry.get(key)
            if sh is not None:
                if not self.readonly:
                    if sh.writer or not sh.writable_env:
                        kind = "for writing" if sh.writer else "read-only"
                        raise InvalidStateStoreError(
                            f"partition {self.path!r} is already open {kind} in this process "
                            f"(pid {os.getpid()}): close it first, or share that Partition object"
                        )
                    sh.writer = True
                sh.refs += 1
                return sh
            try:
                env = lmdb.open(
                    data,
                    map_size=map_size,
                    max_dbs=max_dbs,
                    max_readers=max_readers,
                    subdir=True,
                    readonly=self.readonly,
                    create=not self.readonly,
                    sync=self.sync,
                    lock=True,
                    max_spare_txns=0,  # spare read txns break the parent after a fork
                )
            except lmdb.Error as exc:
                raise StorageError(f"cannot open LMDB environment {data!r}: {exc}") from exc
            sh = _SharedEnv(key, env, not self.readonly)
            sh.writer = not self.readonly
            sh.refs = 1
            _registry[key] = sh
            return sh

    def _lock_writer(self) -> None:
        if fcntl is None:  # pragma: no cover - Windows: LMDB's own writer lock only
            return
        assert self.path is not None
        fd = os.open(os.path.join(self.path, "writer.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise InvalidStateStoreError(
                f"partition {self.path!r} is open for writing by another process; open it with "
                "readonly=True, or stop that process"
            ) from exc
        self._lock_fd = fd

    def _release(self) -> None:
        if self._generation != _fork_generation[0]:
            return  # never touch an inherited environment
        sh, self._sh = self._sh, None
        if sh is not None:
            with _registry_lock:
                if not self.readonly:
                    sh.writer = False
                sh.refs -= 1
                if sh.refs <= 0:
                    if _registry.get(sh.key) is sh:
                        del _registry[sh.key]
                    sh.env.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- named database handles ---------------------------------------------------------------
    # LMDB rules: a handle opened in a transaction is usable by other transactions only after
    # that transaction committed, and only by transactions begun after it; mdb_dbi_open must not
    # run in two transactions of a process at once. So a read opens a missing handle in its own
    # short transaction under ``dbi_lock`` before beginning; a write transaction that opens or
    # drops a database holds ``dbi_lock`` until it ends and publishes new handles once
    # committed; snapshots open every handle before they begin.

    def _open_existing(self, db: bytes) -> Any:
        """The handle of an existing database, or None. O(1) once cached.

        A read transaction cannot publish a handle here (py-lmdb ends it with a reset, which
        discards new handles), so a writable environment opens it in a short write transaction,
        taken *before* ``dbi_lock`` as the writer does (no lock-order deadlock); a read-only
        environment uses py-lmdb's own temporary transaction.
        """
        sh = self._sh
        assert sh is not None
        h = sh.dbs.get(db)
        if h is not None:
            return h
        if not sh.writable_env:
            with sh.dbi_lock:
                h = sh.dbs.get(db)
                if h is None:
                    try:
                        h = sh.env.open_db(db, create=False)
                    except lmdb.NotFoundError:
                        return None
                    sh.dbs[db] = h
            return h
        txn = sh.env.begin(write=True)
        try:
            with sh.dbi_lock:
                h = sh.dbs.get(db)
                if h is None:
                    try:
                        h = sh.env.open_db(db, txn=txn, create=False)
                    except lmdb.NotFoundError:
                        return None
                    txn.commit()
                    sh.dbs[db] = h
            return h
        finally:
            with contextlib.suppress(lmdb.Error):
                txn.abort()  # no-op once committed

    def _db_names(self) -> list[bytes]:
        """Names of every named database, from the main database. O(databases)."""
        assert self._sh is not None
        with self._sh.env.begin() as txn:
            return list(txn.cursor().iternext(values=False))

    def _open_all(self) -> dict[bytes, Any]:
        """Handles of every existing database (snapshots need them before they begin)."""
        for name in self._db_names():
            self._open_existing(name)
        assert self._sh is not None
        return dict(self._sh.dbs)

    def _write_handle(self, txn: Any, db: bytes, create: bool = True) -> Any:
        """The handle of ``db`` inside the write transaction ``txn`` (created if asked)."""
        sh = self._sh
        assert sh is not None
        h = sh.dbs.get(db)
        if h is None:
            h = self._new_dbs.get(db)
        if h is None:
            self._hold_dbi_lock()
            try:
                h = sh.env.open_db(db, txn=txn, create=create)
            except lmdb.NotFoundError:
                return None
            self._new_dbs[db] = h
        return h

    def _hold_dbi_lock(self) -> None:
        if not self._dbi_locked:
            assert self._sh is not None
            self._sh.dbi_lock.acquire()
            self._dbi_locked = True

    # -- reads --------------------------------------------------------------------------------

    def _shared(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` as a shared reader: gate entry, MapResized and ReadersFull handling."""
        sh = self._sh
        assert sh is not None
        for attempt in range(8):
            sh.gate.enter()
            try:
                return fn()
            except lmdb.MapResizedError:
                pass
            except lmdb.BadDbiError:
                sh.dbs.clear()  # a database was dropped and re-created by the writer process
                continue
            except lmdb.ReadersFullError as exc:
                if attempt:
                    raise StorageError(
                        f"LMDB reader table of {self.path!r} is full: close idle iterators and "
                        "snapshots or raise max_readers"
                    ) from exc
                sh.env.reader_check()
                continue
            finally:
                sh.gate.leave()
            with sh.gate.exclusive():  # adopt the size another process grew the map to
                sh.env.set_mapsize(0)
        raise StorageError(f"could not begin a read transaction on {self.path!r}")

    def _read(self, db: bytes, shared: bool, fn: Callable[[Any, Any], T], default: T) -> T:
        """Run ``fn(txn, handle)`` in a short read txn; ``default`` if ``db`` does not exist."""
        self._check()
        sh = self._sh
        assert sh is not None

        def once() -> T:
            h = sh.dbs.get(db)
            if h is None:
                h = self._open_existing(db)
                if h is None:
                    return default
            txn = sh.env.begin()
            try:
                return fn(txn, h)
            finally:
                txn.abort()

        if shared or self.readonly:
            return self._shared(once)
        return once()

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        value: bytes | None = self._read(db, shared, lambda txn, h: txn.get(key, db=h), None)
        return value

    def source(self, db: bytes, *, shared: bool = False) -> ChunkSource:
        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            return self._read(
                db,
                shared,
                lambda txn, h: read_lmdb_chunk(txn.cursor(h), rng, reverse, n),
                no_rows(),
            )

        return FnSource(read)

    def count(self, db: bytes, *, shared: bool = False) -> int:
        n: int = self._read(db, shared, lambda txn, h: txn.stat(h)["entries"], 0)
        return n

    def store_meta(self, name: str) -> dict[str, Any] | None:
        raw = self._read(
            META_DB, True, lambda t, h: t.get(_META_PREFIX + name.encode(), db=h), None
        )
        return None if raw is None else dict(json.loads(raw))

    def store_names(self) -> list[str]:
        def scan(txn: Any, h: Any) -> list[str]:
            cur = txn.cursor(h)
            names: list[str] = []
            if cur.set_range(_META_PREFIX):
                for k in cur.iternext(values=False):
                    if not k.startswith(_META_PREFIX):
                        break
                    names.append(k[len(_META_PREFIX) :].decode())
            return names

        return self._read(META_DB, True, scan, [])

    def committed_offset(self, store: str) -> int | None:
        return self._committed_offsets([store])[store]

    def _committed_offsets(self, stores: list[str]) -> dict[str, int | None]:
        def read(txn: Any, h: Any) -> dict[str, int | None]:
            out: dict[str, int | None] = {}
            for s in stores:
                raw = txn.get(_OFFSET_PREFIX + s.encode(), db=h)
                out[s] = None if raw is None else int(_OFFSET.unpack(raw)[0])
            return out

        return self._read(META_DB, True, read, dict.fromkeys(stores))

    def snapshot(self) -> Snapshot:
        self._check()
        snap = _LmdbSnapshot(self)
        self._track_snapshot(snap)
        return snap

    def reader_check(self) -> int:
        """Clear stale reader slots left by dead processes; returns how many. O(readers)."""
        self._check()
        assert self._sh is not None
        return int(self._sh.env.reader_check())

    def info(self) -> dict[str, Any]:
        """Environment figures: map size, last transaction id, reader slots in use, path."""
        self._check()
        assert self._sh is not None
        info = self._sh.env.info()
        return {
            "path": self.path,
            "map_size": info["map_size"],
            "last_txnid": info["last_txnid"],
            "num_readers": info["num_readers"],
        }

    # -- writes -------------------------------------------------------------------------------

    def _write(self, fn: Callable[[Any], None], exclusive: bool, estimate: int) -> None:
        """Run ``fn(txn)`` in a write txn and commit; on a full map grow and replay it."""
        sh = self._sh
        assert sh is not None
        while True:
            with sh.gate.exclusive() if exclusive else contextlib.nullcontext():
                txn = sh.env.begin(write=True)
                try:
                    fn(txn)
                    txn.commit()
                    sh.dbs.update(self._new_dbs)
                    return
                except lmdb.MapFullError:
                    with contextlib.suppress(lmdb.Error):
                        txn.abort()
                except BaseException as exc:
                    with contextlib.suppress(lmdb.Error):
                        txn.abort()
                    if isinstance(exc, lmdb.Error):
                        raise StorageError(f"LMDB write failed in {self.path!r}: {exc}") from exc
                    raise
                finally:
                    self._new_dbs = {}  # handles opened by an aborted txn are gone
                    if self._dbi_locked:
                        self._dbi_locked = False
                        sh.dbi_lock.release()
            self._grow(estimate)

    def _grow(self, estimate: int) -> None:
        sh = self._sh
        assert sh is not None
        with sh.gate.exclusive():
            size = sh.env.info()["map_size"]
            new = max(2 * size, size + estimate)
            new += -new % 4096
            sh.env.set_mapsize(new)

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        self._check_writable()
        raw = json.dumps(meta, sort_keys=True).encode()

        def fn(txn: Any) -> None:
            txn.put(_META_PREFIX + name.encode(), raw, db=self._meta)
            self._write_handle(txn, self.db_name(name))

        self._write(fn, False, len(raw))

    def _apply(self, offsets: dict[str, int]) -> None:
        assert self.overlay is not None
        dbs = [ov for name in offsets for ov in self.overlay.dbs(name)]
        exclusive = any(ov.dropped for ov in dbs)
        estimate = sum(ov.uncommitted_bytes() for ov in dbs)

        def fn(txn: Any) -> None:
            for ov in dbs:
                if ov.dropped:
                    h = self._write_handle(txn, ov.name, create=False)
                    if h is not None:
                        self._hold_dbi_lock()  # mdb_drop closes the handle at once
                        txn.drop(h, delete=True)
                        assert self._sh is not None
                        self._sh.dbs.pop(ov.name, None)
                        self._new_dbs.pop(ov.name, None)
                chunks = ov.sorted_chunks()
                first = next(chunks, None)
                if first is not None:
                    _apply_chunks(txn.cursor(self._write_handle(txn, ov.name)), first, chunks)
            for name, offset in offsets.items():
                txn.put(_OFFSET_PREFIX + name.encode(), _OFFSET.pack(offset), db=self._meta)

        self._write(fn, exclusive, estimate)

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        self._check_writable()
        ordered = sorted(rows, key=lambda r: r[0])  # stable: the last write of a key wins

        def fn(txn: Any) -> None:
            cur = txn.cursor(self._write_handle(txn, db))
            put = cur.put
            for k, v in ordered:
                if v is None:
                    if cur.set_key(k):
                        cur.delete()
                else:
                    put(k, v)

        self._write(fn, False, sum(len(k) + len(v or b"") + 16 for k, v in rows))

    def record_offset(self, store: str, offset: int) -> None:
        self.commit_stores({store: offset})
        assert self._sh is not None
        self._sh.env.sync(True)


def _apply_chunks(cur: Any, first: list[Row], rest: Iterator[list[Row]]) -> None:
    """Apply sorted overlay chunks through a write cursor (append fast path when possible)."""
    append = not cur.last() or cur.key() < first[0][0]
    chunk: list[Row] | None = first
    while chunk is not None:
        if append:
            items = [e for e in chunk if e[1] is not None]  # deletes above the last key: no-ops
            if items:
                _, added = cur.putmulti(items, True, True, True)
                if added != len(items):
                    raise StorageError(
                        f"LMDB append wrote {added} of {len(items)} rows: overlay not sorted"
                    )
        else:
            puts = []
            for e in chunk:
                if e[1] is None:
                    if cur.set_key(e[0]):
                        cur.delete()
                else:
                    puts.append(e)
            if puts:
                cur.putmulti(puts)
        chunk = next(rest, None)


class _LmdbSnapshot(Snapshot):
    def __init__(self, partition: Partition) -> None:
        super().__init__(partition)
        self._p = partition
        sh = partition._sh
        assert sh is not None
        self._sh = sh
        self._handles: dict[bytes, Any] = {}

        def begin() -> Any:
            while True:
                handles = partition._open_all()
                txn = sh.env.begin()
                try:
                    names = set(txn.cursor().iternext(values=False))
                except BaseException:
                    txn.abort()
                    raise
                if names <= handles.keys():  # else a database appeared in between: again
                    self._handles = handles
                    return txn
                txn.abort()

        self._txn: Any = partition._shared(begin)
        self._epoch = sh.gate.epoch
        self._closed = False

    def _run(self, db: bytes, fn: Callable[[Any, Any], T], default: T) -> T:
        self._check()
        sh = self._sh
        sh.gate.enter()
        try:
            if sh.gate.epoch != self._epoch:
                raise SnapshotInvalidatedError(
                    "snapshot invalidated by a map resize or a database drop in this process: "
                    "take a new snapshot"
                )
            h = self._handles.get(db)
            if h is None:
                return default  # the database did not exist when the snapshot began
            try:
                return fn(self._txn, h)
            except lmdb.Error as exc:
                raise SnapshotInvalidatedError(f"snapshot is no longer usable: {exc}") from exc
        finally:
            sh.gate.leave()

    def get(self, db: bytes, key: bytes) -> bytes | None:
        value: bytes | None = self._run(db, lambda t, h: t.get(key, db=h), None)
        return value

    def source(self, db: bytes) -> ChunkSource:
        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            return self._run(
                db, lambda t, h: read_lmdb_chunk(t.cursor(h), rng, reverse, n), no_rows()
            )

        return FnSource(read)

    def count(self, db: bytes) -> int:
        n: int = self._run(db, lambda t, h: t.stat(h)["entries"], 0)
        return n

    def committed_offset(self, store: str) -> int | None:
        raw = self._run(META_DB, lambda t, h: t.get(_OFFSET_PREFIX + store.encode(), db=h), None)
        return None if raw is None else int(_OFFSET.unpack(raw)[0])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            txn, self._txn = self._txn, None
            if txn is not None and self._p._generation == _fork_generation[0]:
                with contextlib.suppress(lmdb.Error):
                    txn.abort()
