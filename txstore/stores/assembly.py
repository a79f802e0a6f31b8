"""The one place that assembles a store: its stack of layers, bottom to top.

Every way of opening a store goes through :func:`assemble`: :class:`~txstore.runtime.Database`
(``db.key_value_store(...)``, ``builder.build(db)``, ``db.open_store(builder)``), a
:class:`~txstore.runtime.task.Task` (whose database hands every store a changelog), the
builders of in-memory stores (``builder.build()``), and the read-only views of the catalog
(:func:`bytes_store`). The stack it builds::

    typed store        KeyValueStore / WindowStore / SessionStore: serdes, value codec, adapter
    change-logging     ChangeLogging*BytesStore, when the store has a changelog (a task's)
    bytes store        BytesKeyValueStore (UpgradingBytesKeyValueStore) / SegmentedBytesStore
    engine             Partition (LMDB) or MemoryPartition

so every handle has the same surface, and a store that has a changelog has no handle whose
writes skip it. The metadata a persistent store records (kind, format, serdes, configuration)
is registered or checked against what is on disk here too (:func:`register`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias

from txstore.bytestores.adapters import check_upgrade, find_adapter
from txstore.bytestores.kv import BytesKeyValueStore, ReadCommittedView
from txstore.bytestores.schemas import SessionKeySchema, WindowKeySchema
from txstore.bytestores.segments import SegmentedBytesStore, SegmentedReadCommittedView
from txstore.bytestores.sequence import SEQ_DB_SUFFIX, SequenceNumbers
from txstore.bytestores.upgrade import (
    KV_DB_SUFFIX,
    UpgradingBytesKeyValueStore,
    UpgradingReadCommittedView,
)
from txstore.changelog.api import Changelog
from txstore.changelog.layer import (
    ChangeLoggingKeyValueBytesStore,
    ChangeLoggingSegmentedBytesStore,
    RecordContext,
)
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase, Snapshot
from txstore.errors import InvalidArgumentError
from txstore.stores.formats import value_codec
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import Serde
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

__all__ = [
    "KV_FORMAT_VERSION",
    "SEGMENTED_FORMAT_VERSION",
    "AnyStore",
    "ChangelogSource",
    "StoreBuilder",
    "StoreHost",
    "StoreKind",
    "StoreStack",
    "StoreSupplier",
    "assemble",
    "bytes_store",
    "check_name_free",
    "committed_view",
    "register",
]

#: Metadata format version of key-value stores written by this release.
KV_FORMAT_VERSION: Final = 1
#: Metadata format version of window and session stores written by this release.
SEGMENTED_FORMAT_VERSION: Final = 1

#: Metadata fields a store keeps for itself across upgrades (not part of a reopen's request).
_INTERNAL: Final = ("db", "legacy")

StoreKind: TypeAlias = Literal["key_value", "window", "session"]
AnyStore: TypeAlias = KeyValueStore[Any, Any] | WindowStore[Any, Any] | SessionStore[Any, Any]
BytesStore: TypeAlias = BytesKeyValueStore | SegmentedBytesStore

# ``transactional`` is deliberately not in the metadata, so a reopen with the other value is
# accepted, not a ConfigConflictError. Whether writes wait in the overlay until commit is a
# choice of the process writing the store, not a property of its data: the committed bytes,
# databases and offsets are the same either way, and Kafka Streams lets a store change it
# between runs. Recording it would only say how the store was last opened (the Spark reader
# also refuses metadata fields it does not know). What a crash of a write-through writer
# leaves (writes past the committed offset) is there whatever the flag of the next open.


class StoreSupplier(Protocol):
    """Where a store's bytes live and their format (the suppliers of
    :mod:`txstore.stores.builders`)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> StoreKind: ...
    @property
    def persistent(self) -> bool: ...
    @property
    def format(self) -> ValueFormat: ...
    @property
    def transactional(self) -> bool: ...

    def config(self) -> dict[str, Any]:
        """What the metadata records besides kind, format and serdes (retention...)."""
        ...


class StoreBuilder(Protocol):
    """A supplier plus serdes and the format the store is used in (the builders of
    :mod:`txstore.stores.builders`)."""

    @property
    def supplier(self) -> StoreSupplier: ...
    @property
    def key_serde(self) -> Serde[Any]: ...
    @property
    def value_serde(self) -> Serde[Any]: ...
    @property
    def format(self) -> ValueFormat: ...


class StoreHost(Protocol):
    """What ``builder.build(db)`` needs of ``db``: :meth:`txstore.Database.open_store`."""

    def open_store(self, builder: StoreBuilder) -> AnyStore:
        """Open (creating on first use) the store ``builder`` describes."""
        ...


