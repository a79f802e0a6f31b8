"""The bytes key-value store, persistent (LMDB) or in memory, transactional or not.

One class, :class:`BytesKeyValueStore`, over a pluggable committed tier: give it a
:class:`~txstore.engine.partition.Partition` for the persistent store (LMDB), or a
:class:`MemoryPartition` (or ``None``, which creates a private one) for the in-memory store,
whose committed tier is a ``SortedDict`` per database. Both behave the same; only durability
differs. Keys and values are ``bytes``; serdes belong to the typed layer above.

``transactional=True`` (the default, KIP-892): writes go to the partition's overlay;
:meth:`BytesKeyValueStore.commit` applies them with the changelog offset in one LMDB write
transaction; :meth:`BytesKeyValueStore.recover` discards them. The store reads its own writes
(read-uncommitted); :meth:`BytesKeyValueStore.read_committed` gives a view of committed data
only. ``transactional=False``: each write is one LMDB write transaction (``put_all`` one for
all), ``commit`` records the offset and flushes, ``recover`` has nothing to discard.

Threads: one writer thread owns the store (every operation but the read-committed views);
read-committed views may be used from any thread, concurrently with the writer, and never
block it. Costs below: ``n`` committed entries, ``u`` uncommitted ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

from txstore.codecs import ValueFormat, records_to_values
from txstore.engine.base import (
    MAX_KEY_SIZE,
    PartitionBase,
    Snapshot,
    check_offset,
    check_store_name,
)
from txstore.engine.checksums import frame_records, restore_frames, restore_rows
from txstore.engine.iterators import (
    EMPTY_SOURCE,
    ChunkedIterator,
    ChunkSource,
    EmptyIterator,
    IteratorRegistry,
    KeyRange,
    KeyValueIterator,
    MergedSource,
    Row,
    invalid_range_warning,
)
from txstore.engine.memory import MemoryPartition
from txstore.engine.overlay import NOT_FOUND, DbOverlay
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    ReadOnlyError,
    StoreClosedError,
)

__all__ = [
    "DEFAULT_META",
    "BytesKeyValueStore",
    "MemoryPartition",
    "ReadCommittedView",
    "checked_rows",
]

DEFAULT_META: Final[Mapping[str, Any]] = {"kind": "key_value", "format": "bytes"}


def _bad_key(key: object) -> NoReturn:
    if key is None:
        raise InvalidArgumentError("key must not be None")
    if not isinstance(key, bytes):
        raise InvalidTypeError(f"key must be bytes, got {type(key).__name__}")
    if not key:
        raise InvalidArgumentError("key must not be empty: LMDB rejects zero-length keys")
    raise InvalidArgumentError(
        f"key is {len(key)} bytes, above LMDB's maximum key size of {MAX_KEY_SIZE} bytes"
    )


def _key(key: object) -> bytes:
    if type(key) is bytes and 0 < len(key) <= MAX_KEY_SIZE:
        return key
    if isinstance(key, bytes) and 0 < len(key) <= MAX_KEY_SIZE:
        return bytes(key)
    _bad_key(key)


def _value(value: object) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes):
        return bytes(value)
    raise InvalidTypeError(f"value must be bytes or None, got {type(value).__name__}")


def checked_rows(keys: Sequence[object], values: Sequence[object]) -> dict[bytes, bytes | None]:
    """The last value of each key (None: a delete), every key and value checked as
    :meth:`BytesKeyValueStore.put_all` checks them (the typed error naming a bad one)."""
    return {_key(k): _value(v) for k, v in zip(keys, values, strict=True)}


def _bound(bound: object, what: str) -> bytes | None:
    if bound is None or type(bound) is bytes:
        return bound
    if isinstance(bound, bytes):
        return bytes(bound)
    raise InvalidTypeError(f"{what} must be bytes or None, got {type(bound).__name__}")


def _range(lo: object, hi: object) -> KeyRange | None:
    """Validated inclusive range; None (and Kafka's warning) when from > to."""
    lo_b, hi_b = _bound(lo, "from key"), _bound(hi, "to key")
    if lo_b is not None and hi_b is not None and lo_b > hi_b:
        invalid_range_warning()
        return None
    return KeyRange(lo_b, hi_b)


def _prefix(prefix: object) -> KeyRange:
    if prefix is None:
        raise InvalidArgumentError("prefix must not be None")
    p = _bound(prefix, "prefix")
    assert p is not None
    return KeyRange.prefix(p)


class _Reads:
    """Read operations shared by the store and its read-committed views."""

    _store: BytesKeyValueStore
    iterators: IteratorRegistry
    """The open iterators of this store or view (closed with it)."""

    def _source(self) -> ChunkSource:
        raise NotImplementedError

    def check_open(self) -> None:
        self._store.check_open()

    def _iterate(self, rng: KeyRange | None, reverse: bool) -> KeyValueIterator:
        self.check_open()
        if rng is None:
            return EmptyIterator()
        it = ChunkedIterator(self._source(), rng, reverse, self.iterators.discard)
        self.iterators.add(it)
        return it

    @property
    def persistent(self) -> bool:
        """True for LMDB-backed stores."""
        return self._store.partition.persistent

    def range(self, from_key: bytes | None, to_key: bytes | None) -> KeyValueIterator:
        """Entries with ``from_key <= key <= to_key`` (None: unbounded), ascending.

        ``from_key > to_key`` gives an empty iterator and logs Kafka's warning. O(log n) to
        start, O(1) amortized a row.
        """
        return self._iterate(_range(from_key, to_key), False)

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> KeyValueIterator:
        """The entries of :meth:`range`, descending."""
        return self._iterate(_range(from_key, to_key), True)

    def all(self) -> KeyValueIterator:
        """Every entry, ascending. O(1) amortized a row."""
        return self._iterate(KeyRange(), False)

    def reverse_all(self) -> KeyValueIterator:
        """Every entry, descending."""
        return self._iterate(KeyRange(), True)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator:
        """Entries whose key starts with ``prefix`` (all for ``b""``), ascending."""
        return self._iterate(_prefix(prefix), False)


class BytesKeyValueStore(_Reads):
    """A key-value store of bytes on a partition (see the module docstring).

    ``BytesKeyValueStore(name, partition=None, *, transactional=True, meta=None)``: ``partition``
    is a :class:`~txstore.engine.partition.Partition` (persistent) or a :class:`MemoryPartition`;
    ``None`` creates a private in-memory one. ``meta`` is recorded at first open (default
    :data:`DEFAULT_META`); reopening with different metadata raises ``ConfigConflictError``;
    ``meta=None`` on an existing store accepts what is recorded (the typed layer registers its
    own metadata with ``Partition.register_store`` first).
    A store on a read-only partition raises ``ReadOnlyError`` on writes.
    """

    def __init__(
        self,
        name: str,
        partition: PartitionBase | None = None,
        *,
        transactional: bool = True,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        check_store_name(name)
        self.is_open = False
        """False once :meth:`close` was called."""
        self._owns_partition = partition is None
        p = MemoryPartition() if partition is None else partition
        self.partition: PartitionBase = p
        """The partition holding the store."""
        self.name = name
        """The store name."""
        self._store = self
        self._transactional = bool(transactional)
        existing = p.store_meta(name) if meta is None else None
        if existing is not None:
            self.meta = existing
        else:
            self.meta = p.register_store(name, DEFAULT_META if meta is None else meta)
        self.db = p.db_name(name)
        """The named database holding the store's committed data."""
        self.db_overlay: DbOverlay | None = None
        """The store's overlay of uncommitted writes (None unless transactional on a writable
        partition); read by the typed store's fast paths, set at construction only."""
        if self._transactional and p.overlay is not None and not p.readonly:
            self.db_overlay = p.overlay.db(name, self.db)
        self.iterators = IteratorRegistry()
        p.attach(name, self)
        self.is_open = True

    # -- state --------------------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        """True if writes are buffered until :meth:`commit`."""
        return self._transactional

    def check_open(self) -> None:
        if not self.is_open:
            raise StoreClosedError(self.name)

    def _check_writable(self) -> None:
        if not self.is_open:
            raise StoreClosedError(self.name)
        if self.partition.readonly:
            raise ReadOnlyError(f"store {self.name!r} is on a read-only partition")

    def close(self) -> None:
        """Close the store and its iterators; uncommitted writes are discarded. Idempotent."""
        if not self.is_open:
            return
        self.is_open = False
        self.iterators.close_all()
        p = self.partition
        if not p.closed:
            if self.db_overlay is not None:
                p.discard(self.name)
            p.detach(self.name, self)
            if self._owns_partition:
                p.close()

    def __enter__(self) -> BytesKeyValueStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "persistent" if self.partition.persistent else "in-memory"
        tx = "transactional" if self._transactional else "non-transactional"
        state = "open" if self.is_open else "closed"
        return f"<BytesKeyValueStore {self.name!r} {kind} {tx} {state}>"

    # -- reads (read-uncommitted) -------------------------------------------------------------

    def _source(self) -> ChunkSource:
        committed = self.partition.source(self.db)
        ov = self.db_overlay
        if ov is None:
            return committed
        return MergedSource(ov, EMPTY_SOURCE if ov.dropped else committed, False)

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` (uncommitted writes included), or None. O(1) + O(log n)."""
        if not self.is_open:
            raise StoreClosedError(self.name)
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_SIZE:
            key = _key(key)
        ov = self.db_overlay
        if ov is not None:
            v = ov.mem.get(key, NOT_FOUND)  # the memory tier, inlined
            if v is NOT_FOUND and ov.layered:
                v = ov.get(key)
            if v is not NOT_FOUND:
                return v  # type: ignore[return-value]
        return self.partition.get(self.db, key)

    def approximate_num_entries(self) -> int:
        """Committed entries plus staged puts minus staged deletes, at least the staged puts.

        Exact when nothing is staged, or when nothing was committed; otherwise an estimate
        (a staged put may overwrite a committed key, a staged delete may hit no key). O(1).
        """
        self.check_open()
        n: int = self.partition.count(self.db)
        ov = self.db_overlay
        if ov is not None:
            puts, deletes = ov.staged_counts()
            n = max((0 if ov.dropped else n) + puts - deletes, puts)
        return n

    def approximate_num_uncommitted_bytes(self) -> int:
        """Approximate bytes staged for the next commit, memory and spill (KIP-892). O(1)."""
        self.check_open()
        return 0 if self.db_overlay is None else self.db_overlay.uncommitted_bytes()

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``value`` under ``key``; ``None`` deletes. O(1) amortized (transactional),
        else one LMDB write transaction."""
        ov = self.db_overlay  # None unless transactional on a writable partition
        if (
            ov is not None
            and self.is_open
            and type(key) is bytes
            and 0 < len(key) <= MAX_KEY_SIZE
            and (value is None or type(value) is bytes)
        ):
            ov.put(key, value)  # the common case, without the calls below
            return
        if not self.is_open or self.partition.readonly:
            self._check_writable()
        key = _key(key)
        value = _value(value)
        if ov is not None:
            ov.put(key, value)
        else:
            self.partition.write_through(self.db, [(key, value)])

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        """Write ``value`` only if ``key`` has no value; returns the existing value or None."""
        self._check_writable()
        value = _value(value)
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write every ``(key, value)`` (None deletes); the last write of a key wins.

        All entries are validated before any is written. Non-transactional: one LMDB write
        transaction for all.
        """
        self._check_writable()
        rows: list[Row] = []
        for entry in entries:
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise InvalidTypeError(f"put_all expects (key, value) pairs, got {entry!r:.60}")
            rows.append((_key(entry[0]), _value(entry[1])))
        ov = self.db_overlay
        if ov is not None:
            ov.put_many(rows)
        elif rows:
            self.partition.write_through(self.db, rows)

    def restore_batch(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], changelog_offset: int
    ) -> None:
        """Apply changelog records (``keys[i]`` gets ``values[i]``; ``None`` deletes; the last
        record of a key wins) and commit them with ``changelog_offset``: what
        :meth:`put_all` then :meth:`commit` do, in one synced LMDB transaction, without staging
        the rows in the overlay (the restore path: nothing may be staged). O(n log n) for the
        sort plus O(n log N) to write.

        Keys and values are checked as :meth:`put_all` checks them, before anything is written.
        """
        self._check_writable()
        latest = dict(zip(keys, values, strict=True))  # the last record of a key wins
        n = len(latest)
        if n and not (
            list(map(type, latest)).count(bytes) == n
            and min(map(len, latest)) > 0
            and max(map(len, latest)) <= MAX_KEY_SIZE
        ):
            latest = {_key(k): v for k, v in latest.items()}  # raises the typed error
        stored = list(latest.values())
        if list(map(type, stored)).count(bytes) + stored.count(None) != n:
            latest = {k: _value(v) for k, v in latest.items()}
        ordered = sorted(latest)
        rows = list(zip(ordered, map(latest.__getitem__, ordered), strict=True))
        self.partition.commit_rows(self.name, {self.db: rows}, changelog_offset)

    def restore_records(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: Sequence[int],
        headers: Sequence[bytes],
        fmt: ValueFormat,
        changelog_offset: int,
    ) -> None:
        """:meth:`restore_batch` of changelog records not yet converted: each record (plain
        value, record timestamp, serialized record headers) becomes the stored value of
        ``fmt`` as :func:`~txstore.codecs.records_to_values` makes it. One C pass
        (``restore_rows``) keeps the last record of each key, sorts, converts and seals them,
        making one object per live key and none per overwritten record, and commits the
        columns (:meth:`~txstore.engine.base.PartitionBase.commit_columns`), the tombstones
        as keys to delete. O(n) plus the sort of the keys' first 8 bytes.

        A bad item (a key that is not bytes of 1 to 511 bytes, a value neither bytes nor
        None, a timestamp or headers the format cannot take) sends the batch through
        :func:`~txstore.codecs.records_to_values` and :meth:`restore_batch`, which raise the
        typed error naming it, before anything is written.
        """
        self._check_writable()
        part = self.partition
        try:
            ordered, stored, deletes = restore_rows(
                keys, values, timestamps, headers, int(fmt), part.checksums, MAX_KEY_SIZE
            )
        except (TypeError, ValueError, OverflowError):
            converted = values
            if fmt != ValueFormat.PLAIN:
                converted = records_to_values(fmt, values, timestamps, headers)
            self.restore_batch(keys, converted, changelog_offset)
            return
        part.commit_columns(self.name, self.db, ordered, stored, deletes, changelog_offset)

    def restore_frames(
        self,
        frames: list[tuple[bytes, int, int, int, int, int, int]],
        fmt: ValueFormat,
        changelog_offset: int,
    ) -> None:
        """:meth:`restore_records` of changelog records left where the changelog reader read
        them (``frames``: ``(buf, pos, end, n, has_headers, lo, hi)`` tuples, records
        ``[lo, hi)`` of a stored batch whose columns start at ``buf[pos]``, in changelog order;
        see :class:`~txstore.changelog.reader.FrameBatch`). The C pass (``restore_frames``)
        reads each key and value once from the buffer and writes it once into the stored
        ``bytes``: no object per record, one per live key and value.

        Anything it cannot take (a key of 0 or more than 511 bytes, columns that do not add
        up) decodes the records and goes through :meth:`restore_records`, which raises the
        typed error before anything is written (columns that do not add up, or a slice out of
        the batch: :class:`~txstore.errors.InvalidArgumentError`).
        """
        self._check_writable()
        if not isinstance(frames, list):
            raise InvalidTypeError(f"frames must be a list, got {type(frames).__name__}")
        part = self.partition
        try:
            ordered, stored, deletes = restore_frames(
                frames, int(fmt), part.checksums, MAX_KEY_SIZE
            )
        except (TypeError, ValueError, OverflowError):
            keys, values, stamps, headers = frame_records(frames)
            self.restore_records(keys, values, stamps, headers, fmt, changelog_offset)
            return
        part.commit_columns(self.name, self.db, ordered, stored, deletes, changelog_offset)

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key``; returns its previous value or None."""
        self._check_writable()
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    # -- commit and recovery ------------------------------------------------------------------

    def commit(self, changelog_offset: int) -> None:
        """Make the writes durable with ``changelog_offset`` (KIP-1035), atomically.

        Transactional: one LMDB write transaction applies the overlay and the offset (through
        the partition's multi-store commit), O(u log n) plus one sync. Non-transactional:
        records the offset and flushes. An offset below the committed one raises
        ``OffsetError`` and writes nothing.
        """
        self._check_writable()
        if self.db_overlay is not None:
            self.partition.commit_stores({self.name: changelog_offset})
        else:
            self.partition.record_offset(self.name, changelog_offset)

    def recover(self, changelog_offset: int) -> bool:
        """Discard uncommitted writes (memory and spill); True if the committed offset is at
        or past ``changelog_offset``. O(u) to discard, independent of the store size."""
        self.check_open()
        offset = check_offset(changelog_offset)
        if not self.partition.readonly:
            self.partition.discard(self.name)
        committed = self.partition.committed_offset(self.name)
        return committed is not None and committed >= offset

    @property
    def committed_offset(self) -> int | None:
        """The committed changelog offset, or None if never committed. O(log n)."""
        self.check_open()
        return self.partition.committed_offset(self.name)

    def read_committed(self) -> ReadCommittedView:
        """A read-only view of committed data (usable from any thread). O(1)."""
        self.check_open()
        return ReadCommittedView(self)

    def snapshot(self) -> ReadCommittedView:
        """A read-only view whose reads all see one committed state, data and offset (one
        LMDB read transaction until the view is closed). O(1)."""
        return self.read_committed().snapshot()


class ReadCommittedView(_Reads):
    """Committed data of a store only: LMDB read transactions, never the overlay.

    Usable from any thread, concurrently with the writer, which it never blocks. Each point
    read and each iterator chunk is one short read transaction, so successive reads may see
    successive commits; :meth:`snapshot` gives a view where every read sees one commit.
    Writes raise ``ReadOnlyError``.
    """

    def __init__(self, store: BytesKeyValueStore, snapshot: Snapshot | None = None) -> None:
        self._store = store
        self._snap = snapshot
        self.iterators = IteratorRegistry()

    @property
    def name(self) -> str:
        """The store name."""
        return self._store.name

    def check_open(self) -> None:
        self._store.check_open()
        if self._snap is not None and self._snap.closed:
            raise InvalidStateStoreError(
                f"snapshot view of store {self._store.name!r} is closed: take a new snapshot"
            )

    def _source(self) -> ChunkSource:
        if self._snap is None:
            return self._store.partition.source(self._store.db, shared=True)
        return self._snap.source(self._store.db)

    def _iterate(self, rng: KeyRange | None, reverse: bool) -> KeyValueIterator:
        it = super()._iterate(rng, reverse)
        self._store.iterators.add(it)
        return it

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None. O(log n), one read transaction."""
        self.check_open()
        key = _key(key)
        if self._snap is not None:
            return self._snap.get(self._store.db, key)
        return self._store.partition.get(self._store.db, key, shared=True)

    def approximate_num_entries(self) -> int:
        """Number of committed entries. O(1)."""
        self.check_open()
        if self._snap is not None:
            return self._snap.count(self._store.db)
        return self._store.partition.count(self._store.db, shared=True)

    @property
    def committed_offset(self) -> int | None:
        """The committed offset (of this snapshot, for a snapshot view). O(log n)."""
        self.check_open()
        if self._snap is not None:
            return self._snap.committed_offset(self._store.name)
        return self._store.partition.committed_offset(self._store.name)

    def snapshot(self) -> ReadCommittedView:
        """A view whose reads all see one committed state, data and offset (one LMDB read
        transaction until :meth:`close`; keep it short, it pins pages)."""
        self.check_open()
        return ReadCommittedView(self._store, self._store.partition.snapshot())

    def close(self) -> None:
        """Close this view's iterators and its snapshot, if any. Idempotent."""
        self.iterators.close_all()
        if self._snap is not None:
            self._snap.close()

    def __enter__(self) -> ReadCommittedView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise ReadOnlyError(f"read-committed view of store {self._store.name!r} is read-only")

    put = put_if_absent = put_all = delete = commit = recover = _read_only
