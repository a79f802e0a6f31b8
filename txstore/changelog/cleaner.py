"""Cleanup of a file changelog's closed segments: compaction and time retention.

**Compaction** (Kafka's ``cleanup.policy=compact``) keeps, over all closed segments, the record
with the highest offset for each key, and rewrites the segments without the others. Two passes:
the first builds ``key -> latest offset`` (keys only), the second filters every batch and writes
the survivors. Tombstones follow KIP-534: the first compaction that keeps a tombstone stamps its
batch with a *delete horizon* ``now + tombstone_retention_ms``; a later compaction run at or
after the horizon drops it. Consecutive segments are merged while the output stays under
``segment_bytes``, so the number of files shrinks with the data.

Each output file is written as ``<base>.log.cleaned``, synced, renamed over the first segment it
replaces (atomic), the directory synced, and only then are the other merged segments deleted.
A crash before the rename leaves the ``.cleaned`` file, which the next open deletes; a crash
after it leaves merged segments whose base lies below the new file's end offset, which the next
open recognises and deletes. Offsets never change: survivors keep theirs, in sparse batches.

**Retention** (``cleanup.policy=delete``) deletes whole segments, oldest first, while a
segment's largest record timestamp is older than the cutoff.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from txstore.changelog.format import (
    LONG_MAX,
    LONG_MIN,
    MARKER_OVERHEAD_V1,
    T_BATCH,
    Frame,
    FrameReader,
    batch_frame,
    batch_info,
    corruption,
    decode_batch,
    frame_problem,
)
from txstore.changelog.markers import Marker, commit_marker, decode_marker, marker_pair_size
from txstore.changelog.segments import (
    CLEANED_SUFFIX,
    Segment,
    fsync_dir,
    open_fd,
    segment_name,
)

__all__ = ["CleanResult", "compact_segments", "expired_prefix"]

_IOV_BATCH = 256  # buffers per writev call (IOV_MAX is 1024 on Linux)


@dataclass
class CleanResult:
    """What one :meth:`FileChangelog.clean` call did."""

    deleted_segments: int = 0
    deleted_bytes: int = 0
    compacted: bool = False
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    segments_before: int = 0
    segments_after: int = 0


def expired_prefix(segments: Sequence[Segment], cutoff: int) -> int:
    """How many segments, oldest first, have every record timestamp below ``cutoff``."""
    n = 0
    for seg in segments:
        if seg.max_timestamp >= cutoff:
            break
        n += 1
    return n


def _frames(seg: Segment) -> Iterator[Frame]:
    """Every frame of a closed segment; any bad frame is corruption of committed data, and so
    is a batch whose offsets are not ascending within ``[seg.base, seg.end_offset)``."""
    fd = open_fd(seg.path)
    expected = seg.base
    try:
        reader = FrameReader(fd, 0, None)
        while True:
            frame = reader.next()
            if not isinstance(frame, Frame):
                if frame == "eof":
                    return
                raise corruption(seg.path, reader.pos, None, frame_problem(frame))
            if not frame.crc_ok:
                raise corruption(seg.path, frame.pos, None, "checksum mismatch")
            if frame.ftype == T_BATCH:
                try:
                    info = batch_info(frame)
                except (ValueError, struct.error):
                    raise corruption(seg.path, frame.pos, None, "malformed record batch") from None
                if info.base_offset < expected or info.last_offset >= seg.end_offset:
                    raise corruption(seg.path, frame.pos, expected, "out-of-sequence record batch")
                expected = info.last_offset + 1
            yield frame
    finally:
        os.close(fd)


class _Output:
    """Survivors of one input segment, re-batched into frames of the compaction's txn id."""

    def __init__(self, txn_id: int, batch_bytes: int) -> None:
        self.txn_id = txn_id
        self.batch_bytes = batch_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.max_ts = LONG_MIN
        self._cols: tuple[list[int], list[bytes], list[bytes | None], list[int], list[bytes]] = (
            [],
            [],
            [],
            [],
            [],
        )
        self._horizon: int | None = None  # the delete horizon of the buffered tombstones
        self._bytes = 0

    def add(
        self,
        offsets: Sequence[int],
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        timestamps: Sequence[int],
        headers: Sequence[bytes],
        horizon: int | None,
    ) -> None:
        """Buffer survivors; ``horizon`` is their tombstones' delete horizon (None: none)."""
        if horizon is not None and self._horizon is not None and horizon != self._horizon:
            self.flush()
        if horizon is not None:
            self._horizon = horizon
        o, k, v, t, h = self._cols
        o.extend(offsets)
        k.extend(keys)
        v.extend(values)
        t.extend(timestamps)
        h.extend(headers)
        self._bytes += sum(map(len, keys)) + sum(map(len, filter(None, values)))
        self._bytes += sum(map(len, headers)) + 20 * len(keys)
        if self._bytes >= self.batch_bytes:
            self.flush()

    def flush(self) -> None:
        o, k, v, t, h = self._cols
        if not o:
            return
        n = len(o)
        max_ts = max(t)
        frame = batch_frame(
            self.txn_id,
            o[0],
            k,
            v,
            t,
            h,
            tombstones=self._horizon is not None,
            has_headers=any(h),
            max_timestamp=max_ts,
            offsets=None if o[-1] - o[0] + 1 == n else o,
            delete_horizon=-1 if self._horizon is None else self._horizon,
        )
        self.parts.extend(frame)
        self.size += sum(map(len, frame))
        self.max_ts = max(self.max_ts, max_ts)
        self._cols = ([], [], [], [], [])
        self._horizon = None
        self._bytes = 0


