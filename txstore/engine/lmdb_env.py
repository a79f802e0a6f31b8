"""LMDB machinery under :class:`~txstore.engine.partition.Partition`: the environment shared by the
partitions on one path (:class:`SharedEnv`, with its :class:`Gate` for shared reads), the fork
handler, the cursor loops of range reads and commits, and reads in one read transaction
(:class:`TxnReads`). Snapshots are in :mod:`txstore.engine.partition_reads`."""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import weakref
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any, Final, Protocol

import lmdb

from txstore.engine.base import AtomicReads, PartitionBase, fork_generation
from txstore.engine.chunk_reads import read_lmdb_chunk
from txstore.engine.iterators import KeyRange, Row, no_rows
from txstore.engine.lmdb_errors import lmdb_error
from txstore.engine.lmdb_files import check_data_file
from txstore.engine.lmdb_sizing import initial_dbi_table, tune_malloc
from txstore.errors import InvalidArgumentError, InvalidStateStoreError, StorageError

__all__ = [
    "DBI_REOPEN_FRACTION",
    "DEFAULT_MAX_DBS",
    "META_PREFIX",
    "OFFSET",
    "OFFSET_PREFIX",
    "DbHandle",
    "DbiTableFull",
    "EnvSnapshot",
    "ForkAware",
    "Gate",
    "ReadTxn",
    "SharedEnv",
    "TxnReads",
    "acquire_env",
    "apply_chunks",
    "apply_rows",
    "dbi_reopen_threshold",
    "read_range_rows",
    "release_env",
    "track_partition",
]

OFFSET: Final = struct.Struct(">q")
"""A store's committed offset in the metadata database: 8-byte big-endian signed."""
OFFSET_PREFIX: Final = b"offset:"
"""Key prefix of the committed offsets in the metadata database (then the store name)."""
META_PREFIX: Final = b"meta:"
"""Key prefix of the store metadata (JSON) in the metadata database (then the store name)."""


class DbHandle(Protocol):
    """A named database of an open LMDB environment (py-lmdb's ``_Database``): opaque, only
    ever handed back to LMDB, and usable only in transactions begun after it was published."""


class ReadTxn(Protocol):
    """An LMDB read transaction (py-lmdb's ``Transaction``), as the writer's read transaction
    (:attr:`~txstore.engine.partition_reads.PartitionReads.writer_txn`) is read through."""

    def get(self, key: bytes, default: None = None, db: DbHandle | None = None) -> bytes | None:
        """The value of ``key`` in ``db``, or ``default``."""
        ...

    def abort(self) -> None:
        """End the transaction."""
        ...


class EnvSnapshot(Protocol):
    """What an environment knows of the snapshots begun on it (see :meth:`SharedEnv.relieve`):
    whether each is closed, and the environment generation (reopen count) it began on."""

    @property
    def closed(self) -> bool: ...

    @property
    def env_generation(self) -> int: ...


class ForkAware(Protocol):
    """An open partition, as the fork handler sees it (see :func:`track_partition`)."""

    def drop_inherited_txns(self) -> None:
        """In a forked child: forget, without aborting them, the read transactions inherited
        from the parent (the writer's own and the snapshots'): freed in the child, py-lmdb
        skips their abort, which would release the *parent's* reader slots."""
        ...


# -- the table of named-database handles (dbi slots) -------------------------------------------
# Every process sizes its own table (``max_dbs``; it is not stored in the file). A handle takes
# a slot until ``mdb_dbi_close``, which py-lmdb does not expose, or ``mdb_drop(delete)``, which
# only the writer calls (and which frees the slot). Window and session stores create and drop one
# database per time segment, forever: a read-only process that reads each new segment takes a new
# slot each time and used to fail with MDB_DBS_FULL after about ``max_dbs`` generations. So a
# read-only environment counts its slots and, past ``dbi_reopen_threshold(max_dbs)``, closes and
# reopens the environment at a safe point (no read of this process in flight, no snapshot open:
# see :meth:`SharedEnv.relieve`), which releases every handle. The writer's environment never
# needs it: its segment drops free their slots (tests/engine/test_dbi_table.py rolls far past
# max_dbs).

DEFAULT_MAX_DBS: Final = 256
"""Default size of a process's dbi table, per environment. It must hold every database that one
operation needs at once (a snapshot opens all of them: metadata, stores, live segments, format
upgrade tiers). Kept moderate because LMDB sets up per-dbi state for every read transaction it
begins and searches the table linearly in ``mdb_dbi_open``: measured 2.4M begin+get+abort/s with
256 slots, 0.9M/s with 1024 and 0.28M/s with 4096."""

