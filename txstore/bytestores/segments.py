"""Segmented bytes stores: the storage under window and session stores.

A segmented store keeps its records in **segments**, one named database per time interval, so
that expiry drops a whole segment in O(1) instead of deleting records one by one. Everything
follows Kafka Streams' ``AbstractRocksDBSegmentedBytesStore`` (``docs/stores.md``):

* segment id ``ts / interval`` (Java truncation), database ``<store>.<id * interval>``
  (:meth:`~txstore.engine.base.PartitionBase.db_name`); ``ts`` is the window start for window
  stores and the session **end** for session stores (the key schema decides);
* *observed stream time* starts at -1, lives in memory only, and advances on ``put``,
  ``remove`` and ``restore``;
* a ``put`` whose segment is older than ``segment_id(observed - retention)`` is dropped and
  counted in :attr:`SegmentedBytesStore.dropped_records`; segments below that id are dropped
  whole (transactional stores stage the drop in the overlay; ``commit`` applies it, ``recover``
  discards it);
* reads skip records older than ``observed - retention + 1``, even in a segment still present;
* an open iterator returns no more rows of a segment dropped while it is open (each segment's
  liveness cell, :mod:`txstore.bytestores.segment_reads`).

In-memory stores (on a :class:`~txstore.engine.memory.MemoryPartition`) apply Kafka's in-memory
rules
instead: a put with ``ts <= observed - retention`` is dropped record by record, and ``remove``
does not advance the observed time.

**The segment registry.** The store's main database (``<store>``) lists its segments: key
``L(segment id)``, value one byte, the :class:`~txstore.codecs.ValueFormat` the segment's values
are stored in. It is written in the same transaction as the segment data (the overlay stages
registry rows like any other write), so the set of segments survives a reopen, a crash or a
``recover`` exactly as committed. The per-segment format makes lazy format upgrades possible: a
store reopened in a later format (``txstore.bytestores.adapters.UPGRADE_ORDER``) creates new
segments in
that format, reads old ones through a conversion, and converts an old segment in place the first
time it is written to.
"""

from __future__ import annotations

import logging
import struct
from bisect import insort
from collections.abc import Iterable, Mapping
from typing import Any, Final

from txstore import faults
from txstore.bytestores.schemas import KeySchema
from txstore.bytestores.segment_check import check_segment_keys
from txstore.bytestores.segment_reads import (
    SMALL_READ_LIMIT,
    RowsIterator,
    Segment,
    SegmentIterator,
    _check_key,
    _check_value,
    read_all,
)
from txstore.bytestores.segment_views import SegmentedReadCommittedView
from txstore.bytestores.window_fetch import WindowFetches
from txstore.codecs import ValueFormat, segment_id_function, value_converter
from txstore.engine.base import (
    MAX_KEY_SIZE,
    PartitionBase,
    check_offset,
    check_store_name,
)
from txstore.engine.iterators import (
    EMPTY_SOURCE,
    ChunkSource,
    IteratorRegistry,
    KeyRange,
    MergedSource,
    Row,
    merge_rows,
)
from txstore.engine.memory import MemoryPartition
from txstore.engine.overlay import NOT_FOUND
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    ReadOnlyError,
    StorageError,
    StoreClosedError,
)

__all__ = [
    "RowsIterator",
    "SegmentIterator",
    "SegmentedBytesStore",
    "SegmentedReadCommittedView",
]

_log = logging.getLogger("txstore")
_REG: Final = struct.Struct(">q")


