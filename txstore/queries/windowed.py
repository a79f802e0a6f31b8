"""Composite read-only window and session stores (Kafka's ``CompositeReadOnlyWindowStore`` and
``CompositeReadOnlySessionStore``).

Operations on one key go to the key's partition (``route_keys``, the default) or, as in Kafka,
to each local partition until one has a result; operations over a key range or all keys chain
the partitions' iterators in partition order. Values are converted to the queried type (a
timestamped window store queried with ``window_store()`` returns plain values).
Arities follow the typed stores: ``fetch(key, time)``, ``fetch(key, time_from, time_to)``,
``fetch(key_from, key_to, time_from, time_to)``; ``find_sessions(key, earliest_end,
latest_start)`` and ``find_sessions(key_from, key_to, earliest_end, latest_start)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from txstore.errors import InvalidArgumentError
from txstore.queries.composite import CompositeKeyValueIterator, Provider, _Base
from txstore.queries.local import StoreReader
from txstore.queries.types import StoreQueryParameters
from txstore.stores.serdes import Serde

__all__ = [
    "CompositeReadOnlySessionStore",
    "CompositeReadOnlyWindowStore",
    "composite_for",
]


class _Keyed(_Base):
    def _readers_for(self, key: Any) -> tuple[StoreReader, ...]:
        """The readers that may hold ``key``: its partition's, or every one."""
        res = self._resolve()
        route = res.route
        if route is None:
            return res.readers
        reader = res.by_partition.get(route(self._key_bytes(key), res.num_partitions))
        return () if reader is None else (reader,)

    def _first_value(self, key: Any, fn: Callable[[Any], Any]) -> Any:
        for reader in self._readers_for(key):
            value = reader.call(fn)
            if value is not None:
                return reader.convert(value)
        return None

    def _first_nonempty(
        self, key: Any, fn: Callable[[Any], Any]
    ) -> CompositeKeyValueIterator[Any, Any]:
        readers = self._readers_for(key)
        for i, reader in enumerate(readers):
            it: CompositeKeyValueIterator[Any, Any] = CompositeKeyValueIterator((reader,), fn)
            if i == len(readers) - 1 or it.has_next():
                return it
            it.close()
        return CompositeKeyValueIterator((), fn)

    def _chain(self, fn: Callable[[Any], Any]) -> CompositeKeyValueIterator[Any, Any]:
        return CompositeKeyValueIterator(self._resolve().readers, fn)


class CompositeReadOnlyWindowStore(_Keyed):
    """A window store's local partitions as one read-only window store: what
    :meth:`Application.store <txstore.queries.Application.store>` returns for a window store
    (Kafka's ``CompositeReadOnlyWindowStore``). Values are converted to the queried type.

    One key's operations read its partition (``route_keys``) or each local partition until one
    has a result; key ranges and ``fetch_all``/``all`` chain every partition's iterator. Costs
    are those of :class:`~txstore.stores.window.ReadOnlyWindowStore` per partition read.

    Every operation first checks which partitions it may read (one integer comparison while
    nothing changed; O(P log P) for P hosted partitions after a change), so a store obtained
    before a rebalance keeps working after it. Errors: :class:`~txstore.errors.InvalidArgumentError`
    for a ``None`` key; :class:`~txstore.errors.StreamsRebalancingError` while partitions are
    restored; :class:`~txstore.errors.StateStoreMigratedError` when no partition can be read or
    one closes under a read (:class:`~txstore.errors.StateStoreNotAvailableError` once the
    application shuts down).
    """

    def fetch(self, *args: Any) -> Any:
        """``fetch(key, time)`` -> value or None; ``fetch(key, time_from, time_to)`` ->
        iterator of ``KeyValue(window start, value)``; ``fetch(key_from, key_to, time_from,
        time_to)`` -> iterator of ``KeyValue(Windowed(key, window), value)``."""
        return self._fetch(args, backward=False)

    def backward_fetch(self, *args: Any) -> Any:
        """:meth:`fetch` (3 or 4 arguments) in descending order within each partition."""
        if len(args) == 2:
            raise InvalidArgumentError("backward_fetch takes 3 or 4 arguments")
        return self._fetch(args, backward=True)

    def _fetch(self, args: tuple[Any, ...], backward: bool) -> Any:
        name = "backward_fetch" if backward else "fetch"
        if len(args) == 2:
            key, time = args
            return self._first_value(key, lambda view: view.fetch(key, time))
        if len(args) == 3:
            key = args[0]
            return self._first_nonempty(key, lambda view: getattr(view, name)(*args))
        if len(args) == 4:
            return self._chain(lambda view: getattr(view, name)(*args))
        raise InvalidArgumentError(f"{name} takes 2, 3 or 4 arguments, got {len(args)}")

    def fetch_all(self, time_from: Any, time_to: Any) -> CompositeKeyValueIterator[Any, Any]:
        """Every window starting in ``[time_from, time_to]``, partition after partition."""
        return self._chain(lambda view: view.fetch_all(time_from, time_to))

    def backward_fetch_all(
        self, time_from: Any, time_to: Any
    ) -> CompositeKeyValueIterator[Any, Any]:
        """:meth:`fetch_all`, descending within each partition."""
        return self._chain(lambda view: view.backward_fetch_all(time_from, time_to))

    def all(self) -> CompositeKeyValueIterator[Any, Any]:
        """Every window of every partition."""
        return self._chain(lambda view: view.all())

    def backward_all(self) -> CompositeKeyValueIterator[Any, Any]:
        """:meth:`all`, descending within each partition."""
        return self._chain(lambda view: view.backward_all())

    def __repr__(self) -> str:
        return f"<CompositeReadOnlyWindowStore {self.name!r}>"


