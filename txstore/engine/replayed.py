"""A read-only partition that serves committed changelog records its stores do not hold yet.

A task commits its changelogs first and its stores right after (docs/recovery.md). A writer that
dies between the two leaves stores one task commit behind their changelogs: the commit is
durable (the next :meth:`~txstore.runtime.task.Task.initialize` replays it), but the LMDB files
do not hold it. A reader must serve what was committed, not what the files last held, and must
not write to the partition to get there (the writer may come back at any moment, and readers
run as other users, on backups and snapshots).

:class:`ReplayedPartition` is that reader's view. It wraps a read-only
:class:`~txstore.engine.partition.Partition` and keeps, in memory, the rows that replaying the
missing changelog range produced (the *tail*): per named database, a ``SortedDict`` of key to
value or tombstone, the databases the replay dropped (expired segments), and each store's
committed offset after the replay. Every read of the committed tier (``get``, chunked scans,
``read_range``, ``count``, ``read_atomic``, snapshots, offsets) reads the wrapped partition and
lays the tail over it, so every store, view and snapshot opened on it sees the committed state.

The tail is produced by the ordinary store code: :meth:`begin_replay` gives the partition an
in-memory overlay and makes it writable, the caller replays through the bytes stores (the same
``put_all``/``restore`` a task's restore uses, with the record converters) and
:meth:`~txstore.engine.base.PartitionBase.commit_stores`, whose apply step captures the overlay
into the tail instead of writing LMDB; :meth:`end_replay` makes it read-only again. Nothing is
written to the partition's files.

**A writer that comes back.** A store's files only move forward from the offset the replay
started from, and every key they change on the way to the replayed offset is in the tail with
its value there: so while the store's committed offset on disk is below the replayed one (a
restarted writer restoring in batches), the tail laid over the files is still exactly the
replayed state, and once it reaches it the tail is ignored and the files are read alone (they
may move on past it). Each read checks this with one metadata read (a snapshot once, when it
begins), and only in a partition that has a tail: a clean partition is never wrapped.

Costs: the replay is O(missing records); a read adds one offset read and a bisect into the tail.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import lmdb
from sortedcontainers import SortedDict

from txstore.engine.base import META_DB, AtomicReads, PartitionBase, Snapshot
from txstore.engine.checksums import seal
from txstore.engine.chunk_reads import read_sorted_chunk
from txstore.engine.iterators import (
    EMPTY_SOURCE,
    ChunkSource,
    FnSource,
    KeyRange,
    MergedSource,
    Row,
)
from txstore.engine.lmdb_env import META_PREFIX, OFFSET, OFFSET_PREFIX
from txstore.engine.overlay import Overlay
from txstore.errors import InvalidStateStoreError, StorageError

__all__ = ["ReplayedPartition", "write_tail"]

T = TypeVar("T")


class _Tail:
    """The replayed rows of one database: ``rows`` (key -> value, None: tombstone) and whether
    the replay dropped the database first (then nothing of it on disk is visible)."""

    __slots__ = ("dropped", "rows", "store")

    def __init__(self, store: str) -> None:
        self.store = store
        self.rows: SortedDict = SortedDict()
        self.dropped = False

    def source(self) -> ChunkSource:
        rows = self.rows

        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            return read_sorted_chunk(rows, rows, rng, reverse, n)

        return FnSource(read)


def _merged(tail: _Tail, lower: ChunkSource) -> ChunkSource:
    return MergedSource(tail.source(), EMPTY_SOURCE if tail.dropped else lower, False)


def _read_range(
    source: ChunkSource, lo: bytes, hi: bytes, reverse: bool, limit: int
) -> tuple[list[Row], bool]:
    """``read_range`` over a chunk source: at most ``limit`` rows of ``[lo, hi]`` (the smallest
    forward, the largest in reverse), ascending, and whether more follow."""
    rng = KeyRange(lo, hi)
    got: list[Row] = []
    while len(got) <= limit and not rng.is_empty():
        rows, frontier = source.read_chunk(rng, reverse, limit + 1 - len(got))
        got = rows + got if reverse else got + rows
        if frontier is None:
            break
        rng = rng.after(frontier, reverse)
    more = len(got) > limit
    if more:
        got = got[len(got) - limit :] if reverse else got[:limit]
    return got, more


class ReplayedPartition(PartitionBase):
    """A read-only :class:`~txstore.engine.partition.Partition` (``inner``) with the replayed
    tail of its changelogs laid over its committed tier (see the module docstring). Closing it
    closes ``inner``."""

    persistent = True

    def __init__(self, inner: PartitionBase) -> None:
        super().__init__()
        if not inner.readonly:
            raise InvalidStateStoreError("only a read-only partition is replayed into")
        self.inner = inner
        self.path = inner.path
        self.readonly = True
        self.overlay: Overlay | None = None
        self._tails: dict[bytes, _Tail] = {}
        self._offsets: dict[str, int] = {}
        self._base: dict[str, int | None] = {}  # committed offset on disk when replayed
        self._metas: dict[str, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        # Anything else of a partition (page_walk, info, sync...): the wrapped one's.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- the replay ---------------------------------------------------------------------------

    def begin_replay(self) -> None:
        """Make the partition writable into an in-memory overlay, for the stores that replay
        the changelog tail; their commits are captured by :meth:`_apply`."""
        self.check_usable()
        self.overlay = Overlay(2**62, None)  # in memory: the tail is what the writer lacks
        self.readonly = False

    def end_replay(self) -> None:
        """Read-only again; the overlay is dropped (anything not committed is discarded)."""
        if self.overlay is not None:
            self.overlay.close()
        self.overlay = None
        self.readonly = True

    def replay_base(self, store: str, offset: int | None) -> None:
        """The committed offset on disk that the tail of ``store`` about to be replayed was
        computed from: the tail applies while the store's files stay there."""
        self._base[store] = offset

    @property
    def replayed_offsets(self) -> dict[str, int]:
        """Each replayed store's committed offset after the replay."""
        return dict(self._offsets)

    def _tail(self, db: bytes, store: str) -> _Tail:
        tail = self._tails.get(db)
        if tail is None:
            tail = self._tails[db] = _Tail(store)
        return tail

    def _apply(self, offsets: dict[str, int]) -> None:
        assert self.overlay is not None
        for name, offset in offsets.items():
            if name not in self._base:
                self._base[name] = self.inner.committed_offset(name)
            for ov in self.overlay.dbs(name):
                tail = self._tail(ov.name, name)
                if ov.dropped:
                    tail.rows.clear()
                    tail.dropped = True
                for chunk in ov.sorted_chunks():
                    tail.rows.update(chunk)
            self._offsets[name] = offset

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        self.write_through_dbs({db: rows})

    def write_through_dbs(
        self, writes: Mapping[bytes, list[Row]], drops: Sequence[bytes] = ()
    ) -> None:
        self._check_writable()
        for db in drops:
            tail = self._tail(db, self._store_of(db))
            tail.rows.clear()
            tail.dropped = True
        for db, rows in writes.items():
            self._tail(db, self._store_of(db)).rows.update(rows)

    def record_offset(self, store: str, offset: int) -> None:
        self._check_writable()
        self._base.setdefault(store, self.inner.committed_offset(store))
        self._offsets[store] = offset

    def _store_of(self, db: bytes) -> str:
        name = db.decode()
        while name not in self._offsets and name not in self.store_names() and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    # -- metadata -----------------------------------------------------------------------------

    def store_meta(self, name: str) -> dict[str, Any] | None:
        meta = self._metas.get(name)
        return dict(meta) if meta is not None else self.inner.store_meta(name)

    def store_names(self) -> list[str]:
        return sorted(set(self.inner.store_names()) | set(self._metas))

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        self._metas[name] = dict(meta)

    @property
    def replayed_metas(self) -> dict[str, dict[str, Any]]:
        """Store metadata the replay wrote (format upgrades), by store."""
        return {k: dict(v) for k, v in self._metas.items()}

    def tail_dbs(self) -> list[bytes]:
        """The databases the replay touched."""
        return list(self._tails)

    def tail_of(self, db: bytes) -> _Tail | None:
        """The replayed rows of database ``db`` (None: the replay did not touch it)."""
        return self._tails.get(db)

    def tail_applies(self, store: str, on_disk: int | None) -> bool:
        """Whether the tail of ``store`` still applies: its files are still below the replayed
        offset. Files only move forward from the tail's base, and every key they changed since
        is in the tail with its value at the replayed offset, so the tail over any such state
        is the replayed state; once they reach it (a writer restored or committed), the files
        alone are read."""
        end = self._offsets.get(store)
        return end is not None and (on_disk is None or on_disk < end)

    def _committed_offsets(self, stores: list[str]) -> dict[str, int | None]:
        if not self.readonly:  # replaying: each store's offset moves on from its tail's base
            return {s: self._offsets.get(s, self._base.get(s)) for s in stores}
        return {s: self.committed_offset(s) for s in stores}

    def committed_offset(self, store: str) -> int | None:
        on_disk = self.inner.committed_offset(store)
        return self._offsets[store] if self.tail_applies(store, on_disk) else on_disk

    def live_tail(self, db: bytes) -> _Tail | None:
        tail = self._tails.get(db)
        if tail is None or not self.tail_applies(
            tail.store, self.inner.committed_offset(tail.store)
        ):
            return None
        return tail

    # -- committed tier -----------------------------------------------------------------------

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        tail = self.live_tail(db)
        if tail is not None:
            if key in tail.rows:
                value: bytes | None = tail.rows[key]
                return value
            if tail.dropped:
                return None
        return self.inner.get(db, key, shared=True)

    def source(self, db: bytes, *, shared: bool = False) -> ChunkSource:
        lower = self.inner.source(db, shared=True)
        if db not in self._tails:
            return lower

        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            tail = self.live_tail(db)
            src = lower if tail is None else _merged(tail, lower)
            return src.read_chunk(rng, reverse, n)

        return FnSource(read)

    def count(self, db: bytes, *, shared: bool = False) -> int:
        tail = self.live_tail(db)
        if tail is None:
            return self.inner.count(db, shared=True)
        return sum(1 for _ in _iter_source(_merged(tail, self.inner.source(db, shared=True))))

    def read_range(
        self,
        db: bytes,
        lo: bytes,
        hi: bytes,
        reverse: bool = False,
        limit: int = 64,
        shared: bool = False,
    ) -> tuple[list[Row], bool]:
        tail = self.live_tail(db)
        if tail is None:
            return self.inner.read_range(db, lo, hi, reverse, limit, True)
        return _read_range(
            _merged(tail, self.inner.source(db, shared=True)), lo, hi, reverse, limit
        )

    def read_atomic(self, dbs: Sequence[bytes], fn: Callable[[AtomicReads], T]) -> T:
        def inner_fn(reads: AtomicReads) -> T:
            return fn(_TailReads(self, reads))

        return self.inner.read_atomic(dbs, inner_fn)

    def snapshot(self) -> Snapshot:
        self.check_usable()
        snap = _TailSnapshot(self, self.inner.snapshot())
        self._track_snapshot(snap)
        return snap

    def reader_check(self) -> int:
        return self.inner.reader_check()

    def _release(self) -> None:
        self.end_replay()
        self.inner.close()


