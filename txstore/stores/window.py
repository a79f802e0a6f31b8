"""Typed window stores: Kafka's ``WindowStore`` in all four value formats.

One class serves every format; the value codec (:mod:`txstore.stores.formats`) decides what values
are: plain ``V``, :class:`~txstore.types.ValueAndTimestamp`,
:class:`~txstore.types.ValueTimestampHeaders`, or :class:`~txstore.types.ValueAndHeaders` (the
plain window store with headers, ``[headersSize][headersBytes][value]``). When the bytes are
kept in another format than the one the store is used in, a
:class:`~txstore.bytestores.adapters.FormatAdapter` converts them on every read and write.

Java overloads ``fetch`` by arity, and so does this class (the forms never collide):

* ``V fetch(K key, long time)`` -> ``fetch(key, time)``, the value or None;
* ``WindowStoreIterator<V> fetch(K key, long from, long to)`` -> ``fetch(key, time_from,
  time_to)``;
* ``KeyValueIterator<Windowed<K>, V> fetch(K from, K to, long from, long to)`` ->
  ``fetch(key_from, key_to, time_from, time_to)``;
* ``backwardFetch`` (3 or 4 arguments) -> ``backward_fetch``; ``fetchAll`` / ``backwardFetchAll``
  -> ``fetch_all`` / ``backward_fetch_all``; ``all`` / ``backwardAll`` -> ``all`` /
  ``backward_all``;
* the ``Instant`` overloads -> the same names with timezone-aware ``datetime`` times.

Single-key iterators yield ``KeyValue(timestamp, value)``; the others
``KeyValue(Windowed(key, TimeWindow(start, start + window_size)), value)``. Bounds are
inclusive; ``None`` as a range key is unbounded.

>>> from txstore import Serdes, Stores
>>> store = Stores.window_store_builder(
...     Stores.in_memory_window_store("w", 60_000, 1_000, False), Serdes.string(), Serdes.long()
... ).build()
>>> store.put("a", 1, 0); store.put("a", 2, 1_000); store.put("aa", 3, 1_000)
>>> store.fetch("a", 1_000)
2
>>> with store.fetch("a", 0, 5_000) as it:
...     [(kv.key, kv.value) for kv in it]
[(0, 1), (1000, 2)]
>>> store.close()
"""

from __future__ import annotations

import datetime as _dt
import inspect
import struct
from typing import Any, Generic, TypeVar, overload

from txstore.bytestores.adapters import FormatAdapter
from txstore.bytestores.segments import (
    RowsIterator,
    SegmentedBytesStore,
    SegmentedReadCommittedView,
)
from txstore.changelog.layer import ChangeLoggingSegmentedBytesStore
from txstore.codecs import ValueFormat
from txstore.engine.base import MAX_KEY_SIZE
from txstore.engine.iterators import KeyValueIterator as BytesIterator
from txstore.engine.iterators import Row
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError
from txstore.stores.decoded import DecodedIterator, decoded_iterator, time_windowed
from txstore.stores.formats import ValueCodec
from txstore.stores.kv import KeyValueIterator
from txstore.stores.serdes import Serde, StringSerde
from txstore.stores.stored_errors import stored_bytes_error
from txstore.types import KeyValue, Windowed, check_long

__all__ = [
    "DecodedIterator",
    "ReadOnlyWindowStore",
    "WindowStore",
    "WindowStoreIterator",
    "decoded_iterator",
]

K = TypeVar("K")
V = TypeVar("V")

_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_unpack_start = _Q.unpack_from
_new = tuple.__new__
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_MAX_WINDOW_KEY = MAX_KEY_SIZE - 12  # a window store key's suffix takes 12 bytes
_NO: Any = object()  # an argument not given (``fetch``'s positional overloads)
#: ``Struct(">{n}xq4x").unpack`` by key length ``n``: the start of a window row of a key of
#: ``n`` bytes, from the row's key (raises ``struct.error`` for a key of another length).
_STARTS: dict[int, Any] = {}


