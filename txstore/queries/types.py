"""The value types of interactive queries: store types, query parameters and metadata.

Names follow Kafka Streams in snake_case: :class:`QueryableStoreTypes` (with Kafka's ``accepts``
rules), :class:`StoreQueryParameters`, :class:`HostInfo`, :class:`StreamsMetadata`,
:class:`KeyQueryMetadata`, and the application and stream-thread states.

>>> params = StoreQueryParameters.from_name_and_type(
...     "counts", QueryableStoreTypes.key_value_store()).with_partition(3)
>>> params.store_name, params.partition, params.stale_stores, params.read_committed
('counts', 3, False, False)
>>> HostInfo.parse("127.0.0.1:7070")
HostInfo(host='127.0.0.1', port=7070)
>>> KeyQueryMetadata.NOT_AVAILABLE.partition
-1
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

from txstore.codecs import ValueFormat
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.stores.kv import ReadOnlyKeyValueStore
from txstore.stores.session import ReadOnlySessionStore
from txstore.stores.window import ReadOnlyWindowStore
from txstore.types import (
    AggregationWithHeaders,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueTimestampHeaders,
)

__all__ = [
    "HostInfo",
    "KeyQueryMetadata",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "State",
    "StoreQueryParameters",
    "StreamsMetadata",
    "ThreadState",
    "TopicPartition",
    "store_kind_and_format",
]

_P, _T, _H, _PH = (
    ValueFormat.PLAIN,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
    ValueFormat.PLAIN_HEADERS,
)


# ---- states ------------------------------------------------------------------------------


class State(enum.Enum):
    """An application's lifecycle (Kafka's ``KafkaStreams.State``).

    ``CREATED -> REBALANCING -> RUNNING <-> REBALANCING -> PENDING_SHUTDOWN -> NOT_RUNNING``;
    a failure goes ``-> PENDING_ERROR -> ERROR``. Queries work in ``RUNNING`` and
    ``REBALANCING``.
    """

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"

    def is_running_or_rebalancing(self) -> bool:
        """``RUNNING`` or ``REBALANCING``: the states where queries and metadata work."""
        return self is State.RUNNING or self is State.REBALANCING

    def __str__(self) -> str:
        return self.value


_TRANSITIONS: dict[State, frozenset[State]] = {
    State.CREATED: frozenset({State.REBALANCING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}),
    State.REBALANCING: frozenset(
        {State.RUNNING, State.REBALANCING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}
    ),
    State.RUNNING: frozenset({State.REBALANCING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}),
    State.PENDING_SHUTDOWN: frozenset({State.NOT_RUNNING}),
    State.NOT_RUNNING: frozenset(),
    State.PENDING_ERROR: frozenset({State.ERROR}),
    State.ERROR: frozenset(),
}


def valid_transition(old: State, new: State) -> bool:
    """Whether Kafka allows ``old -> new``."""
    return new in _TRANSITIONS[old]


class ThreadState(enum.Enum):
    """The state of the instance's processing side (Kafka's ``StreamThread.State``).

    ``PARTITIONS_ASSIGNED`` while newly assigned partitions are recovered and restored: queries
    then fail with :class:`~txstore.errors.StreamsRebalancingError` unless stale stores are
    enabled.
    """

    CREATED = "CREATED"
    STARTING = "STARTING"
    PARTITIONS_REVOKED = "PARTITIONS_REVOKED"
    PARTITIONS_ASSIGNED = "PARTITIONS_ASSIGNED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    DEAD = "DEAD"

    def is_alive(self) -> bool:
        """Kafka's ``isAlive``: started and not shutting down."""
        return self in (
            ThreadState.STARTING,
            ThreadState.PARTITIONS_REVOKED,
            ThreadState.PARTITIONS_ASSIGNED,
            ThreadState.RUNNING,
        )

    def __str__(self) -> str:
        return self.value


# ---- queryable store types ---------------------------------------------------------------


