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

from txstore.engine.base import META_DB
from txstore.engine.lmdb_env import (
    DEFAULT_MAX_DBS,
    acquire_env,
    release_env,
    track_partition,
)
from txstore.engine.overlay import Overlay, SpillEnv
from txstore.engine.partition_writes import PartitionWrites
from txstore.engine.spill import remove_dir
from txstore.engine.writer_lock import INSPECTOR_WAIT_S, WRITER_LOCK, lock_writer, writer_probe
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    StorageError,
)

__all__ = ["INSPECTOR_WAIT_S", "WRITER_LOCK", "Partition", "writer_probe"]


class Partition(PartitionWrites):
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
        self.write_generation = None if self.readonly else 0
        data = os.path.join(self.path, "data")
        if self.readonly:
            if not os.path.isfile(os.path.join(data, "data.mdb")):
                raise StorageError(
                    f"no txstore partition at {self.path!r} (missing data/data.mdb): a new "
                    "partition is created by opening it once without readonly=True; one that "
                    "lost its data/ is restored from its changelogs by opening it as a Task"
                )
        else:
            os.makedirs(data, exist_ok=True)
        try:
            self._sh = acquire_env(
                data, self.path, self.readonly, self.sync, map_size, max_dbs, max_readers
            )
            track_partition(self)
            if not self.readonly:
                self._lock_fd = lock_writer(self.path)
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

    def _release(self) -> None:
        if self.inherited:
            return  # never touch an inherited environment
        self._end_reader()
        sh, self._sh = self._sh, None
        if sh is not None:
            release_env(sh, self.readonly)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
