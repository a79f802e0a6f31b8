"""Lazy format upgrades of key-value stores (KIP-258's dual column family, on LMDB).

A key-value store reopened in a later format (``PLAIN`` -> ``TIMESTAMPED`` -> ``HEADERS``) does
not rewrite its data. Its metadata names a new data database for the new format and keeps the
old ones as *legacy tiers*, newest first, each with its format::

    {"format": "HEADERS", "db": "keyValueWithTimestampAndHeaders",
     "legacy": [["keyValueWithTimestamp", "TIMESTAMPED"], [null, "PLAIN"]], ...}

(``null`` is the store's main database ``<store>``; the suffixes are Kafka's column-family names.)
:class:`UpgradingBytesKeyValueStore` then behaves as Kafka's ``RocksDBTimestampedStore`` in
upgrade mode:

* ``get``: the new database first; else the legacy tiers in order, and a value found there is
  converted (timestamp -1, empty headers), **moved** to the new database (and deleted from the
  old one, in the same transaction as the rest) and returned;
* a write goes to the new database and deletes the key from every legacy tier;
* range and full scans merge the new database over the converted legacy tiers.

Legacy tiers found empty when the store is opened are dropped from the metadata. Everything
stays transactional: moves and deletes are staged in the overlay like any write. Downgrades are
refused when the store is opened (:func:`txstore.bytestores.adapters.check_upgrade`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from txstore.bytestores.kv import BytesKeyValueStore, ReadCommittedView, _key, _value
from txstore.codecs import ValueFormat, convert_value, value_converter
from txstore.engine.base import PartitionBase, Snapshot
from txstore.engine.iterators import (
    EMPTY_SOURCE,
    ChunkSource,
    FnSource,
    KeyRange,
    MergedSource,
    Row,
)
from txstore.engine.overlay import NOT_FOUND, DbOverlay
from txstore.errors import InvalidTypeError

__all__ = [
    "KV_DB_SUFFIX",
    "LegacyTier",
    "UpgradingBytesKeyValueStore",
    "UpgradingReadCommittedView",
]

#: The data database of a key-value store upgraded to a format (Kafka's column families).
KV_DB_SUFFIX: Final = {
    ValueFormat.TIMESTAMPED: "keyValueWithTimestamp",
    ValueFormat.HEADERS: "keyValueWithTimestampAndHeaders",
}

LegacyTier = tuple[str | None, ValueFormat]
"""A legacy tier: the database suffix (None: the store's main database) and its format."""


def _converting(source: ChunkSource, src: ValueFormat, dst: ValueFormat) -> ChunkSource:
    convert = value_converter(src, dst)

    def read(rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
        rows, frontier = source.read_chunk(rng, reverse, n)
        return [(k, convert(v)) for k, v in rows], frontier

    return FnSource(read)


class UpgradingBytesKeyValueStore(BytesKeyValueStore):
    """A bytes key-value store whose data lives in ``<store>.<data_suffix>`` in format ``fmt``,
    over legacy tiers in older formats (see the module docstring). Values go in and come out
    in ``fmt``. Costs as :class:`BytesKeyValueStore`, plus one point read per legacy tier on a
    miss and one tombstone per legacy tier on a write."""

    def __init__(
        self,
        name: str,
        partition: PartitionBase,
        *,
        fmt: ValueFormat,
        data_suffix: str | None,
        legacy: Sequence[LegacyTier],
        transactional: bool = True,
    ) -> None:
        super().__init__(name, partition, transactional=transactional)
        self.format = fmt
        p = self.partition
        self.db = p.db_name(name, data_suffix)
        overlay = p.overlay if self.db_overlay is not None else None
        self.db_overlay = None if overlay is None else overlay.db(name, self.db)
        self.legacy_tiers: list[tuple[bytes, ValueFormat, DbOverlay | None]] = [
            (
                p.db_name(name, suffix),
                ValueFormat(f),
                None if overlay is None else overlay.db(name, p.db_name(name, suffix)),
            )
            for suffix, f in legacy
        ]
        """The legacy tiers still read, newest first: database, format, overlay (None when not
        transactional)."""

    @property
    def legacy_dbs(self) -> list[bytes]:
        """The legacy databases still read, newest first."""
        return [db for db, _, _ in self.legacy_tiers]

    def _source(self) -> ChunkSource:
        source = super()._source()
        for db, fmt, ov in self.legacy_tiers:
            committed = self.partition.source(db)
            tier: ChunkSource = committed
            if ov is not None:
                tier = MergedSource(ov, EMPTY_SOURCE if ov.dropped else committed, False)
            source = MergedSource(source, _converting(tier, fmt, self.format), False)
        return source

    def _legacy_get(self, key: bytes) -> tuple[bytes | None, ValueFormat]:
        for db, fmt, ov in self.legacy_tiers:
            v = NOT_FOUND if ov is None else ov.get(key)
            if v is NOT_FOUND:
                v = self.partition.get(db, key)
            if v is not None:
                return v, fmt  # type: ignore[return-value]
        return None, self.format

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` in ``fmt``; a legacy value is converted and moved to the new
        database (unless the partition is read-only). O(1) + O(log n) per tier read."""
        v = super().get(key)
        if v is not None or not self.legacy_tiers:
            return v
        key = _key(key)
        old, fmt = self._legacy_get(key)
        if old is None:
            return None
        converted = convert_value(old, fmt, self.format)
        if not self.partition.readonly:
            self._write([(key, converted)])
        return converted

    def _write(self, rows: list[Row]) -> None:
        ov = self.db_overlay
        if ov is not None:
            for k, v in rows:
                ov.put(k, v)
                for _, _, lov in self.legacy_tiers:
                    lov.put(k, None)  # type: ignore[union-attr]
            return
        writes = {self.db: rows}
        for db, _, _ in self.legacy_tiers:
            writes[db] = [(k, None) for k, _ in rows]
        self.partition.write_through_dbs(writes)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``value`` (None: delete) to the new database and delete ``key`` from every
        legacy tier."""
        if not self.is_open or self.partition.readonly:
            self._check_writable()
        self._write([(_key(key), _value(value))])

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write every ``(key, value)``; all are validated before any is written."""
        self._check_writable()
        rows: list[Row] = []
        for entry in entries:
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise InvalidTypeError(f"put_all expects (key, value) pairs, got {entry!r:.60}")
            rows.append((_key(entry[0]), _value(entry[1])))
        if rows:
            self._write(rows)

    def approximate_num_entries(self) -> int:
        """Entries of the new database plus those still in legacy tiers (an estimate)."""
        n = super().approximate_num_entries()
        return n + sum(self.partition.count(db) for db, _, _ in self.legacy_tiers)

    def approximate_num_uncommitted_bytes(self) -> int:
        """Approximate bytes staged for the next commit, over every tier."""
        self.check_open()
        ov = self.partition.overlay
        return 0 if ov is None or self.db_overlay is None else ov.uncommitted_bytes(self.name)

    def read_committed(self) -> UpgradingReadCommittedView:
        """A read-only view of committed data, every tier merged (no migration)."""
        self.check_open()
        return UpgradingReadCommittedView(self)


class UpgradingReadCommittedView(ReadCommittedView):
    """Committed data of an upgrading store: the new database over the converted legacy
    tiers; reads never migrate."""

    _store: UpgradingBytesKeyValueStore

    def __init__(self, store: UpgradingBytesKeyValueStore, snapshot: Snapshot | None = None):
        super().__init__(store, snapshot)

    def _tier(self, db: bytes) -> ChunkSource:
        if self._snap is None:
            return self._store.partition.source(db, shared=True)
        return self._snap.source(db)

    def _source(self) -> ChunkSource:
        st = self._store
        source = super()._source()
        for db, fmt, _ in st.legacy_tiers:
            source = MergedSource(source, _converting(self._tier(db), fmt, st.format), False)
        return source

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key`` in the store's format, or None."""
        v = super().get(key)
        if v is not None:
            return v
        st = self._store
        for db, fmt, _ in st.legacy_tiers:
            if self._snap is not None:
                old = self._snap.get(db, key)
            else:
                old = st.partition.get(db, key, shared=True)
            if old is not None:
                return convert_value(old, fmt, st.format)
        return None

    def approximate_num_entries(self) -> int:
        """Committed entries over every tier."""
        n = super().approximate_num_entries()
        st = self._store
        for db, _, _ in st.legacy_tiers:
            n += (
                self._snap.count(db)
                if self._snap is not None
                else st.partition.count(db, shared=True)
            )
        return n

    def snapshot(self) -> UpgradingReadCommittedView:
        """A view whose reads all see one committed state."""
        self.check_open()
        return UpgradingReadCommittedView(self._store, self._store.partition.snapshot())
