"""txstore: an embedded transactional state store for Python.

Kafka Streams' state-store model (key-value, window and session stores in plain, timestamped
and header-carrying formats), byte-compatible with it, on LMDB, with KIP-892 transactional write
buffering. See ``docs/`` for the tour.
"""

from __future__ import annotations

from txstore.codecs import ValueFormat
from txstore.errors import (
    ConfigConflictError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
    SerializationError,
    StorageError,
    StoreClosedError,
    TxStoreError,
    UnsupportedOperationError,
)
from txstore.runtime.database import Database, open
from txstore.runtime.task import Task
from txstore.runtime.windowed_tables import (
    Materialized,
    SessionWindowedSerde,
    TimeWindowedSerde,
    WindowedSerdes,
    sessioned_table,
    windowed_table,
)
from txstore.stores.factories import Stores
from txstore.stores.formats import DslStoreFormat
from txstore.stores.kv import KeyValueStore, ReadOnlyKeyValueStore
from txstore.stores.serdes import Serde, Serdes, register_serde, serde_by_name
from txstore.stores.session import ReadOnlySessionStore, SessionStore
from txstore.stores.window import ReadOnlyWindowStore, WindowStore
from txstore.types import (
    NO_TIMESTAMP,
    AggregationWithHeaders,
    Header,
    Headers,
    KeyValue,
    SessionWindow,
    TimeWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.version import __version__

__all__ = [
    "NO_TIMESTAMP",
    "AggregationWithHeaders",
    "ConfigConflictError",
    "Database",
    "DslStoreFormat",
    "Header",
    "Headers",
    "InvalidArgumentError",
    "InvalidStateStoreError",
    "InvalidTypeError",
    "KeyValue",
    "KeyValueStore",
    "Materialized",
    "OffsetError",
    "ReadOnlyError",
    "ReadOnlyKeyValueStore",
    "ReadOnlySessionStore",
    "ReadOnlyWindowStore",
    "Serde",
    "Serdes",
    "SerializationError",
    "SessionStore",
    "SessionWindow",
    "SessionWindowedSerde",
    "StorageError",
    "StoreClosedError",
    "Stores",
    "Task",
    "TimeWindow",
    "TimeWindowedSerde",
    "TxStoreError",
    "UnsupportedOperationError",
    "ValueAndHeaders",
    "ValueAndTimestamp",
    "ValueFormat",
    "ValueTimestampHeaders",
    "WindowStore",
    "Windowed",
    "WindowedSerdes",
    "__version__",
    "open",
    "register_serde",
    "serde_by_name",
    "sessioned_table",
    "windowed_table",
]