DBI_REOPEN_FRACTION: Final = 0.75
"""A read-only environment is reopened once this fraction of its dbi table holds handles (192 of
256 by default). Cost: one environment close and open, 0.03-0.1 ms measured (a few ms on a cold
or very large map), plus reopening the handles of the databases read afterwards (a few us each):
with the defaults, once per ~190 segment generations. The quarter left free absorbs the handles
opened while a snapshot is open (an open snapshot defers the reopen; see ``relieve``)."""


def dbi_reopen_threshold(max_dbs: int) -> int:
    """Slots in use at which a read-only environment with ``max_dbs`` slots is reopened."""
    return max(1, int(max_dbs * DBI_REOPEN_FRACTION))


class DbiTableFull(Exception):
    """Internal signal: ``mdb_dbi_open`` found the dbi table of environment generation
    ``generation`` full. :meth:`~txstore.engine.partition_reads.PartitionReads.run_shared`
    catches it outside the gate, reopens the environment (:meth:`SharedEnv.reopen_full`) and
    retries; never seen by users."""

    def __init__(self, generation: int) -> None:
        super().__init__(generation)
        self.generation = generation


_registry_lock = threading.Lock()
_registry: dict[str, SharedEnv] = {}
#: Open partitions, so that a forked child can forget their read transactions.
_partitions: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _registry_lock
    fork_generation[0] += 1
    _registry_lock = threading.Lock()
    # First drop the inherited read transactions (the writer's own, the snapshots'): freed in
    # the child, py-lmdb skips their abort. Closing their environment first would abort them
    # and release the *parent's* reader slots in the shared lock file (reproduced: the
    # parent's snapshot then no longer pins its pages).
    for p in list(_partitions):
        p.drop_inherited_txns()
    for sh in _registry.values():
        # py-lmdb skips LMDB's cleanup in a forked child (the parent's readers and locks stay
        # intact) but forgets the environment, so the child may open the path afresh.
        with contextlib.suppress(Exception):
            sh.env.close()
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def track_partition(partition: ForkAware) -> None:
    """Remember an open partition (weakly) for the fork handler."""
    _partitions.add(partition)


def acquire_env(
    data: str,
    path: str,
    readonly: bool,
    sync: bool,
    map_size: int,
    max_dbs: int,
    max_readers: int,
    *,
    lock: bool = True,
) -> SharedEnv:
    """The environment of the directory ``data``, opened once per process and shared by the
    partitions on it; at most one writable partition per path and process. ``lock=False``
    (read-only only) opens it without LMDB's lock table: for a reader that cannot write
    ``lock.mdb`` and keeps writers out (:func:`~txstore.engine.writer_lock.hold_out_writers`).

    Before LMDB maps ``data.mdb`` the first time in this process, the file is checked
    (:func:`~txstore.engine.lmdb_files.check_data_file`): a truncated file or unreadable meta
    pages raise :class:`~txstore.errors.DamagedFileError` instead of a ``SIGBUS`` at the first
    read of a missing page. Any other failure of ``lmdb.open`` is a ``StorageError``."""
    key = os.path.realpath(data)
    with _registry_lock:
        sh = _registry.get(key)
        if sh is not None:
            if not readonly:
                if sh.writer or not sh.writable_env:
                    kind = "for writing" if sh.writer else "read-only"
                    raise InvalidStateStoreError(
                        f"partition {path!r} is already open {kind} in this process "
                        f"(pid {os.getpid()}): close it first, or share that Partition object"
                    )
                sh.writer = True
            sh.refs += 1
            return sh
        check_data_file(os.path.join(data, "data.mdb"), readonly)
        if not readonly:
            tune_malloc()  # before LMDB allocates its lists (see txstore.engine.lmdb_sizing)
        # A writable environment opens with a small dbi table (lmdb_sizing), reopened at once
        # if the file already holds more named databases than it leaves room for.
        table = max_dbs if readonly else initial_dbi_table(0, max_dbs)
        while True:
            try:
                env = lmdb.open(
                    data,
                    map_size=map_size,
                    max_dbs=table,
                    max_readers=max_readers,
                    subdir=True,
                    readonly=readonly,
                    create=not readonly,
                    sync=sync,
                    lock=lock or not readonly,
                    max_spare_txns=0,  # spare read txns break the parent after a fork
                )
                need = table if readonly else initial_dbi_table(env.stat()["entries"], max_dbs)
            except lmdb.Error as exc:
                err = lmdb_error(exc, data)
                if type(err) is StorageError:
                    err = StorageError(f"cannot open LMDB environment {data!r}: {exc}")
                raise err from exc
            if need <= table:
                break
            env.close()
            table = need
        sh = SharedEnv(key, env, not readonly)
        sh.table = table
        sh.open_args = {
            "path": data,
            "map_size": map_size,
            "max_dbs": max_dbs,
            "max_readers": max_readers,
            "sync": sync,
            "lock": lock or not readonly,
        }
        sh.max_dbs = max_dbs
        sh.reopen_at = dbi_reopen_threshold(max_dbs)
        sh.writer = not readonly
        sh.refs = 1
        _registry[key] = sh
        return sh


