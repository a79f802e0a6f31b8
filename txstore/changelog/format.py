"""The byte layout of txstore's changelog segment files, and the code that reads and writes it.

A segment file is a sequence of *frames*; every integer is little-endian. A frame is a 24-byte
header and a body::

    off  size  field
      0     4  magic         b"TXCL"
      4     4  crc           zlib.crc32 of bytes [8, 24 + body_length): the rest of the header
                             and the whole body
      8     1  version       2 (this txstore writes 2 and reads 1 and 2, see below)
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
     28        [n x u32 offset deltas]   if flags & SPARSE (offset = base_offset + delta;
                                         ascending, the first 0)
               n x i64 timestamps
               n x u32 key lengths
               n x i32 value lengths       (-1: a tombstone, the value is None)
               [n x u32 header lengths]  if flags & HEADERS
               keys, concatenated
               values, concatenated
               [headers, concatenated]   if flags & HEADERS (Kafka's serialized headers bytes)

Without SPARSE the offsets are ``base_offset .. base_offset + n - 1``; without HEADERS every
record's headers are empty.

A **commit marker** body (version 2)::

      0     8  end_offset       offset after the last committed record (the log's committed end)
      8     8  start_offset     the committed end before this transaction (its first offset)
     16     8  input_position   the caller's input position, committed atomically with the data
     24     8  max_timestamp    largest record timestamp in the segment so far (LONG_MIN: none)
     32     8  commit_time_ms   wall-clock time of the commit
     40     8  txn_start_pos    byte position in the file of the transaction's first frame
                                (the end of the previous commit; the marker's own position
                                when the transaction has no records)
     48     4  metadata_length  m
     52     m  metadata         opaque bytes given to ``commit``
   52+m     4  frame_length     24 + 56 + m: lets a reader find the last marker from the end

and it is written **twice**, two byte-identical frames back to back, in one write after the
records were synced. A commit exists once both copies are on disk. The copy is what tells a
torn tail from damage: a crash while the pair is written leaves the file ending inside it, the
second copy a prefix of the first; damage leaves a bad frame (or two copies that differ)
with the rest of the pair, or more frames, after it.

Version 1 files (txstore's first changelog format) have no ``start_offset`` and
``txn_start_pos`` fields (body 40 + m bytes, frame length 64 + m) and one copy of each marker;
they are read as before, and new commits append version 2 frames to them.

A marker commits every frame between the previous commit and itself; they all carry its
``txn_id``. Markers are encoded and checked in :mod:`txstore.changelog.markers`. See
``docs/changelog.md`` for the rules built on this layout.
"""

from __future__ import annotations

import operator
import os
import shlex
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from txstore._checksums import decode_columns
from txstore.errors import ChangelogCorruptionError

MAGIC: Final = b"TXCL"
#: The frame version this txstore writes.
VERSION: Final = 2
#: The frame versions it reads (1: the first format, single markers without positions).
VERSIONS: Final = (1, 2)
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
MARKER_FIXED: Final = struct.Struct("<qqqqqqI")
MARKER_FIXED_SIZE: Final = MARKER_FIXED.size  # 52
TRAILER: Final = struct.Struct("<I")
MARKER_OVERHEAD: Final = HEADER_SIZE + MARKER_FIXED_SIZE + TRAILER.size  # 80, one copy
MARKER_FIXED_V1: Final = struct.Struct("<qqqqI")
MARKER_FIXED_SIZE_V1: Final = MARKER_FIXED_V1.size  # 36
MARKER_OVERHEAD_V1: Final = HEADER_SIZE + MARKER_FIXED_SIZE_V1 + TRAILER.size  # 64

LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
U32_MAX: Final = 2**32 - 1
#: Largest body a frame may have (its length field is a u32).
MAX_BODY: Final = U32_MAX
#: The reader reads the file in chunks of at least this many bytes: 960 KiB, below the 1 MiB
#: from which glibc maps an allocation (txstore.engine.lmdb_sizing.tune_malloc), so a chunk's
#: buffer comes from the heap and a freed one is reused: a mapped one costs a page fault per
#: 4 KiB on every read and an unmap when freed (opening a 28 MB segment: 27 ms -> 18 ms).
READ_CHUNK: Final = (1 << 20) - (64 << 10)


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
    return frame_parts(T_BATCH, flags, txn_id, parts)


