"""``Stores``: Kafka Streams' store factory, in snake_case.

A *supplier* says where a store's bytes live and in which format (``persistent_*`` in the
partition's LMDB environment, ``in_memory_*`` in a sorted dict); a *builder* adds the serdes and
the typed interface, and ``build(db)`` opens the store in a :class:`~txstore.database.Database`.

>>> import tempfile, txstore
>>> from txstore import Serdes, ValueAndTimestamp
>>> with txstore.open(tempfile.mkdtemp()) as db:
...     counts = Stores.timestamped_key_value_store_builder(
...         Stores.persistent_timestamped_key_value_store("counts"),
...         Serdes.string(), Serdes.long()).build(db)
...     counts.put("alice", ValueAndTimestamp(3, 1000))
...     counts.commit(changelog_offset=0)
...     counts.get("alice")
ValueAndTimestamp(value=3, timestamp=1000)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from txstore.codecs import ValueFormat
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.serdes import Serde

if TYPE_CHECKING:
    from txstore.database import Database
    from txstore.kv import KeyValueStore

__all__ = ["KeyValueStoreBuilder", "KeyValueStoreSupplier", "Stores"]

K = TypeVar("K")
V = TypeVar("V")


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidTypeError(f"store name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError("store name cannot be empty")
    return name


@dataclass(frozen=True)
class KeyValueStoreSupplier:
    """Where a key-value store's bytes live and their format."""

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
    """A supplier plus serdes and the format the store is used in; ``build()`` opens it."""

    supplier: KeyValueStoreSupplier
    key_serde: Serde[K]
    value_serde: Serde[Any]
    format: ValueFormat

    def __post_init__(self) -> None:
        for label, serde in (("key", self.key_serde), ("value", self.value_serde)):
            if not isinstance(serde, Serde):
                raise InvalidTypeError(
                    f"{label} serde must have name, serialize() and deserialize(); "
                    f"got {type(serde).__name__}"
                )

    @property
    def name(self) -> str:
        return self.supplier.name

    def build(self, db: Database | None = None) -> KeyValueStore[K, V]:
        """Open the store in ``db`` (in-memory stores need no database)."""
        if db is None:
            if self.supplier.persistent:
                raise InvalidArgumentError(
                    f"persistent store {self.name!r} needs a database: build(txstore.open(path))"
                )
            from txstore.database import in_memory_key_value_store

            return in_memory_key_value_store(self)
        return db.open_key_value_store(self)


class Stores:
    """Factories for store suppliers and builders (Kafka's ``Stores``)."""

    @staticmethod
    def persistent_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A plain key-value store in the partition's LMDB environment."""
        return KeyValueStoreSupplier(name, True, ValueFormat.PLAIN, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A key-value store of ``[ts][value]`` values (KIP-258)."""
        return KeyValueStoreSupplier(name, True, ValueFormat.TIMESTAMPED, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store_with_headers(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A key-value store of ``[headers][ts][value]`` values (KIP-1271)."""
        return KeyValueStoreSupplier(name, True, ValueFormat.HEADERS, transactional)

    @staticmethod
    def in_memory_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """A plain key-value store held in memory (lost on close)."""
        return KeyValueStoreSupplier(name, False, ValueFormat.PLAIN, transactional)

    @staticmethod
    def in_memory_timestamped_key_value_store(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """The in-memory counterpart of :meth:`persistent_timestamped_key_value_store`."""
        return KeyValueStoreSupplier(name, False, ValueFormat.TIMESTAMPED, transactional)

    @staticmethod
    def in_memory_timestamped_key_value_store_with_headers(
        name: str, *, transactional: bool = True
    ) -> KeyValueStoreSupplier:
        """The in-memory counterpart of the timestamped store with headers."""
        return KeyValueStoreSupplier(name, False, ValueFormat.HEADERS, transactional)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueStoreSupplier, key_serde: Serde[K], value_serde: Serde[V]
    ) -> KeyValueStoreBuilder[K, V]:
        """A builder of plain ``KeyValueStore[K, V]`` stores."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, ValueFormat.PLAIN)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: KeyValueStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> KeyValueStoreBuilder[K, Any]:
        """A builder of stores whose values are :class:`~txstore.types.ValueAndTimestamp`.

        Over a plain supplier, values are adapted: reads get timestamp -1, writes drop it.
        """
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, ValueFormat.TIMESTAMPED)

    @staticmethod
    def timestamped_key_value_store_with_headers_builder(
        supplier: KeyValueStoreSupplier, key_serde: Serde[K], value_serde: Serde[Any]
    ) -> KeyValueStoreBuilder[K, Any]:
        """A builder of stores whose values are :class:`~txstore.types.ValueTimestampHeaders`."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, ValueFormat.HEADERS)
