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
from typing import Final

from txstore.engine.base import META_DB
from txstore.engine.lmdb_env import (
    DEFAULT_MAX_DBS,
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
    (:data:`VERIFY_MODES`; default: ``TXSTORE_VERIFY``, else ``"auto"``).

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
        verify: str | None = None,
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