class CompositeReadOnlySessionStore(_Keyed):
    """A session store's local partitions as one read-only session store: what
    :meth:`Application.store <txstore.queries.Application.store>` returns for a session store
    (Kafka's ``CompositeReadOnlySessionStore``).

    One key's operations read its partition (``route_keys``) or each local partition until one
    has a result; key ranges chain every partition's iterator. Costs are those of
    :class:`~txstore.stores.session.ReadOnlySessionStore` per partition read.

    Every operation first checks which partitions it may read (one integer comparison while
    nothing changed; O(P log P) for P hosted partitions after a change), so a store obtained
    before a rebalance keeps working after it. Errors: :class:`~txstore.errors.InvalidArgumentError`
    for a ``None`` key; :class:`~txstore.errors.StreamsRebalancingError` while partitions are
    restored; :class:`~txstore.errors.StateStoreMigratedError` when no partition can be read or
    one closes under a read (:class:`~txstore.errors.StateStoreNotAvailableError` once the
    application shuts down).
    """

    def find_sessions(self, *args: Any) -> CompositeKeyValueIterator[Any, Any]:
        """``find_sessions(key, earliest_session_end, latest_session_start)`` or
        ``find_sessions(key_from, key_to, earliest_session_end, latest_session_start)``."""
        return self._find("find_sessions", args)

    def backward_find_sessions(self, *args: Any) -> CompositeKeyValueIterator[Any, Any]:
        """:meth:`find_sessions`, descending within each partition."""
        return self._find("backward_find_sessions", args)

    def _find(self, name: str, args: tuple[Any, ...]) -> CompositeKeyValueIterator[Any, Any]:
        if len(args) == 3:
            return self._first_nonempty(args[0], lambda view: getattr(view, name)(*args))
        if len(args) == 4:
            return self._chain(lambda view: getattr(view, name)(*args))
        raise InvalidArgumentError(f"{name} takes 3 or 4 arguments here, got {len(args)}")

    def fetch(self, *args: Any) -> CompositeKeyValueIterator[Any, Any]:
        """``fetch(key)`` (every session of the key) or ``fetch(key_from, key_to)``."""
        return self._fetch("fetch", args)

    def backward_fetch(self, *args: Any) -> CompositeKeyValueIterator[Any, Any]:
        """:meth:`fetch`, descending within each partition."""
        return self._fetch("backward_fetch", args)

    def _fetch(self, name: str, args: tuple[Any, ...]) -> CompositeKeyValueIterator[Any, Any]:
        if len(args) == 1:
            return self._first_nonempty(args[0], lambda view: getattr(view, name)(*args))
        if len(args) == 2:
            return self._chain(lambda view: getattr(view, name)(*args))
        raise InvalidArgumentError(f"{name} takes 1 or 2 arguments, got {len(args)}")

    def fetch_session(self, key: Any, session_start: Any, session_end: Any) -> Any:
        """The aggregation of the session ``[session_start, session_end]`` of ``key``, or
        None."""
        return self._first_value(
            key, lambda view: view.fetch_session(key, session_start, session_end)
        )

    def __repr__(self) -> str:
        return f"<CompositeReadOnlySessionStore {self.name!r}>"


def composite_for(
    kind: str, params: StoreQueryParameters, provider: Provider, key_serde: Serde[Any]
) -> Any:
    """The composite store class for ``kind`` (``"window"`` or ``"session"``)."""
    cls = CompositeReadOnlyWindowStore if kind == "window" else CompositeReadOnlySessionStore
    return cls(params, provider, key_serde)