def _iter_source(source: ChunkSource) -> Any:
    rng = KeyRange()
    while True:
        rows, frontier = source.read_chunk(rng, False, 1024)
        yield from rows
        if frontier is None:
            return
        rng = rng.after(frontier, False)


class _TailReads(AtomicReads):
    """The wrapped partition's atomic reads with the tail laid over them."""

    def __init__(self, rp: ReplayedPartition, reads: AtomicReads) -> None:
        self._rp = rp
        self._reads = reads

    def _tail(self, db: bytes) -> _Tail | None:
        return self._rp.live_tail(db)

    def get(self, db: bytes, key: bytes) -> bytes | None:
        tail = self._tail(db)
        if tail is not None and (key in tail.rows or tail.dropped):
            value: bytes | None = tail.rows.get(key)
            return value
        return self._reads.get(db, key)

    def read_chunk(
        self, db: bytes, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        lower = FnSource(lambda r, rev, k: self._reads.read_chunk(db, r, rev, k))
        tail = self._tail(db)
        return (lower if tail is None else _merged(tail, lower)).read_chunk(rng, reverse, n)

    def read_range(
        self, db: bytes, lo: bytes, hi: bytes, reverse: bool, limit: int
    ) -> tuple[list[Row], bool]:
        tail = self._tail(db)
        if tail is None:
            return self._reads.read_range(db, lo, hi, reverse, limit)
        lower = FnSource(lambda r, rev, k: self._reads.read_chunk(db, r, rev, k))
        return _read_range(_merged(tail, lower), lo, hi, reverse, limit)


class _TailSnapshot(Snapshot):
    """A snapshot of the wrapped partition with the tail laid over it. Whether each store's
    tail applies is decided once, from the offsets the snapshot reads."""

    def __init__(self, rp: ReplayedPartition, inner: Snapshot) -> None:
        super().__init__(rp)
        self.inner = inner
        self._closed = False
        self._live = {
            store
            for store in rp.replayed_offsets
            if rp.tail_applies(store, inner.committed_offset(store))
        }
        self._rp = rp

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def replayed(self) -> ReplayedPartition:
        return self._rp

    def live_tails(self) -> dict[bytes, _Tail]:
        """The tails this snapshot lays over its partition, by database."""
        out = {}
        for db in self._rp.tail_dbs():
            tail = self._tail(db)
            if tail is not None:
                out[db] = tail
        return out

    def _tail(self, db: bytes) -> _Tail | None:
        tail = self._rp.tail_of(db)
        return tail if tail is not None and tail.store in self._live else None

    def get(self, db: bytes, key: bytes) -> bytes | None:
        self._check()
        tail = self._tail(db)
        if tail is not None and (key in tail.rows or tail.dropped):
            value: bytes | None = tail.rows.get(key)
            return value
        return self.inner.get(db, key)

    def source(self, db: bytes) -> ChunkSource:
        tail = self._tail(db)
        lower = self.inner.source(db)
        return lower if tail is None else _merged(tail, lower)

    def count(self, db: bytes) -> int:
        tail = self._tail(db)
        if tail is None:
            return self.inner.count(db)
        return sum(1 for _ in _iter_source(self.source(db)))

    def committed_offset(self, store: str) -> int | None:
        if store in self._live:
            return self._rp.replayed_offsets[store]
        return self.inner.committed_offset(store)

    def txn_id(self) -> int:
        """The LMDB transaction the snapshot reads (with the same tail: the same bytes)."""
        txnid: int = self.inner.txn_id()  # type: ignore[attr-defined]
        return txnid

    def copy_env(self, dest: str) -> None:
        """The wrapped snapshot's copy of its LMDB transaction (without the tail: see
        :func:`write_tail`)."""
        self.inner.copy_env(dest)  # type: ignore[attr-defined]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.inner.close()


def write_tail(snapshot: Snapshot, data_dir: str) -> bool:
    """Write the tail that ``snapshot`` lays over its partition into the LMDB environment in
    ``data_dir``: a private copy of exactly the transaction the snapshot reads (a snapshot
    directory being built), so that the copy holds the committed state the snapshot serves.
    One write transaction: dropped databases, rows, store metadata and offsets. Returns
    whether there was anything to write (False for a snapshot of a plain partition)."""
    if not isinstance(snapshot, _TailSnapshot):
        return False
    tails = snapshot.live_tails()
    if not tails:
        return False
    rp = snapshot.replayed
    sealed = bool(getattr(rp.inner, "checksums", False))
    size = os.path.getsize(os.path.join(data_dir, "data.mdb"))
    extra = sum(len(k) + len(v or b"") + 64 for t in tails.values() for k, v in t.rows.items())
    env = lmdb.open(data_dir, map_size=2 * size + 4 * extra + 64 * 2**20, max_dbs=len(tails) + 2)
    try:
        with env.begin(write=True) as txn:
            meta_db = env.open_db(META_DB, txn=txn)
            for db, tail in sorted(tails.items()):
                h = env.open_db(db, txn=txn)
                if tail.dropped:
                    txn.drop(h, delete=not tail.rows)  # a dropped segment goes
                    if not tail.rows:
                        continue
                for k, v in tail.rows.items():
                    if v is None:
                        txn.delete(k, db=h)
                    else:  # as the partition's own commits store it: sealed if it seals
                        txn.put(k, seal(k, v) if sealed else v, db=h)
            for store in sorted({t.store for t in tails.values()}):
                txn.put(
                    OFFSET_PREFIX + store.encode(),
                    OFFSET.pack(rp.replayed_offsets[store]),
                    db=meta_db,
                )
                meta = rp.replayed_metas.get(store)
                if meta is not None:
                    raw = json.dumps(meta, sort_keys=True).encode()
                    txn.put(META_PREFIX + store.encode(), raw, db=meta_db)
        env.sync(True)
    except lmdb.Error as exc:
        raise StorageError(f"writing the replayed tail into {data_dir!r} failed: {exc}") from exc
    finally:
        env.close()
    return True
