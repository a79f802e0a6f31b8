"""The read half of a :class:`~txstore.engine.partition.Partition`: named database handles, the
shared reads (any thread, one short LMDB read transaction each, behind the environment's gate),
the writer's own read transaction, atomic reads and snapshots (:class:`LmdbSnapshot`).

The thread model, the handle rules and map growth are described in
:mod:`txstore.engine.partition`; the shared environment, its gate and the cursor loops are in
:mod:`txstore.engine.lmdb_env`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import lmdb

from txstore.engine.base import META_DB, AtomicReads, PartitionBase, Snapshot
from txstore.engine.checksums import ChecksumError, unseal, unseal_rows
from txstore.engine.chunk_reads import read_lmdb_chunk
from txstore.engine.iterators import ChunkSource, FnSource, KeyRange, Row, no_rows
from txstore.engine.lmdb_env import (
    META_PREFIX,
    OFFSET,
    OFFSET_PREFIX,
    DbHandle,
    DbiTableFull,
    ReadTxn,
    SharedEnv,
    TxnReads,
    read_range_rows,
)
from txstore.engine.lmdb_errors import DAMAGE, lmdb_error
from txstore.errors import (
    InvalidArgumentError,
    SnapshotInvalidatedError,
    StorageError,
)

__all__ = ["LmdbSnapshot", "PartitionReads"]

T = TypeVar("T")


class PartitionReads(PartitionBase):
    """The reads of an LMDB partition; :class:`~txstore.engine.partition.Partition` adds the
    writes and the lifecycle (never used on its own). Its environment (``_sh``) is set once
    the partition opens it.

    Public state of the writer's read transaction (see below), read by the stores' fast paths
    and replaced, never changed in place, by the partition: :attr:`writer_txn`,
    :attr:`writer_handles` and :attr:`writer_cursors`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sh: SharedEnv | None = None
        self.writer_txn: ReadTxn | None = None
        """The writer's read transaction (see below), None when none is open."""
        self.writer_handles: dict[bytes, DbHandle] = {}
        """The database handles usable in :attr:`writer_txn`, by name."""
        self.writer_cursors: dict[bytes, Any] = {}  # cursors in it (see _writer_cursor)

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
            return sh.open_readonly(db)  # may raise DbiTableFull (see run_shared)
        try:
            txn = sh.env.begin(write=True)
        except lmdb.Error as exc:
            raise lmdb_error(exc, str(self.path)) from exc
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
                    except lmdb.Error as exc:
                        raise lmdb_error(exc, str(self.path)) from exc
                    try:
                        txn.commit()
                    except lmdb.Error as exc:
                        raise lmdb_error(exc, str(self.path)) from exc
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

    def open_all_handles(self) -> dict[bytes, DbHandle]:
        """Handles of every existing database (snapshots need them before they begin)."""
        for name in self._db_names():
            self._open_existing(name)
        assert self._sh is not None
        return dict(self._sh.dbs)

    # -- reads --------------------------------------------------------------------------------

    def run_shared(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` as a shared reader (any thread; ``fn`` may run more than once): gate
        entry, MapResized and ReadersFull handling, and the dbi table of a read-only
        environment (reopened at the threshold before ``fn`` begins, or when ``fn`` finds the
        table full; see :mod:`txstore.engine.lmdb_env`)."""
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
                self._reader_check_now(exc)
                continue
            except lmdb.Error as exc:
                raise lmdb_error(exc, str(self.path)) from exc
            finally:
                sh.gate.leave()
            with sh.gate.exclusive():  # adopt the size another process grew the map to
                try:
                    sh.env.set_mapsize(0)
                except lmdb.Error as exc:
                    raise lmdb_error(exc, str(self.path)) from exc
        raise StorageError(f"could not begin a read transaction on {self.path!r}")

    def _reader_check_now(self, full: lmdb.Error) -> None:
        """Clear stale reader slots after LMDB found its reader table full (``full``)."""
        assert self._sh is not None
        try:
            self._sh.env.reader_check()
        except lmdb.Error as exc:
            raise lmdb_error(exc, str(self.path)) from full

    # The writer's read transaction. Reads of the writer thread (``shared=False`` on a
    # writable partition) all use one read transaction, begun at the first read and ended
    # before every write transaction of this partition (so it always sees the last commit and
    # never pins an older snapshot: only this process writes) and at close. A get through it
    # costs the LMDB lookup alone instead of begin + lookup + abort (measured on 200k random
    # keys: Partition.get 0.93 against 1.75 us of CPU; raw py-lmdb in one transaction 0.85).
    # It is never used by two threads at once: the writer thread (one at a time) is its only
    # user, and shared reads keep their own short transactions. A handle published after it
    # began is not usable in it, hence ``writer_handles``: the handle dict (copy-on-write) as it
    # was when it began; a database missing there begins anew. ``writer_txn`` and
    # ``writer_handles`` are also read, never written, by the typed key-value store's get
    # (txstore.stores.kv), as Partition.get reads them.

    def _writer_txn_for(self, db: bytes) -> tuple[Any, Any]:
        """The writer's read transaction and the handle of ``db`` in it (None: no such db)."""
        self.check_usable()
        sh = self._sh
        assert sh is not None
        h = sh.dbs.get(db)
        if h is None:
            h = self._open_existing(db)
            if h is None:
                return self.writer_txn, None
        txn = self.writer_txn
        if txn is None or self.writer_handles.get(db) is not h:
            self._end_reader()
            handles = sh.dbs  # every handle in it was published before the begin below
            try:
                txn = sh.env.begin()
            except lmdb.ReadersFullError as exc:
                self._reader_check_now(exc)
                try:
                    txn = sh.env.begin()
                except lmdb.Error as again:
                    raise lmdb_error(again, str(self.path)) from again
            except lmdb.Error as exc:
                raise lmdb_error(exc, str(self.path)) from exc
            self.writer_handles = handles
            self.writer_txn = txn
        return txn, h

    def _writer_cursor(self, db: bytes) -> Any:
        """A cursor on ``db`` in the writer's read transaction (None: no such database),
        kept in :attr:`writer_cursors` until that transaction ends: a range read then costs a
        seek, not a cursor open and close (measured: 0.34 us less per 4-row read)."""
        txn, h = self._writer_txn_for(db)
        if h is None:
            return None
        cur = self.writer_cursors.get(db)
        if cur is None:
            cur = self.writer_cursors[db] = txn.cursor(h)
        return cur

    def _end_reader(self) -> None:
        """End the writer's read transaction (before a write, a resize, or at close)."""
        txn, self.writer_txn = self.writer_txn, None
        self.writer_handles = {}
        self.writer_cursors = {}
        if txn is not None:
            with contextlib.suppress(lmdb.Error):
                txn.abort()

    def _read(self, db: bytes, shared: bool, fn: Callable[[Any, Any], T], default: T) -> T:
        """Run ``fn(txn, handle)`` in a read txn (the writer's own, or a short one for shared
        reads); ``default`` if ``db`` does not exist."""
        if not (shared or self.readonly):
            txn = self.writer_txn
            h = self.writer_handles.get(db)
            if txn is None or h is None:
                txn, h = self._writer_txn_for(db)
                if h is None:
                    return default
            try:
                return fn(txn, h)
            except lmdb.Error as exc:
                raise lmdb_error(exc, str(self.path)) from exc
        self.check_usable()
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

        return self.run_shared(once)

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        if not shared:
            txn = self.writer_txn  # the writer's read transaction: the common case, inlined
            if txn is not None:
                h = self.writer_handles.get(db)
                if h is not None:
                    try:  # free until raised (zero-cost exceptions)
                        if self.checksums:  # passed straight on: stripped in place (unseal)
                            return unseal(key, txn.get(key, None, h))
                        value: bytes | None = txn.get(key, None, h)
                    except lmdb.Error as exc:
                        raise lmdb_error(exc, str(self.path)) from exc
                    except ChecksumError as exc:
                        raise self.damaged(db, exc) from None
                    return value
        value = self._read(db, shared, lambda txn, h: txn.get(key, None, h), None)
        if self.checksums:
            try:
                value = unseal(key, value)
            except ChecksumError as exc:
                raise self.damaged(db, exc) from None
        return value

    def verify_rows(self, db: bytes, rows: list[Row]) -> list[Row]:
        """``rows`` read from ``db`` with their checksums checked and stripped, in place (a
        checksummed partition; others return them as they are). Raises
        :class:`~txstore.errors.DamagedFileError` (see :meth:`damaged`) at the first mismatch.
        O(rows); the one check every batch read of committed rows goes through."""
        if self.checksums and rows:
            try:
                unseal_rows(rows)
            except ChecksumError as exc:
                raise self.damaged(db, exc) from None
        return rows

    def source(self, db: bytes, *, shared: bool = False) -> ChunkSource:
        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            # trailers checked and stripped while reading (read_lmdb_chunk); verify_rows
            # raises the typed error of a mismatch
            verify = partial(self.verify_rows, db) if self.checksums else None
            return self._read(
                db,
                shared,
                lambda txn, h: read_lmdb_chunk(txn.cursor(h), rng, reverse, n, verify),
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
            try:  # free until raised (zero-cost exceptions)
                if reverse:
                    out, more = read_range_rows(cur, lo, hi, True, limit)
                    return self.verify_rows(db, out), more
                out = []  # read_range_rows forward, inlined (one call less)
                more = False
                if cur.set_range(lo):
                    append = out.append
                    for row in cur:  # iter(cursor): iternext() without its argument parsing
                        if row[0] > hi:
                            break
                        if len(out) == limit:
                            more = True
                            break
                        append(row)
                return self.verify_rows(db, out), more
            except lmdb.Error as exc:
                raise lmdb_error(exc, str(self.path)) from exc
        empty: tuple[list[Row], bool] = ([], False)
        out, more = self._read(
            db, shared, lambda t, h: read_range_rows(t.cursor(h), lo, hi, reverse, limit), empty
        )
        return self.verify_rows(db, out), more

    def store_meta(self, name: str) -> dict[str, Any] | None:
        raw = self._read(META_DB, True, lambda t, h: t.get(META_PREFIX + name.encode(), db=h), None)
        return None if raw is None else dict(json.loads(raw))

    def store_names(self) -> list[str]:
        def scan(txn: Any, h: Any) -> list[str]:
            cur = txn.cursor(h)
            names: list[str] = []
            if cur.set_range(META_PREFIX):
                for k in cur.iternext(values=False):
                    if not k.startswith(META_PREFIX):
                        break
                    names.append(k[len(META_PREFIX) :].decode())
            return names

        return self._read(META_DB, True, scan, [])

    def committed_offset(self, store: str) -> int | None:
        return self._committed_offsets([store])[store]

    def _committed_offsets(self, stores: list[str]) -> dict[str, int | None]:
        def read(txn: Any, h: Any) -> dict[str, int | None]:
            out: dict[str, int | None] = {}
            for s in stores:
                raw = txn.get(OFFSET_PREFIX + s.encode(), db=h)
                out[s] = None if raw is None else int(OFFSET.unpack(raw)[0])
            return out

        return self._read(META_DB, True, read, dict.fromkeys(stores))

    def read_atomic(self, dbs: Sequence[bytes], fn: Callable[[AtomicReads], T]) -> T:
        self.check_usable()
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
                return fn(TxnReads(txn, handles, not sh.writable_env, self))
            finally:
                txn.abort()

        return self.run_shared(once)

    def snapshot(self) -> LmdbSnapshot:
        self.check_usable()
        assert self._sh is not None
        snap = LmdbSnapshot(self, self._sh)
        self._track_snapshot(snap)
        return snap

    def drop_inherited_txns(self) -> None:
        """In a forked child (the fork handler of :mod:`txstore.engine.lmdb_env`): forget,
        without aborting them, the writer's read transaction with its cursors and handles, and
        the transactions of this partition's snapshots, all inherited from the parent."""
        self.writer_cursors = {}  # cursors of the inherited read transaction, before it
        self.writer_txn = None
        self.writer_handles = {}
        try:  # no lock: another parent thread may have held it at the fork
            snapshots = list(self._snapshots)
        except Exception:  # pragma: no cover - a set modified mid-fork
            snapshots = []
        for snap in snapshots:
            if isinstance(snap, LmdbSnapshot):
                snap.drop_inherited_txn()

    def reader_check(self) -> int:
        """Clear stale reader slots left by dead processes; returns how many. O(readers)."""
        self.check_usable()
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
        except lmdb.Error as exc:
            raise lmdb_error(exc, str(self.path)) from exc
        finally:
            sh.gate.leave()

    def info(self) -> dict[str, Any]:
        """Environment figures: map size, last transaction id, reader slots in use, path; and
        this process's table of named-database handles: its limit (``max_dbs``), its size now
        (``dbi_table``: a writable environment starts smaller and grows), the slots in
        use (``dbi_slots``) and how often a read-only environment was reopened to release them
        (``dbi_reopens``)."""
        self.check_usable()
        sh = self._sh
        assert sh is not None
        info = self._gated(lambda env: env.info())
        return {
            "path": self.path,
            "map_size": info["map_size"],
            "last_txnid": info["last_txnid"],
            "num_readers": info["num_readers"],
            "max_dbs": sh.max_dbs,
            "dbi_table": sh.table,
            "dbi_slots": sh.slots_used(),
            "dbi_reopens": sh.generation,
        }


class LmdbSnapshot(Snapshot):
    """A snapshot of a partition: one LMDB read transaction, begun with every handle open,
    until :meth:`close` (see :meth:`PartitionBase.snapshot
    <txstore.engine.base.PartitionBase.snapshot>`)."""

    partition: PartitionReads

    def __init__(self, partition: PartitionReads, sh: SharedEnv) -> None:
        super().__init__(partition)
        self._sh = sh
        self._handles: dict[bytes, DbHandle] = {}

        self._epoch = -1
        self.env_generation = -1
        """The generation (reopen count) of the environment the transaction began on."""

        def begin() -> Any:
            while True:
                handles = partition.open_all_handles()
                txn = sh.env.begin()
                try:
                    names = set(txn.cursor().iternext(values=False))
                except BaseException:
                    txn.abort()
                    raise
                if names <= handles.keys():  # else a database appeared in between: again
                    self._handles = handles
                    # Inside the gate: no reopen or resize can come between the begin and
                    # these two, so the epoch is the one of the environment ``txn`` is on.
                    self._epoch = sh.gate.epoch
                    self.env_generation = sh.generation
                    self._closed = False
                    sh.snapshots.add(self)
                    return txn
                txn.abort()

        self._txn: Any = partition.run_shared(begin)

    def run(self, db: bytes, fn: Callable[[Any, Any], T], default: T) -> T:
        """``fn(txn, handle)`` on the snapshot's transaction and the handle of ``db`` in it,
        inside the environment's gate (no map resize or reopen of this process can interleave);
        ``default`` if ``db`` did not exist when the snapshot began. LMDB errors raise
        :class:`~txstore.errors.SnapshotInvalidatedError`, but a damaged page
        :class:`~txstore.errors.DamagedFileError` naming ``data.mdb``."""
        self._check()
        sh = self._sh
        sh.gate.enter()
        try:
            if sh.gate.epoch != self._epoch:
                raise SnapshotInvalidatedError(
                    "snapshot invalidated by a map resize, a database drop or a reopen of the "
                    "environment (to release its table of database handles) in this process: "
                    "take a new snapshot"
                )
            h = self._handles.get(db)
            if h is None:
                return default  # the database did not exist when the snapshot began
            try:
                return fn(self._txn, h)
            except lmdb.BadValsizeError as exc:  # a bad argument, not a dead snapshot
                raise InvalidArgumentError(
                    f"LMDB refused a key of that size (1 to 511 bytes): {exc}"
                ) from exc
            except lmdb.Error as exc:
                if isinstance(exc, DAMAGE):  # a damaged page, not a dead snapshot
                    raise lmdb_error(exc, str(self.partition.path)) from exc
                raise SnapshotInvalidatedError(f"snapshot is no longer usable: {exc}") from exc
        finally:
            sh.gate.leave()

    def get(self, db: bytes, key: bytes) -> bytes | None:
        value: bytes | None = self.run(db, lambda t, h: t.get(key, db=h), None)
        if self.partition.checksums:
            try:
                value = unseal(key, value)
            except ChecksumError as exc:
                raise self.partition.damaged(db, exc) from None
        return value

    def source(self, db: bytes) -> ChunkSource:
        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            part = self.partition
            verify = partial(part.verify_rows, db) if part.checksums else None
            return self.run(
                db, lambda t, h: read_lmdb_chunk(t.cursor(h), rng, reverse, n, verify), no_rows()
            )

        return FnSource(read)

    def count(self, db: bytes) -> int:
        n: int = self.run(db, lambda t, h: t.stat(h)["entries"], 0)
        return n

    def committed_offset(self, store: str) -> int | None:
        raw = self.run(META_DB, lambda t, h: t.get(OFFSET_PREFIX + store.encode(), db=h), None)
        return None if raw is None else int(OFFSET.unpack(raw)[0])

    def txn_id(self) -> int:
        """The id of the LMDB transaction the snapshot reads (equal ids: equal bytes)."""
        txnid: int = self.run(META_DB, lambda txn, _h: int(txn.id()), -1)
        return txnid

    def copy_env(self, dest: str) -> None:
        """LMDB's compacting copy of exactly the transaction this snapshot reads, into the
        directory ``dest`` (``env.copy(dest, compact=True, txn=...)``); raises
        ``StorageError`` if LMDB fails. O(committed data)."""
        sh = self._sh

        def copy(txn: Any, _h: Any) -> None:
            env = sh.env  # inside the gate: the environment ``txn`` is on (never a reopened one)
            try:
                env.copy(dest, compact=True, txn=txn)
            except lmdb.Error as exc:
                raise StorageError(
                    f"copying {self.partition.path!r} to {dest!r} failed: {exc}"
                ) from exc

        self.run(META_DB, copy, None)

    def drop_inherited_txn(self) -> None:
        """In a forked child: forget, without aborting it, the transaction inherited from the
        parent (see :meth:`PartitionReads.drop_inherited_txns`)."""
        self._txn = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            txn, self._txn = self._txn, None
            if txn is not None and not self.partition.inherited:
                with contextlib.suppress(lmdb.Error):
                    txn.abort()
