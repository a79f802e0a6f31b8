"""The byte layout of txstore's changelog segment files, and the code that reads and writes it.

A segment file is a sequence of *frames*; every integer is little-endian. A frame is a 24-byte
header and a body::

    off  size  field
      0     4  magic         b"TXCL"
      4     4  crc           zlib.crc32 of bytes [8, 24 + body_length): the rest of the header
                             and the whole body
      8     1  version       1
      9     1  type          1 = record batch, 2 = commit marker
     10     2  flags         batch flags (below); 0 for markers
     12     4  body_length   bytes after the header
     16     8  txn_id        random id of the transaction the frame belongs to
     24        body

A **record batch** body holds ``n`` records as columns::

      0     8  base_offset     offset of the first record
      8     4  count           n (>= 1)
     12     8  max_timestamp   largest record timestamp in the batch
     20     8  delete_horizon  -1, or the time after which compaction may drop its tombstones
     28        [n x u32 offset deltas]   if flags & SPARSE (offset = base_offset + delta)
               n x i64 timestamps
               n x u32 key lengths
               n x i32 value lengths       (-1: a tombstone, the value is None)
               [n x u32 header lengths]  if flags & HEADERS
               keys, concatenated
               values, concatenated
               [headers, concatenated]   if flags & HEADERS (Kafka's serialized headers bytes)

Without SPARSE the offsets are ``base_offset .. base_offset + n - 1``; without HEADERS every
record's headers are empty.

A **commit marker** body::

      0     8  end_offset       offset after the last committed record (the log's committed end)
      8     8  input_position   the caller's input position, committed atomically with the data
     16     8  max_timestamp    largest record timestamp in the segment so far (LONG_MIN: none)
     24     8  commit_time_ms   wall-clock time of the commit
     32     4  metadata_length  m
     36     m  metadata         opaque bytes given to ``commit``
   36+m     4  frame_length     24 + 40 + m: lets a reader find the last marker from the end

A marker commits every frame between the previous marker and itself; they all carry its
``txn_id``. See ``docs/changelog.md`` for the rules built on this layout.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Final

from txstore.errors import ChangelogCorruptionError

MAGIC: Final = b"TXCL"
VERSION: Final = 1
T_BATCH: Final = 1
T_MARKER: Final = 2
F_SPARSE: Final = 0x1
F_HEADERS: Final = 0x2
_KNOWN_FLAGS: Final = F_SPARSE | F_HEADERS

HEADER: Final = struct.Struct("<4sIBBHIQ")
HEADER_SIZE: Final = HEADER.size  # 24
_HEADER_TAIL: Final = struct.Struct("<BBHIQ")  # the CRC-covered part of the header
BATCH_FIXED: Final = struct.Struct("<qIqq")
BATCH_FIXED_SIZE: Final = BATCH_FIXED.size  # 28
MARKER_FIXED: Final = struct.Struct("<qqqqI")
MARKER_FIXED_SIZE: Final = MARKER_FIXED.size  # 36
TRAILER: Final = struct.Struct("<I")
MARKER_OVERHEAD: Final = HEADER_SIZE + MARKER_FIXED_SIZE + TRAILER.size  # 64

LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
U32_MAX: Final = 2**32 - 1
#: Largest body a frame may have (its length field is a u32).
MAX_BODY: Final = U32_MAX
#: The reader reads the file in chunks of at least this many bytes.
READ_CHUNK: Final = 1 << 20

_S_CODES: Final = [f"{n}s" for n in range(1024)]


# --------------------------------------------------------------------------- writing


def batch_frame(
    txn_id: int,
    base_offset: int,
    keys: Sequence[bytes],
    values: Sequence[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes],
    *,
    tombstones: bool,
    has_headers: bool,
    max_timestamp: int,
    offsets: Sequence[int] | None = None,
    delete_horizon: int = -1,
) -> list[bytes]:
    """Encode one record batch frame as a list of byte strings to ``writev`` (no join).

    ``offsets`` (ascending, from ``base_offset``) makes a sparse batch; ``tombstones`` and
    ``has_headers`` say whether any value is None and any headers non-empty (the caller tracks
    both as it buffers, so no pass over the records is needed here).
    """
    n = len(keys)
    flags = 0
    parts: list[bytes] = [BATCH_FIXED.pack(base_offset, n, max_timestamp, delete_horizon)]
    if offsets is not None:
        flags |= F_SPARSE
        parts.append(struct.pack(f"<{n}I", *[o - base_offset for o in offsets]))
    parts.append(struct.pack(f"<{n}q", *timestamps))
    parts.append(struct.pack(f"<{n}I", *map(len, keys)))
    if tombstones:
        parts.append(struct.pack(f"<{n}i", *[-1 if v is None else len(v) for v in values]))
        vblob = b"".join(filter(None, values))  # drops None (and b"", which adds nothing)
    else:
        parts.append(struct.pack(f"<{n}i", *map(len, values)))  # type: ignore[arg-type]
        vblob = b"".join(values)  # type: ignore[arg-type]
    if has_headers:
        flags |= F_HEADERS
        parts.append(struct.pack(f"<{n}I", *map(len, headers)))
    parts.append(b"".join(keys))
    parts.append(vblob)
    if has_headers:
        parts.append(b"".join(headers))
    return _frame(T_BATCH, flags, txn_id, parts)


def marker_frame(
    txn_id: int,
    end_offset: int,
    input_position: int,
    max_timestamp: int,
    commit_time_ms: int,
    metadata: bytes = b"",
) -> list[bytes]:
    """Encode one commit marker frame (see the module docstring for the layout)."""
    m = len(metadata)
    parts = [
        MARKER_FIXED.pack(end_offset, input_position, max_timestamp, commit_time_ms, m),
        metadata,
        TRAILER.pack(MARKER_OVERHEAD + m),
    ]
    return _frame(T_MARKER, 0, txn_id, parts)


def _frame(ftype: int, flags: int, txn_id: int, parts: list[bytes]) -> list[bytes]:
    length = sum(map(len, parts))
    if length > MAX_BODY:
        raise OverflowError(f"a changelog frame body of {length} bytes exceeds {MAX_BODY}")
    tail = _HEADER_TAIL.pack(VERSION, ftype, flags, length, txn_id)
    crc = zlib.crc32(tail)
    for p in parts:
        crc = zlib.crc32(p, crc)
    return [MAGIC + crc.to_bytes(4, "little") + tail, *parts]


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame read from a segment: where it is, its header fields, and its body.

    The body is ``buf[boff : boff + blen]`` (``buf`` is shared with the reader's chunk, so no
    copy is made). ``crc_ok`` is False when the checksum does not match.
    """

    pos: int
    ftype: int
    flags: int
    txn_id: int
    buf: bytes
    boff: int
    blen: int
    crc_ok: bool

    @property
    def end(self) -> int:
        """File position just after this frame."""
        return self.pos + HEADER_SIZE + self.blen


