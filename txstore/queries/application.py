"""The application instance: its lifecycle, its queries and its discovery.

An :class:`Application` is one instance of an application (Kafka's ``KafkaStreams`` object):
it hosts the partitions its membership assigns to it (one :class:`~txstore.runtime.task.Task` per
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

The parts live in their own modules: the lifecycle states in :mod:`txstore.queries.lifecycle`,
the hosted partitions, their moves and the writer in :mod:`txstore.queries.hosting`, the
metadata in :mod:`txstore.queries.discovery`, the stores in :mod:`txstore.queries.specs`.

>>> import tempfile
>>> from txstore import Serdes, Stores
>>> from txstore.queries import QueryableStoreTypes, StoreQueryParameters
>>> counts = Stores.key_value_store_builder(
...     Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long())
>>> state_dir = tempfile.TemporaryDirectory()
>>> app = Application("wordcount", state_dir.name, [counts], num_partitions=4,
...                   task_options={"sync": False})
>>> app.start()
>>> app.active_partitions
[0, 1, 2, 3]
>>> for word in ("a", "b", "a"):
...     with app.writer(app.partition_for_key("counts", word)) as w:
...         store = w.store("counts")
...         store.put(word, (store.get(word) or 0) + 1)
>>> app.store(StoreQueryParameters.from_name_and_type(
...     "counts", QueryableStoreTypes.key_value_store())).get("a")
2
>>> app.query_metadata_for_key("counts", "a").partition == app.partition_for_key("counts", "a")
True
>>> app.close()
>>> app.state
<State.NOT_RUNNING: 'NOT_RUNNING'>
>>> state_dir.cleanup()

Costs: ``P`` partitions hosted here, ``S`` stores. Discovery reads the assignment in memory
(no I/O); a query store resolves the local partitions on every call (one comparison while
nothing changed). Opening a partition (at :meth:`Application.start` and on every rebalance) is
a task's ``initialize()``: discard what was uncommitted, then replay the changelog records its
stores missed, O(records to replay), never a wipe.
"""

from __future__ import annotations

import contextlib
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
    StreamsRebalancingError,
    TxStoreError,
    UnknownStateStoreError,
)
from txstore.queries.composite import CompositeReadOnlyKeyValueStore, Resolved, default_route
from txstore.queries.discovery import instance_metadata, key_metadata, key_partition
from txstore.queries.hosting import PartitionHosting
from txstore.queries.local import HostedPartition, StoreReader
from txstore.queries.membership import Membership, StaticAssignment
from txstore.queries.specs import Builder, StoreSpec
from txstore.queries.types import (
    HostInfo,
    KeyQueryMetadata,
    State,
    StoreQueryParameters,
    StreamsMetadata,
    ThreadState,
)
from txstore.queries.windowed import composite_for

__all__ = ["Application"]

_log = logging.getLogger("txstore.queries")