def _starts_unpacker(n: int) -> Any:
    unpack = _STARTS[n] = struct.Struct(f">{n}xq4x").unpack
    return unpack


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MS = _dt.timedelta(milliseconds=1)

#: A window store iterator: ``KeyValue(window start timestamp, value)`` pairs.
WindowStoreIterator = KeyValueIterator


def _is(obj: object, cls: type) -> bool:
    """``type(obj) is cls``: exactly that class, not a subclass (which may override)."""
    return type(obj) is cls


def to_millis(name: str, value: object) -> int:
    """Epoch milliseconds of ``value``: an ``int``, or an aware ``datetime`` (Java's
    ``Instant`` overloads)."""
    if type(value) is int and -(2**63) <= value < 2**63:
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(f"{name} must be a timezone-aware datetime")
        return (value - _EPOCH) // _MS
    return check_long(name, value)


#: The signature ``help()`` shows for methods whose forms differ by arity (``fetch``).
_ARGS = inspect.Signature(
    [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
    ]
)


class TypedSegmentedStore(Generic[K, V]):
    """What typed window and session stores share: serdes, value codec, adapter, and the
    transaction methods over a :class:`~txstore.bytestores.segments.SegmentedBytesStore` (or its
    read-committed view, for the read-only variants).

    Errors of every read and write: :class:`~txstore.errors.StoreClosedError` once closed;
    :class:`~txstore.errors.InvalidArgumentError` for a ``None`` key, a key too long for LMDB
    with its window suffix, a time outside Java's long range or a naive ``datetime``;
    :class:`~txstore.errors.InvalidTypeError` for a time of another type or a wrong number of
    arguments; the serdes' own errors (:class:`~txstore.errors.SerializationError`...).
    """

    _inner: Any

    def __init__(
        self,
        inner: Any,
        key_serde: Serde[K],
        codec: ValueCodec[V],
        adapter: FormatAdapter | None = None,
    ) -> None:
        self._inner = inner
        self.key_serde = key_serde
        self.codec = codec
        self.adapter = adapter
        # The writer's single-key fetch decodes values known not to be None with the serde
        # itself when they are plain and stored as used (``_plain_decode``), and UTF-8
        # strings with ``bytes.decode`` (the serde's own conversion, without its call).
        plain = adapter is None and codec.format == ValueFormat.PLAIN
        self._plain_decode: Any = codec.serde.deserialize if plain else None
        self._utf8_values = plain and _is(codec.serde, StringSerde)
        self._utf8_keys = _is(key_serde, StringSerde)
        # The single-key window fetch reads its rows in one go from the store or its
        # read-committed view (``fetch_window_rows``); other inners take the general path.
        # The writer's store and the view read them as decoded pairs (``fetch_window_items``) from
        # ``_items_reader``: the store, or the one a change-logging layer (a task's) wraps and
        # forwards its reads to; values decoded by the C reader itself (None: UTF-8 text) or by
        # ``_items_decode``.
        reader = inner
        if type(inner) is ChangeLoggingSegmentedBytesStore:
            reader = inner.inner
        self._items_fast = type(reader) is SegmentedBytesStore  # the writer's (session too)
        # a read-committed view's window fetch: pairs made in C too (its store's pairs)
        window_items = self._items_fast or type(reader) is SegmentedReadCommittedView
        self._window_items = window_items
        self._items_reader: Any = reader if window_items else None
        self._items_store: Any = reader.store if window_items else None
        self._items_decode: Any = _NO
        if window_items:
            self._items_decode = None if self._utf8_values else self._plain_decode or self._decode
        fast = (SegmentedBytesStore, SegmentedReadCommittedView)
        self._rows_fast = type(inner) in fast or self._items_fast

    def _key(self, key: K | None, suffix: int) -> bytes:
        if key is None:
            raise InvalidArgumentError("key cannot be null")
        kb = self.key_serde.serialize(key)
        if kb is None:
            raise InvalidArgumentError(f"the key serde turned {key!r} into null")
        if len(kb) > MAX_KEY_SIZE - suffix:
            raise InvalidArgumentError(
                f"serialized key is {len(kb)} bytes; with its {suffix}-byte window suffix it "
                f"exceeds LMDB's maximum key size of {MAX_KEY_SIZE}"
            )
        return kb

    def _bound(self, key: K | None, suffix: int) -> bytes | None:
        return None if key is None else self._key(key, suffix)

    def _decode(self, raw: bytes | None) -> V | None:
        if raw is None:
            return None
        if self.adapter is not None:
            raw = self.adapter.from_stored(raw)
        result: V | None = self.codec.decode(raw)
        return result

    def _encode(self, value: V | None) -> bytes | None:
        raw = self.codec.encode(value)
        if raw is not None and self.adapter is not None:
            raw = self.adapter.to_stored(raw)
        return raw

    @property
    def name(self) -> str:
        """The store's name."""
        name: str = self._inner.name
        return name

    @property
    def format(self) -> ValueFormat:
        """The value format the store is used in."""
        return self.codec.format

    @property
    def stored_format(self) -> ValueFormat:
        """The value format the bytes are written in (new segments, after an upgrade)."""
        fmt: ValueFormat = self._inner.store.format
        return fmt

    @property
    def observed_stream_time(self) -> int:
        """The largest window start (session end) seen by writes; -1 before any."""
        t: int = self._inner.observed_stream_time
        return t

    @property
    def retention_period(self) -> int:
        """Retention in milliseconds."""
        r: int = self._inner.store.retention
        return r

    @property
    def segment_interval(self) -> int:
        """Segment interval in milliseconds (``max(retention // 2, 60000)`` by default)."""
        i: int = self._inner.store.segment_interval
        return i

    @property
    def persistent(self) -> bool:
        """Whether the store lives in an LMDB file (``False`` for in-memory stores)."""
        return bool(self._inner.store.persistent)

    @property
    def committed_offset(self) -> int | None:
        """The changelog offset of the last commit (of this snapshot, for a snapshot view),
        or ``None`` if never committed."""
        offset: int | None = self._inner.committed_offset
        return offset

    def _view(self, inner: Any) -> Any:
        raise NotImplementedError

    def snapshot(self) -> Any:
        """A read-only view where every read sees one committed state (data and offset);
        close it soon, it pins LMDB pages. O(1): one LMDB read transaction."""
        return self._view(self._inner.snapshot())

    def close(self) -> None:
        """Close the store (a view: its iterators and snapshot); idempotent. A store's
        uncommitted writes are lost. O(open iterators)."""
        self._inner.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "persistent" if self.persistent else "in-memory"
        return f"<{type(self).__name__} {self.name!r} {kind} {self.codec.format.name}>"


