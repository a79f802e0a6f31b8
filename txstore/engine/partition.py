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
        closed-cleanly  present while no writer has the partition open and the last one closed
                      it normally (see :mod:`txstore.engine.writer_lock`).

Page walk at open (``verify``). LMDB aborts the process (``SIGABRT`` from its own assertions)
when a cursor steps onto a damaged B-tree page, so a partition that may hold one is walked
first (:func:`~txstore.engine.lmdb_pages.walk_data_file`, ``pread`` only) and a bad page is a
:class:`~txstore.errors.DamagedFileError`. ``verify="auto"`` (the default) walks when the
marker ``closed-cleanly`` is missing: the last writer died (or predates the marker). A writer
walks after taking ``writer.lock`` and before its first read or write; a read-only opener walks
when no writer is alive (none would have left the marker). ``"always"`` walks at every open
(``txstore check`` does), ``"never"`` skips it. The default comes from the environment variable
``TXSTORE_VERIFY`` when it is set, so a :class:`~txstore.runtime.task.Task` can be told too.

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
one read transaction, ended before each write transaction (see ``_writer_txn_for``). The shared
environment and its gate are in :mod:`txstore.engine.lmdb_env`.

The class is assembled from one module per job: the writer lock
(:mod:`txstore.engine.writer_lock`), the LMDB-backed reads and snapshots
(:mod:`txstore.engine.partition_reads`), and the write and commit path
(:mod:`txstore.engine.partition_writes`); this module opens and closes the partition.