@dataclass
class _Group:
    """Consecutive input segments merged into one output file."""

    inputs: list[Segment]
    outputs: list[_Output]
    last_marker: Marker
    changed: bool
    size: int
    max_ts: int


def compact_segments(
    path: str,
    closed: list[Segment],
    *,
    now_ms: int,
    tombstone_retention_ms: int,
    segment_bytes: int,
    batch_bytes: int,
    sync: bool,
    result: CleanResult,
) -> list[Segment]:
    """Compact ``closed`` (the log's closed segments, oldest first) and return the segments
    that replace them. See the module docstring. O(bytes of the closed segments)."""
    latest: dict[bytes, int] = {}
    for seg in closed:
        for frame in _frames(seg):
            if frame.ftype == T_BATCH:
                cols = _decode(seg, frame, keys_only=True)
                latest.update(zip(cols.keys, cols.offsets, strict=True))
                result.records_read += len(cols.keys)
    new_horizon = min(LONG_MAX, now_ms + tombstone_retention_ms)
    txn_id = int.from_bytes(os.urandom(8), "little")
    out_segments: list[Segment] = []
    group: _Group | None = None
    for seg in closed:
        out, last_marker, changed = _filter_segment(
            seg, latest, now_ms, new_horizon, txn_id, batch_bytes, result
        )
        result.bytes_before += seg.size
        pair = marker_pair_size(len(last_marker.metadata))  # what a merged file ends with
        if group is not None and group.size + out.size + pair <= segment_bytes:
            group.inputs.append(seg)
            group.outputs.append(out)
            group.last_marker = last_marker
            group.changed = True
            group.size += out.size
            group.max_ts = max(group.max_ts, out.max_ts)
            continue
        if group is not None:
            out_segments.append(_finish(path, group, txn_id, sync))
        group = _Group([seg], [out], last_marker, changed, out.size, out.max_ts)
    if group is not None:
        out_segments.append(_finish(path, group, txn_id, sync))
    result.compacted = True
    result.segments_before += len(closed)
    result.segments_after += len(out_segments)
    result.bytes_after += sum(s.size for s in out_segments)
    return out_segments


def _decode(seg: Segment, frame: Frame, *, keys_only: bool = False):  # type: ignore[no-untyped-def]
    try:
        return decode_batch(frame, keys_only=keys_only)
    except (ValueError, struct.error):
        raise corruption(seg.path, frame.pos, None, "malformed record batch") from None


