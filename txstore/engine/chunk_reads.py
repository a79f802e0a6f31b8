"""Reading one chunk of a key range from a tier: an LMDB cursor (:func:`read_lmdb_chunk`, in C
but for the cursor's positioning) or a sortedcontainers index (:func:`read_sorted_chunk`).

Each returns the rows **in ascending key order** (also for a reverse read: then they are the n
rows nearest the range's end) and the frontier, as :class:`~txstore.engine.iterators.ChunkSource`
states; the tiers of :mod:`txstore.engine.iterators` are read through them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import islice
from typing import Any

from txstore._checksums import scan_rows as _scan_rows
from txstore.engine.iterators import KeyRange, Row

__all__ = ["read_lmdb_chunk", "read_lmdb_chunk_py", "read_sorted_chunk"]


def _position(cursor: Any, rng: KeyRange, reverse: bool) -> bool:
    """Put ``cursor`` on the first row of ``rng`` in scan order (the last one for ``reverse``);
    False when the range holds no row from there on."""
    if reverse:
        hi = rng.hi
        if hi is None:
            return bool(cursor.last())
        if not cursor.set_range(hi):
            return bool(cursor.last())
        if not rng.hi_inclusive or cursor.key() != hi:
            return bool(cursor.prev())
        return True
    lo = rng.lo
    if lo is None:
        return bool(cursor.first())
    ok = cursor.set_range(lo)
    if ok and not rng.lo_inclusive and cursor.key() == lo:
        ok = cursor.next()
    return bool(ok)


def read_lmdb_chunk(
    cursor: Any,
    rng: KeyRange,
    reverse: bool,
    n: int,
    verify: Callable[[list[Any]], list[Any]] | None = None,
) -> tuple[list[Any], bytes | None]:
    """Read one chunk of ``rng`` from an LMDB cursor: O(log N + n).

    The cursor is positioned here (a few method calls a chunk); the rows are read by the C
    function :func:`txstore._checksums.scan_rows` (``csrc/scan_rows.c``), which drives the
    cursor's iterator without a Python frame and stops at the range's end. ``verify``: for a
    database whose values carry checksum trailers, the partition's ``verify_rows`` for it; the
    trailers are then checked and stripped while reading, and on a mismatch the chunk is read
    again in Python (:func:`read_lmdb_chunk_py`) and handed to ``verify``, which records the
    damage and raises the typed error.
    """
    if not _position(cursor, rng, reverse):
        return [], None
    sealed = verify is not None
    if reverse:
        got = _scan_rows(cursor.iterprev(), n, rng.lo, rng.lo_inclusive, True, sealed)
    else:
        got = _scan_rows(cursor.iternext(), n, rng.hi, rng.hi_inclusive, False, sealed)
    if got is None:  # a checksum mismatch: read again, verify raises the typed error
        rows, frontier = read_lmdb_chunk_py(cursor, rng, reverse, n)
        return (rows if verify is None else verify(rows)), frontier
    rows, stopped = got
    if stopped or len(rows) < n:
        return rows, None
    return rows, rows[0 if reverse else -1][0]


def read_lmdb_chunk_py(
    cursor: Any, rng: KeyRange, reverse: bool, n: int
) -> tuple[list[Any], bytes | None]:
    """:func:`read_lmdb_chunk` in Python, without checking trailers: the general path of a
    chunk in which the C read met a row it does not take (a checksum mismatch)."""
    lo, hi = rng.lo, rng.hi
    if not _position(cursor, rng, reverse):
        return [], None
    if not reverse:
        rows = list(islice(cursor.iternext(), n))
        if (
            hi is not None
            and rows
            and (rows[-1][0] > hi or (rows[-1][0] == hi and not rng.hi_inclusive))
        ):
            if rng.hi_inclusive:
                del rows[bisect_left(rows, (hi + b"\x00",)) :]
            else:
                del rows[bisect_left(rows, (hi,)) :]
            return rows, None
        return rows, (rows[-1][0] if len(rows) == n else None)
    rows = list(islice(cursor.iterprev(), n))
    rows.reverse()
    if lo is not None and rows and (rows[0][0] < lo or (rows[0][0] == lo and not rng.lo_inclusive)):
        if rng.lo_inclusive:
            del rows[: bisect_left(rows, (lo,))]
        else:
            del rows[: bisect_left(rows, (lo + b"\x00",))]
        return rows, None
    return rows, (rows[0][0] if len(rows) == n else None)


def read_sorted_chunk(
    index: Any, mapping: Any, rng: KeyRange, reverse: bool, n: int
) -> tuple[list[Row], bytes | None]:
    """Read one chunk from a sortedcontainers index (``irange``) and a key->value mapping.

    O(log N + n). ``index`` is a ``SortedList`` or a ``SortedDict``; ``mapping`` maps every key of
    the index to its value.
    """
    keys = list(
        islice(index.irange(rng.lo, rng.hi, (rng.lo_inclusive, rng.hi_inclusive), reverse), n)
    )
    frontier = keys[-1] if len(keys) == n else None
    if reverse:
        keys.reverse()
    get = mapping.__getitem__
    return [(k, get(k)) for k in keys], frontier
