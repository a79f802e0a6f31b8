"""``txstore.open(path)``: a partition directory and the typed stores inside it.

A :class:`Database` is one partition (a task, in Kafka's words): one LMDB environment holding
every store of the partition as named databases, so that :meth:`Database.commit` can commit
several stores in one LMDB transaction (atomic across stores, which Kafka cannot do).

Costs: opening a store reads the partition's metadata (and, for window and session stores,
their segment registry); writes are buffered in the partition's overlay, and a commit is one
LMDB write transaction, synced unless the database was opened with ``sync=False``.

>>> import tempfile, txstore
>>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
...     users = db.key_value_store("users", txstore.Serdes.string(), txstore.Serdes.json())
...     clicks = db.window_store("clicks", txstore.Serdes.string(), txstore.Serdes.long(),
...                              retention=3_600_000, window_size=60_000)
...     users.put("u1", {"name": "Ada"})
...     clicks.put("u1", 3, 120_000)
...     db.commit({"users": 41, "clicks": 41})
...     users.committed_offset, users.get("u1"), clicks.fetch("u1", 120_000)
(41, {'name': 'Ada'}, 3)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from txstore.bytestores.adapters import check_upgrade, find_adapter
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.bytestores.schemas import SessionKeySchema, WindowKeySchema
from txstore.bytestores.segments import SegmentedBytesStore
from txstore.bytestores.upgrade import KV_DB_SUFFIX, UpgradingBytesKeyValueStore
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase
from txstore.engine.partition import Partition
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    StoreClosedError,
)
from txstore.stores.factories import (
    KeyValueStoreBuilder,
    KeyValueStoreSupplier,
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
    _session,
    _window,
)
from txstore.stores.formats import value_codec
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import Serde, Serdes
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

__all__ = ["Database", "open"]

K = TypeVar("K")
V = TypeVar("V")

#: Metadata format version of key-value stores written by this release.
KV_FORMAT_VERSION = 1
#: Metadata format version of window and session stores written by this release.
SEGMENTED_FORMAT_VERSION = 1

#: Metadata fields a store keeps for itself across upgrades (not part of a reopen's request).
_INTERNAL = ("db", "legacy")

# ``transactional`` is deliberately not in the metadata, so a reopen with the other value is
# accepted, not a ConfigConflictError. Whether writes wait in the overlay until commit is a
# choice of the process writing the store, not a property of its data: the committed bytes,
# databases and offsets are the same either way, and Kafka Streams lets a store change it
# between runs. Recording it would only say how the store was last opened (the Spark reader
# also refuses metadata fields it does not know). What a crash of a write-through writer
# leaves (writes past the committed offset) is there whatever the flag of the next open.


def _register(
    partition: PartitionBase, name: str, kind: str, meta: dict[str, Any]
) -> dict[str, Any]:
    """Register ``meta`` for ``name``, or check it against what is on disk.

    Every field must match, except the value format: a later format of the same kind is an
    upgrade (the metadata is rewritten, the data migrates lazily; see
    :mod:`txstore.bytestores.upgrade` and :mod:`txstore.bytestores.segments`), an earlier one a
    downgrade
    (``ConfigConflictError``). Returns the metadata now recorded.
    """
    disk = partition.store_meta(name)
    if disk is None:
        return partition.register_store(name, meta)
    fmt = disk.get("format")
    if disk.get("kind") != kind or fmt not in ValueFormat.__members__:
        return partition.register_store(name, meta)  # raises, naming the differences
    asked = dict(meta, format=fmt)
    asked.update({k: disk[k] for k in _INTERNAL if k in disk})
    partition.register_store(name, asked)  # raises on any other difference
    old, new = ValueFormat[str(fmt)], ValueFormat[meta["format"]]
    if not check_upgrade(kind, name, old, new):
        return disk
    upgraded = dict(asked, format=new.name)
    if kind == "key_value":
        legacy = [[disk.get("db"), old.name], *disk.get("legacy", [])]
        upgraded.update(db=KV_DB_SUFFIX[new], legacy=legacy)
    return partition.update_store_meta(name, upgraded)


def _prune_legacy(partition: PartitionBase, name: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Drop the legacy tiers of an upgraded key-value store that are empty on disk."""
    legacy = meta.get("legacy")
    if not legacy or partition.readonly:
        return meta
    kept = [t for t in legacy if partition.count(partition.db_name(name, t[0])) > 0]
    if kept == legacy:
        return meta
    return partition.update_store_meta(name, dict(meta, legacy=kept))


