"""Deterministic fault injection: stop a process exactly at a named point.

The engine, the changelog and the task lifecycle call :func:`point` at each step where a crash
leaves a distinct state on disk. Points are off by default: a disarmed :func:`point` costs one
dict lookup. Tests and the crash harness arm them, either in-process with :func:`arm` or, for a
child process, through the environment variable ``TXSTORE_FAULTS``::

    TXSTORE_FAULTS="task.after_changelog_commit=3"        # SIGKILL at the 3rd time it is reached
    TXSTORE_FAULTS="overlay.spill=1,task.restore_batch=2"  # several points

The action is ``SIGKILL`` of the current process (a real crash: no ``finally`` blocks, no
``atexit``, no flushing of Python buffers). In-process, :func:`arm` can instead raise
:class:`InjectedFault`, for tests of the error paths.

Named points (see ``docs/recovery.md`` for what a crash at each leaves behind):

=====================================  ==========================================================
``task.before_changelog_commit``        writes appended to the changelog, nothing committed
``changelog.after_append``              records written to the changelog file, no marker yet
``task.between_changelog_commits``      one store's changelog committed, another's not yet
``task.after_changelog_commit``         changelogs committed, stores not yet
``partition.mid_commit``                inside the LMDB write transaction of a store commit
``task.after_store_commit``             everything committed
``overlay.spill``                       while an overlay spills to the spill environment
``task.restore_batch``                  after a restore batch committed (or a sorted run written)
``segments.drop``                       while a window/session store stages a segment drop
=====================================  ==========================================================
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Final, Literal

from txstore.errors import InvalidArgumentError, TxStoreError

__all__ = ["POINTS", "InjectedFault", "arm", "disarm", "hits", "point"]

POINTS: Final = frozenset(
    {
        "task.before_changelog_commit",
        "changelog.after_append",
        "task.between_changelog_commits",
        "task.after_changelog_commit",
        "partition.mid_commit",
        "task.after_store_commit",
        "overlay.spill",
        "task.restore_batch",
        "segments.drop",
    }
)

Action = Literal["kill", "raise"]


class InjectedFault(TxStoreError):
    """Raised at an armed fault point whose action is ``"raise"``."""


_lock = threading.Lock()
_armed: dict[str, tuple[int, Action]] = {}
_hits: dict[str, int] = {}


def _parse_env(spec: str) -> None:
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, nth = item.partition("=")
        arm(name.strip(), int(nth) if nth.strip() else 1)


def arm(name: str, nth: int = 1, action: Action = "kill") -> None:
    """Crash (or raise) the ``nth`` time point ``name`` is reached from now on."""
    if name not in POINTS:
        raise InvalidArgumentError(f"unknown fault point {name!r}; known: {sorted(POINTS)}")
    if nth < 1:
        raise InvalidArgumentError(f"nth must be >= 1, got {nth}")
    if action not in ("kill", "raise"):
        raise InvalidArgumentError(f"action must be 'kill' or 'raise', got {action!r}")
    with _lock:
        _armed[name] = (_hits.get(name, 0) + nth, action)


def disarm(name: str | None = None) -> None:
    """Disarm one point, or every point (``None``)."""
    with _lock:
        if name is None:
            _armed.clear()
        else:
            _armed.pop(name, None)


def hits(name: str) -> int:
    """How many times point ``name`` was reached while armed, in this process."""
    return _hits.get(name, 0)


def point(name: str) -> None:
    """Mark fault point ``name``: crash here if it is armed for this occurrence."""
    if not _armed:
        return
    with _lock:
        entry = _armed.get(name)
        if entry is None:
            return
        count = _hits.get(name, 0) + 1
        _hits[name] = count
        if count < entry[0]:
            return
        del _armed[name]
    if entry[1] == "raise":
        raise InjectedFault(f"injected fault at {name}")
    os.kill(os.getpid(), signal.SIGKILL)


_env = os.environ.get("TXSTORE_FAULTS")
if _env:
    _parse_env(_env)
