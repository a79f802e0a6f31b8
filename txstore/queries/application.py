"""The application instance: the partitions it hosts, its lifecycle, queries and discovery.

An :class:`Application` is one instance of an application (Kafka's ``KafkaStreams`` object):
it hosts the partitions its membership assigns to it (one :class:`~txstore.task.Task` per
partition under ``<state_dir>/<partition>/``, each holding the application's stores), is
reachable at ``application_server`` (``host:port``), and answers:

* local queries: :meth:`Application.store` returns a composite read-only store over the local
  partitions of a store (:mod:`txstore.queries.composite`);
* discovery: :meth:`Application.query_metadata_for_key`,
  :meth:`Application.streams_metadata_for_store`,
  :meth:`Application.metadata_for_all_streams_clients`.

The writer (the code that processes input) works inside :meth:`Application.writer` blocks,
one partition at a time; read-uncommitted queries from other threads see the state between two
blocks (see :mod:`txstore.queries.local` for the threading).

>>> import tempfile
>>> from txstore import Serdes, Stores
>>> counts = Stores.key_value_store_builder(
...     Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long())
>>> app = Application("wordcount", tempfile.mkdtemp(), [counts], num_partitions=4,
...                   task_options={"sync": False})
>>> app.start()
>>> for word in ("a", "b", "a"):
...     with app.writer(app.partition_for_key("counts", word)) as w:
...         store = w.store("counts")
...         store.put(word, (store.get(word) or 0) + 1)
>>> app.store(StoreQueryParameters.from_name_and_type(
...     "counts", QueryableStoreTypes.key_value_store())).get("a")
2
>>> app.close()
>>> app.state
<State.NOT_RUNNING: 'NOT_RUNNING'>
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from txstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    InvalidTypeError,
    StateStoreMigratedError,
    StateStoreNotAvailableError,
    StreamsNotRunningError,
    StreamsNotStartedError,
    StreamsRebalancingError,
    TaskMigratedError,
    TxStoreError,
    UnknownStateStoreError,
    UnsupportedOperationError,
)
from txstore.queries.composite import CompositeReadOnlyKeyValueStore, Resolved, default_route
from txstore.queries.local import HostedPartition, StoreReader
from txstore.queries.membership import Assignment, Membership, StaticAssignment
from txstore.queries.types import (
    HostInfo,
    KeyQueryMetadata,
    QueryableStoreTypes,
    State,
    StoreQueryParameters,
    StreamsMetadata,
    ThreadState,
    TopicPartition,
    valid_transition,
)
from txstore.statedir import partition_path
from txstore.stores import KeyValueStoreBuilder, SessionStoreBuilder, WindowStoreBuilder

__all__ = ["Application", "PartitionWriter", "StoreSpec"]

_log = logging.getLogger("txstore.queries")

Builder = (
    KeyValueStoreBuilder[Any, Any] | WindowStoreBuilder[Any, Any] | SessionStoreBuilder[Any, Any]
)


class StoreSpec:
    """One store of the application: its builder, kind and format (what ``accepts`` sees)."""

    __slots__ = ("builder", "format", "kind", "name")

    def __init__(self, builder: Builder) -> None:
        if isinstance(builder, KeyValueStoreBuilder):
            self.kind = "key_value"
        elif isinstance(builder, WindowStoreBuilder):
            self.kind = "window"
        elif isinstance(builder, SessionStoreBuilder):
            self.kind = "session"
        else:
            raise InvalidTypeError(
                f"stores must be key-value, window or session store builders, got "
                f"{type(builder).__name__}"
            )
        if not builder.supplier.persistent:
            raise InvalidArgumentError(
                f"store {builder.name!r} is in-memory: an application's stores are persistent "
                "(their partitions move between instances through the state directory)"
            )
        self.builder = builder
        self.name = builder.name
        self.format = builder.format

    @property
    def key_serde(self) -> Any:
        """The store's key serde."""
        return self.builder.key_serde

    @property
    def value_serde(self) -> Any:
        """The store's value serde."""
        return self.builder.value_serde

    def open(self, task: Any) -> Any:
        """Open this store on ``task`` (before ``task.initialize()``)."""
        opener = getattr(task, f"{self.kind}_store", None)
        if opener is None:
            raise UnsupportedOperationError(
                f"store {self.name!r}: this txstore's Task cannot open {self.kind} stores yet"
            )
        return opener(self.builder)

    def open_readonly(self, db: Any) -> Any:
        """Open this store on a read-only database (a standby)."""
        opener = getattr(db, f"open_{self.kind}_store")
        return opener(self.builder)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (the HTTP API's ``/v1/stores``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "format": self.format.name,
            "key_serde": self.key_serde.name,
            "value_serde": self.value_serde.name,
            "default_type": QueryableStoreTypes.default_for(self.kind, self.format).name,
        }


