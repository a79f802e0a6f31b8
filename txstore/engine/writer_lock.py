"""The writer lock of a partition directory: ``writer.lock``, ``flock``-ed exclusively by the one
process that has the partition open for writing, for its lifetime (the OS drops the lock when
that process dies, even by SIGKILL). Inspectors ask whether a writer is alive with
:func:`writer_probe`; :class:`~txstore.engine.partition.Partition` takes the lock with
:func:`lock_writer`.

Beside it, the clean-close marker ``closed-cleanly``: a writer removes it when it opens the
partition (:func:`take_clean_close`, before its first write) and creates it when it closes
normally (:func:`mark_clean_close`, after its environment is closed). So a partition without
the marker was last written by a process that died (SIGKILL, power loss) or by a version
before the marker, and its next opener walks the LMDB pages
(:func:`~txstore.engine.lmdb_pages.walk_data_file`). Crash-safe by order: a process that dies
at any point before the marker exists leaves none. Cost of a clean open: one ``unlink`` and,
with ``sync``, one ``fsync`` of the directory (so the removal outlives a power loss).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Final

from txstore.errors import StorageError, WriterLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CLEAN_CLOSE",
    "INSPECTOR_WAIT_S",
    "WRITER_LOCK",
    "closed_cleanly",
    "hold_out_writers",
    "lock_writer",
    "mark_clean_close",
    "take_clean_close",
    "writer_probe",
]

WRITER_LOCK: Final = "writer.lock"
"""The file of a partition directory its writer ``flock``s exclusively for its lifetime."""
CLEAN_CLOSE: Final = "closed-cleanly"
"""The marker file of a partition directory whose last writer closed it normally (see the
module docstring)."""
INSPECTOR_WAIT_S: Final = 5.0
"""How long an opening writer waits while ``writer.lock`` is held *shared*, by inspectors
(:func:`writer_probe`, each for a moment). An exclusive holder (another writer) fails it at
once."""


@contextlib.contextmanager
def writer_probe(path: str | os.PathLike[str]) -> Iterator[bool | None]:
    """Whether a process has the partition directory ``path`` open for writing; for inspectors
    that may run next to a live writer (``txstore check``).

    Yields True if one has: its exclusive ``flock`` of ``writer.lock`` is held, and the OS
    releases that lock when the process dies, even by SIGKILL. Yields False if none has; then
    none can open it until the ``with`` block ends (the probe holds the lock shared and an
    opening writer waits for it, up to :data:`INSPECTOR_WAIT_S`), so whatever the block finds
    in the directory was left by writers that are gone. Keep the block short. Yields None when
    this cannot be told (no ``flock``: Windows, some network filesystems). Never creates the
    lock file: without one, no writer ever opened the partition (False).
    """
    if fcntl is None:  # pragma: no cover - Windows
        yield None
        return
    try:
        fd = os.open(os.path.join(os.fspath(path), WRITER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield False
        return
    except OSError:
        yield None
        return
    try:
        alive: bool | None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            alive = False
        except BlockingIOError:
            alive = True
        except OSError:
            alive = None
        yield alive
    finally:
        os.close(fd)  # releases the shared lock


def hold_out_writers(path: str) -> int | None:
    """For a reader that cannot write the partition's ``lock.mdb`` (another user's state, a
    backup), which LMDB then opens without its lock table: hold ``writer.lock`` shared, so that
    no writer opens the partition while it reads (one that tries waits, then fails with
    :class:`~txstore.errors.WriterLockedError`). Returns the descriptor to close when done
    (None: no ``writer.lock``, no writer ever opened it; or no ``flock``). Raises
    :class:`~txstore.errors.StorageError` if a writer has it open now: a reader without the
    lock table would not be seen by it, and could read pages it reuses."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(os.path.join(path, WRITER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(
            f"partition {path!r}: its lock.mdb is not writable for this user and a writer has "
            "the partition open: LMDB needs a writable lock.mdb to read next to a writer. Read "
            "it as its owner, or a snapshot of it (txstore snapshot, as the owner)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def lock_writer(path: str) -> int | None:
    """Take the writer lock of the partition directory ``path`` for the caller's lifetime: the
    open descriptor of ``writer.lock`` (close it to release the lock), or None where there is
    no ``flock`` (Windows: LMDB's own writer lock only). Raises
    :class:`~txstore.errors.WriterLockedError` (an ``InvalidStateStoreError``) if another
    process holds it."""
    if fcntl is None:  # pragma: no cover - Windows: LMDB's own writer lock only
        return None
    fd = os.open(os.path.join(path, WRITER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock_exclusive(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock_exclusive(fd: int, path: str) -> None:
    """Take the writer lock on ``fd``, waiting out inspectors that hold it shared for a moment
    (:func:`writer_probe`); raise :class:`~txstore.errors.WriterLockedError` if another writer
    holds it (or inspectors keep it for more than :data:`INSPECTOR_WAIT_S`)."""
    deadline = time.monotonic() + INSPECTOR_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            held = exc
        # Held exclusively (another writer, for its lifetime) or shared (inspectors): a shared
        # request succeeds only in the second case.
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            raise WriterLockedError(
                f"partition {path!r} is open for writing by another process; open it with "
                "readonly=True, or stop that process"
            ) from held
        fcntl.flock(fd, fcntl.LOCK_UN)
        if time.monotonic() >= deadline:
            raise WriterLockedError(
                f"partition {path!r}: inspecting processes (txstore check) kept its "
                f"{WRITER_LOCK} locked for {INSPECTOR_WAIT_S:g} s; stop them and open it again"
            ) from held
        time.sleep(0.002)


def closed_cleanly(path: str) -> bool:
    """Whether the partition directory ``path`` holds the clean-close marker: its last writer
    closed it normally and no writer has opened it since. One ``stat``."""
    return os.path.isfile(os.path.join(path, CLEAN_CLOSE))


def take_clean_close(path: str, sync: bool) -> bool:
    """Remove the clean-close marker of ``path`` (the caller holds the writer lock and is
    about to write); whether it was there. With ``sync`` the directory is synced, so the
    removal is on disk before the first write."""
    try:
        os.unlink(os.path.join(path, CLEAN_CLOSE))
    except FileNotFoundError:
        return False
    if sync:
        _sync_dir(path)
    return True


def mark_clean_close(path: str) -> None:
    """Create the clean-close marker of ``path``: call after the writer's environment is
    closed, before its lock is released. Not synced: a marker lost to a power loss only costs
    the next opener a page walk."""
    fd = os.open(os.path.join(path, CLEAN_CLOSE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"the last writer of this partition closed it normally\n")
    finally:
        os.close(fd)


def _sync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - Windows cannot open a directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