def _segmented_meta(kind: str, supplier: Any, builder: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "kind": kind,
        "format": supplier.format.name,
        "retention": supplier.retention_period,
        "segment_interval": supplier.segment_interval,
        "key_serde": builder.key_serde.name,
        "value_serde": builder.value_serde.name,
        "format_version": SEGMENTED_FORMAT_VERSION,
    }
    if kind == "window":
        meta["window_size"] = supplier.window_size
        meta["retain_duplicates"] = supplier.retain_duplicates
    return meta


def _segmented_store(
    name: str,
    partition: PartitionBase | None,
    kind: str,
    supplier: WindowBytesStoreSupplier | SessionBytesStoreSupplier,
    fmt: ValueFormat,
) -> SegmentedBytesStore:
    return SegmentedBytesStore(
        name,
        partition,
        schema=WindowKeySchema() if kind == "window" else SessionKeySchema(),
        retention=supplier.retention_period,
        segment_interval=supplier.segment_interval,
        fmt=fmt,
        transactional=supplier.transactional,
    )


class Database:
    """One partition directory: its LMDB environment, its stores, and multi-store commits.

    Open with :func:`txstore.open` (parameters and errors there). Thread model: one thread
    writes (puts and commits); read-committed views may be read from any thread or process.
    Every method but :meth:`close` and :meth:`store` raises
    :class:`~txstore.errors.StoreClosedError` once the database is closed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        sync: bool = True,
        overlay_budget_bytes: int = 64 * 2**20,
        map_size: int | None = None,
        max_dbs: int | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {
            "readonly": readonly,
            "sync": sync,
            "overlay_budget_bytes": overlay_budget_bytes,
        }
        if map_size is not None:
            kwargs["map_size"] = map_size
        if max_dbs is not None:
            kwargs["max_dbs"] = max_dbs
        self.partition = Partition(path, **kwargs)
        self._stores: dict[str, Any] = {}

    @property
    def path(self) -> str:
        """The partition directory. O(1)."""
        return str(self.partition.path)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the environment is released). O(1)."""
        return bool(self.partition.closed)

    def _check_open(self) -> None:
        if self.partition.closed:
            raise StoreClosedError(str(self.partition.path))

    def _check_open_store(self, name: str, persistent: bool) -> None:
        self._check_open()
        if not persistent:
            raise InvalidArgumentError(f"store {name!r} is in-memory; build it without a database")
        existing = self._stores.get(name)
        if existing is not None and existing.is_open:
            raise InvalidArgumentError(f"store {name!r} is already open in this database")
        for other in self.partition.store_names():
            for owner, db in ((other, name), (name, other)):
                rest = db[len(owner) + 1 :] if db.startswith(owner + ".") else None
                if rest is not None and (rest.isdigit() or rest in KV_DB_SUFFIX.values()):
                    raise InvalidArgumentError(
                        f"store name {name!r} collides with a database of store {owner!r} "
                        f"({db!r}: a segment or upgrade database); choose another name"
                    )

    def open_key_value_store(self, builder: KeyValueStoreBuilder[K, V]) -> KeyValueStore[K, V]:
        """Open (creating on first use) the key-value store ``builder`` describes.

        Reopening with other serdes than the ones on disk raises
        :class:`~txstore.errors.ConfigConflictError`; with a later format (``PLAIN`` ->
        ``TIMESTAMPED`` -> ``HEADERS``) it upgrades the store lazily
        (:mod:`txstore.bytestores.upgrade`);
        with an earlier one it raises ``ConfigConflictError`` (downgrades are refused).

        Cost: a few short LMDB read transactions over the partition's metadata (the check
        that the name collides with no other store's databases is O(stores)), plus one LMDB
        write transaction when the store is created or upgraded. Also raises
        :class:`~txstore.errors.InvalidArgumentError` for an in-memory supplier, a store
        already open here, a name that collides with another store's segment or upgrade
        databases, or a builder format older than the supplier's;
        :class:`~txstore.errors.ReadOnlyError` for a store that does not exist in a read-only
        database.
        """
        supplier = builder.supplier
        name = supplier.name
        self._check_open_store(name, supplier.persistent)
        adapter = find_adapter("key_value", supplier.format, builder.format, name)
        p = self.partition
        meta = _register(
            p,
            name,
            "key_value",
            {
                "kind": "key_value",
                "format": supplier.format.name,
                "key_serde": builder.key_serde.name,
                "value_serde": builder.value_serde.name,
                "format_version": KV_FORMAT_VERSION,
            },
        )
        meta = _prune_legacy(p, name, meta)
        inner: BytesKeyValueStore
        if "db" in meta:
            inner = UpgradingBytesKeyValueStore(
                name,
                p,
                fmt=supplier.format,
                data_suffix=meta["db"],
                legacy=[(db, ValueFormat[f]) for db, f in meta.get("legacy", [])],
                transactional=supplier.transactional,
            )
        else:
            inner = BytesKeyValueStore(name, p, transactional=supplier.transactional)
        store: KeyValueStore[K, V] = KeyValueStore(
            inner,
            builder.key_serde,
            value_codec(builder.format, builder.value_serde),
            supplier.format if adapter is not None else builder.format,
        )
        self._stores[name] = store
        return store

    def open_window_store(self, builder: WindowStoreBuilder[K, V]) -> WindowStore[K, V]:
        """Open (creating on first use) the window store ``builder`` describes.

        The metadata records kind, format, window size, retention, segment interval,
        retain-duplicates and serdes; a reopen that contradicts it raises
        :class:`~txstore.errors.ConfigConflictError`, except a later format, which upgrades
        the store lazily (old segments keep their format) and an earlier one, refused.

        Cost: as :meth:`open_key_value_store`, plus one read of the segment registry,
        O(segments). Other errors as :meth:`open_key_value_store`.
        """
        supplier = builder.supplier
        self._check_open_store(supplier.name, supplier.persistent)
        adapter = find_adapter("window", supplier.format, builder.format, supplier.name)
        meta = _segmented_meta("window", supplier, builder)
        _register(self.partition, supplier.name, "window", meta)
        inner = _segmented_store(supplier.name, self.partition, "window", supplier, supplier.format)
        store: WindowStore[K, V] = WindowStore(
            inner,
            builder.key_serde,
            value_codec(builder.format, builder.value_serde),
            adapter,
            supplier.window_size,
            supplier.retain_duplicates,
        )
        self._stores[supplier.name] = store
        return store

    def open_session_store(self, builder: SessionStoreBuilder[K, V]) -> SessionStore[K, V]:
        """Open (creating on first use) the session store ``builder`` describes (checks as
        :meth:`open_window_store`).

        Cost and errors as :meth:`open_window_store`.
        """
        supplier = builder.supplier
        self._check_open_store(supplier.name, supplier.persistent)
        adapter = find_adapter("session", supplier.format, builder.format, supplier.name)
        meta = _segmented_meta("session", supplier, builder)
        _register(self.partition, supplier.name, "session", meta)
        inner = _segmented_store(
            supplier.name, self.partition, "session", supplier, supplier.format
        )
        store: SessionStore[K, V] = SessionStore(
            inner,
            builder.key_serde,
            value_codec(builder.format, builder.value_serde, session=True),
            adapter,
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
        and ``HEADERS`` (another raises :class:`~txstore.errors.InvalidArgumentError`). Costs
        and errors as :meth:`open_key_value_store`.

        >>> import tempfile, txstore
        >>> from txstore import Serdes, ValueAndTimestamp, ValueFormat
        >>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
        ...     seen = db.key_value_store("seen", Serdes.string(), Serdes.long(),
        ...                               format=ValueFormat.TIMESTAMPED)
        ...     seen.put("ada", ValueAndTimestamp(1, 1_700_000_000_000))
        ...     seen.get("ada").timestamp
        1700000000000
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

    def window_store(
        self,
        name: str,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[Any] | None = None,
        *,
        retention: int,
        window_size: int,
        retain_duplicates: bool = False,
        format: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
    ) -> WindowStore[K, Any]:
        """Shortcut for a ``Stores`` window supplier + builder + ``build(db)``.

        Serdes default to bytes; ``format`` is any of the four :class:`ValueFormat` s;
        ``retention`` and ``window_size`` are milliseconds (or ``timedelta``). Costs and
        errors as :meth:`open_window_store`, plus the supplier's checks (see
        :class:`~txstore.stores.factories.Stores`): a window size above the retention raises
        :class:`~txstore.errors.InvalidArgumentError`.
        """
        supplier = _window(
            name, retention, window_size, retain_duplicates, True, format, transactional
        )
        builder: WindowStoreBuilder[K, Any] = WindowStoreBuilder(
            supplier,
            key_serde if key_serde is not None else Serdes.bytes(),  # type: ignore[arg-type]
            value_serde if value_serde is not None else Serdes.bytes(),
            supplier.format,
        )
        return self.open_window_store(builder)

    def session_store(
        self,
        name: str,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[Any] | None = None,
        *,
        retention: int,
        format: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
    ) -> SessionStore[K, Any]:
        """Shortcut for a ``Stores`` session supplier + builder + ``build(db)``; ``format`` is
        ``PLAIN`` or ``PLAIN_HEADERS`` (:class:`~txstore.types.AggregationWithHeaders`).

        Costs and errors as :meth:`open_window_store`; another format raises
        :class:`~txstore.errors.InvalidArgumentError`.
        """
        supplier = _session(name, retention, True, format, transactional)
        builder: SessionStoreBuilder[K, Any] = SessionStoreBuilder(
            supplier,
            key_serde if key_serde is not None else Serdes.bytes(),  # type: ignore[arg-type]
            value_serde if value_serde is not None else Serdes.bytes(),
            supplier.format,
        )
        return self.open_session_store(builder)

    def store(self, name: str) -> Any:
        """A store opened earlier through this database (possibly closed since).

        O(1), a dict lookup. Raises :class:`~txstore.errors.InvalidArgumentError` for a name
        not opened through this database.
        """
        try:
            return self._stores[name]
        except KeyError:
            raise InvalidArgumentError(
                f"no store {name!r} is open in this database; open it with a builder first"
            ) from None

    def store_names(self) -> list[str]:
        """Names of every store recorded in this partition, open or not, sorted.

        One LMDB read transaction scanning the metadata database, O(stores).
        """
        self._check_open()
        names: list[str] = self.partition.store_names()
        return names

    def commit(self, offsets: Mapping[str, int]) -> None:
        """Commit several stores in one LMDB transaction, each with its changelog offset.

        Either every named store's writes and offset become durable, or none do. One LMDB
        write transaction, synced unless ``sync=False``, applying the ``u`` staged writes of
        those stores in key order: O(u log n) plus the sync. An offset that is negative or
        below a store's committed one raises :class:`~txstore.errors.OffsetError` before
        anything is written; a non-mapping or a non-``int`` offset raises
        :class:`~txstore.errors.InvalidTypeError`, a store not in this partition
        :class:`~txstore.errors.InvalidArgumentError`, a read-only database
        :class:`~txstore.errors.ReadOnlyError`.

        >>> import tempfile, txstore
        >>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
        ...     a, b = db.key_value_store("a"), db.key_value_store("b")
        ...     db.commit({"a": 5, "b": 5})
        ...     a.put(b"k", b"v")
        ...     try:
        ...         db.commit({"a": 6, "b": 4})          # b would go backwards
        ...     except txstore.OffsetError:
        ...         print("refused:", a.committed_offset, b.committed_offset)
        refused: 5 5
        """
        self._check_open()
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError("offsets must be a mapping of store name to offset")
        self.partition.commit_stores(dict(offsets))

    def snapshot(self, dest: str | os.PathLike[str]) -> Any:
        """Copy this partition's committed state into the new directory ``dest``: LMDB's
        compacting copy taken in one read transaction, plus ``manifest.json`` with the stores,
        configurations and committed offsets of exactly that copy. Writers may keep running.
        Returns the manifest (:mod:`txstore.runtime.snapshot`). O(committed data).

        Raises :class:`~txstore.errors.InvalidArgumentError` if ``dest`` exists and is not an
        empty directory.
        """
        from txstore.runtime.snapshot import snapshot_partition

        return snapshot_partition(self.partition, dest)

    def close(self) -> None:
        """Close every store and the environment; idempotent. Uncommitted writes are lost.

        O(open stores + their open iterators + staged writes); nothing is written.
        """
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
    max_dbs: int | None = None,
) -> Database:
    """Open (creating if needed) the partition directory ``path``.

    ``sync=False`` skips the fsync at commit: a process crash loses nothing committed, but a
    power loss or OS crash may lose recent commits and can corrupt the environment, which must
    then be rebuilt from the changelog. ``overlay_budget_bytes`` bounds the memory of
    uncommitted writes per store before they spill to disk. ``max_dbs`` is the size of this
    process's table of named-database handles (default
    :data:`~txstore.engine.lmdb_env.DEFAULT_MAX_DBS`; see
    :class:`~txstore.engine.partition.Partition`).

    Cost: an ``lmdb.open`` and a check of stale reader slots; when writable also the
    single-writer lock, the removal of a spill directory a crash left behind and one LMDB
    write transaction; nothing proportional to the committed data. Raises
    :class:`~txstore.errors.InvalidStateStoreError` if the partition is open for writing
    by another process (or by another ``Database`` of this one): open it with
    ``readonly=True``; :class:`~txstore.errors.StorageError` for a read-only open of a
    directory that holds no partition; :class:`~txstore.errors.InvalidTypeError` or
    :class:`~txstore.errors.InvalidArgumentError` for a size that is not a positive ``int``.
    """
    return Database(
        path,
        readonly=readonly,
        sync=sync,
        overlay_budget_bytes=overlay_budget_bytes,
        map_size=map_size,
        max_dbs=max_dbs,
    )


