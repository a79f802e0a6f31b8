"""Typed session stores: Kafka's ``SessionStore``, plain, timestamped or with headers.

Sessions are keyed ``[key][L(end)][L(start)]`` and segmented by their **end**. Values are, by
the store's format:

* ``PLAIN``: the aggregation;
* ``PLAIN_HEADERS``: :class:`~txstore.types.AggregationWithHeaders`
  (``[headersSize][headersBytes][aggregation]``, KIP-1271's ``SessionStoreWithHeaders``);
* ``TIMESTAMPED``: :class:`~txstore.types.ValueAndTimestamp`, the aggregation and the time of
  its last update (``[L(ts)][aggregation]``, KIP-258's ``TimestampedSessionStore``, which
  Kafka never shipped);
* ``HEADERS``: :class:`~txstore.types.ValueTimestampHeaders`
  (``[headersSize][headersBytes][L(ts)][aggregation]``).

One class serves every format: its :class:`~txstore.stores.formats.ValueCodec` checks and
converts the values (a ``put`` of another type raises
:class:`~txstore.errors.InvalidTypeError`; ``None``, or a wrapper of ``None``, deletes).

Java overloads by arity, and so does this class:

* ``findSessions(K key, long earliestSessionEnd, long latestSessionStart)`` ->
  ``find_sessions(key, earliest_session_end, latest_session_start)``;
* ``findSessions(K from, K to, long earliestSessionEnd, long latestSessionStart)`` ->
  ``find_sessions(key_from, key_to, earliest_session_end, latest_session_start)``;
* ``findSessions(long earliestSessionEnd, long latestSessionEnd)`` ->
  ``find_sessions(earliest_session_end, latest_session_end)``: in-memory stores only, as in
  Kafka; persistent stores raise :class:`~txstore.errors.UnsupportedOperationError`;
* ``backwardFindSessions`` -> ``backward_find_sessions`` (3 or 4 arguments);
* ``fetch(K key)`` / ``fetch(K from, K to)`` -> ``fetch(key)`` / ``fetch(key_from, key_to)``, and
  ``backward_fetch`` likewise; ``fetchSession(K, long start, long end)`` ->
  ``fetch_session(key, session_start, session_end)``;
* ``put(Windowed<K>, AGG)`` (``None`` deletes) and ``remove(Windowed<K>)``.

Iterators yield ``KeyValue(Windowed(key, SessionWindow(start, end)), aggregation)``.

>>> from txstore import Serdes, SessionWindow, Stores, Windowed
>>> store = Stores.session_store_builder(
...     Stores.in_memory_session_store("s", 60_000), Serdes.string(), Serdes.long()
... ).build()
>>> store.put(Windowed("a", SessionWindow(0, 10)), 5)
>>> store.fetch_session("a", 0, 10)
5
>>> with store.find_sessions("a", 0, 100) as it:
...     [(kv.key.window, kv.value) for kv in it]
[(SessionWindow(start=0, end=10), 5)]
>>> store.close()
"""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any, TypeVar, overload

from txstore.bytestores.segments import RowsIterator, SegmentedBytesStore
from txstore.engine.iterators import KeyValueIterator as BytesIterator
from txstore.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    SerializationError,
    UnsupportedOperationError,
)
from txstore.stores.decoded import session_windowed
from txstore.stores.kv import KeyValueIterator
from txstore.stores.stored_errors import stored_bytes_error
from txstore.stores.window import StoreControl, TypedSegmentedStore, decoded_iterator, to_millis
from txstore.types import KeyValue, SessionWindow, Windowed, check_long

__all__ = ["ReadOnlySessionStore", "SessionStore"]

K = TypeVar("K")
V = TypeVar("V")

_QQ = struct.Struct(">qq")
_new = tuple.__new__
_LONG_MAX = 2**63 - 1
_UNSUPPORTED = "This API is not supported by this implementation of SessionStore."

Time = int | _dt.datetime


