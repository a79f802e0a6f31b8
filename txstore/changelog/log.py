"""The changelog: a durable, append-only, checksummed log of a store partition's writes.

A store is the cache of its changelog. Every store write is appended to the changelog's open
transaction; the task commits the changelog (a *commit marker* carrying the input position,
synced) and then the stores, with the changelog offset. After a crash, the changelog holds
exactly the committed transactions, and a store restores the range it missed by replaying it.

:class:`Changelog` is the interface the task and the stores use, small enough for a Kafka topic
written by a transactional producer to implement later. :class:`FileChangelog` is the embedded
default: segment files in a directory, Kafka's transactional-producer semantics, compaction
(``cleanup.policy=compact``) and time retention (``cleanup.policy=delete``).

>>> import tempfile
>>> with FileChangelog(tempfile.mkdtemp()) as log:
...     log.append(b"k", b"v1", 1000)
...     log.append(b"k", None, 1001)          # a tombstone
...     log.commit(input_position=7)
...     log.append(b"x", b"never committed", 1002)
...     log.abort()
...     [(r.offset, r.value) for r in log.read_committed()]
0
1
CommitInfo(start_offset=0, end_offset=2, input_position=7)
2
[(0, b'v1'), (1, None)]

Byte layout, recovery rules and measured figures: ``docs/changelog.md``.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from itertools import pairwise

from txstore.changelog.api import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_TOMBSTONE_RETENTION_MS,
    Changelog,
    CleanupPolicy,
    CloseableIterator,
    CommitInfo,
    positive_int,
    to_policy,
)
from txstore.changelog.cleaner import CleanResult, compact_segments, expired_prefix
from txstore.changelog.history import CommitHistory, CommitRecord
from txstore.changelog.reader import (
    BatchIterator,
    ChangelogRecord,
    FrameIterator,
    RecordBatch,
    RecordIterator,
    SegmentRef,
    SegmentSource,
)
from txstore.changelog.segments import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LOCK_FILE,
    META_FILE,
    LoadedLog,
    Segment,
    fsync_dir,
    load_segments,
    open_fd,
    read_meta,
    segment_files,
    write_meta,
)
from txstore.changelog.writer import TransactionWriter
from txstore.errors import (
    ChangelogCorruptionError,
    ConfigConflictError,
    InvalidArgumentError,
    InvalidTypeError,
    OffsetError,
    WriterLockedError,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BatchIterator",
    "Changelog",
    "ChangelogRecord",
    "CleanResult",
    "CleanupPolicy",
    "CloseableIterator",
    "CommitInfo",
    "CommitRecord",
    "FileChangelog",
    "RecordBatch",
    "RecordIterator",
    "interrupted_creation",
]


class FileChangelog(TransactionWriter, CommitHistory, SegmentSource):
    """The embedded changelog: segment files in one directory, one writer process at a time.

    Parameters (all keyword-only except ``path``):

    * ``cleanup_policy``: a :class:`CleanupPolicy` or its string; stored on creation, and a
      reopen with a different one raises :class:`~txstore.errors.ConfigConflictError`
      (``None``: whatever is on disk, ``compact`` for a new log).
    * ``readonly``: a reader that never writes and takes no lock, usable from other processes
      while the writer runs. Its offsets are refreshed by :meth:`refresh` and by every read.
    * ``create``: create the directory if it is missing (writers only).
    * ``segment_bytes``: a segment is rolled when it has reached this size at the start of a
      transaction (a transaction never spans segments). Default 64 MiB.
    * ``batch_bytes``: buffered records are written as one batch once they reach this size
      (and at commit). Default 1 MiB.
    * ``retention_ms``: ``delete`` policies drop whole closed segments whose largest record
      timestamp is older than ``now - retention_ms``. Default 7 days.
    * ``tombstone_retention_ms``: how long compaction keeps a tombstone after it first saw it
      (Kafka's ``delete.retention.ms``, KIP-534's delete horizon). Default 24 hours.
    * ``min_cleanable_dirty_ratio``: :meth:`clean` compacts only when at least this share of
      the closed segments' bytes was never compacted. Default 0.5.
    * ``fsync``: sync at commit (default). ``False`` survives a process crash but not a power
      loss; for tests and throwaway data only.
    * ``repair``: a writer's open truncates a torn tail and deletes uncommitted files after
      scanning (default). ``False`` only scans (damage still raises): the repair waits for
      :meth:`repair` or the first write, so that a coordinator of several logs (a task) checks
      them all before it changes any.

    Not thread-safe for writing: one thread appends and commits. Iterators may be used from
    other threads and stay valid while the log is written and cleaned.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cleanup_policy: CleanupPolicy | str | None = None,
        readonly: bool = False,
        create: bool = True,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        retention_ms: int = DEFAULT_RETENTION_MS,
        tombstone_retention_ms: int = DEFAULT_TOMBSTONE_RETENTION_MS,
        min_cleanable_dirty_ratio: float = DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
        fsync: bool = True,
        repair: bool = True,
    ) -> None:
        self._closed = True
        self._lock_fd = -1
        self._fd = -1
        self.path = os.fspath(path)
        self.readonly = bool(readonly)
        self.segment_bytes = positive_int("segment_bytes", segment_bytes)
        self.batch_bytes = positive_int("batch_bytes", batch_bytes)
        self.retention_ms = positive_int("retention_ms", retention_ms, zero=True)
        self.tombstone_retention_ms = positive_int(
            "tombstone_retention_ms", tombstone_retention_ms, zero=True
        )
        if not isinstance(min_cleanable_dirty_ratio, (int, float)) or not (
            0.0 <= min_cleanable_dirty_ratio <= 1.0
        ):
            raise InvalidArgumentError(
                f"min_cleanable_dirty_ratio must be in [0, 1], got {min_cleanable_dirty_ratio!r}"
            )
        self.min_cleanable_dirty_ratio = float(min_cleanable_dirty_ratio)
        self.fsync = bool(fsync)
        policy = None if cleanup_policy is None else to_policy(cleanup_policy)
        self._iterators: weakref.WeakSet[BatchIterator] = weakref.WeakSet()
        self._state_lock = threading.Lock()
        self._broken: str | None = None
        self._reset_txn_buffer()
        self._segments: list[Segment] = []
        self._committed_end = 0
        self._last_position: int | None = None
        self._last_commit_ms: int | None = None
        self._last_metadata = b""
        self._recovered: LoadedLog | None = None
        self._dir_dirty = False

        if not os.path.isdir(self.path):
            if readonly or not create:
                raise InvalidArgumentError(f"changelog directory {self.path!r} does not exist")
            self._make_dirs()
        if not readonly:
            self._lock()
        try:
            meta = read_meta(self.path)
            if meta is None:
                meta = self._create_meta(policy)
            try:
                on_disk = to_policy(meta.get("cleanup_policy", ""))
            except InvalidArgumentError as exc:  # the file was written valid: it is damaged
                raise ConfigConflictError(
                    f"{os.path.join(self.path, META_FILE)} is damaged: {exc}; restore it from "
                    "a copy (its cleanup_policy is compact for key-value stores, compact,delete "
                    "for window and session stores)"
                ) from exc
            if policy is not None and policy is not on_disk:
                raise ConfigConflictError(
                    f"changelog {self.path!r} has cleanup.policy={on_disk.value!r} on disk, "
                    f"opened with {policy.value!r}; a changelog keeps the policy it was created "
                    "with (key-value stores compact, window and session stores delete)"
                )
            self.cleanup_policy = on_disk
            self._meta = meta
            if readonly:
                self._load_readonly()
            else:
                self._install(
                    load_segments(self.path, repair=bool(repair), log_start=self.meta_log_start)
                )
                self._open_active()
        except BaseException:
            self._release()
            raise
        self._closed = False

    # -- opening -------------------------------------------------------------------------------

    def _make_dirs(self) -> None:
        """Create the directory and its missing parents, and make their entries durable."""
        missing = []
        p = os.path.abspath(self.path)
        while not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        os.makedirs(self.path, exist_ok=True)
        if self.fsync:
            for d in missing:
                fsync_dir(os.path.dirname(d))

    def _lock(self) -> None:
        fd = open_fd(os.path.join(self.path, LOCK_FILE), os.O_RDWR | os.O_CREAT)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                raise WriterLockedError(
                    f"changelog {self.path!r} is open for writing by another process (or "
                    "another FileChangelog in this one); open it with readonly=True, or close "
                    "the other writer"
                ) from exc
        self._lock_fd = fd

    def _create_meta(self, policy: CleanupPolicy | None) -> dict[str, object]:
        if self.readonly:
            raise ConfigConflictError(
                f"{self.path!r} is not a txstore changelog directory (no {META_FILE})"
            )
        foreign = sorted(n for n in os.listdir(self.path) if n not in _CREATION_FILES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ConfigConflictError(
                f"{self.path!r} is not a txstore changelog directory: it has no {META_FILE} "
                f"but holds {shown}; give the changelog an empty or new directory"
            )
        meta: dict[str, object] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "cleanup_policy": (policy or CleanupPolicy.COMPACT).value,
            "cleaned_end": 0,
            "log_start": 0,
        }
        write_meta(self.path, meta, sync=self.fsync)
        return meta

    def _install(self, loaded: LoadedLog) -> None:
        with self._state_lock:
            self._install_locked(loaded)

    def _install_locked(self, loaded: LoadedLog) -> None:
        self._recovered = loaded
        self._segments = loaded.segments
        marker = loaded.last_marker
        self._committed_end = self._segments[-1].end_offset if self._segments else 0
        self._last_position = marker.input_position if marker else None
        self._last_commit_ms = marker.commit_time_ms if marker else None
        self._last_metadata = marker.metadata if marker else b""
        self._next = self._committed_end

    def _load_readonly(self) -> None:
        for attempt in range(5):
            try:
                self._install(load_segments(self.path, repair=False, log_start=self.meta_log_start))
                return
            except (ChangelogCorruptionError, FileNotFoundError):
                # The writer may be appending, truncating or cleaning right now: look again
                # before calling it corruption.
                if attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))

    def _open_active(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if not self._segments:
            self._written_pos = self._committed_pos = 0
            return
        seg = self._segments[-1]
        self._fd = open_fd(seg.path, os.O_RDWR | os.O_APPEND)
        self._written_pos = self._committed_pos = seg.size
        self._dir_dirty = False

    def refresh(self) -> None:
        """Re-read the directory (read-only logs; a writer's view is always current)."""
        self._check_open()
        if self.readonly:
            self._load_readonly()

    # -- offsets -------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets (Kafka's log end offset)."""
        return self._next

    @property
    def committed_end_offset(self) -> int:
        """The offset after the last committed record (Kafka's last stable offset); a
        read-committed reader stops here."""
        return self._committed_end

    @property
    def last_committed_offset(self) -> int | None:
        """The offset of the last committed record; None if no record was ever committed."""
        return self._committed_end - 1 if self._committed_end else None

    @property
    def last_committed_input_position(self) -> int | None:
        """The input position carried by the last commit marker; None before the first."""
        return self._last_position

    @property
    def last_committed_metadata(self) -> bytes:
        """The metadata blob of the last commit (``b""``: none)."""
        return self._last_metadata

    @property
    def last_commit_time_ms(self) -> int | None:
        """Wall-clock time of the last commit, in ms since the epoch (None: no commit yet)."""
        return self._last_commit_ms

    @property
    def log_start_offset(self) -> int:
        """The first offset still in the log (the base of the oldest segment)."""
        return self._segments[0].base if self._segments else self._committed_end

    @property
    def active_segment_base(self) -> int:
        """The base offset of the segment appended to (where the open transaction's records
        are once written: a transaction never spans segments)."""
        return self._segments[-1].base if self._segments else self._committed_end

    @property
    def meta_log_start(self) -> int | None:
        """The log start ``changelog.json`` records (None: a file from before it did)."""
        start = self._meta.get("log_start")
        if start is None:
            return None
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ConfigConflictError(
                f"{os.path.join(self.path, META_FILE)} is damaged: its log_start is {start!r}, "
                "not an offset; restore it from a copy"
            )
        return start

    @property
    def recovered(self) -> LoadedLog | None:
        """What the last open or refresh found (truncated bytes, removed files, why)."""
        return self._recovered

    # -- reading -------------------------------------------------------------------------------

    def segment_refs(self) -> tuple[list[SegmentRef], int]:
        self._check_open()
        if self.readonly:
            self._load_readonly()
        with self._state_lock:
            segs = self._segments
            refs = [SegmentRef(s.base, s.path) for s in segs[:-1]]
            if segs:
                last = segs[-1]
                ino = os.fstat(self._fd).st_ino if self._fd >= 0 else _ino(last.path)
                refs.append(SegmentRef(last.base, last.path, last.size, ino))
            return refs, self._committed_end

    def forget_iterator(self, it: BatchIterator) -> None:
        self._iterators.discard(it)

    def read_committed_batches(self, from_offset: int = 0) -> BatchIterator:
        """Committed records with offsets >= ``from_offset`` as columnar
        :class:`RecordBatch` objects, up to the committed end as of this call.

        ``from_offset`` below :attr:`log_start_offset` reads from the start (cleanup removed
        the rest); above :attr:`committed_end_offset` raises :class:`OffsetError` (a store
        that claims more than the changelog committed). O(bytes read).
        """
        return self._batches(from_offset, False)

    def read_committed_frames(self, from_offset: int = 0) -> FrameIterator:
        """:meth:`read_committed_batches` with the batches left undecoded in the reader's
        buffers (:class:`~txstore.changelog.reader.FrameBatch`: restore's input, no object per
        record). Same checks and errors. O(bytes read)."""
        return FrameIterator(self._batches(from_offset, True))

    def _batches(self, from_offset: int, frames: bool) -> BatchIterator:
        self._check_open()
        if isinstance(from_offset, bool) or not isinstance(from_offset, int):
            raise InvalidTypeError(f"from_offset must be an int, got {type(from_offset).__name__}")
        if from_offset < 0:
            raise OffsetError(f"from_offset must be >= 0, got {from_offset}")
        refs, end = self.segment_refs()
        if from_offset > end:
            raise OffsetError(
                f"from_offset {from_offset} is beyond the committed end {end} of changelog "
                f"{self.path!r}"
            )
        it = BatchIterator(self, refs, from_offset, end, frames=frames)
        if not it.closed:
            self._iterators.add(it)
        return it

    def read_committed(self, from_offset: int = 0) -> RecordIterator:
        """Committed records with offsets >= ``from_offset`` as :class:`ChangelogRecord`
        tuples ``(offset, key, value, timestamp, headers)``; see
        :meth:`read_committed_batches`. Markers, uncommitted and aborted records never appear.
        """
        return RecordIterator(self.read_committed_batches(from_offset))

    def verify(self) -> int:
        """Read and check every committed record (CRCs and structure); return how many there
        are. Raises :class:`~txstore.errors.ChangelogCorruptionError` at the first bad one."""
        with self.read_committed_batches(0) as it:
            return sum(map(len, it))

    # -- cleanup -------------------------------------------------------------------------------

    def clean(self, now_ms: int | None = None, *, force: bool = False) -> CleanResult:
        """Apply the cleanup policy to the closed segments (never the active one).

        ``delete``: drop the oldest segments whose largest record timestamp is below
        ``now_ms - retention_ms`` (whole segments, oldest first; pass stream time or wall-clock
        time, default the wall clock). ``compact``: if at least ``min_cleanable_dirty_ratio`` of
        the closed bytes is new since the last compaction (or ``force``), keep only the latest
        record per key, drop tombstones whose delete horizon passed, and merge small segments;
        each output file is written aside, synced and renamed into place. Offsets never change.
        O(closed segments' size) when it compacts.
        """
        self._check_writable()
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        elif isinstance(now_ms, bool) or not isinstance(now_ms, int):
            raise InvalidTypeError(f"now_ms must be an int, got {type(now_ms).__name__}")
        result = CleanResult()
        # the newest segment holding a commit marker is never deleted: it carries the log's
        # committed end and input position
        keep = 1 if self._segments and self._segments[-1].size > 0 else 2
        if self.cleanup_policy.deletes:
            n = expired_prefix(
                self._segments[: max(0, len(self._segments) - keep)], now_ms - self.retention_ms
            )
            if n:
                # the new start is recorded first: a crash before the deletions leaves files
                # the next open removes, never a start the log cannot prove
                self._meta = dict(self._meta, log_start=self._segments[n].base)
                write_meta(self.path, self._meta, sync=self.fsync)
                for seg in self._segments[:n]:
                    os.unlink(seg.path)
                    result.deleted_segments += 1
                    result.deleted_bytes += seg.size
                with self._state_lock:
                    self._segments = self._segments[n:]
                if self.fsync:
                    fsync_dir(self.path)
        closed = self._segments[:-1]
        if self.cleanup_policy.compacts and closed:
            cleaned_end = self._meta.get("cleaned_end", 0)
            cleaned_end = cleaned_end if isinstance(cleaned_end, int) else 0
            total = sum(s.size for s in closed)
            dirty = sum(s.size for s in closed if s.base >= cleaned_end)
            if force or (dirty and dirty >= self.min_cleanable_dirty_ratio * total):
                new_closed = compact_segments(
                    self.path,
                    closed,
                    now_ms=now_ms,
                    tombstone_retention_ms=self.tombstone_retention_ms,
                    segment_bytes=self.segment_bytes,
                    batch_bytes=self.batch_bytes,
                    sync=self.fsync,
                    result=result,
                )
                with self._state_lock:
                    self._segments = new_closed + self._segments[len(closed) :]
                self._meta = dict(self._meta, cleaned_end=closed[-1].end_offset)
                write_meta(self.path, self._meta, sync=self.fsync)
        return result

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Abort any open transaction, close every iterator, release the lock. Idempotent."""
        if self._closed:
            return
        try:
            if not self.readonly and self._broken is None and self.in_transaction:
                self.abort()
        finally:
            self._closed = True
            for it in list(self._iterators):
                it.close()
            self._release()

    def _release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> FileChangelog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self._release()  # the open transaction is lost, as in a crash
            warnings.warn(
                f"unclosed FileChangelog {self.path!r}: close it, or use it in a 'with' block",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )

    def __repr__(self) -> str:
        if self._closed:
            return f"FileChangelog({self.path!r}, closed)"
        return (
            f"FileChangelog({self.path!r}, policy={self.cleanup_policy.value!r}, "
            f"segments={len(self._segments)}, committed_end={self._committed_end})"
        )

    def _check(self) -> None:
        """Assert every internal invariant against the files (for tests)."""
        files = [p for _, p in segment_files(self.path)]
        assert files == [s.path for s in self._segments], (files, self._segments)
        for a, b in pairwise(self._segments):
            assert b.base == a.end_offset, (a, b)
        for s in self._segments[:-1]:
            assert os.stat(s.path).st_size == s.size, s
        if self._segments:
            last = self._segments[-1]
            assert last.end_offset == self._committed_end
            if not self.readonly:
                assert os.fstat(self._fd).st_size == self._written_pos
                assert self._committed_pos == last.size <= self._written_pos
        buffered = len(self._keys)
        assert self._next >= self._committed_end + buffered
        if not self.in_transaction:
            assert self._written_pos == self._committed_pos and not buffered


#: What a crash while a changelog directory is being created can leave in it.
_CREATION_FILES = (LOCK_FILE, META_FILE + ".tmp")


def interrupted_creation(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` is a changelog whose creation was interrupted: no
    ``changelog.json`` and nothing but what creating one writes first (the lock file, a
    temporary metadata file). A writer's open completes it; a reader reads it as a changelog
    with nothing committed. O(1): one listing."""
    if os.path.exists(os.path.join(path, META_FILE)):
        return False
    return all(n in _CREATION_FILES for n in os.listdir(path))


def _ino(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
