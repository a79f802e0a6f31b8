"""Typed key-value stores: serdes and value formats over a bytes key-value store.

One class serves every format: the value codec (:mod:`txstore.stores.formats`) decides whether
values are plain, :class:`~txstore.types.ValueAndTimestamp` or
:class:`~txstore.types.ValueTimestampHeaders`. When the bytes underneath are kept in another
format than the one the store is used in (a timestamped builder over a plain supplier), values
are converted on every read and write, as Kafka's ``KeyValueToTimestampedKeyValueByteStoreAdapter``
does: a plain value read through a timestamped store gets the timestamp -1, and a timestamp or
headers written to a plain store are dropped.

Costs in this module: ``n`` committed entries, ``u`` uncommitted ones (staged in the
partition's overlay until ``commit``), ``k`` pairs returned. Keys go through the key serde
once per call; a ``None`` key, an empty one or one above LMDB's 511-byte limit raises
:class:`~txstore.errors.InvalidArgumentError`, and a key or value the serde cannot take
raises the serde's error (:class:`~txstore.errors.InvalidTypeError` for the built-in serdes).
Every operation on a closed store raises :class:`~txstore.errors.StoreClosedError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from types import MethodType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from txstore import codecs
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.changelog.layer import ChangeLoggingKeyValueBytesStore
from txstore.codecs import ValueFormat
from txstore.engine.base import MAX_KEY_SIZE
from txstore.engine.checksums import ChecksumError, kv_getter, unseal
from txstore.engine.iterators import KeyValueIterator as BytesIterator
from txstore.engine.lmdb_errors import LMDBError, lmdb_error
from txstore.engine.overlay import NOT_FOUND
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, SerializationError
from txstore.stores.formats import ValueCodec
from txstore.stores.serdes import BytesSerde, Serde
from txstore.stores.stored_errors import stored_bytes_error
from txstore.types import KeyValue

__all__ = ["KeyValueIterator", "KeyValueStore", "ReadOnlyKeyValueStore"]

K = TypeVar("K")
V = TypeVar("V")


_new_tuple = tuple.__new__
_to_key_value = partial(_new_tuple, KeyValue)  # a (key, value) row to a KeyValue, in C


def _is(obj: object, cls: type) -> bool:
    """``type(obj) is cls``: exactly that class, not a subclass (which may override)."""
    return type(obj) is cls


class KeyValueIterator(Generic[K, V]):
    """An iterator of :class:`~txstore.types.KeyValue` pairs, deserialized.

    Close it (or use it in a ``with`` block) when done; the store closes it on its own close.
    After closing it yields nothing. ``peek_next_key()`` returns the next key without
    advancing, or ``None`` at the end. Rows are read in chunks of 128 to 1024 (one B-tree
    seek and, on a store, a merge with the overlay each), so ``next()`` is O(1) amortized and
    no LMDB read transaction is held between chunks.
    """

    # No __slots__: some subclasses also derive from a C iterator (``map``, and
    # ``itertools.takewhile`` for window fetches), whose layout admits no second one.

    def __init__(self, inner: BytesIterator, decode_key: Any, decode_value: Any) -> None:
        self._inner = inner
        self._decode_key = decode_key
        self._decode_value = decode_value

    def __iter__(self) -> Iterator[KeyValue[K, V]]:
        return self

    def __next__(self) -> KeyValue[K, V]:
        k, v = next(self._inner)
        try:
            return _new_tuple(KeyValue, (self._decode_key(k), self._decode_value(v)))
        except SerializationError as exc:  # stored bytes: name the store, file and key
            raise stored_bytes_error(_store_of(self._decode_value), k, exc) from exc

    def has_next(self) -> bool:
        """Whether another pair follows. O(1) amortized (it may read the next chunk)."""
        return self._inner.has_next()

    def peek_next_key(self) -> K | None:
        """The next key without consuming it, or ``None`` at the end.

        O(1) amortized (it may read the next chunk) plus one key deserialization.
        """
        k = self._inner.peek_next_key()
        try:
            return None if k is None else self._decode_key(k)
        except SerializationError as exc:
            raise stored_bytes_error(_store_of(self._decode_value), k, exc) from exc

    def close(self) -> None:
        """Release the iterator's resources (its buffered chunk); idempotent. O(1)."""
        self._inner.close()

    def __enter__(self) -> KeyValueIterator[K, V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _store_of(decode_value: Any) -> Any:
    """The typed store whose bound method ``decode_value`` is (``None`` for a function)."""
    return getattr(decode_value, "__self__", None)


if TYPE_CHECKING:
    _Map = map[Any]
else:
    _Map = map


class _RawKeyValueIterator(_Map, KeyValueIterator[K, V]):
    """A :class:`KeyValueIterator` of a store whose serdes are the identity (bytes keys and
    plain bytes values): it *is* a ``map`` of the bytes iterator's rows to ``KeyValue``, so
    ``next()`` runs in C on top of the bytes iterator, which keeps every other behaviour
    (closing, peeking, the store closing it). Measured on a merged scan of 200k rows (10% of
    them changed in the overlay): 384 ns a row, against 766 through a Python ``__next__``."""

    def __new__(cls, inner: BytesIterator) -> _RawKeyValueIterator[K, V]:
        self: _RawKeyValueIterator[K, V] = _Map.__new__(cls, _to_key_value, inner)
        self._inner = inner
        return self

    if TYPE_CHECKING:

        def __init__(self, inner: BytesIterator) -> None: ...

    else:
        __init__ = object.__init__  # everything is set by __new__

    def peek_next_key(self) -> K | None:
        key: Any = self._inner.peek_next_key()  # the identity key serde
        return key  # type: ignore[no-any-return]


class ReadOnlyKeyValueStore(Generic[K, V]):
    """The read half of a typed key-value store (what interactive queries get).

    :meth:`KeyValueStore.read_committed` and :meth:`snapshot` return one: a view of
    committed data only, usable from any thread. Each point read and each iterator chunk of a
    view is one short LMDB read transaction (a snapshot view: all in its one transaction), so
    its costs below are those of committed data, without the overlay.
    """

    def __init__(
        self,
        inner: Any,
        key_serde: Serde[K],
        codec: ValueCodec[V],
        stored_format: ValueFormat | None = None,
    ) -> None:
        self._inner = inner
        self._damage_origin: Any = inner  # where its bytes are (a view: its store's)
        self.key_serde = key_serde
        """The key serde."""
        self.codec = codec
        """The value codec: the value serde and the format the store is used in."""
        self.stored_format = codec.format if stored_format is None else stored_format
        """The format the bytes are kept in (another than :attr:`format` when adapted)."""
        # The value conversions of an adapted store (None: the formats are the same), resolved
        # once here rather than dispatched on the two formats for every value.
        self._from_stored: codecs.ValueConverter | None = None
        self._to_stored: codecs.ValueConverter | None = None
        if self.stored_format != codec.format:
            self._from_stored = codecs.value_converter(self.stored_format, codec.format)
            self._to_stored = codecs.value_converter(codec.format, self.stored_format)
        # Identity conversions (``Serdes.bytes()``, plain values kept as they are): ``bytes``
        # keys and values then skip the serde calls, which were most of the typed layer's
        # cost (measured on 200k keys: a put 754 against 429 ns at the bytes level).
        self._raw_keys = _is(key_serde, BytesSerde)
        self._raw_values = (
            _is(codec.serde, BytesSerde)
            and codec.format == ValueFormat.PLAIN
            and self.stored_format == ValueFormat.PLAIN
        )

    # ---- conversions --------------------------------------------------------------

    def _key(self, key: K | None) -> bytes:
        if key is None:
            raise InvalidArgumentError("key cannot be null")
        kb = self.key_serde.serialize(key)
        if kb is None:
            raise InvalidArgumentError(f"the key serde turned {key!r} into null")
        return kb

    def _bound(self, key: K | None) -> bytes | None:
        return None if key is None else self._key(key)

    def decode_value(self, raw: bytes | None) -> V | None:
        """The value a stored value ``raw`` (bytes in :attr:`stored_format`, or ``None``)
        stands for, as :meth:`get` returns it: converted to the store's format and
        deserialized. For readers that serialized the key themselves (interactive queries)."""
        if raw is None:
            return None
        if self._from_stored is not None:
            raw = self._from_stored(raw)
        result: V | None = self.codec.decode(raw)
        return result

    def _decode_at(self, key: object, raw: bytes | None) -> V | None:
        """:meth:`decode_value` of the bytes stored under ``key``: a decode failure names the
        store, its file and the key."""
        try:
            return self.decode_value(raw)
        except SerializationError as exc:
            raise stored_bytes_error(self, key, exc) from exc

    def _iter(self, inner: BytesIterator) -> KeyValueIterator[K, V]:
        if self._raw_keys and self._raw_values:
            return _RawKeyValueIterator(inner)
        return KeyValueIterator(inner, self.key_serde.deserialize, self.decode_value)

    # ---- reads --------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The store's name. O(1)."""
        name: str = self._inner.name
        return name

    @property
    def bytes_store(self) -> Any:
        """The bytes layer under this store or view (``get(key_bytes)`` reads a serialized
        key; a task's store: its change-logging layer, which forwards reads). O(1)."""
        return self._inner

    def get(self, key: K) -> V | None:
        """The value of ``key``, or ``None``.

        O(log n): one key serialization and one LMDB B-tree lookup (a view: in a short read
        transaction). Raises :class:`~txstore.errors.InvalidArgumentError` for a ``None``,
        empty or oversized key.
        """
        raw = self._inner.get(key if type(key) is bytes and self._raw_keys else self._key(key))
        if self._raw_values:
            return raw  # type: ignore[no-any-return]
        try:
            return self.decode_value(raw)
        except SerializationError as exc:  # stored bytes: name the store, file and key
            raise stored_bytes_error(self, key, exc) from exc

    def range(self, key_from: K | None, key_to: K | None) -> KeyValueIterator[K, V]:
        """Pairs with ``key_from <= key <= key_to`` in key order; ``None`` is unbounded.

        Bounds compare serialized bytes; ``from > to`` gives an empty iterator and logs
        Kafka's warning. O(log n + k) for ``k`` pairs: one B-tree seek per chunk of 128 to 1024
        rows, merged with the overlay on a store (whose first ordered read after puts also
        sorts the newly staged keys into the overlay's index). Close the iterator when done.
        A bound of the wrong type raises the serde's error.
        """
        return self._iter(self._inner.range(self._bound(key_from), self._bound(key_to)))

    def reverse_range(self, key_from: K | None, key_to: K | None) -> KeyValueIterator[K, V]:
        """Like :meth:`range`, in descending key order; same cost, O(log n + k)."""
        return self._iter(self._inner.reverse_range(self._bound(key_from), self._bound(key_to)))

    def all(self) -> KeyValueIterator[K, V]:
        """Every pair in key order: O(n + u), in chunks as :meth:`range` (close it)."""
        return self._iter(self._inner.all())

    def reverse_all(self) -> KeyValueIterator[K, V]:
        """Every pair in descending key order: O(n + u), as :meth:`all`."""
        return self._iter(self._inner.reverse_all())

    def prefix_scan(self, prefix: Any, prefix_serializer: Serde[Any]) -> KeyValueIterator[K, V]:
        """Pairs whose serialized key starts with ``prefix_serializer.serialize(prefix)``.

        O(log n + k), in key order, as :meth:`range`. Raises
        :class:`~txstore.errors.InvalidArgumentError` if the prefix serializes to ``None``.
        """
        pb = prefix_serializer.serialize(prefix)
        if pb is None:
            raise InvalidArgumentError("prefix cannot be null")
        return self._iter(self._inner.prefix_scan(pb))

    def approximate_num_entries(self) -> int:
        """An estimate of the number of pairs (exact when nothing is uncommitted).

        O(1): LMDB's entry count plus the overlay's staged puts minus its staged deletes (one
        count per legacy tier more for a store being upgraded).
        """
        n: int = self._inner.approximate_num_entries()
        return n

    def snapshot(self) -> ReadOnlyKeyValueStore[K, V]:
        """A read-only view where every read sees one committed state (data and offset);
        close it soon (it pins LMDB pages), or use it in a ``with`` block.

        O(1): opens one LMDB read transaction, held until the view is closed (an in-memory
        store copies its table of databases, the data itself copy-on-write).
        """
        return self._view(self._inner.snapshot())

    def _view(self, inner: Any) -> ReadOnlyKeyValueStore[K, V]:
        """A typed view of the bytes view ``inner``, whose bytes are this store's."""
        view = ReadOnlyKeyValueStore(inner, self.key_serde, self.codec, self.stored_format)
        view._damage_origin = self._damage_origin
        return view

    @property
    def committed_offset(self) -> int | None:
        """The changelog offset of the last commit (of this snapshot, for a snapshot view),
        or ``None`` if never committed.

        One lookup in the partition's metadata database, in a short LMDB read transaction.
        """
        offset: int | None = self._inner.committed_offset
        return offset

    def close(self) -> None:
        """Close this view's iterators and snapshot (a store: the store); idempotent.

        O(open iterators).
        """
        self._inner.close()

    def __enter__(self) -> ReadOnlyKeyValueStore[K, V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KeyValueStore(ReadOnlyKeyValueStore[K, V]):
    """A typed key-value store: Kafka's ``KeyValueStore`` with snake_case names.

    Create one with :class:`~txstore.stores.factories.Stores` builders or
    :meth:`txstore.Database.key_value_store`. Writes of a transactional store are buffered until
    :meth:`commit`; :meth:`read_committed` gives the committed view other threads see. One
    thread owns the store (every operation but those of the read-committed views).

    >>> import tempfile, txstore
    >>> from txstore import Serdes
    >>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
    ...     users = db.key_value_store("users", Serdes.string(), Serdes.long())
    ...     users.put_all([("ada", 1), ("bob", 2), ("cyd", 3)])
    ...     users.commit(changelog_offset=0)
    ...     users.put("ada", 10)                     # buffered until the next commit
    ...     with users.read_committed() as committed:
    ...         print(users.get("ada"), committed.get("ada"))
    ...     with users.range("b", None) as it:
    ...         print([(kv.key, kv.value) for kv in it])
    ...     users.recover(0)                         # discards the uncommitted put
    ...     users.get("ada")
    10 1
    [('bob', 2), ('cyd', 3)]
    True
    1
    """

    _inner: BytesKeyValueStore

    def __init__(
        self,
        inner: Any,
        key_serde: Serde[K],
        codec: ValueCodec[V],
        stored_format: ValueFormat | None = None,
    ) -> None:
        super().__init__(inner, key_serde, codec, stored_format)
        # Bytes in, bytes stored, on a plain transactional bytes store (no upgrade): a get
        # reads the overlay and then the writer's read transaction of an LMDB partition (see
        # PartitionReads.writer_txn) as BytesKeyValueStore.get and Partition.get do, in one
        # call; a task's store reads the bytes store under its change logging, which forwards
        # reads unchanged. A put goes straight to the overlay, one call instead of three, on a
        # store without change logging only (a task's puts are logged).
        raw = self._raw_keys and self._raw_values
        reader = inner.inner if type(inner) is ChangeLoggingKeyValueBytesStore else inner
        self._ov = inner.db_overlay if raw and type(inner) is BytesKeyValueStore else None
        self._get_ov = reader.db_overlay if raw and type(reader) is BytesKeyValueStore else None
        self._reader = reader
        if self._get_ov is not None:
            p = reader.partition
            self._committed_get = p.get
            self._lmdb: Partition | None = p if type(p) is Partition else None
            self._db = reader.db
            if self._lmdb is not None and type(self).get is KeyValueStore.get:
                # The same fast path without a Python frame: a C builtin reading the live
                # state (the bytes store's and the partition's instance dicts, the overlay's
                # slots) at each call, and calling this class's get for anything else (see
                # csrc/kv_get.c); an instance attribute, so ``store.get`` is the builtin.
                ov = self._get_ov
                state = (
                    vars(reader),
                    ov,
                    type(ov).__dict__["mem"],
                    type(ov).__dict__["layered"],
                    vars(self._lmdb),
                    self._db,
                    MethodType(KeyValueStore.get, self),
                    MAX_KEY_SIZE,
                )
                setattr(self, "get", kv_getter(state))  # noqa: B010 (mypy: a method)

    def get(self, key: K) -> V | None:
        """The value of ``key``, or ``None``, uncommitted writes included.

        O(1) for a key staged since the last commit (a dict lookup in the overlay); else one
        lookup per spilled run, if the overlay spilled, and one LMDB B-tree lookup, O(log n),
        in the writer's read transaction. A store being upgraded also looks up each legacy
        tier on a miss. Raises :class:`~txstore.errors.InvalidArgumentError` for a ``None``,
        empty or oversized key.
        """
        ov = self._get_ov
        k: Any = key
        if (
            ov is not None
            and type(k) is bytes
            and 0 < len(k) <= MAX_KEY_SIZE
            and self._reader.is_open
        ):
            v = ov.mem.get(k, NOT_FOUND)
            if v is NOT_FOUND:
                if ov.layered:
                    v = ov.get(k)
                    if v is not NOT_FOUND:
                        return v  # type: ignore[return-value]
                p = self._lmdb
                if p is not None:
                    txn = p.writer_txn
                    if txn is not None:
                        h = p.writer_handles.get(self._db)
                        if h is not None:
                            # Partition.get's checks, inlined (one call less); the value
                            # passed straight on is stripped in place (see unseal)
                            try:
                                if not p.checksums:
                                    return txn.get(k, None, h)  # type: ignore[return-value]
                                return unseal(k, txn.get(k, None, h))  # type: ignore[return-value]
                            except ChecksumError as exc:
                                raise p.damaged(self._db, exc) from None
                            except LMDBError as exc:
                                raise lmdb_error(exc, str(p.path)) from exc
                return self._committed_get(self._db, k)  # type: ignore[no-any-return]
            return v  # type: ignore[return-value]
        return super().get(key)

    def _encode(self, value: V | None) -> bytes | None:
        raw = self.codec.encode(value)
        if raw is not None and self._to_stored is not None:
            raw = self._to_stored(raw)
        return raw

    # ---- writes -------------------------------------------------------------------

    def put(self, key: K, value: V | None) -> None:
        """Set ``key`` to ``value``; a ``None`` value (or one that serializes to ``None``)
        deletes.

        Transactional: O(1) amortized, serialized into the overlay (when the partition's
        overlays pass their memory budget, this put spills them all to disk, O(u log u)).
        Not transactional: one LMDB write transaction, synced unless ``sync=False``. Raises
        :class:`~txstore.errors.InvalidArgumentError` for a ``None``, empty or oversized key,
        :class:`~txstore.errors.ReadOnlyError` on a read-only database.
        """
        ov = self._ov
        k: Any = key
        v: Any = value
        if (
            ov is not None
            and type(k) is bytes
            and 0 < len(k) <= MAX_KEY_SIZE
            and (v is None or type(v) is bytes)
            and self._inner.is_open
        ):
            ov.put(k, v)  # what BytesKeyValueStore.put does with these arguments
            return
        self._inner.put(
            k if type(k) is bytes and self._raw_keys else self._key(key),
            v if self._raw_values and (v is None or type(v) is bytes) else self._encode(value),
        )

    def put_if_absent(self, key: K, value: V | None) -> V | None:
        """Put only if ``key`` has no value; return the value it had (``None`` if absent).

        The cost of a :meth:`get`, plus a :meth:`put` when absent; raises as they do.
        """
        kb = self._key(key)
        old = self._inner.get(kb)
        if old is None:
            self._inner.put(kb, self._encode(value))
            return None
        return self._decode_at(key, old)

    def put_all(self, entries: Iterable[tuple[K, V | None]]) -> None:
        """Put every ``(key, value)`` pair (``KeyValue`` works too), in order.

        Every pair is serialized and checked before any is written, so a bad one writes none.
        Transactional: O(m) amortized for ``m`` pairs into the overlay; not transactional: one
        LMDB write transaction for all of them, O(m log m) to sort them plus the writes.
        """
        self._inner.put_all([(self._key(k), self._encode(v)) for k, v in entries])

    def delete(self, key: K) -> V | None:
        """Delete ``key``; return the value it had, or ``None``.

        The cost of a :meth:`get` plus, when the key had a value, a :meth:`put` of a
        tombstone; raises as they do.
        """
        return self._decode_at(key, self._inner.delete(self._key(key)))

    # ---- transactions -------------------------------------------------------------

    def commit(self, changelog_offset: int) -> None:
        """Make every buffered write durable together with ``changelog_offset``.

        One LMDB write transaction, synced unless the database was opened with ``sync=False``:
        the ``u`` staged writes (spilled runs included) are applied in key order, O(u log n),
        with the offset. Not transactional: the offset is written in one LMDB write transaction
        and the environment synced. A negative offset or one below the committed offset raises
        :class:`~txstore.errors.OffsetError` and writes nothing; a non-``int`` one raises
        :class:`~txstore.errors.InvalidTypeError`; a read-only database raises
        :class:`~txstore.errors.ReadOnlyError`. To commit several stores in one transaction,
        use :meth:`txstore.Database.commit`.
        """
        self._inner.commit(changelog_offset)

    def recover(self, offset: int) -> bool:
        """Discard uncommitted writes (also any spill a crash left on disk); return whether the
        committed offset is at or past ``offset``.

        O(u) to drop the staged writes (spilled runs are dropped, not read) plus one metadata
        lookup; never O(n). Raises :class:`~txstore.errors.OffsetError` for a negative offset
        and :class:`~txstore.errors.InvalidTypeError` for a non-``int`` one.
        """
        result: bool = self._inner.recover(offset)
        return result

    def approximate_num_uncommitted_bytes(self) -> int:
        """Approximate size in bytes of the buffered, uncommitted writes (memory and spill).

        O(1): the overlay's running count (keys, values and a fixed per-entry overhead).
        """
        n: int = self._inner.approximate_num_uncommitted_bytes()
        return n

    def read_committed(self) -> ReadOnlyKeyValueStore[K, V]:
        """A read-only view of committed data only (KIP-892's read-committed isolation).

        Safe to use from other threads while the owner writes and commits; it never blocks
        the writer. O(1) to create; its reads cost as :class:`ReadOnlyKeyValueStore` says.
        """
        return self._view(self._inner.read_committed())

    # ---- state ----------------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        """Whether the store lives in an LMDB file (``False`` for in-memory stores). O(1)."""
        return bool(self._inner.persistent)

    @property
    def transactional(self) -> bool:
        """Whether writes are buffered until :meth:`commit`. O(1)."""
        return bool(self._inner.transactional)

    @property
    def is_open(self) -> bool:
        """Whether the store can be used (``False`` once closed). O(1)."""
        return bool(self._inner.is_open)

    @property
    def format(self) -> ValueFormat:
        """The value format the store is used in. O(1)."""
        return self.codec.format

    def close(self) -> None:
        """Close the store and its open iterators; idempotent. Uncommitted writes are lost.

        O(open iterators + u): the staged writes are dropped, nothing is written.
        """
        self._inner.close()

    def __enter__(self) -> KeyValueStore[K, V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "persistent" if self.persistent else "in-memory"
        return f"<KeyValueStore {self.name!r} {kind} {self.codec.format.name}>"
