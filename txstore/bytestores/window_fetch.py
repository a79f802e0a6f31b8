"""The single-key reads of a window or session store's writer, read in one go: the fast paths
of :class:`~txstore.bytestores.segments.SegmentedBytesStore` (a mixin, :class:`WindowFetches`).

:meth:`WindowFetches.fetch_window_items` is the shortest: it hands the writer's LMDB cursor of
each segment a fetch reads to the C function :func:`txstore._checksums.window_items`, which
seeks, reads the rows up to the upper bound (skipping other keys' rows between the bounds, as
the general path's filter does), checks and strips their checksums, merges in the writes
staged for the key's windows (none usually: the overlay's index is bisected once, and an empty
overlay is not looked at), reads each window start and decodes each value (UTF-8 text, or the
caller's decoder) into ``KeyValue`` pairs: one call per segment, no Python object per row but
the pairs returned. Anything else (a segment in another format, a reverse fetch, a spilled
overlay or a staged segment drop, many rows) goes through
:meth:`WindowFetches.fetch_window_rows`, which merges the overlay and returns the rows for the
typed layer to decode. :meth:`WindowFetches.fetch_session_items` does the same for a session
search (:func:`txstore._checksums.session_items`), when nothing of the key is staged.
``docs/performance.md`` ("Window and session fetches") has the measurements.
"""

from __future__ import annotations

import struct
from typing import Any

from txstore._checksums import ChecksumError, session_items, window_items
from txstore.bytestores.segment_reads import (
    INT_MAX,
    SMALL_READ_LIMIT,
    Segment,
    SegmentedReads,
    _pack_qi,
)
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase
from txstore.engine.iterators import Row, merge_rows
from txstore.errors import StoreClosedError
from txstore.types import KeyValue

__all__ = ["WindowFetches"]

_pack_qq = struct.Struct(">qq").pack
_LONG_MAX = 2**63 - 1


