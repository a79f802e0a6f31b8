"""Looking back at a file changelog's last commits, and undoing the last one.

A task commits several changelogs as one task commit; after a crash in the middle of it, the
changelogs that got ahead are rolled back to the common commit
(:meth:`CommitHistory.rollback_last_commit`). Deciding that safely needs the last few commits
of each changelog, their offsets and their metadata, before anything is changed
(:meth:`CommitHistory.recent_commits`).
"""

from __future__ import annotations

import os
import threading
from typing import NamedTuple

from txstore.changelog.api import CommitInfo
from txstore.changelog.format import T_MARKER, Frame, FrameReader, corruption
from txstore.changelog.markers import read_last_marker
from txstore.changelog.segments import LoadedLog, Segment, fsync_dir, load_segments, open_fd
from txstore.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["CommitHistory", "CommitRecord"]


class CommitRecord(NamedTuple):
    """One commit of a changelog: offsets ``[start_offset, end_offset)``, the input position
    and the metadata its marker carries."""

    start_offset: int
    end_offset: int
    input_position: int
    metadata: bytes


class CommitHistory:
    """The commit history part of ``FileChangelog`` (which sets the attributes declared here)."""

    path: str
    readonly: bool
    fsync: bool
    _fd: int
    _segments: list[Segment]
    _committed_end: int
    _committed_pos: int
    _last_position: int | None
    _state_lock: threading.Lock

    def _check_open(self) -> None:
        raise NotImplementedError

    def _check_writable(self) -> None:
        raise NotImplementedError

    def _load_readonly(self) -> None:
        raise NotImplementedError

    def _install(self, loaded: LoadedLog) -> None:
        raise NotImplementedError

    @property
    def meta_log_start(self) -> int | None:
        raise NotImplementedError

    def _open_active(self) -> None:
        raise NotImplementedError

    def _fail(self, exc: OSError) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def recent_commits(self, n: int = 1) -> list[CommitRecord]:
        """The last ``n`` commits still in the log, newest first (fewer if it holds fewer).

        A compacted segment holds one commit, as far as this can tell: its records and the
        last marker of the segments it replaced. O(n) reads for commits of the current format;
        older ones cost a scan of their segment each.
        """
        self._check_open()
        if isinstance(n, bool) or not isinstance(n, int):
            raise InvalidTypeError(f"n must be an int, got {type(n).__name__}")
        if n < 0:
            raise InvalidArgumentError(f"n must be >= 0, got {n}")
        if self.readonly:
            self._load_readonly()
        with self._state_lock:
            segments = list(self._segments)
            active_fd = os.dup(self._fd) if self._fd >= 0 and segments else -1
        out: list[CommitRecord] = []
        try:
            for i in range(len(segments) - 1, -1, -1):
                if len(out) >= n:
                    break
                if active_fd >= 0:  # the last segment, read through the writer's file
                    fd, active_fd = active_fd, -1
                else:
                    fd = open_fd(segments[i].path)
                try:
                    out.extend(_segment_commits(fd, segments[i], n - len(out)))
                finally:
                    os.close(fd)
        finally:
            if active_fd >= 0:
                os.close(active_fd)
        return out

    def last_commit(self) -> CommitInfo | None:
        """The range ``[start, end)`` and input position of the last committed transaction
        (what :meth:`rollback_last_commit` would undo); None if nothing was ever committed."""
        last = self.recent_commits(1)
        if not last:
            return None
        return CommitInfo(last[0].start_offset, last[0].end_offset, last[0].input_position)

    def rollback_last_commit(self) -> CommitInfo:
        """Undo the last committed transaction: its records and marker are truncated away.

        For a coordinator that commits several changelogs as one transaction (a task) and
        crashed after committing some of them but not all: the ones that got ahead are rolled
        back to the common commit. Only the last transaction can be undone; the offsets it
        used are given to the next one. An open transaction is aborted first. Returns the
        undone range ``CommitInfo(start, end, input_position)``. O(1) for a commit of the
        current format, O(size of the last segment) for an older one.
        """
        self._check_writable()
        if not self._segments or self._last_position is None:
            raise InvalidArgumentError(f"changelog {self.path!r} has no commit to roll back")
        self.abort()
        undone = CommitInfo(-1, self._committed_end, self._last_position)
        seg = self._segments[-1]
        try:
            cut = _previous_commit_end(self._fd, self._committed_pos)
            if cut is None:  # the transaction opened this segment: drop the whole file
                os.close(self._fd)
                self._fd = -1
                os.unlink(seg.path)
            else:
                os.ftruncate(self._fd, cut)
                if self.fsync:
                    os.fdatasync(self._fd)
            if self.fsync:
                fsync_dir(self.path)
            self._install(load_segments(self.path, repair=True, log_start=self.meta_log_start))
            self._open_active()
        except OSError as exc:
            self._fail(exc)
        return CommitInfo(self._committed_end, undone.end_offset, undone.input_position)


def _segment_commits(fd: int, seg: Segment, n: int) -> list[CommitRecord]:
    """Up to ``n`` commits of the segment ``seg`` (its first ``seg.size`` bytes, which end with
    a commit), newest first."""
    out: list[CommitRecord] = []
    pos = seg.size
    while pos > 0 and len(out) < n:
        m = read_last_marker(fd, pos)
        if m is None:
            raise corruption(seg.path, pos, None, "no commit marker ends where a commit should")
        if m.version != 1:
            prev, start = m.txn_start_pos, m.start_offset
        else:
            prev = _previous_commit_end(fd, pos) or 0
            before = read_last_marker(fd, prev) if prev else None
            start = seg.base if before is None else before.end_offset
        out.append(CommitRecord(start, m.end_offset, m.input_position, m.metadata))
        pos = prev
    return out


def _previous_commit_end(fd: int, size: int) -> int | None:
    """Where the last commit of a segment of ``size`` bytes (which ends with a commit) starts:
    the end of the commit before it; None if the segment holds only one commit."""
    m = read_last_marker(fd, size)
    if m is not None and m.version != 1:
        return m.txn_start_pos or None
    # a version 1 marker has no position in it: look for the marker before it
    reader = FrameReader(fd, 0, size)
    ends: list[int] = []
    while True:
        frame = reader.next()
        if not isinstance(frame, Frame):
            break
        if frame.ftype == T_MARKER:
            ends.append(frame.end)
    return ends[-2] if len(ends) >= 2 else None
