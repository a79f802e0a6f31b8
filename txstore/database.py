"""``txstore.open(path)``: a partition directory and the typed stores inside it.

A :class:`Database` is one partition (a task, in Kafka's words): one LMDB environment holding
every store of the partition as named databases, so that :meth:`Database.commit` can commit
several stores in one LMDB transaction (atomic across stores, which Kafka cannot do).

>>> import tempfile, txstore
>>> with txstore.open(tempfile.mkdtemp()) as db:
...     users = db.key_value_store("users", txstore.Serdes.string(), txstore.Serdes.json())
...     users.put("u1", {"name": "Ada"})
...     db.commit({"users": 41})
...     users.committed_offset, users.get("u1")
(41, {'name': 'Ada'})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from txstore.codecs import ValueFormat
from txstore.errors import InvalidArgumentError, InvalidTypeError, StoreClosedError
from txstore.formats import value_codec
from txstore.kv import KeyValueStore
from txstore.kv_bytes import BytesKeyValueStore
from txstore.partition import Partition
from txstore.serdes import Serde, Serdes
from txstore.stores import KeyValueStoreBuilder, KeyValueStoreSupplier

__all__ = ["Database", "open"]

K = TypeVar("K")
V = TypeVar("V")

#: Metadata format version of key-value stores written by this release.
KV_FORMAT_VERSION = 1

_FIELDS = {
    ValueFormat.PLAIN: frozenset(),
    ValueFormat.TIMESTAMPED: frozenset({"ts"}),
    ValueFormat.HEADERS: frozenset({"ts", "headers"}),
    ValueFormat.PLAIN_HEADERS: frozenset({"headers"}),
}


def _check_adaptable(name: str, stored: ValueFormat, used: ValueFormat) -> None:
    """A store may be used in a richer format than it stores (an upgrade adapter), never in
    a poorer one: that would silently drop timestamps or headers."""
    if not _FIELDS[stored] <= _FIELDS[used]:
        raise InvalidArgumentError(
            f"store {name!r} keeps {stored.name} values and cannot be used as a {used.name} "
            "store: downgrades are not supported (they would drop timestamps or headers)"
        )


class Database:
    """One partition directory: its LMDB environment, its stores, and multi-store commits.

    Open with :func:`txstore.open`. Thread model: one thread writes (puts and commits);
    read-committed views may be read from any thread or process.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        sync: bool = True,
        overlay_budget_bytes: int = 64 * 2**20,
        map_size: int | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {
            "readonly": readonly,
            "sync": sync,
            "overlay_budget_bytes": overlay_budget_bytes,
        }
        if map_size is not None:
            kwargs["map_size"] = map_size
        self.partition = Partition(path, **kwargs)
        self._stores: dict[str, KeyValueStore[Any, Any]] = {}

    @property
    def path(self) -> str:
        """The partition directory."""
        return str(self.partition.path)

    @property
    def closed(self) -> bool:
        return bool(self.partition.closed)

    def _check_open(self) -> None:
        if self.partition.closed:
            raise StoreClosedError(str(self.partition.path))

    def open_key_value_store(self, builder: KeyValueStoreBuilder[K, V]) -> KeyValueStore[K, V]:
        """Open (creating on first use) the key-value store ``builder`` describes.

        Reopening with another format or other serdes than the ones on disk raises
        :class:`~txstore.errors.ConfigConflictError`.
        """
        self._check_open()
        supplier = builder.supplier
        if not supplier.persistent:
            raise InvalidArgumentError(
                f"store {supplier.name!r} is in-memory; build it without a database"
            )
        _check_adaptable(supplier.name, supplier.format, builder.format)
        existing = self._stores.get(supplier.name)
        if existing is not None and existing.is_open:
            raise InvalidArgumentError(f"store {supplier.name!r} is already open in this database")
        self.partition.register_store(
            supplier.name,
            {
                "kind": "key_value",
                "format": supplier.format.name,
                "key_serde": builder.key_serde.name,
                "value_serde": builder.value_serde.name,
                "format_version": KV_FORMAT_VERSION,
            },
        )
        inner = BytesKeyValueStore(
            supplier.name, self.partition, transactional=supplier.transactional
        )
        store: KeyValueStore[K, V] = KeyValueStore(
            inner,
            builder.key_serde,
            value_codec(builder.format, builder.value_serde),
            supplier.format,
        )
        self._stores[supplier.name] = store
        return store

    def key_value_store(
        self,
        name: str,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[Any] | None = None,
        *,
        format: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
    ) -> KeyValueStore[K, Any]:
        """Shortcut for ``Stores`` builder + ``build(db)``: a persistent key-value store.

        Serdes default to bytes; ``format`` is one of ``ValueFormat.PLAIN``, ``TIMESTAMPED``
        and ``HEADERS``.
        """
        if not isinstance(format, ValueFormat) or format == ValueFormat.PLAIN_HEADERS:
            raise InvalidArgumentError(
                f"key-value stores are PLAIN, TIMESTAMPED or HEADERS, not {format!r}"
            )
        supplier = KeyValueStoreSupplier(name, True, format, transactional)
        builder: KeyValueStoreBuilder[K, Any] = KeyValueStoreBuilder(
            supplier,
            key_serde if key_serde is not None else Serdes.bytes(),  # type: ignore[arg-type]
            value_serde if value_serde is not None else Serdes.bytes(),
            format,
        )
        return self.open_key_value_store(builder)

    def store(self, name: str) -> KeyValueStore[Any, Any]:
        """A store opened earlier through this database."""
        try:
            return self._stores[name]
        except KeyError:
            raise InvalidArgumentError(
                f"no store {name!r} is open in this database; open it with a builder first"
            ) from None

    def store_names(self) -> list[str]:
        """Names of every store recorded in this partition, open or not."""
        self._check_open()
        names: list[str] = self.partition.store_names()
        return names

    def commit(self, offsets: Mapping[str, int]) -> None:
        """Commit several stores in one LMDB transaction, each with its changelog offset.

        Either every named store's writes and offset become durable, or none do. An offset
        below a store's committed one raises :class:`~txstore.errors.OffsetError` before
        anything is written.
        """
        self._check_open()
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError("offsets must be a mapping of store name to offset")
        self.partition.commit_stores(dict(offsets))

    def close(self) -> None:
        """Close every store and the environment; idempotent. Uncommitted writes are lost."""
        for store in self._stores.values():
            store.close()
        self.partition.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<txstore.Database {self.path!r} {state}>"


def open(
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    sync: bool = True,
    overlay_budget_bytes: int = 64 * 2**20,
    map_size: int | None = None,
) -> Database:
    """Open (creating if needed) the partition directory ``path``.

    ``sync=False`` skips the fsync at commit: a process crash loses nothing committed, but a
    power loss or OS crash may lose recent commits and can corrupt the environment, which must
    then be rebuilt from the changelog. ``overlay_budget_bytes`` bounds the memory of
    uncommitted writes per store before they spill to disk.
    """
    return Database(
        path,
        readonly=readonly,
        sync=sync,
        overlay_budget_bytes=overlay_budget_bytes,
        map_size=map_size,
    )


def in_memory_key_value_store(builder: KeyValueStoreBuilder[K, V]) -> KeyValueStore[K, V]:
    """Build an in-memory key-value store (no files; its data is lost on close)."""
    supplier = builder.supplier
    _check_adaptable(supplier.name, supplier.format, builder.format)
    inner = BytesKeyValueStore(supplier.name, None, transactional=supplier.transactional)
    return KeyValueStore(
        inner, builder.key_serde, value_codec(builder.format, builder.value_serde), supplier.format
    )
