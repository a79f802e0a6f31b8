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
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from txstore import faults
from txstore.changelog.coordination import commit_metadata, plan_recovery
from txstore.changelog.layer import RecordContext
from txstore.changelog.log import CleanupPolicy, FileChangelog
from txstore.engine.memory import MemoryPartition
from txstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    StoreClosedError,
    StoreNotChangeloggedError,
    TaskCorruptedError,
    UncommittedWritesWarning,
)
from txstore.runtime.database import Database, check_not_a_file
from txstore.runtime.statedir import drop_damaged_stores
from txstore.runtime.task_support import (
    PartialCommit,
    RestoreProgress,
    RestoreReport,
    StoreEntry,
    StoreNames,
    TaskChangelog,
    check_not_ahead,
    close_changelog,
    has_uncommitted,
    last_seq,
    not_changelogged,
    restore_store,
)
from txstore.runtime.transaction import Transaction
from txstore.stores.assembly import StoreKind, StoreStack
from txstore.stores.builders import KeyValueStoreBuilder, SessionStoreBuilder, WindowStoreBuilder
from txstore.stores.kv import KeyValueStore
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

__all__ = [
    "RecordContext",
    "RestoreProgress",
    "RestoreReport",
    "Task",
    "TaskChangelog",
    "TaskCorruptedError",
]

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


#: The marker metadata of a task commit (kept under this name for perf/bench_restore.py, which
#: writes task changelogs directly).
_commit_metadata = commit_metadata