class Application(PartitionHosting):
    """One instance of an application (see the module docstring).

    Parameters:

    * ``application_id``: names the application (its ZooKeeper node, assignment check);
    * ``state_dir``: the state directory, ``<state_dir>/<partition>/`` per partition; every
      instance that may own a partition must reach it (one machine, or a shared filesystem);
    * ``stores``: the store builders (the "topology"): every partition holds every store;
    * ``application_server``: ``host:port`` where this instance's query service listens, as
      published in the metadata;
    * ``membership``: a :class:`~txstore.queries.StaticAssignment` (default: every partition
      here, ``num_partitions`` required) or :class:`~txstore.queries.ZooKeeperMembership`;
    * ``source_topic``: the topic named in the metadata's ``topic_partitions``
      (default: ``application_id``);
    * ``partitioner``: ``f(key_bytes, num_partitions) -> partition`` (default: Kafka's murmur2
      partitioner); ``route_keys``: composite ``get`` reads only the key's partition;
    * ``task_options``: passed to each :class:`~txstore.runtime.task.Task` (``sync``...);
    * ``handover_timeout``: how long to wait for a partition's previous owner to release it;
    * ``restore_listener``: ``f(partition, RestoreProgress)`` during restores.

    Construction is O(S) and opens nothing (see :meth:`start`). It raises
    :class:`~txstore.errors.InvalidArgumentError` for an empty or path-like
    ``application_id``, no stores, an in-memory store, a store given twice, a malformed
    ``application_server``, or neither ``num_partitions`` nor ``membership``;
    :class:`~txstore.errors.InvalidTypeError` for an argument of the wrong type (a store that
    is not a builder...).
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
        path = Path(state_dir)
        host_info = HostInfo.parse(application_server)
        specs = [StoreSpec(b) for b in stores]
        if not specs:
            raise InvalidArgumentError("an application needs at least one store")
        by_name: dict[str, StoreSpec] = {}
        for spec in specs:
            if spec.name in by_name:
                raise InvalidArgumentError(f"store {spec.name!r} is given twice")
            by_name[spec.name] = spec
        if membership is None:
            if num_partitions is None:
                raise InvalidArgumentError("give num_partitions or a membership")
            membership = StaticAssignment.all_local(num_partitions)
        super().__init__(
            path,
            host_info,
            by_name,
            membership,
            expected_partitions=num_partitions,
            task_options=dict(task_options or {}),
            handover_timeout=float(handover_timeout),
            restore_listener=restore_listener,
        )
        self.application_id = application_id
        self.source_topic = source_topic or application_id
        self._partitioner = partitioner
        self._route = partitioner if partitioner is not None else default_route
        self._route_keys = bool(route_keys)
        self._thread: threading.Thread | None = None

    @property
    def route_keys(self) -> bool:
        """Whether composite ``get`` reads only the key's partition (else every local one in
        turn, as Kafka does). Setting it applies to composite stores already handed out."""
        return self._route_keys

    @route_keys.setter
    def route_keys(self, value: bool) -> None:
        with self._state_lock:
            self._route_keys = bool(value)
            self._gen = next(self._gen_counter)  # composite stores resolve their readers again

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self, timeout: float | None = 60.0) -> None:
        """Join the membership, open and restore the assigned partitions, and keep following
        the membership in a background thread. Waits until ``RUNNING`` (up to ``timeout``
        seconds; ``0``: do not wait). Raises :class:`~txstore.errors.IllegalStateError` if
        already started or stopped.

        Cost: the membership's ``join`` (a ZooKeeper membership connects and registers), then, in
        the background thread, every assigned partition opened: its task recovered and its
        changelog replayed from the stores' committed offsets, O(records to replay) each. A
        ``timeout`` that expires raises ``IllegalStateError`` from :meth:`wait_until_running`
        while the start goes on in the background (call :meth:`close` to stop it); an error
        of ``join`` is raised as is and leaves the application in ``ERROR``.
        """
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
        ``timeout`` seconds or if the application failed or stopped.

        Polls the state every 5 ms, so it returns at most 5 ms after the state changes.
        """
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
            except (OSError, TxStoreError) as exc:  # a membership hiccup: next tick
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
        discarded), leave the membership. Idempotent.

        Waits up to ``timeout`` seconds for the background thread (a rebalance in progress
        finishes first), then closes the P partitions, O(P x S) plus what each store's close
        discards; nothing is committed. On a failed application (``ERROR``) it only stops the
        thread: the partitions were closed when it failed.
        """
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

    # ---- keys and queries ----------------------------------------------------------------

    def partition_for_key(self, store_name: str, key: Any) -> int:
        """The partition of ``key`` for ``store_name`` (its key serde and the partitioner).

        O(key size): one serialization and Kafka's murmur2 hash (or the custom partitioner).
        Before the first assignment it asks the membership for one (a ZooKeeper membership
        raises :class:`~txstore.errors.InvalidArgumentError` before :meth:`start`). Raises
        :class:`~txstore.errors.UnknownStateStoreError` for a store the application does not
        have, ``InvalidArgumentError`` for a key the serde turns into ``None``, and the
        serde's error (:class:`~txstore.errors.InvalidTypeError`...) for a key it rejects.
        """
        spec = self._spec(store_name)
        kb = spec.key_serde.serialize(key)
        if kb is None:
            raise InvalidArgumentError(f"the key serde turned {key!r} into null")
        return self._route(kb, self._num_partitions())

    def _num_partitions(self) -> int:
        a = self._assignment or self.membership.current()
        return a.num_partitions

    def _spec(self, name: str) -> StoreSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownStateStoreError(name)
        return spec

    @property
    def stores(self) -> list[StoreSpec]:
        """The application's stores, in the order given. O(S)."""
        return list(self._specs.values())

    def store(self, params: StoreQueryParameters) -> Any:
        """A composite read-only store over the local partitions of ``params.store_name``.

        Raises :class:`~txstore.errors.StreamsNotStartedError` before :meth:`start`,
        :class:`~txstore.errors.StreamsNotRunningError` once stopped and
        :class:`~txstore.errors.UnknownStateStoreError` for a store the application does not
        have. Everything else (restoring, partition not here, type mismatch, migrated) is
        raised by the store's operations, as in Kafka, so a store kept across a rebalance
        follows it. A ``params`` that is not :class:`StoreQueryParameters` raises
        :class:`~txstore.errors.InvalidTypeError`.

        O(1): the composite store is created, nothing is read. Each of its operations then
        costs one resolution of the local partitions (one comparison while nothing changed)
        plus the reads: a routed ``get`` reads the key's partition only (O(log n)), scans chain
        the partitions' iterators in partition order (:mod:`txstore.queries.composite`).
        """
        if not isinstance(params, StoreQueryParameters):
            raise InvalidTypeError("store() takes StoreQueryParameters")
        self._validate_running()
        spec = self._spec(params.store_name)
        kind = params.queryable_store_type.kind  # Kafka: the type creates the composite
        if kind == "key_value":
            return CompositeReadOnlyKeyValueStore(params, self, spec.key_serde)
        return composite_for(kind, params, self, spec.key_serde)

    def resolve_readers(self, params: StoreQueryParameters) -> tuple[int, Resolved]:
        """The readers ``params`` may use now (Kafka's ``WrappingStoreProvider.stores``), with
        the :attr:`generation` they were resolved at: what a composite store from
        :meth:`store` calls when the generation it holds is out of date.

        O(P log P) for P hosted partitions, no I/O. Raises the errors the composite stores'
        operations raise (:meth:`store`): :class:`~txstore.errors.StreamsRebalancingError`
        while the processing side is restoring, :class:`~txstore.errors.InvalidStateStoreError`
        when ``params``' store type does not accept the store,
        :class:`~txstore.errors.StateStoreMigratedError` when no partition can be read.
        """
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
        route = self._route if self._route_keys and params.partition is None else None
        n = self._assignment.num_partitions if self._assignment is not None else 1
        return gen, Resolved(tuple(readers), by_partition, n, route)

    def _migrated(self, message: str) -> InvalidStateStoreError:
        if self._running():
            return StateStoreMigratedError(message)
        return StateStoreNotAvailableError(message)

    # ---- discovery ------------------------------------------------------------------------

    def metadata_for_all_streams_clients(self) -> list[StreamsMetadata]:
        """Every instance of the application with what it hosts, sorted by (host, port).

        O(instances x P), from the assignment in memory (no I/O); an empty list before the
        first assignment. Raises :class:`~txstore.errors.StreamsNotStartedError` before
        :meth:`start` and :class:`~txstore.errors.StreamsNotRunningError` once stopping or
        failed. Also named ``all_metadata``.
        """
        self._validate_running()
        a = self._assignment
        if a is None:
            return []
        names = frozenset(self._specs)
        return [instance_metadata(a, h, names, self.source_topic) for h in a.hosts]

    def streams_metadata_for_store(self, store_name: str) -> list[StreamsMetadata]:
        """The instances hosting ``store_name`` (active or standby), sorted by (host, port).

        Cost and errors as :meth:`metadata_for_all_streams_clients` (every partition holds
        every store, so an unknown name gives an empty list). Also named
        ``all_metadata_for_store``.
        """
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

        O(key size): one serialization and hash, then lookups in the assignment in memory (no
        I/O). Raises :class:`~txstore.errors.InvalidArgumentError` for a ``None`` key,
        :class:`~txstore.errors.StreamsNotStartedError` before :meth:`start` and
        :class:`~txstore.errors.StreamsNotRunningError` once stopping or failed.
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
        partition = key_partition(
            key,
            a.num_partitions,
            topic=self.source_topic,
            serializer=spec.key_serde if serializer is None else serializer,
            partitioner=partitioner,
            route=self._route,
        )
        return key_metadata(a, partition)

    def describe_stores(self) -> list[dict[str, Any]]:
        """JSON-ready descriptions of the stores (the HTTP API's ``/v1/stores``). O(S)."""
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
