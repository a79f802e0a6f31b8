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
        writer.lock   ``flock``-ed by the one process that has the partition open for writing,
                      for its lifetime (the OS drops the lock when that process dies, even by
                      SIGKILL); inspectors ask whether a writer is alive with
                      :func:`writer_probe`.

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
read-only partitions, snapshots) may come from any thread. Every shared read is one short LMDB
read transaction (except in an explicit :meth:`Partition.snapshot`); the writer's reads share
one read transaction, ended before each write transaction (see ``_writer_txn``). The shared
environment, its gate and snapshots are in :mod:`txstore.engine.lmdb_env`.

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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import lmdb

from txstore import faults
from txstore.engine.base import (
    META_DB,
    AtomicReads,
    PartitionBase,
    Snapshot,
    fork_generation,
)
from txstore.engine.iterators import ChunkSource, FnSource, KeyRange, Row, no_rows, read_lmdb_chunk
from txstore.engine.lmdb_env import (
    DEFAULT_MAX_DBS,
    DbiTableFull,
    LmdbSnapshot,
    SharedEnv,
    acquire_env,
    apply_chunks,
    apply_rows,
    read_range_rows,
    release_env,
    track_partition,
)
from txstore.engine.lmdb_env import OFFSET as _OFFSET
from txstore.engine.lmdb_env import OFFSET_PREFIX as _OFFSET_PREFIX
from txstore.engine.overlay import Overlay, SpillEnv
from txstore.engine.spill import remove_dir
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    StorageError,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["INSPECTOR_WAIT_S", "WRITER_LOCK", "Partition", "writer_probe"]

T = TypeVar("T")

_META_PREFIX: Final = b"meta:"

WRITER_LOCK: Final = "writer.lock"
"""The file of a partition directory its writer ``flock``s exclusively for its lifetime."""
INSPECTOR_WAIT_S: Final = 5.0
"""How long an opening writer waits while ``writer.lock`` is held *shared*, by inspectors
(:func:`writer_probe`, each for a moment). An exclusive holder (another writer) fails it at
once."""


