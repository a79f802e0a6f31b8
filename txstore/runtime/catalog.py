"""Opening any store from its recorded metadata, read-only: for tools and readers that do not
know the stores' builders (the command line, Spark, snapshots).

A partition records, per store, its kind, format, serdes and configuration
(:meth:`~txstore.engine.base.PartitionBase.store_meta`). :func:`open_view` turns that into a
read-committed bytes view; :class:`RowDecoder` turns the view's rows into Python objects with
the recorded serdes: keys (``Windowed`` for window and session stores) and value objects of the
store's format (``ValueAndTimestamp``...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from txstore import codecs
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase, Snapshot
from txstore.errors import InvalidArgumentError
from txstore.stores.assembly import bytes_store, committed_view
from txstore.stores.builders import (
    KeyValueStoreBuilder,
    KeyValueStoreSupplier,
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
)
from txstore.stores.formats import value_codec
from txstore.stores.serdes import Serde, serde_by_name
from txstore.types import SessionWindow, TimeWindow, Windowed

__all__ = ["RowDecoder", "StoreView", "builder_from_meta", "open_view"]

KINDS = ("key_value", "window", "session")


class StoreView:
    """A read-committed bytes view of one store, and the store object it reads through (both
    closed by :meth:`close`)."""

    def __init__(self, store: Any, view: Any, meta: Mapping[str, Any]) -> None:
        self.store = store
        self.view = view
        self.meta = dict(meta)

    @property
    def kind(self) -> str:
        kind: str = self.meta["kind"]
        return kind

    def rows(self) -> Any:
        """An iterator of every committed ``(store key, stored value)`` row, in key order."""
        return self.view.all()

    def get(self, key: bytes) -> bytes | None:
        """The stored value of a key-value store's ``key``."""
        if self.kind != "key_value":
            raise InvalidArgumentError(f"get() reads key-value stores, not {self.kind} stores")
        value: bytes | None = self.view.get(key)
        return value

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stored_format(meta: Mapping[str, Any]) -> ValueFormat:
    """The value format a store's metadata records. A store made at the bytes level
    (:class:`~txstore.bytestores.kv.BytesKeyValueStore`) records ``"bytes"``: its values are stored
    as given, which is the ``PLAIN`` layout."""
    name = str(meta.get("format"))
    if name == "bytes":
        return ValueFormat.PLAIN
    try:
        return ValueFormat[name]
    except KeyError:
        known = ", ".join(["bytes", *ValueFormat.__members__])
        raise InvalidArgumentError(f"unknown value format {name!r} (known: {known})") from None


def open_view(
    partition: PartitionBase,
    name: str,
    snapshot: Snapshot | None = None,
    meta: Mapping[str, Any] | None = None,
) -> StoreView:
    """A read-committed view of store ``name`` of ``partition`` (read-only partitions work),
    built from its metadata (``meta``, or what the partition records) by the bytes layer of
    :func:`~txstore.stores.assembly.assemble`; with ``snapshot``, every read sees that one
    commit."""
    if meta is None:
        meta = partition.store_meta(name)
    if meta is None:
        known = ", ".join(partition.store_names()) or "none"
        raise InvalidArgumentError(f"no store {name!r} in {partition.path}; stores: {known}")
    kind = meta.get("kind")
    if kind not in KINDS:
        raise InvalidArgumentError(f"store {name!r} has unknown kind {kind!r}")
    store = bytes_store(partition, name, dict(meta), fmt=stored_format(meta))
    return StoreView(store, committed_view(store, snapshot), meta)


def builder_from_meta(
    name: str, meta: Mapping[str, Any], key_serde: Serde[Any], value_serde: Serde[Any]
) -> Any:
    """The builder of the persistent store ``name`` its recorded metadata ``meta`` describes
    (kind, format, configuration), with the serdes given: what opens a recorded store in a task
    or an application without its original builder. O(1)."""
    kind = meta.get("kind")
    fmt = stored_format(meta)
    if kind == "key_value":
        kv = KeyValueStoreSupplier(name, True, fmt)
        return KeyValueStoreBuilder(kv, key_serde, value_serde, fmt)
    if kind == "window":
        window = WindowBytesStoreSupplier(
            name,
            True,
            fmt,
            int(meta["retention"]),
            int(meta["window_size"]),
            bool(meta["retain_duplicates"]),
            int(meta["segment_interval"]),
        )
        return WindowStoreBuilder(window, key_serde, value_serde, fmt)
    if kind == "session":
        session = SessionBytesStoreSupplier(
            name, True, fmt, int(meta["retention"]), int(meta["segment_interval"])
        )
        return SessionStoreBuilder(session, key_serde, value_serde, fmt)
    raise InvalidArgumentError(f"store {name!r} has unknown kind {kind!r}")


def _serde(meta: Mapping[str, Any], field: str) -> Serde[Any]:
    name = meta.get(field, "bytes")
    try:
        return serde_by_name(name)
    except InvalidArgumentError:
        # A user serde this process has not registered: show the raw bytes.
        return serde_by_name("bytes")


class RowDecoder:
    """Decodes a store's ``(store key, stored value)`` rows with its recorded serdes.

    Unknown (unregistered) serdes fall back to ``bytes``; ``decode=False`` keeps keys and values
    as bytes but still splits window and session keys and value formats.
    """

    def __init__(self, meta: Mapping[str, Any], *, decode: bool = True) -> None:
        self.kind = meta["kind"]
        self.format = stored_format(meta)
        self.key_serde = _serde(meta, "key_serde") if decode else serde_by_name("bytes")
        value_serde = _serde(meta, "value_serde") if decode else serde_by_name("bytes")
        self.codec = value_codec(self.format, value_serde, session=self.kind == "session")
        self.window_size = int(meta.get("window_size") or 0)

    def key(self, raw: bytes) -> Any:
        """The key object of a store key (``Windowed`` for window and session stores)."""
        if self.kind == "key_value":
            return self.key_serde.deserialize(raw)
        if self.kind == "window":
            key, start, _ = codecs.extract_window_key(raw)
            return Windowed(
                self.key_serde.deserialize(key), TimeWindow.for_size(start, self.window_size)
            )
        key, start, end = codecs.extract_session_key(raw)
        return Windowed(self.key_serde.deserialize(key), SessionWindow(start, end))

    def value(self, raw: bytes | None) -> Any:
        """The value object of a stored value."""
        return self.codec.decode(raw)

    def encode_key(self, key: Any) -> bytes:
        """The serialized form of a key-value store's key (for point lookups)."""
        kb = self.key_serde.serialize(key)
        if kb is None:
            raise InvalidArgumentError("key cannot be null")
        return kb
