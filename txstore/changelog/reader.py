"""Read-committed iterators over a file changelog's segments.

An iterator reads a *snapshot* of the segment list taken when it was created: every segment but
the last is read to its end (closed segments hold committed data only and end with a commit
marker); the last is read up to the end of its last commit marker as of the snapshot. Every frame
read is checked against its CRC; a bad frame there is committed data, so it raises
:class:`~txstore.errors.ChangelogCorruptionError` naming the file, byte position and offset.

Cleanup may rewrite or delete segments while an iterator is open (in this process or another).
A segment file the iterator already opened stays readable (POSIX keeps an unlinked file alive);
one that disappeared before it was opened makes the iterator take a fresh segment list and go on
from the next offset it wants, skipping offsets it already returned. It therefore returns
committed records in strictly increasing offset order, each at most once; a record that a
concurrent compaction removed may or may not be returned (as with Kafka consumers reading a
topic that is being cleaned).
"""

from __future__ import annotations

import os
import struct
import warnings
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from txstore._checksums import column_bytes, decode_columns
from txstore.changelog.format import (
    T_BATCH,
    Frame,
    FrameReader,
    batch_info,
    batch_layout,
    corruption,
    decode_batch,
    frame_problem,
)
from txstore.changelog.markers import decode_marker

__all__ = [
    "BatchIterator",
    "ChangelogRecord",
    "FrameBatch",
    "FrameIterator",
    "RecordBatch",
    "RecordIterator",
    "SegmentRef",
]


class ChangelogRecord(NamedTuple):
    """One committed changelog record. ``value is None`` is a tombstone; ``headers`` are Kafka's
    serialized headers bytes (``b""``: none; decode with :func:`txstore.codecs.decode_headers`).
    """

    offset: int
    key: bytes
    value: bytes | None
    timestamp: int
    headers: bytes


_new_record: Callable[..., ChangelogRecord] = tuple.__new__  # (cls, tuple): no Python frame


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Consecutive committed records as columns, the shape restore wants: every column has the
    same length, offsets are strictly increasing (with gaps where compaction removed records).

    >>> b = RecordBatch(range(5, 7), [b"a", b"b"], [b"1", None], (10, 11), [b"", b""])
    >>> len(b), list(b)[1]
    (2, ChangelogRecord(offset=6, key=b'b', value=None, timestamp=11, headers=b''))
    """

    offsets: Sequence[int]
    keys: Sequence[bytes]
    values: Sequence[bytes | None]
    timestamps: Sequence[int]
    headers: Sequence[bytes]
    nbytes: int | None = None
    """The keys', values' and headers' bytes, when known (a whole stored batch)."""

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[ChangelogRecord]:
        """The records, as :class:`ChangelogRecord` tuples."""
        return map(
            _new_record,
            repeat(ChangelogRecord),
            zip(self.offsets, self.keys, self.values, self.timestamps, self.headers),  # noqa: B905
        )

    @property
    def first_offset(self) -> int:
        return self.offsets[0]

    @property
    def last_offset(self) -> int:
        return self.offsets[-1]


