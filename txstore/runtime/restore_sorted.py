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
) -> int:
    """Restore ``entry`` (a :class:`~txstore.runtime.task_support.StoreEntry` whose store is
    empty) from changelog offset ``start`` to ``end`` by sorted runs; returns the number of
    records replayed. ``on_step(restored, total)`` is called after each run written and after
    the commit (the fault point and the progress callback of the caller)."""
    log, raw = entry.log, entry.raw
    total = end - start
    restored = 0
    keys: list[bytes] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[bytes] = []
    pending_bytes = 0
    read_frames = getattr(log, "read_committed_frames", None)
    if read_frames is not None:  # the changelog read in place: no object per record
        with SortedRuns(raw, entry.format) as runs:
            restored = replay_frames(
                read_frames(start),
                lambda frames, _offset: runs.add_frames(frames),
                end,
                (batch_records, batch_bytes),
                lambda done: on_step(done, total),
            )
            runs.commit(end)
        on_step(restored, total)
        return restored
    with SortedRuns(raw, entry.format) as runs:

        def flush(n: int) -> None:
            nonlocal restored, pending_bytes
            whole = n == len(keys)
            runs.add(
                keys if whole else keys[:n],
                values if whole else values[:n],
                stamps if whole else stamps[:n],
                headers if whole else headers[:n],
            )
            restored += n
            pending_bytes = 0
            for column in (keys, values, stamps, headers):
                del column[:n]
            on_step(restored, total)

        with log.read_committed_batches(start) as batches:
            for batch in batches:
                n = len(batch)
                if batch.offsets[0] >= end:
                    break
                if batch.offsets[-1] >= end:  # a concurrent writer's later commit: stop at end
                    n = sum(1 for o in batch.offsets if o < end)
                whole = n == len(batch)
                keys.extend(batch.keys if whole else batch.keys[:n])
                values.extend(batch.values if whole else batch.values[:n])
                stamps.extend(batch.timestamps if whole else batch.timestamps[:n])
                headers.extend(batch.headers if whole else batch.headers[:n])
                pending_bytes += 128 * n
                if batch.nbytes is not None and whole:
                    pending_bytes += batch.nbytes
                else:
                    pending_bytes += sum(map(len, keys[-n:])) + sum(map(len, headers[-n:]))
                    pending_bytes += sum(map(len, filter(None, values[-n:])))
                while len(keys) >= batch_records:
                    flush(batch_records)
                if keys and pending_bytes >= batch_bytes:
                    flush(len(keys))
        if keys:
            flush(len(keys))
        runs.commit(end)
    on_step(restored, total)
    return restored