Map growth. When a write fails with ``MapFullError`` the transaction is aborted, the map is
doubled (``set_mapsize``, after in-flight shared reads of this process have finished: a gate
blocks new ones for the few microseconds of the resize), and the whole write is replayed.
Readers in other processes adopt the new size when their next transaction raises
``MapResizedError``. Open snapshots of this process are invalidated by a resize and raise
:class:`~txstore.errors.SnapshotInvalidatedError`. ``reader_check()`` runs at open and every 64
commits.
"""

from __future__ import annotations

import os
from typing import Any, Final

import lmdb

from txstore.engine.base import META_DB
from txstore.engine.checksums import (
    FLAG_KEY,
    FLAG_VALUE,
    ChecksumError,
    record_damage,
    unseal,
)
from txstore.engine.lmdb_env import (
    DEFAULT_MAX_DBS,
    META_PREFIX,
    OFFSET_PREFIX,
    acquire_env,
    release_env,
    track_partition,
)
from txstore.engine.lmdb_pages import PageWalk, walk_data_file
from txstore.engine.overlay import Overlay, SpillEnv
from txstore.engine.partition_writes import PartitionWrites
from txstore.engine.spill import remove_dir
from txstore.engine.writer_lock import (
    INSPECTOR_WAIT_S,
    WRITER_LOCK,
    closed_cleanly,
    hold_out_writers,
    lock_writer,
    mark_clean_close,
    take_clean_close,
    writer_probe,
)
from txstore.errors import (
    DamagedFileError,
    InvalidArgumentError,
    InvalidTypeError,
    StorageError,
)

__all__ = ["INSPECTOR_WAIT_S", "VERIFY_MODES", "WRITER_LOCK", "Partition", "writer_probe"]

VERIFY_MODES: Final = ("auto", "always", "never")
"""The values of ``Partition(verify=...)`` and of the environment variable ``TXSTORE_VERIFY``
(see the module docstring, "Page walk at open")."""


def _verify_mode(verify: str | None) -> str:
    mode = os.environ.get("TXSTORE_VERIFY", "auto") if verify is None else verify
    if mode not in VERIFY_MODES:
        source = "TXSTORE_VERIFY" if verify is None else "verify"
        raise InvalidArgumentError(
            f"{source} must be one of {', '.join(VERIFY_MODES)}, got {mode!r}"
        )
    return mode


class Partition(PartitionWrites):
    """A partition directory holding one LMDB environment (see the module docstring).

    Opening costs an ``lmdb.open``, a ``reader_check`` and, when writable, deleting a leftover
    spill directory and the clean-close marker; plus a walk of every LMDB page when ``verify``
    asks for one (by default: after a writer died; see the module docstring). ``map_size`` is
    the initial map (it doubles when full); ``overlay_budget_bytes`` bounds the overlays'
    memory before they spill; ``max_dbs`` bounds the named databases (stores, segments), fixed
    by the first opener; ``verify`` is ``"auto"``, ``"always"`` or ``"never"``
    (:data:`VERIFY_MODES`; default: ``TXSTORE_VERIFY``, else ``"auto"``). ``checksums``
    decides whether a *new* partition's entries carry checksums (:mod:`txstore.engine.checksums`;
    default yes); an existing one keeps what its metadata records (:attr:`checksums`), and a
    legacy one gains them with :meth:`add_checksums`.

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
    each segment drop. A writable environment opens with a smaller table sized from the
    databases in its file and grows it, up to ``max_dbs``, by reopening between write
    transactions (:mod:`txstore.engine.lmdb_sizing`: ~40 KiB less memory per partition).
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
        verify: str | None = None,
        checksums: bool = True,
    ) -> None:
        super().__init__()
        mode = _verify_mode(verify)
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
        self._mark_on_close = False
        self.page_walk: PageWalk | None = None
        self.damaged_at_open: set[bytes] = set()
        """Databases in which the check after the page walk found an entry whose checksum
        failed (see :meth:`_verify_after_walk`); emptied as their stores are dropped."""
        """What the page walk at open read (``None``: not walked)."""
        self.write_generation = None if self.readonly else 0
        data = os.path.join(self.path, "data")
        existed = os.path.isfile(os.path.join(data, "data.mdb"))
        self.last_writer_closed_cleanly: bool | None = None
        """A writer's open: whether the partition's last writer closed it normally (its
        clean-close marker was there); ``None`` for a new partition or a read-only open."""
        if self.readonly:
            if not os.path.isfile(os.path.join(data, "data.mdb")):
                raise StorageError(
                    f"no txstore partition at {self.path!r} (missing data/data.mdb): a new "
                    "partition is created by opening it once without readonly=True; one that "
                    "lost its data/ is restored from its changelogs by opening it as a Task"
                )
            self._verify_readonly(data, mode)
        else:
            os.makedirs(data, exist_ok=True)
        # A reader without write access to lock.mdb (another user's state, a backup) opens it
        # as py-lmdb can: without LMDB's lock table, holding writers out while it reads.
        lockless = self.readonly and not _lock_table_writable(data)
        try:
            if lockless:
                self._lock_fd = hold_out_writers(self.path)
            self._sh = acquire_env(
                data, self.path, self.readonly, self.sync, map_size, max_dbs, max_readers,
                lock=not lockless,
            )  # fmt: skip
            track_partition(self)
            if not self.readonly:
                self._lock_fd = lock_writer(self.path)
                clean = take_clean_close(self.path, self.sync)
                self.last_writer_closed_cleanly = clean if existed else None
                if mode == "always" or (mode == "auto" and not clean):
                    self.page_walk = walk_data_file(os.path.join(data, "data.mdb"))
                self._mark_on_close = True
                self.overlay = Overlay(
                    overlay_budget_bytes,
                    SpillEnv(
                        os.path.join(self.path, "spill"),
                        max_dbs=max_dbs,
                        map_size=max(64 * 2**20, 4 * overlay_budget_bytes),
                    ),
                )
                remove_dir(os.path.join(self.path, "spill"))
                self._write(lambda txn: self._create_meta(txn, checksums), False, 0)
            self._closed = False
            self._meta = self._read(META_DB, True, lambda txn, h: h, None)
            if self._meta is None:
                raise StorageError(f"{self.path!r} is not a txstore partition (no metadata)")
            flag = self._read(META_DB, True, lambda txn, h: txn.get(FLAG_KEY, db=h), None)
            if flag is not None and flag != FLAG_VALUE:
                raise StorageError(
                    f"{self.path!r} records entry checksums of an unknown kind ({flag!r}): it "
                    "was written by a newer txstore"
                )
            self.checksums = flag is not None
            if self.page_walk is not None:
                self._verify_after_walk()
            self.reader_check()
        except BaseException:
            self._closed = False
            self.close()
            raise

    # -- entry checksums -----------------------------------------------------------------------

    def _create_meta(self, txn: Any, checksums: bool) -> None:
        """Open (create) the metadata database; a new partition records, in the same
        transaction, that its entries carry checksums (unless ``checksums=False``)."""
        new = txn.get(META_DB) is None  # the main database names every named one
        h = self._write_handle(txn, META_DB)
        if new and checksums:
            txn.put(FLAG_KEY, FLAG_VALUE, db=h)

    def damaged(self, db: bytes, exc: BaseException) -> DamagedFileError:
        err = super().damaged(db, exc)
        if not self.readonly and not self.inherited:
            record_damage(str(self.path), db)
        return err

    def add_checksums(self) -> int:
        """Seal every entry of a legacy partition (written without checksums) and record the
        flag, in one write transaction; returns how many entries were sealed (0: the partition
        already had checksums). Other processes must not read the partition meanwhile (they
        would keep reading it as legacy until they reopen it). O(entries)."""
        self._check_writable()
        if self.checksums:
            return 0
        self.checksums = True  # self.sealed now adds trailers
        count = [0]

        def fn(txn: Any) -> None:
            count[0] = 0
            names = [n for n in txn.cursor().iternext(values=False) if n != META_DB]
            for name in names:
                cur = txn.cursor(self._write_handle(txn, name, create=False))
                rows = self.sealed(list(cur.iternext()))
                cur.putmulti(rows)
                count[0] += len(rows)
            txn.put(FLAG_KEY, FLAG_VALUE, db=self._write_handle(txn, META_DB))

        try:
            size = os.path.getsize(os.path.join(str(self.path), "data", "data.mdb"))
            self._write(fn, True, 2 * size)
        except BaseException:
            self.checksums = False
            raise
        return count[0]

    def verify_entries(self, limit: int = 100) -> tuple[int, list[tuple[bytes, bytes, str]]]:
        """Check the checksum of every entry of every database (the metadata database aside)
        in one read transaction: returns how many entries were checked and up to ``limit``
        damaged ones as ``(database, key, reason)``. A legacy partition (no checksums) checks
        nothing: ``(0, [])``. O(entries); what ``txstore check`` runs."""
        if not self.checksums:
            return 0, []
        self.check_usable()
        sh = self._sh
        assert sh is not None
        handles = {n: h for n, h in self.open_all_handles().items() if n != META_DB}

        def once() -> tuple[int, list[tuple[bytes, bytes, str]]]:
            count = 0
            bad: list[tuple[bytes, bytes, str]] = []
            txn = sh.env.begin()
            try:
                for name, h in sorted(handles.items()):
                    try:
                        rows = txn.cursor(h).iternext()
                        for key, value in rows:
                            count += 1
                            try:
                                unseal(key, value)
                            except ChecksumError as exc:
                                if len(bad) < limit:
                                    bad.append((name, key, str(exc.args[-1])))
                    except lmdb.BadDbiError:
                        continue  # dropped by the writer since the handles were opened
            finally:
                txn.abort()
            return count, bad

        return self.run_shared(once)

    def _verify_after_walk(self) -> None:
        """After an unclean shutdown (or with ``verify="always"``) the page walk checked the
        B-tree; this checks every entry's checksum as well, because a flipped key byte that
        keeps the key between its neighbours is never read by a ``get`` (it finds nothing,
        which is not an error). Each database holding a damaged entry is kept in
        :attr:`damaged_at_open` (``Database.open_store`` refuses its store) and, by a writer,
        recorded (:func:`~txstore.engine.checksums.record_damage`: a task rebuilds its
        store). O(entries), one read transaction, ~150 ns an entry (0.15 s a million entries,
        against 0.03 s for the walk of their pages)."""
        _, bad = self.verify_entries(limit=1 << 30)
        for db in sorted({db for db, _, _ in bad}):
            if not self.readonly:
                record_damage(str(self.path), db)
            self.damaged_at_open.add(db)

    def store_of_db(self, db: bytes) -> str | None:
        """The store whose database ``db`` is (``<store>`` or ``<store>.<suffix>``: the store
        with the longest such name), or None."""
        best: str | None = None
        for name in self.store_names():
            n = name.encode()
            if (db == n or db.startswith(n + b".")) and (best is None or len(name) > len(best)):
                best = name
        return best

    def drop_stores(self, names: set[str]) -> None:
        """Delete every database, the metadata and the committed offset of each store of
        ``names``, in one write transaction: the stores are as if never created (a task then
        restores them from their changelogs; see :mod:`txstore.engine.checksums`). Open no
        store of ``names`` before. O(databases of the partition)."""
        self._check_writable()
        dbs = [db for db in self._db_names() if self.store_of_db(db) in names]

        def fn(txn: Any) -> None:
            for db in dbs:
                self._drop_in(txn, db)
            for name in names:
                txn.delete(META_PREFIX + name.encode(), db=self._write_handle(txn, META_DB))
                txn.delete(OFFSET_PREFIX + name.encode(), db=self._write_handle(txn, META_DB))

        self._write(fn, True, 0)
        self.damaged_at_open = {db for db in self.damaged_at_open if db not in dbs}

    # -- environment ---------------------------------------------------------------------------

    def _verify_readonly(self, data: str, mode: str) -> None:
        """The page walk of a read-only open, before LMDB maps the file: ``always``, or
        ``auto`` when the marker is missing and no writer is alive (a live one walked at its
        open, and holds no marker while it writes)."""
        path = os.path.dirname(data)
        if mode == "never" or (mode == "auto" and closed_cleanly(path)):
            return
        if mode == "auto":
            with writer_probe(path) as alive:
                if alive is not False:
                    return
        self.page_walk = walk_data_file(os.path.join(data, "data.mdb"))

    def _release(self) -> None:
        if self.inherited:
            return  # never touch an inherited environment
        self._end_reader()
        sh, self._sh = self._sh, None
        if sh is not None:
            release_env(sh, self.readonly)
        if self._lock_fd is not None:
            if self._mark_on_close:
                self._mark_on_close = False
                mark_clean_close(
                    os.fspath(self.path or "")
                )  # the environment is closed (or only read)
            os.close(self._lock_fd)
            self._lock_fd = None


def _lock_table_writable(data: str) -> bool:
    """Whether this process may write LMDB's ``lock.mdb`` in ``data`` (or create it)."""
    lock = os.path.join(data, "lock.mdb")
    return os.access(lock if os.path.exists(lock) else data, os.W_OK)