def store_kind_and_format(store: object) -> tuple[str, ValueFormat] | None:
    """``(kind, value format)`` of a typed store (``"key_value"``, ``"window"``,
    ``"session"``), or None for anything else."""
    codec = getattr(store, "codec", None)
    if codec is None:
        return None
    if isinstance(store, ReadOnlyKeyValueStore):
        return "key_value", codec.format
    if isinstance(store, ReadOnlySessionStore):
        return "session", codec.format
    if isinstance(store, ReadOnlyWindowStore):
        return "window", codec.format
    return None


def _to_plain(value: Any) -> Any:
    if isinstance(value, AggregationWithHeaders):
        return value.aggregation
    return value.value


def _to_timestamped(value: Any) -> Any:
    return ValueAndTimestamp(value.value, value.timestamp)


@dataclass(frozen=True)
class QueryableStoreType:
    """One queryable store type: which stores it ``accepts`` and what values it returns.

    ``kind`` is ``"key_value"``, ``"window"`` or ``"session"``; ``format`` the value format the
    query returns; ``accepted`` the store formats it accepts. A store in another accepted format
    is read through a facade (Kafka's ``ReadOnlyKeyValueStoreFacade``...): a timestamped store
    queried as a plain one returns only the values.
    """

    name: str
    """The Python name (``key_value_store``...)."""
    kind: str
    """``"key_value"``, ``"window"`` or ``"session"``."""
    format: ValueFormat
    """The value format queries return."""
    accepted: frozenset[ValueFormat]
    """The store formats this type can query."""
    java_name: str
    """Kafka's name (``QueryableStoreTypes.keyValueStore()``...)."""

    def accepts(self, store: object) -> bool:
        """Whether a typed store (or a ``(kind, format)`` pair) can be queried as this type."""
        kf = store if isinstance(store, tuple) else store_kind_and_format(store)
        if kf is None:
            return False
        kind, fmt = kf
        return kind == self.kind and fmt in self.accepted

    def converter(self, store_format: ValueFormat) -> Any:
        """The function turning a value of a ``store_format`` store into this type's value,
        or None when no conversion is needed."""
        if store_format == self.format:
            return None
        if self.format == ValueFormat.PLAIN:
            return _to_plain
        if self.format == ValueFormat.TIMESTAMPED:
            return _to_timestamped
        raise InvalidArgumentError(f"{self.name} cannot convert {store_format.name} values")

    @property
    def value_type(self) -> str:
        """The Python type name of the values this query returns (``"V"`` for plain)."""
        if self.format == ValueFormat.PLAIN:
            return "V"
        if self.format == ValueFormat.TIMESTAMPED:
            return ValueAndTimestamp.__name__
        if self.format == ValueFormat.HEADERS:
            return ValueTimestampHeaders.__name__
        return (AggregationWithHeaders if self.kind == "session" else ValueAndHeaders).__name__

    def __str__(self) -> str:
        return f"txstore.queries.QueryableStoreTypes${self.java_name}"


def _qt(name: str, kind: str, fmt: ValueFormat, accepted: set[ValueFormat], java: str) -> Any:
    return QueryableStoreType(name, kind, fmt, frozenset(accepted), java)


_TYPES: dict[str, QueryableStoreType] = {
    t.name: t
    for t in (
        _qt("key_value_store", "key_value", _P, {_P, _T, _H}, "KeyValueStoreType"),
        _qt(
            "timestamped_key_value_store",
            "key_value",
            _T,
            {_T, _H},
            "TimestampedKeyValueStoreType",
        ),
        _qt(
            "timestamped_key_value_store_with_headers",
            "key_value",
            _H,
            {_H},
            "TimestampedKeyValueStoreWithHeadersType",
        ),
        _qt("window_store", "window", _P, {_P, _T, _H, _PH}, "WindowStoreType"),
        _qt("timestamped_window_store", "window", _T, {_T, _H}, "TimestampedWindowStoreType"),
        _qt(
            "timestamped_window_store_with_headers",
            "window",
            _H,
            {_H},
            "TimestampedWindowStoreWithHeadersType",
        ),
        _qt("window_store_with_headers", "window", _PH, {_PH}, "WindowStoreWithHeadersType"),
        _qt("session_store", "session", _P, {_P, _T, _H, _PH}, "SessionStoreType"),
        _qt("timestamped_session_store", "session", _T, {_T, _H}, "TimestampedSessionStoreType"),
        _qt(
            "timestamped_session_store_with_headers",
            "session",
            _H,
            {_H},
            "TimestampedSessionStoreWithHeadersType",
        ),
        _qt("session_store_with_headers", "session", _PH, {_PH}, "SessionStoreWithHeadersType"),
    )
}


