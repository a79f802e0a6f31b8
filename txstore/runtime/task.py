"""Tasks: one partition directory, its stores, their changelogs and the input position.

A task is txstore's unit of exactly-once processing, as in Kafka Streams. Its lifecycle:

1. **open** the stores (:meth:`Task.key_value_store` and friends), each with its changelog;
2. :meth:`Task.initialize`: **recover** (discard whatever a crash left uncommitted, in the
   stores and in the changelogs) and **restore** (replay each store's changelog from the store's
   committed offset to the changelog's last commit, through the record converter of the store's
   format). Cost: proportional to what was not yet in the store, never to the store's size;
3. **process** input: set :attr:`Task.context` to the input record's timestamp and headers and
   write to the stores; every write goes to the store's overlay and to the open changelog
   transaction;
4. :meth:`Task.commit` ``(input_position)``: commit every changelog (commit marker carrying the
   input position, synced), then every store in one LMDB transaction with its changelog offset;
5. :meth:`Task.close`.

**One commit across several changelogs.** Each store has its own changelog, as in Kafka, but a
task commit must be all-or-nothing across them (Kafka gets this from its transaction
coordinator). Every commit marker carries the task's commit sequence number and the names of the
stores that take part (:mod:`txstore.changelog.coordination`). A crash while the changelogs are
being committed leaves some with the new sequence number and some without;
:meth:`Task.initialize` rolls the ones that got ahead back to the common commit
(:meth:`~txstore.changelog.log.FileChangelog.rollback_last_commit`). A commit is therefore
complete exactly when every participant's changelog holds its marker, and the input is re-read
from the input position of the last complete commit.

**Recovery never makes damage worse.** :meth:`Task.initialize` first checks everything and only
then writes: every changelog is scanned when its store is opened (damaged committed data raises
:class:`~txstore.errors.ChangelogCorruptionError` there, before any file is changed), the
changelogs of stores not opened this time are scanned, the cross-store rollback is planned and
checked against the stores' committed offsets (a store that committed a range the plan would
undo proves that commit was complete: :class:`TaskCorruptedError`, nothing changed); then torn
tails are truncated, changelogs rolled back, stores recovered and restored.

**In-memory stores** (``Stores.in_memory_*``, every kind and format) live in one
:class:`~txstore.engine.memory.MemoryPartition` of the task, as Kafka's in-memory stores:
change-logged like persistent ones, committed with their changelog offsets right after the
LMDB commit of the persistent stores, and restored on every :meth:`initialize` from the start
of their changelog (they start empty). Their changelogs are their only durable copy: nothing
of them is in the partition's LMDB catalog.

**A commit that fails** (an I/O error, a full disk, an exception at any point) never writes the
same sequence number twice. If it failed after some changelogs committed it, the task remembers
which: :meth:`Task.commit` with the same input position and nothing processed since finishes it
(the changelogs that have it are skipped), :meth:`Task.abort` undoes it, and anything else is
refused with :class:`~txstore.errors.IllegalStateError` until one of those (or a close and
reopen, whose recovery rolls it back). A changelog that hit an I/O error refuses all writes
until the task is reopened.

What a crash at each point leaves, and how :meth:`initialize` repairs it:

==================================  =============================================================
crash point                         repair
==================================  =============================================================
before the changelog commit         changelog tails truncated, overlays gone; input re-read from
                                    the last committed position
between two changelog commits       changelogs that got ahead rolled back; as above
after the changelog commit          the stores replay the committed range they miss
inside / after the store commit     nothing to replay (LMDB commits atomically)
during restore                      restore resumes from the last restored batch
==================================  =============================================================
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from txstore import codecs, faults
from txstore.changelog.coordination import (
    RecoveryPlan,
    commit_metadata,
    plan_recovery,
    read_commit_metadata,
)
from txstore.changelog.layer import (
    RecordContext,
)
from txstore.changelog.log import CleanupPolicy, FileChangelog
from txstore.codecs import ValueFormat
from txstore.engine.memory import MemoryPartition
from txstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    StoreClosedError,
    TaskCorruptedError,
)
from txstore.runtime.database import Database
from txstore.runtime.transaction import Transaction
from txstore.stores.assembly import StoreKind, StoreStack
from txstore.stores.builders import KeyValueStoreBuilder, SessionStoreBuilder, WindowStoreBuilder
from txstore.stores.kv import KeyValueStore
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

__all__ = ["RecordContext", "RestoreProgress", "RestoreReport", "Task", "TaskCorruptedError"]

K = TypeVar("K")
V = TypeVar("V")

#: Most records replayed per restore batch: one LMDB write transaction and one C
#: record-converter call per batch. A batch also ends at half the overlay budget in bytes.
#: Large batches matter: with random keys each commit rewrites a large share of the B-tree's
#: leaves, so a 1M-record restore wrote 2.8 GB with 10,000-record batches and 0.34 GB with
#: 200,000 (perf/bench_restore.py), and ran 2.1x faster with 100,000.
RESTORE_BATCH = 100_000
#: Run changelog cleanup (compaction, retention) every this many commits.
CLEAN_EVERY = 100
#: Kafka's ``windowstore.changelog.additional.retention.ms``: windowed changelogs keep records
#: this much longer than the store does.
CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class RestoreProgress:
    """Passed to the restore progress callback after each batch."""

    store: str
    restored: int
    total: int


@dataclass
class RestoreReport:
    """What :meth:`Task.initialize` did."""

    rolled_back: dict[str, int] = field(default_factory=dict)
    restored: dict[str, int] = field(default_factory=dict)
    discarded_uncommitted: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class _Entry:
    """A store of the task, as the lifecycle sees it: its layers under the typed store."""

    name: str
    kind: StoreKind
    format: ValueFormat
    raw: Any  # the bytes store, unlogged (restore writes here)
    log: FileChangelog

    @classmethod
    def of(cls, stack: StoreStack) -> _Entry:
        log = stack.changelog
        assert isinstance(log, FileChangelog), "a task's stores are opened with changelogs"
        return cls(stack.name, stack.kind, stack.stored_format, stack.bytes_store, log)


#: The marker metadata of a task commit (kept under this name for perf/bench_restore.py, which
#: writes task changelogs directly).
_commit_metadata = commit_metadata


@dataclass
class _PartialCommit:
    """A task commit that failed after some changelogs committed it: its sequence number and
    input position, the stores taking part, the changelogs that hold it (``done``), and each
    changelog's end offset when it failed (more records since: processing went on)."""

    seq: int
    position: int
    names: list[str]
    done: set[str] = field(default_factory=set)
    ends: dict[str, int] = field(default_factory=dict)


