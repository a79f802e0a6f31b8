"""Segment files of a file changelog: naming, the directory metadata, and the recovery scan.

Invariants of a changelog directory (checked on every open):

* segment files are named by the base offset of the range they cover, ``%020d.log``;
* consecutive segments cover contiguous offset ranges: a segment's ``base`` equals the
  ``end_offset`` of the commit marker that ends the segment before it;
* every segment but the last ends with a valid commit marker, both copies (rolling happens
  only between transactions, and compaction writes one marker at the end of each file it
  produces);
* a segment whose base lies below the previous segment's end is the leftover of a merging
  compaction interrupted between its rename and its deletions, and is removed;
* the first segment starts at the log start the metadata records (``log_start``: 0 for a new
  log, moved up only by retention, which records it before it deletes the expired segments;
  compaction keeps the base of the first segment it rewrites): a later first base means the
  oldest segment files were lost; segments wholly below ``log_start`` are what a crash left
  between that record and the deletions, and are removed. A metadata file written before
  ``log_start`` existed has no such check;
* the last segment is scanned frame by frame: what follows its last complete commit is
  truncated only if it is what a crash of the writing process leaves (valid frames of the
  open transaction, then at most a prefix of one frame or of the marker pair, at the end of
  the file). Evidence of a later commit (a valid marker after a bad frame, two copies of a
  marker that differ) is damage to committed data, and so are bytes the writer never wrote
  (zeros, a bad header, a complete frame whose checksum fails): both raise
  :class:`~txstore.errors.ChangelogCorruptionError`, whose message gives the way out when a
  power loss explains the bytes (:func:`scan_segment`).

The scan never writes; the repair it calls for (:class:`LoadedLog`) is applied afterwards, by
the writer's open or, for a task that checks all its changelogs first, by
:meth:`~txstore.changelog.log.FileChangelog.repair`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from txstore.changelog.format import (
    BATCH_FIXED,
    BATCH_FIXED_SIZE,
    EOF,
    HEADER,
    HEADER_SIZE,
    LONG_MIN,
    T_BATCH,
    T_MARKER,
    TORN,
    Frame,
    FrameReader,
    batch_info,
    corruption,
    frame_problem,
    tail_damage,
)
from txstore.changelog.markers import (
    COPY_DAMAGED,
    COPY_TORN,
    Marker,
    decode_marker,
    find_valid_marker,
    marker_copy,
    read_last_marker,
)
from txstore.errors import ConfigConflictError

META_FILE: Final = "changelog.json"
LOCK_FILE: Final = "writer.lock"
FORMAT_NAME: Final = "txstore-changelog"
#: The version of ``changelog.json`` this txstore writes (with version 2 frames) ...
FORMAT_VERSION: Final = 2
#: ... and the versions it opens: a version 1 directory is upgraded by its first write.
FORMAT_VERSIONS: Final = (1, 2)
CLEANED_SUFFIX: Final = ".cleaned"
_SEGMENT_RE: Final = re.compile(r"^(\d{20})\.log$")
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
#: The first six fields of a version 2 marker body: end, start, input position, max timestamp,
#: commit time, txn start position.
MARKER_POSITIONS: Final = struct.Struct("<qqqqqq")


def segment_name(base: int) -> str:
    """``00000000000000000042.log`` for base offset 42 (Kafka's naming)."""
    return f"{base:020d}.log"


def segment_files(path: str) -> list[tuple[int, str]]:
    """The segment files in ``path`` as ``(base, full path)``, in base order."""
    found = []
    for name in os.listdir(path):
        m = _SEGMENT_RE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(path, name)))
    found.sort()
    return found


