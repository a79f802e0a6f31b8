"""The write path of :class:`~txstore.changelog.log.FileChangelog`: buffering, batches, commit.

Appends go to in-memory columns (keys, values, timestamps, headers); once ``batch_bytes`` are
buffered, and at commit, they are written as one record batch frame with ``writev`` (no copy
into one buffer, one CRC per batch). Nothing is synced before :meth:`commit`, which writes the
rest, syncs, writes both copies of the commit marker and syncs again. A transaction never spans
segments: the segment is rolled, when full, before the transaction's first byte.

Any error of the file system on the write path (a failed write, sync, file creation or rename:
a full disk, an I/O error) makes the log refuse every further write with
:class:`~txstore.errors.StorageError`, after truncating its uncommitted tail when it can: what
is on disk after a failed sync is unknown, so only a reopen, which scans the files, may go on.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable

from txstore import faults
from txstore.changelog.api import (
    MAX_FIELD_BYTES,
    MAX_METADATA_BYTES,
    RECORD_OVERHEAD,
    CommitInfo,
    HeadersArg,
    check_position,
    check_record,
    check_record_size,
)
from txstore.changelog.format import (
    LONG_MAX,
    LONG_MIN,
    batch_frame,
)
from txstore.changelog.markers import Marker, commit_marker, read_last_marker
from txstore.changelog.segments import (
    CLEANED_SUFFIX,
    FORMAT_VERSION,
    LoadedLog,
    Segment,
    apply_repair,
    fsync_dir,
    open_fd,
    segment_name,
    write_meta,
)
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    ReadOnlyError,
    StorageError,
    StoreClosedError,
)

__all__ = ["TransactionWriter"]


class TransactionWriter:
    """The transactional append path, as a base class of ``FileChangelog`` (which opens the
    directory, recovers it and sets the attributes declared here)."""

    path: str
    readonly: bool
    fsync: bool
    segment_bytes: int
    batch_bytes: int
    _closed: bool
    _broken: str | None
    _fd: int
    _segments: list[Segment]
    _committed_end: int
    _committed_pos: int
    _written_pos: int
    _next: int
    _dir_dirty: bool
    _last_position: int | None
    _last_commit_ms: int | None
    _last_metadata: bytes
    _state_lock: threading.Lock
    _meta: dict[str, object]
    _recovered: LoadedLog | None
    #: The byte position up to which :meth:`sync_records` synced the open transaction's
    #: records (-1: not since the last write), so that :meth:`commit` does not sync them again.
    _synced_pos: int = -1

    # -- writing -------------------------------------------------------------------------------

    def _reset_txn_buffer(self) -> None:
        self._keys: list[bytes] = []
        self._values: list[bytes | None] = []
        self._timestamps: list[int] = []
        self._headers: list[bytes] = []
        self._tombstones = False
        self._has_headers = False
        self._pending = 0
        self._txn_id: int | None = None
        self._txn_max_ts = LONG_MIN

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"changelog {self.path}")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnlyError(f"changelog {self.path!r} is open read-only")
        if self._broken is not None:
            raise StorageError(
                f"changelog {self.path!r} is unusable after an I/O error ({self._broken}); "
                "close and reopen it: recovery keeps exactly the committed transactions"
            )
        self.repair()

    def check_writable(self) -> None:
        """Raise what a write would raise now (closed, read-only, unusable after an I/O error),
        without writing anything but a pending :meth:`repair`. A coordinator committing several
        logs calls it on each before committing any."""
        self._check_writable()

    @property
    def broken(self) -> str | None:
        """Why the log refuses writes after an I/O error (None: it does not)."""
        return self._broken

    def repair(self) -> None:
        """Apply the repair the scan at open found (truncate the torn tail after the last
        complete commit, delete uncommitted and temporary files), if it was deferred
        (``FileChangelog(..., repair=False)``); every write does it first. Idempotent."""
        loaded = self._recovered
        if loaded is None or not loaded.needs_repair or self.readonly:
            return
        try:
            apply_repair(self.path, loaded)
        except OSError as exc:
            self._fail(exc)

    def _upgrade_format(self) -> None:
        """Before the first frame of the current format goes into a version 1 directory: record
        the new version in ``changelog.json`` (an older txstore then refuses the directory
        instead of misreading it)."""
        if self._meta.get("version") != FORMAT_VERSION:
            meta = dict(self._meta, version=FORMAT_VERSION)
            write_meta(self.path, meta, sync=self.fsync)
            self._meta = meta

    def append(
        self, key: bytes, value: bytes | None, timestamp: int, headers: HeadersArg = b""
    ) -> int:
        """Add a record to the open transaction and return its offset. Amortized O(1): records
        are buffered and written ``batch_bytes`` at a time, never synced before :meth:`commit`.

        ``key`` is bytes (may be empty); ``value`` bytes or ``None`` (a tombstone);
        ``timestamp`` an int from -1 (Kafka's NO_TIMESTAMP, the surrogate of values that never
        had one) to 2**63-1; ``headers`` serialized Kafka headers (stored as given) or a
        :class:`~txstore.types.Headers`. Bad input raises a typed error and appends nothing.
        """
        if (
            type(key) is not bytes
            or (value is not None and type(value) is not bytes)
            or type(timestamp) is not int
            or not -1 <= timestamp <= LONG_MAX
            or type(headers) is not bytes
            or self._closed
            or self.readonly
            or self._broken is not None
        ):
            self._check_writable()
            key, value, timestamp, headers = check_record(key, value, timestamp, headers)
        size = len(key) + len(headers) + RECORD_OVERHEAD
        if value is None:
            self._tombstones = True
        else:
            size += len(value)
        if size > MAX_FIELD_BYTES:
            check_record_size(key, value, headers)
        if headers:
            self._has_headers = True
        self._keys.append(key)
        self._values.append(value)
        self._timestamps.append(timestamp)
        self._headers.append(headers)
        offset = self._next
        self._next = offset + 1
        self._pending += size
        if self._pending >= self.batch_bytes:
            self._flush()
        return offset

    def append_many(
        self,
        records: Iterable[
            tuple[bytes, bytes | None, int] | tuple[bytes, bytes | None, int, HeadersArg]
        ],
    ) -> range:
        """Add ``(key, value, timestamp[, headers])`` records to the open transaction; return
        their offsets. All are checked first: one bad record raises and appends none."""
        self._check_writable()
        keys: list[bytes] = []
        values: list[bytes | None] = []
        tss: list[int] = []
        hdrs: list[bytes] = []
        for i, rec in enumerate(records):
            if type(rec) is not tuple or not 3 <= len(rec) <= 4:
                raise InvalidTypeError(
                    f"record {i} must be a (key, value, timestamp[, headers]) tuple, got "
                    f"{type(rec).__name__}"
                )
            key, value, ts = rec[0], rec[1], rec[2]
            h = rec[3] if len(rec) == 4 else b""
            try:
                key, value, ts, h = check_record(key, value, ts, h)
                check_record_size(key, value, h)
            except (InvalidTypeError, InvalidArgumentError) as exc:
                raise type(exc)(f"record {i}: {exc}") from None
            keys.append(key)
            values.append(value)
            tss.append(ts)
            hdrs.append(h)
        start = self._next
        for key, value, ts, h in zip(keys, values, tss, hdrs, strict=True):
            self.append(key, value, ts, h)
        return range(start, self._next)

    def _flush(self) -> None:
        """Write the buffered records as one batch (no sync)."""
        keys = self._keys
        if not keys:
            return
        self._begin_write()
        assert self._txn_id is not None
        n = len(keys)
        tss = self._timestamps
        max_ts = max(tss)
        frame = batch_frame(
            self._txn_id,
            self._next - n,
            keys,
            self._values,
            tss,
            self._headers,
            tombstones=self._tombstones,
            has_headers=self._has_headers,
            max_timestamp=max_ts,
        )
        self._write(frame)
        if max_ts > self._txn_max_ts:
            self._txn_max_ts = max_ts
        txn_id, txn_max = self._txn_id, self._txn_max_ts
        self._reset_txn_buffer()
        self._txn_id, self._txn_max_ts = txn_id, txn_max

    def _begin_write(self) -> None:
        """Before the first byte of a transaction: repair, record the format version, roll the
        segment if it is full, pick the transaction id."""
        if self._txn_id is not None:
            return
        self._check_writable()
        try:
            self._upgrade_format()
            if not self._segments or self._committed_pos >= self.segment_bytes:
                self._roll()
        except OSError as exc:
            self._fail(exc)
        self._txn_id = int.from_bytes(os.urandom(8), "little")

    def _roll(self) -> None:
        base = self._committed_end
        seg_path = os.path.join(self.path, segment_name(base))
        if self._segments and self._segments[-1].base == base:
            # The active segment holds commit markers only (a new segment would need the same
            # name): keep it, reduced to its last commit once it is full.
            if self._committed_pos >= self.segment_bytes:
                self._shrink_marker_only()
            return
        fd = open_fd(seg_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL)
        with self._state_lock:  # readers in other threads take segment lists under it
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = fd
            self._segments = [*self._segments, Segment(base, seg_path, base, LONG_MIN, 0)]
            self._written_pos = self._committed_pos = 0
        self._dir_dirty = True

    def _shrink_marker_only(self) -> None:
        """Replace the marker-only active segment by its last commit alone (write aside, sync,
        rename): idle tasks that commit on a timer do not grow the log."""
        seg = self._segments[-1]
        m = read_last_marker(self._fd, self._committed_pos)
        assert m is not None, "the active segment ends with a commit"
        last = b"".join(_alone(m))
        tmp = seg.path + CLEANED_SUFFIX
        fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, last)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, seg.path)
        if self.fsync:
            fsync_dir(self.path)
        fd = open_fd(seg.path, os.O_RDWR | os.O_APPEND)
        with self._state_lock:
            os.close(self._fd)
            self._fd = fd
            seg.size = self._written_pos = self._committed_pos = len(last)

    def _write(self, parts: list[bytes]) -> None:
        self._synced_pos = -1
        total = sum(map(len, parts))
        try:
            written = os.writev(self._fd, parts)
            if written < total:  # a short write (disk full, signal): write the rest
                rest = memoryview(b"".join(parts))[written:]
                while rest:
                    n = os.write(self._fd, rest)
                    if n <= 0:
                        raise OSError("write made no progress")
                    rest = rest[n:]
        except OSError as exc:
            self._fail(exc)
        except BaseException as exc:  # interrupted part way (KeyboardInterrupt, ...)
            self._interrupted(exc)
            raise
        self._written_pos += total

    def _interrupted(self, exc: BaseException) -> None:
        """Something other than an I/O error stopped a write or sync part way: what reached the
        file is unknown, so the log refuses further writes as after an I/O error (the original
        exception propagates)."""
        self._broken = f"interrupted by {type(exc).__name__}"
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._committed_pos)

    def _fail(self, exc: OSError) -> None:
        """An I/O error while writing: undo the uncommitted tail if possible, then refuse all
        further writes (after a failed fsync the file state is unknown, so no retry)."""
        self._broken = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._committed_pos)
        raise StorageError(
            f"changelog {self.path!r}: write failed ({exc}); the open transaction is lost and "
            "the log must be reopened"
        ) from exc

    def sync_records(self) -> None:
        """Write the open transaction's buffered records and sync them, without committing:
        the first half of :meth:`commit`, which then does not sync them again. A task calls it
        on every changelog of a commit before it writes the first commit marker, so a
        participant that lacks the marker after a crash still holds every record of the
        commit (:func:`~txstore.changelog.coordination.plan_recovery` tells lost records from a
        crash by that). Cost: the buffered records plus one sync (none without ``fsync``)."""
        self._check_writable()
        self._flush()
        try:
            if self.fsync and self._written_pos > self._committed_pos:
                os.fdatasync(self._fd)
        except OSError as exc:
            self._fail(exc)
        self._synced_pos = self._written_pos

    def commit(self, input_position: int, metadata: bytes = b"") -> CommitInfo:
        """Write the open transaction's records and a commit marker carrying
        ``input_position`` (and ``metadata``), and sync: the records are then committed and
        survive any crash. Returns the committed offset range (empty for a commit without
        records, which still records the input position).

        Sync order: data, ``fdatasync``, marker, ``fdatasync`` (and the directory after a segment
        roll), so a valid marker on disk proves that the records before it were durable.
        Cost: O(buffered records) plus two syncs.
        """
        self._check_writable()
        position = check_position(input_position)
        if type(metadata) is not bytes:
            if not isinstance(metadata, (bytes, bytearray, memoryview)):
                raise InvalidTypeError(f"metadata must be bytes, got {type(metadata).__name__}")
            metadata = bytes(metadata)
        if len(metadata) > MAX_METADATA_BYTES:
            raise InvalidArgumentError(
                f"commit metadata is {len(metadata)} bytes, above {MAX_METADATA_BYTES}"
            )
        self._flush()
        self._begin_write()
        assert self._txn_id is not None
        wrote_records = self._written_pos > self._committed_pos
        seg = self._segments[-1]
        now_ms = time.time_ns() // 1_000_000
        max_ts = max(seg.max_timestamp, self._txn_max_ts)
        try:
            if wrote_records and self.fsync and self._synced_pos != self._written_pos:
                os.fdatasync(self._fd)
        except OSError as exc:
            self._fail(exc)
        faults.point("changelog.after_append")
        marker = commit_marker(
            self._txn_id,
            self._next,
            position,
            max_ts,
            now_ms,
            metadata,
            start_offset=self._committed_end,
            txn_start_pos=self._committed_pos,
        )
        self._write(marker)
        try:
            if self.fsync:
                os.fdatasync(self._fd)
                if self._dir_dirty:
                    fsync_dir(self.path)
        except OSError as exc:
            self._fail(exc)
        except BaseException as exc:
            self._interrupted(exc)
            raise
        self._dir_dirty = False
        start = self._committed_end
        with self._state_lock:
            self._committed_end = self._next
            self._committed_pos = self._written_pos
            seg.end_offset, seg.max_timestamp, seg.size = self._next, max_ts, self._written_pos
            seg.marker = None
            self._last_position = position
            self._last_commit_ms = now_ms
            self._last_metadata = metadata
        self._reset_txn_buffer()
        return CommitInfo(start, self._committed_end, position)

    def abort(self) -> None:
        """Discard the open transaction: buffered records are dropped and any written ones are
        truncated away. Their offsets are given to the next transaction's records (offsets of
        *committed* records are never reused). O(1)."""
        self._check_writable()
        self._reset_txn_buffer()
        self._next = self._committed_end
        if self._written_pos > self._committed_pos:
            try:
                os.ftruncate(self._fd, self._committed_pos)
            except OSError as exc:
                self._fail(exc)
            self._written_pos = self._committed_pos

    @property
    def in_transaction(self) -> bool:
        """True when records were appended since the last commit or abort."""
        return self._next > self._committed_end


def _alone(m: Marker) -> list[bytes]:
    """The commit ``m`` as the only content of a file: a transaction without records."""
    return commit_marker(
        m.txn_id,
        m.end_offset,
        m.input_position,
        m.max_timestamp,
        m.commit_time_ms,
        m.metadata,
        start_offset=m.end_offset,
        txn_start_pos=0,
    )