class QueryableStoreTypes:
    """Factories of the queryable store types (Kafka's ``QueryableStoreTypes``).

    ``accepts`` follows Kafka, headers variants included (KIP-1271): a type accepts a store
    whose values carry at least what the type returns.

    ==========================================  ==========================================
    type                                        accepts stores of format
    ==========================================  ==========================================
    ``key_value_store``                         PLAIN, TIMESTAMPED, HEADERS (values only)
    ``timestamped_key_value_store``             TIMESTAMPED, HEADERS
    ``timestamped_key_value_store_with_headers``  HEADERS
    ``window_store``                            every window format (values only)
    ``timestamped_window_store``                TIMESTAMPED, HEADERS
    ``timestamped_window_store_with_headers``   HEADERS
    ``window_store_with_headers``               PLAIN_HEADERS (txstore's plain window with
                                                headers)
    ``session_store``                           every session format (aggregations only)
    ``timestamped_session_store``               TIMESTAMPED, HEADERS (txstore's: Kafka has no
                                                timestamped session store)
    ``timestamped_session_store_with_headers``  HEADERS
    ``session_store_with_headers``              PLAIN_HEADERS
    ==========================================  ==========================================

    >>> QueryableStoreTypes.key_value_store().accepts(("key_value", ValueFormat.TIMESTAMPED))
    True
    >>> QueryableStoreTypes.timestamped_key_value_store().accepts(("key_value", ValueFormat.PLAIN))
    False
    """

    @staticmethod
    def key_value_store() -> QueryableStoreType:
        """Plain values from any key-value store."""
        return _TYPES["key_value_store"]

    @staticmethod
    def timestamped_key_value_store() -> QueryableStoreType:
        """``ValueAndTimestamp`` values from timestamped key-value stores."""
        return _TYPES["timestamped_key_value_store"]

    @staticmethod
    def timestamped_key_value_store_with_headers() -> QueryableStoreType:
        """``ValueTimestampHeaders`` values from key-value stores with headers."""
        return _TYPES["timestamped_key_value_store_with_headers"]

    @staticmethod
    def window_store() -> QueryableStoreType:
        """Plain values from any window store."""
        return _TYPES["window_store"]

    @staticmethod
    def timestamped_window_store() -> QueryableStoreType:
        """``ValueAndTimestamp`` values from timestamped window stores."""
        return _TYPES["timestamped_window_store"]

    @staticmethod
    def timestamped_window_store_with_headers() -> QueryableStoreType:
        """``ValueTimestampHeaders`` values from timestamped window stores with headers."""
        return _TYPES["timestamped_window_store_with_headers"]

    @staticmethod
    def window_store_with_headers() -> QueryableStoreType:
        """``ValueAndHeaders`` values from plain window stores with headers."""
        return _TYPES["window_store_with_headers"]

    @staticmethod
    def session_store() -> QueryableStoreType:
        """Plain aggregations from any session store."""
        return _TYPES["session_store"]

    @staticmethod
    def timestamped_session_store() -> QueryableStoreType:
        """``ValueAndTimestamp`` aggregations from timestamped session stores (with or without
        headers). Kafka has no such type: it never shipped a timestamped session store."""
        return _TYPES["timestamped_session_store"]

    @staticmethod
    def timestamped_session_store_with_headers() -> QueryableStoreType:
        """``ValueTimestampHeaders`` aggregations from timestamped session stores with
        headers (the ``HEADERS`` format)."""
        return _TYPES["timestamped_session_store_with_headers"]

    @staticmethod
    def session_store_with_headers() -> QueryableStoreType:
        """``AggregationWithHeaders`` values from session stores with headers."""
        return _TYPES["session_store_with_headers"]

    @staticmethod
    def by_name(name: str) -> QueryableStoreType:
        """The type called ``name`` (``"key_value_store"``...), as the HTTP API names them."""
        try:
            return _TYPES[name]
        except KeyError:
            raise InvalidArgumentError(
                f"unknown queryable store type {name!r}; one of {', '.join(sorted(_TYPES))}"
            ) from None

    @staticmethod
    def names() -> list[str]:
        """Every type name."""
        return sorted(_TYPES)

    @staticmethod
    def default_for(kind: str, fmt: ValueFormat) -> QueryableStoreType:
        """The type returning a store's own values (its format, unconverted)."""
        for t in _TYPES.values():
            if t.kind == kind and t.format == fmt:
                return t
        raise InvalidArgumentError(f"no queryable store type for {kind} stores in {fmt.name}")


