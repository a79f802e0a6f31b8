"""The partitions an application instance hosts, how they move, and the writer's access.

:class:`PartitionHosting` (the base of :class:`~txstore.queries.Application`) keeps two
tables, active and standby partitions, and applies the membership's assignment to them
(:meth:`PartitionHosting.rebalance`): a revoked partition is closed (waiting for the writer's
block and the reads in flight), an assigned one is opened as a :class:`~txstore.runtime.task.Task`
(recovered and restored, once its previous owner released it), a standby one as a read-only
database. Tables are replaced, never mutated, so readers take them without a lock.

The writer reaches an active partition through :meth:`PartitionHosting.writer`, one
:class:`PartitionWriter` block at a time (see :mod:`txstore.queries.local` for the threading).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    TaskMigratedError,
    TxStoreError,
    UnknownStateStoreError,
)
from txstore.queries.lifecycle import Lifecycle
from txstore.queries.local import HostedPartition
from txstore.queries.membership import Assignment, Membership
from txstore.queries.specs import StoreSpec
from txstore.queries.types import HostInfo, State, ThreadState
from txstore.runtime.database import Database
from txstore.runtime.statedir import partition_path
from txstore.runtime.task import Task

__all__ = ["PartitionHosting", "PartitionWriter"]

_log = logging.getLogger("txstore.queries")


class PartitionWriter:
    """The writer's handle on one partition inside :meth:`~txstore.queries.Application.writer`:
    its task, its stores, and :meth:`commit`. Every accessor is O(1)."""

    __slots__ = ("_hosted",)

    def __init__(self, hosted: HostedPartition) -> None:
        self._hosted = hosted

    @property
    def partition(self) -> int:
        """The partition number. O(1)."""
        return self._hosted.number

    @property
    def task(self) -> Any:
        """The partition's :class:`~txstore.runtime.task.Task`. O(1)."""
        return self._hosted.task

    def store(self, name: str) -> Any:
        """A store of this partition, for writing.

        O(1), a dict lookup. Raises :class:`~txstore.errors.UnknownStateStoreError` for a
        store the application does not have.
        """
        try:
            return self._hosted.stores[name]
        except KeyError:
            raise UnknownStateStoreError(name) from None

    def commit(self, input_position: int) -> None:
        """Commit the partition's task (see :meth:`txstore.runtime.task.Task.commit`).

        One changelog commit per store, then one LMDB write transaction committing every
        store of the partition with its changelog offset (O(u log n) for ``u`` staged writes,
        plus the syncs unless ``sync=False``). Raises :class:`~txstore.errors.InvalidTypeError`
        for a non-``int`` ``input_position``, :class:`~txstore.errors.OffsetError` for a
        negative one or one below the last committed position, and
        :class:`~txstore.errors.StoreClosedError` once the task is closed.
        """
        self._hosted.task.commit(input_position)


class _WriterBlock:
    """The context manager :meth:`PartitionHosting.writer` returns (a class, not a generator: it
    runs once per record in tight loops)."""

    __slots__ = ("_guard", "_hosted", "_where")

    def __init__(self, hosted: HostedPartition, where: HostInfo) -> None:
        self._hosted = hosted
        self._guard = hosted.guard
        self._where = where

    def __enter__(self) -> PartitionWriter:
        self._guard.acquire()
        if self._hosted.closing:
            self._guard.release()
            raise TaskMigratedError(
                f"partition {self._hosted.number} was revoked from {self._where}"
            )
        return PartitionWriter(self._hosted)

    def __exit__(self, *exc: object) -> None:
        self._guard.release()


