"""Commit markers of the changelog's segment files: encoding both copies, decoding, finding the
marker that ends a file, and telling a torn marker pair from a damaged one.

The layout is in :mod:`txstore.changelog.format`: a version 2 marker is written twice, two
identical frames in one write, after the transaction's records were synced. Reading it back:

* both copies present and identical: the commit happened;
* the file ends inside the pair and what is there of the second copy is a prefix of the first
  (or the first copy is cut short): the pair was being written when the process or the machine
  stopped, the commit never returned, it is a torn tail;
* anything else (a copy that differs, a bad first copy followed by a good second one, more
  frames after a bad copy): damage to committed data, never truncated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from txstore.changelog.format import (
    MAGIC,
    MARKER_FIXED,
    MARKER_FIXED_SIZE,
    MARKER_FIXED_SIZE_V1,
    MARKER_FIXED_V1,
    MARKER_OVERHEAD,
    MARKER_OVERHEAD_V1,
    READ_CHUNK,
    T_MARKER,
    TRAILER,
    VERSION,
    Frame,
    FrameReader,
    frame_parts,
)

__all__ = [
    "COPY_DAMAGED",
    "COPY_OK",
    "COPY_TORN",
    "Marker",
    "commit_marker",
    "decode_marker",
    "find_valid_marker",
    "marker_copy",
    "marker_frame",
    "marker_pair_size",
    "read_last_marker",
]


@dataclass(frozen=True, slots=True)
class Marker:
    """A decoded commit marker. ``end_pos`` is the end of this frame; ``commit_end_pos`` the
    end of the commit (of its second copy, for version 2). Version 1 markers have no
    ``start_offset`` and ``txn_start_pos`` (-1)."""

    pos: int
    end_pos: int
    txn_id: int
    end_offset: int
    input_position: int
    max_timestamp: int
    commit_time_ms: int
    metadata: bytes
    version: int = VERSION
    start_offset: int = -1
    txn_start_pos: int = -1

    @property
    def commit_end_pos(self) -> int:
        """File position just after the commit (both copies of a version 2 marker)."""
        if self.version == 1:
            return self.end_pos
        return 2 * self.end_pos - self.pos


def marker_frame(
    txn_id: int,
    end_offset: int,
    input_position: int,
    max_timestamp: int,
    commit_time_ms: int,
    metadata: bytes = b"",
    *,
    start_offset: int,
    txn_start_pos: int,
) -> bytes:
    """Encode one copy of a commit marker frame (see the module docstring for the layout)."""
    m = len(metadata)
    parts = [
        MARKER_FIXED.pack(
            end_offset,
            start_offset,
            input_position,
            max_timestamp,
            commit_time_ms,
            txn_start_pos,
            m,
        ),
        metadata,
        TRAILER.pack(MARKER_OVERHEAD + m),
    ]
    return b"".join(frame_parts(T_MARKER, 0, txn_id, parts))


def commit_marker(
    txn_id: int,
    end_offset: int,
    input_position: int,
    max_timestamp: int,
    commit_time_ms: int,
    metadata: bytes = b"",
    *,
    start_offset: int,
    txn_start_pos: int,
) -> list[bytes]:
    """The two identical copies of a commit marker, to write together (``writev``)."""
    frame = marker_frame(
        txn_id,
        end_offset,
        input_position,
        max_timestamp,
        commit_time_ms,
        metadata,
        start_offset=start_offset,
        txn_start_pos=txn_start_pos,
    )
    return [frame, frame]


def marker_pair_size(metadata_length: int) -> int:
    """Bytes a commit (both copies of its marker) takes for ``metadata_length`` bytes of
    metadata."""
    return 2 * (MARKER_OVERHEAD + metadata_length)


def decode_marker(frame: Frame) -> Marker | None:
    """Decode a marker frame whose CRC matched; None if its fields are inconsistent."""
    buf, o = frame.buf, frame.boff
    start_offset = txn_start = -1
    if frame.version == 1:
        end_offset, position, max_ts, when, m = MARKER_FIXED_V1.unpack_from(buf, o)
        fixed, overhead = MARKER_FIXED_SIZE_V1, MARKER_OVERHEAD_V1
    else:
        end_offset, start_offset, position, max_ts, when, txn_start, m = MARKER_FIXED.unpack_from(
            buf, o
        )
        fixed, overhead = MARKER_FIXED_SIZE, MARKER_OVERHEAD
        if not 0 <= start_offset <= end_offset or not 0 <= txn_start <= frame.pos:
            return None
    if fixed + m + 4 != frame.blen:
        return None
    (flen,) = TRAILER.unpack_from(buf, o + fixed + m)
    if flen != overhead + m or end_offset < 0:
        return None
    metadata = bytes(buf[o + fixed : o + fixed + m])
    return Marker(
        frame.pos,
        frame.end,
        frame.txn_id,
        end_offset,
        position,
        max_ts,
        when,
        metadata,
        frame.version,
        start_offset,
        txn_start,
    )


#: :func:`marker_copy` results: the second copy of a version 2 marker is identical (OK), the
#: file ends inside it and what is there is a prefix of the first copy (TORN: the pair was
#: being written), or it differs (DAMAGED).
COPY_OK: Final = "ok"
COPY_TORN: Final = "torn"
COPY_DAMAGED: Final = "damaged"


def marker_copy(fd: int, frame: Frame, limit: int) -> str:
    """Compare the bytes after the version 2 marker ``frame`` (up to the file position
    ``limit``) with the frame itself: COPY_OK, COPY_TORN or COPY_DAMAGED."""
    first = frame.raw()
    n = len(first)
    avail = max(0, min(n, limit - frame.end))
    copy = os.pread(fd, avail, frame.end) if avail else b""
    if len(copy) == n:
        return COPY_OK if copy == first else COPY_DAMAGED
    return COPY_TORN if first.startswith(copy) else COPY_DAMAGED


def read_last_marker(fd: int, size: int) -> Marker | None:
    """The commit marker that ends a file of ``size`` bytes, found through its trailer: both
    identical copies of a version 2 marker, or a version 1 marker. None if the file does not
    end with a valid one. O(1): a few small reads."""
    if size < MARKER_OVERHEAD_V1:
        return None
    trailer = os.pread(fd, 4, size - 4)
    if len(trailer) < 4:  # the file is shorter than ``size`` (replaced while it was read)
        return None
    (flen,) = TRAILER.unpack(trailer)
    if flen >= MARKER_OVERHEAD and 2 * flen <= size:
        frame = FrameReader(fd, size - 2 * flen, size - flen).next()
        if (
            isinstance(frame, Frame)
            and frame.crc_ok
            and frame.ftype == T_MARKER
            and frame.version == 2
            and frame.end == size - flen
            and marker_copy(fd, frame, size) == COPY_OK
        ):
            return decode_marker(frame)
    if MARKER_OVERHEAD_V1 <= flen <= size:
        frame = FrameReader(fd, size - flen, size).next()
        if (
            isinstance(frame, Frame)
            and frame.crc_ok
            and frame.ftype == T_MARKER
            and frame.version == 1
            and frame.end == size
        ):
            return decode_marker(frame)
    return None


def find_valid_marker(fd: int, start: int, limit: int) -> int | None:
    """Search ``[start, limit)`` byte by byte for a valid commit marker frame (used after the
    frame chain broke, to tell damaged committed data from a torn tail: the frames before a
    marker were synced before it was written, so a torn write never leaves a broken frame
    before a complete marker). Returns its position."""
    pos = start
    signature = MAGIC
    while pos < limit:
        chunk = os.pread(fd, min(limit - pos, 4 * READ_CHUNK), pos)
        if not chunk:
            return None
        i = chunk.find(signature)
        while i >= 0:
            at = pos + i
            reader = FrameReader(fd, at, limit)
            frame = reader.next()
            if (
                isinstance(frame, Frame)
                and frame.crc_ok
                and frame.ftype == T_MARKER
                and decode_marker(frame) is not None
            ):
                return at
            i = chunk.find(signature, i + 1)
        if len(chunk) < 4 * READ_CHUNK:
            return None
        pos += len(chunk) - (len(signature) - 1)
    return None