@dataclass(frozen=True, slots=True)
class Marker:
    """A decoded commit marker."""

    pos: int
    end_pos: int
    txn_id: int
    end_offset: int
    input_position: int
    max_timestamp: int
    commit_time_ms: int
    metadata: bytes


#: ``FrameReader.next`` results other than a :class:`Frame`.
EOF: Final = "eof"  # clean end: no bytes left before the limit
TORN: Final = "torn"  # a partial frame: the header or body runs past the limit
BAD_HEADER: Final = "bad header"  # no magic, unknown version/type/flags, or a length too small


class FrameReader:
    """Reads the frames of one open segment file sequentially, ``READ_CHUNK`` bytes at a time.

    ``limit`` is the file position not to read past (``None``: the end of the file).
    """

    __slots__ = ("_bpos", "_buf", "_fd", "_limit", "pos")

    def __init__(self, fd: int, pos: int = 0, limit: int | None = None) -> None:
        self._fd = fd
        self.pos = pos
        self._limit = os.fstat(fd).st_size if limit is None else limit
        self._buf = b""
        self._bpos = pos

    def _have(self, pos: int, n: int) -> bool:
        """Make ``[pos, pos + n)`` available in the buffer; False if the limit comes first."""
        if pos + n > self._limit:
            return False
        if pos >= self._bpos and pos + n <= self._bpos + len(self._buf):
            return True
        want = min(max(n, READ_CHUNK), self._limit - pos)
        data = os.pread(self._fd, want, pos)
        if len(data) < n:  # the file shrank under us (a concurrent truncation)
            return False
        self._buf, self._bpos = data, pos
        return True

    def next(self) -> Frame | str:
        """The frame at ``self.pos`` and advance past it, or EOF / TORN / BAD_HEADER."""
        pos = self.pos
        if pos >= self._limit:
            return EOF
        if not self._have(pos, HEADER_SIZE):
            return TORN
        o = pos - self._bpos
        magic, crc, version, ftype, flags, blen, txn = HEADER.unpack_from(self._buf, o)
        if (
            magic != MAGIC
            or version != VERSION
            or ftype not in (T_BATCH, T_MARKER)
            or flags & ~_KNOWN_FLAGS
            or blen < (BATCH_FIXED_SIZE if ftype == T_BATCH else MARKER_FIXED_SIZE + 4)
        ):
            return BAD_HEADER
        if not self._have(pos, HEADER_SIZE + blen):
            return TORN
        buf = self._buf
        o = pos - self._bpos
        mv = memoryview(buf)
        ok = zlib.crc32(mv[o + 8 : o + HEADER_SIZE + blen]) == crc
        mv.release()
        self.pos = pos + HEADER_SIZE + blen
        return Frame(pos, ftype, flags, txn, buf, o + HEADER_SIZE, blen, ok)