class SegmentedBytesStore(WindowFetches):
    """A segmented store of bytes (see the module docstring).

    ``SegmentedBytesStore(name, partition=None, *, schema, retention, segment_interval,
    fmt=PLAIN, transactional=True, meta=None)``: ``partition`` is a persistent
    :class:`~txstore.engine.partition.Partition` or a
    :class:`~txstore.engine.memory.MemoryPartition`
    (``None`` creates a private in-memory one); ``schema`` a
    :class:`~txstore.bytestores.schemas.KeySchema`; ``fmt`` the value format of new segments
    (values are
    given and returned in it). ``meta`` is registered at first open (the typed layer registers
    its own first). Keys are full store keys (``[key][ts][seq]`` or ``[key][end][start]``).
    """

    def __init__(
        self,
        name: str,
        partition: PartitionBase | None = None,
        *,
        schema: KeySchema,
        retention: int,
        segment_interval: int,
        fmt: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        check_store_name(name)
        if isinstance(retention, bool) or not isinstance(retention, int) or retention < 0:
            raise InvalidArgumentError(f"retention must be an int >= 0, got {retention!r}")
        if isinstance(segment_interval, bool) or not isinstance(segment_interval, int):
            raise InvalidTypeError("segment_interval must be an int")
        if segment_interval < 1:
            raise InvalidArgumentError("segmentInterval cannot be zero or negative")
        self.is_open = False
        """False once :meth:`close` was called."""
        self._owns_partition = partition is None
        p = MemoryPartition() if partition is None else partition
        self.partition: PartitionBase = p
        """The partition holding the store."""
        self.name = name
        """The store name."""
        self.store = self
        self.schema = schema
        self.retention = retention
        self.segment_interval = segment_interval
        self._segment_id = segment_id_function(int(segment_interval))
        self.window = schema.window
        """True for a window store's schema (``schema.window``)."""
        self.format = ValueFormat(fmt)
        self.in_memory = not p.persistent
        self._transactional = bool(transactional)
        existing = p.store_meta(name) if meta is None else None
        if existing is None:
            default = {"kind": schema.kind, "format": self.format.name, "retention": retention}
            existing = p.register_store(name, default if meta is None else meta)
        self.meta = existing
        self.registry_db = p.db_name(name)
        """The store's main database: its segment registry."""
        self._overlay = (
            p.overlay if self._transactional and p.overlay is not None and not p.readonly else None
        )
        self._reg_ov = None if self._overlay is None else self._overlay.db(name, self.registry_db)
        self.iterators = IteratorRegistry()
        self.dropped_records = 0
        # The observed stream time as of the last commit applied in this process (-1 in a fresh
        # process, as the observed time itself): the expiry filter of read-committed views.
        self._committed_observed = -1
        # The store's open flag as a liveness cell (one element while open, none once closed):
        # the cell of the rows of a snapshot view (see txstore.bytestores.segment_reads).
        self._alive: list[bool] = []
        self.open_cell = self._alive
        # Liveness cells of segments as committed (read-committed views' iterators): emptied
        # when a commit applies the segment's drop; ``_pending_drops``: staged drops.
        self._committed_cells: dict[int, list[bool]] = {}
        self._pending_drops: list[int] = []
        self._live: dict[int, Segment] = {}
        self._reset()
        check_segment_keys(self, list(self._live))  # after a crash: keys against their segments
        p.attach(name, self)
        self.is_open = True
        self._alive.append(True)

    # -- state --------------------------------------------------------------------------------

    def _reset(self) -> None:
        """Observed time and segments back to what the last commit left (open and recover):
        the observed time as of the last commit in this process, -1 in a fresh process."""
        self.observed_stream_time = self._committed_observed
        """The largest segment timestamp seen by ``put``/``remove``/``restore`` (-1: none)."""
        self._dropped: list[Segment] = []
        self._pending_drops = []
        old, self._live = self._live, {}
        for k, v in read_all(self.partition.source(self.registry_db)):
            if len(k) != 8 or len(v or b"") != 1 or v[0] not in ValueFormat._value2member_map_:  # type: ignore[index]
                raise StorageError(f"corrupt segment registry entry in store {self.name!r}")
            sid = _REG.unpack(k)[0]
            prev = old.get(sid)
            cell = None if prev is None else prev.cell
            self._live[sid] = self._segment(sid, ValueFormat(v[0]), cell)  # type: ignore[index]
        for sid, seg in old.items():  # an uncommitted segment that recover discarded
            if sid not in self._live:
                seg.cell.clear()
        self._ids = sorted(self._live)

    def _segment(self, sid: int, fmt: ValueFormat, cell: list[bool] | None = None) -> Segment:
        db = self.partition.db_name(self.name, str(sid * self.segment_interval))
        ov = None if self._overlay is None else self._overlay.db(self.name, db)
        return Segment(sid, fmt, db, ov, cell)

    def committed_cell(self, sid: int) -> list[bool]:
        """The liveness cell of segment ``sid`` as committed (read-committed views): emptied
        once a commit applied the segment's drop, or the store closed. O(1)."""
        cell = self._committed_cells.get(sid)
        if cell is None:
            if not self.is_open:
                return self.open_cell  # empty: nothing of a closed store is returned
            cell = self._committed_cells[sid] = [True]
        return cell

    def _cell(self, sid: int) -> list[bool]:
        seg = self._live.get(sid)
        return self.open_cell if seg is None else seg.cell

    @property
    def transactional(self) -> bool:
        """True if writes are buffered until :meth:`commit`."""
        return self._transactional

    @property
    def persistent(self) -> bool:
        """True for LMDB-backed stores."""
        return self.partition.persistent

    def segment_ids(self) -> list[int]:
        """Ids of the live segments (uncommitted creations and drops included), ascending."""
        self.check_open()
        return list(self._ids)

    def segment_db(self, sid: int) -> bytes:
        """The database name of segment ``sid`` (``<store>.<sid * interval>``)."""
        return self.partition.db_name(self.name, str(sid * self.segment_interval))

    def segment_format(self, sid: int) -> ValueFormat | None:
        """The format segment ``sid`` stores its values in (None: no such segment)."""
        seg = self._live.get(sid)
        return None if seg is None else seg.fmt

    def check_open(self) -> None:
        if not self.is_open:
            raise StoreClosedError(self.name)

    def _check_writable(self) -> None:
        if not self.is_open:
            raise StoreClosedError(self.name)
        if self.partition.readonly:
            raise ReadOnlyError(f"store {self.name!r} is on a read-only partition")

    def close(self) -> None:
        """Close the store and its iterators; uncommitted writes are discarded. Idempotent."""
        if not self.is_open:
            return
        self.is_open = False
        self._alive.clear()
        for seg in self._live.values():
            seg.cell.clear()
        for cell in self._committed_cells.values():
            cell.clear()
        self.iterators.close_all()
        p = self.partition
        if not p.closed:
            if self._overlay is not None:
                p.discard(self.name)
            p.detach(self.name, self)
            if self._owns_partition:
                p.close()

    def __repr__(self) -> str:
        kind = "persistent" if self.partition.persistent else "in-memory"
        state = "open" if self.is_open else "closed"
        return f"<SegmentedBytesStore {self.name!r} {self.schema.kind} {kind} {state}>"

    # -- reads (read-uncommitted) -------------------------------------------------------------

    def _segment_ids(self) -> list[int]:
        return self._ids

    def _open_segment(self, sid: int) -> tuple[ChunkSource, Segment | None]:
        seg = self._live.get(sid)
        if seg is None:
            return EMPTY_SOURCE, None
        committed = self.partition.source(seg.db)
        ov = seg.ov
        if ov is None:
            return committed, seg
        return MergedSource(ov, EMPTY_SOURCE if ov.dropped else committed, False), seg

    def _get_raw(self, sid: int, key: bytes) -> tuple[bytes | None, ValueFormat]:
        seg = self._live.get(sid)
        if seg is None:
            return None, self.format
        if seg.ov is not None:
            v = seg.ov.get(key)
            if v is not NOT_FOUND:
                return v, seg.fmt  # type: ignore[return-value]
        return self.partition.get(seg.db, key), seg.fmt

    def _read_small(
        self, sid: int, lo: bytes, hi: bytes, reverse: bool
    ) -> list[tuple[bytes, bytes]] | None:
        seg = self._live.get(sid)
        if seg is None:
            return []
        ov = seg.ov
        upper: list[Row] = []
        if ov is not None:
            small = ov.read_small(lo, hi, SMALL_READ_LIMIT)  # the memory tier alone
            if small is not None:
                upper = small
            else:  # spilled, a drop staged, or more rows than the limit
                upper, frontier = ov.read_chunk(KeyRange(lo, hi), reverse, SMALL_READ_LIMIT)
                if frontier is not None:
                    return None
        if ov is not None and ov.dropped:
            lower: list[Row] = []
        else:
            lower, more = self.partition.read_range(
                seg.db, lo, hi, reverse=reverse, limit=SMALL_READ_LIMIT
            )
            if more:
                return None
        rows = merge_rows(upper, lower, False) if upper else lower
        if seg.fmt != self.format:
            convert = value_converter(seg.fmt, self.format)
            rows = [(k, convert(v)) for k, v in rows]
        return rows  # type: ignore[return-value]

    def put(self, key: bytes, value: bytes | None) -> bool:
        """Write ``value`` (None: delete) under the store key ``key`` if its segment is live;
        returns False when the record was dropped as expired. O(1) amortized (transactional),
        plus a segment creation or drop now and then."""
        key = _check_key(key)
        return self.put_at(key, self.schema.segment_timestamp(key), _check_value(value))

    def put_at(self, key: bytes, ts: int, value: bytes | None) -> bool:
        """:meth:`put` for callers that know the key's segment timestamp ``ts`` (no checks on
        ``key`` and ``value``: the typed stores build them)."""
        if not self.is_open or self.partition.readonly:
            self._check_writable()
        if ts < 0:
            raise InvalidArgumentError(f"timestamp must not be negative, got {ts}")
        observed = self.observed_stream_time
        if ts > observed:
            self.observed_stream_time = observed = ts
        limit = observed - self.retention
        min_live = self._segment_id(limit)
        sid = ts // self.segment_interval
        if sid < min_live or (self.in_memory and ts <= limit):
            self.dropped_records += 1
            _log.warning("Skipping record for expired segment.")
            self._cleanup(min_live)
            return False
        seg = self._live.get(sid)
        if seg is None:
            seg = self._create(sid)
        if self._ids[0] < min_live:
            self._cleanup(min_live)
        if seg.fmt != self.format:
            self._convert(seg)
        ov = seg.ov
        if ov is not None:
            ov.put(key, value)
        else:
            self.partition.write_through(seg.db, [(key, value)])
        return True

    def put_skipped_null(self, key: bytes, ts: int) -> None:
        """A window store with retain_duplicates was given ``put(key, None, ts)``: a no-op
        here (Kafka's RocksDBWindowStore), logged by a change-logging layer above
        (:class:`~txstore.changelog.layer.ChangeLoggingSegmentedBytesStore`). ``key`` is the
        serialized record key, without time or sequence number."""
        if not self.is_open or self.partition.readonly:
            self._check_writable()

    def remove(self, key: bytes) -> None:
        """Delete the store key ``key`` from its segment, if that segment exists (no liveness
        check, as Kafka's ``remove``). Persistent stores advance the observed time."""
        self._check_writable()
        key = _check_key(key)
        ts = self.schema.segment_timestamp(key)
        if not self.in_memory and ts > self.observed_stream_time:
            self.observed_stream_time = ts
        seg = self._live.get(ts // self.segment_interval) if ts >= 0 else None
        if seg is None:
            return
        if seg.fmt != self.format:
            self._convert(seg)
        if seg.ov is not None:
            seg.ov.put(key, None)
        else:
            self.partition.write_through(seg.db, [(key, None)])

    def restore(self, rows: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Apply changelog records (store keys verbatim, values in the store's format; None
        deletes) as Kafka's restore does: the observed time first advances to the batch's
        largest timestamp, then each record goes to its segment if live. Returns how many were
        applied. Non-transactional stores write each segment's rows in one transaction."""
        self._check_writable()
        checked = list(rows)
        if not checked:
            return 0
        keys = [k for k, _ in checked]
        if not all([type(k) is bytes and len(k) <= MAX_KEY_SIZE for k in keys]):
            checked = [(_check_key(k), v) for k, v in checked]  # raises the typed error
        if not all([v is None or type(v) is bytes for _, v in checked]):
            checked = [(k, _check_value(v)) for k, v in checked]
        stamps = self.schema.segment_timestamps(keys)
        if min(stamps) < 0:
            raise InvalidArgumentError("restored records must not have negative timestamps")
        self.observed_stream_time = max(self.observed_stream_time, *stamps)
        limit = self.observed_stream_time - self.retention
        min_live = self._segment_id(limit)
        batches: dict[int, list[Row]] = {}  # rows by segment, in changelog order
        interval = self.segment_interval
        in_memory = self.in_memory
        applied = 0
        for row, ts in zip(checked, stamps, strict=True):
            sid = ts // interval
            if sid < min_live or (in_memory and ts <= limit):
                continue
            applied += 1
            batch = batches.get(sid)
            if batch is None:
                batch = batches[sid] = []
            batch.append(row)
        for sid, batch in batches.items():
            seg = self._live.get(sid) or self._create(sid)
            if seg.fmt != self.format:
                self._convert(seg)
            if seg.ov is not None:
                seg.ov.put_many(batch)
            else:
                self.partition.write_through_dbs({seg.db: batch})
        self._cleanup(min_live)
        return applied

    def _create(self, sid: int) -> Segment:
        seg = self._segment(sid, self.format)
        row = (_REG.pack(sid), bytes((self.format,)))
        if self._reg_ov is not None:
            self._reg_ov.put(*row)
        else:
            self.partition.write_through_dbs({self.registry_db: [row]})
        self._live[sid] = seg
        insort(self._ids, sid)
        return seg

    def _cleanup(self, min_live: int) -> None:
        """Drop every segment below ``min_live`` (staged for transactional stores)."""
        ids = self._ids
        while ids and ids[0] < min_live:
            faults.point("segments.drop")
            sid = ids[0]
            seg = self._live[sid]
            if seg.ov is not None and self._reg_ov is not None:
                seg.ov.drop()
                self._reg_ov.put(_REG.pack(sid), None)
                self._dropped.append(seg)
                self._pending_drops.append(sid)
            else:
                self.partition.write_through_dbs(
                    {self.registry_db: [(_REG.pack(sid), None)]}, [seg.db]
                )
                self._drop_committed_cell(sid)
            seg.cell.clear()  # open iterators return no more of its rows
            del ids[0]
            del self._live[sid]
        self._forget_dropped()

    def _forget_dropped(self) -> None:
        """Release the overlays of segments whose drop was committed (or discarded)."""
        if not self._dropped or self._overlay is None:
            return
        keep = []
        for seg in self._dropped:
            ov = seg.ov
            if ov is None or ov.dropped or not ov.is_empty():
                keep.append(seg)
            elif seg.id not in self._live:
                self._overlay.forget(seg.db)
        self._dropped = keep

    def _convert(self, seg: Segment) -> None:
        """Rewrite a segment of an older format in the store's format (lazy upgrade): every
        visible row is converted and staged (or written in one transaction), with the new
        registry entry. O(rows of the segment), once per old segment written to."""
        src, _ = self._open_segment(seg.id)
        convert = value_converter(seg.fmt, self.format)
        rows = [(k, convert(v)) for k, v in read_all(src)]
        reg = (_REG.pack(seg.id), bytes((self.format,)))
        if seg.ov is not None and self._reg_ov is not None:
            for k, v in rows:
                seg.ov.put(k, v)
            self._reg_ov.put(*reg)
        else:
            self.partition.write_through_dbs({seg.db: rows, self.registry_db: [reg]})
        seg.fmt = self.format

    # -- commit and recovery ------------------------------------------------------------------

    def commit(self, changelog_offset: int) -> None:
        """Make the writes and segment drops durable with ``changelog_offset``, atomically
        (one LMDB write transaction through the partition's multi-store commit)."""
        self._check_writable()
        if self._overlay is not None:
            self.partition.commit_stores({self.name: changelog_offset})
            self._forget_dropped()
        else:
            self.partition.record_offset(self.name, changelog_offset)

    def _drop_committed_cell(self, sid: int) -> None:
        cell = self._committed_cells.pop(sid, None)
        if cell is not None:
            cell.clear()

    def on_commit(self) -> None:
        """Called by the partition once a commit of this store applied: its observed stream
        time becomes the committed one (the expiry filter of read-committed views), and the
        drops it applied empty the committed liveness cells of those segments."""
        self._committed_observed = self.observed_stream_time
        drops, self._pending_drops = self._pending_drops, []
        for sid in drops:
            self._drop_committed_cell(sid)

    @property
    def committed_observed_stream_time(self) -> int:
        """The observed stream time as of the last commit in this process (-1: none), which
        read-committed views filter expired records with. Non-transactional stores write
        through, so theirs is the current observed time."""
        return self.observed_stream_time if self._overlay is None else self._committed_observed

    def recover(self, changelog_offset: int) -> bool:
        """Discard uncommitted writes, segment creations and drops; True if the committed
        offset is at or past ``changelog_offset``. The store is then as it was after its last
        commit: segments as committed, observed stream time as of that commit (-1 if nothing
        was committed in this process, as after a fresh open). O(uncommitted)."""
        self.check_open()
        offset = check_offset(changelog_offset)
        if self._overlay is not None:
            self.partition.discard(self.name)
        self._reset()
        committed = self.partition.committed_offset(self.name)
        return committed is not None and committed >= offset

    @property
    def committed_offset(self) -> int | None:
        """The committed changelog offset, or None if never committed."""
        self.check_open()
        return self.partition.committed_offset(self.name)

    def approximate_num_uncommitted_bytes(self) -> int:
        """Approximate bytes staged for the next commit, memory and spill. O(segments)."""
        self.check_open()
        return 0 if self._overlay is None else self._overlay.uncommitted_bytes(self.name)

    def read_committed(self) -> SegmentedReadCommittedView:
        """A read-only view of committed data (usable from any thread)."""
        self.check_open()
        return SegmentedReadCommittedView(self)

    def snapshot(self) -> SegmentedReadCommittedView:
        """A read-only view whose reads all see one committed state, data and offset (one
        LMDB read transaction until the view is closed). O(1)."""
        return self.read_committed().snapshot()
