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

**Cost on a clean partition** (every store at its changelog's last commit, the usual case): for
each changelog directory, one directory listing and a few small reads at the end of its last
segment file (the commit marker that ends it, through its trailer). Only when a store lags, or a
changelog does not end with a marker (a writer in the middle of a transaction), are the
changelogs loaded and the recovery planned as a task would (:func:`plan_recovery`), read-only.

**What the reader refuses** is what the writer's recovery refuses, with the same typed errors:
:class:`~txstore.errors.ChangelogCorruptionError` for damaged committed changelog data,
:class:`~txstore.errors.TaskCorruptedError` for changelogs that contradict each other or a store
ahead of its changelog. An interrupted first creation of a changelog (a directory without
``changelog.json`` and nothing else of a changelog in it) reads as a store with nothing
committed yet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from txstore import codecs
from txstore.changelog.coordination import RecoveryPlan, plan_recovery, read_commit_metadata
from txstore.changelog.log import FileChangelog, interrupted_creation
from txstore.changelog.markers import read_last_marker
from txstore.changelog.segments import open_fd, segment_files
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase
from txstore.engine.lmdb_env import DEFAULT_MAX_DBS
from txstore.engine.partition import Partition
from txstore.engine.replayed import ReplayedPartition
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


@dataclass
class CommittedState:
    """What a partition's changelogs say was committed: ``input_position`` of the last
    complete task commit (None: no task commit, or no changelogs), and per store whose files
    lag it, the changelog range ``[start, end)`` to replay (``tails``)."""

    input_position: int | None = None
    tails: dict[str, tuple[int, int]] = field(default_factory=dict)


def _changelog_names(path: str) -> list[str]:
    """The store names of the changelog directories of partition directory ``path``."""
    try:
        with os.scandir(os.path.join(path, "changelog")) as entries:
            return sorted(e.name for e in entries if e.is_dir())
    except FileNotFoundError:
        return []


def _last_marker(log_dir: str) -> tuple[int, int, int] | None:
    """``(end offset, task commit sequence, input position)`` of the commit marker that ends
    the last segment of ``log_dir``; None if it does not end with one (or has none)."""
    files = segment_files(log_dir)
    if not files:
        return None
    try:
        fd = open_fd(files[-1][1])
    except FileNotFoundError:  # rolled or compacted away just now: take the slow path
        return None
    try:
        marker = read_last_marker(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    if marker is None:
        return None
    return marker.end_offset, read_commit_metadata(marker.metadata)[0], marker.input_position


def committed_state(partition: PartitionBase) -> CommittedState:
    """The committed state of ``partition``'s changelogs against its stores (see the module
    docstring for the cost). Reads only. Raises what a task's recovery would raise."""
    path = str(partition.path)
    names = _changelog_names(path)
    if not names:
        return CommittedState()
    stores = set(partition.store_names())
    offsets = partition.committed_offsets([n for n in names if n in stores])
    seqs: set[int] = set()
    position: int | None = None
    for name in names:
        last = _last_marker(os.path.join(path, "changelog", name))
        if last is None or (name in offsets and offsets[name] != last[0]):
            break
        seqs.add(last[1])
        position = last[2]
    else:
        # Every changelog ends with the same task commit, which every store holds: it is
        # complete and nothing lags (else a changelog lacks it, or a store: plan as a task).
        if len(seqs) == 1:
            return CommittedState(position if seqs != {0} else None)
    dirs = [Path(path, "changelog", n) for n in names]
    return _plan(partition, [d for d in dirs if not interrupted_creation(d)], stores)


def _plan(partition: PartitionBase, dirs: list[Path], stores: set[str]) -> CommittedState:
    logs: dict[str, FileChangelog] = {}
    try:
        for d in dirs:
            logs[d.name] = FileChangelog(d, readonly=True)
        offsets = {n: partition.committed_offset(n) for n in logs if n in stores}
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


def replay_tail(partition: ReplayedPartition, tails: Mapping[str, tuple[int, int]]) -> None:
    """Replay each store's changelog range ``[start, end)`` of ``tails`` into ``partition``'s
    in-memory view, through the bytes store and record converter of the store's recorded
    format, as :meth:`~txstore.runtime.task.Task.initialize` restores it. O(records)."""
    partition.begin_replay()
    try:
        for name, (start, end) in sorted(tails.items()):
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
    raw: object, kind: str, fmt: ValueFormat, log: FileChangelog, start: int, end: int
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
            raw.put_all(pairs)  # type: ignore[attr-defined]
        else:
            raw.restore(pairs)  # type: ignore[attr-defined]
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
    try:
        state = committed_state(part)
        if not state.tails:
            return part, state
        replayed = ReplayedPartition(part)
    except BaseException:
        part.close()
        raise
    try:
        replay_tail(replayed, state.tails)
    except BaseException:
        replayed.close()
        raise
    return replayed, state