class PartitionHosting(Lifecycle):
    """The active and standby partitions of an instance and their moves (see the module
    docstring). ``specs`` are the stores every partition holds; ``task_options`` go to each
    :class:`~txstore.runtime.task.Task`; ``handover_timeout`` bounds the wait for a partition's
    previous
    owner; ``restore_listener(partition, RestoreProgress)`` hears restores."""

    def __init__(
        self,
        state_dir: Path,
        host_info: HostInfo,
        specs: dict[str, StoreSpec],
        membership: Membership,
        *,
        expected_partitions: int | None,
        task_options: dict[str, Any],
        handover_timeout: float,
        restore_listener: Callable[[int, Any], None] | None,
    ) -> None:
        super().__init__()
        self.state_dir = state_dir
        self.host_info = host_info
        self._specs = specs
        self.membership = membership
        self._expected_partitions = expected_partitions
        self._task_options = task_options
        self.handover_timeout = handover_timeout
        self._restore_listener = restore_listener
        self._rebalance_lock = threading.Lock()
        self._assignment: Assignment | None = None
        self._active: dict[int, HostedPartition] = {}
        self._standby: dict[int, HostedPartition] = {}
        self._pending: set[int] = set()

    # ---- the writer -----------------------------------------------------------------------

    @property
    def assignment(self) -> Assignment | None:
        """The membership's assignment this instance applied last (None before the first).
        O(1)."""
        return self._assignment

    @property
    def active_partitions(self) -> list[int]:
        """The partitions this instance owns and has open, sorted. O(P log P)."""
        return sorted(self._active)

    @property
    def standby_partitions(self) -> list[int]:
        """The partitions this instance keeps a read-only standby of, sorted. O(P log P)."""
        return sorted(self._standby)

    @property
    def waiting_partitions(self) -> list[int]:
        """The assigned partitions still held by their previous owner (another process), sorted:
        the last rebalance retries them. O(P log P)."""
        return sorted(self._pending)

    def set_restore_listener(self, listener: Callable[[int, Any], None] | None) -> None:
        """Hear restores: ``listener(partition, RestoreProgress)`` (set before ``start``)."""
        self._restore_listener = listener

    def committed_positions(
        self,
        store_name: str,
        stale: bool = False,
        partitions: set[int] | None = None,
        *,
        cached: bool = False,
    ) -> dict[int, int | None]:
        """The committed changelog offset of ``store_name`` on every partition hosted here
        (or those of ``partitions`` hosted here; active ones, with ``stale`` standbys too, an
        active one winning), ``None`` for a partition never committed: the position (Kafka
        IQv2's ``Position``) a query reflects.

        O(P): one short LMDB read transaction per partition. With ``cached``, an active
        partition's offset is remembered with its task's commit sequence and read again only
        after a commit, under the partition's guard (commits happen in writer blocks, which
        hold it): O(1) between commits, but it waits for a writer block as a read-uncommitted
        read does. A partition closing is left out.
        """
        out: dict[int, int | None] = {}
        tables = (self._standby, self._active) if stale else (self._active,)
        for table in tables:
            for p, hosted in table.items():
                if partitions is not None and p not in partitions:
                    continue
                store = hosted.stores.get(store_name)
                if store is None or hosted.closing:
                    continue
                try:
                    if cached and hosted.task is not None:
                        out[p] = self._cached_offset(hosted, store_name, store)
                    else:
                        out[p] = store.committed_offset
                except TxStoreError:  # closed under us: it is moving
                    out.pop(p, None)
        return out

    @staticmethod
    def _cached_offset(hosted: HostedPartition, name: str, store: Any) -> int | None:
        task = hosted.task
        hit = hosted.offsets.get(name)
        if hit is not None and hit[0] == task.commit_sequence:
            return hit[1]
        with hosted.guard:  # no commit in progress: the sequence and LMDB agree
            seq = task.commit_sequence
            offset: int | None = store.committed_offset
        hosted.offsets[name] = (seq, offset)
        return offset

    def writer(self, partition: int) -> _WriterBlock:
        """A block (``with app.writer(p) as w:``) in which the calling thread writes and
        commits ``partition`` through ``w`` (a :class:`PartitionWriter`).

        Holds the partition's guard for the block: keep blocks short (a record, or a batch and
        its commit); read-uncommitted queries from other threads wait for the block to end,
        read-committed ones never wait. Raises :class:`~txstore.errors.TaskMigratedError` if
        this instance does not own the partition (any more).

        O(1) to create; entering the block takes the partition's re-entrant lock (waiting for
        any read-uncommitted query in flight on it), leaving it releases it.
        """
        hosted = self._active.get(partition)
        if hosted is None:
            raise TaskMigratedError(
                f"partition {partition} is not an active partition of {self.host_info} "
                f"(active: {self.active_partitions})"
            )
        return _WriterBlock(hosted, self.host_info)

    # ---- rebalancing ----------------------------------------------------------------------

    def rebalance(self) -> None:
        """Read the membership now and apply any change: close the partitions this instance
        lost, then open (recover + restore) the ones it gained. The background thread calls
        it every ``refresh_interval``; call it to react at once.

        Reads the assignment (a static one: a ``stat`` of its file, if any; a ZooKeeper
        membership: its cached members, re-read after its watch fired); no partition moves
        when it did not change. Each lost partition is closed once the writer's block and the
        reads in flight on it end; each gained one waits up to ``handover_timeout`` for its
        previous owner, or until the membership's assignment changes (else it is tried again
        at the next call), then its task is recovered
        and its changelog replayed, O(records to replay). Raises
        :class:`~txstore.errors.InvalidArgumentError` if the assignment's partition count
        differs from the application's ``num_partitions``.
        """
        self._apply(self.membership.current())

    def _apply(self, a: Assignment) -> None:
        with self._rebalance_lock:
            if self._stop.is_set() or not self._running():
                return
            if self._expected_partitions not in (None, a.num_partitions):
                raise InvalidArgumentError(
                    f"the membership has {a.num_partitions} partitions, the application "
                    f"expects {self._expected_partitions}"
                )
            me = self.host_info
            want_active = a.active_partitions(me)
            want_standby = a.standby_partitions(me) - want_active
            revoked = set(self._active) - want_active
            assigned = want_active - set(self._active)
            standby_gone = set(self._standby) - want_standby
            standby_new = want_standby - set(self._standby)
            changed = bool(revoked or assigned or standby_gone)
            self._pending = set()
            if self._assignment is None or a.version != self._assignment.version:
                self._assignment = a
                self._gen = next(self._gen_counter)
            if changed or self._thread_state is ThreadState.STARTING:
                self._set_state(State.REBALANCING)
            if revoked or standby_gone:
                self._set_thread_state(ThreadState.PARTITIONS_REVOKED)
                for p in sorted(revoked):
                    self._close_one("active", p)
                for p in sorted(standby_gone):
                    self._close_one("standby", p)
            if assigned:
                self._set_thread_state(ThreadState.PARTITIONS_ASSIGNED)
                # a partition turning active here stops being a standby first
                for p in sorted(assigned & set(self._standby)):
                    self._close_one("standby", p)
                self._pending = set(assigned)
                deadline = time.monotonic() + self.handover_timeout
                for p in sorted(assigned):
                    hosted = self._open_active(p, deadline, a)
                    if hosted is not None:
                        self._publish("active", p, hosted)
                        self._pending.discard(p)
                    elif self._superseded(a):
                        break  # the next call applies the newer assignment
            for p in sorted(standby_new):
                hosted = self._open_standby(p)
                if hosted is not None:
                    self._publish("standby", p, hosted)
            publish = getattr(self.membership, "publish", None)
            if publish is not None:  # a ZooKeeper member tells what it hosts now
                publish(sorted(self._active), sorted(self._standby))
            if self._pending:
                _log.warning(
                    "partitions %s are still held by their previous owner; retrying",
                    sorted(self._pending),
                )
                return
            if self._thread_state is not ThreadState.RUNNING:
                self._set_thread_state(ThreadState.RUNNING)
            if self._state is State.REBALANCING:
                self._set_state(State.RUNNING)

    def _publish(self, role: str, p: int, hosted: HostedPartition | None) -> None:
        """Set (or, with ``None``, remove) partition ``p`` in the ``"active"`` or
        ``"standby"`` table. Tables are replaced, never mutated: readers take them without a
        lock."""
        table = dict(self._active if role == "active" else self._standby)
        if hosted is None:
            del table[p]
        else:
            table[p] = hosted
        if role == "active":
            self._active = table
        else:
            self._standby = table
        self._gen = next(self._gen_counter)

    def _close_one(self, role: str, p: int) -> None:
        hosted = (self._active if role == "active" else self._standby)[p]
        # Queries see the partition closing ("store is not open") until it is closed, then
        # not at all; the close waits for the writer's block and the reads in flight.
        hosted.closing = True
        self._gen = next(self._gen_counter)
        hosted.close(self.handover_timeout)
        self._publish(role, p, None)

    def _superseded(self, a: Assignment) -> bool:
        """Whether the membership's assignment is no longer ``a``. A ZooKeeper member may
        compute an assignment from a partial view of the members (one joined a moment later):
        the partition it then waits for is owned, under the newer assignment, by a member
        that will never release it, so the wait must end as soon as the assignment moves."""
        try:
            return self.membership.current().version != a.version
        except (OSError, TxStoreError):  # a membership hiccup: keep waiting
            return False

    def _open_active(self, p: int, deadline: float, a: Assignment) -> HostedPartition | None:
        path = partition_path(self.state_dir, p)
        path.mkdir(parents=True, exist_ok=True)
        delay = 0.005
        while True:
            try:
                task = Task(path, **self._task_options)
                break
            except InvalidStateStoreError as exc:  # the previous owner still holds it
                if time.monotonic() + delay > deadline or self._superseded(a):
                    _log.info("partition %d: %s", p, exc)
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        try:
            stores = {name: spec.open(task) for name, spec in self._specs.items()}
            listener = self._restore_listener
            task.initialize(None if listener is None else (lambda prog: listener(p, prog)))
        except BaseException:
            task.close()
            raise
        return HostedPartition(p, task=task, stores=stores, running=self._running)

    def _open_standby(self, p: int) -> HostedPartition | None:
        path = partition_path(self.state_dir, p)
        if not (path / "data" / "data.mdb").is_file():
            return None  # never written yet: nothing to serve
        try:
            db = Database(path, readonly=True)
        except TxStoreError as exc:
            _log.info("standby partition %d not opened: %s", p, exc)
            return None
        try:
            stores = {name: spec.open_readonly(db) for name, spec in self._specs.items()}
        except TxStoreError as exc:
            db.close()
            _log.info("standby partition %d not opened: %s", p, exc)
            return None
        return HostedPartition(p, db=db, stores=stores, running=self._running)

    def _close_partitions(self) -> None:
        active, standby = self._active, self._standby
        self._active, self._standby = {}, {}
        self._gen = next(self._gen_counter)
        for hosted in [*active.values(), *standby.values()]:
            try:
                hosted.close(self.handover_timeout)
            except Exception:
                _log.exception("closing partition %d failed", hosted.number)
