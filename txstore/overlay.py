"""The uncommitted write buffer: KIP-892's "secondary store for uncommitted writes".

A transactional store never writes to LMDB directly: its writes go to a :class:`DbOverlay`, one
per named database, holding key -> value or tombstone (``None``). All the overlays of a partition
live in one :class:`Overlay`, which enforces a shared memory budget. ``commit`` applies them to
LMDB in one write transaction; ``recover`` discards them.

**Memory tier.** A plain ``dict`` for point operations plus a sorted index (a sortedcontainers
``SortedList``) maintained lazily: a new key is appended to a pending list, and the pending keys
are merged into the index (``SortedList.update``) only when an ordered scan, a spill or a commit
needs the order. Measured on the build machine (300k random 13-byte keys): a ``SortedDict``
insert cost 1.31 us, the dict insert plus pending append 0.12 us (10.9x faster); building the
index from 300k pending keys took 86 ms (0.29 us a key), so even a put-everything-then-scan load
is 3x faster, and an interleaved "1000 puts, one short range scan" load ran at 0.50M puts/s
against 0.46M/s for ``SortedDict``.

**Budget and spill.** Each entry is counted as ``len(key) + len(value) + ENTRY_OVERHEAD`` bytes,
where ``ENTRY_OVERHEAD`` is the measured Python cost of an entry (two bytes objects, a dict slot,
index slots). Past the partition's budget every memory tier is **spilled**, in sorted order, into
the partition's disposable spill environment (``<partition>/spill``, an LMDB environment opened
with ``sync=False, metasync=False``; one named database per data database; values carry a 1-byte
tag, ``0x00`` for a tombstone and ``0x01`` followed by the value for a put), then cleared. Reads
see memory tier over spill tier over committed data, so uncommitted state is bounded by disk,
not RAM. Measured: 2M uncommitted puts (8-byte keys, 8-byte values) under a 1 MiB budget ran at
0.92M puts/s and grew anonymous RSS from 10 to 13 MiB (the spill file's pages show up as
file-backed, reclaimable RSS while scanned); the commit then applied them in 0.97 s, during
which LMDB's write transaction holds its dirty pages in heap (LMDB spills them itself past
~512 MiB). Spilled entries keep the count they
had in memory, so ``uncommitted_bytes`` does not jump at a spill, and keys overwritten across
spills are counted twice (an over-estimate).

The in-memory store flavour has no spill environment; its overlay never spills.

Thread model: an overlay belongs to its partition's single writer thread.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any, Final

import lmdb
from sortedcontainers import SortedList

from txstore import faults
from txstore.errors import StorageError
from txstore.iterators import (
    KeyRange,
    MergedSource,
    Row,
    read_lmdb_chunk,
    read_sorted_chunk,
)

__all__ = [
    "ENTRY_OVERHEAD",
    "NOT_FOUND",
    "DbOverlay",
    "NotFoundType",
    "Overlay",
    "SpillEnv",
]

ENTRY_OVERHEAD: Final = 128
"""Python bytes per overlay entry besides key and value lengths: measured with tracemalloc at
126.5 (200k fresh entries, 8- and 100-byte values, index built or pending): two bytes object
headers (2 x 33), a dict slot (~45 at that load factor) and the index/pending slot (~16)."""

_TAG_PUT: Final = b"\x01"
_TAG_TOMBSTONE: Final = b"\x00"
_COMMIT_CHUNK: Final = 8192


class NotFoundType:
    """Type of :data:`NOT_FOUND`: "the overlay says nothing about this key"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_FOUND"


NOT_FOUND: Final = NotFoundType()


def remove_dir(path: str) -> None:
    """Delete a directory tree if it exists (used for the disposable spill environment)."""
    if os.path.lexists(path):
        try:
            shutil.rmtree(path)
        except OSError as exc:
            raise StorageError(
                f"cannot delete the spill directory {path!r}: {exc}; remove it by hand"
            ) from exc


