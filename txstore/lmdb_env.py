"""LMDB machinery under :class:`~txstore.partition.Partition`: the environment shared by the
partitions on one path (:class:`SharedEnv`, with its :class:`Gate` for shared reads), the
cursor loops of range reads and commits, and snapshots (:class:`LmdbSnapshot`)."""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import lmdb

from txstore.errors import InvalidStateStoreError, SnapshotInvalidatedError, StorageError
from txstore.iterators import ChunkSource, FnSource, KeyRange, Row, no_rows, read_lmdb_chunk
from txstore.partition_base import META_DB, Snapshot, fork_generation

if TYPE_CHECKING:
    from txstore.partition import Partition

__all__ = [
    "OFFSET",
    "OFFSET_PREFIX",
    "Gate",
    "LmdbSnapshot",
    "SharedEnv",
    "acquire_env",
    "apply_chunks",
    "apply_rows",
    "read_range_rows",
    "release_env",
    "track_partition",
]

T = TypeVar("T")

OFFSET: Final = struct.Struct(">q")
"""A store's committed offset in the metadata database: 8-byte big-endian signed."""
OFFSET_PREFIX: Final = b"offset:"
"""Key prefix of the committed offsets in the metadata database (then the store name)."""


_registry_lock = threading.Lock()
_registry: dict[str, SharedEnv] = {}
#: Open partitions, so that a forked child can forget their read transactions.
_partitions: weakref.WeakSet[Partition] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _registry_lock
    fork_generation[0] += 1
    _registry_lock = threading.Lock()
    # First drop the inherited read transactions (the writer's own, the snapshots'): freed in
    # the child, py-lmdb skips their abort. Closing their environment first would abort them
    # and release the *parent's* reader slots in the shared lock file (reproduced: the
    # parent's snapshot then no longer pins its pages).
    for p in list(_partitions):
        p._rtxn = None
        p._rdbs = {}
        try:  # no lock: another parent thread may have held it at the fork
            snapshots = list(p._snapshots)
        except Exception:  # pragma: no cover - a set modified mid-fork
            snapshots = []
        for snap in snapshots:
            if isinstance(snap, LmdbSnapshot):
                snap._txn = None
    for sh in _registry.values():
        # py-lmdb skips LMDB's cleanup in a forked child (the parent's readers and locks stay
        # intact) but forgets the environment, so the child may open the path afresh.
        with contextlib.suppress(Exception):
            sh.env.close()
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def track_partition(partition: Partition) -> None:
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
) -> SharedEnv:
    """The environment of the directory ``data``, opened once per process and shared by the
    partitions on it; at most one writable partition per path and process."""
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
        try:
            env = lmdb.open(
                data,
                map_size=map_size,
                max_dbs=max_dbs,
                max_readers=max_readers,
                subdir=True,
                readonly=readonly,
                create=not readonly,
                sync=sync,
                lock=True,
                max_spare_txns=0,  # spare read txns break the parent after a fork
            )
        except lmdb.Error as exc:
            raise StorageError(f"cannot open LMDB environment {data!r}: {exc}") from exc
        sh = SharedEnv(key, env, not readonly)
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
            if not self._active and self._exclusive:  # only exclusive() waits for this
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

    def publish(self, new: Mapping[bytes, Any]) -> None:
        """Add handles (copy-on-write; the caller holds ``dbi_lock``)."""
        if new:
            self.dbs = {**self.dbs, **new}

    def forget(self, db: bytes) -> None:
        """Remove a handle (copy-on-write; the caller holds ``dbi_lock``)."""
        if db in self.dbs:
            self.dbs = {k: h for k, h in self.dbs.items() if k != db}


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


class LmdbSnapshot(Snapshot):
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
        raw = self._run(META_DB, lambda t, h: t.get(OFFSET_PREFIX + store.encode(), db=h), None)
        return None if raw is None else int(OFFSET.unpack(raw)[0])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            txn, self._txn = self._txn, None
            if txn is not None and self._p._generation == fork_generation[0]:
                with contextlib.suppress(lmdb.Error):
                    txn.abort()