class StoreControl:
    """Writer-side methods of window and session stores: transactions, state, counters."""

    _inner: SegmentedBytesStore

    @property
    def bytes_store(self) -> SegmentedBytesStore:
        """The bytes layer under this store (a task's store: its change-logging layer, whose
        writes are logged; the unlogged store is ``StoreStack.unlogged_store``). O(1)."""
        return self._inner

    @property
    def dropped_records(self) -> int:
        """Records dropped because their segment (in-memory: their time) had expired. O(1)."""
        return self._inner.dropped_records

    def commit(self, changelog_offset: int) -> None:
        """Make buffered writes and segment drops durable with ``changelog_offset``, in one
        LMDB transaction: O(uncommitted writes) plus one fsync. Raises
        :class:`~txstore.errors.OffsetError` for an offset below the committed one,
        :class:`~txstore.errors.ReadOnlyError` on a read-only partition,
        :class:`~txstore.errors.StorageError` if LMDB fails (nothing committed)."""
        self._inner.commit(changelog_offset)

    def recover(self, offset: int) -> bool:
        """Discard uncommitted writes and staged segment drops; return whether the committed
        offset is at or past ``offset``. O(uncommitted writes), never O(store size)."""
        return self._inner.recover(offset)

    def approximate_num_uncommitted_bytes(self) -> int:
        """Approximate size in bytes of the buffered, uncommitted writes. O(1)."""
        return self._inner.approximate_num_uncommitted_bytes()

    @property
    def transactional(self) -> bool:
        """Whether writes are buffered until :meth:`commit`. O(1)."""
        return self._inner.transactional

    @property
    def is_open(self) -> bool:
        """Whether the store can be used (``False`` once closed). O(1)."""
        return self._inner.is_open


