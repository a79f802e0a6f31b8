"""Recovery time versus the wipe, at growing state sizes.

Kafka Streams under exactly-once without transactional stores (before KIP-892) cannot trust
a store after an unclean shutdown: it wipes the state directory and restores the store by
replaying its whole changelog, so the time to come back grows with the state. txstore only
discards what was uncommitted and replays what the store missed.

For each size ``N`` the measurement (each step a separate process):

1. **build**: a task with one timestamped key-value store with headers, ``N`` distinct keys
   (values of about 100 bytes), committed every 50,000 records, changelog compacted;
2. **crash**: a writer updates ``tail`` keys and is ``SIGKILL``-ed at
   ``task.after_changelog_commit``: the changelog holds the commit, the store does not (the
   worst case for txstore: it must replay that commit). The crashed directory is copied;
   every measurement starts from an identical copy of it;
3. **wipe**: a fresh process deletes the store's LMDB directory (as Kafka deletes the task's
   state directory) and initializes the task, which replays the whole changelog, timed;
4. **recover**: a fresh process opens the task and initializes it (recover + restore), timed.

Steps 3-4 repeat ``repeats`` times; the medians are reported. Both sides run with a warm page
cache (the files were just written or copied); on a cold cache the wipe also reads the whole
changelog from disk.

The steps are in :mod:`txstore.crashtest.wipe_steps`, the module each child process runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txstore.crashtest.procs import Child
from txstore.crashtest.report import WipeResult, size_label

__all__ = ["measure_recovery_vs_wipe"]


def _child(workdir: Path, op: str, path: Path, *args: str, faults: str = "") -> dict[str, Any]:
    child = Child(
        "txstore.crashtest.wipe_steps", [op, str(path), *args], workdir / "wipe.stderr", faults
    )
    rc = child.wait()
    events = child.drain()
    if op == "crash":
        if rc != -signal.SIGKILL:
            raise RuntimeError(f"wipe measurement: crash step exited {rc}:\n{child.stderr_tail()}")
        return {}
    if rc != 0 or not events:
        raise RuntimeError(f"wipe measurement: {op} step failed ({rc}):\n{child.stderr_tail()}")
    return events[-1]


def _reset(path: Path, saved: Path) -> None:
    """Put the crashed state back (not timed), flushed to disk: otherwise the first fsync of
    the measured step would write the whole copy."""
    shutil.rmtree(path)
    shutil.copytree(saved, path)
    _flush(path)


def _flush(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure_recovery_vs_wipe(
    sizes: list[int],
    workdir: Path,
    *,
    repeats: int = 3,
    tail: int = 1000,
    say: Callable[[str], None] | None = None,
) -> list[WipeResult]:
    """Measure recovery and wipe-and-replay at each size (see the module docstring)."""
    results = []
    for keys in sizes:
        path = workdir / f"wipe-{size_label(keys)}"
        saved = workdir / f"wipe-{size_label(keys)}.crashed"
        if say:
            say(f"recovery vs wipe: building {size_label(keys)} keys")
        _child(workdir, "build", path, str(keys))
        _child(workdir, "crash", path, str(tail), faults="task.after_changelog_commit=1")
        shutil.copytree(path, saved)  # every round starts from this very crash
        _flush(saved)
        changelog_bytes = _dir_bytes(path / "changelog")
        recover, wipe, rec_restored, wipe_restored = [], [], 0, 0
        for r in range(repeats):
            if say:
                say(f"recovery vs wipe: {size_label(keys)} keys, round {r + 1}/{repeats}")
            ev = _child(workdir, "wipe", path)
            wipe.append(float(ev["ms"]))
            wipe_restored = int(ev["restored"])
            _reset(path, saved)
            ev = _child(workdir, "recover", path)
            recover.append(float(ev["ms"]))
            rec_restored = int(ev["restored"])
            _reset(path, saved)
        results.append(
            WipeResult(
                keys,
                statistics.median(recover),
                statistics.median(wipe),
                rec_restored,
                wipe_restored,
                repeats,
                changelog_bytes,
            )
        )
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(saved, ignore_errors=True)
    return results