def frame_parts(ftype: int, flags: int, txn_id: int, parts: list[bytes]) -> list[bytes]:
    """A frame of type ``ftype`` whose body is ``parts``: its header, then ``parts`` (no copy)."""
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
    version: int = VERSION

    @property
    def end(self) -> int:
        """File position just after this frame."""
        return self.pos + HEADER_SIZE + self.blen

    def raw(self) -> bytes:
        """The frame's bytes, header included."""
        return bytes(self.buf[self.boff - HEADER_SIZE : self.boff + self.blen])


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
            # A crash leaves a prefix of what the writer wrote: TORN only if the bytes there
            # can begin a frame header.
            start = os.pread(self._fd, max(0, min(HEADER_SIZE, self._limit - pos)), pos)
            return TORN if header_prefix_ok(start) else BAD_HEADER
        o = pos - self._bpos
        magic, crc, version, ftype, flags, blen, txn = HEADER.unpack_from(self._buf, o)
        if (
            magic != MAGIC
            or version not in VERSIONS
            or ftype not in (T_BATCH, T_MARKER)
            or flags & ~(_KNOWN_FLAGS if ftype == T_BATCH else 0)
            or blen < _MIN_BODY[ftype, version]
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
        return Frame(pos, ftype, flags, txn, buf, o + HEADER_SIZE, blen, ok, version)


def header_prefix_ok(start: bytes) -> bool:
    """Whether ``start`` (shorter than a header: the file ends there) can be the beginning of a
    frame header the writer wrote: a prefix of the magic, then a known version, type and flags
    and, once all four bytes are there, a possible length. The CRC and txn id cannot be
    checked. A crash leaves such a prefix; zeros or other bytes there are damage.

    >>> header_prefix_ok(b"TXC"), header_prefix_ok(b"\\0" * 10), header_prefix_ok(b"TXCLabcd\\2\\3")
    (True, False, False)
    """
    n = len(start)
    if n >= HEADER_SIZE or not MAGIC.startswith(start[:4]):
        return False
    if n > 8 and start[8] not in VERSIONS:
        return False
    if n > 9 and start[9] not in (T_BATCH, T_MARKER):
        return False
    allowed = _KNOWN_FLAGS if n > 9 and start[9] == T_BATCH else 0
    if n > 10 and start[10] & ~allowed:
        return False
    if n > 11 and start[11] & ~(allowed >> 8):
        return False
    if n >= 16:
        (blen,) = struct.unpack_from("<I", start, 12)
        return bool(blen >= _MIN_BODY[start[9], start[8]])
    return True


#: The smallest body of each (frame type, version).
_MIN_BODY: Final = {
    (T_BATCH, 1): BATCH_FIXED_SIZE,
    (T_BATCH, 2): BATCH_FIXED_SIZE,
    (T_MARKER, 1): MARKER_FIXED_SIZE_V1 + TRAILER.size,
    (T_MARKER, 2): MARKER_FIXED_SIZE + TRAILER.size,
}


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The fixed fields of a record batch."""

    base_offset: int
    count: int
    max_timestamp: int
    delete_horizon: int
    last_offset: int


def _check_count(frame: Frame, base: int, n: int) -> None:
    """Raise ``ValueError`` unless ``n`` records' fixed-size columns fit the frame's body (so
    no column is read past it) and ``base`` is a valid offset."""
    if n == 0:
        raise ValueError("empty batch")
    per = 16 + 4 * ((frame.flags & F_SPARSE) != 0) + 4 * ((frame.flags & F_HEADERS) != 0)
    if BATCH_FIXED_SIZE + per * n > frame.blen or base < 0:
        raise ValueError("batch count or base offset does not fit the batch")


def batch_info(frame: Frame) -> BatchInfo:
    """The fixed fields of a batch frame (CRC already checked), including its last offset.
    Raises ``ValueError`` if they cannot be right."""
    buf, o = frame.buf, frame.boff
    base, n, max_ts, horizon = BATCH_FIXED.unpack_from(buf, o)
    _check_count(frame, base, n)
    if frame.flags & F_SPARSE:
        (last_delta,) = struct.unpack_from("<I", buf, o + BATCH_FIXED_SIZE + 4 * (n - 1))
        last = base + last_delta
    else:
        last = base + n - 1
    return BatchInfo(base, n, max_ts, horizon, last)


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
    nbytes: int = 0  # the keys', values' and headers' bytes


def batch_layout(frame: Frame) -> tuple[Sequence[int], int, int, int, int, int, int]:
    """Where the per-record columns of a batch frame are (CRC already checked): its offsets,
    the position of its timestamps column in ``frame.buf``, the body's end, the record count
    and whether it has a headers column (``F_HEADERS`` or 0), its delete horizon and largest
    timestamp.

    Raises ``ValueError`` or ``struct.error`` if the fixed fields or sparse offsets cannot be
    right (the columns themselves are checked by whoever cuts or reads them).
    """
    buf, o, blen = frame.buf, frame.boff, frame.blen
    base, n, max_ts, horizon = BATCH_FIXED.unpack_from(buf, o)
    _check_count(frame, base, n)
    p = o + BATCH_FIXED_SIZE
    offsets: Sequence[int]
    if frame.flags & F_SPARSE:
        deltas = struct.unpack_from(f"<{n}I", buf, p)
        p += 4 * n
        if deltas[0] != 0 or not all(map(operator.lt, deltas, deltas[1:])):
            raise ValueError("sparse batch offsets are not ascending from its base offset")
        offsets = [base + d for d in deltas]
    else:
        offsets = range(base, base + n)
    return offsets, p, o + blen, n, frame.flags & F_HEADERS, horizon, max_ts


def decode_batch(frame: Frame, *, keys_only: bool = False) -> Columns:
    """Decode a batch frame (CRC already checked) into columns.

    Raises ``ValueError`` or ``struct.error`` if the columns do not add up to the body: the
    caller turns that into a :class:`ChangelogCorruptionError` with the file and offset.
    ``keys_only`` leaves values and headers empty (compaction's first pass). The
    per-record columns are cut in one C call (``decode_columns``, csrc/changelog_columns.c):
    one object per item, no ``struct`` format compiled per batch.
    """
    offsets, p, end, n, has_headers, horizon, max_ts = batch_layout(frame)
    timestamps, keys, values, headers, nbytes = decode_columns(
        frame.buf, p, end, n, has_headers, keys_only
    )
    return Columns(offsets, keys, values, timestamps, headers, horizon, max_ts, nbytes)


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


def tail_damage(
    path: str, pos: int, offset: int, what: str, committed_pos: int
) -> ChangelogCorruptionError:
    """A :class:`ChangelogCorruptionError` for bytes after the last complete commit (which ends
    at byte ``committed_pos`` of the segment file ``path``) that no crash of the writing process
    leaves: ``what`` is wrong at byte ``pos``, where the records from ``offset`` on were
    expected. The message gives the way out for the one other cause, a power loss on a file
    system that exposes unwritten blocks, as the exact ``truncate`` command.

    >>> print(tail_damage("/log/00000000000000000000.log", 300, 12, "checksum mismatch",
    ...                   260))  # doctest: +NORMALIZE_WHITESPACE
    changelog damaged after its last commit: checksum mismatch in /log/00000000000000000000.log
    at byte 300 (records from offset 12 on), after the last complete commit, which ends at byte
    260. A crash of the writing process leaves only complete frames and the beginning of one
    frame there, never these bytes, so they are not taken for a torn tail: they may be what is
    left of a later commit. Restore the directory from a backup, or delete the changelog and
    rebuild it from the stores. If the machine lost power or the operating system crashed while
    this changelog was written, on a file system that can expose unwritten blocks as zeros or
    garbage, these are the unsynced bytes of a commit that never returned: cut them off with
    `truncate -s 260 /log/00000000000000000000.log` and reopen; recovery then treats them as a
    crash
    """
    return ChangelogCorruptionError(
        f"changelog damaged after its last commit: {what} in {path} at byte {pos} (records from "
        f"offset {offset} on), after the last complete commit, which ends at byte "
        f"{committed_pos}. A crash of the writing process leaves only complete frames and the "
        "beginning of one frame there, never these bytes, so they are not taken for a torn "
        "tail: they may be what is left of a later commit. Restore the directory from a backup, "
        "or delete the changelog and rebuild it from the stores. If the machine lost power or "
        "the operating system crashed while this changelog was written, on a file system that "
        "can expose unwritten blocks as zeros or garbage, these are the unsynced bytes of a "
        f"commit that never returned: cut them off with `truncate -s {committed_pos} "
        f"{shlex.quote(path)}` and reopen; recovery then treats them as a crash",
        path=path,
        position=pos,
        offset=offset,
    )
