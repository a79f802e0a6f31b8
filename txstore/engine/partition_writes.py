"""The write half of a :class:`~txstore.engine.partition.Partition`: write transactions (each
one replayed on a doubled map when LMDB reports the map full), the commit of overlays with their
offsets, store metadata, the write-through path of non-transactional stores, and the database
handles opened or dropped inside a write transaction (see the handle rules in
:mod:`txstore.engine.partition_reads`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import lmdb

from txstore import faults
from txstore.engine.base import META_DB
from txstore.engine.checksums import seal_rows
from txstore.engine.iterators import Row
from txstore.engine.lmdb_env import (
    META_PREFIX,
    OFFSET,
    OFFSET_PREFIX,
    DbHandle,
    apply_chunks,
    apply_rows,
)
from txstore.engine.lmdb_errors import lmdb_error
from txstore.engine.lmdb_sizing import SNAPSHOT_WAIT_S, grown_dbi_table, table_needs_growth
from txstore.engine.partition_reads import PartitionReads
from txstore.errors import IllegalStateError, StorageError, TxStoreError

__all__ = ["PartitionWrites"]


def put_columns(cur: Any, keys: list[bytes], values: list[bytes]) -> None:
    """Put sorted, distinct ``keys`` with their ``values`` through a write cursor: one
    ``putmulti`` over ``zip`` (one reused tuple, no object a row), appended when every key sorts
    after the database's last (then LMDB's count of rows added is checked)."""
    append = not cur.last() or cur.key() < keys[0]
    _, added = cur.putmulti(zip(keys, values, strict=True), True, True, append)
    if append and added != len(keys):
        raise StorageError(f"LMDB append wrote {added} of {len(keys)} rows: keys not sorted")


class PartitionWrites(PartitionReads):
    """The writes of an LMDB partition, on top of its reads;
    :class:`~txstore.engine.partition.Partition` adds the lifecycle (never used on its own)."""

    def __init__(self) -> None:
        super().__init__()
        self._new_dbs: dict[bytes, DbHandle] = {}  # handles opened by the open write txn
        self._dbi_locked = False  # the open write txn holds the environment's dbi_lock
        self._meta: DbHandle | None = None  # the metadata database's handle, once open

    # -- writes -------------------------------------------------------------------------------

    def _write(self, fn: Callable[[Any], None], exclusive: bool, estimate: int) -> None:
        """Run ``fn(txn)`` in a write txn and commit; on a full map grow and replay it."""
        sh = self._sh
        assert sh is not None
        self._end_reader()
        full = created = False
        while True:
            if sh.failed is not None:
                raise sh.failed
            with sh.gate.exclusive() if exclusive else contextlib.nullcontext():
                try:
                    txn = sh.env.begin(write=True)
                except lmdb.Error as exc:
                    raise self._write_error(exc) from exc
                try:
                    fn(txn)
                    txn.commit()
                    created = bool(self._new_dbs)
                    sh.publish(self._new_dbs)
                    if self.write_generation is not None:
                        self.write_generation += 1
                    break
                except lmdb.MapFullError:
                    with contextlib.suppress(lmdb.Error):
                        txn.abort()
                except lmdb.DbsFullError as exc:
                    with contextlib.suppress(lmdb.Error):
                        txn.abort()
                    if sh.table >= sh.max_dbs:
                        raise self._write_error(exc) from exc
                    full = True
                except BaseException as exc:
                    with contextlib.suppress(lmdb.Error):
                        txn.abort()
                    if isinstance(exc, lmdb.Error):
                        raise self._write_error(exc) from exc
                    raise
                finally:
                    self._new_dbs = {}  # handles opened by an aborted txn are gone
                    if self._dbi_locked:
                        self._dbi_locked = False
                        sh.dbi_lock.release()
            if full:
                full = False
                self._grow_table(force=True)
            else:
                self._grow(estimate)
        if created:
            self._grow_table(force=False)

    def _grow_table(self, force: bool) -> None:
        """Reopen the environment with a larger dbi table (see
        :mod:`txstore.engine.lmdb_sizing`) when its named databases leave too little room, or
        (``force``) when a write transaction found it full. Called between write transactions
        by the writer thread. A reopen waits for a moment with no snapshot open on the
        environment: unforced, it does not wait (the table's headroom absorbs the databases
        created meanwhile; the next commit that creates one tries again); forced, it waits up
        to :data:`~txstore.engine.lmdb_sizing.SNAPSHOT_WAIT_S`, then invalidates them, as a
        map resize does."""
        sh = self._sh
        assert sh is not None
        try:
            named = int(sh.env.stat()["entries"])
        except lmdb.Error as exc:
            raise self._write_error(exc) from exc
        if not force and not table_needs_growth(named, sh.table, sh.max_dbs):
            return
        self._end_reader()
        table = grown_dbi_table(named, sh.table, sh.max_dbs)
        if force and not self._reopen_table(table, SNAPSHOT_WAIT_S):
            self._reopen_table(table, -1.0)
        elif not force:
            self._reopen_table(table, 0.0)

    def _reopen_table(self, table: int, wait_s: float) -> bool:
        """Reopen a writable environment with a dbi table of ``table`` slots; returns whether
        it did. The caller is the writer thread between write transactions, with its read
        transaction ended. The gate is taken exclusively (no shared read in flight, none
        begins) and the reopen waits, up to ``wait_s`` seconds, for a moment with no snapshot
        open on the environment; past that (never, with ``wait_s`` 0) it gives up, or with a
        negative ``wait_s`` it reopens anyway: snapshots begun on the old environment then
        raise :class:`~txstore.errors.SnapshotInvalidatedError`, as after a map resize. Cost:
        one close and open and a write transaction reopening the handles (~0.2 ms)."""
        sh = self._sh
        assert sh is not None
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            with sh.gate.exclusive(invalidate=False):
                if sh.failed is not None:
                    raise sh.failed
                if wait_s < 0 or not sh.snapshots_open():
                    sh.gate.epoch += 1
                    self._reopen_writable(table)
                    return True
            if time.monotonic() >= deadline:
                if wait_s >= 0:
                    return False
            else:
                time.sleep(0.001)

    def _reopen_writable(self, table: int) -> None:
        """Close the environment and open it with ``table`` slots, the same map size (as grown)
        and the handles that were open (readers and iterators look handles up by name: they
        carry on). The writer lock and the clean-close marker are files of their own, held
        meanwhile. A failed reopen leaves the partition unusable (``failed``)."""
        sh = self._sh
        assert sh is not None
        old = sh.env
        args = dict(sh.open_args)
        path = args.pop("path")
        with contextlib.suppress(lmdb.Error):
            args["map_size"] = max(args["map_size"], old.info()["map_size"])
        args["max_dbs"] = table
        names = list(sh.dbs)
        old.close()
        sh.dbs = {}
        sh.generation += 1
        try:
            env = sh.env = lmdb.open(
                path, subdir=True, readonly=False, create=False, max_spare_txns=0, **args
            )
            # The handles open before stay open (their slots taken, as they were): a table
            # never holds fewer slots than this process's open handles plus the headroom.
            with env.begin(write=True) as txn:
                handles = {}
                for name in names:
                    with contextlib.suppress(lmdb.NotFoundError):
                        handles[name] = env.open_db(name, txn=txn, create=False)
            sh.dbs = handles
        except lmdb.Error as exc:
            sh.failed = StorageError(
                f"cannot reopen LMDB environment {path!r} (to grow its dbi table): {exc}; "
                "open the partition again"
            )
            raise sh.failed from exc
        sh.open_args["map_size"] = args["map_size"]
        sh.table = table

    def _write_error(self, exc: lmdb.Error) -> TxStoreError:
        """The txstore error for an LMDB error of a write transaction (see
        :func:`~txstore.engine.lmdb_errors.lmdb_error`)."""
        err = lmdb_error(exc, str(self.path))
        if type(err) is StorageError:
            return StorageError(f"LMDB write failed in {self.path!r}: {exc}")
        return err

    def _grow(self, estimate: int) -> None:
        sh = self._sh
        assert sh is not None
        with sh.gate.exclusive():
            try:
                size = sh.env.info()["map_size"]
                new = max(2 * size, size + estimate)
                new += -new % 4096
                sh.env.set_mapsize(new)
            except lmdb.Error as exc:
                raise lmdb_error(lmdb.MapFullError(str(exc)), str(self.path)) from exc

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        self._check_writable()
        raw = json.dumps(meta, sort_keys=True).encode()

        def fn(txn: Any) -> None:
            txn.put(META_PREFIX + name.encode(), raw, db=self._write_handle(txn, META_DB))
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
                columns = ov.sorted_columns(seal=self.checksums)
                if columns is not None:  # the common case: puts only, in memory
                    if columns[0]:
                        put_columns(txn.cursor(self._write_handle(txn, ov.name)), *columns)
                    continue
                chunks = ov.sorted_chunks(seal=self.checksums)  # sealed as self.sealed does
                first = next(chunks, None)
                if first is not None:
                    cur = txn.cursor(self._write_handle(txn, ov.name))
                    apply_chunks(cur, first, chunks, ov.may_hold_tombstones)
            faults.point("partition.mid_commit")  # data written, offsets not, txn not committed
            self._put_offsets(txn, offsets)

        self._write(fn, exclusive, estimate)

    def _put_offsets(self, txn: Any, offsets: Mapping[str, int]) -> None:
        """Write the stores' committed ``offsets`` in the write transaction ``txn``."""
        meta = self._write_handle(txn, META_DB)  # looked up: a table growth reopens handles
        for name, offset in offsets.items():
            txn.put(OFFSET_PREFIX + name.encode(), OFFSET.pack(offset), db=meta)

    def sealed(self, rows: list[Row]) -> list[Row]:
        """Rows a write transaction is about to put, each value with its checksum trailer on a
        checksummed partition (:func:`~txstore.engine.checksums.seal_rows`: one C call, a new
        list; a delete stays ``None``); as they are on a legacy one. The one function every
        write of store data goes through (commits, write-through, upgrades). O(rows)."""
        return seal_rows(rows) if self.checksums else rows

    def _apply_rows(self, writes: Mapping[bytes, list[Row]], offsets: dict[str, int]) -> None:
        """:meth:`~txstore.engine.base.PartitionBase.commit_rows` on LMDB: the sorted rows go
        through a write cursor as the overlay's chunks do (``apply_chunks``: append into an
        empty or lower database, ``putmulti`` otherwise), then the offsets; one transaction."""
        estimate = 256 * sum(map(len, writes.values()))  # only sizes a map grown on MapFull

        def fn(txn: Any) -> None:
            for db, rows in writes.items():
                if rows:
                    apply_chunks(
                        txn.cursor(self._write_handle(txn, db)), self.sealed(rows), iter(())
                    )
            self._put_offsets(txn, offsets)

        self._write(fn, False, estimate)

    def _apply_columns(
        self,
        db: bytes,
        keys: list[bytes],
        stored: list[bytes],
        deletes: list[bytes],
        offsets: dict[str, int],
    ) -> None:
        """:meth:`~txstore.engine.base.PartitionBase.commit_columns` on LMDB, in one
        transaction: the deletes (none in an empty database), the rows by one cursor
        ``putmulti`` over ``zip(keys, stored)`` (which reuses one tuple: no object per row),
        appended when every key sorts after the database's last, then the offsets."""
        estimate = 256 * len(keys)  # only sizes a map grown on MapFull

        def fn(txn: Any) -> None:
            cur = txn.cursor(self._write_handle(txn, db))
            if deletes and cur.first():
                for key in deletes:
                    if cur.set_key(key):
                        cur.delete()
            if keys:
                append = not cur.last() or cur.key() < keys[0]
                _, added = cur.putmulti(zip(keys, stored, strict=True), True, True, append)
                if append and added != len(keys):
                    raise StorageError(
                        f"LMDB append wrote {added} of {len(keys)} rows: keys not sorted"
                    )
            self._put_offsets(txn, offsets)

        self._make_room(estimate)
        self._write(fn, False, estimate)

    def _make_room(self, estimate: int) -> None:
        """Grow the map before a large write (a restore chunk, a sorted restore's stream) whose
        rows (``estimate`` bytes) would not fit above the pages in use: a full map aborts the
        write transaction, which ``_write`` then replays whole (at 1M restored records, 3 of 13
        ``putmulti`` passes). The writer's read transaction is ended first: LMDB remaps the
        file, and no transaction of this process may be open on the old mapping."""
        sh = self._sh
        assert sh is not None
        try:
            info = sh.env.info()
            used = (info["last_pgno"] + 1) * sh.env.stat()["psize"]
        except lmdb.Error as exc:
            raise self._write_error(exc) from exc
        if used + 2 * estimate > info["map_size"]:  # room for the rows and the rewritten leaves
            self._end_reader()
            self._grow(estimate)

    def commit_stream(
        self,
        store: str,
        db: bytes,
        batches: Callable[[], Iterator[tuple[list[bytes], list[bytes]]]],
        offset: int,
        estimate: int,
    ) -> None:
        """Write the rows of ``batches()`` (batches of keys and stored values, sorted and
        distinct across batches) into the EMPTY database ``db`` of ``store`` and commit them
        with ``store``'s changelog ``offset``: one write transaction, the rows appended by
        cursor ``putmulti`` (every leaf written once), one sync. The sorted restore
        (:mod:`txstore.bytestores.restore_runs`). Checks as
        :meth:`~txstore.engine.base.PartitionBase.commit_rows`; a database that holds a row
        raises :class:`~txstore.errors.IllegalStateError`, a key out of order
        :class:`~txstore.errors.StorageError`, and nothing is committed. ``batches`` is
        called again from the start when the map is grown; ``estimate`` (bytes the rows
        take) grows it once beforehand."""
        self._commit_direct(
            store, offset, lambda checked: self._apply_stream(db, batches, estimate, checked)
        )

    def _apply_stream(
        self,
        db: bytes,
        batches: Callable[[], Iterator[tuple[list[bytes], list[bytes]]]],
        estimate: int,
        offsets: dict[str, int],
    ) -> None:
        self._make_room(estimate)  # the writer's read transaction ended before the remap

        def fn(txn: Any) -> None:
            cur = txn.cursor(self._write_handle(txn, db))
            if cur.last():
                raise IllegalStateError(f"database {db!r} is not empty: no sorted restore")
            for keys, stored in batches():
                _, added = cur.putmulti(zip(keys, stored, strict=True), True, True, True)
                if added != len(keys):
                    raise StorageError(
                        f"LMDB append wrote {added} of {len(keys)} rows: keys not sorted"
                    )
            faults.point("partition.mid_commit")  # rows written, offsets not, txn open
            self._put_offsets(txn, offsets)

        self._write(fn, False, estimate)

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
        ordered = {db: self.sealed(sorted(rows, key=lambda r: r[0])) for db, rows in writes.items()}

        def fn(txn: Any) -> None:
            for db in drops:
                self._drop_in(txn, db)
            for db, rows in ordered.items():
                apply_rows(txn.cursor(self._write_handle(txn, db)), rows)

        estimate = sum(len(k) + len(v or b"") + 16 for rows in writes.values() for k, v in rows)
        self._write(fn, bool(drops), estimate)

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        self._check_writable()
        ordered = self.sealed(sorted(rows, key=lambda r: r[0]))  # stable: the last write wins

        def fn(txn: Any) -> None:
            apply_rows(txn.cursor(self._write_handle(txn, db)), ordered)

        self._write(fn, False, sum(len(k) + len(v or b"") + 16 for k, v in rows))

    def record_offset(self, store: str, offset: int) -> None:
        self.commit_stores({store: offset})
        assert self._sh is not None
        try:
            self._sh.env.sync(True)
        except lmdb.Error as exc:
            raise lmdb_error(exc, str(self.path)) from exc

    # -- handles in write transactions ---------------------------------------------------------

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
