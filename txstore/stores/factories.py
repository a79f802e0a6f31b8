"""``Stores``: Kafka Streams' store factory, in snake_case.

A *supplier* says where a store's bytes live and in which format (``persistent_*`` in the
partition's LMDB environment, ``in_memory_*`` in a sorted dict); a *builder* adds the serdes and
the typed interface, and ``build(db)`` opens the store in a
:class:`~txstore.runtime.database.Database`.

Key-value, window and session stores each have their suppliers and builders, with Kafka's names
(``persistent_timestamped_window_store``, ``session_store_builder``...). Durations are ``int``
milliseconds or ``datetime.timedelta`` (Java's ``long`` and ``Duration`` overloads). A builder
of a richer format over a persistent supplier of an older one wraps it in the matching adapter
(:mod:`txstore.bytestores.adapters`); in-memory suppliers, like Kafka's, keep whatever format
their builder uses. See ``docs/stores.md`` for the full mapping.

>>> import tempfile, txstore
>>> from txstore import Serdes, ValueAndTimestamp
>>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
...     counts = Stores.timestamped_key_value_store_builder(
...         Stores.persistent_timestamped_key_value_store("counts"),
...         Serdes.string(), Serdes.long()).build(db)
...     counts.put("alice", ValueAndTimestamp(3, 1000))
...     counts.commit(changelog_offset=0)
...     counts.get("alice")
ValueAndTimestamp(value=3, timestamp=1000)
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, TypeVar

from txstore.codecs import ValueFormat
from txstore.stores.builders import (
    KeyValueStoreBuilder,
    KeyValueStoreSupplier,
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
    session_supplier,
    window_supplier,
)
from txstore.stores.serdes import Serde

__all__ = ["Stores"]

K = TypeVar("K")
V = TypeVar("V")

PLAIN, TIMESTAMPED, HEADERS, PLAIN_HEADERS = (
    ValueFormat.PLAIN,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
    ValueFormat.PLAIN_HEADERS,
)


class Stores:
    """Factories for store suppliers and builders (Kafka's ``Stores``).

    Every factory is O(1): it validates its arguments and returns a frozen dataclass; nothing
    touches disk until a builder's ``build(db)``. Durations are ``int`` milliseconds or
    ``datetime.timedelta``; window and session segments span ``max(retention // 2, 60000)`` ms.

    Suppliers raise :class:`~txstore.errors.InvalidTypeError` for a name that is not a ``str``,
    a duration that is neither ``int`` nor ``timedelta`` or a flag that is not a ``bool``, and
    :class:`~txstore.errors.InvalidArgumentError` for an empty name, a ``None`` or negative
    duration, or a window size above the retention (the other name rules, such as the
    reserved ``__txstore`` prefix, are checked by ``build``). Builders raise
    ``InvalidTypeError`` for a serde without ``name``, ``serialize()`` and ``deserialize()``
    (every builder also for a supplier of another kind). A persistent supplier
    in a richer format than its builder's makes ``build(db)`` raise ``InvalidArgumentError``
    (a downgrade would drop timestamps or headers); a poorer one is adapted.

    >>> import datetime
    >>> clicks = Stores.persistent_window_store(
    ...     "clicks", datetime.timedelta(hours=1), 60_000, False)
    >>> clicks.retention_period, clicks.segment_interval
    (3600000, 1800000)
    >>> Stores.persistent_window_store("clicks", 1_000, 60_000, False)
    Traceback (most recent call last):
    ...
    txstore.errors.InvalidArgumentError: The retention period of the window store clicks ...
    """

    @staticmethod
    def persistent_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A plain key-value store in the partition's LMDB environment.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreSupplier(name, True, ValueFormat.PLAIN, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A key-value store of ``[ts][value]`` values (KIP-258).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreSupplier(name, True, ValueFormat.TIMESTAMPED, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store_with_headers(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A key-value store of ``[headers][ts][value]`` values (KIP-1271).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreSupplier(name, True, ValueFormat.HEADERS, transactional)

    @staticmethod
    def in_memory_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A plain key-value store held in memory (lost on close).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreSupplier(name, False, ValueFormat.PLAIN, transactional)

    @staticmethod
    def in_memory_timestamped_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_timestamped_key_value_store`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreSupplier(name, False, ValueFormat.TIMESTAMPED, transactional)

    @staticmethod
    def in_memory_timestamped_key_value_store_with_headers(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """The in-memory counterpart of the timestamped store with headers.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreSupplier(name, False, ValueFormat.HEADERS, transactional)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueStoreSupplier, key_serde: Serde[K], value_serde: Serde[V]
    ) -> KeyValueStoreBuilder[K, V]:
        """A builder of plain ``KeyValueStore[K, V]`` stores.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, ValueFormat.PLAIN)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: KeyValueStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> KeyValueStoreBuilder[K, Any]:
        """A builder of stores whose values are :class:`~txstore.types.ValueAndTimestamp`.

        Over a plain persistent supplier, values are adapted: reads get timestamp -1, writes
        drop it.
        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, ValueFormat.TIMESTAMPED)

    @staticmethod
    def timestamped_key_value_store_with_headers_builder(
        supplier: KeyValueStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> KeyValueStoreBuilder[K, Any]:
        """A builder of stores whose values are :class:`~txstore.types.ValueTimestampHeaders`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, ValueFormat.HEADERS)

    # ---- window stores ----------------------------------------------------------------

    @staticmethod
    def persistent_window_store(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """A window store of plain ``[value]`` values, segments of ``max(retention // 2,
        60000)`` ms (Kafka's ``persistentWindowStore``).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name, retention_period, window_size, retain_duplicates, True, PLAIN, transactional
        )

    @staticmethod
    def persistent_timestamped_window_store(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """A window store of ``[ts][value]`` values (KIP-258).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name, retention_period, window_size, retain_duplicates, True, TIMESTAMPED, transactional
        )

    @staticmethod
    def persistent_timestamped_window_store_with_headers(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """A window store of ``[headersSize][headers][ts][value]`` values (KIP-1271).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name, retention_period, window_size, retain_duplicates, True, HEADERS, transactional
        )

    @staticmethod
    def persistent_window_store_with_headers(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """The plain window store with headers (WindowStoreWithHeaders proposal):
        ``[headersSize][headers][value]``, 8 bytes a record smaller than the timestamped one.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name,
            retention_period,
            window_size,
            retain_duplicates,
            True,
            PLAIN_HEADERS,
            transactional,
        )

    @staticmethod
    def in_memory_window_store(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """A window store held in memory (Kafka's ``inMemoryWindowStore``): lost on close,
        records expire one by one.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name, retention_period, window_size, retain_duplicates, False, PLAIN, transactional
        )

    @staticmethod
    def in_memory_timestamped_window_store(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_timestamped_window_store`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name,
            retention_period,
            window_size,
            retain_duplicates,
            False,
            TIMESTAMPED,
            transactional,
        )

    @staticmethod
    def in_memory_timestamped_window_store_with_headers(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_timestamped_window_store_with_headers`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name, retention_period, window_size, retain_duplicates, False, HEADERS, transactional
        )

    @staticmethod
    def in_memory_window_store_with_headers(
        name: str,
        retention_period: int | _dt.timedelta,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool,
        *,
        transactional: bool = True,
    ) -> WindowBytesStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_window_store_with_headers`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return window_supplier(
            name,
            retention_period,
            window_size,
            retain_duplicates,
            False,
            PLAIN_HEADERS,
            transactional,
        )

    @staticmethod
    def window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[V]
    ) -> WindowStoreBuilder[K, V]:
        """A builder of plain ``WindowStore[K, V]`` stores.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return WindowStoreBuilder(supplier, key_serde, value_serde, PLAIN)

    @staticmethod
    def timestamped_window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> WindowStoreBuilder[K, Any]:
        """A builder of window stores of :class:`~txstore.types.ValueAndTimestamp` values.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return WindowStoreBuilder(supplier, key_serde, value_serde, TIMESTAMPED)

    @staticmethod
    def timestamped_window_store_with_headers_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> WindowStoreBuilder[K, Any]:
        """A builder of window stores of :class:`~txstore.types.ValueTimestampHeaders`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return WindowStoreBuilder(supplier, key_serde, value_serde, HEADERS)

    @staticmethod
    def window_store_with_headers_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> WindowStoreBuilder[K, Any]:
        """A builder of window stores of :class:`~txstore.types.ValueAndHeaders` values.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return WindowStoreBuilder(supplier, key_serde, value_serde, PLAIN_HEADERS)

    # ---- session stores ---------------------------------------------------------------

    @staticmethod
    def persistent_session_store(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of plain aggregations, segmented by session end.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, True, PLAIN, transactional)

    @staticmethod
    def persistent_session_store_with_headers(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of ``[headersSize][headers][aggregation]`` values (KIP-1271).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, True, PLAIN_HEADERS, transactional)

    @staticmethod
    def in_memory_session_store(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store held in memory (also answers the time-only ``find_sessions``).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, False, PLAIN, transactional)

    @staticmethod
    def in_memory_session_store_with_headers(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_session_store_with_headers`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, False, PLAIN_HEADERS, transactional)

    @staticmethod
    def persistent_timestamped_session_store(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of ``[ts][aggregation]`` values: the aggregation and the time of
        its last update, as :class:`~txstore.types.ValueAndTimestamp` (KIP-258 names this
        store; Kafka never shipped it). Reopening a plain session store with it upgrades the
        store lazily (old sessions read with timestamp -1).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, True, TIMESTAMPED, transactional)

    @staticmethod
    def persistent_timestamped_session_store_with_headers(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of ``[headersSize][headers][ts][aggregation]`` values
        (:class:`~txstore.types.ValueTimestampHeaders`, the ``HEADERS`` format).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, True, HEADERS, transactional)

    @staticmethod
    def in_memory_timestamped_session_store(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_timestamped_session_store`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, False, TIMESTAMPED, transactional)

    @staticmethod
    def in_memory_timestamped_session_store_with_headers(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """The in-memory counterpart of
        :meth:`persistent_timestamped_session_store_with_headers`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return session_supplier(name, retention_period, False, HEADERS, transactional)

    @staticmethod
    def session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[V]
    ) -> SessionStoreBuilder[K, V]:
        """A builder of plain ``SessionStore[K, V]`` stores.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return SessionStoreBuilder(supplier, key_serde, value_serde, PLAIN)

    @staticmethod
    def session_store_with_headers_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> SessionStoreBuilder[K, Any]:
        """A builder of session stores of :class:`~txstore.types.AggregationWithHeaders`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return SessionStoreBuilder(supplier, key_serde, value_serde, PLAIN_HEADERS)

    @staticmethod
    def timestamped_session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> SessionStoreBuilder[K, Any]:
        """A builder of session stores of :class:`~txstore.types.ValueAndTimestamp`
        aggregations. Over a plain persistent supplier, values are adapted: reads get
        timestamp -1, writes drop it.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return SessionStoreBuilder(supplier, key_serde, value_serde, TIMESTAMPED)

    @staticmethod
    def timestamped_session_store_with_headers_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> SessionStoreBuilder[K, Any]:
        """A builder of session stores of :class:`~txstore.types.ValueTimestampHeaders`
        aggregations (the ``HEADERS`` format).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return SessionStoreBuilder(supplier, key_serde, value_serde, HEADERS)