@contextlib.contextmanager
def writer_probe(path: str | os.PathLike[str]) -> Iterator[bool | None]:
    """Whether a process has the partition directory ``path`` open for writing; for inspectors
    that may run next to a live writer (``txstore check``).

    Yields True if one has: its exclusive ``flock`` of ``writer.lock`` is held, and the OS
    releases that lock when the process dies, even by SIGKILL. Yields False if none has; then
    none can open it until the ``with`` block ends (the probe holds the lock shared and an
    opening writer waits for it, up to :data:`INSPECTOR_WAIT_S`), so whatever the block finds
    in the directory was left by writers that are gone. Keep the block short. Yields None when
    this cannot be told (no ``flock``: Windows, some network filesystems). Never creates the
    lock file: without one, no writer ever opened the partition (False).
    """
    if fcntl is None:  # pragma: no cover - Windows
        yield None
        return
    try:
        fd = os.open(os.path.join(os.fspath(path), WRITER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield False
        return
    except OSError:
        yield None
        return
    try:
        alive: bool | None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            alive = False
        except BlockingIOError:
            alive = True
        except OSError:
            alive = None
        yield alive
    finally:
        os.close(fd)  # releases the shared lock


def _lock_exclusive(fd: int, path: str) -> None:
    """Take the writer lock on ``fd``, waiting out inspectors that hold it shared for a moment
    (:func:`writer_probe`); raise ``InvalidStateStoreError`` if another writer holds it."""
    deadline = time.monotonic() + INSPECTOR_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            held = exc
        # Held exclusively (another writer, for its lifetime) or shared (inspectors): a shared
        # request succeeds only in the second case.
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            raise InvalidStateStoreError(
                f"partition {path!r} is open for writing by another process; open it with "
                "readonly=True, or stop that process"
            ) from held
        fcntl.flock(fd, fcntl.LOCK_UN)
        if time.monotonic() >= deadline:
            raise InvalidStateStoreError(
                f"partition {path!r}: inspecting processes (txstore check) kept its "
                f"{WRITER_LOCK} locked for {INSPECTOR_WAIT_S:g} s; stop them and open it again"
            ) from held
        time.sleep(0.002)


class Partition(PartitionBase):
    """A partition directory holding one LMDB environment (see the module docstring).

    Opening costs an ``lmdb.open``, a ``reader_check`` and, when writable, deleting a leftover
    spill directory. ``map_size`` is the initial map (it doubles when full);
    ``overlay_budget_bytes`` bounds the overlays' memory before they spill; ``max_dbs`` bounds
    the named databases (stores, segments), fixed by the first opener.

    Why ``max_dbs`` defaults to 256 (:data:`~txstore.engine.lmdb_env.DEFAULT_MAX_DBS`) and spare
    read
    transactions are off: LMDB allocates per-dbi arrays for every new read transaction,
    measured at 2.4M begin+get+abort/s with 256 dbs, 0.9M/s with 1024 and 0.28M/s with 4096.
    py-lmdb's spare transactions would avoid that, but a forked child that exits normally aborts
    the inherited spares and frees the parent's reader slots (the parent then fails with
    ``MDB_BAD_RSLOT``; reproduced), so they stay off. ``max_dbs`` is per process and must hold
    the databases one operation needs at once (a snapshot: all of them); it need not hold every
    segment a long-lived reader ever reads: a read-only partition reopens its environment when
    its table of handles fills (see :mod:`txstore.engine.lmdb_env`), the writer frees a slot with
    each
    segment drop.
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
        max_dbs: int = DEFAULT_MAX_DBS,
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
        self._sh: SharedEnv | None = None
        self._new_dbs: dict[bytes, Any] = {}
        self._dbi_locked = False
        self.write_generation = None if self.readonly else 0
        self._rtxn: Any = None  # the writer's read transaction (see _writer_txn)
        self._rdbs: dict[bytes, Any] = {}  # the handles usable in it
        self.writer_cursors: dict[bytes, Any] = {}  # cursors in it (see _writer_cursor)
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
            self._sh = acquire_env(
                data, self.path, self.readonly, self.sync, map_size, max_dbs, max_readers
            )
            track_partition(self)
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

    # -- environment ---------------------------------------------------------------------------

    def _lock_writer(self) -> None:
        if fcntl is None:  # pragma: no cover - Windows: LMDB's own writer lock only
            return
        assert self.path is not None
        fd = os.open(os.path.join(self.path, WRITER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock_exclusive(fd, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _release(self) -> None:
        if self._generation != fork_generation[0]:
            return  # never touch an inherited environment
        self._end_reader()
        sh, self._sh = self._sh, None
        if sh is not None:
            release_env(sh, self.readonly)
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
            return sh.open_readonly(db)  # may raise DbiTableFull (see _shared)
        txn = sh.env.begin(write=True)
        try:
            with sh.dbi_lock:
                h = sh.dbs.get(db)
                if h is None:
                    try:
                        h = sh.env.open_db(db, txn=txn, create=False)
                    except lmdb.NotFoundError:
                        return None
                    except lmdb.DbsFullError as exc:
                        raise self._dbs_full(exc) from exc
                    txn.commit()
                    sh.publish({db: h})
            return h
        finally:
            with contextlib.suppress(lmdb.Error):
                txn.abort()  # no-op once committed

    def _dbs_full(self, exc: BaseException) -> StorageError:
        assert self._sh is not None
        return StorageError(
            f"partition {self.path!r} needs more named databases at once than max_dbs="
            f"{self._sh.max_dbs} allows ({exc}): open it with a larger max_dbs"
        )

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
        """Run ``fn`` as a shared reader: gate entry, MapResized and ReadersFull handling, and
        the dbi table of a read-only environment (reopened at the threshold before ``fn``
        begins, or when ``fn`` finds the table full; see :mod:`txstore.engine.lmdb_env`)."""
        sh = self._sh
        assert sh is not None
        full: DbiTableFull | None = None
        for attempt in range(8):
            if full is not None:
                sh.reopen_full(full.generation)
            elif not sh.writable_env and sh.needs_relief():  # the check, for read-only ones
                sh.relieve()  # a safe point: this thread reads nothing yet
            sh.gate.enter()
            try:
                if sh.failed is not None:
                    raise sh.failed
                return fn()
            except DbiTableFull as exc:
                if full is not None:  # full again right after a reopen: too many at once
                    raise self._dbs_full(exc) from None
                full = exc
                continue
            except lmdb.MapResizedError:
                pass
            except lmdb.BadDbiError:
                sh.dbs = {}  # a database was dropped and re-created by the writer process
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

    # The writer's read transaction. Reads of the writer thread (``shared=False`` on a
    # writable partition) all use one read transaction, begun at the first read and ended
    # before every write transaction of this partition (so it always sees the last commit and
    # never pins an older snapshot: only this process writes) and at close. A get through it
    # costs the LMDB lookup alone instead of begin + lookup + abort (measured on 200k random
    # keys: Partition.get 0.93 against 1.75 us of CPU; raw py-lmdb in one transaction 0.85).
    # It is never used by two threads at once: the writer thread (one at a time) is its only
    # user, and shared reads keep their own short transactions. A handle published after it
    # began is not usable in it, hence ``_rdbs``: the handle dict (copy-on-write) as it was
    # when it began; a database missing there begins anew. ``_rtxn`` and ``_rdbs`` are also
    # read, never written, by the typed key-value store's get (txstore.stores.kv), as Partition.get
    # reads them.

    def _writer_txn(self, db: bytes) -> tuple[Any, Any]:
        """The writer's read transaction and the handle of ``db`` in it (None: no such db)."""
        self._check()
        sh = self._sh
        assert sh is not None
        h = sh.dbs.get(db)
        if h is None:
            h = self._open_existing(db)
            if h is None:
                return self._rtxn, None
        txn = self._rtxn
        if txn is None or self._rdbs.get(db) is not h:
            self._end_reader()
            self._rdbs = sh.dbs  # every handle in it was published before the begin below
            txn = self._rtxn = sh.env.begin()
        return txn, h

    def _writer_cursor(self, db: bytes) -> Any:
        """A cursor on ``db`` in the writer's read transaction (None: no such database),
        kept in :attr:`writer_cursors` until that transaction ends: a range read then costs a
        seek, not a cursor open and close (measured: 0.34 us less per 4-row read)."""
        txn, h = self._writer_txn(db)
        if h is None:
            return None
        cur = self.writer_cursors.get(db)
        if cur is None:
            cur = self.writer_cursors[db] = txn.cursor(h)
        return cur

    def _end_reader(self) -> None:
        """End the writer's read transaction (before a write, a resize, or at close)."""
        txn, self._rtxn = self._rtxn, None
        self._rdbs = {}
        self.writer_cursors = {}
        if txn is not None:
            with contextlib.suppress(lmdb.Error):
                txn.abort()

    def _read(self, db: bytes, shared: bool, fn: Callable[[Any, Any], T], default: T) -> T:
        """Run ``fn(txn, handle)`` in a read txn (the writer's own, or a short one for shared
        reads); ``default`` if ``db`` does not exist."""
        if not (shared or self.readonly):
            txn = self._rtxn
            h = self._rdbs.get(db)
            if txn is None or h is None:
                txn, h = self._writer_txn(db)
                if h is None:
                    return default
            return fn(txn, h)
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
            except lmdb.BadDbiError:
                if sh.writable_env:
                    raise
                # A read-only environment keeps the handle of a database the writer dropped
                # (no mdb_dbi_close); LMDB reports MDB_BAD_DBI when the name is absent from
                # this transaction's main database (a handle is only ever "changed" by a close
                # in this process, which a read-only environment never does but by reopening).
                # So the database does not exist in this snapshot: read it as missing.
                return default
            finally:
                txn.abort()

        return self._shared(once)

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        if not shared:
            txn = self._rtxn  # the writer's read transaction: the common case, inlined
            if txn is not None:
                h = self._rdbs.get(db)
                if h is not None:
                    value: bytes | None = txn.get(key, None, h)
                    return value
        value = self._read(db, shared, lambda txn, h: txn.get(key, None, h), None)
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

    def read_range(
        self,
        db: bytes,
        lo: bytes,
        hi: bytes,
        reverse: bool = False,
        limit: int = 64,
        shared: bool = False,
    ) -> tuple[list[Row], bool]:
        if not shared:
            # The writer's read transaction, through its cursor on ``db`` (kept with it; a
            # read-only partition has none and reads as shared).
            cur = self.writer_cursors.get(db)
            if cur is None:
                if self.readonly:
                    return self.read_range(db, lo, hi, reverse, limit, True)
                cur = self._writer_cursor(db)
                if cur is None:
                    return [], False
            if reverse:
                return read_range_rows(cur, lo, hi, True, limit)
            out: list[Row] = []  # read_range_rows forward, inlined (one call less)
            if cur.set_range(lo):
                append = out.append
                for row in cur:  # iter(cursor): iternext() without its argument parsing
                    if row[0] > hi:
                        break
                    if len(out) == limit:
                        return out, True
                    append(row)
            return out, False
        empty: tuple[list[Row], bool] = ([], False)
        return self._read(
            db, shared, lambda t, h: read_range_rows(t.cursor(h), lo, hi, reverse, limit), empty
        )

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

    def read_atomic(self, dbs: Sequence[bytes], fn: Callable[[AtomicReads], T]) -> T:
        self._check()
        sh = self._sh
        assert sh is not None

        def once() -> T:
            # Every handle before the begin (a handle published later is not usable in it).
            handles = {}
            for db in dbs:
                h = sh.dbs.get(db)
                handles[db] = h if h is not None else self._open_existing(db)
            txn = sh.env.begin()
            try:
                return fn(_LmdbReads(txn, handles, not sh.writable_env))
            finally:
                txn.abort()

        return self._shared(once)

    def snapshot(self) -> Snapshot:
        self._check()
        snap = LmdbSnapshot(self)
        self._track_snapshot(snap)
        return snap

    def reader_check(self) -> int:
        """Clear stale reader slots left by dead processes; returns how many. O(readers)."""
        self._check()
        return self._gated(lambda env: int(env.reader_check()))

    def _gated(self, fn: Callable[[Any], T]) -> T:
        """``fn(env)`` as a shared user of the environment (never during a reopen)."""
        sh = self._sh
        assert sh is not None
        sh.gate.enter()
        try:
            if sh.failed is not None:
                raise sh.failed
            return fn(sh.env)
        finally:
            sh.gate.leave()

    def info(self) -> dict[str, Any]:
        """Environment figures: map size, last transaction id, reader slots in use, path; and
        this process's table of named-database handles: its size (``max_dbs``), the slots in
        use (``dbi_slots``) and how often a read-only environment was reopened to release them
        (``dbi_reopens``)."""
        self._check()
        sh = self._sh
        assert sh is not None
        info = self._gated(lambda env: env.info())
        return {
            "path": self.path,
            "map_size": info["map_size"],
            "last_txnid": info["last_txnid"],
            "num_readers": info["num_readers"],
            "max_dbs": sh.max_dbs,
            "dbi_slots": sh.slots_used(),
            "dbi_reopens": sh.generation,
        }

    # -- writes -------------------------------------------------------------------------------

    def _write(self, fn: Callable[[Any], None], exclusive: bool, estimate: int) -> None:
        """Run ``fn(txn)`` in a write txn and commit; on a full map grow and replay it."""
        sh = self._sh
        assert sh is not None
        self._end_reader()
        while True:
            with sh.gate.exclusive() if exclusive else contextlib.nullcontext():
                txn = sh.env.begin(write=True)
                try:
                    fn(txn)
                    txn.commit()
                    sh.publish(self._new_dbs)
                    if self.write_generation is not None:
                        self.write_generation += 1
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
                    self._drop_in(txn, ov.name)
                chunks = ov.sorted_chunks()
                first = next(chunks, None)
                if first is not None:
                    cur = txn.cursor(self._write_handle(txn, ov.name))
                    apply_chunks(cur, first, chunks, ov.may_hold_tombstones)
            faults.point("partition.mid_commit")  # data written, offsets not, txn not committed
            for name, offset in offsets.items():
                txn.put(_OFFSET_PREFIX + name.encode(), _OFFSET.pack(offset), db=self._meta)

        self._write(fn, exclusive, estimate)

    def _drop_in(self, txn: Any, db: bytes) -> None:
        """Delete the database ``db`` (if it exists) inside the write transaction ``txn``."""
        h = self._write_handle(txn, db, create=False)
        if h is not None:
            self._hold_dbi_lock()  # mdb_drop closes the handle at once
            txn.drop(h, delete=True)
            assert self._sh is not None
            self._sh.forget(db)
            self._new_dbs.pop(db, None)

    def write_through_dbs(
        self, writes: Mapping[bytes, list[Row]], drops: Sequence[bytes] = ()
    ) -> None:
        self._check_writable()
        ordered = {db: sorted(rows, key=lambda r: r[0]) for db, rows in writes.items()}

        def fn(txn: Any) -> None:
            for db in drops:
                self._drop_in(txn, db)
            for db, rows in ordered.items():
                apply_rows(txn.cursor(self._write_handle(txn, db)), rows)

        estimate = sum(len(k) + len(v or b"") + 16 for rows in writes.values() for k, v in rows)
        self._write(fn, bool(drops), estimate)

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        self._check_writable()
        ordered = sorted(rows, key=lambda r: r[0])  # stable: the last write of a key wins

        def fn(txn: Any) -> None:
            apply_rows(txn.cursor(self._write_handle(txn, db)), ordered)

        self._write(fn, False, sum(len(k) + len(v or b"") + 16 for k, v in rows))

    def record_offset(self, store: str, offset: int) -> None:
        self.commit_stores({store: offset})
        assert self._sh is not None
        self._sh.env.sync(True)


def _unnamed(db: bytes) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"database {db!r} was not named to read_atomic; name every database up front"
    )


class _LmdbReads(AtomicReads):
    """:class:`AtomicReads` in one LMDB read transaction (see :meth:`Partition.read_atomic`).

    ``handles``: the handle of each database named by the caller (None: it did not exist).
    In a read-only environment, MDB_BAD_DBI means the writer dropped the database (see
    ``Partition._read``): it reads as empty."""

    __slots__ = ("_handles", "_readonly", "_txn")

    def __init__(self, txn: Any, handles: Mapping[bytes, Any], readonly: bool) -> None:
        self._txn = txn
        self._handles = handles
        self._readonly = readonly

    def _handle(self, db: bytes) -> Any:
        try:
            return self._handles[db]
        except KeyError:
            raise _unnamed(db) from None

    def get(self, db: bytes, key: bytes) -> bytes | None:
        try:
            h = self._handles[db]  # self._handle(db), inlined
        except KeyError:
            raise _unnamed(db) from None
        if h is None:
            return None
        try:
            value: bytes | None = self._txn.get(key, None, h)
        except lmdb.BadDbiError:
            if not self._readonly:
                raise
            return None
        return value

    def read_range(
        self, db: bytes, lo: bytes, hi: bytes, reverse: bool, limit: int
    ) -> tuple[list[Row], bool]:
        try:
            h = self._handles[db]  # self._handle(db), inlined
        except KeyError:
            raise _unnamed(db) from None
        if h is None:
            return [], False
        try:
            return read_range_rows(self._txn.cursor(h), lo, hi, reverse, limit)
        except lmdb.BadDbiError:
            if not self._readonly:
                raise
            return [], False

    def read_chunk(
        self, db: bytes, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        h = self._handle(db)
        if h is None:
            return no_rows()
        try:
            return read_lmdb_chunk(self._txn.cursor(h), rng, reverse, n)
        except lmdb.BadDbiError:
            if not self._readonly:
                raise
            return no_rows()
