"""``Stores``: Kafka Streams' store factory, in snake_case.

A *supplier* says where a store's bytes live and in which format (``persistent_*`` in the
partition's LMDB environment, ``in_memory_*`` in a sorted dict); a *builder* adds the serdes and
the typed interface, and ``build(db)`` opens the store in a
:class:`~txstore.runtime.database.Database`.

Key-value, window and session stores each have their suppliers and builders, with Kafka's names
(``persistent_timestamped_window_store``, ``session_store_builder``...). Durations are ``int``
milliseconds or ``datetime.timedelta`` (Java's ``long`` and ``Duration`` overloads). A builder
of a richer format over a persistent supplier of an older one wraps it in the matching adapter
(:mod:`txstore.bytestores.adapters`); in-memory suppliers, like Kafka's, keep whatever format their
builder
uses. See ``docs/stores.md`` for the full mapping.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from txstore.bytestores.adapters import check_format
from txstore.codecs import ValueFormat
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.stores.serdes import Serde

if TYPE_CHECKING:
    from txstore.runtime.database import Database
    from txstore.stores.kv import KeyValueStore
    from txstore.stores.session import SessionStore
    from txstore.stores.window import WindowStore

__all__ = [
    "KeyValueStoreBuilder",
    "KeyValueStoreSupplier",
    "SessionBytesStoreSupplier",
    "SessionStoreBuilder",
    "Stores",
    "WindowBytesStoreSupplier",
    "WindowStoreBuilder",
]

PLAIN, TIMESTAMPED, HEADERS, PLAIN_HEADERS = (
    ValueFormat.PLAIN,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
    ValueFormat.PLAIN_HEADERS,
)

K = TypeVar("K")
V = TypeVar("V")


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidTypeError(f"store name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError("store name cannot be empty")
    return name


def _check_serdes(key_serde: object, value_serde: object) -> None:
    for label, serde in (("key", key_serde), ("value", value_serde)):
        if not isinstance(serde, Serde):
            raise InvalidTypeError(
                f"{label} serde must have name, serialize() and deserialize(); "
                f"got {type(serde).__name__}"
            )


def _millis(value: object, what: str) -> int:
    """Milliseconds of an ``int`` or a ``timedelta`` (Kafka's long and Duration overloads)."""
    if value is None:
        raise InvalidArgumentError(f"{what} cannot be null")
    if isinstance(value, _dt.timedelta):
        return value // _dt.timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{what} must be an int (ms) or a timedelta")
    return value


@dataclass(frozen=True)
class WindowBytesStoreSupplier:
    """Where a window store's bytes live, their format, retention and segments.

    Validated as Kafka's ``Stores`` does: no negative retention or window size, and a
    retention no smaller than the window size. ``segment_interval`` defaults (in the
    factories) to ``max(retention // 2, 60000)``. Create one with the ``Stores`` window
    factories; construction is O(1) and raises
    :class:`~txstore.errors.InvalidArgumentError` (bad name, format, duration or interval) or
    :class:`~txstore.errors.InvalidTypeError` (a flag that is not a ``bool``).
    """

    name: str
    persistent: bool
    format: ValueFormat
    retention_period: int
    window_size: int
    retain_duplicates: bool
    segment_interval: int
    transactional: bool = True

    def __post_init__(self) -> None:
        _check_name(self.name)
        check_format("window", self.format, self.name)
        if self.retention_period < 0:
            raise InvalidArgumentError("retentionPeriod cannot be negative")
        if self.window_size < 0:
            raise InvalidArgumentError("windowSize cannot be negative")
        if self.segment_interval < 1:
            raise InvalidArgumentError("segmentInterval cannot be zero or negative")
        if self.window_size > self.retention_period:
            raise InvalidArgumentError(
                f"The retention period of the window store {self.name} must be no smaller "
                f"than its window size. Got size=[{self.window_size}], "
                f"retention=[{self.retention_period}]"
            )
        for label in ("retain_duplicates", "transactional", "persistent"):
            if not isinstance(getattr(self, label), bool):
                raise InvalidTypeError(f"{label} must be a bool")


@dataclass(frozen=True)
class SessionBytesStoreSupplier:
    """Where a session store's bytes live, their format, retention and segments.

    Create one with the ``Stores`` session factories; construction is O(1) and raises
    :class:`~txstore.errors.InvalidArgumentError` (bad name, format, retention or interval) or
    :class:`~txstore.errors.InvalidTypeError` (a flag that is not a ``bool``).
    """

    name: str
    persistent: bool
    format: ValueFormat
    retention_period: int
    segment_interval: int
    transactional: bool = True

    def __post_init__(self) -> None:
        _check_name(self.name)
        check_format("session", self.format, self.name)
        if self.retention_period < 0:
            raise InvalidArgumentError("retentionPeriod cannot be negative")
        if self.segment_interval < 1:
            raise InvalidArgumentError("segmentInterval cannot be zero or negative")
        for label in ("transactional", "persistent"):
            if not isinstance(getattr(self, label), bool):
                raise InvalidTypeError(f"{label} must be a bool")


def _window(
    name: str,
    retention: int | _dt.timedelta,
    window_size: int | _dt.timedelta,
    retain_duplicates: bool,
    persistent: bool,
    fmt: ValueFormat,
    transactional: bool,
) -> WindowBytesStoreSupplier:
    _check_name(name)
    r = _millis(retention, "retentionPeriod")
    w = _millis(window_size, "windowSize")
    return WindowBytesStoreSupplier(
        name, persistent, fmt, r, w, retain_duplicates, max(r // 2, 60_000), transactional
    )


def _session(
    name: str, retention: int | _dt.timedelta, persistent: bool, fmt: ValueFormat, tx: bool
) -> SessionBytesStoreSupplier:
    _check_name(name)
    r = _millis(retention, "retentionPeriod")
    return SessionBytesStoreSupplier(name, persistent, fmt, r, max(r // 2, 60_000), tx)


@dataclass(frozen=True)
class WindowStoreBuilder(Generic[K, V]):
    """A window supplier plus serdes and the format the store is used in.

    Create one with :meth:`Stores.window_store_builder` (or its timestamped and headers
    variants); ``build(db)`` opens the store.
    """

    supplier: WindowBytesStoreSupplier
    key_serde: Serde[K]
    value_serde: Serde[Any]
    format: ValueFormat

    def __post_init__(self) -> None:
        if not isinstance(self.supplier, WindowBytesStoreSupplier):
            raise InvalidTypeError("a window store builder needs a WindowBytesStoreSupplier")
        _check_serdes(self.key_serde, self.value_serde)

    @property
    def name(self) -> str:
        """The store's name (the supplier's). O(1)."""
        return self.supplier.name

    def build(self, db: Database | None = None) -> WindowStore[K, V]:
        """Open the window store in ``db`` (in-memory stores need no database).

        Persistent: a few LMDB read transactions over the partition's metadata (O(stores) for
        the name check) and the segment registry (O(segments)), plus one LMDB write
        transaction on first open or a format upgrade; in-memory: O(1).
        Raises :class:`~txstore.errors.InvalidArgumentError` for a persistent store without a
        database, an in-memory one with a database, a store already open in ``db``, a name
        that collides with another store's databases or a format downgrade;
        :class:`~txstore.errors.ConfigConflictError` if the configuration on disk differs
        (serdes, retention...); :class:`~txstore.errors.StoreClosedError` if ``db`` is closed.
        """
        if db is None:
            if self.supplier.persistent:
                raise InvalidArgumentError(
                    f"persistent store {self.name!r} needs a database: build(txstore.open(path))"
                )
            from txstore.runtime.database import in_memory_window_store

            return in_memory_window_store(self)
        return db.open_window_store(self)


@dataclass(frozen=True)
class SessionStoreBuilder(Generic[K, V]):
    """A session supplier plus serdes and the format the store is used in.

    Create one with :meth:`Stores.session_store_builder` (or
    :meth:`Stores.session_store_with_headers_builder`); ``build(db)`` opens the store.
    """

    supplier: SessionBytesStoreSupplier
    key_serde: Serde[K]
    value_serde: Serde[Any]
    format: ValueFormat

    def __post_init__(self) -> None:
        if not isinstance(self.supplier, SessionBytesStoreSupplier):
            raise InvalidTypeError("a session store builder needs a SessionBytesStoreSupplier")
        _check_serdes(self.key_serde, self.value_serde)

    @property
    def name(self) -> str:
        """The store's name (the supplier's). O(1)."""
        return self.supplier.name

    def build(self, db: Database | None = None) -> SessionStore[K, V]:
        """Open the session store in ``db`` (in-memory stores need no database).

        Persistent: a few LMDB read transactions over the partition's metadata (O(stores) for
        the name check) and the segment registry (O(segments)), plus one LMDB write
        transaction on first open or a format upgrade; in-memory: O(1).
        Raises :class:`~txstore.errors.InvalidArgumentError` for a persistent store without a
        database, an in-memory one with a database, a store already open in ``db``, a name
        that collides with another store's databases or a format downgrade;
        :class:`~txstore.errors.ConfigConflictError` if the configuration on disk differs
        (serdes, retention...); :class:`~txstore.errors.StoreClosedError` if ``db`` is closed.
        """
        if db is None:
            if self.supplier.persistent:
                raise InvalidArgumentError(
                    f"persistent store {self.name!r} needs a database: build(txstore.open(path))"
                )
            from txstore.runtime.database import in_memory_session_store

            return in_memory_session_store(self)
        return db.open_session_store(self)


@dataclass(frozen=True)
class KeyValueStoreSupplier:
    """Where a key-value store's bytes live and their format.

    Create one with the ``Stores`` key-value factories; construction is O(1) and raises
    :class:`~txstore.errors.InvalidTypeError` or :class:`~txstore.errors.InvalidArgumentError`
    for a bad name or a non-``bool`` ``transactional``.
    """

    name: str
    persistent: bool
    format: ValueFormat
    transactional: bool = True

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.transactional, bool):
            raise InvalidTypeError("transactional must be a bool")


@dataclass(frozen=True)
class KeyValueStoreBuilder(Generic[K, V]):
    """A supplier plus serdes and the format the store is used in; ``build()`` opens it.

    Create one with :meth:`Stores.key_value_store_builder` (or its timestamped and headers
    variants).
    """

    supplier: KeyValueStoreSupplier
    key_serde: Serde[K]
    value_serde: Serde[Any]
    format: ValueFormat

    def __post_init__(self) -> None:
        if not isinstance(self.supplier, KeyValueStoreSupplier):
            raise InvalidTypeError("a key-value store builder needs a KeyValueStoreSupplier")
        _check_serdes(self.key_serde, self.value_serde)

    @property
    def name(self) -> str:
        """The store's name (the supplier's). O(1)."""
        return self.supplier.name

    def build(self, db: Database | None = None) -> KeyValueStore[K, V]:
        """Open the key-value store in ``db`` (in-memory stores need no database).

        Persistent: a few LMDB read transactions over the partition's metadata (O(stores) for
        the name check), plus one LMDB write transaction on first open or a format upgrade;
        in-memory: O(1).
        Raises :class:`~txstore.errors.InvalidArgumentError` for a persistent store without a
        database, an in-memory one with a database, a store already open in ``db``, a name
        that collides with another store's databases or a format downgrade;
        :class:`~txstore.errors.ConfigConflictError` if the configuration on disk differs
        (serdes, retention...); :class:`~txstore.errors.StoreClosedError` if ``db`` is closed.

        >>> from txstore import Serdes
        >>> cache = Stores.key_value_store_builder(
        ...     Stores.in_memory_key_value_store("cache"), Serdes.string(), Serdes.long())
        >>> with cache.build() as store:
        ...     store.put("a", 1)
        ...     store.get("a")
        1
        >>> Stores.key_value_store_builder(
        ...     Stores.persistent_key_value_store("kept"), Serdes.string(), Serdes.long()).build()
        Traceback (most recent call last):
        ...
        txstore.errors.InvalidArgumentError: persistent store 'kept' needs a database: ...
        """
        if db is None:
            if self.supplier.persistent:
                raise InvalidArgumentError(
                    f"persistent store {self.name!r} needs a database: build(txstore.open(path))"
                )
            from txstore.runtime.database import in_memory_key_value_store

            return in_memory_key_value_store(self)
        return db.open_key_value_store(self)


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
        return _window(
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
        return _window(
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
        return _window(
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
        return _window(
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
        return _window(
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
        return _window(
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
        return _window(
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
        return _window(
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
        return _session(name, retention_period, True, PLAIN, transactional)

    @staticmethod
    def persistent_session_store_with_headers(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of ``[headersSize][headers][aggregation]`` values (KIP-1271).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return _session(name, retention_period, True, PLAIN_HEADERS, transactional)

    @staticmethod
    def in_memory_session_store(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store held in memory (also answers the time-only ``find_sessions``).

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return _session(name, retention_period, False, PLAIN, transactional)

    @staticmethod
    def in_memory_session_store_with_headers(
        name: str, retention_period: int | _dt.timedelta, *, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_session_store_with_headers`.

        O(1), no I/O; bad arguments raise as listed under :class:`Stores`.
        """
        return _session(name, retention_period, False, PLAIN_HEADERS, transactional)

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