# ---- query parameters --------------------------------------------------------------------


@dataclass(frozen=True)
class StoreQueryParameters:
    """Which store to query and how (Kafka's ``StoreQueryParameters``); immutable, each
    ``with_``/``enable_`` method returns a new object.

    * ``with_partition(p)``: only partition ``p`` (raises
      :class:`~txstore.errors.InvalidStateStorePartitionError` if it is not hosted here);
    * ``enable_stale_stores()``: standby replicas too, and queries while restoring;
    * ``enable_read_committed()``: committed data only (KIP-892); never blocks the writer.
      The default reads uncommitted writes too (see ``docs/queries.md`` for the threading).
    """

    store_name: str
    """The store to query."""
    queryable_store_type: QueryableStoreType
    """What the query expects the store to be (:class:`QueryableStoreTypes`)."""
    partition: int | None = None
    """Only this partition (``None``: all hosted ones)."""
    stale_stores: bool = False
    """Whether standby replicas and restoring partitions may answer."""
    read_committed: bool = False
    """Whether reads see committed data only."""

    def __post_init__(self) -> None:
        if not isinstance(self.store_name, str) or not self.store_name:
            raise InvalidTypeError("store_name must be a non-empty str")
        if not isinstance(self.queryable_store_type, QueryableStoreType):
            raise InvalidTypeError(
                "queryable_store_type must come from QueryableStoreTypes, got "
                f"{type(self.queryable_store_type).__name__}"
            )
        p = self.partition
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 0):
            raise InvalidArgumentError(f"partition must be an int >= 0, got {p!r}")

    @classmethod
    def from_name_and_type(
        cls, store_name: str, queryable_store_type: QueryableStoreType
    ) -> StoreQueryParameters:
        """Parameters for ``store_name`` queried as ``queryable_store_type``."""
        return cls(store_name, queryable_store_type)

    def with_partition(self, partition: int | None) -> StoreQueryParameters:
        """Only ``partition`` (``None``: every local partition)."""
        return replace(self, partition=partition)

    def with_all_partitions(self) -> StoreQueryParameters:
        """Every local partition (the default)."""
        return replace(self, partition=None)

    def enable_stale_stores(self) -> StoreQueryParameters:
        """Also standby replicas, and partitions while the instance restores others."""
        return replace(self, stale_stores=True)

    def enable_read_committed(self) -> StoreQueryParameters:
        """Committed data only."""
        return replace(self, read_committed=True)

    # Kafka spellings
    def stale_stores_enabled(self) -> bool:
        """Whether stale stores are enabled."""
        return self.stale_stores


