"""The sorted restore of an empty key-value store of a task (see
:mod:`txstore.bytestores.restore_runs`).

:func:`~txstore.runtime.task_support.restore_store` takes this path when the store is a
persistent key-value store that has committed nothing and holds no row, and its changelog holds
more records than one restore batch; otherwise (a store with data, a window or session store,
an in-memory store, a short changelog) it replays chunk by chunk as before.

Phase 1 reads the changelog chunk by chunk, as the chunked restore does (at most
``batch_records`` records or about ``batch_bytes`` a chunk), and writes each chunk as a sorted
run; phase 2 merges the runs into the store in one synced transaction with the changelog's end
offset. The fault point ``task.restore_batch`` is reached after each run written and once more
after the commit; the progress callback is called at the same moments, ``restored`` counting
the changelog records read into runs (nothing is committed before the last call: a crash
before it leaves the store empty, and the next restore starts over).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from txstore.bytestores.restore_runs import SortedRuns
from txstore.runtime.restore_frames import replay_frames

__all__ = ["restore_sorted"]


def restore_sorted(
    entry: Any,
    on_step: Callable[[int, int], None],
    batch_records: int,
    batch_bytes: int,
    start: int,
    end: int,
    memory_bytes: int,
) -> int:
    """Restore ``entry`` (a :class:`~txstore.runtime.task_support.StoreEntry` whose store is
    empty) from changelog offset ``start`` to ``end`` by sorted runs; returns the number of
    records replayed. ``on_step(restored, total)`` is called after each run written and after
    the commit (the fault point and the progress callback of the caller); runs are kept in
    memory up to ``memory_bytes``, the rest go to a file."""
    log, raw = entry.log, entry.raw
    total = end - start
    with SortedRuns(raw, entry.format, memory_bytes) as runs:  # changelog read in place
        restored = replay_frames(
            log.read_committed_frames(start),
            lambda frames, _offset: runs.add_frames(frames),
            end,
            (batch_records, batch_bytes),
            lambda done: on_step(done, total),
        )
        runs.commit(end)
    on_step(restored, total)
    return restored
