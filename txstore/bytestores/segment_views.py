"""Read-committed views of segmented stores (window and session stores): committed data
only, never the overlay, usable from any thread; see :class:`SegmentedReadCommittedView`.
The read operations themselves are shared with the store
(:mod:`txstore.bytestores.segment_reads`)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from txstore._checksums import ChecksumError, window_items
from txstore.bytestores.segment_reads import (
    SMALL_READ_LIMIT,
    RowsIterator,
    Segment,
    SegmentedReads,
    SegmentedStoreState,
    read_all,
)
from txstore.codecs import ValueFormat, convert_value
from txstore.engine.base import AtomicReads, PartitionBase, Snapshot
from txstore.engine.iterators import (
    EMPTY_SOURCE,
    ChunkSource,
    FnSource,
    IteratorRegistry,
    KeyRange,
    KeyValueIterator,
    Row,
)
from txstore.errors import InvalidStateStoreError, StoreClosedError
from txstore.types import KeyValue

__all__ = ["SegmentedReadCommittedView"]

_REG: Final = struct.Struct(">q")


class SegmentedReadCommittedView(SegmentedReads):
    """Committed data only: the committed segment registry and segments, never the overlay.

    Usable from any thread. Expiry uses the writer's observed stream time *as of its last
    commit*
    (:attr:`~txstore.bytestores.segments.SegmentedBytesStore.committed_observed_stream_time`),
    never the one uncommitted puts advanced, so uncommitted writes cannot hide committed
    records; a snapshot view keeps the one of the moment it was taken. Staged segment drops
    live in the overlay and are invisible here until committed. Each read is one or more short
    read transactions; :meth:`snapshot` gives a view where all reads see one commit.

    A segment's rows are decoded with the format its registry entry gives *in the transaction
    that read them*: every read of a segment (a get, a short fetch, each chunk of a scan) reads
    the entry and the rows together (:meth:`~txstore.engine.base.PartitionBase.read_atomic`).
    A commit that converts an old-format segment in place (lazy upgrade) rewrites both at once,
    so a reader never decodes converted rows with the old format, even when that commit lands
    between the query's listing of the segments and its reads, or between two chunks.

    Dropped segments: an open iterator of the view returns no more rows of a segment once the
    drop of that segment is **committed** (a staged drop is uncommitted state, which the view
    does not see). In the writer's process each row's segment is checked through the store's
    committed liveness cells
    (:meth:`~txstore.bytestores.segments.SegmentedBytesStore.committed_cell`); a view in
    another process sees the drop at its next chunk read, which re-reads the segment's registry
    entry (rows already buffered, at most one chunk, can still come out there). A snapshot view
    is one committed state, which a committed segment drop ends: dropping the segment's LMDB
    database invalidates the snapshot, so its iterators raise
    :class:`~txstore.errors.SnapshotInvalidatedError` at their next read.
    """

    def __init__(
        self,
        store: SegmentedStoreState,
        snapshot: Snapshot | None = None,
        observed: int | None = None,
    ) -> None:
        self.store = store
        self._snap = snapshot
        self._observed_at = observed  # None: the store's committed observed time, read live
        self.iterators = IteratorRegistry()
        self._last_registry: dict[int, ValueFormat] = {}
        self._cached: tuple[int | None, dict[int, ValueFormat]] | None = None
        #: Registry key and database name of the segments read, by id (made once each).
        self._names: dict[int, tuple[bytes, bytes]] = {}
        #: The registry of :meth:`fetch_window_items`, with the transaction id it was read at.
        self._state: _RegistryState | None = None

    @property
    def name(self) -> str:
        """The store name."""
        return self.store.name

    def check_open(self) -> None:
        self.store.check_open()
        if self._snap is not None and self._snap.closed:
            raise InvalidStateStoreError(
                f"snapshot view of store {self.store.name!r} is closed: take a new snapshot"
            )

    @property
    def observed_stream_time(self) -> int:
        """The observed stream time this view filters expired records with: the store's as of
        its last commit (of the moment the snapshot was taken, for a snapshot view)."""
        if self._observed_at is not None:
            return self._observed_at
        return self.store.committed_observed_stream_time

    def _min_time(self) -> int:
        return self.observed_stream_time - self.store.retention + 1

    def _register(self, it: KeyValueIterator) -> KeyValueIterator:
        self.store.iterators.add(it)
        return super()._register(it)

    def _cell(self, sid: int) -> list[bool]:
        if self._snap is not None:
            return self.store.open_cell
        return self.store.committed_cell(sid)

    def _source(self, db: bytes) -> ChunkSource:
        if self._snap is None:
            return self.store.partition.source(db, shared=True)
        return self._snap.source(db)

    def _registry(self) -> dict[int, ValueFormat]:
        """The committed segment registry (one short read), remembered for the segment reads
        of the query that asked for it: a segment dropped meanwhile reads as empty.

        Kept while nothing was committed since it was read: the writer partition of this
        process counts its write transactions (``write_generation``, sampled before the read);
        a snapshot never changes. Other partitions (read-only, in memory) read it every time.
        """
        gen = -1 if self._snap is not None else self.store.partition.write_generation
        cached = self._cached
        if cached is not None and gen is not None and cached[0] == gen:
            self._last_registry = cached[1]
            return cached[1]
        rows = read_all(self._source(self.store.registry_db))
        reg = {_REG.unpack(k)[0]: ValueFormat(v[0]) for k, v in rows if v}
        self._last_registry = reg
        if gen is not None:
            self._cached = (gen, reg)
        return reg

    def _segment_ids(self) -> list[int]:
        return sorted(self._registry())

    def _format_of(self, sid: int) -> ValueFormat | None:
        fmt = self._last_registry.get(sid)
        return fmt if fmt is not None else self._registry().get(sid)

    def _segment_format(self, reads: AtomicReads, sid: int) -> ValueFormat | None:
        """The format of segment ``sid`` in the registry, as of ``reads`` (None: no such
        segment, e.g. dropped since the segments were listed). O(log segments)."""
        v = reads.get(self.store.registry_db, _REG.pack(sid))
        if not v:
            return None
        fmt = self.store.format
        return fmt if v[0] == fmt else ValueFormat(v[0])  # the enum call only when it differs

    def _open_segment(self, sid: int) -> tuple[ChunkSource, Segment | None]:
        st = self.store
        db = st.segment_db(sid)
        if self._snap is not None:  # one transaction for everything already
            fmt = self._format_of(sid)
            if fmt is None:
                return EMPTY_SOURCE, None
            return self._source(db), Segment(sid, fmt, db, None, st.open_cell)
        p, dbs, dst = st.partition, (st.registry_db, db), st.format

        def chunk(reads: AtomicReads, rng: KeyRange, reverse: bool, n: int) -> Any:
            fmt = self._segment_format(reads, sid)
            if fmt is None:
                return [], None
            rows, frontier = reads.read_chunk(db, rng, reverse, n)
            if fmt != dst:
                rows = [(k, convert_value(v, fmt, dst)) for k, v in rows]
            return rows, frontier

        def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
            result: tuple[list[Row], bytes | None] = p.read_atomic(
                dbs, lambda reads: chunk(reads, rng, reverse, n)
            )
            return result

        # Rows come out of ``read`` in the store's format already: no conversion downstream.
        return FnSource(read), Segment(sid, dst, db, None, st.committed_cell(sid))

    def _fetch_small(
        self,
        sids: list[int],
        lo: bytes,
        hi: bytes,
        reverse: bool,
        cond: Callable[[bytes], bool],
        order: Callable[[bytes], Any] | None = None,
    ) -> RowsIterator | None:
        """A single-key fetch in one read transaction (see :meth:`_read_rows`), filtered by
        ``cond``; None when a segment holds more than :data:`SMALL_READ_LIMIT` rows in range
        (or ``order`` asks for a sort: then the segment-by-segment path sorts)."""
        if order is not None:
            return super()._fetch_small(sids, lo, hi, reverse, cond, order)
        read = self._read_rows(sids[::-1] if reverse else sids, lo, hi, reverse)
        if read is None:
            return None
        rows, cells = read
        keep = [i for i, r in enumerate(rows) if cond(r[0])]
        return RowsIterator([rows[i] for i in keep], self.store, [cells[i] for i in keep])

    def _read_rows(
        self, sids: list[int], lo: bytes, hi: bytes, reverse: bool
    ) -> tuple[list[tuple[bytes, bytes]], list[list[bool]]] | None:
        """The rows of ``[lo, hi]`` of segments ``sids`` (in that order; each segment's rows
        in scan order) in the store's format, read in one read transaction with every
        segment's registry entry (one begin for all the segments, and one committed state for
        the whole fetch), and the committed liveness cell of each row's segment; None for a
        snapshot view or when a segment holds more than :data:`SMALL_READ_LIMIT` rows in
        range."""
        if self._snap is not None:
            return None
        st = self.store
        dst = st.format
        reg_db = st.registry_db
        names = self._names
        segs = []  # (registry key, database) of each segment
        dbs = [reg_db]
        cell_of = st.committed_cell
        for sid in sids:
            pair = names.get(sid)
            if pair is None:
                if len(names) >= 256:  # segments roll forward: forget the old ones
                    names.clear()
                pair = names[sid] = (_REG.pack(sid), st.segment_db(sid))
            # the cell before the read: a drop committed after this empties it, and one
            # committed before it leaves the read without the segment's registry entry
            segs.append((pair[0], pair[1], cell_of(sid)))
            dbs.append(pair[1])

        def read(reads: AtomicReads) -> tuple[list[tuple[bytes, bytes]], list[list[bool]]] | None:
            out: list[tuple[bytes, bytes]] = []
            cells: list[list[bool]] = []
            for reg_key, db, cell in segs:
                entry = reads.get(reg_db, reg_key)
                if not entry:
                    continue  # dropped since the segments were listed
                rows, more = reads.read_range(db, lo, hi, reverse, SMALL_READ_LIMIT)
                if more:
                    return None
                if entry[0] != dst:  # stored in another format: convert to the store's
                    fmt = ValueFormat(entry[0])
                    rows = [(k, convert_value(v, fmt, dst)) for k, v in rows]
                if reverse:
                    rows.reverse()
                if out:
                    out += rows  # type: ignore[arg-type]
                else:
                    out = rows  # type: ignore[assignment]
                cells += [cell] * len(rows)
            return out, cells

        out: tuple[list[tuple[bytes, bytes]], list[list[bool]]] | None
        out = st.partition.read_atomic(dbs, read)
        return out

    def fetch_window_rows(
        self, key: bytes, time_from: int, time_to: int, reverse: bool = False
    ) -> tuple[list[Row], list[list[bool]]] | None:
        """:meth:`SegmentedBytesStore.fetch_window_rows
        <txstore.bytestores.segments.SegmentedBytesStore.fetch_window_rows>` of committed data, in
        one
        read transaction (see :meth:`_read_rows`); None: use :meth:`fetch` (a segment holds
        too many rows, or this is a snapshot view)."""
        if self._snap is not None:
            self.check_open()
            return None
        if not self.store.is_open:
            raise StoreClosedError(self.store.name)
        bounds = self._window_bounds(key, time_from, time_to)
        if not bounds:
            return None if bounds is None else ([], [])
        first, last, lo, hi = bounds
        sids = [s for s in self._registry() if first <= s <= last]
        if len(sids) > 1:
            sids.sort(reverse=reverse)
        elif not sids:
            return [], []
        rows: tuple[list[Row], list[list[bool]]] | None
        rows = self._read_rows(sids, lo, hi, reverse)  # type: ignore[assignment]
        return rows

    def fetch_window_items(
        self, key: bytes, time_from: int, time_to: int, reverse: bool, decode: Any
    ) -> tuple[list[Any], list[list[bool]], bool] | None:
        """:meth:`WindowFetches.fetch_window_items
        <txstore.bytestores.window_fetch.WindowFetches.fetch_window_items>` of committed data:
        ``(pairs, cells, True)`` read and decoded by the C reader in one read transaction;
        ``(rows, cells, False)`` (:meth:`fetch_window_rows`, for the caller to decode); None:
        use :meth:`fetch`.

        The bookkeeping is kept between fetches, under a generation that is LMDB's own: the
        registry (format byte by segment id) is kept with the id of the committed state it was
        read in (:meth:`~txstore.engine.base.AtomicReads.state_id`, the read transaction's id,
        which moves with every commit), with a plan per span of segment ids (the databases to
        name, the store's format, the segments' liveness cells). A fetch names the plan's
        databases and begins its one read transaction; of the same id, the kept registry is
        the one it sees, and its rows are read with no registry read; of another id (a commit
        since), it reads the registry in that transaction, keeps it, and runs again with a
        plan made from it (at most 3 times, then the general path). So every fetch reads
        registry and rows of one committed state, sees every commit that precedes its
        transaction, and never reads a segment the registry does not list."""
        st = self.store
        if self._snap is not None or reverse or not st.window:
            read = self.fetch_window_rows(key, time_from, time_to, reverse)
            return None if read is None else (read[0], read[1], False)
        if not st.is_open:
            raise StoreClosedError(st.name)
        # the bounds of _window_bounds, inlined (a view that is no snapshot reads the store's
        # committed observed time)
        actual_from = st.committed_observed_stream_time - st.retention + 1
        if time_from > actual_from:
            actual_from = time_from
        if time_to < actual_from:
            return [], [], True
        if time_to < 0:
            return None
        if actual_from < 0:
            actual_from = 0
        interval = st.segment_interval
        span = (actual_from // interval, time_to // interval)
        p = st.partition
        for _ in range(3):
            state = self._state
            if state is None or state.partition is not p:
                reg = {sid: int(fmt) for sid, fmt in self._registry().items()}
                state = self._state = _RegistryState(p, -1, reg)
            plan = state.plans.get(span) or state.plan(span, st)
            body = partial(self._read_items, state, plan, key, actual_from, time_to, decode)
            out: Any = p.read_atomic(plan.dbs, body)
            if out is not _AGAIN:
                break
        else:
            out = None
        if out is None:  # the general path: another format, many rows, other keys' rows...
            rows = self.fetch_window_rows(key, time_from, time_to, reverse)
            return None if rows is None else (rows[0], rows[1], False)
        result: tuple[list[Any], list[list[bool]], bool] = out
        return result

    def _read_items(
        self,
        state: _RegistryState,
        plan: _Plan,
        key: bytes,
        time_from: int,
        time_to: int,
        decode: Any,
        reads: AtomicReads,
    ) -> Any:
        """The read transaction of :meth:`fetch_window_items`: the pairs, None for the general
        path, or :data:`_AGAIN` to run again with the databases of the registry just read."""
        txn_id = reads.state_id()
        if txn_id is None:  # an engine without ids: the registry of this transaction
            reg = self._read_registry(reads, state, txn_id)
            if _in_range(reg, plan.span) != plan.sids:
                return _AGAIN
        elif txn_id != state.txn_id:  # a commit since: again with the plan of its registry
            self._read_registry(reads, state, txn_id)
            return _AGAIN
        else:
            reg = state.registry
        cells = plan.cells
        out: list[Any] | None = None
        live: list[list[bool]] = []
        dst = plan.fmt
        sealed = state.partition.checksums
        for i, sid in enumerate(plan.sids):
            if reg.get(sid) != dst:  # another format (upgrade pending): general path
                return None
            db = plan.dbs[i + 1]
            cur = reads.cursor(db)
            if cur is None:  # another engine, or a database newer than the handles
                return None
            try:
                items = window_items(
                    cur, key, time_from, time_to, SMALL_READ_LIMIT, KeyValue, decode, sealed, None
                )
            except ChecksumError as exc:
                raise state.partition.damaged(db, exc) from None
            if items is None:  # another key's row in range, many rows, not UTF-8
                return None
            if out is None:
                out = items
                live = [cells[i]] * len(items)
            elif items:
                out += items
                live += [cells[i]] * len(items)
        return ([], [], True) if out is None else (out, live, True)

    def _read_registry(
        self, reads: AtomicReads, state: _RegistryState, txn_id: int | None
    ) -> dict[int, int]:
        """The registry as ``reads`` sees it (format byte by segment id), remembered with the
        transaction id for the fetches that follow (see :meth:`fetch_window_items`)."""
        rows, _ = reads.read_range(self.store.registry_db, _REG_LO, _REG_HI, False, 1 << 30)
        reg = {_REG.unpack(k)[0]: v[0] for k, v in rows if v}
        self._state = _RegistryState(state.partition, -1 if txn_id is None else txn_id, reg)
        return reg

    def _get_raw(self, sid: int, key: bytes) -> tuple[bytes | None, ValueFormat]:
        st = self.store
        db = st.segment_db(sid)
        if self._snap is not None:
            fmt = self._registry().get(sid)
            if fmt is None:
                return None, st.format
            return self._snap.get(db, key), fmt

        def read(reads: AtomicReads) -> tuple[bytes | None, ValueFormat]:
            fmt = self._segment_format(reads, sid)
            if fmt is None:
                return None, st.format
            return reads.get(db, key), fmt

        result: tuple[bytes | None, ValueFormat] = st.partition.read_atomic(
            (st.registry_db, db), read
        )
        return result

    @property
    def committed_offset(self) -> int | None:
        """The committed offset (of this snapshot, for a snapshot view)."""
        self.check_open()
        if self._snap is not None:
            return self._snap.committed_offset(self.store.name)
        return self.store.partition.committed_offset(self.store.name)

    def snapshot(self) -> SegmentedReadCommittedView:
        """A view whose reads all see one committed state (close it: it pins pages)."""
        self.check_open()
        st = self.store
        observed = st.committed_observed_stream_time  # read before: never newer than the data
        return SegmentedReadCommittedView(st, st.partition.snapshot(), observed)

    def close(self) -> None:
        """Close this view's iterators and its snapshot, if any. Idempotent."""
        self.iterators.close_all()
        if self._snap is not None:
            self._snap.close()

    def __enter__(self) -> SegmentedReadCommittedView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_AGAIN: Final = object()  # _read_items: run the fetch again
