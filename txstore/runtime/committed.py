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
the commit marker that ends it, found through its trailer. That changelog is loaded only when it
does not end with a marker (a writer in the middle of a transaction); the changelogs of lagging
stores are read from the stores' offsets to the commit's ends.

**Next to a live writer** the files move while they are read. A task commits its changelogs in
store-name order and its stores after them, so the reader reads the store offsets first and
then the last commit of the changelog committed last: a commit that one holds is complete, and
its marker records where every participant's records end. Whatever the writer does meanwhile
(commit on, die, restart and restore), the reader serves a complete commit, never less than a
reader before it served. Only a partition whose last commit does not name every changelog
(stores opened in some task runs only, markers from before the ends were recorded) is planned
as a task's recovery plans it, with no writer alive and the writer lock held shared
(:func:`~txstore.engine.partition.writer_probe`); next to a live writer it is served from its
files as they are, without an input position.

**What the reader refuses**, before reading anything, with the typed errors of a task's recovery:
:class:`~txstore.errors.ChangelogCorruptionError` for damaged committed changelog data,
:class:`~txstore.errors.TaskCorruptedError` for a store ahead of its changelog, a changelog
that lacks records the last complete commit holds, or changelogs that contradict each other.
An interrupted first creation of a changelog (a directory without ``changelog.json`` and
nothing else of a changelog in it) reads as a store with nothing committed yet.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from txstore import codecs
from txstore.changelog.coordination import (
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
from txstore.runtime.task_support import check_not_ahead
from txstore.stores.assembly import bytes_store

__all__ = [
    "CommittedState",
    "committed_state",
    "open_committed",
    "open_served",
    "replay_tail",
]

#: Records converted and staged per replay step (as a task's restore batches).
REPLAY_BATCH = 100_000


@dataclass
class CommittedState:
    """What a partition's changelogs say was committed: ``input_position`` of the last
    complete task commit (None: no task commit, or no changelogs), and per store whose files
    lag it, the changelog range ``[start, end)`` to replay (``tails``; start -1: from the
    changelog's start, the store never committed)."""

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


def _last_commit(log_dir: str) -> tuple[bytes, int | None] | None:
    """``(marker metadata, input position)`` of the last commit of the changelog in
    ``log_dir``: the marker that ends its last segment (a few small reads), else (a
    transaction in progress after it, a new segment) the changelog loaded read-only. None for
    an interrupted creation."""
    marker = _last_marker(log_dir)
    if marker is not None:
        return marker.metadata, marker.input_position
    if interrupted_creation(log_dir):
        return None
    with FileChangelog(log_dir, readonly=True) as log:
        return log.last_committed_metadata, log.last_committed_input_position


def committed_state(
    partition: PartitionBase, on_lag: Callable[[CommittedState], None] | None = None
) -> CommittedState:
    """The committed state of ``partition``'s changelogs against its stores (see the module
    docstring for the cost). Reads only; ``on_lag`` is called with the state when a store
    lags (to replay it). Raises what a task's recovery would raise.

    A task commits its changelogs in store-name order, then its stores. So the store offsets
    are read first, then the last commit of the changelog committed last: when that commit
    names every changelog as a participant, every one of them holds it (it is complete), and
    its marker records where each participant's records end. A store below that end lags; the
    writer may be dead or alive and committing, the answer is a committed state either way.
    Otherwise (stores outside the last commit, markers without ends) the changelogs are
    planned as a task's recovery plans them, only with no writer alive, holding the writer
    lock shared meanwhile; next to a live writer the files are served as they are."""
    path = str(partition.path)
    names = _changelog_names(path)
    if not names:
        return CommittedState()
    stores = set(partition.store_names())
    offsets = partition.committed_offsets([n for n in names if n in stores])
    last = _last_commit(os.path.join(path, "changelog", names[-1]))
    if last is not None:
        seq, participants = read_commit_metadata(last[0])
        ends = read_commit_ends(last[0])
        if seq and participants == names and all(n in ends for n in offsets):
            state = CommittedState(last[1])
            for name, committed in offsets.items():
                end = ends[name]
                check_not_ahead(name, committed, os.path.join(path, "changelog", name), end)
                if (committed or 0) < end:
                    state.tails[name] = (-1 if committed is None else committed, end)
                    state.bases[name] = committed
            if state.tails and on_lag is not None:
                on_lag(state)
            return state
    with writer_probe(path) as alive:
        if alive:
            return CommittedState()
        dirs = [Path(path, "changelog", n) for n in names]
        state = _plan(partition, [d for d in dirs if not interrupted_creation(d)], stores)
        if state.tails and on_lag is not None:
            on_lag(state)
        return state


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
            if (committed or 0) < end:
                state.tails[name] = (-1 if committed is None else committed, end)
                state.bases[name] = committed
        return state
    finally:
        for log in logs.values():
            log.close()


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
                    if log.committed_end_offset < end:
                        raise TaskCorruptedError(
                            f"the changelog of store {name!r} ({log.path!r}) ends at offset "
                            f"{log.committed_end_offset}, but the last complete task commit "
                            f"holds its records up to {end}: the changelog lost committed "
                            "data (damaged, truncated or deleted files); nothing was read. "
                            "Restore that changelog from a copy"
                        )
                    first = log.log_start_offset if start < 0 else start
                    _replay_one(raw, meta["kind"], fmt, log, first, end)
                partition.commit_stores({name: end})
            finally:
                raw.close()
    finally:
        partition.end_replay()


def _replay_one(
    raw: Any, kind: str, fmt: ValueFormat, log: FileChangelog, start: int, end: int
) -> None:
    """Stage the records ``[start, end)`` of ``log`` into ``raw`` through the record converter
    of ``fmt``. Not :func:`~txstore.runtime.task_support.restore_store`: a reader replays from
    the offset its state was computed from (a live writer may commit meanwhile), up to the last
    complete commit rather than the changelog's end, in one capture, with no fault point."""
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


def open_served(
    path: str | os.PathLike[str], *, verify: str | None = None, max_dbs: int | None = None
) -> Partition:
    """The partition :func:`open_committed` serves, typed as the
    :class:`~txstore.engine.partition.Partition` whose surface it offers (a
    :class:`~txstore.engine.replayed.ReplayedPartition` delegates the rest): for readers that
    need no :class:`CommittedState`. The caller closes it."""
    served, _ = open_committed(path, verify=verify, max_dbs=max_dbs)
    return cast(Partition, served)