class ReadOnlyWindowStore(TypedSegmentedStore[K, V]):
    """The read half of a window store (what a read-committed view or a query gets).

    Reads see the windows that have not expired (start at or after ``observed_stream_time -
    retention_period + 1``). Close iterators (``with`` does): they hold LMDB resources. Errors:
    see :class:`TypedSegmentedStore`.
    """

    def __init__(
        self,
        inner: Any,
        key_serde: Serde[K],
        codec: ValueCodec[V],
        adapter: FormatAdapter | None,
        window_size: int,
        seqnum: Any = None,
    ) -> None:
        super().__init__(inner, key_serde, codec, adapter)
        self.window_size = window_size
        self._seq_owner = seqnum

    def _view(self, inner: Any) -> ReadOnlyWindowStore[K, V]:
        return ReadOnlyWindowStore(
            inner, self.key_serde, self.codec, self.adapter, self.window_size, self._seq_owner
        )

    def _current_seq(self) -> int:
        owner = self._seq_owner
        return 0 if owner is None else int(owner.seqnum)

    def _windowed(self, raw: bytes) -> Windowed[K]:
        n = len(raw) - 12
        start = _Q.unpack_from(raw, n)[0]
        key: Any = self.key_serde.deserialize(raw[:n])
        return time_windowed(key, start, self.window_size)

    def _single(self, inner: BytesIterator) -> KeyValueIterator[int, V]:
        if type(inner) is RowsIterator:  # its values are never None
            decode, unpack, new = self._plain_decode or self._decode, _Q.unpack_from, tuple.__new__
            items = [new(KeyValue, (unpack(k, len(k) - 12)[0], decode(v))) for k, v in inner.rows]
            return decoded_iterator(items, inner.store, inner.cells)
        return KeyValueIterator(inner, _start_of, self._decode)

    def _ranged(self, inner: BytesIterator) -> KeyValueIterator[Windowed[K], V]:
        return KeyValueIterator(inner, self._windowed, self._decode)

    @overload
    def fetch(self, key: K, time: int | _dt.datetime, /) -> V | None: ...
    @overload
    def fetch(
        self, key: K, time_from: int | _dt.datetime, time_to: int | _dt.datetime, /
    ) -> KeyValueIterator[int, V]: ...
    @overload
    def fetch(
        self,
        key_from: K | None,
        key_to: K | None,
        time_from: int | _dt.datetime,
        time_to: int | _dt.datetime,
        /,
    ) -> KeyValueIterator[Windowed[K], V]: ...
    def fetch(self, a: Any = _NO, b: Any = _NO, c: Any = _NO, d: Any = _NO, /, *more: Any) -> Any:
        """``fetch(key, time)``: the value of the window of ``key`` starting at ``time``, or
        None. ``fetch(key, time_from, time_to)``: the windows of ``key`` starting in
        ``[time_from, time_to]``, by start time. ``fetch(key_from, key_to, time_from,
        time_to)``: the windows of a key range (``None`` is unbounded; ``key_from > key_to``
        is empty and logs Kafka's warning): segment by segment and by key within one on a
        persistent store, by start time, then key on an in-memory one, as in Kafka
        (``docs/stores.md``, "Iteration order").

        Times are epoch milliseconds or aware ``datetime`` objects. ``fetch(key, time)`` is
        O(log n); the iterators O(log n) per segment in the time range to start, O(1)
        amortized per window. The module docstring has examples."""
        # Positional parameters rather than ``*args``: the single-key fetch, the common case,
        # then costs one plain call into ``_fetch_key`` (0.3 us less than through a tuple).
        try:  # stored bytes that do not decode: the error names the store, file and key
            if d is _NO and c is not _NO and self._rows_fast:
                return self._fetch_key(a, b, c, False)
            args = (a, b, c, d)[: (a is not _NO) + (b is not _NO) + (c is not _NO) + (d is not _NO)]
            if len(args) == 2:
                return self._fetch_one(args[0], to_millis("time", args[1]))
            return self._fetch(args + more, reverse=False)
        except SerializationError as exc:
            raise stored_bytes_error(self, a if d is _NO else (a, b), exc) from exc

    # help() and inspect show the three forms' common shape, not the fast path's placeholders.
    fetch.__signature__ = _ARGS  # type: ignore[attr-defined]

    @overload
    def backward_fetch(
        self, key: K, time_from: int | _dt.datetime, time_to: int | _dt.datetime, /
    ) -> KeyValueIterator[int, V]: ...
    @overload
    def backward_fetch(
        self,
        key_from: K | None,
        key_to: K | None,
        time_from: int | _dt.datetime,
        time_to: int | _dt.datetime,
        /,
    ) -> KeyValueIterator[Windowed[K], V]: ...
    def backward_fetch(self, *args: Any) -> Any:
        """The windows of :meth:`fetch` (3 or 4 arguments), in reverse order; same cost."""
        try:
            return self._fetch(args, reverse=True)
        except SerializationError as exc:
            raise stored_bytes_error(self, args[:1] if len(args) < 4 else args[:2], exc) from exc

    def _fetch_one(self, key: K, time: int) -> V | None:
        kb = self._key(key, 12)
        return self._decode(self._inner.get(kb + _QI.pack(time, self._current_seq())))

    def _fetch_key(self, key: K, time_from: Any, time_to: Any, reverse: bool) -> Any:
        """``fetch(key, time_from, time_to)`` of the writer's store (a
        :class:`SegmentedBytesStore`): its windows read and decoded in one go when there are
        few, else a streaming iterator."""
        if type(key) is str and self._utf8_keys:
            try:
                kb = key.encode()  # type: ignore[attr-defined]  # the serde's own conversion
            except UnicodeEncodeError:
                kb = self._key(key, 12)  # raises the serde's error
            if len(kb) > _MAX_WINDOW_KEY:
                kb = self._key(key, 12)  # raises
        else:
            kb = self._key(key, 12)
        if not (
            type(time_from) is int
            and type(time_to) is int
            and _LONG_MIN <= time_from <= _LONG_MAX
            and _LONG_MIN <= time_to <= _LONG_MAX
        ):
            time_from = to_millis("time_from", time_from)
            time_to = to_millis("time_to", time_to)
        inner: SegmentedBytesStore | SegmentedReadCommittedView = self._inner
        read: tuple[list[Row], list[list[bool]]] | None
        if self._window_items:  # the writer's store or a view: pairs made in C when it can
            got = self._items_reader.fetch_window_items(
                kb, time_from, time_to, reverse, self._items_decode
            )
            if got is None:
                read = None
            elif got[2]:
                pairs, live = got[0], got[1]
                pit = iter(pairs)  # decoded_iterator(pairs, inner, live), inlined
                kv_it: DecodedIterator[int, V] = DecodedIterator(pit, iter(live))
                kv_it.items_iter = pit
                kv_it.items = pairs
                kv_it.cells = live
                kv_it.store = self._items_store
                return kv_it
            else:
                read = got[0], got[1]
        else:
            read = inner.fetch_window_rows(kb, time_from, time_to, reverse)
        if read is None:
            return self._single(
                inner.fetch(kb, None, time_from, time_to, reverse=reverse, single_key=True)
            )
        rows, cells = read
        # The rows of ``kb``'s windows are exactly ``kb || L(start) || I(seq)``: ``unpack``
        # reads the start of a row of that length and raises for any other (a longer key that
        # starts with ``kb`` may sort in between; then the general path filters them).
        n = len(kb)
        unpack = _STARTS.get(n) or _starts_unpacker(n)
        items: list[Any] = []
        if self._utf8_values:
            append = items.append
            try:
                for k, v in rows:
                    append(_new(KeyValue, (unpack(k)[0], v.decode())))  # type: ignore[union-attr]
            except (struct.error, UnicodeDecodeError):
                items, cells = self._decode_rows(rows, cells, n)  # the serde raises its own
        else:
            items, cells = self._decode_rows(rows, cells, n)
        store = inner.store
        it = iter(items)  # decoded_iterator(items, store, cells), inlined
        self_it: DecodedIterator[int, V] = DecodedIterator(it, iter(cells))
        self_it.items_iter = it
        self_it.items = items
        self_it.cells = cells
        self_it.store = store
        return self_it

    def _decode_rows(
        self, rows: list[Row], cells: list[list[bool]], n: int
    ) -> tuple[list[Any], list[list[bool]]]:
        """``KeyValue(start, value)`` of the rows of a key of ``n`` bytes (of length ``n +
        12``; a longer key starting with the same bytes may sort among them), in order, and
        the liveness cells of those rows."""
        size = n + 12
        unpack = _unpack_start
        decode = self._plain_decode or self._decode
        if all(len(k) == size for k, _ in rows):
            return [_new(KeyValue, (unpack(k, n)[0], decode(v))) for k, v in rows], cells
        keep = [i for i, (k, _) in enumerate(rows) if len(k) == size]
        items = [_new(KeyValue, (unpack(rows[i][0], n)[0], decode(rows[i][1]))) for i in keep]
        return items, [cells[i] for i in keep]

    def _fetch(self, args: tuple[Any, ...], reverse: bool) -> Any:
        if len(args) == 3:
            if self._rows_fast:
                return self._fetch_key(*args, reverse)
            kb = self._key(args[0], 12)
            t0, t1 = to_millis("time_from", args[1]), to_millis("time_to", args[2])
            return self._single(
                self._inner.fetch(kb, None, t0, t1, reverse=reverse, single_key=True)
            )
        if len(args) == 4:
            lo, hi = self._bound(args[0], 12), self._bound(args[1], 12)
            t0, t1 = to_millis("time_from", args[2]), to_millis("time_to", args[3])
            return self._ranged(self._inner.fetch(lo, hi, t0, t1, reverse=reverse))
        raise InvalidTypeError(
            f"fetch takes (key, time), (key, time_from, time_to) or (key_from, key_to, "
            f"time_from, time_to); got {len(args)} arguments"
        )

    def fetch_all(
        self, time_from: int | _dt.datetime, time_to: int | _dt.datetime
    ) -> KeyValueIterator[Windowed[K], V]:
        """Every key's windows starting in ``[time_from, time_to]``, in the order of
        :meth:`all`. O(rows of the segments the time range covers): each row is read and
        filtered by its start time (an in-memory store sorts each segment's rows)."""
        t0, t1 = to_millis("time_from", time_from), to_millis("time_to", time_to)
        return self._ranged(self._inner.fetch_all(t0, t1))

    def backward_fetch_all(
        self, time_from: int | _dt.datetime, time_to: int | _dt.datetime
    ) -> KeyValueIterator[Windowed[K], V]:
        """:meth:`fetch_all` in reverse order; same cost."""
        t0, t1 = to_millis("time_from", time_from), to_millis("time_to", time_to)
        return self._ranged(self._inner.fetch_all(t0, t1, reverse=True))

    def all(self) -> KeyValueIterator[Windowed[K], V]:
        """Every unexpired window: segment by segment and by key, start within one on a
        persistent store (Kafka's ``RocksDBWindowStore``); by start, then key, then sequence
        number on an in-memory store (Kafka's ``InMemoryWindowStore``). O(n), in chunks
        (close the iterator); an in-memory store reads and sorts a segment at a time."""
        return self._ranged(self._inner.all())

    def backward_all(self) -> KeyValueIterator[Windowed[K], V]:
        """Every unexpired window, in reverse order; same cost as :meth:`all`."""
        return self._ranged(self._inner.all(reverse=True))