def release_env(sh: SharedEnv, readonly: bool) -> None:
    """Give back an environment from :func:`acquire_env`; the last user closes it."""
    with _registry_lock:
        if not readonly:
            sh.writer = False
        sh.refs -= 1
        if sh.refs <= 0:
            if _registry.get(sh.key) is sh:
                del _registry[sh.key]
            sh.env.close()


class Gate:
    """Shared entries for reads from non-writer threads; exclusive for map resize and db drops."""

    def __init__(self) -> None:
        # ``enter`` and ``leave`` take the condition's lock directly: a lock is a context
        # manager in C, a Condition one in Python (measured: 0.67 against 0.25 us for the two)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._active = 0
        self._exclusive = False
        self.epoch = 0

    def enter(self) -> None:
        with self._lock:
            while self._exclusive:
                self._cond.wait()
            self._active += 1

    def leave(self) -> None:
        with self._lock:
            self._active -= 1
            if not self._active and self._exclusive:  # only exclusive() waits for this
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self, invalidate: bool = True) -> Iterator[None]:
        """No shared entry while inside; ``invalidate`` moves :attr:`epoch` at the end (open
        snapshots then refuse to read). Without it, the caller moves it if it needs to."""
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
                if invalidate:
                    self.epoch += 1
                self._cond.notify_all()