class ChangelogSource(Protocol):
    """Who gives the stores of a partition their changelogs (a task does).

    ``open_changelog`` is called once per store, after its metadata is registered; it may
    refuse with a typed error (a task refuses stores once it is running).
    """

    @property
    def context(self) -> RecordContext:
        """The record being processed: its timestamp and headers go into changelog records."""
        ...

    def open_changelog(self, name: str, kind: StoreKind, retention_period: int | None) -> Changelog:
        """The changelog of store ``name`` (created on first use)."""
        ...

    @property
    def memory_partition(self) -> PartitionBase:
        """Where the in-memory stores of the partition live (a task's
        :class:`~txstore.engine.memory.MemoryPartition`): change-logged, they are restored from
        their changelogs on start, as Kafka's in-memory stores are."""
        ...


@dataclass(frozen=True)
class StoreStack:
    """Every layer of one open store.

    ``store`` is the handle users get; ``unlogged_store`` the bytes store at the bottom,
    under the change-logging layer (restore writes there, without logging; a typed store's
    ``store.bytes_store`` is the layer right under it, which for a task's store is the
    change-logging one); ``changelog`` is ``None`` for a store without one;
    ``stored_format`` is the format of the bytes kept.
    """

    name: str
    kind: StoreKind
    stored_format: ValueFormat
    unlogged_store: BytesStore
    changelog: Changelog | None
    store: AnyStore

    @property
    def bytes_store(self) -> BytesStore:
        """The old name of :attr:`unlogged_store` (it read like a typed store's
        ``bytes_store``, which is the change-logging layer of a task's store)."""
        return self.unlogged_store


# ---- metadata ---------------------------------------------------------------------------


def _meta(builder: StoreBuilder) -> dict[str, Any]:
    """The metadata a persistent store of ``builder`` records."""
    supplier = builder.supplier
    segmented = supplier.kind != "key_value"
    return {
        "kind": supplier.kind,
        "format": supplier.format.name,
        "key_serde": builder.key_serde.name,
        "value_serde": builder.value_serde.name,
        "format_version": SEGMENTED_FORMAT_VERSION if segmented else KV_FORMAT_VERSION,
        **supplier.config(),
    }


def register(
    partition: PartitionBase, name: str, kind: StoreKind, meta: dict[str, Any]
) -> dict[str, Any]:
    """Register ``meta`` for ``name``, or check it against what is on disk.

    Every field must match, except the value format: a later format of the same kind is an
    upgrade (the metadata is rewritten, the data migrates lazily; see
    :mod:`txstore.bytestores.upgrade` and :mod:`txstore.bytestores.segments`), an earlier one
    a downgrade (``ConfigConflictError``). Returns the metadata now recorded, with the empty
    legacy tiers of an upgraded key-value store pruned.
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
        return _prune_legacy(partition, name, disk)
    upgraded = dict(asked, format=new.name)
    if kind == "key_value":
        legacy = [[disk.get("db"), old.name], *disk.get("legacy", [])]
        upgraded.update(db=KV_DB_SUFFIX[new], legacy=legacy)
    return _prune_legacy(partition, name, partition.update_store_meta(name, upgraded))


def _prune_legacy(partition: PartitionBase, name: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Drop the legacy tiers of an upgraded key-value store that are empty on disk."""
    legacy = meta.get("legacy")
    if not legacy or partition.readonly:
        return meta
    kept = [t for t in legacy if partition.count(partition.db_name(name, t[0])) > 0]
    if kept == legacy:
        return meta
    return partition.update_store_meta(name, dict(meta, legacy=kept))


def check_name_free(partition: PartitionBase, name: str) -> None:
    """Refuse a store name that collides with a segment or upgrade database of another store
    of ``partition`` (``InvalidArgumentError``). O(stores)."""
    for other in partition.store_names():
        for owner, db in ((other, name), (name, other)):
            rest = db[len(owner) + 1 :] if db.startswith(owner + ".") else None
            if rest is not None and (
                rest.isdigit() or rest in KV_DB_SUFFIX.values() or rest == SEQ_DB_SUFFIX
            ):
                raise InvalidArgumentError(
                    f"store name {name!r} collides with a database of store {owner!r} "
                    f"({db!r}: a segment or upgrade database); choose another name"
                )


# ---- the layers ---------------------------------------------------------------------------


def bytes_store(
    partition: PartitionBase | None,
    name: str,
    meta: dict[str, Any],
    *,
    fmt: ValueFormat,
    transactional: bool = True,
) -> BytesStore:
    """The bytes store of ``name`` as its metadata ``meta`` describes it (``kind``, and for an
    upgraded key-value store ``db`` and ``legacy``; ``retention`` and ``segment_interval`` for
    window and session stores), keeping values in ``fmt``. ``partition`` ``None``: in memory.
    """
    kind = meta["kind"]
    if kind == "key_value":
        if partition is not None and "db" in meta:
            return UpgradingBytesKeyValueStore(
                name,
                partition,
                fmt=fmt,
                data_suffix=meta["db"],
                legacy=[(db, ValueFormat[f]) for db, f in meta.get("legacy") or ()],
                transactional=transactional,
            )
        return BytesKeyValueStore(name, partition, transactional=transactional)
    return SegmentedBytesStore(
        name,
        partition,
        schema=WindowKeySchema() if kind == "window" else SessionKeySchema(),
        retention=int(meta["retention"]),
        segment_interval=int(meta["segment_interval"]),
        fmt=fmt,
        transactional=transactional,
    )


