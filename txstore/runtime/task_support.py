"""What :class:`~txstore.runtime.task.Task` reports and the changelog it gives each store.

:class:`RestoreReport` and :class:`RestoreProgress` are what :meth:`Task.initialize` returns and
reports; :class:`TaskChangelog` is the :class:`~txstore.changelog.log.FileChangelog` of a task's
store, which refuses what would break the task's bookkeeping (a write before
:meth:`Task.initialize`, a commit that is not the task's); :func:`check_not_ahead` is the check
that a store did not commit past its changelog.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from txstore import codecs, faults
from txstore.bytestores.restore_runs import sorted_restore_applies
from txstore.bytestores.sequence import sequence_numbers
from txstore.changelog.coordination import RecoveryPlan, read_commit_metadata
from txstore.changelog.log import FileChangelog
from txstore.codecs import ValueFormat
from txstore.errors import (
    InvalidStateStoreError,
    TaskCorruptedError,
    UnsupportedOperationError,
)
from txstore.runtime.restore_frames import replay_frames
from txstore.runtime.restore_sorted import restore_sorted
from txstore.stores.assembly import StoreKind, StoreStack

__all__ = [
    "PartialCommit",
    "RestoreProgress",
    "RestoreReport",
    "StoreEntry",
    "StoreNames",
    "TaskChangelog",
    "check_not_ahead",
    "close_changelog",
    "has_uncommitted",
    "last_seq",
    "not_changelogged",
    "restore_store",
]


@dataclass(frozen=True)
class RestoreProgress:
    """Passed to the restore progress callback of :meth:`Task.initialize` after each batch."""

    store: str
    """The store being restored."""
    restored: int
    """Changelog records replayed into it so far (a sorted restore of an empty store: records
    sorted into runs so far, committed all at once after the last run; see
    :mod:`txstore.runtime.restore_sorted`)."""
    total: int
    """Changelog records it has to replay (from its committed offset to its changelog's end)."""


@dataclass
class RestoreReport:
    """What :meth:`Task.initialize` did: what it undid, what it discarded, what it replayed.

    >>> RestoreReport().unclean_shutdown
    False
    """

    rolled_back: dict[str, int] = field(default_factory=dict)
    """Per store: committed changelog records undone because the task commit that wrote them
    did not reach every changelog (a crash between two changelog commits)."""
    restored: dict[str, int] = field(default_factory=dict)
    """Per store opened: changelog records replayed into it (what it had not committed yet;
    every record for an in-memory store)."""
    discarded_uncommitted: bool = False
    """Whether uncommitted writes were discarded: the records a crashed writer had appended to
    a changelog after its last commit (see :attr:`discarded`), or a store's own uncommitted
    writes. Kafka's semantics: what was not committed is gone, and is processed again from
    :attr:`Task.input_position`."""
    discarded: dict[str, int] = field(default_factory=dict)
    """Per store: uncommitted changelog records cut from its changelog's tail (written after the
    last commit by a writer that did not commit them)."""
    unclean_shutdown: bool = False
    """Whether the last writer of the partition did not close it (it was killed, or crashed):
    the partition directory lacked its clean-close marker. Recovery repaired what it left."""
    seconds: float = 0.0
    """How long :meth:`Task.initialize` took."""
    rebuilt: list[str] = field(default_factory=list)
    """Stores rebuilt from their changelogs because an entry of theirs failed its checksum
    (:func:`~txstore.runtime.statedir.drop_damaged_stores`)."""


class TaskChangelog(FileChangelog):
    """The changelog of a task's store: a :class:`~txstore.changelog.log.FileChangelog` that
    refuses writes before the task is initialized (recovery would discard them) and a commit
    that is not a task commit (it would carry no task commit sequence number, so the next task
    would lose its input position and number its commits from 1 again).

    Read it as any changelog (:meth:`read_committed`, offsets, :meth:`verify`); commit through
    :meth:`Task.commit`, discard through :meth:`Task.abort`.
    """

    def __init__(self, path: Any, *, task_state: Callable[[], str], **options: Any) -> None:
        self._task_state = task_state
        self._task_committing = False
        super().__init__(path, **options)

    def check_append(self) -> None:
        """Raise :class:`~txstore.errors.InvalidStateStoreError` unless the task is running
        (called by the change-logging layer before a store write)."""
        state = self._task_state()
        if state != "running":
            raise InvalidStateStoreError(
                f"store {self.path.rsplit('/', 1)[-1]!r} of a task is written to before "
                f"task.initialize() (the task is {state}): initialize() recovers and restores "
                "the stores and would discard the write; nothing was written"
            )

    def commit(self, input_position: int, metadata: bytes = b"") -> Any:
        """A task commit (metadata with its sequence number); anything else raises
        :class:`~txstore.errors.UnsupportedOperationError` before writing: commit a task's
        changelogs with ``Task.commit(input_position)``."""
        if not read_commit_metadata(metadata)[0]:
            raise UnsupportedOperationError(
                f"changelog {self.path!r} belongs to a task: commit it with "
                "Task.commit(input_position), which commits every changelog of the task with "
                "its commit sequence number, then the stores; nothing was written"
            )
        return super().commit(input_position, metadata)


class StoreNames(list[str]):
    """A sorted list of store names that can also be called (``task.store_names()``, as
    ``Database.store_names()``) to get it: one spelling for both, the old one kept.

    >>> names = StoreNames(["a", "b"])
    >>> names == names() == ["a", "b"]
    True
    """

    def __call__(self) -> list[str]:
        return list(self)


@dataclass(frozen=True)
class StoreEntry:
    """A store of the task, as the lifecycle sees it: its layers under the typed store."""

    name: str
    kind: StoreKind
    format: ValueFormat
    raw: Any  # the bytes store, unlogged (restore writes here)
    log: FileChangelog

    @classmethod
    def of(cls, stack: StoreStack) -> StoreEntry:
        log = stack.changelog
        assert isinstance(log, FileChangelog), "a task's stores are opened with changelogs"
        return cls(stack.name, stack.kind, stack.stored_format, stack.unlogged_store, log)


@dataclass
class PartialCommit:
    """A task commit that failed after some changelogs committed it: its sequence number and
    input position, the stores taking part, the changelogs that hold it (``done``), and each
    changelog's end offset when it failed (more records since: processing went on)."""

    seq: int
    position: int
    names: list[str]
    done: set[str] = field(default_factory=set)
    ends: dict[str, int] = field(default_factory=dict)
    segments: dict[str, int] = field(default_factory=dict)  # as its markers record them


def has_uncommitted(stack: StoreStack) -> bool:
    """Whether the changelog of ``stack`` holds records not yet committed."""
    log = stack.changelog
    if not isinstance(log, FileChangelog) or log.closed:
        return False
    return bool(log.end_offset > log.committed_end_offset)


def close_changelog(stack: StoreStack, seq: int | None) -> None:
    """Close the changelog of the task's store ``stack``, closed on its own: its uncommitted
    records go as the store's staged writes did (a later task commit would otherwise make them
    durable in the changelog only, and the store would never replay them). ``seq``: the
    task's last complete commit while it runs (``None`` before); a later commit the changelog
    holds (one that failed part way) is rolled back, as :meth:`Task.abort` would."""
    log = stack.changelog
    if not isinstance(log, FileChangelog) or log.closed:
        return
    try:
        if seq is not None and last_seq(log) > seq:
            log.rollback_last_commit()
    finally:
        log.close()


def last_seq(log: FileChangelog) -> int:
    """The task commit sequence number of the changelog's last commit (0: none)."""
    return read_commit_metadata(log.last_committed_metadata)[0]


def check_not_ahead(
    name: str, committed: int | None, log_path: str, end: int, plan: RecoveryPlan | None = None
) -> None:
    """Raise :class:`~txstore.errors.TaskCorruptedError` if store ``name``, committed at
    changelog offset ``committed``, is past the offset ``end`` of its changelog in
    ``log_path`` (its end, or where the recovery ``plan`` would leave it); when the changelog
    holds nothing, the message does not advise wiping the store (it holds the only copy). The
    one check (and message) of a task's recovery and of readers
    (:mod:`txstore.runtime.committed`)."""
    if committed is None or committed <= end:
        return
    if plan is None and end == 0:
        raise TaskCorruptedError(
            f"store {name!r} is at changelog offset {committed} but its changelog "
            f"{log_path!r} holds no records: the changelog lost its data, and the store holds "
            "the only copy. Do not wipe the store: restore the changelog from a copy, or read "
            "the store with txstore.open(path, readonly=True); nothing was changed"
        )
    if plan is None:
        raise TaskCorruptedError(
            f"store {name!r} is at changelog offset {committed} but its changelog "
            f"{log_path!r} ends at {end}: the changelog lost committed data; restore the "
            "changelog from a copy, or (losing what only the store holds) wipe the store and "
            "restore it from the changelog; nothing was changed"
        )
    raise TaskCorruptedError(
        f"task commit {plan.incomplete} is missing from the changelogs of {plan.lacking}, but "
        f"store {name!r} committed it (it is at changelog offset {committed}; undoing the "
        f"commit would end its changelog {log_path!r} at {end}): the commit was complete, so "
        f"the changelogs of {plan.lacking} lost committed data. Restore them, or wipe their "
        "stores and restore them; nothing was changed"
    )


def not_changelogged(name: str, committed: int, where: str) -> str:
    """The message of :class:`~txstore.errors.StoreNotChangeloggedError`."""
    return (
        f"store {name!r} was committed at offset {committed} without a changelog (by "
        f"txstore.open, or its changelog {where!r} was deleted): a Task restores its stores "
        "from their changelogs, so it cannot take this store over. Keep opening this "
        "directory with txstore.open, or copy the store's records into a store of a new task "
        "directory. Do not wipe it: its data exists only in the store; nothing was changed"
    )


def restore_store(
    entry: StoreEntry,
    progress: Callable[[RestoreProgress], None] | None,
    batch_records: int,
    batch_bytes: int,
    memory_bytes: int,
) -> int:
    """Replay the committed changelog records store ``entry`` misses (from its committed
    offset to its changelog's committed end) into its bytes store, in batches of at most
    ``batch_records`` records or about ``batch_bytes``, each committed with its offset;
    returns how many. ``progress`` is called after each batch. A sorted restore
    (:mod:`txstore.runtime.restore_sorted`) keeps up to ``memory_bytes`` of its runs in
    memory."""
    log, raw = entry.log, entry.raw
    end = log.committed_end_offset
    check_not_ahead(entry.name, entry.raw.committed_offset, log.path, end)
    start = raw.committed_offset
    if start is None:
        start = log.log_start_offset
    total = end - start
    restored = 0
    if total == 0:
        return 0
    if entry.kind == "key_value" and total > batch_records and sorted_restore_applies(raw):

        def on_step(done: int, total: int) -> None:  # after each sorted run, and the commit
            faults.point("task.restore_batch")
            if progress is not None:
                progress(RestoreProgress(entry.name, done, total))

        return restore_sorted(entry, on_step, batch_records, batch_bytes, start, end, memory_bytes)
    if entry.kind == "key_value":  # the changelog read in place: no object per record

        def committed(restored: int) -> None:  # after each chunk's synced commit
            faults.point("task.restore_batch")
            if progress is not None:
                progress(RestoreProgress(entry.name, restored, total))

        restored = replay_frames(
            log.read_committed_frames(start),
            lambda frames, offset: raw.restore_frames(frames, entry.format, offset),
            end,
            (batch_records, batch_bytes),
            committed,
        )
        if raw.committed_offset != end:
            raw.commit(end)  # a compacted tail leaves a gap after the last record
        return restored
    # Window and session stores: the changelog decoded into columns, applied chunk by chunk.
    pending_bytes = 0
    offsets: list[int] = []
    keys: list[bytes] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[bytes] = []

    def flush(n: int) -> None:
        nonlocal restored, pending_bytes
        pending_bytes = 0
        stored = values[:n]
        if entry.format != ValueFormat.PLAIN:
            stored = codecs.records_to_values(entry.format, stored, stamps[:n], headers[:n])
        applied = raw.restore(list(zip(keys[:n], stored, strict=True)))
        numbers = sequence_numbers(raw)
        if numbers is not None:  # later puts continue after the replayed numbers
            numbers.restored(keys[n - 1 : n])
        if raw.in_memory:  # Kafka's in-memory stores count what restore drops
            raw.dropped_records += n - applied
        raw.commit(offsets[n - 1] + 1)
        restored += n
        for column in (offsets, keys, values, stamps, headers):
            del column[:n]
        faults.point("task.restore_batch")
        if progress is not None:
            progress(RestoreProgress(entry.name, restored, total))

    with log.read_committed_batches(start) as batches:
        for batch in batches:
            n = len(batch)
            if batch.offsets[0] >= end:
                break
            if batch.offsets[-1] >= end:  # a concurrent writer's later commit: stop at end
                n = sum(1 for o in batch.offsets if o < end)
            whole = n == len(batch)
            offsets.extend(batch.offsets if whole else batch.offsets[:n])
            keys.extend(batch.keys if whole else batch.keys[:n])
            values.extend(batch.values if whole else batch.values[:n])
            stamps.extend(batch.timestamps if whole else batch.timestamps[:n])
            headers.extend(batch.headers if whole else batch.headers[:n])
            pending_bytes += 128 * n
            if batch.nbytes is not None and whole:  # no pass over the items
                pending_bytes += batch.nbytes
            else:
                pending_bytes += sum(map(len, keys[-n:])) + sum(map(len, headers[-n:]))
                pending_bytes += sum(map(len, filter(None, values[-n:])))  # None: 0 B
            while len(keys) >= batch_records:
                flush(batch_records)
            if keys and pending_bytes >= batch_bytes:
                flush(len(keys))
    if keys:
        flush(len(keys))
    if raw.committed_offset != end:
        raw.commit(end)  # a compacted tail leaves a gap after the last record
    return restored