#: A stored batch's columns in a read buffer: (buf, pos, end, n, has_headers, lo, hi), records
#: [lo, hi) of the n whose columns start at ``buf[pos]`` (``restore_frames`` takes a list).
FrameSlice = tuple[bytes, int, int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class FrameBatch:
    """Consecutive committed records of one stored batch left undecoded where the reader read
    them: ``frame`` says where their columns are (checked: they add up to the batch), ``offsets``
    their offsets, ``nbytes`` their keys', values' and headers' bytes. :meth:`decode` gives the
    :class:`RecordBatch`. What restore reads, so that no object is made per record."""

    offsets: Sequence[int]
    frame: FrameSlice
    nbytes: int

    def __len__(self) -> int:
        return len(self.offsets)

    def decode(self) -> RecordBatch:
        """The records as a :class:`RecordBatch` (one object per item)."""
        return decode_frame(self.frame, self.offsets)


def decode_frame(frame: FrameSlice, offsets: Sequence[int]) -> RecordBatch:
    """The records ``[lo, hi)`` of ``frame`` (their ``offsets`` given) as a :class:`RecordBatch`."""
    buf, p, end, n, has_headers, lo, hi = frame
    stamps, keys, values, headers, nbytes = decode_columns(buf, p, end, n, has_headers, False)
    if lo == 0 and hi == n:
        return RecordBatch(offsets, keys, values, stamps, headers, nbytes)
    return RecordBatch(offsets, keys[lo:hi], values[lo:hi], stamps[lo:hi], headers[lo:hi])


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A segment as an iterator sees it: ``limit`` bytes of the file with inode ``ino`` are
    committed (``limit is None``: the whole file, a closed segment)."""

    base: int
    path: str
    limit: int | None = None
    ino: int | None = None


class SegmentSource:
    """What an iterator needs from its log: a fresh segment list, and its registry."""

    def segment_refs(self) -> tuple[list[SegmentRef], int]:
        """The current segments and the committed end offset."""
        raise NotImplementedError

    def forget_iterator(self, it: BatchIterator) -> None:
        raise NotImplementedError


class BatchIterator:
    """Committed records with offsets in ``[from_offset, end)`` as :class:`RecordBatch` objects,
    one per stored batch (as large as the writer's ``batch_bytes``); ``frames=True``: as
    :class:`FrameBatch` objects, left undecoded (their columns checked).

    Closeable and a context manager; exhausted, it closes itself; garbage-collected while open,
    it emits a ``ResourceWarning``. Cost: O(bytes read), with one CRC per stored batch.
    """

    def __init__(
        self,
        source: SegmentSource,
        segments: list[SegmentRef],
        from_offset: int,
        end: int,
        *,
        frames: bool = False,
    ) -> None:
        self._source: SegmentSource | None = source
        self._raw = frames
        self._segs = segments
        self._idx = _start_index(segments, from_offset)
        self._next = from_offset
        self._end = end
        # Offset after the last batch read in the open file (its base offset at first): where
        # the records of the frame read next start, at or after it (for corruption errors).
        self._file_next = 0
        self._fd = -1
        self._frames: FrameReader | None = None
        self._path = ""
        self._closed = from_offset >= end or not segments
        if self._closed:
            self._source = None

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> RecordBatch:
        batch = self.next_batch()
        assert isinstance(batch, RecordBatch)  # frames=False
        return batch

    def next_batch(self) -> RecordBatch | FrameBatch:
        """The next batch (a :class:`FrameBatch` when made with ``frames=True``); raises
        ``StopIteration`` at the end."""
        while not self._closed:
            frames = self._frames
            if frames is None:
                if not self._open_next():
                    break
                continue
            frame = frames.next()
            if not isinstance(frame, Frame):
                if frame == "eof":
                    self._close_fd()
                    self._idx += 1
                    continue
                raise corruption(self._path, frames.pos, self._file_next, frame_problem(frame))
            if not frame.crc_ok:
                raise corruption(self._path, frame.pos, self._file_next, "checksum mismatch")
            if frame.ftype != T_BATCH:
                if decode_marker(frame) is None:
                    raise corruption(
                        self._path, frame.pos, self._file_next, "malformed commit marker"
                    )
                continue
            batch = self._batch(frame)
            if batch is not None:
                return batch
        self.close()
        raise StopIteration

    def _batch(self, frame: Frame) -> RecordBatch | FrameBatch | None:
        try:
            info = batch_info(frame)
            last = info.last_offset
            if info.base_offset < self._file_next:
                raise corruption(
                    self._path,
                    frame.pos,
                    self._file_next,
                    f"a record batch of offsets [{info.base_offset}, {last}] out of sequence "
                    f"(expected offsets from {self._file_next} on)",
                )
            if last < self._next:
                self._file_next = last + 1
                return None  # wholly before the start offset: not decoded
            if self._raw:
                offsets, p, end, n, has_headers, _, _ = batch_layout(frame)
                nbytes = column_bytes(frame.buf, p, end, n, has_headers, 0, n)  # checks them
            else:
                cols = decode_batch(frame)
                offsets = cols.offsets
        except (ValueError, struct.error):
            raise corruption(
                self._path, frame.pos, self._file_next, "malformed record batch"
            ) from None
        self._file_next = last + 1
        lo = 0 if offsets[0] >= self._next else bisect_left(offsets, self._next)
        hi = len(offsets) if offsets[-1] < self._end else bisect_left(offsets, self._end)
        if hi < len(offsets):
            self._close_fd()
            self._idx = len(self._segs)  # reached the snapshot's committed end
        if lo >= hi:
            return None
        self._next = offsets[hi - 1] + 1
        whole = lo == 0 and hi == len(offsets)
        if self._raw:
            if not whole:
                nbytes = column_bytes(frame.buf, p, end, n, has_headers, lo, hi)
                offsets = offsets[lo:hi]
            return FrameBatch(offsets, (frame.buf, p, end, n, has_headers, lo, hi), nbytes)
        if whole:
            return RecordBatch(
                offsets, cols.keys, cols.values, cols.timestamps, cols.headers, cols.nbytes
            )
        return RecordBatch(
            offsets[lo:hi],
            cols.keys[lo:hi],
            cols.values[lo:hi],
            cols.timestamps[lo:hi],
            cols.headers[lo:hi],
        )

    def _open_next(self) -> bool:
        while self._idx < len(self._segs):
            seg = self._segs[self._idx]
            try:
                fd = os.open(seg.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                self._relist()  # cleanup rewrote or deleted it: take a fresh list
                continue
            limit = seg.limit if seg.ino == os.fstat(fd).st_ino else None
            self._fd, self._path, self._file_next = fd, seg.path, seg.base
            self._frames = FrameReader(fd, 0, limit)
            return True
        return False

    def _relist(self) -> None:
        if self._source is None:
            self._idx = len(self._segs)
            return
        segments, _ = self._source.segment_refs()
        self._segs = segments
        self._idx = _start_index(segments, self._next)

    def _close_fd(self) -> None:
        self._frames = None
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def close(self) -> None:
        """Release the iterator's file. Idempotent."""
        if self._closed and self._fd < 0:
            return
        self._closed = True
        self._close_fd()
        source, self._source = self._source, None
        if source is not None:
            source.forget_iterator(self)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def next_offset(self) -> int:
        """The smallest offset the iterator may still return."""
        return self._next

    def __enter__(self) -> BatchIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            warnings.warn(
                "unclosed changelog iterator: close it, or use it in a 'with' block or until "
                "exhaustion",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )


class FrameIterator:
    """Committed records as :class:`FrameBatch` objects (a :class:`BatchIterator` made with
    ``frames=True``). Closeable and a context manager, like it."""

    __slots__ = ("_batches",)

    def __init__(self, batches: BatchIterator) -> None:
        self._batches = batches

    def __iter__(self) -> FrameIterator:
        return self

    def __next__(self) -> FrameBatch:
        batch = self._batches.next_batch()
        assert isinstance(batch, FrameBatch)  # frames=True
        return batch

    def close(self) -> None:
        """Release the iterator. Idempotent."""
        self._batches.close()

    @property
    def closed(self) -> bool:
        return self._batches.closed

    def __enter__(self) -> FrameIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start_index(segments: list[SegmentRef], offset: int) -> int:
    """Index of the segment to start reading ``offset`` from: the last one whose base is at or
    below it (offset may sit in a compaction gap), else the first."""
    return max(0, bisect_right([s.base for s in segments], offset) - 1)


class RecordIterator:
    """Committed records as :class:`ChangelogRecord` tuples (a :class:`BatchIterator`, flattened).

    Closeable and a context manager, like :class:`BatchIterator`.
    """

    __slots__ = ("_batches", "_cur")

    def __init__(self, batches: BatchIterator) -> None:
        self._batches = batches
        self._cur: Iterator[ChangelogRecord] = iter(())

    def __iter__(self) -> RecordIterator:
        return self

    def __next__(self) -> ChangelogRecord:
        try:
            return next(self._cur)
        except StopIteration:
            self._cur = iter(next(self._batches))  # a batch is never empty
            return next(self._cur)

    def close(self) -> None:
        """Release the iterator. Idempotent."""
        self._cur = iter(())
        self._batches.close()

    @property
    def closed(self) -> bool:
        return self._batches.closed

    def __enter__(self) -> RecordIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