class WindowFetches(SegmentedReads):
    """The single-key window fetches of a segmented store's writer (see the module
    docstring); the attributes are :class:`~txstore.bytestores.segments.SegmentedBytesStore`'s."""

    name: str
    is_open: bool
    window: bool
    format: ValueFormat
    retention: int
    segment_interval: int
    observed_stream_time: int
    partition: PartitionBase
    _ids: list[int]
    _live: dict[int, Segment]

    def fetch_window_items(
        self, key: bytes, time_from: int, time_to: int, reverse: bool, decode: Any
    ) -> tuple[list[Any], list[list[bool]], bool] | None:
        """A single-key window fetch read in one go: ``(pairs, cells, True)``, the
        ``KeyValue(start, value)`` pairs of ``key``'s windows in ``[time_from, time_to]`` in
        fetch order, ``value`` the stored bytes' UTF-8 text when ``decode`` is None, else
        ``decode(bytes)`` (values are in the store's format), with the liveness cell of each
        pair's segment; ``(rows, cells, False)``: the rows of :meth:`fetch_window_rows`, for
        the caller to decode; None: use :meth:`fetch`.

        Raises :class:`~txstore.errors.DamagedFileError` for an entry whose checksum does not
        match, and what ``decode`` raises. O(log n) + O(windows) per segment in range."""
        if not self.is_open:
            raise StoreClosedError(self.name)
        # the bounds of fetch_window_rows (inlined: one call and a tuple less)
        actual_from = self.observed_stream_time - self.retention + 1
        if time_from > actual_from:
            actual_from = time_from
        if time_to < actual_from:
            return [], [], True
        if time_to < 0 or reverse or not self.window:
            return self._rows(key, time_from, time_to, reverse)
        if actual_from < 0:
            actual_from = 0
        interval = self.segment_interval
        first = actual_from // interval
        last = time_to // interval
        p = self.partition
        cursors = p.writer_cursors
        out: list[Any] | None = None
        for sid in self._ids:
            if first <= sid <= last:
                seg = self._live[sid]
                cur = cursors.get(seg.db)
                if cur is None or seg.fmt is not self.format:  # no cursor yet, or to convert
                    return self._rows(key, time_from, time_to, reverse)
                ov = seg.ov
                staged = None
                if ov is not None and (ov.mem or ov.layered):  # writes staged in the segment:
                    lo = key + _pack_qi(actual_from, 0)  # those of this key's windows, merged
                    hi = key + _pack_qi(time_to, INT_MAX)  # in C (one bisection of the index)
                    staged = ov.read_small(lo, hi, SMALL_READ_LIMIT)
                    if staged is None:  # spilled, a drop staged, or many: the general merge
                        read = self._window_rows(first, last, lo, hi, False)
                        return None if read is None else (read[0], read[1], False)
                try:
                    items = window_items(
                        cur, key, actual_from, time_to, SMALL_READ_LIMIT, KeyValue, decode,
                        p.checksums, staged or None,
                    )  # fmt: skip
                except ChecksumError as exc:
                    raise p.damaged(seg.db, exc) from None
                if items is None:  # another key's row in range, too many rows, not UTF-8
                    return self._rows(key, time_from, time_to, reverse)
                if out is None:
                    out = items
                    cells = [seg.cell] * len(items)
                elif items:
                    out += items
                    cells += [seg.cell] * len(items)
        return ([], [], True) if out is None else (out, cells, True)

    def fetch_session_items(
        self, key: bytes, earliest_end: int, latest_start: int, make: Any, key_obj: Any, decode: Any
    ) -> tuple[list[Any], list[list[bool]]] | None:
        """A single-key session search (session schema only) read in one go, forward:
        ``(pairs, cells)``, ``KeyValue(make(key_obj, start, end), value)`` for each session of
        ``key`` ending at or after ``earliest_end`` (and the retention's low end) and starting
        at or before ``latest_start``, segment by segment and by end, start within one, with
        the liveness cell of each pair's segment; ``value`` as :meth:`fetch_window_items`
        decodes it. None: use :meth:`fetch` (the writer's cursor not open yet, a segment in
        another format, writes of the key's sessions staged, another key's row between the
        bounds, more than 64 rows, bytes that are not UTF-8). Raises
        :class:`~txstore.errors.DamagedFileError` for an entry whose checksum does not match,
        and what ``make`` or ``decode`` raises. O(log n) + O(sessions) per live segment."""
        if not self.is_open:
            raise StoreClosedError(self.name)
        if self.window:
            return None
        actual_from = self.observed_stream_time - self.retention + 1
        if earliest_end > actual_from:
            actual_from = earliest_end
        if actual_from < 0:
            actual_from = 0
        first = actual_from // self.segment_interval
        p = self.partition
        cursors = p.writer_cursors
        out: list[Any] | None = None
        cells: list[list[bool]] = []
        for sid in self._ids:
            if sid >= first:  # a session ending later may start before latest_start
                seg = self._live[sid]
                cur = cursors.get(seg.db)
                if cur is None or seg.fmt is not self.format:
                    return None
                ov = seg.ov
                if ov is not None and (ov.mem or ov.layered):  # writes staged in the segment:
                    lo = key + _pack_qq(actual_from, 0)  # any of this key's sessions?
                    if ov.read_small(lo, key + _pack_qq(_LONG_MAX, latest_start), 1) != []:
                        return None
                try:
                    items = session_items(
                        cur, key, actual_from, latest_start, SMALL_READ_LIMIT, KeyValue, make,
                        key_obj, decode, p.checksums,
                    )  # fmt: skip
                except ChecksumError as exc:
                    raise p.damaged(seg.db, exc) from None
                if items is None:
                    return None
                if out is None:
                    out = items
                    cells = [seg.cell] * len(items)
                elif items:
                    out += items
                    cells += [seg.cell] * len(items)
        return ([], []) if out is None else (out, cells)

    def _rows(
        self, key: bytes, time_from: int, time_to: int, reverse: bool
    ) -> tuple[list[Any], list[list[bool]], bool] | None:
        read = self.fetch_window_rows(key, time_from, time_to, reverse)
        return None if read is None else (read[0], read[1], False)

    def fetch_window_rows(
        self, key: bytes, time_from: int, time_to: int, reverse: bool = False
    ) -> tuple[list[Row], list[list[bool]]] | None:
        """The fast path of a single-key window fetch (window schema only): every row between
        ``key || L(max(0, from)) || I(0)`` and ``key || L(to) || I(MAX)`` in one go, in fetch
        order, with the liveness cell of each row's segment (a parallel list: an iterator over
        the rows returns none whose cell is empty), or None when a segment holds too many (use
        :meth:`fetch`).

        The caller keeps the rows whose key is exactly ``len(key) + 12`` bytes long: for them,
        the byte order already implies the key and, for ``to >= 0``, the time bounds (a row of
        another length belongs to a longer key starting with ``key``). O(log n) + O(rows)."""
        if not self.is_open:
            raise StoreClosedError(self.name)
        # self._window_bounds(key, time_from, time_to), inlined (one call and a tuple less)
        actual_from = self.observed_stream_time - self.retention + 1
        if time_from > actual_from:
            actual_from = time_from
        if time_to < actual_from:
            return [], []
        if time_to < 0 or not self.window:
            return None
        if actual_from < 0:
            actual_from = 0
        interval = self.segment_interval
        first = actual_from // interval
        last = time_to // interval
        lo = key + _pack_qi(actual_from, 0)
        return self._window_rows(first, last, lo, key + _pack_qi(time_to, INT_MAX), reverse)

    def _window_rows(
        self, first: int, last: int, lo: bytes, hi: bytes, reverse: bool
    ) -> tuple[list[Row], list[list[bool]]] | None:
        """:meth:`fetch_window_rows` of segments ``first`` to ``last`` and bounds ``lo`` and
        ``hi``."""
        out: list[Row] = []
        cells: list[list[bool]] = []
        fmt = self.format
        for sid in reversed(self._ids) if reverse else self._ids:
            if first <= sid <= last:
                seg = self._live[sid]
                ov = seg.ov
                if seg.fmt is fmt and (ov is None or not ov.layered):
                    # The common case (nothing to convert, spilled or dropped): committed rows
                    # forward through the writer's cursor (read_range's loop inlined, checked).
                    cur = None if reverse else self.partition.writer_cursors.get(seg.db)
                    if cur is None:
                        rows, more = self.partition.read_range(
                            seg.db, lo, hi, reverse, SMALL_READ_LIMIT
                        )
                        if more:
                            return None
                    else:
                        rows = []
                        if cur.set_range(lo):
                            append = rows.append
                            room = SMALL_READ_LIMIT
                            for row in cur:
                                if row[0] > hi:
                                    break
                                if not room:
                                    return None
                                room -= 1
                                append(row)
                        self.partition.verify_rows(seg.db, rows)
                    if ov is not None and ov.mem:  # then the staged rows over them
                        staged = ov.read_small(lo, hi, SMALL_READ_LIMIT)
                        if staged is None:
                            return None
                        if staged:
                            rows = merge_rows(staged, rows, False)
                else:
                    small = self._read_small(sid, lo, hi, reverse)
                    if small is None:
                        return None
                    rows = list(small)
                if reverse:
                    rows.reverse()
                if out:
                    out += rows
                else:
                    out = rows
                cells += [seg.cell] * len(rows)
        return out, cells

    # -- writes -------------------------------------------------------------------------------
