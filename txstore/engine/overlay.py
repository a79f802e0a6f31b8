"""The uncommitted write buffer: KIP-892's "secondary store for uncommitted writes".

A transactional store never writes to LMDB directly: its writes go to a :class:`DbOverlay`, one
per named database, holding key -> value or tombstone (``None``). All the overlays of a partition
live in one :class:`Overlay`, which enforces a shared memory budget. ``commit`` applies them to
LMDB in one write transaction; ``recover`` discards them.

**Memory tier.** A plain ``dict`` for point operations plus a sorted index (a sortedcontainers
``SortedList``) maintained lazily: it is built from the dict at the first ordered read (a range
scan); from then on a new key is appended to a pending list, and the pending keys are merged
into the index (``SortedList.update``) at the next ordered read. Commit and spill do not use the
index: they sort the dict in C (:func:`~txstore.engine.checksums.sort_rows`). Until a range
scan, a put costs a dict insert and nothing else: measured with tracemalloc, 52 bytes a staged
record besides its key and value (the dict's slot at its load factor), 60 with a pending list.
Measured on the build machine (300k random 13-byte keys): a ``SortedDict`` insert cost 1.31 us,
the dict insert plus pending append 0.12 us (10.9x faster); building the index from 300k keys
took 86 ms (0.29 us a key), so even a put-everything-then-scan load is 3x faster, and an
interleaved "1000 puts, one short range scan" load ran at 0.50M puts/s against 0.46M/s for
``SortedDict``.

**Budget and spill.** Each entry is counted as ``len(key) + len(value) + ENTRY_OVERHEAD`` bytes,
where ``ENTRY_OVERHEAD`` is the measured Python cost of an entry (two bytes objects, a dict slot,
index slots). Past the partition's budget every memory tier is **spilled**: written, sorted, as
a new sorted run into the partition's disposable spill environment (:mod:`txstore.engine.spill`:
append-only runs, merged in tiers of 8), then cleared. Reads see memory tier over the runs
(newest first) over committed data, so uncommitted state is bounded by disk, not RAM.
Measured with ``perf/bench_kv.py`` (2M puts of random 16-byte keys and 100-byte values under a
4 MiB budget, in a fresh process): the process grew by 16-20 MiB (VmRSS; 555 MiB when every
spill inserted into one growing B-tree per database), the puts ran at 500-570k/s (180-230k/s)
and wrote 0.65 GB (7.5 GB). Spilled entries keep the count they had in memory, so
``uncommitted_bytes`` does not jump at a spill, and keys overwritten across spills are counted
twice (an over-estimate; merging runs does not change the counts).

**Commit of a spilled overlay.** It is still one LMDB write transaction (commit is atomic), and
LMDB holds that transaction's dirty pages in memory until it commits (it spills them itself
only past about 512 MiB): committing those 2M spilled puts raised the peak RSS to 562-578 MiB
(1,071-1,098 MiB before the runs), for about 250 MiB of new LMDB pages. That cost cannot be
bounded without giving up atomicity: to keep it down, commit more often. Reading the runs
during the commit adds little to it (the spill map is reopened as reads go, see
:mod:`txstore.engine.spill`).

The in-memory store flavour has no spill environment; its overlay never spills.

Thread model: an overlay belongs to its partition's single writer thread.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

from sortedcontainers import SortedList

from txstore import faults
from txstore.engine.checksums import seal_rows, sort_columns, sort_rows
from txstore.engine.iterators import (
    KeyRange,
    MergedSource,
    Row,
)
from txstore.engine.spill import (
    MERGE_FANOUT,
    NOT_FOUND,
    NotFoundType,
    Run,
    RunsSource,
    SpillEnv,
)
from txstore.errors import StorageError

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

_COMMIT_CHUNK: Final = 8192
_PUT_CHUNK: Final = 256
"""Rows :meth:`DbOverlay.put_many` stages between two checks of the memory budget: the
overlay passes its budget by at most that many rows before it spills."""


class SortedKeys(SortedList):  # type: ignore[misc]  # sortedcontainers ships no type hints
    """The sorted index of a memory tier: a ``SortedList`` of keys that names the two lists
    :meth:`DbOverlay.read_small` bisects. ``SortedList`` keeps its keys in sorted sublists
    (``lists``) and each sublist's last key in ``maxes``; it changes both in place and never
    rebinds them after its constructor (stable since sortedcontainers 2.0), so the names given
    here stay the live lists. Read them only, never change them."""

    maxes: list[bytes]
    lists: list[list[bytes]]

    def __init__(self, iterable: Iterable[bytes] | None = None) -> None:
        super().__init__(iterable)
        self.maxes = self._maxes
        self.lists = self._lists


def index_chunk(
    index: SortedKeys, mem: dict[bytes, bytes | None], rng: KeyRange, reverse: bool, n: int
) -> tuple[list[Row], bytes | None]:
    """What :func:`~txstore.engine.chunk_reads.read_sorted_chunk` returns for a memory tier,
    without a Python step per key: the range's two ends are positions found by bisection
    (``SortedList.bisect_left``/``bisect_right``), its keys one slice of the index (copies of
    the sublists, in C) and the rows ``zip(keys, map(mem.__getitem__, keys))``, where
    ``irange`` yields key by key from a Python generator. O(log N + n)."""
    lo, hi = rng.lo, rng.hi
    a, b = 0, len(index)
    if lo is not None:
        a = index.bisect_left(lo) if rng.lo_inclusive else index.bisect_right(lo)
    if hi is not None:
        b = index.bisect_right(hi) if rng.hi_inclusive else index.bisect_left(hi)
    if a >= b:
        return [], None
    if reverse:
        a = max(a, b - n)
    else:
        b = min(b, a + n)
    keys: list[bytes] = index[a:b]
    frontier = None if b - a < n else keys[0] if reverse else keys[-1]
    return list(zip(keys, map(mem.__getitem__, keys), strict=True)), frontier


class DbOverlay:
    """Uncommitted writes to one named database: memory tier over spilled runs.

    ``get`` is O(1) on the memory tier plus one lookup per spilled run when the database has
    spilled; ``put`` is O(1) amortized (plus a spill of the whole partition overlay when the
    budget is passed). Ordered reads first merge the pending keys into the index, O(p log n).
    ``mem`` (the memory tier's dict) and ``layered`` ("reads must look past the memory tier":
    spilled or dropped) are read by the stores' fast paths; never modify them from outside.
    """

    __slots__ = (
        "_index",
        "_merged",
        "_owner",
        "_pending",
        "dropped",
        "layered",
        "mem",
        "mem_bytes",
        "name",
        "runs",
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
        self.mem: dict[bytes, bytes | None] = {}
        # The sorted index, built at the first ordered read (None until then: a put then
        # records nothing besides the dict), and the keys added since (None without index).
        self._index: SortedKeys | None = None
        self._pending: list[bytes] | None = None
        self.runs: list[Run] = []  # spilled runs, oldest first
        self._merged: MergedSource | None = None  # memory tier over the runs, once spilled
        self.mem_bytes = 0
        self.tombstones = 0
        self.spilled_bytes = 0
        self.spilled_entries = 0
        self.spilled_tombstones = 0
        self.dropped = False
        self.layered = False

    @property
    def spilled(self) -> bool:
        """True if some of the staged writes are in the spill environment."""
        return bool(self.runs)

    # -- point operations ---------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | NotFoundType | None:
        """Value, ``None`` (tombstone, or any key of a dropped database) or NOT_FOUND."""
        v = self.mem.get(key, NOT_FOUND)
        if v is NOT_FOUND and self.layered:
            if self.runs:
                v = self._owner.spill_env().get(reversed(self.runs), key)
            if v is NOT_FOUND and self.dropped:
                return None
        return v

    def put(self, key: bytes, value: bytes | None) -> None:
        """Stage a put (``value`` bytes) or a delete (``value is None``). O(1) amortized."""
        mem = self.mem
        old = mem.get(key, NOT_FOUND)
        if old is NOT_FOUND:
            pending = self._pending
            if pending is not None:
                pending.append(key)
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

    def put_many(self, rows: Sequence[Row]) -> None:
        """Stage ``rows`` in order, as :meth:`put` does one by one (the last write of a key
        wins), checking the memory budget every :data:`_PUT_CHUNK` rows rather than every row.
        O(len(rows)) amortized; the bulk path of restore and ``put_all`` (about half the cost
        of calling :meth:`put` per row)."""
        owner = self._owner
        for start in range(0, len(rows), _PUT_CHUNK):
            mem = self.mem  # a spill replaces the memory tier: fetch it again each chunk
            get = mem.get
            pending = self._pending
            delta = 0
            tombstones = 0
            for key, value in rows[start : start + _PUT_CHUNK]:
                old = get(key, NOT_FOUND)
                if old is NOT_FOUND:
                    if pending is not None:
                        pending.append(key)
                    delta += len(key) + ENTRY_OVERHEAD
                elif old is None:
                    tombstones -= 1
                else:
                    delta -= len(old)  # type: ignore[arg-type]
                mem[key] = value
                if value is None:
                    tombstones += 1
                else:
                    delta += len(value)
            self.tombstones += tombstones
            self.mem_bytes += delta
            owner.mem_bytes += delta
            if owner.mem_bytes > owner.budget:
                owner.spill()

    def drop(self) -> None:
        """Stage "drop this whole database": discard its writes and hide its committed data."""
        self.clear()
        self.dropped = self.layered = True

    # -- state --------------------------------------------------------------------------------

    def is_empty(self) -> bool:
        """True if there is nothing to commit for this database."""
        return not self.mem and not self.runs and not self.dropped

    def uncommitted_bytes(self) -> int:
        """Approximate bytes staged, memory plus spill. O(1)."""
        return self.mem_bytes + self.spilled_bytes

    def staged_counts(self) -> tuple[int, int]:
        """``(puts, tombstones)`` staged, memory plus spill (a key re-staged across spills
        counts twice). O(1)."""
        tombstones = self.tombstones + self.spilled_tombstones
        return len(self.mem) + self.spilled_entries - tombstones, tombstones

    def _clear_memory(self) -> None:
        self._owner.mem_bytes -= self.mem_bytes
        self.mem = {}
        self._index = None
        self._pending = None
        self.mem_bytes = 0
        self.tombstones = 0

    def clear(self) -> None:
        """Discard everything staged (memory and spill). O(memory entries + spilled pages)."""
        self._clear_memory()
        if self.runs:
            runs, self.runs = self.runs, []
            self._merged = None
            self._owner.spill_env().drop(runs)
        self.spilled_bytes = 0
        self.spilled_entries = 0
        self.spilled_tombstones = 0
        self.dropped = self.layered = False

    def _sync_index(self) -> SortedKeys:
        """The sorted index of the memory tier, up to date: built from the dict at the first
        ordered read, then kept by merging the keys added since. O(p log n)."""
        index = self._index
        if index is None:
            index = self._index = SortedKeys(self.mem)
            self._pending = []
        elif self._pending:
            index.update(self._pending)
            self._pending = []
        return index

    def _sorted_rows(self, seal: bool = False) -> list[Row]:
        """The memory tier's rows in key order, each value sealed (given its checksum
        trailer) if ``seal``: one C pass over the dict (``sort_rows`` of
        :mod:`txstore.engine.checksums`), whether or not a range scan built the index.
        Measured on 200k random 16-byte keys with 100-byte values: 170 ns a row, 320 sealed,
        against 340 for ``sorted(mem.items(), key=itemgetter(0))`` and 720 for that then
        ``seal_rows`` (every comparison of the sort reads two bytes objects scattered in
        memory, and the seal then reads them again in key order)."""
        return sort_rows(self.mem, seal)

    def sorted_columns(self, seal: bool = False) -> tuple[list[bytes], list[bytes]] | None:
        """All staged rows as two lists in ascending key order, keys and values (sealed if
        ``seal``), for a cursor ``putmulti`` over ``zip``; None unless they are the memory
        tier's alone and none is a delete (then :meth:`sorted_chunks`). One C pass, as
        :meth:`_sorted_rows`, without a tuple a row."""
        if self._merged is not None or self.tombstones:
            return None
        keys, values = sort_columns(self.mem, seal)
        return keys, values  # type: ignore[return-value]  # no None: no tombstone staged

    @property
    def may_hold_tombstones(self) -> bool:
        """False only when no staged row can be a tombstone (lets commit skip a filter)."""
        return bool(self.tombstones or self.spilled_tombstones)

    def spill(self) -> None:
        """Move the memory tier, sorted, to a new spilled run; merge runs when
        :data:`~txstore.engine.spill.MERGE_FANOUT` of one level accumulated.
        O(m log m) + amortized O(m log_8 spills) appends."""
        if not self.mem:
            return
        rows: list[Row] = self._sorted_rows()
        spill = self._owner.spill_env()
        run = spill.write_run(rows, self.tombstones)
        faults.point("overlay.spill")  # spilled to disk, memory tier not yet cleared
        self.runs.append(run)
        self.spilled_bytes += self.mem_bytes
        self.spilled_entries += len(rows)
        self.spilled_tombstones += self.tombstones
        self._clear_memory()
        runs = self.runs
        while len(runs) >= MERGE_FANOUT:
            level = runs[-1].level
            group = runs[-MERGE_FANOUT:]
            if any(r.level != level for r in group):
                break
            merged = spill.merge(group, level + 1)
            runs[-MERGE_FANOUT:] = [merged]
        self._merged = MergedSource(_MemoryTier(self), RunsSource(spill, runs), True)
        self.layered = True

    # -- ordered reads ------------------------------------------------------------------------

    def read_memory_chunk(
        self, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        """A chunk of the memory tier only (a :class:`ChunkSource` read)."""
        if not self.mem:
            return [], None
        return index_chunk(self._sync_index(), self.mem, rng, reverse, n)

    def read_small(self, lo: bytes, hi: bytes, limit: int) -> list[Row] | None:
        """The staged rows of ``[lo, hi]`` (tombstones included) in ascending order, when
        they are all in the memory tier (nothing spilled, no drop staged) and at most
        ``limit``; else None (read through :meth:`read_chunk`). O(log n + rows).

        It bisects the index's sorted sublists directly (:class:`SortedKeys`' ``lists``, and
        ``maxes``, each sublist's last key; stable since sortedcontainers 2.0):
        a range with nothing staged, the common case of a fetch, costs two C bisections
        instead of an ``irange`` (measured: about 0.2 against 1.5 us)."""
        if self.layered:
            return None
        mem = self.mem
        if not mem:
            return []
        index = self._index
        if index is None or self._pending:
            index = self._sync_index()
        maxes = index.maxes
        pos = bisect_left(maxes, lo)
        if pos == len(maxes):
            return []
        lists = index.lists
        sub = lists[pos]
        i = bisect_left(sub, lo)
        if sub[i] > hi:  # ``maxes[pos] >= lo``, so ``sub[i]`` exists
            return []
        out: list[Row] = []
        while True:
            j = bisect_right(sub, hi, i)
            for k in sub[i:j]:
                out.append((k, mem[k]))
            if len(out) > limit:
                return None
            pos += 1
            if j < len(sub) or pos == len(lists):
                return out
            sub = lists[pos]
            i = 0

    def read_chunk(self, rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
        """A chunk of the merged overlay (memory over spill), tombstones included."""
        merged = self._merged
        if merged is None:
            return self.read_memory_chunk(rng, reverse, n)
        out = merged.read_chunk(rng, reverse, n)
        self._owner.spill_env().relieve()
        return out

    def sorted_chunks(self, n: int = _COMMIT_CHUNK, seal: bool = False) -> Iterator[list[Row]]:
        """All staged rows in ascending key order, in chunks (for commit); every value sealed
        (see :func:`~txstore.engine.checksums.seal_rows`) if ``seal``. A memory tier alone is
        one chunk."""
        if self._merged is None:
            if self.mem:
                yield self._sorted_rows(seal)
            return
        rng = KeyRange()
        while True:
            rows, frontier = self.read_chunk(rng, False, n)
            if rows:
                yield seal_rows(rows) if seal else rows
            if frontier is None:
                return
            rng = rng.after(frontier, False)

    def _check(self) -> None:
        """Assert the internal invariants (used by the tests)."""
        if self._index is None:
            assert self._pending is None
        else:
            assert self._pending is not None
            keys = list(self._index) + self._pending
            assert len(keys) == len(set(keys)) == len(self.mem), "index and dict disagree"
            assert set(keys) == set(self.mem)
            assert list(self._index) == sorted(self._index)
        expect = sum(
            len(k) + (0 if v is None else len(v)) + ENTRY_OVERHEAD for k, v in self.mem.items()
        )
        assert self.mem_bytes == expect, (self.mem_bytes, expect)
        assert self.tombstones == sum(1 for v in self.mem.values() if v is None)
        assert self.layered == bool(self.runs or self.dropped)
        assert (self._merged is None) == (not self.runs)
        levels = [r.level for r in self.runs]
        assert levels == sorted(levels, reverse=True), levels
        assert all(levels.count(lv) < MERGE_FANOUT for lv in levels), levels


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