class SharedEnv:
    """One open LMDB environment of this process, shared by the partitions on its path."""

    def __init__(self, key: str, env: Any, writable: bool) -> None:
        self.key = key
        self.env = env
        self.writable_env = writable
        self.writer = False
        self.refs = 0
        self.gate = Gate()
        self.dbi_lock = threading.Lock()
        # Named database handles. Copy-on-write: never mutated, replaced by a new dict, so a
        # reader holding an older dict (the writer's read transaction) keeps a consistent set.
        self.dbs: dict[bytes, Any] = {}
        # The dbi table (read-only environments; see DEFAULT_MAX_DBS above). ``slots``: names
        # holding a slot in ``env`` (LMDB finds an open name again, so a name takes one slot
        # however often it is opened); ``generation`` counts reopens of ``env``.
        self.open_args: dict[str, Any] = {}
        self.max_dbs = DEFAULT_MAX_DBS
        #: Slots of ``env``'s dbi table: ``max_dbs`` for a read-only environment, a writable
        #: one starts smaller and grows (see :mod:`txstore.engine.lmdb_sizing`).
        self.table = DEFAULT_MAX_DBS
        self.reopen_at = dbi_reopen_threshold(DEFAULT_MAX_DBS)
        self.slots: set[bytes] = set()
        self.generation = 0
        self.failed: StorageError | None = None
        #: Snapshots begun on ``env`` (a reopen invalidates them, so it waits for none open).
        self.snapshots: weakref.WeakSet[EnvSnapshot] = weakref.WeakSet()

    def publish(self, new: Mapping[bytes, Any]) -> None:
        """Add handles (copy-on-write; the caller holds ``dbi_lock``)."""
        if new:
            self.dbs = {**self.dbs, **new}

    def forget(self, db: bytes) -> None:
        """Remove a handle (copy-on-write; the caller holds ``dbi_lock``)."""
        if db in self.dbs:
            self.dbs = {k: h for k, h in self.dbs.items() if k != db}

    # -- the dbi table of a read-only environment ----------------------------------------------

    def slots_used(self) -> int:
        """Slots of the dbi table holding a handle (the writer's: its open handles)."""
        return len(self.dbs) if self.writable_env else len(self.slots)

    def open_readonly(self, db: bytes) -> Any:
        """The handle of the existing database ``db`` in a read-only environment, or None.

        The caller is a shared reader (inside the gate). A full table raises
        :class:`DbiTableFull` for the caller to reopen outside the gate. O(1) once open; else an
        ``mdb_dbi_open`` in py-lmdb's own short read transaction."""
        with self.dbi_lock:
            h = self.dbs.get(db)
            if h is None:
                try:
                    h = self.env.open_db(db, create=False)
                except lmdb.NotFoundError:
                    return None
                except lmdb.DbsFullError:
                    raise DbiTableFull(self.generation) from None
                self.slots.add(db)
                self.publish({db: h})
            return h

    def snapshots_open(self) -> bool:
        """True if a snapshot begun on the current ``env`` is open (one invalidated by an
        earlier reopen, but not closed yet, does not count: it reads nothing more)."""
        gen = self.generation
        return any(not s.closed and s.env_generation == gen for s in list(self.snapshots))

    def needs_relief(self) -> bool:
        """True when a read-only environment's table reached its reopen threshold and no
        snapshot holds the reopen back (the check every shared read makes before it begins:
        one comparison below the threshold; :meth:`relieve` checks again under the gate)."""
        return (
            len(self.slots) >= self.reopen_at
            and not self.writable_env
            and not self.snapshots_open()
        )

    def relieve(self) -> None:
        """Reopen a read-only environment whose table reached the threshold, at a safe point:
        no shared read of this process in flight (the gate is taken exclusively, so none can
        begin either) and no snapshot open (else the reopen waits: the table's last quarter
        leaves room, and a full table forces it, see :meth:`reopen_full`). Iterators hold no
        transaction between chunks and look their handle up again by name, so they carry on
        over the new environment. The writer's read transaction never uses a read-only
        environment."""
        with self.gate.exclusive(invalidate=False):
            if len(self.slots) >= self.reopen_at and not self.snapshots_open():
                self._reopen()

    def reopen_full(self, generation: int) -> None:
        """Reopen a read-only environment whose table is full (unless another thread already
        did), even with snapshots open: they raise :class:`SnapshotInvalidatedError` from then
        on (the gate's epoch moves), as after a map resize."""
        with self.gate.exclusive(invalidate=False):
            if self.generation == generation:
                self._reopen()

    def _reopen(self) -> None:
        """Close and reopen the environment (the caller holds the gate exclusively).

        ``Environment.close`` releases every dbi slot, and aborts and invalidates the
        transactions, cursors and handles begun on it: py-lmdb then raises ``lmdb.Error`` on
        their use (never a crash), which the snapshots turn into
        :class:`SnapshotInvalidatedError`. Cost: see :data:`DBI_REOPEN_FRACTION`."""
        if self.writable_env or self.failed is not None:
            return
        self.gate.epoch += 1  # snapshots begun on the old environment are invalid from now on
        old = self.env
        args = dict(self.open_args)
        path = args.pop("path")
        with contextlib.suppress(lmdb.Error):
            args["map_size"] = max(args["map_size"], old.info()["map_size"])
        old.close()
        self.dbs = {}
        self.slots = set()
        self.generation += 1
        try:
            check_data_file(os.path.join(path, "data.mdb"), True)
            self.env = lmdb.open(
                path,
                subdir=True,
                readonly=True,
                create=False,
                max_spare_txns=0,
                **args,
            )
        except (lmdb.Error, StorageError) as exc:
            self.failed = StorageError(
                f"cannot reopen LMDB environment {path!r} (to release its dbi table): {exc}; "
                "open the partition again"
            )
            raise self.failed from exc


def read_range_rows(
    cur: Any, lo: bytes, hi: bytes, reverse: bool, limit: int
) -> tuple[list[Row], bool]:
    """Rows of ``[lo, hi]`` through ``cur``, ascending, at most ``limit``; and "more follow"."""
    out: list[Row] = []
    append = out.append
    if not reverse:
        if not cur.set_range(lo):
            return out, False
        for row in cur.iternext():
            if row[0] > hi:
                return out, False
            if len(out) == limit:
                return out, True
            append(row)
        return out, False
    if not cur.set_range(hi):
        if not cur.last():
            return out, False
    elif cur.key() != hi and not cur.prev():
        return out, False
    for row in cur.iterprev():
        if row[0] < lo:
            break
        if len(out) == limit:
            out.reverse()
            return out, True
        append(row)
    out.reverse()
    return out, False