class ReadOnlySessionStore(TypedSegmentedStore[K, V]):
    """The read half of a session store (what a read-committed view or a query gets).

    Reads only see sessions that have not expired: those ending at or after
    ``observed_stream_time - retention_period + 1``. Iterators hold LMDB resources: close them
    (``with`` closes them). See :class:`~txstore.stores.window.TypedSegmentedStore` for the
    errors of every method.
    """

    def _view(self, inner: Any) -> ReadOnlySessionStore[K, V]:
        return ReadOnlySessionStore(inner, self.key_serde, self.codec, self.adapter)

    def _windowed(self, raw: bytes) -> Windowed[K]:
        n = len(raw) - 16
        end, start = _QQ.unpack_from(raw, n)
        key: Any = self.key_serde.deserialize(raw[:n])
        return session_windowed(key, start, end)

    def _iter(self, inner: BytesIterator) -> KeyValueIterator[Windowed[K], V]:
        if type(inner) is RowsIterator:  # one key's sessions; values are never None
            decode = self._plain_decode or self._decode
            items: list[Any]
            if self._utf8_keys:  # str keys are immutable: one deserialization for all rows
                unpack, deserialize = _QQ.unpack_from, self.key_serde.deserialize
                last: bytes | None = None
                key = None
                items = []
                for k, v in inner.rows:
                    n = len(k) - 16
                    if k[:n] != last:
                        last = k[:n]
                        key = deserialize(last)
                    end, start = unpack(k, n)
                    items.append(_new(KeyValue, (session_windowed(key, start, end), decode(v))))
            else:
                windowed = self._windowed
                items = [_new(KeyValue, (windowed(k), decode(v))) for k, v in inner.rows]
            return decoded_iterator(items, inner.store, inner.cells)
        return KeyValueIterator(inner, self._windowed, self._decode)

    @overload
    def find_sessions(
        self, earliest_session_end: Time, latest_session_end: Time, /
    ) -> KeyValueIterator[Windowed[K], V]: ...
    @overload
    def find_sessions(
        self, key: K, earliest_session_end: Time, latest_session_start: Time, /
    ) -> KeyValueIterator[Windowed[K], V]: ...
    @overload
    def find_sessions(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_session_end: Time,
        latest_session_start: Time,
        /,
    ) -> KeyValueIterator[Windowed[K], V]: ...
    def find_sessions(self, *args: Any) -> KeyValueIterator[Windowed[K], V]:
        """Sessions that end at or after ``earliest_session_end`` and start at or before
        ``latest_session_start``, of one key (3 arguments) or a key range (4; ``None`` is
        unbounded): on a persistent store segment by segment and by key, end, start within
        one; on an in-memory store by end, then key, then start **descending** (Kafka's
        ``InMemorySessionStore``; ``docs/stores.md``, "Iteration order").

        With 2 arguments (in-memory stores only), every session whose **end** is in
        ``[earliest_session_end, latest_session_end]``, in the in-memory order.

        Times are epoch milliseconds or aware ``datetime`` objects. O(log n) per segment the
        time range covers to start, O(1) amortized per session read: sessions of the key (or
        range) are filtered by their start. The 2-argument form reads and sorts every segment
        it covers whole. Raises :class:`~txstore.errors.UnsupportedOperationError` for the
        2-argument form on a persistent store, :class:`~txstore.errors.InvalidTypeError` for
        another number of arguments.

        >>> from txstore import Serdes, SessionWindow, Stores, Windowed
        >>> store = Stores.session_store_builder(
        ...     Stores.in_memory_session_store("s", 60_000), Serdes.string(), Serdes.long()
        ... ).build()
        >>> store.put(Windowed("a", SessionWindow(0, 10)), 1)
        >>> store.put(Windowed("b", SessionWindow(20, 30)), 2)
        >>> with store.find_sessions("a", "b", 5, 25) as it:
        ...     [(kv.key.key, kv.value) for kv in it]
        [('a', 1), ('b', 2)]
        >>> with store.find_sessions(0, 15) as it:  # by end time: in-memory stores only
        ...     [kv.key.key for kv in it]
        ['a']
        >>> store.close()
        """
        return self._find(args, reverse=False)

    @overload
    def backward_find_sessions(
        self, key: K, earliest_session_end: Time, latest_session_start: Time, /
    ) -> KeyValueIterator[Windowed[K], V]: ...
    @overload
    def backward_find_sessions(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_session_end: Time,
        latest_session_start: Time,
        /,
    ) -> KeyValueIterator[Windowed[K], V]: ...
    def backward_find_sessions(self, *args: Any) -> KeyValueIterator[Windowed[K], V]:
        """The sessions of :meth:`find_sessions` (3 or 4 arguments), in reverse order; same
        cost. Raises :class:`~txstore.errors.InvalidTypeError` for 2 arguments (no store
        offers a backward time-only search, as in Kafka)."""
        if len(args) == 2:
            raise InvalidTypeError("backward_find_sessions takes 3 or 4 arguments")
        return self._find(args, reverse=True)

    def _find(self, args: tuple[Any, ...], reverse: bool) -> KeyValueIterator[Windowed[K], V]:
        try:  # stored bytes that do not decode: the error names the store, file and key
            inner = self._inner
            if len(args) == 2:
                if inner.store.persistent:
                    raise UnsupportedOperationError(_UNSUPPORTED)
                t0 = to_millis("earliest_session_end", args[0])
                t1 = to_millis("latest_session_end", args[1])
                return self._iter(inner.fetch_by_segment_time(t0, t1))
            if len(args) == 3:
                kb = self._key(args[0], 16)
                t0 = to_millis("earliest_session_end", args[1])
                t1 = to_millis("latest_session_start", args[2])
                if not reverse and self._items_fast and self._utf8_keys:
                    # the writer's store, str keys (immutable: one object for every pair)
                    k = args[0] if type(args[0]) is str else self.key_serde.deserialize(kb)
                    got = self._items_reader.fetch_session_items(
                        kb, t0, t1, session_windowed, k, self._items_decode
                    )
                    if got is not None:
                        return decoded_iterator(got[0], self._items_reader, got[1])
                return self._iter(inner.fetch(kb, None, t0, t1, reverse=reverse, single_key=True))
            if len(args) == 4:
                lo, hi = self._bound(args[0], 16), self._bound(args[1], 16)
                t0 = to_millis("earliest_session_end", args[2])
                t1 = to_millis("latest_session_start", args[3])
                return self._iter(inner.fetch(lo, hi, t0, t1, reverse=reverse))
            raise InvalidTypeError(
                f"find_sessions takes (earliest_end, latest_end), (key, earliest_end, "
                f"latest_start) or (key_from, key_to, earliest_end, latest_start); got {len(args)}"
            )
        except SerializationError as exc:
            key = args[0] if len(args) == 3 else args[:2] if len(args) == 4 else None
            raise stored_bytes_error(self, key, exc) from exc

    def fetch(
        self, key_or_from: K | None, key_to: Any = ..., /
    ) -> KeyValueIterator[Windowed[K], V]:
        """``fetch(key)``: every unexpired session of ``key``; ``fetch(key_from, key_to)``:
        those of a key range (``None`` is unbounded). Kafka's ``findSessions(.., 0, MAX)``:
        O(log n) per live segment to start, O(1) amortized per session."""
        if key_to is ...:
            return self._find((key_or_from, 0, _LONG_MAX), reverse=False)
        return self._find((key_or_from, key_to, 0, _LONG_MAX), reverse=False)

    def backward_fetch(
        self, key_or_from: K | None, key_to: Any = ..., /
    ) -> KeyValueIterator[Windowed[K], V]:
        """:meth:`fetch` in reverse order; same cost."""
        if key_to is ...:
            return self._find((key_or_from, 0, _LONG_MAX), reverse=True)
        return self._find((key_or_from, key_to, 0, _LONG_MAX), reverse=True)

    def fetch_session(self, key: K, session_start: Time, session_end: Time) -> V | None:
        """The aggregation of exactly the session ``[session_start, session_end]`` of
        ``key``, or None (also when it has expired). O(log n)."""
        kb = self._key(key, 16)
        start = to_millis("session_start", session_start)
        end = to_millis("session_end", session_end)
        try:
            return self._decode(self._inner.get(kb + _QQ.pack(end, start)))
        except SerializationError as exc:
            raise stored_bytes_error(self, key, exc) from exc


