"""Read-only opens that serve what was committed: the changelog tail a dead writer left.

The commit point of a task is its changelogs (:mod:`txstore.runtime.task`): a task commit is
complete once every participating changelog holds its marker, and the stores are committed right
after. A writer killed in between leaves stores one commit behind; the next
:meth:`~txstore.runtime.task.Task.initialize` replays it. Readers follow the same rule without
waiting for a writer: :func:`open_committed` opens a partition read-only and, when a store lags
its changelog's last *complete* task commit, replays the missing records into the reader's own
in-memory view (:class:`~txstore.engine.replayed.ReplayedPartition`), through the same bytes
stores and record converters a task's restore uses. Nothing is written to the partition's files.

Every reader goes through it: ``txstore.open(path, readonly=True)``, snapshots, the catalog
readers of the command line and of Spark, interactive queries.

**Cost on a clean partition** (every store at its changelog's last commit, the usual case): the
store names and offsets (two short read transactions), one listing of the changelog directory
and of the changelog committed last, and a few small reads at the end of its last segment file:
the commit marker that ends it, found through its trailer, names every participant of the last
task commit and where each one's records end. Only when a store lags, or a
changelog does not end with a marker (a writer in the middle of a transaction), are the
changelogs loaded and the recovery planned as a task would (:func:`plan_recovery`), read-only.

**Next to a live writer** the files move while they are read. A store lags only for the few
milliseconds between the writer's changelog and store commits, so the reader looks again for up
to :data:`LIVE_WAIT_S`; past that it serves the files as they are (the writer's last store
commit: a committed state, at most one commit behind) without an input position. The changelogs
are planned and replayed only when no writer is alive, with the writer lock held shared
(:func:`~txstore.engine.partition.writer_probe`) so that none can start meanwhile: a dead writer
is the case that otherwise serves a stale state forever.

**What the reader refuses** is what the writer's recovery refuses, with the same typed errors:
:class:`~txstore.errors.ChangelogCorruptionError` for damaged committed changelog data,
:class:`~txstore.errors.TaskCorruptedError` for changelogs that contradict each other or a store
ahead of its changelog. An interrupted first creation of a changelog (a directory without
``changelog.json`` and nothing else of a changelog in it) reads as a store with nothing
committed yet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txstore import codecs
from txstore.changelog.coordination import (
    RecoveryPlan,
    plan_recovery,
    read_commit_ends,
    read_commit_metadata,
)
from txstore.changelog.log import FileChangelog, interrupted_creation
from txstore.changelog.markers import Marker, read_last_marker
from txstore.changelog.segments import open_fd, segment_files
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase
from txstore.engine.lmdb_env import DEFAULT_MAX_DBS
from txstore.engine.partition import Partition
from txstore.engine.replayed import ReplayedPartition
from txstore.engine.writer_lock import writer_probe
from txstore.errors import TaskCorruptedError
from txstore.runtime.catalog import stored_format
from txstore.stores.assembly import bytes_store

__all__ = [
    "CommittedState",
    "check_not_ahead",
    "committed_state",
    "open_committed",
    "replay_tail",
]

#: Records converted and staged per replay step (as a task's restore batches).
REPLAY_BATCH = 100_000
#: How long a reader next to a live writer waits for the files to show a finished commit.
LIVE_WAIT_S = 0.1


@dataclass
class CommittedState:
    """What a partition's changelogs say was committed: ``input_position`` of the last
    complete task commit (None: no task commit, or no changelogs), and per store whose files
    lag it, the changelog range ``[start, end)`` to replay (``tails``)."""

    input_position: int | None = None
    tails: dict[str, tuple[int, int]] = field(default_factory=dict)
    bases: dict[str, int | None] = field(default_factory=dict)
    """The committed offset on disk each tail was computed from (None: never committed)."""


def _changelog_names(path: str) -> list[str]:
    """The store names of the changelog directories of partition directory ``path``."""
    try:
        with os.scandir(os.path.join(path, "changelog")) as entries:
            return sorted(e.name for e in entries if e.is_dir())
    except FileNotFoundError:
        return []


def _last_marker(log_dir: str) -> Marker | None:
    """The commit marker that ends the last segment of ``log_dir`` (None: it does not end
    with one, or has no segment)."""
    files = segment_files(log_dir)
    if not files:
        return None
    try:
        fd = open_fd(files[-1][1])
    except FileNotFoundError:  # rolled or compacted away just now: take the slow path
        return None
    try:
        return read_last_marker(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _fast_state(
    partition: PartitionBase, names: list[str], stores: set[str]
) -> CommittedState | None:
    """The state of a partition none of whose stores lags, from one commit marker: the one
    ending the changelog committed last (a task commits its changelogs in store-name order, so
    that one holding task commit N means every participant holds it) names every changelog as
    a participant, and every store is at the end its marker records for it. The store offsets
    are read first (a writer commits its changelogs before its stores). None when the files do
    not show that (a lag, a writer in mid-commit, stores outside the last commit)."""
    offsets = partition.committed_offsets([n for n in names if n in stores])
    marker = _last_marker(os.path.join(str(partition.path), "changelog", names[-1]))
    if marker is None:
        return None
    seq, participants = read_commit_metadata(marker.metadata)
    ends = read_commit_ends(marker.metadata)
    if not seq or participants != names or any(offsets[n] != ends.get(n) for n in offsets):
        return None
    return CommittedState(marker.input_position)


def committed_state(
    partition: PartitionBase, on_lag: Callable[[CommittedState], None] | None = None
) -> CommittedState:
    """The committed state of ``partition``'s changelogs against its stores (see the module
    docstring for the cost). Reads only. Raises what a task's recovery would raise.

    A live writer's changelogs and stores move while they are read: the check is taken again
    for up to :data:`LIVE_WAIT_S` (a writer's store commit follows its changelog commit within
    milliseconds); if the files still do not show a finished commit, they are what the reader
    serves (the writer's last store commit: a committed state, at most one commit behind) and
    the input position is not told (None). Only with no writer alive are the changelogs
    planned, while the writer lock is held shared so that no writer can start meanwhile;
    ``on_lag`` is then called with the state, still under that lock, if a store lags."""
    path = str(partition.path)
    names = _changelog_names(path)
    if not names:
        return CommittedState()
    stores = set(partition.store_names())
    deadline = time.monotonic() + LIVE_WAIT_S
    while True:
        fast = _fast_state(partition, names, stores)
        if fast is not None:
            return fast
        with writer_probe(path) as alive:
            if not alive:
                dirs = [Path(path, "changelog", n) for n in names]
                state = _plan(partition, [d for d in dirs if not interrupted_creation(d)], stores)
                if state.tails and on_lag is not None:
                    on_lag(state)
                return state
        if time.monotonic() >= deadline:
            return CommittedState()
        time.sleep(0.002)


def _plan(partition: PartitionBase, dirs: list[Path], stores: set[str]) -> CommittedState:
    logs: dict[str, FileChangelog] = {}
    # A live writer commits the changelogs in store-name order, then the stores: so the store
    # offsets are read first, and the changelogs last to first. Then whatever the writer did
    # meanwhile, this is a state a crash could leave (a commit seen in a changelog is in those
    # before it; a store never ahead of what its changelog shows).
    offsets = partition.committed_offsets([d.name for d in dirs if d.name in stores])
    try:
        for d in reversed(dirs):
            logs[d.name] = FileChangelog(d, readonly=True)
        for name, committed in offsets.items():  # the checks of a task's recovery, in order
            check_not_ahead(name, committed, logs[name].path, logs[name].committed_end_offset)
        plan = plan_recovery(logs)
        state = CommittedState(plan.input_position)
        for name, committed in offsets.items():
            log, end = logs[name], plan.ends[name]
            check_not_ahead(name, committed, log.path, end, plan)
            start = log.log_start_offset if committed is None else committed
            if start < end:
                state.tails[name] = (start, end)
                state.bases[name] = committed
        return state
    finally:
        for log in logs.values():
            log.close()


def check_not_ahead(
    name: str, committed: int | None, log_path: str, end: int, plan: RecoveryPlan | None = None
) -> None:
    """Raise :class:`~txstore.errors.TaskCorruptedError` if store ``name``, committed at
    changelog offset ``committed``, is past ``end``: its changelog's end, or where the recovery
    ``plan`` leaves it. The one check (and message) of a task's recovery and of readers."""
    if committed is None or committed <= end:
        return
    if plan is None:
        raise TaskCorruptedError(
            f"store {name!r} is at changelog offset {committed} but its changelog "
            f"{log_path!r} ends at {end}: the changelog lost committed data; wipe the store "
            "and restore it from the changelog, or restore the changelog; nothing was changed"
        )
    raise TaskCorruptedError(
        f"task commit {plan.incomplete} is missing from the changelogs of {plan.lacking}, but "
        f"store {name!r} committed it (it is at changelog offset {committed}; undoing the "
        f"commit would end its changelog {log_path!r} at {end}): the commit was complete, so "
        f"the changelogs of {plan.lacking} lost committed data. Restore them, or wipe their "
        "stores and restore them; nothing was changed"
    )


def replay_tail(partition: ReplayedPartition, state: CommittedState) -> None:
    """Replay each store's changelog range ``[start, end)`` of ``state.tails`` into
    ``partition``'s in-memory view, through the bytes store and record converter of the store's
    recorded format, as :meth:`~txstore.runtime.task.Task.initialize` restores it; each tail
    applies while the store's offset on disk is still its ``state.bases`` one. O(records)."""
    partition.begin_replay()
    try:
        for name, (start, end) in sorted(state.tails.items()):
            partition.replay_base(name, state.bases.get(name))
            meta = partition.store_meta(name)
            assert meta is not None
            fmt = stored_format(meta)
            raw = bytes_store(partition, name, dict(meta), fmt=fmt)
            log_dir = Path(str(partition.path)) / "changelog" / name
            try:
                with FileChangelog(log_dir, readonly=True) as log:
                    _replay_one(raw, meta["kind"], fmt, log, start, end)
                partition.commit_stores({name: end})
            finally:
                raw.close()
    finally:
        partition.end_replay()


def _replay_one(
    raw: Any, kind: str, fmt: ValueFormat, log: FileChangelog, start: int, end: int
) -> None:
    keys: list[bytes] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[bytes] = []

    def flush() -> None:
        stored = (
            values
            if fmt == ValueFormat.PLAIN
            else codecs.records_to_values(fmt, values, stamps, headers)
        )
        pairs = list(zip(keys, stored, strict=True))
        if kind == "key_value":
            raw.put_all(pairs)
        else:
            raw.restore(pairs)
        for column in (keys, values, stamps, headers):
            column.clear()

    with log.read_committed_batches(start) as batches:
        for batch in batches:
            n = sum(1 for o in batch.offsets if o < end)
            keys.extend(batch.keys[:n])
            values.extend(batch.values[:n])
            stamps.extend(batch.timestamps[:n])
            headers.extend(batch.headers[:n])
            if len(keys) >= REPLAY_BATCH:
                flush()
            if n < len(batch.offsets):
                break
    if keys:
        flush()


def open_committed(
    path: str | os.PathLike[str],
    *,
    verify: str | None = None,
    max_dbs: int | None = None,
) -> tuple[PartitionBase, CommittedState]:
    """Open the partition directory ``path`` read-only, serving its committed state (see the
    module docstring): the :class:`~txstore.engine.partition.Partition` itself when no store
    lags its changelog, else a :class:`~txstore.engine.replayed.ReplayedPartition` over it with
    the missing records replayed. Returns the partition and what the changelogs say.

    Raises what ``Partition(path, readonly=True)`` raises, and what a task's recovery would
    for damaged or contradicting changelogs (nothing is written either way)."""
    part = Partition(
        path, readonly=True, verify=verify, max_dbs=DEFAULT_MAX_DBS if max_dbs is None else max_dbs
    )
    served: list[PartitionBase] = [part]

    def replay(state: CommittedState) -> None:
        replayed = ReplayedPartition(part)
        served[0] = replayed
        replay_tail(replayed, state)

    try:
        state = committed_state(part, replay)
    except BaseException:
        served[0].close()
        raise
    return served[0], state