class _SpillTier:
    """A :class:`ChunkSource` over one spilled database (decodes the tags)."""

    __slots__ = ("_name", "_spill")

    def __init__(self, spill: SpillEnv, name: bytes) -> None:
        self._spill = spill
        self._name = name

    def read_chunk(self, rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
        rows, frontier = self._spill.read_chunk(self._name, rng, reverse, n)
        return [(k, v[1:] if v[0] else None) for k, v in rows], frontier


class SpillEnv:
    """The partition's disposable secondary LMDB environment, opened lazily.

    Used by the writer thread only. Every operation is one short LMDB transaction.
    """

    def __init__(self, path: str, *, max_dbs: int, map_size: int) -> None:
        self.path = path
        self._max_dbs = max_dbs
        self._map_size = map_size
        self._env: Any = None
        self._dbs: dict[bytes, Any] = {}

    @property
    def is_open(self) -> bool:
        """True while the spill environment exists on disk."""
        return self._env is not None

    def _handle(self, name: bytes) -> Any:
        db = self._dbs.get(name)
        if db is None:
            if self._env is None:
                remove_dir(self.path)
                self._env = lmdb.open(
                    self.path,
                    map_size=self._map_size,
                    max_dbs=self._max_dbs,
                    sync=False,
                    metasync=False,
                    subdir=True,
                    max_spare_txns=0,  # see Partition: spare txns break the parent after a fork
                )
            db = self._dbs[name] = self._env.open_db(name)
        return db

    def write(self, name: bytes, rows: list[Row]) -> None:
        """Write ascending rows, tagged, into the spill database ``name``.

        O(len(rows) log N), one unsynced write transaction; grows the map when full.
        """
        tagged = [(k, _TAG_TOMBSTONE if v is None else _TAG_PUT + v) for k, v in rows]
        while True:
            db = self._handle(name)
            txn = self._env.begin(write=True, db=db)
            try:
                cur = txn.cursor()
                if tagged and (not cur.last() or cur.key() < tagged[0][0]):
                    _, added = cur.putmulti(tagged, True, True, True)
                    if added != len(tagged):
                        raise StorageError(
                            f"spill append wrote {added} of {len(tagged)} rows: keys not sorted"
                        )
                else:
                    cur.putmulti(tagged)
                txn.commit()
                return
            except lmdb.MapFullError:
                txn.abort()
                self._env.set_mapsize(self._env.info()["map_size"] * 2)
            except BaseException:
                txn.abort()
                raise

    def get(self, name: bytes, key: bytes) -> bytes | NotFoundType | None:
        """The spilled value (None: tombstone) of ``key``, or NOT_FOUND. O(log N)."""
        db = self._handle(name)
        with self._env.begin(db=db) as txn:
            v = txn.get(key)
        if v is None:
            return NOT_FOUND
        return v[1:] if v[0] else None

    def read_chunk(
        self, name: bytes, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Any], bytes | None]:
        """One chunk of raw (tagged) rows of a spilled database, in its own read transaction."""
        db = self._handle(name)
        with self._env.begin(db=db) as txn:
            return read_lmdb_chunk(txn.cursor(), rng, reverse, n)

    def drop(self, name: bytes) -> None:
        """Delete one spilled database. O(its pages)."""
        db = self._dbs.pop(name, None)
        if db is not None:
            with self._env.begin(write=True) as txn:
                txn.drop(db, delete=True)

    def close(self) -> None:
        """Close the environment and delete its directory. Idempotent."""
        if self._env is not None:
            self._env.close()
            self._env = None
        self._dbs.clear()
        remove_dir(self.path)