class Task:
    """A task over the partition directory ``path`` (see the module docstring).

    ``sync`` applies to the LMDB commits and the changelog commits alike; ``changelog_options``
    are passed to each :class:`~txstore.changelog.log.FileChangelog` (``segment_bytes``...);
    ``verify`` is :func:`txstore.open`'s (when ``data/data.mdb``'s pages are walked).
    Changelogs live in ``<path>/changelog/<store>/``.

    >>> import tempfile, txstore
    >>> from txstore import Serdes, Stores
    >>> path = tempfile.mkdtemp()
    >>> with Task(path) as task:
    ...     counts = task.key_value_store(Stores.key_value_store_builder(
    ...         Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()))
    ...     report = task.initialize()
    ...     counts.put("a", 1)
    ...     task.commit(input_position=1)
    >>> with Task(path) as task:
    ...     counts = task.key_value_store(Stores.key_value_store_builder(
    ...         Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()))
    ...     report = task.initialize()
    ...     task.input_position, counts.get("a")
    (1, 1)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        overlay_budget_bytes: int = 64 * 2**20,
        changelog_options: dict[str, Any] | None = None,
        verify: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.sync = sync
        self._restore_bytes = max(1, overlay_budget_bytes // 2)
        self.context = RecordContext()
        self._changelog_options = dict(changelog_options or {})
        self._state = "created"
        self._seq = 0
        self._input_position: int | None = None
        self._partial: _PartialCommit | None = None
        self._commits = 0
        self._memory = MemoryPartition(overlay_budget_bytes=overlay_budget_bytes)
        self.db = Database(
            self.path,
            sync=sync,
            overlay_budget_bytes=overlay_budget_bytes,
            changelogs=self,
            verify=verify,
        )

    # ---- stores ---------------------------------------------------------------------------

    def changelog_for(
        self, name: str, kind: StoreKind, retention_period: int | None
    ) -> FileChangelog:
        """The changelog of store ``name`` in ``<path>/changelog/<name>/``: compacted for a
        key-value store, compacted and deleted after the store's retention plus
        :data:`CHANGELOG_ADDITIONAL_RETENTION_MS` for a window or session store.

        Called by :func:`~txstore.stores.assembly.assemble` for every store opened in
        :attr:`db`, whichever way. Raises :class:`~txstore.errors.InvalidStateStoreError`
        once the task is initialized (stores are added before :meth:`initialize`).
        """
        self._check_created()
        options: dict[str, Any] = {}
        policy = CleanupPolicy.COMPACT
        if kind != "key_value" and retention_period is not None:
            policy = CleanupPolicy.COMPACT_DELETE
            options["retention_ms"] = retention_period + CHANGELOG_ADDITIONAL_RETENTION_MS
        options.update(self._changelog_options)
        # Scanned now (damage raises before anything is written), repaired by initialize()
        # once every changelog of the task was checked.
        options["repair"] = False
        return FileChangelog(
            self.path / "changelog" / name, cleanup_policy=policy, fsync=self.sync, **options
        )

    @property
    def memory_partition(self) -> MemoryPartition:
        """The partition of the task's in-memory stores (lost on close, restored from their
        changelogs by :meth:`initialize`)."""
        return self._memory

    def _check_created(self) -> None:
        if self._state != "created":
            raise InvalidStateStoreError(
                f"stores are added before initialize(); this task is {self._state}"
            )

    def key_value_store(self, builder: KeyValueStoreBuilder[K, V]) -> KeyValueStore[K, V]:
        """Open a key-value store of this task with a change-logging layer and its changelog
        (``cleanup.policy=compact``). Call before :meth:`initialize`. The same as
        ``builder.build(task.db)``; errors as :meth:`txstore.runtime.Database.open_store`."""
        self._check_created()
        return self.db.open_key_value_store(builder)

    def window_store(self, builder: WindowStoreBuilder[K, V]) -> WindowStore[K, V]:
        """Open a window store of this task with a change-logging layer and its changelog
        (``cleanup.policy=compact,delete``, retention = the store's retention plus
        :data:`CHANGELOG_ADDITIONAL_RETENTION_MS`). Call before :meth:`initialize`."""
        self._check_created()
        return self.db.open_window_store(builder)

    def session_store(self, builder: SessionStoreBuilder[K, V]) -> SessionStore[K, V]:
        """Open a session store of this task with a change-logging layer and its changelog
        (as :meth:`window_store`). Call before :meth:`initialize`."""
        self._check_created()
        return self.db.open_session_store(builder)

    @property
    def _entries(self) -> dict[str, _Entry]:
        return {s.name: _Entry.of(s) for s in self.db.stacks()}

    def store(self, name: str) -> Any:
        """A store of this task by name: the handle its opening returned (``db.store``)."""
        if name not in self.store_names:
            raise InvalidArgumentError(f"task {self.path} has no store {name!r}")
        return self.db.store(name)

    @property
    def store_names(self) -> list[str]:
        """The names of the task's stores, sorted."""
        return sorted(s.name for s in self.db.stacks())

    # ---- lifecycle ------------------------------------------------------------------------

    def initialize(
        self, progress: Callable[[RestoreProgress], None] | None = None
    ) -> RestoreReport:
        """Recover and restore every store; afterwards the task is running. See the module
        docstring for what is repaired, and in which order. ``progress`` is called after every
        restore batch.

        Raises :class:`~txstore.errors.ChangelogCorruptionError` for damaged committed data in
        a changelog (opening a store already raises it for the store's own changelog) and
        :class:`TaskCorruptedError` when stores and changelogs disagree beyond repair; in both
        cases before anything was written."""
        self._check_created()
        started = time.perf_counter()
        report = RestoreReport()
        self._repair_changelogs(report)
        for entry in self._entries.values():
            committed_end = entry.log.committed_end_offset
            report.discarded_uncommitted |= entry.raw.approximate_num_uncommitted_bytes() > 0
            entry.raw.recover(committed_end)
            report.restored[entry.name] = self._restore(entry, progress)
        self._state = "running"
        report.seconds = time.perf_counter() - started
        return report

    def _repair_changelogs(self, report: RestoreReport) -> None:
        entries = self._entries
        logs = {name: e.log for name, e in entries.items()}
        # Changelogs of stores that are not open this time still take part in the repair.
        root = self.path / "changelog"
        others: list[FileChangelog] = []
        try:
            if root.is_dir():
                for d in sorted(root.iterdir()):
                    if d.is_dir() and d.name not in logs:
                        log = FileChangelog(d, fsync=self.sync, repair=False)
                        others.append(log)
                        logs[d.name] = log
            # 1. check: nothing below writes until every changelog and store agreed
            for entry in entries.values():
                _check_not_ahead(entry, entry.log.committed_end_offset)
            plan = plan_recovery(logs)
            for entry in entries.values():
                _check_not_ahead(entry, plan.ends[entry.name], plan)
            # 2. repair: torn tails, then the changelogs ahead of the last complete commit
            for log in logs.values():
                log.repair()
            for name, count in plan.undo.items():
                for _ in range(count):
                    undone = logs[name].rollback_last_commit()
                    records = undone.end_offset - undone.start_offset
                    report.rolled_back[name] = report.rolled_back.get(name, 0) + records
            self._seq = plan.seq
            self._input_position = plan.input_position
        finally:
            for log in others:
                log.close()

    def _restore(self, entry: _Entry, progress: Callable[[RestoreProgress], None] | None) -> int:
        log, raw = entry.log, entry.raw
        end = log.committed_end_offset
        _check_not_ahead(entry, end)
        start = raw.committed_offset
        if start is None:
            start = log.log_start_offset
        total = end - start
        restored = 0
        if total == 0:
            return 0
        pending_bytes = 0
        restore_batch = getattr(raw, "restore_batch", None) if entry.kind == "key_value" else None
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
            if restore_batch is not None:  # one synced transaction, past the overlay
                restore_batch(keys[:n], stored, offsets[n - 1] + 1)
            else:
                pairs = list(zip(keys[:n], stored, strict=True))
                if entry.kind == "key_value":
                    raw.put_all(pairs)
                else:
                    raw.restore(pairs)
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
                offsets.extend(batch.offsets[:n])
                keys.extend(batch.keys[:n])
                values.extend(batch.values[:n])
                stamps.extend(batch.timestamps[:n])
                headers.extend(batch.headers[:n])
                pending_bytes += sum(map(len, batch.keys[:n])) + 128 * n
                pending_bytes += sum(map(len, filter(None, batch.values[:n])))  # None: 0 bytes
                while len(keys) >= RESTORE_BATCH:
                    flush(RESTORE_BATCH)
                if keys and pending_bytes >= self._restore_bytes:
                    flush(len(keys))
        if keys:
            flush(len(keys))
        if raw.committed_offset != end:
            raw.commit(end)  # a compacted tail leaves a gap after the last record
        return restored

    def commit(self, input_position: int) -> None:
        """Commit the processing done since the last commit, with ``input_position`` (where
        processing resumes after a crash). Changelogs first, then the stores.

        ``input_position`` is an ``int`` (else :class:`~txstore.errors.InvalidTypeError`), at
        least 0 and at least the last committed one (else :class:`~txstore.errors.OffsetError`);
        both are checked before anything is written. After a commit that failed part way,
        see the module docstring: the retry with the same position finishes it, anything else
        raises :class:`~txstore.errors.IllegalStateError`, a changelog that hit an I/O error
        :class:`~txstore.errors.StorageError`."""
        self._check_running()
        position = self._check_position(input_position)
        entries = [self._entries[n] for n in sorted(self._entries)]
        names = [e.name for e in entries]
        seq = self._seq + 1
        # Which changelogs hold this commit already is read from them, not remembered: a
        # changelog never gets a sequence number twice, however the last attempt ended.
        done = {e.name for e in entries if _last_seq(e.log) >= seq}
        partial = self._partial
        if partial is not None or done:
            partial = partial or _PartialCommit(seq, -1, names)
            partial.done = done
            self._check_resumable(partial, position, entries)
        todo = [e for e in entries if e.name not in done]
        for entry in todo:  # refused before anything is written
            entry.log.check_writable()
        # Where each participant's records of this commit end: the same on a retry (nothing
        # was appended since, see _check_resumable), so every marker of it says the same.
        metadata = commit_metadata(seq, names, {e.name: e.log.end_offset for e in entries})
        try:
            faults.point("task.before_changelog_commit")
            # Every participant's records are synced before the first marker: a crash between
            # the markers then leaves them all, and recovery tells a participant that lost
            # them (damage) from one that only lacks its marker (a crash).
            for entry in todo:
                entry.log.sync_records()
            for i, entry in enumerate(todo):
                entry.log.commit(position, metadata)
                if i < len(todo) - 1:
                    faults.point("task.between_changelog_commits")
        except BaseException:
            held = {e.name for e in entries if _last_seq(e.log) >= seq}
            if held:  # some changelogs hold this commit: it is finished or undone, never redone
                ends = {e.name: e.log.end_offset for e in entries}
                self._partial = _PartialCommit(seq, position, names, held, ends)
            raise
        # Every changelog holds the commit: it is durable (recovery replays what the stores
        # miss), whatever happens to the store commit below.
        self._partial = None
        self._seq = seq
        self._input_position = position
        faults.point("task.after_changelog_commit")
        for part in (self.db.partition, self._memory):  # LMDB, then the in-memory stores
            ends = {e.name: e.log.committed_end_offset for e in entries if e.raw.partition is part}
            if ends or part is self.db.partition:
                part.commit_stores(ends)
        faults.point("task.after_store_commit")
        self._commits += 1
        if self._commits % CLEAN_EVERY == 0:
            self.clean_changelogs()

    def _check_position(self, position: object) -> int:
        if isinstance(position, bool) or not isinstance(position, int):
            raise InvalidTypeError(
                f"input_position must be an int, got {type(position).__name__}; nothing was written"
            )
        if position < 0:
            raise OffsetError(f"input_position must be >= 0, got {position}; nothing was written")
        last = self._input_position
        if last is not None and position < last:
            raise OffsetError(
                f"input_position {position} is below the last committed input position {last}: "
                "a task's input position never goes back; nothing was written"
            )
        return int(position)

    def _check_resumable(
        self, partial: _PartialCommit, position: int, entries: list[_Entry]
    ) -> None:
        """Refuse to go on after a commit that failed part way unless this is its retry."""
        grown = [e.name for e in entries if e.log.end_offset != partial.ends.get(e.name)]
        same = position == partial.position and [e.name for e in entries] == partial.names
        if same and not grown:
            return
        raise IllegalStateError(
            f"task commit {partial.seq} (input position {partial.position}) failed after the "
            f"changelogs of {sorted(partial.done)} committed it"
            + (f", and stores {grown} were written since" if grown else "")
            + f": retry commit({partial.position}) before processing anything else, call "
            "abort() to undo it, or close the task (initialize() undoes it); nothing was written"
        )

    def transaction(self, input_position: int) -> Transaction:
        """A ``with`` block whose processing is all or nothing: on a normal end,
        :meth:`commit` ``(input_position)``; on an exception (or a refused commit),
        :meth:`abort`, and the exception goes on. O(1) to open.

        >>> import tempfile
        >>> from txstore import Serdes, Stores
        >>> with Task(tempfile.mkdtemp()) as task:
        ...     counts = task.key_value_store(Stores.key_value_store_builder(
        ...         Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()))
        ...     report = task.initialize()
        ...     with task.transaction(input_position=1):
        ...         counts.put("a", 1)
        ...     try:
        ...         with task.transaction(input_position=2):
        ...             counts.put("a", 2)
        ...             raise ValueError("bad record")
        ...     except ValueError:
        ...         pass
        ...     task.input_position, counts.get("a")
        (1, 1)
        """
        self._check_running()
        return Transaction(lambda: self.commit(input_position), self.abort)

    def abort(self) -> None:
        """Discard everything since the last commit (store overlays and changelog tails), and
        undo a commit that failed after some changelogs committed it (they roll it back).
        Raises :class:`~txstore.errors.StorageError` if a changelog that must roll back hit an
        I/O error: close the task then, its recovery does the same on reopening."""
        self._check_running()
        entries = self._entries
        for entry in entries.values():  # refused before anything is undone
            entry.log.check_writable()
        for name in sorted(entries):  # a commit that failed after some changelogs got it
            if _last_seq(entries[name].log) > self._seq:
                entries[name].log.rollback_last_commit()
        self._partial = None
        for entry in entries.values():
            entry.log.abort()
            entry.raw.recover(entry.log.committed_end_offset)
            behind = entry.raw.committed_offset
            if behind is not None and behind < entry.log.committed_end_offset:
                self._restore(entry, None)  # a failed store commit: replay what it missed

    def clean_changelogs(self, now_ms: int | None = None) -> None:
        """Compact key-value changelogs and apply retention to windowed ones."""
        for entry in self._entries.values():
            if entry.kind == "key_value":
                entry.log.clean(now_ms)
            elif entry.raw.observed_stream_time >= 0:
                # Windowed changelogs expire by stream time, never by the wall clock.
                entry.log.clean(entry.raw.observed_stream_time if now_ms is None else now_ms)

    @property
    def input_position(self) -> int | None:
        """The input position of the last complete commit (``None``: never committed)."""
        return self._input_position

    @property
    def commit_sequence(self) -> int:
        """How many task commits the changelogs hold (the last complete one's number)."""
        return self._seq

    @property
    def state(self) -> str:
        """``created``, ``running`` or ``closed``."""
        return self._state

    def _check_running(self) -> None:
        if self._state == "closed":
            raise StoreClosedError(f"task {self.path}")
        if self._state != "running":
            raise InvalidStateStoreError("call initialize() before processing or committing")

    def close(self) -> None:
        """Close the stores and changelogs; uncommitted work is discarded. Idempotent."""
        if self._state == "closed":
            return
        self._state = "closed"
        for stack in self.db.stacks():
            if stack.changelog is not None:
                stack.changelog.close()
        self.db.close()
        self._memory.close()

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _last_seq(log: FileChangelog) -> int:
    """The task commit sequence number of the changelog's last commit (0: none)."""
    return read_commit_metadata(log.last_committed_metadata)[0]


def _check_not_ahead(entry: _Entry, end: int, plan: RecoveryPlan | None = None) -> None:
    """Raise :class:`TaskCorruptedError` if the store of ``entry`` committed past the changelog
    offset ``end`` (its changelog's end, or where the recovery ``plan`` would leave it)."""
    committed = entry.raw.committed_offset
    if committed is None or committed <= end:
        return
    log = entry.log
    if plan is None:
        raise TaskCorruptedError(
            f"store {entry.name!r} is at changelog offset {committed} but its changelog "
            f"{log.path!r} ends at {end}: the changelog lost committed data; wipe the store "
            "and restore it from the changelog, or restore the changelog; nothing was changed"
        )
    raise TaskCorruptedError(
        f"task commit {plan.incomplete} is missing from the changelogs of {plan.lacking}, but "
        f"store {entry.name!r} committed it (it is at changelog offset {committed}; undoing the "
        f"commit would end its changelog {log.path!r} at {end}): the commit was complete, so "
        f"the changelogs of {plan.lacking} lost committed data. Restore them, or wipe their "
        "stores and restore them; nothing was changed"
    )