class SessionStore(StoreControl, ReadOnlySessionStore[K, V]):
    """A typed session store: Kafka's ``SessionStore`` with snake_case names.

    Create one with :class:`~txstore.stores.factories.Stores` builders or
    :meth:`txstore.Database.session_store`. Writes go to an overlay until :meth:`commit`
    (transactional stores); one thread owns the store, other threads read through
    :meth:`read_committed`. The module docstring maps Kafka's overloads to these methods.
    """

    _inner: SegmentedBytesStore

    def _session_key(self, session_key: Windowed[K]) -> tuple[bytes, int]:
        if session_key is None:
            raise InvalidArgumentError("sessionKey can't be null")
        if not isinstance(session_key, Windowed):
            raise InvalidTypeError(
                f"a session key must be a Windowed, got {type(session_key).__name__}"
            )
        if session_key.key is None:
            raise InvalidArgumentError("sessionKey.key() can't be null")
        window = session_key.window
        if not isinstance(window, SessionWindow):
            raise InvalidTypeError(
                f"a session key's window must be a SessionWindow, got {type(window).__name__}"
            )
        kb = self._key(session_key.key, 16)
        end = check_long("session end", window.end)
        return kb + _QQ.pack(end, window.start), end

    def put(self, session_key: Windowed[K], aggregate: V | None) -> None:
        """Put the aggregation of a session; ``None`` deletes that exact session. A session
        whose segment has expired is dropped (counted in :attr:`dropped_records`, with Kafka's
        warning logged). O(1) amortized into the overlay (transactional), or one LMDB write
        transaction (not).

        Raises :class:`~txstore.errors.InvalidArgumentError` for a ``None`` session key or
        key, :class:`~txstore.errors.InvalidTypeError` if ``session_key`` is not a
        :class:`~txstore.types.Windowed` of a :class:`~txstore.types.SessionWindow`,
        :class:`~txstore.errors.ReadOnlyError` on a read-only partition.
        """
        raw_key, end = self._session_key(session_key)
        self._inner.put_at(raw_key, end, self._encode(aggregate))

    def remove(self, session_key: Windowed[K]) -> None:
        """Delete exactly this session (no expiry check, as Kafka's ``remove``). Cost and
        errors as :meth:`put`."""
        raw_key, _ = self._session_key(session_key)
        self._inner.remove(raw_key)

    def read_committed(self) -> ReadOnlySessionStore[K, V]:
        """A read-only view of committed data (KIP-892's read-committed isolation), usable
        from other threads while this store writes and commits. O(1); close it when done."""
        return self._view(self._inner.read_committed())

    def __enter__(self) -> SessionStore[K, V]:
        return self