class PartitionWriter:
    """The writer's handle on one partition inside :meth:`Application.writer`: its task, its
    stores, and :meth:`commit`."""

    __slots__ = ("_hosted",)

    def __init__(self, hosted: HostedPartition) -> None:
        self._hosted = hosted

    @property
    def partition(self) -> int:
        """The partition number."""
        return self._hosted.number

    @property
    def task(self) -> Any:
        """The partition's :class:`~txstore.task.Task`."""
        return self._hosted.task

    def store(self, name: str) -> Any:
        """A store of this partition, for writing."""
        try:
            return self._hosted.stores[name]
        except KeyError:
            raise UnknownStateStoreError(name) from None

    def commit(self, input_position: int) -> None:
        """Commit the partition's task (see :meth:`txstore.task.Task.commit`)."""
        self._hosted.task.commit(input_position)


class _WriterBlock:
    """The context manager :meth:`Application.writer` returns (a class, not a generator: it
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


class Application:
    """One instance of an application (see the module docstring).

    Parameters:

    * ``application_id``: names the application (registry directory, assignment check);
    * ``state_dir``: the state directory, ``<state_dir>/<partition>/`` per partition; every
      instance that may own a partition must reach it (one machine, or a shared filesystem);
    * ``stores``: the store builders (the "topology"): every partition holds every store;
    * ``application_server``: ``host:port`` where this instance's query service listens, as
      published in the metadata;
    * ``membership``: a :class:`~txstore.queries.StaticAssignment` (default: every partition
      here, ``num_partitions`` required) or :class:`~txstore.queries.RegistryMembership`;
    * ``source_topic``: the topic named in the metadata's ``topic_partitions``
      (default: ``application_id``);
    * ``partitioner``: ``f(key_bytes, num_partitions) -> partition`` (default: Kafka's murmur2
      partitioner); ``route_keys``: composite ``get`` reads only the key's partition;
    * ``task_options``: passed to each :class:`~txstore.task.Task` (``sync``...);
    * ``handover_timeout``: how long to wait for a partition's previous owner to release it;
    * ``restore_listener``: ``f(partition, RestoreProgress)`` during restores.
    """

    def __init__(
        self,
        application_id: str,
        state_dir: str | os.PathLike[str],
        stores: Sequence[Builder],
        *,
        application_server: str = "localhost:0",
        membership: Membership | None = None,
        num_partitions: int | None = None,
        source_topic: str | None = None,
        partitioner: Callable[[bytes, int], int] | None = None,
        route_keys: bool = True,
        task_options: Mapping[str, Any] | None = None,
        handover_timeout: float = 30.0,
        restore_listener: Callable[[int, Any], None] | None = None,
    ) -> None:
        if not isinstance(application_id, str) or not application_id:
            raise InvalidArgumentError("application_id must be a non-empty str")
        if "/" in application_id or application_id.startswith("."):
            raise InvalidArgumentError(f"application_id {application_id!r} is not a valid name")
        self.application_id = application_id
        self.state_dir = Path(state_dir)
        self.host_info = HostInfo.parse(application_server)
        specs = [StoreSpec(b) for b in stores]
        if not specs:
            raise InvalidArgumentError("an application needs at least one store")
        self._specs: dict[str, StoreSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise InvalidArgumentError(f"store {spec.name!r} is given twice")
            self._specs[spec.name] = spec
        if membership is None:
            if num_partitions is None:
                raise InvalidArgumentError("give num_partitions or a membership")
            membership = StaticAssignment.all_local(num_partitions)
        self.membership = membership
        self._expected_partitions = num_partitions
        self.source_topic = source_topic or application_id
        self._partitioner = partitioner
        self._route = partitioner if partitioner is not None else default_route
        self.route_keys = bool(route_keys)
        self._task_options = dict(task_options or {})
        self.handover_timeout = float(handover_timeout)
        self._restore_listener = restore_listener

        self._state = State.CREATED
        self._thread_state = ThreadState.CREATED
        self._state_lock = threading.RLock()
        self._state_listener: Callable[[State, State], None] | None = None
        self._rebalance_lock = threading.Lock()
        self._assignment: Assignment | None = None
        self._active: dict[int, HostedPartition] = {}
        self._standby: dict[int, HostedPartition] = {}
        self._pending: set[int] = set()
        self._gen_counter = itertools.count(1)
        self._gen = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The lifecycle state."""
        return self._state

    @property
    def error(self) -> BaseException | None:
        """What made the application fail (state ``ERROR``), or None."""
        return self._error

    @property
    def thread_state(self) -> ThreadState:
        """The state of the processing side (``PARTITIONS_ASSIGNED`` while restoring)."""
        return self._thread_state

    def set_state_listener(self, listener: Callable[[State, State], None] | None) -> None:
        """Call ``listener(new_state, old_state)`` on every state change (from the thread
        making the change). Set it before :meth:`start`."""
        self._state_listener = listener

    def _set_state(self, new: State) -> bool:
        with self._state_lock:
            old = self._state
            if old is new:
                return new is State.REBALANCING  # Kafka: REBALANCING -> REBALANCING, silently
            if not valid_transition(old, new):
                return False
            self._state = new
            self._gen = next(self._gen_counter)
        listener = self._state_listener
        if listener is not None:
            try:
                listener(new, old)
            except Exception:  # a listener must not break the application
                _log.exception("state listener failed")
        return True

    def _set_thread_state(self, new: ThreadState) -> None:
        with self._state_lock:
            self._thread_state = new
            self._gen = next(self._gen_counter)

    def _running(self) -> bool:
        return self._state.is_running_or_rebalancing()

    def start(self, timeout: float | None = 60.0) -> None:
        """Join the membership, open and restore the assigned partitions, and keep following
        the membership in a background thread. Waits until ``RUNNING`` (up to ``timeout``
        seconds; ``0``: do not wait). Raises :class:`~txstore.errors.IllegalStateError` if
        already started or stopped."""
        with self._state_lock:
            if self._state is not State.CREATED:
                raise IllegalStateError(
                    "The client is either already started or already stopped, cannot re-start"
                )
            self._set_state(State.REBALANCING)
            self._set_thread_state(ThreadState.STARTING)
        try:
            self.membership.join(self.application_id, self.host_info, sorted(self._specs))
        except BaseException as exc:
            self._fail(exc)
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"txstore-app-{self.application_id}", daemon=True
        )
        self._thread.start()
        if timeout:
            self.wait_until_running(timeout)

    def wait_until_running(self, timeout: float = 60.0) -> None:
        """Block until ``RUNNING``; raises :class:`~txstore.errors.IllegalStateError` after
        ``timeout`` seconds or if the application failed or stopped."""
        deadline = time.monotonic() + timeout
        while True:
            state = self._state
            if state is State.RUNNING:
                return
            if state not in (State.CREATED, State.REBALANCING):
                raise IllegalStateError(
                    f"the application is {state}, not RUNNING"
                    + (f": {self._error}" if self._error is not None else "")
                )
            if time.monotonic() >= deadline:
                raise IllegalStateError(
                    f"the application is still {state} after {timeout} s "
                    f"(partitions waiting for their previous owner: {sorted(self._pending)})"
                )
            time.sleep(0.005)

    def _run(self) -> None:
        interval = max(0.01, float(getattr(self.membership, "refresh_interval", 1.0)))
        while not self._stop.is_set():
            try:
                self.membership.heartbeat()
                a = self.membership.current()
            except (OSError, TxStoreError) as exc:  # a shared directory hiccup: next tick
                _log.warning("membership not readable, keeping the assignment: %s", exc)
                a = None
            try:
                if a is not None:
                    self._apply(a)
            except Exception as exc:
                if self._stop.is_set():
                    return
                _log.exception("rebalance failed")
                self._fail(exc)
                return
            self._stop.wait(interval)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._set_state(State.PENDING_ERROR)
        self._close_partitions()
        with contextlib.suppress(Exception):
            self.membership.leave()
        self._set_thread_state(ThreadState.DEAD)
        self._set_state(State.ERROR)

    def close(self, timeout: float = 60.0) -> None:
        """Stop following the membership, close every partition (uncommitted writes are
        discarded), leave the membership. Idempotent."""
        with self._state_lock:
            state = self._state
            if state in (State.NOT_RUNNING, State.PENDING_SHUTDOWN):
                return
            if state in (State.ERROR, State.PENDING_ERROR):
                self._stop.set()
                return
            self._set_state(State.PENDING_SHUTDOWN)
            self._set_thread_state(ThreadState.PENDING_SHUTDOWN)
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._rebalance_lock:
            self._close_partitions()
        with contextlib.suppress(Exception):
            self.membership.leave()
        self._set_thread_state(ThreadState.DEAD)
        self._set_state(State.NOT_RUNNING)

    def __enter__(self) -> Application:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_partitions(self) -> None:
        active, standby = self._active, self._standby
        self._active, self._standby = {}, {}
        self._gen = next(self._gen_counter)
        for hosted in [*active.values(), *standby.values()]:
            try:
                hosted.close(self.handover_timeout)
            except Exception:
                _log.exception("closing partition %d failed", hosted.number)

    # ---- rebalancing ----------------------------------------------------------------------

    def rebalance(self) -> None:
        """Read the membership now and apply any change: close the partitions this instance
        lost, then open (recover + restore) the ones it gained. The background thread calls
        it every ``refresh_interval``; call it to react at once."""
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
                    hosted = self._open_active(p, deadline)
                    if hosted is not None:
                        self._publish("active", p, hosted)
                        self._pending.discard(p)
            for p in sorted(standby_new):
                hosted = self._open_standby(p)
                if hosted is not None:
                    self._publish("standby", p, hosted)
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

    def _open_active(self, p: int, deadline: float) -> HostedPartition | None:
        from txstore.task import Task

        path = partition_path(self.state_dir, p)
        path.mkdir(parents=True, exist_ok=True)
        delay = 0.005
        while True:
            try:
                task = Task(path, **self._task_options)
                break
            except InvalidStateStoreError as exc:  # the previous owner still holds it
                if time.monotonic() + delay > deadline:
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
        from txstore.database import Database

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

    # ---- the writer -----------------------------------------------------------------------

    @property
    def active_partitions(self) -> list[int]:
        """The partitions this instance owns and has open, sorted."""
        return sorted(self._active)

    @property
    def standby_partitions(self) -> list[int]:
        """The partitions this instance keeps a read-only standby of, sorted."""
        return sorted(self._standby)

    def writer(self, partition: int) -> _WriterBlock:
        """A block (``with app.writer(p) as w:``) in which the calling thread writes and
        commits ``partition`` through ``w`` (a :class:`PartitionWriter`).

        Holds the partition's guard for the block: keep blocks short (a record, or a batch and
        its commit); read-uncommitted queries from other threads wait for the block to end,
        read-committed ones never wait. Raises :class:`~txstore.errors.TaskMigratedError` if
        this instance does not own the partition (any more).
        """
        hosted = self._active.get(partition)
        if hosted is None:
            raise TaskMigratedError(
                f"partition {partition} is not an active partition of {self.host_info} "
                f"(active: {self.active_partitions})"
            )
        return _WriterBlock(hosted, self.host_info)

    def partition_for_key(self, store_name: str, key: Any) -> int:
        """The partition of ``key`` for ``store_name`` (its key serde and the partitioner)."""
        spec = self._spec(store_name)
        kb = spec.key_serde.serialize(key)
        if kb is None:
            raise InvalidArgumentError(f"the key serde turned {key!r} into null")
        return self._route(kb, self._num_partitions())

    def _num_partitions(self) -> int:
        a = self._assignment or self.membership.current()
        return a.num_partitions

    # ---- queries --------------------------------------------------------------------------

    def _spec(self, name: str) -> StoreSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownStateStoreError(name)
        return spec

    @property
    def stores(self) -> list[StoreSpec]:
        """The application's stores."""
        return list(self._specs.values())

    def _validate_running(self) -> None:
        state = self._state
        if state is State.CREATED:
            raise StreamsNotStartedError()
        if not state.is_running_or_rebalancing():
            raise StreamsNotRunningError(str(state))

    def store(self, params: StoreQueryParameters) -> Any:
        """A composite read-only store over the local partitions of ``params.store_name``.

        Raises :class:`~txstore.errors.StreamsNotStartedError` before :meth:`start`,
        :class:`~txstore.errors.StreamsNotRunningError` once stopped and
        :class:`~txstore.errors.UnknownStateStoreError` for a store the application does not
        have. Everything else (restoring, partition not here, type mismatch, migrated) is
        raised by the store's operations, as in Kafka, so a store kept across a rebalance
        follows it.
        """
        if not isinstance(params, StoreQueryParameters):
            raise InvalidTypeError("store() takes StoreQueryParameters")
        self._validate_running()
        spec = self._spec(params.store_name)
        kind = params.queryable_store_type.kind  # Kafka: the type creates the composite
        if kind == "key_value":
            return CompositeReadOnlyKeyValueStore(params, self, spec.key_serde)
        from txstore.queries.windowed import composite_for

        return composite_for(kind, params, self, spec.key_serde)

    def _resolve(self, params: StoreQueryParameters) -> tuple[int, Resolved]:
        """The readers ``params`` may use now (Kafka's ``WrappingStoreProvider.stores``)."""
        gen = self._gen
        name = params.store_name
        qtype = params.queryable_store_type
        spec = self._spec(name)
        thread = self._thread_state
        if thread in (ThreadState.DEAD, ThreadState.PENDING_SHUTDOWN, ThreadState.CREATED):
            hosted_list: list[HostedPartition] = []
        elif (params.stale_stores and thread.is_alive()) or thread is ThreadState.RUNNING:
            hosted_list = list(self._active.values())
            if params.stale_stores:
                hosted_list += list(self._standby.values())
        else:
            raise StreamsRebalancingError(
                f"Cannot get state store {name} because the stream thread is {thread}, "
                f"not RUNNING{' or REBALANCING' if params.stale_stores else ''}"
            )
        if params.partition is not None:
            hosted_list = [h for h in hosted_list if h.number == params.partition][:1]
        hosted_list.sort(key=lambda h: (h.number, h.standby))
        readers: list[StoreReader] = []
        for hosted in hosted_list:
            if not qtype.accepts((spec.kind, spec.format)):
                raise InvalidStateStoreError(
                    f"Cannot get state store {name} because the queryable store type "
                    f"[{qtype}] does not accept the actual store type "
                    f"[{spec.kind} store in format {spec.format.name}]."
                )
            if hosted.closing or not hosted.stores[name].is_open:
                raise self._migrated(
                    f"Cannot get state store {name} for task {hosted.task_id} because the "
                    "store is not open. The state store may have migrated to another instance."
                )
            readers.append(hosted.reader(name, qtype, params.read_committed))
        if not readers:
            if params.partition is not None:
                raise InvalidStateStorePartitionError(params.partition, name)
            raise self._migrated(f"The state store, {name}, may have migrated to another instance.")
        by_partition: dict[int, StoreReader] = {}
        for r in readers:
            by_partition.setdefault(r.partition, r)  # the active one wins over a standby
        route = self._route if self.route_keys and params.partition is None else None
        n = self._assignment.num_partitions if self._assignment is not None else 1
        return gen, Resolved(tuple(readers), by_partition, n, route)

    def _migrated(self, message: str) -> InvalidStateStoreError:
        if self._running():
            return StateStoreMigratedError(message)
        return StateStoreNotAvailableError(message)

    # ---- discovery ------------------------------------------------------------------------

    def _metadata_for(self, a: Assignment, host: HostInfo) -> StreamsMetadata:
        names = frozenset(self._specs) if a.stores is None else a.stores.get(host, frozenset())
        active = a.active_partitions(host)
        standby = a.standby_partitions(host)
        topic = self.source_topic
        return StreamsMetadata(
            host,
            names if active else frozenset(),
            frozenset(TopicPartition(topic, p) for p in active),
            names if standby else frozenset(),
            frozenset(TopicPartition(topic, p) for p in standby),
        )

    def metadata_for_all_streams_clients(self) -> list[StreamsMetadata]:
        """Every instance of the application with what it hosts, sorted by (host, port)."""
        self._validate_running()
        a = self._assignment
        if a is None:
            return []
        return [self._metadata_for(a, h) for h in a.hosts]

    def streams_metadata_for_store(self, store_name: str) -> list[StreamsMetadata]:
        """The instances hosting ``store_name`` (active or standby), sorted by (host, port)."""
        return [
            m
            for m in self.metadata_for_all_streams_clients()
            if store_name in m.state_store_names or store_name in m.standby_state_store_names
        ]

    # the names
    all_metadata = metadata_for_all_streams_clients
    all_metadata_for_store = streams_metadata_for_store

    def query_metadata_for_key(
        self,
        store_name: str,
        key: Any,
        serializer: Any = None,
        *,
        partitioner: Callable[..., Any] | None = None,
    ) -> KeyQueryMetadata | None:
        """Where ``key`` of ``store_name`` lives: active host, standby hosts and partition.

        The partition is ``toPositive(murmur2(serializer(key))) % num_partitions`` (Kafka's
        default partitioner), or ``partitioner(topic, key, value, num_partitions)``, which may
        return an int or a set holding exactly one partition. ``serializer`` is a serde (or a
        ``key -> bytes`` function); None uses the store's key serde. Returns
        :attr:`KeyQueryMetadata.NOT_AVAILABLE` before the first assignment and None for a
        store the application does not have (as Kafka does).
        """
        self._validate_running()
        a = self._assignment
        if a is None:
            return KeyQueryMetadata.NOT_AVAILABLE
        spec = self._specs.get(store_name)
        if spec is None:
            return None
        if key is None:
            raise InvalidArgumentError("key cannot be null")
        n = a.num_partitions
        if partitioner is not None:
            result = partitioner(self.source_topic, key, None, n)
            if isinstance(result, int) and not isinstance(result, bool):
                partition = result
            elif isinstance(result, (set, frozenset)) and len(result) == 1:
                (partition,) = result
            else:
                raise InvalidArgumentError(
                    "The partitions returned by StreamPartitioner#partitions method when used "
                    "for fetching KeyQueryMetadata for key should be a singleton set"
                )
            if not 0 <= partition < n:
                raise InvalidArgumentError(
                    f"the partitioner returned {partition}, not in 0..{n - 1}"
                )
        else:
            ser = spec.key_serde if serializer is None else serializer
            fn = getattr(ser, "serialize", ser)
            kb = fn(key)
            if not isinstance(kb, bytes):
                raise InvalidTypeError(f"the key serializer must return bytes, got {kb!r:.60}")
            partition = self._route(kb, n)
        active = a.active.get(partition, HostInfo.UNAVAILABLE)
        return KeyQueryMetadata(active, frozenset(a.standby.get(partition, ())), partition)

    def describe_stores(self) -> list[dict[str, Any]]:
        """JSON-ready descriptions of the stores (the HTTP API's ``/v1/stores``)."""
        n = self._assignment.num_partitions if self._assignment is not None else None
        out = []
        for spec in self._specs.values():
            d = spec.describe()
            d["num_partitions"] = n
            d["partitioner"] = "default" if self._partitioner is None else "custom"
            out.append(d)
        return out

    def __repr__(self) -> str:
        return (
            f"<Application {self.application_id!r} at {self.host_info} {self._state} "
            f"active={self.active_partitions}>"
        )
