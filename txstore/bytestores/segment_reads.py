"""Reading segmented stores: the segment iterators and the read operations shared by a store
and its read-committed views (:class:`SegmentedReads`); the views themselves are in
:mod:`txstore.bytestores.segment_views`.

Reads follow Kafka's ``AbstractRocksDBSegmentedBytesStore``: segments are searched one after
another (ascending, or descending for backward reads), each with the key schema's range bounds,
and the schema's filter (``hasNextCondition``) keeps only the rows of the asked keys and times;
records older than ``observed - retention + 1`` are skipped. In-memory stores return key-range
and time-range reads in the order of Kafka's in-memory stores instead (each segment's rows
sorted by the schema's :meth:`~txstore.bytestores.schemas.KeySchema.time_order_key`;
``docs/stores.md``, "Iteration order").

**Dropped segments.** Every segment carries a *liveness cell*, a list that holds one element
while the segment is live and is emptied when retention drops it (or the store closes). An
iterator consults the cell of the segment its next row comes from before returning that row
(Kafka's ``SegmentIterator`` checks ``currentSegment.isOpen()``): once a segment is dropped,
no more of its rows come out, buffered or not, and the iterator goes on with the next segment.
A store's cells follow its own (uncommitted) segment set; a read-committed view's follow the
committed one (:meth:`SegmentedStoreState.committed_cell`). A single-key fetch whose segments
hold few rows in range is read in one go (one short read per segment, stopping at the range's
end) and returned as a :class:`RowsIterator`; anything else streams through a
:class:`SegmentIterator` in chunks. See :mod:`txstore.bytestores.segments` for the store itself.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Protocol

from txstore.bytestores.schemas import KeySchema
from txstore.codecs import ValueFormat, convert_value, segment_id
from txstore.engine.base import MAX_KEY_SIZE, PartitionBase
from txstore.engine.iterators import (
    CHUNK_MAX,
    CHUNK_MIN,
    ChunkSource,
    EmptyIterator,
    IteratorRegistry,
    KeyRange,
    KeyValueIterator,
    Row,
    invalid_range_warning,
)
from txstore.engine.overlay import DbOverlay
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    StorageError,
)

__all__ = [
    "RowsIterator",
    "Segment",
    "SegmentIterator",
    "SegmentedReads",
    "SegmentedStoreState",
    "read_all",
]

_REG: Final = struct.Struct(">q")
_pack_qi: Final = struct.Struct(">qi").pack
INT_MAX: Final = 2**31 - 1
_ALL: Final = 1 << 62  # "every row" for a chunk read
#: First chunk of a single-key fetch (see :meth:`SegmentedReads.fetch`).
SINGLE_KEY_FIRST_CHUNK: Final = 8
#: A single-key fetch with at most this many rows per segment is read in one go.
SMALL_READ_LIMIT: Final = 64


def read_all(source: ChunkSource, rng: KeyRange | None = None) -> list[Row]:
    """Every row of ``source`` in ``rng`` (all by default), ascending. O(rows)."""
    rows, frontier = source.read_chunk(rng or KeyRange(), False, _ALL)
    if frontier is not None:  # pragma: no cover - a source never cuts an unbounded read
        raise StorageError("a chunk source returned a partial unbounded read")
    return rows


def _converter(src: ValueFormat, dst: ValueFormat) -> Callable[[bytes], bytes | None] | None:
    return None if src == dst else partial(convert_value, src=src, dst=dst)


def _check_key(key: object) -> bytes:
    if type(key) is bytes and len(key) <= MAX_KEY_SIZE:
        return key
    if not isinstance(key, bytes):
        raise InvalidTypeError(f"store key must be bytes, got {type(key).__name__}")
    raise InvalidArgumentError(
        f"store key is {len(key)} bytes, above LMDB's maximum key size of {MAX_KEY_SIZE}"
    )


def _check_value(value: object) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes):
        return bytes(value)
    raise InvalidTypeError(f"value must be bytes or None, got {type(value).__name__}")


class SegmentedStoreState(Protocol):
    """What the reads of a segmented store (the store's own and its read-committed views') use
    of the store, read only: implemented by
    :class:`~txstore.bytestores.segments.SegmentedBytesStore`, whose attributes of these names
    are described there."""

    @property
    def name(self) -> str: ...
    @property
    def is_open(self) -> bool: ...
    @property
    def schema(self) -> KeySchema: ...
    @property
    def window(self) -> bool: ...
    @property
    def format(self) -> ValueFormat: ...
    @property
    def retention(self) -> int: ...
    @property
    def segment_interval(self) -> int: ...
    @property
    def observed_stream_time(self) -> int: ...
    @property
    def committed_observed_stream_time(self) -> int: ...
    @property
    def persistent(self) -> bool: ...
    @property
    def partition(self) -> PartitionBase: ...
    @property
    def registry_db(self) -> bytes: ...
    @property
    def iterators(self) -> IteratorRegistry: ...

    @property
    def open_cell(self) -> list[bool]:
        """A liveness cell that holds an element while the store is open."""
        ...

    def check_open(self) -> None: ...

    def segment_db(self, sid: int) -> bytes: ...

    def committed_cell(self, sid: int) -> list[bool]:
        """The liveness cell of segment ``sid`` as committed: emptied once a commit dropped
        it (or the store closed)."""
        ...


#: The liveness cell of a segment that is never dropped under an iterator (an empty source).
LIVE: Final[list[bool]] = [True]


class Segment:
    """One segment: its id, the format of its values, its database, (writer) overlay and
    liveness cell (see the module docstring)."""

    __slots__ = ("cell", "db", "fmt", "id", "ov")

    def __init__(
        self,
        sid: int,
        fmt: ValueFormat,
        db: bytes,
        ov: DbOverlay | None,
        cell: list[bool] | None = None,
    ) -> None:
        self.id = sid
        self.fmt = fmt
        self.db = db
        self.ov = ov
        self.cell: list[bool] = [True] if cell is None else cell


class SegmentIterator(KeyValueIterator):
    """Iterates segments one after another (Kafka's ``SegmentIterator``), in chunks.

    Within each segment it reads ``rng`` forward or backward, keeps the rows ``cond`` accepts
    (the key schema's ``hasNextCondition``), and converts values stored in an older format.
    ``sort_key``, if given, reads each segment whole and sorts its rows (the in-memory
    stores' time order). Same guarantees as :class:`~txstore.engine.iterators.ChunkedIterator`:
    writes made while it is open never break it. A segment dropped meanwhile yields nothing
    more, not even rows already buffered: each row's segment cell is checked before it is
    returned.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_cell",
        "_chunk",
        "_closed",
        "_cond",
        "_dst",
        "_first",
        "_i",
        "_on_close",
        "_open_segment",
        "_pos",
        "_reverse",
        "_rng",
        "_seg",
        "_segs",
        "_sort_key",
        "_src",
    )

    def __init__(
        self,
        open_segment: Callable[[int], tuple[ChunkSource, Segment | None]],
        segs: list[int],
        rng: KeyRange,
        reverse: bool,
        cond: Callable[[bytes], bool] | None,
        dst: ValueFormat,
        on_close: Callable[[KeyValueIterator], None] | None = None,
        sort_key: Callable[[bytes], Any] | None = None,
        first_chunk: int = CHUNK_MIN,
    ) -> None:
        self._first = first_chunk
        self._open_segment = open_segment
        self._segs = segs
        self._i = 0
        self._base = self._rng = rng
        self._reverse = reverse
        self._cond = cond
        self._dst = dst
        self._on_close = on_close
        self._sort_key = sort_key
        self._src: ChunkSource | None = None
        self._seg: Segment | None = None
        self._buf: list[Any] = []
        self._pos = 0
        self._chunk = first_chunk
        self._closed = False
        self._cell = LIVE  # the liveness cell of the segment the buffered rows come from

    def __next__(self) -> tuple[bytes, bytes]:
        i = self._pos
        if (i < len(self._buf) and self._cell) or self._fill():
            row: tuple[bytes, bytes] = self._buf[self._pos]
            self._pos += 1
            return row
        raise StopIteration

    def _next_rows(self) -> list[Row] | None:
        """The next filtered rows (maybe empty), or None when every segment is done."""
        src = self._src
        if src is None:
            if self._i >= len(self._segs):
                return None
            src, seg = self._open_segment(self._segs[self._i])
            self._seg = seg
            self._cell = LIVE if seg is None else seg.cell
            self._i += 1
            self._src, self._rng, self._chunk = src, self._base, self._first
        if self._sort_key is not None:
            rows = read_all(src, self._rng)
            self._src = None
        else:
            n = self._chunk
            rows, frontier = src.read_chunk(self._rng, self._reverse, n)
            if n < CHUNK_MAX:
                self._chunk = n * 2
            if frontier is None:
                self._src = None
            else:
                self._rng = self._rng.after(frontier, self._reverse)
        cond = self._cond
        if cond is not None:
            rows = [r for r in rows if cond(r[0])]
        if rows:
            seg = self._seg
            conv = None if seg is None else _converter(seg.fmt, self._dst)
            if conv is not None:
                rows = [(k, conv(v)) for k, v in rows]  # type: ignore[arg-type]
            if self._sort_key is not None:  # one call a row; sort keys are unique
                order = map(self._sort_key, [r[0] for r in rows])
                rows = [r for _, r in sorted(zip(order, rows, strict=True))]
            if self._reverse:
                rows.reverse()
        return rows

    def _fill(self) -> bool:
        while not self._closed:
            if not self._cell:  # the current segment was dropped: skip the rest of it
                self._src, self._seg, self._cell = None, None, LIVE
            rows = self._next_rows()
            if rows is None:
                break
            if rows:
                self._buf, self._pos = rows, 0
                return True
        self.close()
        return False

    def peek_next_key(self) -> bytes | None:
        if (self._pos < len(self._buf) and self._cell) or self._fill():
            key: bytes = self._buf[self._pos][0]
            return key
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._buf, self._pos, self._src, self._seg = [], 0, None, None
        cb, self._on_close = self._on_close, None
        if cb is not None:
            cb(self)

    def __del__(self) -> None:
        if not self._closed:
            self._closed = True
            warnings.warn(
                "unclosed txstore window/session iterator: close it, or use it in a 'with' "
                "block or until exhaustion",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )


class RowsIterator(KeyValueIterator):
    """An iterator over rows already read (a short single-key fetch, read in one go).

    It holds no LMDB transaction or cursor, so it needs no registration; it still reports no
    next element once closed or once its store is closed, like every store iterator, and
    skips the rows whose segment was dropped since: ``cells[i]`` is the liveness cell of the
    segment of ``rows[i]`` (see the module docstring).
    """

    __slots__ = ("_closed", "_pos", "cells", "rows", "store")

    def __init__(
        self,
        rows: list[tuple[bytes, bytes]],
        store: SegmentedStoreState,
        cells: list[list[bool]],
    ) -> None:
        self.rows = rows
        self.cells = cells
        self._pos = 0
        self.store = store
        self._closed = False

    def _advance(self) -> int:
        """The index of the next row to return (``len(rows)``: none), past dropped rows."""
        i, n, cells = self._pos, len(self.rows), self.cells
        if self._closed or not self.store.is_open:
            return n
        while i < n and not cells[i]:
            i += 1
        self._pos = i
        return i

    def __next__(self) -> tuple[bytes, bytes]:
        i = self._advance()
        if i < len(self.rows):
            self._pos = i + 1
            return self.rows[i]
        self._closed = True
        raise StopIteration

    def peek_next_key(self) -> bytes | None:
        i = self._advance()
        return self.rows[i][0] if i < len(self.rows) else None

    def close(self) -> None:
        self._closed = True


class SegmentedReads:
    """The read operations, shared by a store (read-uncommitted) and its committed views."""

    store: SegmentedStoreState
    """The store read (the store itself, for a store)."""
    iterators: IteratorRegistry
    """The open iterators of this store or view (closed with it)."""

    def _segment_ids(self) -> list[int]:
        raise NotImplementedError

    def _open_segment(self, sid: int) -> tuple[ChunkSource, Segment | None]:
        raise NotImplementedError

    def _get_raw(self, sid: int, key: bytes) -> tuple[bytes | None, ValueFormat]:
        raise NotImplementedError

    def _read_small(
        self, sid: int, lo: bytes, hi: bytes, reverse: bool
    ) -> list[tuple[bytes, bytes]] | None:
        """Every visible row of segment ``sid`` in ``[lo, hi]``, ascending and in the store's
        format, if there are at most :data:`SMALL_READ_LIMIT`; else None."""
        return None

    def check_open(self) -> None:
        self.store.check_open()

    def _register(self, it: KeyValueIterator) -> KeyValueIterator:
        self.iterators.add(it)
        return it

    def _iterate(
        self,
        sids: list[int],
        rng: KeyRange,
        reverse: bool,
        cond: Callable[[bytes], bool] | None,
        sort_key: Callable[[bytes], Any] | None = None,
        first_chunk: int = CHUNK_MIN,
    ) -> KeyValueIterator:
        if not sids or rng.is_empty():
            return EmptyIterator()
        if reverse:
            sids = sids[::-1]
        st = self.store
        it = SegmentIterator(
            self._open_segment,
            sids,
            rng,
            reverse,
            cond,
            st.format,
            self.iterators.discard,
            sort_key,
            first_chunk,
        )
        return self._register(it)

    def _min_time(self) -> int:
        st = self.store
        return st.observed_stream_time - st.retention + 1

    def _time_order(self) -> Callable[[bytes], Any] | None:
        """The sort key of multi-key reads: the schema's time order for an in-memory store
        (Kafka's ``InMemoryWindowStore`` / ``InMemorySessionStore``), None for a persistent
        one (segment, then store-key order, as Kafka's segmented RocksDB stores)."""
        st = self.store
        return None if st.persistent else st.schema.time_order_key

    def _window_bounds(
        self, key: bytes, time_from: int, time_to: int
    ) -> tuple[int, int, bytes, bytes] | tuple[()] | None:
        """What a single-key window fetch of ``key`` reads (window schema only): the first and
        last segment ids and the key bounds ``key || L(max(0, from)) || I(0)`` and ``key ||
        L(to) || I(MAX)``, where ``from`` is raised to the retention's ``observed - retention
        + 1``; ``()`` when nothing can match, None when the bounds need the general path
        (``to < 0``, or another schema). A row between the bounds whose key is exactly
        ``len(key) + 12`` bytes long is one of ``key``'s windows in the time range (a row of
        another length belongs to a longer key starting with ``key``). O(1)."""
        st = self.store
        actual_from = self._min_time()
        if time_from > actual_from:
            actual_from = time_from
        if time_to < actual_from:
            return ()
        if time_to < 0 or not st.window:
            return None
        if actual_from < 0:
            actual_from = 0  # segment ids and stored times are never negative
        interval = st.segment_interval
        return (
            actual_from // interval,
            time_to // interval,
            key + _pack_qi(actual_from, 0),
            key + _pack_qi(time_to, INT_MAX),
        )

    def get(self, key: bytes) -> bytes | None:
        """The value of the exact store key ``key`` (None if absent or expired). O(log n)."""
        self.check_open()
        key = _check_key(key)
        st = self.store
        ts = st.schema.segment_timestamp(key)
        if ts < self._min_time() or ts < 0:
            return None
        raw, fmt = self._get_raw(ts // st.segment_interval, key)
        if raw is None or fmt == st.format:
            return raw
        return convert_value(raw, fmt, st.format)

    def fetch(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        time_from: int,
        time_to: int,
        *,
        reverse: bool = False,
        single_key: bool = False,
    ) -> KeyValueIterator:
        """Records with ``key_from <= key <= key_to`` (None: unbounded) and a segment timestamp
        in the schema's time bounds, segment by segment (Kafka's ``fetch``).

        ``single_key`` uses the fixed-size bounds of one key (``key_from``) and never returns a
        longer key sharing its prefix. A key range with ``key_from > key_to`` is empty and logs
        Kafka's warning. O(log n) per segment to start, O(1) amortized a row.
        """
        self.check_open()
        st = self.store
        schema = st.schema
        actual_from = max(time_from, self._min_time())
        if schema.window and time_to < actual_from:
            return EmptyIterator()
        if single_key:
            if key_from is None:
                raise InvalidArgumentError("key cannot be null")
            lo: bytes | None = schema.lower_range_fixed(key_from, actual_from)
            hi: bytes | None = schema.upper_range_fixed(key_from, time_to)
            key_to = key_from
        else:
            if key_from is not None and key_to is not None and key_from > key_to:
                invalid_range_warning()
                return EmptyIterator()
            lo = None if key_from is None else schema.lower_range(key_from, actual_from)
            hi = None if key_to is None else schema.upper_range(key_to, time_to)
        first = segment_id(actual_from, st.segment_interval)
        last = segment_id(schema.search_to(time_to), st.segment_interval)
        sids = [s for s in self._segment_ids() if first <= s <= last]
        cond = schema.condition(key_from, key_to, actual_from, time_to, single_key)
        order = self._time_order()
        if single_key and order is not None and not schema.single_key_needs_sort():
            order = None  # one key's windows are in time order already
        if single_key and sids:
            assert lo is not None and hi is not None
            fast = self._fetch_small(sids, lo, hi, reverse, cond, order)
            if fast is not None:
                return fast
        # A chunk read stops at the range's end only after ``n`` rows: one key's windows in a
        # segment are usually few, so a single-key scan starts small (8 rows) and doubles.
        first = SINGLE_KEY_FIRST_CHUNK if single_key else CHUNK_MIN
        return self._iterate(sids, KeyRange(lo, hi), reverse, cond, order, first)

    def _fetch_small(
        self,
        sids: list[int],
        lo: bytes,
        hi: bytes,
        reverse: bool,
        cond: Callable[[bytes], bool],
        order: Callable[[bytes], Any] | None = None,
    ) -> RowsIterator | None:
        """A single-key fetch read in one go, one short read per segment, when every segment
        holds few rows in range (None: use the chunked iterator); ``order`` sorts each
        segment's rows."""
        out: list[tuple[bytes, bytes]] = []
        cells: list[list[bool]] = []
        for sid in reversed(sids) if reverse else sids:
            rows = self._read_small(sid, lo, hi, reverse)
            if rows is None:
                return None
            rows = [r for r in rows if cond(r[0])]
            if order is not None:
                rows.sort(key=lambda r: order(r[0]))
            if reverse:
                rows.reverse()
            if rows:
                out += rows
                cells += [self._cell(sid)] * len(rows)
        return RowsIterator(out, self.store, cells)

    def _cell(self, sid: int) -> list[bool]:
        """The liveness cell of segment ``sid`` for this reader."""
        raise NotImplementedError

    def fetch_all(self, time_from: int, time_to: int, *, reverse: bool = False) -> KeyValueIterator:
        """Every key's records with a segment timestamp in ``[time_from, time_to]``."""
        self.check_open()
        st = self.store
        actual_from = max(time_from, self._min_time())
        if st.schema.window and time_to < actual_from:
            return EmptyIterator()
        first = segment_id(actual_from, st.segment_interval)
        last = segment_id(st.schema.search_to(time_to), st.segment_interval)
        sids = [s for s in self._segment_ids() if first <= s <= last]
        cond = st.schema.condition(None, None, actual_from, time_to, False)
        return self._iterate(sids, KeyRange(), reverse, cond, self._time_order())

    def all(self, *, reverse: bool = False) -> KeyValueIterator:
        """Every unexpired record, segment by segment."""
        self.check_open()
        actual_from = max(0, self._min_time())
        cond = self.store.schema.condition(None, None, actual_from, 2**63 - 1, False)
        # a copy: the store's list of live segments changes under the iterator
        sids = list(self._segment_ids())
        return self._iterate(sids, KeyRange(), reverse, cond, self._time_order())

    def fetch_by_segment_time(self, time_from: int, time_to: int) -> KeyValueIterator:
        """Records whose segment timestamp is in ``[time_from, time_to]``, in the schema's
        :meth:`~txstore.bytestores.schemas.KeySchema.time_order_key` order (the in-memory
        session store's time-only ``findSessions``; each segment is read and sorted whole)."""
        self.check_open()
        st = self.store
        actual_from = max(time_from, self._min_time())
        if time_to < actual_from:
            return EmptyIterator()
        first = segment_id(actual_from, st.segment_interval)
        last = segment_id(time_to, st.segment_interval)
        sids = [s for s in self._segment_ids() if first <= s <= last]
        ts_of = st.schema.segment_timestamp

        def cond(raw: bytes) -> bool:
            return actual_from <= ts_of(raw) <= time_to

        return self._iterate(sids, KeyRange(), False, cond, st.schema.time_order_key)