def _start_of(raw: bytes) -> int:
    start: int = _Q.unpack_from(raw, len(raw) - 12)[0]
    return start


class WindowStore(StoreControl, ReadOnlyWindowStore[K, V]):
    """A typed window store: Kafka's ``WindowStore`` with snake_case names.

    Create one with :class:`~txstore.stores.factories.Stores` builders or
    :meth:`txstore.Database.window_store`. ``retain_duplicates`` stores every put of a
    ``(key, window)`` under its own sequence number (1, 2, ... wrapping at 2^31 - 1; committed
    with the store and continued after a reopen or a restore, where Kafka's restarts at 0:
    :mod:`txstore.bytestores.sequence`), and makes ``put(key, None, t)`` a no-op; without it a
    put overwrites the window and ``put(key, None, t)`` deletes it.

    Writes go to an overlay until :meth:`commit` (transactional stores); one thread owns the
    store, other threads read through :meth:`read_committed`. The module docstring has an
    example.
    """

    def __init__(
        self,
        inner: SegmentedBytesStore,
        key_serde: Serde[K],
        codec: ValueCodec[V],
        adapter: FormatAdapter | None,
        window_size: int,
        retain_duplicates: bool,
    ) -> None:
        super().__init__(inner, key_serde, codec, adapter, window_size, self)
        self.retain_duplicates = retain_duplicates
        self.seqnum = 0  # of the last put (retain_duplicates); a restore continues it

    def put(self, key: K, value: V | None, window_start_timestamp: int | _dt.datetime) -> None:
        """Put ``value`` into the window of ``key`` starting at ``window_start_timestamp``
        (epoch milliseconds, or an aware ``datetime`` as :meth:`fetch` takes).

        ``None`` deletes the window (a no-op with ``retain_duplicates``). A record whose
        segment has expired is dropped (counted in :attr:`dropped_records`, with Kafka's
        warning logged). O(1) amortized into the overlay (transactional; the first write into a
        new segment creates it, and one that expires segments stages their drop), or one LMDB
        write transaction (not transactional). Raises
        :class:`~txstore.errors.InvalidArgumentError` for a negative timestamp,
        :class:`~txstore.errors.ReadOnlyError` on a read-only partition, and the errors of
        :class:`TypedSegmentedStore`.
        """
        kb = self._key(key, 12)
        ts = to_millis("window_start_timestamp", window_start_timestamp)
        raw = self._encode(value)
        if self.retain_duplicates:
            if raw is None:
                # Kafka: "this delete is a no-op" in the store (no seqnum either); a change-logging
                # layer still logs it, as ChangeLoggingWindowBytesStore does
                self._inner.put_skipped_null(kb, ts)
                return
            self.seqnum = (self.seqnum + 1) & 0x7FFFFFFF
        self._inner.put_at(kb + _QI.pack(ts, self.seqnum), ts, raw)

    def read_committed(self) -> ReadOnlyWindowStore[K, V]:
        """A read-only view of committed data (KIP-892's read-committed isolation), usable
        from other threads while this store writes and commits. O(1); close it when done."""
        return self._view(self._inner.read_committed())

    def __enter__(self) -> WindowStore[K, V]:
        return self