def decode_marker(frame: Frame) -> Marker | None:
    """Decode a marker frame whose CRC matched; None if its fields are inconsistent."""
    buf, o = frame.buf, frame.boff
    end_offset, position, max_ts, when, m = MARKER_FIXED.unpack_from(buf, o)
    if MARKER_FIXED_SIZE + m + 4 != frame.blen:
        return None
    (flen,) = TRAILER.unpack_from(buf, o + MARKER_FIXED_SIZE + m)
    if flen != MARKER_OVERHEAD + m or end_offset < 0:
        return None
    metadata = bytes(buf[o + MARKER_FIXED_SIZE : o + MARKER_FIXED_SIZE + m])
    return Marker(frame.pos, frame.end, frame.txn_id, end_offset, position, max_ts, when, metadata)


def read_last_marker(fd: int, size: int) -> Marker | None:
    """The commit marker that ends a file of ``size`` bytes, found through its trailer; None if
    the file does not end with a valid marker. O(1): two small reads."""
    if size < MARKER_OVERHEAD:
        return None
    (flen,) = TRAILER.unpack(os.pread(fd, 4, size - 4))
    if flen < MARKER_OVERHEAD or flen > size:
        return None
    reader = FrameReader(fd, size - flen, size)
    frame = reader.next()
    if not isinstance(frame, Frame) or not frame.crc_ok or frame.ftype != T_MARKER:
        return None
    if frame.end != size:
        return None
    return decode_marker(frame)


