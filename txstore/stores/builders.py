"""Store suppliers and builders: what a store is (name, kind, format, durations, serdes).

A *supplier* says where a store's bytes live and in which format (``persistent_*`` in the
partition's LMDB environment, ``in_memory_*`` in a sorted dict); a *builder* adds the serdes and
the typed interface, and ``build(db)`` opens the store through ``db.open_store`` (a
:class:`~txstore.runtime.Database` or anything with that method), ``build()`` an in-memory
one; both go through :func:`txstore.stores.assembly.assemble`. Create them with
:class:`~txstore.stores.factories.Stores`.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from txstore.bytestores.adapters import check_format
from txstore.codecs import ValueFormat
from txstore.engine.base import check_store_name
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.stores.assembly import StoreHost, StoreKind, assemble
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import Serde
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

__all__ = [
    "KeyValueStoreBuilder",
    "KeyValueStoreSupplier",
    "SessionBytesStoreSupplier",
    "SessionStoreBuilder",
    "WindowBytesStoreSupplier",
    "WindowStoreBuilder",
    "millis",
    "session_supplier",
    "window_supplier",
]

K = TypeVar("K")
V = TypeVar("V")


def _check_serdes(key_serde: object, value_serde: object) -> None:
    for label, serde in (("key", key_serde), ("value", value_serde)):
        if not isinstance(serde, Serde):
            raise InvalidTypeError(
                f"{label} serde must have name, serialize() and deserialize(); "
                f"got {type(serde).__name__}"
            )


def millis(value: object, what: str) -> int:
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

    @property
    def kind(self) -> StoreKind:
        """``"window"``."""
        return "window"

    def config(self) -> dict[str, Any]:
        """What the store's metadata records besides kind, format and serdes."""
        return {
            "retention": self.retention_period,
            "segment_interval": self.segment_interval,
            "window_size": self.window_size,
            "retain_duplicates": self.retain_duplicates,
        }

    def __post_init__(self) -> None:
        check_store_name(self.name)
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

    @property
    def kind(self) -> StoreKind:
        """``"session"``."""
        return "session"

    def config(self) -> dict[str, Any]:
        """What the store's metadata records besides kind, format and serdes."""
        return {"retention": self.retention_period, "segment_interval": self.segment_interval}

    def __post_init__(self) -> None:
        check_store_name(self.name)
        check_format("session", self.format, self.name)
        if self.retention_period < 0:
            raise InvalidArgumentError("retentionPeriod cannot be negative")
        if self.segment_interval < 1:
            raise InvalidArgumentError("segmentInterval cannot be zero or negative")
        for label in ("transactional", "persistent"):
            if not isinstance(getattr(self, label), bool):
                raise InvalidTypeError(f"{label} must be a bool")


def window_supplier(
    name: str,
    retention: int | _dt.timedelta,
    window_size: int | _dt.timedelta,
    retain_duplicates: bool,
    persistent: bool,
    fmt: ValueFormat,
    transactional: bool,
) -> WindowBytesStoreSupplier:
    check_store_name(name)
    r = millis(retention, "retentionPeriod")
    w = millis(window_size, "windowSize")
    return WindowBytesStoreSupplier(
        name, persistent, fmt, r, w, retain_duplicates, max(r // 2, 60_000), transactional
    )


def session_supplier(
    name: str, retention: int | _dt.timedelta, persistent: bool, fmt: ValueFormat, tx: bool
) -> SessionBytesStoreSupplier:
    check_store_name(name)
    r = millis(retention, "retentionPeriod")
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

    @property
    def kind(self) -> StoreKind:
        """The kind of store built (the supplier's). O(1)."""
        return self.supplier.kind

    def build(self, db: StoreHost | None = None) -> WindowStore[K, V]:
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
            return cast(WindowStore[K, V], assemble(self, None).store)
        return cast(WindowStore[K, V], db.open_store(self))


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

    @property
    def kind(self) -> StoreKind:
        """The kind of store built (the supplier's). O(1)."""
        return self.supplier.kind

    def build(self, db: StoreHost | None = None) -> SessionStore[K, V]:
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
            return cast(SessionStore[K, V], assemble(self, None).store)
        return cast(SessionStore[K, V], db.open_store(self))


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

    @property
    def kind(self) -> StoreKind:
        """``"key_value"``."""
        return "key_value"

    def config(self) -> dict[str, Any]:
        """What the store's metadata records besides kind, format and serdes: nothing."""
        return {}

    def __post_init__(self) -> None:
        check_store_name(self.name)
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

    @property
    def kind(self) -> StoreKind:
        """The kind of store built (the supplier's). O(1)."""
        return self.supplier.kind

    def build(self, db: StoreHost | None = None) -> KeyValueStore[K, V]:
        """Open the key-value store in ``db`` (in-memory stores need no database).

        Persistent: a few LMDB read transactions over the partition's metadata (O(stores) for
        the name check), plus one LMDB write transaction on first open or a format upgrade;
        in-memory: O(1).
        Raises :class:`~txstore.errors.InvalidArgumentError` for a persistent store without a
        database, an in-memory one with a database, a store already open in ``db``, a name
        that collides with another store's databases or a format downgrade;
        :class:`~txstore.errors.ConfigConflictError` if the configuration on disk differs
        (serdes, retention...); :class:`~txstore.errors.StoreClosedError` if ``db`` is closed.

        >>> from txstore import Serdes, Stores
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
            return cast(KeyValueStore[K, V], assemble(self, None).store)
        return cast(KeyValueStore[K, V], db.open_store(self))