def in_memory_key_value_store(builder: KeyValueStoreBuilder[K, V]) -> KeyValueStore[K, V]:
    """Build an in-memory key-value store (no files; its data is lost on close).

    Like Kafka's in-memory stores it is format-agnostic: it keeps its values in the builder's
    format, whatever the supplier's (no adapter, nothing dropped). O(1); ``builder.build()``
    calls it.
    """
    supplier = builder.supplier
    inner = BytesKeyValueStore(supplier.name, None, transactional=supplier.transactional)
    return KeyValueStore(
        inner, builder.key_serde, value_codec(builder.format, builder.value_serde), builder.format
    )


def in_memory_window_store(builder: WindowStoreBuilder[K, V]) -> WindowStore[K, V]:
    """Build an in-memory window store (format-agnostic, see
    :func:`in_memory_key_value_store`; Kafka's in-memory expiry rules). O(1)."""
    s = builder.supplier
    inner = _segmented_store(s.name, None, "window", s, builder.format)
    codec = value_codec(builder.format, builder.value_serde)
    return WindowStore(inner, builder.key_serde, codec, None, s.window_size, s.retain_duplicates)


def in_memory_session_store(builder: SessionStoreBuilder[K, V]) -> SessionStore[K, V]:
    """Build an in-memory session store (format-agnostic; Kafka's in-memory expiry rules and
    the time-only ``find_sessions``). O(1)."""
    s = builder.supplier
    inner = _segmented_store(s.name, None, "session", s, builder.format)
    codec = value_codec(builder.format, builder.value_serde, session=True)
    return SessionStore(inner, builder.key_serde, codec, None)
