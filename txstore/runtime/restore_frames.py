"""The restore loop over changelog batches left in the reader's buffers (key-value stores).

:func:`replay_frames` reads ``read_committed_frames`` (``FrameBatch`` objects: where each
stored batch's records are, nothing decoded) and cuts them into restore chunks exactly as the
decoded loop of :func:`~txstore.runtime.task_support.restore_store` does (``batch_records``
records, or all pending once about ``batch_bytes`` are), each handed on as a list of frame
slices ``(buf, pos, end, n, has_headers, lo, hi)``: to
:meth:`~txstore.bytestores.kv.BytesKeyValueStore.restore_frames` by the chunked restore, to
:meth:`~txstore.bytestores.restore_runs.SortedRuns.add_frames` by the sorted one. No object is
made per record and no column list is extended and cut.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["replay_frames"]


def replay_frames(
    batches: Any,
    apply: Callable[[list[Any], int], None],
    end: int,
    limits: tuple[int, int],
    after: Callable[[int], None],
) -> int:
    """Read ``batches`` (a closeable iterator of ``FrameBatch``; closed here) up to changelog
    offset ``end`` and call ``apply(frames, offset)`` for each chunk (``offset``: the one after
    its last record), then ``after(records replayed so far)``. ``limits``: the chunk's
    ``(batch_records, batch_bytes)``. Returns how many records were replayed. O(batches) of
    Python work; the records are only touched by ``apply``."""
    batch_records, batch_bytes = limits
    pieces: deque[tuple[tuple[Any, ...], Any]] = deque()  # (frame slice, its offsets)
    count = pending_bytes = restored = 0

    def flush(n: int) -> None:
        nonlocal count, pending_bytes, restored
        take: list[Any] = []
        left = n
        while left:
            frame, offsets = pieces[0]
            if len(offsets) <= left:
                pieces.popleft()
                take.append(frame)
                left -= len(offsets)
                last = offsets[-1]
            else:  # split the batch: its first ``left`` records now, the rest later
                buf, pos, stop, size, has_headers, lo, hi = frame
                take.append((buf, pos, stop, size, has_headers, lo, lo + left))
                pieces[0] = ((buf, pos, stop, size, has_headers, lo + left, hi), offsets[left:])
                last = offsets[left - 1]
                left = 0
        apply(take, last + 1)
        count -= n
        restored += n
        pending_bytes = 0
        after(restored)

    with batches:
        for batch in batches:
            offsets, frame, nbytes = batch.offsets, batch.frame, batch.nbytes
            n = len(offsets)
            if offsets[0] >= end:
                break
            if offsets[-1] >= end:  # a concurrent writer's later commit: stop at end
                n = bisect_left(offsets, end)
                nbytes = nbytes * n // len(offsets)  # about: it only decides when to flush
                buf, pos, stop, size, has_headers, lo, _ = frame
                frame, offsets = (buf, pos, stop, size, has_headers, lo, lo + n), offsets[:n]
            pieces.append((frame, offsets))
            count += n
            pending_bytes += 128 * n + nbytes
            while count >= batch_records:
                flush(batch_records)
            if count and pending_bytes >= batch_bytes:
                flush(count)
    if count:
        flush(count)
    return restored