def find_valid_marker(fd: int, start: int, limit: int) -> int | None:
    """Search ``[start, limit)`` byte by byte for a valid commit marker frame (used after the
    frame chain broke, to tell corrupt committed data from a torn tail). Returns its position."""
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


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The fixed fields of a record batch."""

    base_offset: int
    count: int
    max_timestamp: int
    delete_horizon: int
    last_offset: int


def batch_info(frame: Frame) -> BatchInfo:
    """The fixed fields of a batch frame (CRC already checked), including its last offset."""
    buf, o = frame.buf, frame.boff
    base, n, max_ts, horizon = BATCH_FIXED.unpack_from(buf, o)
    if n == 0:
        raise ValueError("empty batch")
    if frame.flags & F_SPARSE:
        (last_delta,) = struct.unpack_from("<I", buf, o + BATCH_FIXED_SIZE + 4 * (n - 1))
        last = base + last_delta
    else:
        last = base + n - 1
    return BatchInfo(base, n, max_ts, horizon, last)


def _cut(buf: bytes, pos: int, lens: Sequence[int]) -> list[bytes]:
    """Cut ``buf`` from ``pos`` into consecutive items of ``lens`` bytes. One uncached struct
    format builds every item in C when the items are short (~2x a slicing comprehension)."""
    n = len(lens)
    if not n:
        return []
    first = lens[0]
    if lens.count(first) == n:
        return list(struct.Struct(f"{first}s" * n).unpack_from(buf, pos))
    if max(lens) < 1024:
        return list(struct.Struct("".join(map(_S_CODES.__getitem__, lens))).unpack_from(buf, pos))
    ends = list(accumulate(lens, initial=pos))
    return [buf[a:b] for a, b in pairwise(ends)]


@dataclass(frozen=True, slots=True)
class Columns:
    """A decoded batch, as columns."""

    offsets: Sequence[int]
    keys: list[bytes]
    values: list[bytes | None]
    timestamps: Sequence[int]
    headers: Sequence[bytes]
    delete_horizon: int
    max_timestamp: int


def decode_batch(frame: Frame, *, keys_only: bool = False) -> Columns:
    """Decode a batch frame (CRC already checked) into columns.

    Raises ``ValueError`` or ``struct.error`` if the columns do not add up to the body: the
    caller turns that into a :class:`ChangelogCorruptionError` with the file and offset.
    ``keys_only`` leaves values and headers empty (compaction's first pass).
    """
    buf, o, blen = frame.buf, frame.boff, frame.blen
    end = o + blen
    base, n, max_ts, horizon = BATCH_FIXED.unpack_from(buf, o)
    if n == 0:
        raise ValueError("empty batch")
    p = o + BATCH_FIXED_SIZE
    offsets: Sequence[int]
    if frame.flags & F_SPARSE:
        deltas = struct.unpack_from(f"<{n}I", buf, p)
        p += 4 * n
        offsets = [base + d for d in deltas]
    else:
        offsets = range(base, base + n)
    timestamps = struct.unpack_from(f"<{n}q", buf, p)
    p += 8 * n
    klens = struct.unpack_from(f"<{n}I", buf, p)
    p += 4 * n
    vlens = struct.unpack_from(f"<{n}i", buf, p)
    p += 4 * n
    has_headers = frame.flags & F_HEADERS
    if has_headers:
        hlens = struct.unpack_from(f"<{n}I", buf, p)
        p += 4 * n
    ksum = sum(klens)
    tombstones = -1 in vlens
    vsum = sum(vlens) + vlens.count(-1) if tombstones else sum(vlens)
    hsum = sum(hlens) if has_headers else 0
    if p + ksum + vsum + hsum != end or min(vlens) < -1:
        raise ValueError("batch columns do not add up to its length")
    keys = _cut(buf, p, klens)
    if keys_only:
        return Columns(offsets, keys, [], timestamps, (), horizon, max_ts)
    p += ksum
    values: list[bytes | None]
    if tombstones:
        values = list(_cut(buf, p, [m if m > 0 else 0 for m in vlens]))
        i = -1
        for _ in range(vlens.count(-1)):
            i = vlens.index(-1, i + 1)
            values[i] = None
    else:
        values = list(_cut(buf, p, vlens))
    p += vsum
    headers: Sequence[bytes] = _cut(buf, p, hlens) if has_headers else [b""] * n
    return Columns(offsets, keys, values, timestamps, headers, horizon, max_ts)


_FRAME_PROBLEMS: Final = {
    TORN: "a frame running past the end of the data (torn, or a corrupt length field)",
    BAD_HEADER: "a bad frame header (magic, version, type, flags or length)",
}


def frame_problem(kind: str) -> str:
    """What a :meth:`FrameReader.next` result other than a frame or EOF says went wrong."""
    return _FRAME_PROBLEMS.get(kind, f"a {kind} frame")


def corruption(
    path: str, pos: int, offset: int | None, what: str, *, marker_pos: int | None = None
) -> ChangelogCorruptionError:
    """A :class:`ChangelogCorruptionError`: ``what`` failed (e.g. "checksum mismatch") in the
    segment file ``path`` at byte ``pos``, where the records from ``offset`` on were expected
    (None: unknown). ``marker_pos``, when a scan found it, is the byte position of the valid
    commit marker after the bad bytes, which makes them committed data.

    >>> print(corruption("/log/00000000000000000000.log", 0, 0, "checksum mismatch",
    ...                  marker_pos=277))  # doctest: +NORMALIZE_WHITESPACE
    changelog corrupt: checksum mismatch in /log/00000000000000000000.log at byte 0 (records
    from offset 0 on); the commit marker at byte 277 makes it committed data, which txstore
    does not drop silently. Restore the directory from a backup, or delete the changelog and
    rebuild it from the stores
    """
    where = f"{path} at byte {pos}"
    if offset is not None:
        where += f" (records from offset {offset} on)"
    if marker_pos is None:
        committed = "this is committed data"
    else:
        committed = f"the commit marker at byte {marker_pos} makes it committed data"
    return ChangelogCorruptionError(
        f"changelog corrupt: {what} in {where}; {committed}, which txstore does not drop "
        "silently. Restore the directory from a backup, or delete the changelog and rebuild it "
        "from the stores",
        path=path,
        position=pos,
        offset=offset,
    )
