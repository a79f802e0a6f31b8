"""Window and session keys checked against their segments when a store opens after a crash.

LMDB keeps no checksums. The page walk at an open after an unclean shutdown
(:attr:`txstore.engine.partition.Partition.page_walk`, ``docs/engine.md``) checks page
structure and key order, so it misses a flipped byte in a window or session key's timestamp
when the key still sorts between its neighbours: the row would be served under a window that
was never written. Such a key breaks its key schema's own rules, which this module checks for
every key of every segment of a window or session store, once per partition object, when the
store opens on a partition that was walked:

* the key is at least the schema's suffix long (12 bytes for windows, 16 for sessions);
* its segment timestamp (window start, session end) is ``>= 0`` and lies in the segment it is
  stored in: ``sid * interval <= ts < (sid + 1) * interval``, i.e. ``ts // interval == sid``,
  the segment id a ``put`` gives it (``SegmentedBytesStore.put_at``);
* a session's start is ``>= 0`` and at most its end (``SessionWindow`` refuses others);
* a window store registered without ``retain_duplicates`` has sequence number 0.

A violation is a :class:`~txstore.errors.DamagedFileError` naming ``data.mdb``, the store, the
segment and the key in hex, raised before the store serves a read. Keys are read in chunks
through the partition's chunk source and split into columns by the codecs' C key splitters
(``window_key_columns``, ``session_key_columns``: one call a chunk, no object per key), with
``min``/``max``/``any`` over the time arrays: no Python loop per key unless a chunk is bad. Cost:
``perf/bench_segment_check.py``, figure in ``docs/engine.md``. A clean open checks nothing
(nothing was walked); an in-memory partition has no file and no page walk.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from txstore import codecs
from txstore.bytestores.schemas import KeySchema
from txstore.codecs._native import session_key_columns, window_key_columns
from txstore.engine.base import PartitionBase
from txstore.engine.iterators import KeyRange
from txstore.engine.lmdb_errors import data_file
from txstore.errors import DamagedFileError

__all__ = ["CHUNK_ROWS", "check_segment_keys", "skip_key_check"]

CHUNK_ROWS: Final = 65536
"""Rows read a chunk (bounds the memory of the check on a large segment)."""

# Stores already checked on a partition object (a store reopened on the same open partition is
# not checked twice: its rows since the walk were written by this process).
_checked: weakref.WeakKeyDictionary[PartitionBase, set[str]] = weakref.WeakKeyDictionary()


_skipped: weakref.WeakSet[PartitionBase] = weakref.WeakSet()


def skip_key_check(partition: PartitionBase) -> None:
    """No store opened on ``partition`` from now on checks its keys: for a caller that checks
    every key itself and wants each bad row reported rather than the store refused
    (``txstore check --deep``). O(1)."""
    _skipped.add(partition)


class CheckedStore(Protocol):
    """What the check needs of a segmented store."""

    @property
    def partition(self) -> PartitionBase:
        """The partition holding the store."""
        ...

    @property
    def name(self) -> str:
        """The store name."""
        ...

    @property
    def schema(self) -> KeySchema:
        """The store's key schema."""
        ...

    @property
    def segment_interval(self) -> int:
        """The length of a segment in milliseconds."""
        ...

    @property
    def meta(self) -> Mapping[str, Any]:
        """The store's registered metadata (``retain_duplicates`` for window stores)."""
        ...

    def segment_db(self, sid: int) -> bytes:
        """The database name of segment ``sid``."""
        ...


def check_segment_keys(store: CheckedStore, segment_ids: Sequence[int]) -> None:
    """Check every committed key of the segments ``segment_ids`` of ``store`` (see the module
    docstring) if its partition was page-walked at open; raise
    :class:`~txstore.errors.DamagedFileError` on the first bad key. O(keys), in chunks."""
    p = store.partition
    if getattr(p, "page_walk", None) is None or p in _skipped:
        return
    done = _checked.setdefault(p, set())
    if store.name in done:
        return
    strict_seq = store.meta.get("retain_duplicates") is False
    for sid in segment_ids:
        db = store.segment_db(sid)
        source = p.source(db)
        rng = KeyRange()
        while True:
            rows, frontier = source.read_chunk(rng, False, CHUNK_ROWS)
            if rows:
                keys = [row[0] for row in rows]
                if not _chunk_ok(store.schema, store.segment_interval, sid, keys, strict_seq):
                    _raise_first_bad(store, sid, db, keys, strict_seq)
            if frontier is None:
                break
            rng = rng.after(frontier, False)
    done.add(store.name)


def _chunk_ok(schema: KeySchema, interval: int, sid: int, keys: list[bytes], seq0: bool) -> bool:
    """Whether every key of one chunk of segment ``sid`` keeps the rules (the fast path: one C
    call splits the chunk into arrays of times, then ``min``/``max``/``any`` over them)."""
    if min(map(len, keys)) < schema.suffix:
        return False
    if schema.window:
        cols = window_key_columns(keys)
        if seq0 and any(cols.second):
            return False
    else:
        cols = session_key_columns(keys)  # first: ends, second: starts
        if min(cols.second) < 0 or not all(map(operator.le, cols.second, cols.first)):
            return False
    lo = sid * interval
    return bool(min(cols.first) >= lo and max(cols.first) < lo + interval)


def key_fault(schema: KeySchema, interval: int, sid: int, key: bytes, seq0: bool) -> str:
    """What is wrong with one key of segment ``sid`` ('' if nothing)."""
    if len(key) < schema.suffix:
        return f"{len(key)} bytes, shorter than the {schema.suffix}-byte {schema.kind} suffix"
    if schema.window:
        _, time, seq = codecs.extract_window_key(key)
        what = "window start"
        if seq0 and seq:
            return f"sequence number {seq} in a store without retain_duplicates"
    else:
        _, start, time = codecs.extract_session_key(key)
        what = "session end"
        if start < 0 or start > time:
            return f"session [{start}, {time}] is not a window (start negative or after the end)"
    if time < 0 or time // interval != sid:
        return f"{what} {time} belongs to segment {time // interval}, not {sid}"
    return ""


def _raise_first_bad(
    store: CheckedStore, sid: int, db: bytes, keys: list[bytes], seq0: bool
) -> None:
    for key in keys:
        why = key_fault(store.schema, store.segment_interval, sid, key, seq0)
        if why:
            raise DamagedFileError(
                data_file(store.partition.path or ""),
                f"{store.schema.kind} store {store.name!r}, segment {sid} (database "
                f"{db.decode(errors='replace')!r}): key {key.hex()}: {why} (a flipped byte the "
                "page walk cannot see: LMDB keeps no checksums)",
            )
    raise DamagedFileError(  # pragma: no cover - the fast path and key_fault disagree
        data_file(store.partition.path or ""),
        f"{store.schema.kind} store {store.name!r}, segment {sid}: a key breaks its key schema",
    )