class DbOverlay:
    """Uncommitted writes to one named database: memory tier over spill tier.

    ``get`` is O(1) on the memory tier plus one spill read when the database has spilled;
    ``put`` is O(1) amortized (plus a spill of the whole partition overlay when the budget is
    passed). Ordered reads first merge the pending keys into the index, O(p log n).
    """

    __slots__ = (
        "_index",
        "_mem",
        "_merged",
        "_owner",
        "_pending",
        "_spill_tier",
        "dropped",
        "mem_bytes",
        "name",
        "spilled",
        "spilled_bytes",
        "spilled_entries",
        "spilled_tombstones",
        "store",
        "tombstones",
    )

    def __init__(self, owner: Overlay, store: str, name: bytes) -> None:
        self._owner = owner
        self.store = store
        self.name = name
        self._mem: dict[bytes, bytes | None] = {}
        self._index: SortedList = SortedList()
        self._pending: list[bytes] = []
        self._spill_tier: _SpillTier | None = None
        self._merged: MergedSource | None = None
        self.mem_bytes = 0
        self.tombstones = 0
        self.spilled = False
        self.spilled_bytes = 0
        self.spilled_entries = 0
        self.spilled_tombstones = 0
        self.dropped = False

    # -- point operations ---------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | NotFoundType | None:
        """Value, ``None`` (tombstone, or any key of a dropped database) or NOT_FOUND."""
        v = self._mem.get(key, NOT_FOUND)
        if v is NOT_FOUND:
            if self.spilled:
                v = self._owner.spill_env().get(self.name, key)
            if v is NOT_FOUND and self.dropped:
                return None
        return v

    def put(self, key: bytes, value: bytes | None) -> None:
        """Stage a put (``value`` bytes) or a delete (``value is None``). O(1) amortized."""
        mem = self._mem
        old = mem.get(key, NOT_FOUND)
        if old is NOT_FOUND:
            self._pending.append(key)
            delta = len(key) + ENTRY_OVERHEAD
        elif old is None:
            delta = 0
            self.tombstones -= 1
        else:
            delta = -len(old)  # type: ignore[arg-type]
        mem[key] = value
        if value is None:
            self.tombstones += 1
        else:
            delta += len(value)
        self.mem_bytes += delta
        owner = self._owner
        owner.mem_bytes += delta
        if owner.mem_bytes > owner.budget:
            owner.spill()

    def drop(self) -> None:
        """Stage "drop this whole database": discard its writes and hide its committed data."""
        self.clear()
        self.dropped = True

    # -- state --------------------------------------------------------------------------------

    def is_empty(self) -> bool:
        """True if there is nothing to commit for this database."""
        return not self._mem and not self.spilled and not self.dropped

    def uncommitted_bytes(self) -> int:
        """Approximate bytes staged, memory plus spill. O(1)."""
        return self.mem_bytes + self.spilled_bytes

    def staged_counts(self) -> tuple[int, int]:
        """``(puts, tombstones)`` staged, memory plus spill (a key re-staged across spills
        counts twice). O(1)."""
        tombstones = self.tombstones + self.spilled_tombstones
        return len(self._mem) + self.spilled_entries - tombstones, tombstones

    def clear(self) -> None:
        """Discard everything staged (memory and spill). O(memory entries + spilled pages)."""
        self._owner.mem_bytes -= self.mem_bytes
        self._mem = {}
        self._index = SortedList()
        self._pending = []
        self.mem_bytes = 0
        self.tombstones = 0
        if self.spilled:
            self._owner.spill_env().drop(self.name)
            self.spilled = False
            self._spill_tier = None
            self._merged = None
        self.spilled_bytes = 0
        self.spilled_entries = 0
        self.spilled_tombstones = 0
        self.dropped = False

    def _sync_index(self) -> None:
        if self._pending:
            self._index.update(self._pending)
            self._pending = []

    def _sorted_rows(self) -> list[Row]:
        """The memory tier's rows in key order. When no range scan has built the index, one
        ``sorted`` of the dict's items is cheaper than building the index and looking every key
        up again (measured on 200k keys: 438 against 707 ns a key); keys are unique, so the
        tuples never compare their values."""
        mem = self._mem
        if not self._index:
            return sorted(mem.items())
        self._sync_index()
        return [(k, mem[k]) for k in self._index]

    @property
    def may_hold_tombstones(self) -> bool:
        """False only when no staged row can be a tombstone (lets commit skip a filter)."""
        return bool(self.tombstones or self.spilled)

    def spill(self) -> None:
        """Move the memory tier, sorted, to the spill tier. O(m log m + m log N)."""
        if not self._mem:
            return
        rows: list[Row] = self._sorted_rows()
        spill = self._owner.spill_env()
        spill.write(self.name, rows)
        faults.point("overlay.spill")  # spilled to disk, memory tier not yet cleared
        self.spilled_bytes += self.mem_bytes
        self.spilled_entries += len(rows)
        self.spilled_tombstones += self.tombstones
        if not self.spilled:
            self.spilled = True
            self._spill_tier = _SpillTier(spill, self.name)
            self._merged = MergedSource(_MemoryTier(self), self._spill_tier, True)
        self._owner.mem_bytes -= self.mem_bytes
        self._mem = {}
        self._index = SortedList()
        self._pending = []
        self.mem_bytes = 0
        self.tombstones = 0

    # -- ordered reads ------------------------------------------------------------------------

    def read_memory_chunk(
        self, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        """A chunk of the memory tier only (a :class:`ChunkSource` read)."""
        if not self._mem:
            return [], None
        if self._pending:
            self._sync_index()
        return read_sorted_chunk(self._index, self._mem, rng, reverse, n)

    def read_chunk(self, rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
        """A chunk of the merged overlay (memory over spill), tombstones included."""
        merged = self._merged
        if merged is None:
            return self.read_memory_chunk(rng, reverse, n)
        return merged.read_chunk(rng, reverse, n)

    def sorted_chunks(self, n: int = _COMMIT_CHUNK) -> Iterator[list[Row]]:
        """All staged rows in ascending key order, in chunks (for commit)."""
        if self._merged is None:
            if self._mem:
                yield self._sorted_rows()
            return
        rng = KeyRange()
        while True:
            rows, frontier = self._merged.read_chunk(rng, False, n)
            if rows:
                yield rows
            if frontier is None:
                return
            rng = rng.after(frontier, False)

    def _check(self) -> None:
        """Assert the internal invariants (used by the tests)."""
        keys = list(self._index) + self._pending
        assert len(keys) == len(set(keys)) == len(self._mem), "index and dict disagree"
        assert set(keys) == set(self._mem)
        assert list(self._index) == sorted(self._index)
        expect = sum(
            len(k) + (0 if v is None else len(v)) + ENTRY_OVERHEAD for k, v in self._mem.items()
        )
        assert self.mem_bytes == expect, (self.mem_bytes, expect)
        assert self.tombstones == sum(1 for v in self._mem.values() if v is None)


class _MemoryTier:
    __slots__ = ("_db",)

    def __init__(self, db: DbOverlay) -> None:
        self._db = db

    def read_chunk(self, rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
        return self._db.read_memory_chunk(rng, reverse, n)


class Overlay:
    """All uncommitted writes of one partition, under one memory budget.

    ``budget_bytes`` bounds the memory tiers together; past it, all of them spill (when the
    partition has a spill environment: ``spill`` is None for the in-memory flavour).
    """

    def __init__(self, budget_bytes: int, spill: SpillEnv | None) -> None:
        self._spill = spill
        self.budget: float = float(budget_bytes) if spill is not None else float("inf")
        self.mem_bytes = 0
        self._dbs: dict[bytes, DbOverlay] = {}

    def spill_env(self) -> SpillEnv:
        """The spill environment (the in-memory flavour has none and never spills)."""
        if self._spill is None:
            raise StorageError("this partition has no spill environment")
        return self._spill

    def db(self, store: str, name: bytes) -> DbOverlay:
        """The overlay of database ``name`` owned by ``store`` (created empty). O(1)."""
        ov = self._dbs.get(name)
        if ov is None:
            ov = self._dbs[name] = DbOverlay(self, store, name)
        elif ov.store != store:
            raise StorageError(
                f"database {name!r} is owned by store {ov.store!r}, not {store!r}: store "
                "database names collide"
            )
        return ov

    def dbs(self, store: str) -> list[DbOverlay]:
        """The database overlays of ``store``. O(databases)."""
        return [ov for ov in self._dbs.values() if ov.store == store]

    def uncommitted_bytes(self, store: str) -> int:
        """Approximate bytes staged by ``store`` (memory plus spill)."""
        return sum(ov.uncommitted_bytes() for ov in self.dbs(store))

    def spill(self) -> None:
        """Spill every memory tier to the spill environment (no-op without one)."""
        if self._spill is None:
            return
        for ov in list(self._dbs.values()):
            ov.spill()

    def clear_store(self, store: str) -> None:
        """Discard everything ``store`` staged; delete the spill directory once unused."""
        for ov in self.dbs(store):
            ov.clear()
        self._release_spill()

    def forget(self, name: bytes) -> None:
        """Remove the (cleared) overlay of a database that is gone for good. O(1)."""
        ov = self._dbs.pop(name, None)
        if ov is not None:
            ov.clear()
            self._release_spill()

    def _release_spill(self) -> None:
        spill = self._spill
        if spill is not None and spill.is_open and not any(o.spilled for o in self._dbs.values()):
            spill.close()

    def close(self) -> None:
        """Discard every overlay and delete the spill environment."""
        self._dbs.clear()
        self.mem_bytes = 0
        if self._spill is not None:
            self._spill.close()