def fsync_dir(path: str) -> None:
    """Make renames, creations and deletions in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_fd(path: str, flags: int = os.O_RDONLY) -> int:
    return os.open(path, flags | _O_CLOEXEC, 0o644)


# --------------------------------------------------------------------------- metadata


def read_meta(path: str) -> dict[str, Any] | None:
    """The directory's metadata, or None if it has none. Foreign content raises."""
    meta_path = os.path.join(path, META_FILE)
    try:
        with open(meta_path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ConfigConflictError(f"{meta_path} is not a txstore changelog metadata file")
    if meta.get("version") not in FORMAT_VERSIONS:
        raise ConfigConflictError(
            f"{meta_path} has changelog format version {meta.get('version')!r}; this txstore "
            f"reads versions {', '.join(map(str, FORMAT_VERSIONS))} (a newer txstore wrote it: "
            "open it with that version)"
        )
    return meta


def write_meta(path: str, meta: dict[str, Any], *, sync: bool) -> None:
    """Replace the metadata file atomically (temporary file, fsync, rename, fsync dir)."""
    final = os.path.join(path, META_FILE)
    tmp = final + ".tmp"
    data = json.dumps(meta, sort_keys=True, indent=1).encode() + b"\n"
    fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    if sync:
        fsync_dir(path)


def temporaries(path: str) -> list[str]:
    """What a crash can leave behind besides segments: compaction outputs never renamed into
    place, and a metadata file never renamed into place (the repair deletes them)."""
    return [
        os.path.join(path, name)
        for name in sorted(os.listdir(path))
        if name.endswith(CLEANED_SUFFIX) or name == META_FILE + ".tmp"
    ]


# --------------------------------------------------------------------------- segments


@dataclass
class Segment:
    """A segment as the log tracks it. ``size`` is its committed size in bytes (the whole file
    for a closed segment), ``end_offset`` the offset after its last committed record (its last
    marker's), ``max_timestamp`` the largest record timestamp in it (LONG_MIN: none)."""

    base: int
    path: str
    end_offset: int
    max_timestamp: int
    size: int
    marker: Marker | None = field(default=None, repr=False)


@dataclass
class LoadedLog:
    """What scanning a directory found, and the repair it calls for: delete ``removed_files``
    and ``temporaries``, cut the last segment to ``truncate`` = ``(path, size)``. Nothing in it
    is committed data: the scan raised :class:`~txstore.errors.ChangelogCorruptionError`
    instead if any of it was."""

    segments: list[Segment]
    last_marker: Marker | None
    truncated_bytes: int = 0
    removed_files: list[str] = field(default_factory=list)
    tail_reason: str | None = None
    #: The offset after the last complete record batch after the last commit (before the
    #: repair cuts them): how far an uncommitted transaction's records reach.
    tail_end_offset: int | None = None
    truncate: tuple[str, int] | None = None
    temporaries: list[str] = field(default_factory=list)
    repaired: bool = False

    @property
    def needs_repair(self) -> bool:
        """True while the repair has files to write (see :func:`repair`)."""
        return not self.repaired and bool(self.removed_files or self.truncate or self.temporaries)


def load_segments(path: str, *, repair: bool, log_start: int | None = None) -> LoadedLog:
    """Scan the segments of ``path`` (see the module docstring for the rules; ``log_start``:
    the first offset the metadata says the log holds, None when it does not say).

    Nothing is written by the scan: damage raises :class:`ChangelogCorruptionError` before any
    file is touched. With ``repair`` (the writer, holding the lock) the repair it found is then
    applied (:func:`repair`); without it (a read-only reader, or a writer that checks several
    logs before repairing any) stale and uncommitted files are only skipped.
    """
    files = segment_files(path)
    segments: list[Segment] = []
    removed: list[str] = []
    prev_end: int | None = None
    if log_start is not None and files:
        # expired segments a crash kept: the next file starts at or before the log start
        while len(files) > 1 and files[1][0] <= log_start:
            removed.append(files.pop(0)[1])
        base, seg_path = files[0]
        if base > log_start:
            raise corruption(
                seg_path,
                0,
                log_start,
                f"offsets [{log_start}, {base}) are missing: the log starts at {log_start} "
                "(changelog.json) and its oldest segment file was deleted",
            )
    for i, (base, seg_path) in enumerate(files):
        last = i == len(files) - 1
        if prev_end is not None and base < prev_end:
            if last:
                raise corruption(seg_path, 0, base, "the last segment overlaps the one before")
            removed.append(seg_path)  # left behind by an interrupted merging compaction
            continue
        if prev_end is not None and base > prev_end:
            raise corruption(
                seg_path,
                0,
                prev_end,
                f"offsets [{prev_end}, {base}) are missing (a segment "
                "file was deleted or the directory is incomplete)",
            )
        if last:
            break
        fd = open_fd(seg_path)
        try:
            size = os.fstat(fd).st_size
            marker = read_last_marker(fd, size)
        finally:
            os.close(fd)
        if marker is None or marker.end_offset < base:
            raise corruption(
                seg_path, size, base, "a closed segment does not end with a valid commit marker"
            )
        segments.append(
            Segment(base, seg_path, marker.end_offset, marker.max_timestamp, size, marker)
        )
        prev_end = marker.end_offset
    loaded = LoadedLog(segments, segments[-1].marker if segments else None, removed_files=removed)
    loaded.temporaries = temporaries(path)
    if files:
        _load_last(files[-1][0], files[-1][1], loaded)
    if repair:
        apply_repair(path, loaded)
    return loaded


def apply_repair(path: str, loaded: LoadedLog) -> None:
    """Write the repair a scan found (:class:`LoadedLog`): delete the temporaries and the
    uncommitted or stale segment files, truncate the last segment after its last commit
    (fsynced), fsync the directory. Idempotent."""
    if not loaded.needs_repair:
        return
    for p in [*loaded.temporaries, *loaded.removed_files]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    if loaded.truncate is not None:
        seg_path, size = loaded.truncate
        fd = open_fd(seg_path, os.O_RDWR)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(path)
    loaded.repaired = True


def _load_last(base: int, seg_path: str, loaded: LoadedLog) -> None:
    fd = open_fd(seg_path)
    try:
        size = os.fstat(fd).st_size
        scan = scan_segment(fd, seg_path, base)
        loaded.tail_end_offset = scan.tail_end
        if scan.marker is None:
            # No commit in it: a transaction that never committed (its records are the
            # segment's only content, since a transaction never spans segments).
            loaded.removed_files.append(seg_path)
            loaded.truncated_bytes += size
            loaded.tail_reason = scan.reason if size else None
            return
        if scan.committed_pos < size:
            loaded.truncated_bytes += size - scan.committed_pos
            loaded.tail_reason = scan.reason
            loaded.truncate = (seg_path, scan.committed_pos)
        m = scan.marker
        loaded.segments.append(
            Segment(base, seg_path, m.end_offset, m.max_timestamp, scan.committed_pos, m)
        )
        loaded.last_marker = m
    finally:
        os.close(fd)


@dataclass
class ScanResult:
    """The committed prefix of a segment: ``committed_pos`` bytes, closed by ``marker``."""

    committed_pos: int
    marker: Marker | None
    reason: str | None  # why the bytes after committed_pos are not committed
    #: The offset after the last complete record batch of the uncommitted tail (the committed
    #: end offset when the tail holds none).
    tail_end: int = 0


def scan_segment(fd: int, seg_path: str, base: int, limit: int | None = None) -> ScanResult:
    """Walk every frame of a segment, checking CRCs, offsets, transaction ids and both copies
    of every commit marker; return where its committed data ends. O(file size).

    What follows the last complete commit must be what a crash of the writing process leaves
    (the process dies, the page cache keeps every byte it wrote): complete, valid frames of the
    uncommitted transaction, then at most a prefix of one more frame or of the marker pair,
    ending at the end of the file. That tail is returned for truncation. Anything else raises
    :class:`~txstore.errors.ChangelogCorruptionError` naming the file, the byte position of the
    bad frame and the first record offset it should hold:

    * a bad frame (checksum, structure, offsets, transaction id) or a broken frame chain (bad
      magic or length) followed by a valid marker: committed data is damaged (the frames before
      a marker were synced before it was written);
    * a version 2 marker whose second copy differs from it (a torn pair leaves a prefix of the
      first copy at the end of the file, never different bytes);
    * a bad frame, a broken chain, a batch that skips offsets (compaction leaves gaps only in
      committed data) or a frame cut short that cannot be a prefix of what the writer wrote
      (:func:`_torn_frame_problem`), with no marker after it: bytes the writer never wrote, so
      no crash left them; they may hide a later commit (zeros over the last marker pair look
      exactly like this). The message gives the ``truncate`` command for the one
      other cause, a power loss on a file system that exposes unwritten blocks
      (:func:`~txstore.changelog.format.tail_damage`).
    """
    reader = FrameReader(fd, 0, limit)
    size = os.fstat(fd).st_size if limit is None else limit
    committed_pos = 0
    marker: Marker | None = None
    expected = base  # the smallest offset the next batch may hold
    committed_end = base  # the committed end offset so far
    pending_txn: int | None = None
    problem: tuple[int, int, str] | None = None  # (position, offset, what) of the first bad frame
    torn_pair = torn_frame = False
    gap: tuple[int, int, str] | None = None  # the first batch after a commit that skips offsets
    while True:
        frame = reader.next()
        if not isinstance(frame, Frame):
            if frame == EOF:
                break
            if problem is None:
                problem = (reader.pos, expected, frame_problem(frame))
            found = find_valid_marker(fd, problem[0] + 1, size)
            if found is not None:
                raise corruption(seg_path, *problem, marker_pos=found)
            if frame == TORN and problem[0] == reader.pos:  # the first bad frame: is it torn?
                wrong = _torn_frame_problem(
                    fd, reader.pos, size, pending_txn, expected, (committed_end, committed_pos)
                )
                problem = None if wrong is None else (reader.pos, expected, wrong)
                torn_frame = wrong is None
            break
        if not frame.crc_ok:
            problem = problem or (frame.pos, expected, "checksum mismatch")
            continue
        if frame.ftype == T_BATCH:
            try:
                info = batch_info(frame)
            except (ValueError, struct.error):
                problem = problem or (frame.pos, expected, "malformed record batch")
                continue
            if info.base_offset < expected or (
                pending_txn is not None and frame.txn_id != pending_txn
            ):
                problem = problem or (frame.pos, expected, "out-of-sequence record batch")
                continue
            if info.base_offset != expected and gap is None:  # fine once a marker follows
                gap = (frame.pos, expected, "a record batch that skips offsets")
            pending_txn = frame.txn_id
            expected = info.last_offset + 1
            continue
        m = decode_marker(frame)
        if m is None:
            problem = problem or (frame.pos, expected, "malformed commit marker")
            continue
        if problem is not None:
            # The frames before a marker were synced before it was written: a bad one is
            # damage, even if this marker's own pair is incomplete (it may be the second copy
            # of a pair whose first copy is the bad frame).
            raise corruption(seg_path, *problem, marker_pos=frame.pos)
        if m.version != 1:
            copy = marker_copy(fd, frame, size)
            if copy == COPY_TORN:
                torn_pair = True  # the pair was being written: this commit never happened
                break
            if copy == COPY_DAMAGED:
                raise corruption(
                    seg_path,
                    frame.end,
                    committed_end,
                    f"the second copy of the commit marker at byte {frame.pos} differs from the "
                    "first",
                )
        where = (m.start_offset, m.txn_start_pos) if m.version != 1 else None
        if (
            (pending_txn is not None and m.txn_id != pending_txn)
            or m.end_offset < expected
            or where not in (None, (committed_end, committed_pos))
        ):
            raise corruption(
                seg_path,
                frame.pos,
                expected,
                "a commit marker that does not match the records before it",
            )
        committed_pos, marker = m.commit_end_pos, m
        reader.pos = committed_pos
        expected = committed_end = m.end_offset
        pending_txn = gap = None
    problem = problem or gap  # the writer's open transaction starts at the committed end
    if problem is not None:  # no valid marker after it, and not the prefix of a frame
        raise tail_damage(seg_path, *problem, committed_pos)
    reason = None
    if committed_pos < size:
        if torn_pair:
            reason = "a commit whose marker pair is incomplete (torn while it was written)"
        elif torn_frame:
            reason = "records after the last commit marker, the last frame cut short (torn)"
        else:
            reason = "records after the last commit marker"
    return ScanResult(committed_pos, marker, reason, expected)


def _torn_frame_problem(
    fd: int,
    pos: int,
    size: int,
    pending_txn: int | None,
    expected: int,
    committed: tuple[int, int],
) -> str | None:
    """Why the frame at ``pos``, which runs past ``size`` (the end of the data), cannot be the
    beginning of a frame the writer was writing when it was killed; None if it can.

    The reader already checked what there is of its header (:func:`header_prefix_ok`); this
    checks what the writer's state fixes: the frame belongs to the open transaction
    (``pending_txn``), a batch starts at offset ``expected``, and a version 2 marker's fields
    name the committed end offset and file position ``committed`` and end at ``expected``.
    Nothing else of a torn frame can be checked (its CRC covers bytes that are not there).
    """
    head = os.pread(fd, max(0, min(size - pos, HEADER_SIZE + MARKER_POSITIONS.size)), pos)
    if len(head) < HEADER_SIZE:
        return None
    _, _, version, ftype, _, _, txn_id = HEADER.unpack_from(head)
    if pending_txn is not None and txn_id != pending_txn:
        return "a frame cut short at the end of the data, of another transaction"
    body = head[HEADER_SIZE:]
    if ftype == T_BATCH and len(body) >= BATCH_FIXED_SIZE:
        base_offset, count, _, _ = BATCH_FIXED.unpack_from(body)
        if base_offset != expected or count < 1:
            return "a record batch cut short at the end of the data, out of sequence"
    elif ftype == T_MARKER and len(body) >= 8:
        fields = MARKER_POSITIONS.unpack_from(body) if len(body) >= MARKER_POSITIONS.size else ()
        end_offset = int.from_bytes(body[:8], "little", signed=True)
        if end_offset != expected or (
            version != 1 and fields and (fields[1], fields[5]) != committed
        ):
            return "a commit marker cut short at the end of the data, not matching the records"
    return None


__all__ = [
    "CLEANED_SUFFIX",
    "FORMAT_VERSIONS",
    "LOCK_FILE",
    "LONG_MIN",
    "META_FILE",
    "LoadedLog",
    "ScanResult",
    "Segment",
    "apply_repair",
    "fsync_dir",
    "load_segments",
    "open_fd",
    "read_meta",
    "scan_segment",
    "segment_files",
    "segment_name",
    "temporaries",
    "write_meta",
]