_REG_LO: Final = _REG.pack(0)
_REG_HI: Final = _REG.pack(2**63 - 1)


def _in_range(registry: dict[int, int], span: tuple[int, int]) -> tuple[int, ...]:
    """The ids of ``registry``'s segments from ``span[0]`` to ``span[1]``, ascending."""
    first, last = span
    return tuple(sorted(sid for sid in registry if first <= sid <= last))


class _Plan:
    """What a fetch of segments ``span`` (first, last) reads: the segment ids in range of one
    registry, the databases to name (the registry's first) and the store's format."""

    __slots__ = ("cells", "dbs", "fmt", "sids", "span")

    def __init__(self, span: tuple[int, int], sids: tuple[int, ...], st: SegmentedStoreState):
        self.span = span
        self.sids = sids
        self.dbs = (st.registry_db, *(st.segment_db(sid) for sid in sids))
        self.fmt = int(st.format)
        # the liveness cells of the segments, sampled once the registry's commit is visible
        # and before any read of it: a drop committed later empties them (and moves the
        # transaction id, so no later fetch uses this plan)
        self.cells = [st.committed_cell(sid) for sid in sids]


class _RegistryState:
    """The committed segment registry (format byte by segment id) as of LMDB transaction
    ``txn_id`` of ``partition`` (-1: not known), and the fetch plans made from it."""

    __slots__ = ("partition", "plans", "registry", "txn_id")

    def __init__(self, partition: PartitionBase, txn_id: int, registry: dict[int, int]) -> None:
        self.partition = partition
        self.txn_id = txn_id
        self.registry = registry
        self.plans: dict[tuple[int, int], _Plan] = {}

    def plan(self, span: tuple[int, int], st: SegmentedStoreState) -> _Plan:
        if len(self.plans) >= 64:  # spans move forward with time: forget the old ones
            self.plans.clear()
        plan = self.plans[span] = _Plan(span, _in_range(self.registry, span), st)
        return plan