def _filter_segment(
    seg: Segment,
    latest: dict[bytes, int],
    now_ms: int,
    new_horizon: int,
    txn_id: int,
    batch_bytes: int,
    result: CleanResult,
) -> tuple[_Output, Marker, bool]:
    out = _Output(txn_id, batch_bytes)
    markers = 0
    last_marker: Marker | None = None
    changed = False
    copy_next = False  # the next frame is the second copy of the marker before it
    for frame in _frames(seg):
        if frame.ftype != T_BATCH:
            marker = decode_marker(frame)
            if marker is None:
                raise corruption(seg.path, frame.pos, None, "malformed commit marker")
            if copy_next:
                copy_next = False
            else:
                markers += 1
                copy_next = marker.version != 1
            last_marker = marker
            continue
        copy_next = False
        cols = _decode(seg, frame)
        offsets, keys, values = cols.offsets, cols.keys, cols.values
        keep = [i for i, (k, o) in enumerate(zip(keys, offsets, strict=True)) if latest[k] == o]
        horizon = cols.delete_horizon
        tomb_horizon: int | None = None
        if None in values:
            if horizon != -1 and horizon <= now_ms:  # past the delete horizon: drop them
                before = len(keep)
                keep = [i for i in keep if values[i] is not None]
                result.tombstones_dropped += before - len(keep)
            if any(values[i] is None for i in keep):
                tomb_horizon = horizon if horizon != -1 else new_horizon
                changed = changed or horizon == -1
        if len(keep) != len(keys):
            changed = True
        if not keep:
            continue
        result.records_kept += len(keep)
        if len(keep) == len(keys):
            out.add(offsets, keys, values, cols.timestamps, cols.headers, tomb_horizon)
        else:
            ts, hs = cols.timestamps, cols.headers
            out.add(
                [offsets[i] for i in keep],
                [keys[i] for i in keep],
                [values[i] for i in keep],
                [ts[i] for i in keep],
                [hs[i] for i in keep],
                tomb_horizon,
            )
    out.flush()
    if last_marker is None:
        raise corruption(seg.path, seg.size, None, "a closed segment without a commit marker")
    changed = changed or markers > 1 or out.size + _marker_bytes(last_marker) != seg.size
    return out, last_marker, changed


def _marker_bytes(marker: Marker) -> int:
    """Bytes the commit ``marker`` takes in its file (a version 1 marker has one copy)."""
    if marker.version == 1:
        return MARKER_OVERHEAD_V1 + len(marker.metadata)
    return marker_pair_size(len(marker.metadata))


def _write_all(fd: int, parts: list[bytes]) -> None:
    for i in range(0, len(parts), _IOV_BATCH):
        chunk = parts[i : i + _IOV_BATCH]
        total = sum(map(len, chunk))
        written = os.writev(fd, chunk)
        if written < total:
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                n = os.write(fd, rest)
                if n <= 0:
                    raise OSError("write made no progress")
                rest = rest[n:]


def _finish(path: str, group: _Group, txn_id: int, sync: bool) -> Segment:
    """Write one output file (or keep the input if nothing changed) and swap it in."""
    first, last = group.inputs[0], group.inputs[-1]
    if not group.changed:
        return first
    m = group.last_marker
    marker = commit_marker(
        txn_id,
        m.end_offset,
        m.input_position,
        group.max_ts,
        m.commit_time_ms,
        m.metadata,
        start_offset=first.base,  # the file is one transaction, of the compaction's txn id
        txn_start_pos=0,
    )
    tmp = os.path.join(path, segment_name(first.base) + CLEANED_SUFFIX)
    fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for out in group.outputs:
            _write_all(fd, out.parts)
        _write_all(fd, marker)
        if sync:
            os.fsync(fd)
        size = os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, first.path)
    if sync:
        fsync_dir(path)
    for seg in group.inputs[1:]:
        os.unlink(seg.path)
    if sync and len(group.inputs) > 1:
        fsync_dir(path)
    return Segment(first.base, first.path, last.end_offset, group.max_ts, size, None)