class Task:
    """A task over the partition directory ``path``: its stores, their changelogs and the
    input position. Lifecycle: open the stores (:meth:`key_value_store`, :meth:`window_store`,
    :meth:`session_store`), :meth:`initialize` (recover and restore), process (set
    :attr:`context` to each input record's timestamp and headers, then write), :meth:`commit`
    ``(input_position)``, :meth:`close`. What a crash at each point leaves and how
    :meth:`initialize` repairs it: the runtime module's overview and ``docs/recovery.md``.

    ``sync`` applies to the LMDB commits and the changelog commits alike; ``changelog_options``
    are passed to each :class:`~txstore.changelog.log.FileChangelog` (``segment_bytes``...);
    ``verify`` is :func:`txstore.open`'s (when ``data/data.mdb``'s pages are walked).
    ``overlay_budget_bytes`` bounds the memory of writes not yet committed: the overlays (they
    spill past it), a restore batch (half of it) and the sorted runs a restore of an empty
    key-value store keeps in memory (the others go to a temporary file). Changelogs live in
    ``<path>/changelog/<store>/``, or in ``<changelog_dir>/<store>/`` when ``changelog_dir``
    is given (stores on local disk, changelogs on storage that other hosts reach: a task
    opened elsewhere over an empty ``path`` restores from them).

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
        changelog_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        check_not_a_file(path)
        self.path = Path(path)
        """The partition directory (its LMDB environment in ``data/``, changelogs in
        ``changelog/<store>/``)."""
        #: Where the stores' changelog directories are (``<path>/changelog`` by default).
        self.changelog_root = (
            self.path / "changelog" if changelog_dir is None else Path(changelog_dir)
        )
        self.sync = sync
        """Whether commits are synced to disk (LMDB and changelogs alike)."""
        self._restore_bytes = max(1, overlay_budget_bytes // 2)
        self._overlay_budget = overlay_budget_bytes  # a sorted restore's runs in memory
        self.context = RecordContext()
        """The input record being processed: set its ``timestamp`` (and ``headers``) before
        processing each record; they go into the changelog records of its writes."""
        self._changelog_options = dict(changelog_options or {})
        self._state = "created"
        self._seq = 0
        self._input_position: int | None = None
        self._partial: PartialCommit | None = None
        self._commits = 0
        self._memory = MemoryPartition(overlay_budget_bytes=overlay_budget_bytes)
        self.db = Database(
            self.path,
            sync=sync,
            overlay_budget_bytes=overlay_budget_bytes,
            changelogs=self,
            verify=verify,
            on_store_closed=self._store_closed,
        )
        """The task's :class:`~txstore.runtime.database.Database`: its stores are opened
        here (``builder.build(task.db)`` is :meth:`key_value_store`), committed by
        :meth:`commit` only."""
        # Kafka's TaskCorruptedException path: stores in which the writer found an entry whose
        # checksum failed are deleted before any is opened; initialize() restores them.
        try:
            self._rebuilt = drop_damaged_stores(self.db.partition, self.path, self.changelog_root)
        except BaseException:
            self.db.close()
            raise

    # ---- stores ---------------------------------------------------------------------------

    def open_changelog(
        self, name: str, kind: StoreKind, retention_period: int | None
    ) -> FileChangelog:
        """The changelog of store ``name`` in ``<changelog_root>/<name>/``: compacted for a
        key-value store, compacted and deleted after the store's retention plus
        :data:`CHANGELOG_ADDITIONAL_RETENTION_MS` for a window or session store.

        Called by :func:`~txstore.stores.assembly.assemble` for every store opened in
        :attr:`db`, whichever way; to get the changelog of an open store, use
        :meth:`changelog`. Raises :class:`~txstore.errors.InvalidStateStoreError` once the
        task is initialized (stores are added before :meth:`initialize`), and
        :class:`~txstore.errors.StoreNotChangeloggedError` for a store committed without a
        changelog (by :func:`txstore.open`), before creating anything.
        """
        self._check_created()
        where = self.changelog_root / name
        committed = self.db.partition.committed_offset(name)
        if committed is not None and not where.exists():
            raise StoreNotChangeloggedError(not_changelogged(name, committed, str(where)))
        options: dict[str, Any] = {}
        policy = CleanupPolicy.COMPACT
        if kind != "key_value" and retention_period is not None:
            policy = CleanupPolicy.COMPACT_DELETE
            options["retention_ms"] = retention_period + CHANGELOG_ADDITIONAL_RETENTION_MS
        options.update(self._changelog_options)
        # Scanned now (damage raises before anything is written), repaired by initialize()
        # once every changelog of the task was checked.
        options["repair"] = False
        return TaskChangelog(
            where,
            task_state=lambda: self._state,
            cleanup_policy=policy,
            fsync=self.sync,
            **options,
        )

    def changelog_for(
        self, name: str, kind: StoreKind, retention_period: int | None
    ) -> FileChangelog:
        """Deprecated name of :meth:`open_changelog` (it creates the changelog; the
        changelog of an open store is :meth:`changelog`)."""
        warnings.warn(
            "Task.changelog_for() is deprecated: it creates a changelog, use "
            "Task.open_changelog(); the changelog of an open store is Task.changelog(name)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.open_changelog(name, kind, retention_period)

    def changelog(self, name: str) -> TaskChangelog:
        """The changelog of the open store ``name`` (a
        :class:`~txstore.runtime.task_support.TaskChangelog`): read it as any changelog
        (``read_committed()``, ``committed_end_offset``...); it refuses commits of its own
        (commit with :meth:`commit`). O(stores). Raises
        :class:`~txstore.errors.InvalidArgumentError` for a store not open in this task."""
        for stack in self.db.stacks():
            if stack.name == name:
                assert isinstance(stack.changelog, TaskChangelog)
                return stack.changelog
        raise InvalidArgumentError(
            f"task {self.path} has no open store {name!r}; its stores: {self.store_names()}"
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

    def _store_closed(self, stack: StoreStack) -> None:
        # A store closed on its own leaves the task, and its changelog with it.
        close_changelog(stack, self._seq if self._state == "running" else None)

    @property
    def _entries(self) -> dict[str, StoreEntry]:
        return {s.name: StoreEntry.of(s) for s in self.db.stacks()}

    def store(self, name: str) -> Any:
        """A store of this task by name: the handle its opening returned (``db.store``)."""
        if name not in self.store_names():
            raise InvalidArgumentError(
                f"task {self.path} has no store {name!r}; its stores: {self.store_names()}"
            )
        return self.db.store(name)

    @property
    def store_names(self) -> StoreNames:
        """The names of the task's open stores, sorted: ``task.store_names()`` (a method, as
        :meth:`Database.store_names`); the old spelling without the call,
        ``task.store_names``, still reads as that list. O(stores)."""
        return StoreNames(sorted(s.name for s in self.db.stacks()))

    # ---- lifecycle ------------------------------------------------------------------------

    def initialize(
        self, progress: Callable[[RestoreProgress], None] | None = None
    ) -> RestoreReport:
        """Recover and restore every store; afterwards the task is running. Recovery discards
        what a crash left uncommitted and rolls back a task commit that reached only some
        changelogs; restore replays each store's changelog from its committed offset (the
        runtime module's overview and ``docs/recovery.md`` say what is repaired, in which
        order). ``progress`` is called after every restore batch; the
        :class:`~txstore.runtime.task_support.RestoreReport` says what was done.

        Raises :class:`~txstore.errors.ChangelogCorruptionError` for damaged committed data in
        a changelog (opening a store already raises it for the store's own changelog) and
        :class:`TaskCorruptedError` when stores and changelogs disagree beyond repair; in both
        cases before anything was written."""
        self._check_created()
        started = time.perf_counter()
        report = RestoreReport()
        report.unclean_shutdown = self.db.partition.last_writer_closed_cleanly is False
        self._repair_changelogs(report)
        for entry in self._entries.values():
            committed_end = entry.log.committed_end_offset
            report.discarded_uncommitted |= entry.raw.approximate_num_uncommitted_bytes() > 0
            entry.raw.recover(committed_end)
            report.restored[entry.name] = self._restore(entry, progress)
        self._state = "running"
        report.seconds = time.perf_counter() - started
        report.rebuilt = list(self._rebuilt)
        return report

    def _repair_changelogs(self, report: RestoreReport) -> None:
        entries = self._entries
        logs = {name: e.log for name, e in entries.items()}
        # Changelogs of stores that are not open this time still take part in the repair.
        root = self.changelog_root
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
                _not_ahead(entry, entry.log.committed_end_offset)
            plan = plan_recovery(logs)
            for entry in entries.values():
                _not_ahead(entry, plan.ends[entry.name], plan)
            # 2. repair: torn tails, then the changelogs ahead of the last complete commit
            for name, log in logs.items():
                found = log.recovered
                if found is not None and found.needs_repair:
                    cut = (found.tail_end_offset or 0) - log.committed_end_offset
                    if cut > 0:
                        report.discarded[name] = cut
                    report.discarded_uncommitted |= bool(cut > 0 or found.truncated_bytes)
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

    def _restore(
        self, entry: StoreEntry, progress: Callable[[RestoreProgress], None] | None
    ) -> int:
        return restore_store(
            entry, progress, RESTORE_BATCH, self._restore_bytes, self._overlay_budget
        )

    def commit(self, input_position: int) -> None:
        """Commit the processing done since the last commit, with ``input_position`` (where
        processing resumes after a crash). Changelogs first, then the stores.

        ``input_position`` is an ``int`` (else :class:`~txstore.errors.InvalidTypeError`), at
        least 0 and at least the last committed one (else :class:`~txstore.errors.OffsetError`);
        both are checked before anything is written. After a commit that failed part way
        (the runtime module's overview, "A commit that fails"): the retry with the same
        position finishes it, anything else raises
        :class:`~txstore.errors.IllegalStateError`, a changelog that hit an I/O error
        :class:`~txstore.errors.StorageError`."""
        self._check_running()
        position = self._check_position(input_position)
        entries = [self._entries[n] for n in sorted(self._entries)]
        names = [e.name for e in entries]
        seq = self._seq + 1
        # Which changelogs hold this commit already is read from them, not remembered: a
        # changelog never gets a sequence number twice, however the last attempt ended.
        done = {e.name for e in entries if last_seq(e.log) >= seq}
        partial = self._partial
        if partial is not None or done:
            partial = partial or PartialCommit(seq, -1, names)
            partial.done = done
            self._check_resumable(partial, position, entries)
        todo = [e for e in entries if e.name not in done]
        for entry in todo:  # refused before anything is written
            entry.log.check_writable()
        # Where each participant's records of this commit end: the same on a retry (nothing
        # was appended since, see _check_resumable), so every marker of it says the same.
        ends = {e.name: e.log.end_offset for e in entries}
        segments: dict[str, int] = {}
        try:
            faults.point("task.before_changelog_commit")
            # Every participant's records are synced before the first marker: a crash between
            # the markers then leaves them all, and recovery tells a participant that lost
            # them (damage) from one that only lacks its marker (a crash).
            for entry in todo:
                entry.log.sync_records()
            # ... and the segment file they are in, which no crash or abort deletes: a missing
            # one is a deleted file, not a crash (recovery refuses it)
            segments = (partial.segments if partial is not None else {}) or {
                e.name: e.log.active_segment_base for e in entries
            }
            metadata = commit_metadata(seq, names, ends, segments)
            for i, entry in enumerate(todo):
                entry.log.commit(position, metadata)
                if i < len(todo) - 1:
                    faults.point("task.between_changelog_commits")
        except BaseException:
            held = {e.name for e in entries if last_seq(e.log) >= seq}
            if held:  # some changelogs hold this commit: it is finished or undone, never redone
                ends = {e.name: e.log.end_offset for e in entries}
                self._partial = PartialCommit(seq, position, names, held, ends, segments)
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
        self, partial: PartialCommit, position: int, entries: list[StoreEntry]
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
            if last_seq(entries[name].log) > self._seq:
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
        """Close the stores and changelogs; idempotent. Uncommitted work is discarded, as in
        Kafka Streams (it is processed again from :attr:`input_position`), with an
        :class:`~txstore.errors.UncommittedWritesWarning` naming the stores (none when a
        ``with`` block is left by an exception: that is an abort)."""
        self._close(warn=True)

    def _close(self, *, warn: bool) -> None:
        if self._state == "closed":
            return
        pending: list[str] = []
        if warn and self._state == "running":
            logged = {s.name for s in self.db.stacks() if has_uncommitted(s)}
            pending = sorted(logged | set(self.db.uncommitted_stores()))
        self._state = "closed"
        for stack in self.db.stacks():
            if stack.changelog is not None:
                stack.changelog.close()
        self.db.close()
        self._memory.close()
        if pending:  # once closed: a warning turned into an error leaks nothing
            warnings.warn(
                f"closing task {self.path} discarded the uncommitted writes of stores "
                f"{pending}: commit them first (task.commit(input_position)), or leave the "
                "with block by an exception to abort without this warning",
                UncommittedWritesWarning,
                stacklevel=3,
            )

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close(warn=exc[0] is None)


def _not_ahead(entry: StoreEntry, end: int, plan: Any = None) -> None:
    """:func:`~txstore.runtime.task_support.check_not_ahead` of a store of the task."""
    check_not_ahead(entry.name, entry.raw.committed_offset, entry.log.path, end, plan)
