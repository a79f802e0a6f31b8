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
stores that take part. A crash while the changelogs are being committed leaves some with the
new sequence number and some without; :meth:`Task.initialize` rolls the ones that got ahead back
to the common commit (:meth:`~txstore.changelog.log.FileChangelog.rollback_last_commit`). A commit
is therefore complete exactly when every participant's changelog holds its marker, and the
input is re-read from the input position of the last complete commit.

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

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from txstore import codecs, faults
from txstore.changelog.layer import (
    RecordContext,
)
from txstore.changelog.log import CleanupPolicy, FileChangelog
from txstore.codecs import ValueFormat
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    StorageError,
    StoreClosedError,
)
from txstore.runtime.database import Database
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


class TaskCorruptedError(StorageError):
    """A store is ahead of its changelog (the changelog lost committed data): the store cannot
    be trusted. Kafka's ``TaskCorruptedException``: wipe the store and restore it."""


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


def _commit_metadata(seq: int, stores: list[str]) -> bytes:
    return json.dumps({"seq": seq, "stores": stores}, separators=(",", ":")).encode()


def _read_metadata(blob: bytes) -> tuple[int, list[str]]:
    if not blob:
        return 0, []
    try:
        doc = json.loads(blob)
        return int(doc["seq"]), [str(s) for s in doc["stores"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"unreadable task commit metadata {blob[:80]!r}") from exc


class Task:
    """A task over the partition directory ``path`` (see the module docstring).

    ``sync`` applies to the LMDB commits and the changelog commits alike; ``changelog_options``
    are passed to each :class:`~txstore.changelog.log.FileChangelog` (``segment_bytes``...).
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
    ) -> None:
        self.path = Path(path)
        self.sync = sync
        self._restore_bytes = max(1, overlay_budget_bytes // 2)
        self.context = RecordContext()
        self._changelog_options = dict(changelog_options or {})
        self._state = "created"
        self._seq = 0
        self._input_position: int | None = None
        self._commits = 0
        self.db = Database(
            self.path, sync=sync, overlay_budget_bytes=overlay_budget_bytes, changelogs=self
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
        return FileChangelog(
            self.path / "changelog" / name, cleanup_policy=policy, fsync=self.sync, **options
        )

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
        docstring for what is repaired. ``progress`` is called after every restore batch."""
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
        logs = {name: e.log for name, e in self._entries.items()}
        # Changelogs of stores that are not open this time still take part in the repair.
        root = self.path / "changelog"
        others: list[FileChangelog] = []
        if root.is_dir():
            for d in sorted(root.iterdir()):
                if d.is_dir() and d.name not in logs:
                    log = FileChangelog(d, fsync=self.sync)
                    others.append(log)
                    logs[d.name] = log
        try:
            seqs = {n: _read_metadata(log.last_committed_metadata) for n, log in logs.items()}
            latest = max((s for s, _ in seqs.values()), default=0)
            if latest:
                participants = next(p for s, p in seqs.values() if s == latest)
                complete = all(seqs.get(p, (0, []))[0] == latest for p in participants)
                if not complete:
                    for name, (seq, _) in seqs.items():
                        if seq == latest:
                            undone = logs[name].rollback_last_commit()
                            report.rolled_back[name] = undone.end_offset - undone.start_offset
                    latest -= 1
            self._seq = latest
            self._input_position = None
            for log in logs.values():
                seq, _ = _read_metadata(log.last_committed_metadata)
                if seq == latest and latest:
                    self._input_position = log.last_committed_input_position
        finally:
            for log in others:
                log.close()

    def _restore(self, entry: _Entry, progress: Callable[[RestoreProgress], None] | None) -> int:
        log, raw = entry.log, entry.raw
        end = log.committed_end_offset
        start = raw.committed_offset
        if start is None:
            start = log.log_start_offset
        if start > end:
            raise TaskCorruptedError(
                f"store {entry.name!r} is at changelog offset {start} but its changelog "
                f"{log.path!r} ends at {end}: the changelog lost committed data; wipe the store "
                "and restore it from the changelog"
            )
        total = end - start
        restored = 0
        if total == 0:
            return 0
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
                pending_bytes += sum(len(v) for v in batch.values[:n] if v is not None)
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
        processing resumes after a crash). Changelogs first, then the stores."""
        self._check_running()
        seq = self._seq + 1
        names = sorted(self._entries)
        metadata = _commit_metadata(seq, names)
        faults.point("task.before_changelog_commit")
        entries = [self._entries[n] for n in names]
        for i, entry in enumerate(entries):
            entry.log.commit(input_position, metadata)
            if i < len(entries) - 1:
                faults.point("task.between_changelog_commits")
        faults.point("task.after_changelog_commit")
        self.db.partition.commit_stores({e.name: e.log.committed_end_offset for e in entries})
        faults.point("task.after_store_commit")
        self._seq = seq
        self._input_position = input_position
        self._commits += 1
        if self._commits % CLEAN_EVERY == 0:
            self.clean_changelogs()

    def abort(self) -> None:
        """Discard everything since the last commit (store overlays and changelog tails)."""
        self._check_running()
        for entry in self._entries.values():
            entry.log.abort()
            entry.raw.recover(entry.log.committed_end_offset)

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

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