def apply_rows(cur: Any, rows: list[Row]) -> None:
    """Apply sorted rows (None value: delete) through a write cursor, one at a time."""
    put = cur.put
    for k, v in rows:
        if v is None:
            if cur.set_key(k):
                cur.delete()
        else:
            put(k, v)


def apply_chunks(
    cur: Any, first: list[Row], rest: Iterator[list[Row]], tombstones: bool = True
) -> None:
    """Apply sorted overlay chunks through a write cursor (append fast path when possible).
    ``tombstones=False`` promises that no row is a delete (the filter is skipped)."""
    append = not cur.last() or cur.key() < first[0][0]
    chunk: list[Row] | None = first
    while chunk is not None:
        if append:
            # Deletes above the last key are no-ops: drop them, if there can be any.
            items = [e for e in chunk if e[1] is not None] if tombstones else chunk
            if items:
                _, added = cur.putmulti(items, True, True, True)
                if added != len(items):
                    raise StorageError(
                        f"LMDB append wrote {added} of {len(items)} rows: overlay not sorted"
                    )
        elif not tombstones:
            cur.putmulti(chunk)
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


def unnamed_db(db: bytes) -> InvalidArgumentError:
    """The error of a read of a database not named to ``read_atomic``."""
    return InvalidArgumentError(
        f"database {db!r} was not named to read_atomic; name every database up front"
    )


class TxnReads(AtomicReads):
    """:class:`AtomicReads` in one LMDB read transaction (see
    :meth:`PartitionReads.read_atomic
    <txstore.engine.partition_reads.PartitionReads.read_atomic>`).

    ``handles``: the handle of each database named by the caller (None: it did not exist).
    In a read-only environment, MDB_BAD_DBI means the writer dropped the database (see
    ``PartitionReads._read``): it reads as empty."""

    __slots__ = ("_handles", "_partition", "_readonly", "_txn")

    def __init__(
        self, txn: Any, handles: Mapping[bytes, Any], readonly: bool, partition: PartitionBase
    ) -> None:
        self._txn = txn
        self._handles = handles
        self._readonly = readonly
        self._partition = partition  # its checksums flag and verify_rows

    def _handle(self, db: bytes) -> Any:
        try:
            return self._handles[db]
        except KeyError:
            raise unnamed_db(db) from None

    def get(self, db: bytes, key: bytes) -> bytes | None:
        try:
            h = self._handles[db]  # self._handle(db), inlined
        except KeyError:
            raise unnamed_db(db) from None
        if h is None:
            return None
        try:
            value: bytes | None = self._txn.get(key, None, h)
        except lmdb.BadDbiError:
            if not self._readonly:
                raise
            return None
        if value is not None and self._partition.checksums:
            return self._partition.verify_rows(db, [(key, value)])[0][1]
        return value

    def state_id(self) -> int:
        txn_id: int = self._txn.id()
        return txn_id

    def cursor(self, db: bytes) -> Any:
        # MDB_BAD_DBI (a database dropped by another process) goes up to ``run_shared``,
        # which forgets the handles and runs the reads again
        try:
            h = self._handles[db]  # self._handle(db), inlined
        except KeyError:
            raise unnamed_db(db) from None
        return None if h is None else self._txn.cursor(h)

    def read_range(
        self, db: bytes, lo: bytes, hi: bytes, reverse: bool, limit: int
    ) -> tuple[list[Row], bool]:
        try:
            h = self._handles[db]  # self._handle(db), inlined
        except KeyError:
            raise unnamed_db(db) from None
        if h is None:
            return [], False
        try:
            rows, more = read_range_rows(self._txn.cursor(h), lo, hi, reverse, limit)
        except lmdb.BadDbiError:
            if not self._readonly:
                raise
            return [], False
        return self._partition.verify_rows(db, rows), more

    def read_chunk(
        self, db: bytes, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        h = self._handle(db)
        if h is None:
            return no_rows()
        part = self._partition
        verify = partial(part.verify_rows, db) if part.checksums else None
        try:
            return read_lmdb_chunk(self._txn.cursor(h), rng, reverse, n, verify)
        except lmdb.BadDbiError:
            if not self._readonly:
                raise
            return no_rows()