def committed_view(
    store: BytesStore, snapshot: Snapshot | None = None
) -> ReadCommittedView | SegmentedReadCommittedView:
    """A read-committed view of the bytes store ``store`` (what the catalog's readers use);
    with ``snapshot``, every read sees that one commit. O(1)."""
    if isinstance(store, SegmentedBytesStore):
        return SegmentedReadCommittedView(store, snapshot)
    if isinstance(store, UpgradingBytesKeyValueStore):
        return UpgradingReadCommittedView(store, snapshot)
    return ReadCommittedView(store, snapshot)


def assemble(
    builder: StoreBuilder,
    partition: PartitionBase | None,
    changelogs: ChangelogSource | None = None,
) -> StoreStack:
    """Build the whole stack of the store ``builder`` describes, over ``partition``, with a
    change-logging layer when ``changelogs`` is given. An in-memory store's ``partition`` is
    ``None`` (a private :class:`~txstore.engine.memory.MemoryPartition`: ``builder.build()``)
    or a task's :class:`~txstore.engine.memory.MemoryPartition`
    (:attr:`ChangelogSource.memory_partition`, shared by the task's in-memory stores, which it
    commits with their changelog offsets as the LMDB partition commits the persistent ones).

    A persistent store's metadata is registered or checked first (:func:`register`); the
    changelog is asked for only once that succeeded. In-memory stores are format-agnostic, as
    Kafka's: they keep their values in the builder's format (no adapter). Persistent ones keep
    the supplier's format and adapt a richer builder format on every read and write.

    Cost: for a persistent store, a few LMDB read transactions over the partition's metadata
    (plus the segment registry of a window or session store) and one write transaction when
    the store is created or upgraded; O(1) in memory. Errors: see
    :meth:`txstore.Database.open_store`.
    """
    supplier = builder.supplier
    kind, name = supplier.kind, supplier.name
    if not supplier.persistent:
        stored = builder.format
        adapter = None
        meta = _meta(builder)
        if partition is not None:  # a task's in-memory partition: nothing of it is on disk
            meta = partition.register_store(name, meta)
    else:
        assert partition is not None, "a persistent store needs a partition"
        stored = supplier.format
        adapter = find_adapter(kind, supplier.format, builder.format, name)
        meta = register(partition, name, kind, _meta(builder))
    raw = bytes_store(partition, name, meta, fmt=stored, transactional=supplier.transactional)
    changelog = None
    inner: Any = raw
    if changelogs is not None:
        retention = None if kind == "key_value" else int(meta["retention"])
        changelog = changelogs.open_changelog(name, kind, retention)
        context = changelogs.context
        if isinstance(raw, SegmentedBytesStore):
            retain = bool(meta.get("retain_duplicates", False))
            inner = ChangeLoggingSegmentedBytesStore(raw, changelog, stored, context, retain)
        else:
            inner = ChangeLoggingKeyValueBytesStore(raw, changelog, stored, context)
    try:
        store = _typed_store(builder, meta, stored, raw, inner, adapter)
    except BaseException:
        # e.g. a damaged sequence-number entry (DamagedFileError): the changelog opened for
        # this store must not stay locked, or the task's rebuild cannot open it again
        if changelog is not None:
            changelog.close()
        raise
    return StoreStack(name, kind, stored, raw, changelog, store)


def _typed_store(
    builder: StoreBuilder,
    meta: dict[str, Any],
    stored: ValueFormat,
    raw: Any,
    inner: Any,
    adapter: Any,
) -> AnyStore:
    """The typed store (key-value, window or session) over ``inner``."""
    kind = builder.supplier.kind
    store: AnyStore
    if kind == "key_value":
        codec = value_codec(builder.format, builder.value_serde)
        store = KeyValueStore(inner, builder.key_serde, codec, stored)
    elif kind == "window":
        codec = value_codec(builder.format, builder.value_serde)
        store = WindowStore(
            inner,
            builder.key_serde,
            codec,
            adapter,
            int(meta["window_size"]),
            bool(meta["retain_duplicates"]),
        )
        if store.retain_duplicates and isinstance(raw, SegmentedBytesStore):
            # numbers continue after the committed one (and a restore's): bytestores/sequence.py
            numbers = SequenceNumbers(raw)
            numbers.register(store)
            if inner is not raw:
                numbers.register(inner)
    else:
        codec = value_codec(builder.format, builder.value_serde, session=True)
        store = SessionStore(inner, builder.key_serde, codec, adapter)
    return store
