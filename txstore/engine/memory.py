"""In-memory partitions: the committed tier of in-memory stores.

:class:`MemoryPartition` offers the :class:`~txstore.engine.base.PartitionBase` interface
with one ``SortedDict`` per named database instead of an LMDB environment: no files, no spill,
offsets kept in memory. In-memory stores therefore run the same store code, overlay and commit
path as persistent ones, and lose everything on close.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import Any, TypeVar

from sortedcontainers import SortedDict

from txstore.engine.base import AtomicReads, PartitionBase, Snapshot
from txstore.engine.chunk_reads import read_sorted_chunk
from txstore.engine.iterators import ChunkSource, FnSource, KeyRange, Row, no_rows
from txstore.engine.overlay import Overlay

__all__ = ["MemoryPartition"]

T = TypeVar("T")


class MemoryPartition(PartitionBase):
    """The in-memory committed tier: a ``SortedDict`` per database; same interface as
    :class:`~txstore.engine.partition.Partition`.

    No files and no spill; metadata and offsets live in memory and vanish with the object.
    Commit applies the overlay under a lock, O(log n) a row; shared reads take the lock for one
    chunk. The first write to a database after a snapshot was taken copies that database
    (copy-on-write, O(n) once per snapshot and database), so open snapshots never change.
    """

    def __init__(self, *, overlay_budget_bytes: int = 64 * 2**20) -> None:
        super().__init__()
        self.overlay = Overlay(overlay_budget_bytes, None)
        self._data: dict[bytes, SortedDict] = {}
        self._metas: dict[str, str] = {}
        self._offsets: dict[str, int] = {}
        self._lock = threading.RLock()  # RLock: a snapshot collected by GC closes under it
        self._open_snapshots = 0
        self._shared: set[bytes] = set()  # databases whose table an open snapshot holds

    def store_meta(self, name: str) -> dict[str, Any] | None:
        self.check_usable()
        raw = self._metas.get(name)
        return None if raw is None else dict(json.loads(raw))

    def store_names(self) -> list[str]:
        self.check_usable()
        return sorted(self._metas)

    def committed_offset(self, store: str) -> int | None:
        self.check_usable()
        return self._offsets.get(store)

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        self._metas[name] = json.dumps(meta, sort_keys=True)

    def _table(self, db: bytes) -> SortedDict:
        sd = self._data.get(db)
        if sd is None:
            sd = self._data[db] = SortedDict()
        elif db in self._shared:
            # copy-on-write, once per snapshot and database: open snapshots keep the old one
            sd = self._data[db] = sd.copy()
            self._shared.discard(db)
        return sd

    def _apply(self, offsets: dict[str, int]) -> None:
        assert self.overlay is not None
        with self._lock:
            for name in offsets:
                for ov in self.overlay.dbs(name):
                    if ov.dropped:
                        self._data.pop(ov.name, None)
                    if ov.is_empty():
                        continue
                    sd = self._table(ov.name)
                    for chunk in ov.sorted_chunks():
                        _apply_rows(sd, chunk)
            self._offsets.update(offsets)

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        self._check_writable()
        with self._lock:
            _apply_rows(self._table(db), rows)

    def write_through_dbs(
        self, writes: Mapping[bytes, list[Row]], drops: Sequence[bytes] = ()
    ) -> None:
        self._check_writable()
        with self._lock:
            for db in drops:
                self._data.pop(db, None)
                self._shared.discard(db)
            for db, rows in writes.items():
                _apply_rows(self._table(db), rows)

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        self.check_usable()
        sd = self._data.get(db)
        return None if sd is None else sd.get(key)  # dict.get: atomic under the GIL

    def source(self, db: bytes, *, shared: bool = False) -> ChunkSource:
        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            self.check_usable()
            sd = self._data.get(db)
            if sd is None:
                return no_rows()
            if not shared:
                return read_sorted_chunk(sd, sd, rng, reverse, n)
            with self._lock:
                return read_sorted_chunk(sd, sd, rng, reverse, n)

        return FnSource(read)

    def count(self, db: bytes, *, shared: bool = False) -> int:
        self.check_usable()
        sd = self._data.get(db)
        return 0 if sd is None else len(sd)

    def read_range(
        self,
        db: bytes,
        lo: bytes,
        hi: bytes,
        reverse: bool = False,
        limit: int = 64,
        shared: bool = False,
    ) -> tuple[list[Row], bool]:
        self.check_usable()
        sd = self._data.get(db)
        if sd is None:
            return [], False
        with self._lock if shared else contextlib.nullcontext():
            keys = list(islice(sd.irange(lo, hi, reverse=reverse), limit + 1))
            more = len(keys) > limit
            if more:
                del keys[limit:]
            if reverse:
                keys.reverse()
            return [(k, sd[k]) for k in keys], more

    def read_atomic(self, dbs: Sequence[bytes], fn: Callable[[AtomicReads], T]) -> T:
        self.check_usable()
        with self._lock:  # commits apply under it: every read in fn sees one state
            return fn(_MemoryReads(self))

    def snapshot(self) -> Snapshot:
        self.check_usable()
        with self._lock:
            snap = _MemorySnapshot(self, dict(self._data), dict(self._offsets))
            self._open_snapshots += 1
            self._shared = set(self._data)
        self._track_snapshot(snap)
        return snap

    def release_snapshot(self) -> None:
        """Called once by each snapshot of this partition when it closes: once none is open,
        writes stop copying the tables the snapshots held."""
        with self._lock:
            self._open_snapshots -= 1
            if not self._open_snapshots:
                self._shared.clear()


class _MemoryReads(AtomicReads):
    """:class:`AtomicReads` of a :class:`MemoryPartition` (its lock held by the caller)."""

    def __init__(self, mp: MemoryPartition) -> None:
        self._mp = mp

    def get(self, db: bytes, key: bytes) -> bytes | None:
        return self._mp.get(db, key)

    def read_range(
        self, db: bytes, lo: bytes, hi: bytes, reverse: bool, limit: int
    ) -> tuple[list[Row], bool]:
        return self._mp.read_range(db, lo, hi, reverse, limit)

    def read_chunk(
        self, db: bytes, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        return self._mp.source(db).read_chunk(rng, reverse, n)


def _apply_rows(sd: SortedDict, rows: list[Row]) -> None:
    pop = sd.pop
    for k, v in rows:
        if v is None:
            pop(k, None)
        else:
            sd[k] = v


class _MemorySnapshot(Snapshot):
    def __init__(
        self, partition: MemoryPartition, data: dict[bytes, SortedDict], offsets: dict[str, int]
    ) -> None:
        super().__init__(partition)
        self._mp = partition
        self._data = data
        self._offsets = offsets
        self._closed = False

    def get(self, db: bytes, key: bytes) -> bytes | None:
        self._check()
        sd = self._data.get(db)
        return None if sd is None else sd.get(key)

    def source(self, db: bytes) -> ChunkSource:
        sd = self._data.get(db)

        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            self._check()
            return no_rows() if sd is None else read_sorted_chunk(sd, sd, rng, reverse, n)

        return FnSource(read)

    def count(self, db: bytes) -> int:
        self._check()
        sd = self._data.get(db)
        return 0 if sd is None else len(sd)

    def committed_offset(self, store: str) -> int | None:
        self._check()
        return self._offsets.get(store)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._data = {}
            self._mp.release_snapshot()