# ---- metadata ----------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class HostInfo:
    """An instance's ``application_server`` address; ordered by (host, port) as Kafka sorts
    hosts."""

    host: str
    """Host name or address."""
    port: int
    """Port of the instance's query service."""

    UNAVAILABLE: ClassVar[HostInfo]
    """Kafka's ``HostInfo.unavailable()``: ``("unavailable", -1)``."""

    @classmethod
    def parse(cls, text: str) -> HostInfo:
        """Parse ``host:port`` (``[v6addr]:port`` for IPv6)."""
        if not isinstance(text, str):
            raise InvalidTypeError(f"application_server must be a str, got {type(text).__name__}")
        host, sep, port = text.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise InvalidArgumentError(
                f"application_server must be 'host:port' with a port in 0..65535, got {text!r}"
            )
        return cls(host, int(port))

    @classmethod
    def unavailable(cls) -> HostInfo:
        """Kafka's ``HostInfo.unavailable()``: ``("unavailable", -1)``."""
        return cls.UNAVAILABLE

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


HostInfo.UNAVAILABLE = HostInfo("unavailable", -1)


class TopicPartition(NamedTuple):
    """A partition of the application's source topic."""

    topic: str
    """The source topic."""
    partition: int
    """The partition number."""


@dataclass(frozen=True)
class StreamsMetadata:
    """What one instance hosts (Kafka's ``StreamsMetadata``): its address, the stores and
    partitions it hosts as active, and those it hosts as standby."""

    host_info: HostInfo
    """The instance's address."""
    state_store_names: frozenset[str] = field(default_factory=frozenset)
    """Stores it hosts as active."""
    topic_partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    """Partitions it hosts as active."""
    standby_state_store_names: frozenset[str] = field(default_factory=frozenset)
    """Stores it hosts as standby."""
    standby_topic_partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    """Partitions it hosts as standby."""

    @property
    def host(self) -> str:
        """The host name."""
        return self.host_info.host

    @property
    def port(self) -> int:
        """The port."""
        return self.host_info.port

    @property
    def partitions(self) -> list[int]:
        """The active partition numbers, sorted."""
        return sorted(tp.partition for tp in self.topic_partitions)

    @property
    def standby_partitions(self) -> list[int]:
        """The standby partition numbers, sorted."""
        return sorted(tp.partition for tp in self.standby_topic_partitions)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the HTTP API's form)."""
        return {
            "host": self.host,
            "port": self.port,
            "state_store_names": sorted(self.state_store_names),
            "partitions": self.partitions,
            "standby_state_store_names": sorted(self.standby_state_store_names),
            "standby_partitions": self.standby_partitions,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], topic: str = "") -> StreamsMetadata:
        """The inverse of :meth:`to_json`."""
        return cls(
            HostInfo(str(doc["host"]), int(doc["port"])),
            frozenset(doc.get("state_store_names", ())),
            frozenset(TopicPartition(topic, int(p)) for p in doc.get("partitions", ())),
            frozenset(doc.get("standby_state_store_names", ())),
            frozenset(TopicPartition(topic, int(p)) for p in doc.get("standby_partitions", ())),
        )


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key lives (Kafka's ``KeyQueryMetadata``): the active host, the standby hosts
    and the partition. :attr:`NOT_AVAILABLE` when the metadata is not known yet."""

    active_host: HostInfo
    """The instance that owns the key's partition."""
    standby_hosts: frozenset[HostInfo]
    """Instances with a standby of it."""
    partition: int
    """The key's partition."""

    NOT_AVAILABLE: ClassVar[KeyQueryMetadata]
    """The metadata of a key not known yet (Kafka's ``KeyQueryMetadata.NOT_AVAILABLE``)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the HTTP API's form)."""
        return {
            "active_host": {"host": self.active_host.host, "port": self.active_host.port},
            "standby_hosts": [{"host": h.host, "port": h.port} for h in sorted(self.standby_hosts)],
            "partition": self.partition,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> KeyQueryMetadata:
        """The inverse of :meth:`to_json`."""
        active = doc["active_host"]
        return cls(
            HostInfo(str(active["host"]), int(active["port"])),
            frozenset(HostInfo(str(h["host"]), int(h["port"])) for h in doc["standby_hosts"]),
            int(doc["partition"]),
        )


KeyQueryMetadata.NOT_AVAILABLE = KeyQueryMetadata(HostInfo.UNAVAILABLE, frozenset(), -1)
