"""Composite read-only stores: one store's local partitions seen as one store.

What :meth:`txstore.queries.Application.store` returns (Kafka's ``CompositeReadOnly*Store``).
Every operation asks the application for the partitions it may read now (the cost is one
integer comparison while nothing changed), so a composite store obtained before a rebalance keeps
working after it, and raises Kafka's errors when its partitions are gone.

* ``get(key)`` serializes the key once and reads only the partition the partitioner gives
  (``route_keys=True``, the default: the partition ``query_metadata_for_key`` names); with
  ``route_keys=False`` it asks every local partition in turn, as Kafka does. A key whose
  partition is not local returns None, as in Kafka: ask the metadata where it lives.
* ``range``, ``reverse_range``, ``all``, ``reverse_all`` and ``prefix_scan`` chain the
  partitions' iterators in partition order (key order within a partition, no order across
  partitions, as in Kafka).
* ``approximate_num_entries`` sums the partitions (capped at the largest long).

A read that meets a partition closing under it raises
:class:`~txstore.errors.StateStoreMigratedError` (or
:class:`~txstore.errors.StateStoreNotAvailableError` once the application shuts down) with
Kafka's "State store is not available anymore ..." message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from txstore.codecs import partition_for_key
from txstore.errors import InvalidArgumentError
from txstore.queries.local import StoreReader
from txstore.queries.types import StoreQueryParameters
from txstore.stores.serdes import Serde
from txstore.types import KeyValue

__all__ = ["CompositeKeyValueIterator", "CompositeReadOnlyKeyValueStore", "Resolved"]

K = TypeVar("K")
V = TypeVar("V")

_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class Resolved:
    """The readers an operation may use now, and how keys map to partitions."""

    readers: tuple[StoreReader, ...]
    by_partition: dict[int, StoreReader]
    num_partitions: int
    route: Callable[[bytes, int], int] | None  # None: ask every reader


class Provider(Protocol):
    """What composite stores ask their application: a generation number that changes whenever
    the hosted partitions or the states change, and the readers for some parameters (with the
    generation they were resolved at)."""

    @property
    def generation(self) -> int:
        """A number that changes whenever the hosted partitions or the states change."""
        ...

    def resolve_readers(self, params: StoreQueryParameters) -> tuple[int, Resolved]:
        """The readers of the partitions ``params`` selects, with the generation they were
        resolved at; raises the interactive-query errors
        (:class:`~txstore.errors.InvalidStateStoreError` and its subclasses) when the store
        cannot be queried now."""
        ...


class _Base:
    """Shared by the composite stores: parameters, resolution, key serialization."""

    def __init__(self, params: StoreQueryParameters, provider: Provider, key_serde: Serde[Any]):
        self.params = params
        self._provider = provider
        self._serialize = key_serde.serialize
        self._cached: tuple[int, Resolved] | None = None

    @property
    def name(self) -> str:
        """The store's name."""
        return self.params.store_name

    def _resolve(self) -> Resolved:
        cached = self._cached
        if cached is not None and cached[0] == self._provider.generation:
            return cached[1]
        gen, resolved = self._provider.resolve_readers(self.params)
        self._cached = (gen, resolved)
        return resolved

    def _key_bytes(self, key: Any) -> bytes:
        if key is None:
            raise InvalidArgumentError("key cannot be null")
        kb = self._serialize(key)
        if kb is None:
            raise InvalidArgumentError(f"the key serde turned {key!r} into null")
        return kb


class CompositeKeyValueIterator(Generic[K, V]):
    """Chains per-partition iterators; each step runs under the partition's close gate (and
    guard, reading uncommitted). Close it or use it in a ``with`` block.

    A partition that closes while it is read raises
    :class:`~txstore.errors.StateStoreMigratedError` from the next step (and closes the
    iterator).
    """

    def __init__(
        self,
        readers: tuple[StoreReader, ...],
        open_one: Callable[[Any], Any],
    ) -> None:
        self._readers = readers
        self._open_one = open_one
        self._index = 0
        self._reader: StoreReader | None = None
        self._current: Any = None
        self._peeked: KeyValue[K, V] | None = None
        self._closed = False

    def __iter__(self) -> Iterator[KeyValue[K, V]]:
        return self

    def _advance(self) -> KeyValue[K, V] | None:
        while not self._closed:
            reader = self._reader
            if self._current is None or reader is None:
                if self._index >= len(self._readers):
                    self.close()
                    return None
                reader = self._readers[self._index]
                self._index += 1
                self._reader = reader
                self._current = reader.call(self._open_one)
            kv = reader.call(self._step)
            if kv is not None:
                return KeyValue(kv.key, reader.convert(kv.value))
            self._current.close()
            self._current = None
            if reader.hosted.closing:  # ended because its store closed, not exhausted
                self.close()
                raise reader.hosted.gone()
        return None

    def _step(self, _view: Any) -> Any:
        return next(self._current, None)

    def __next__(self) -> KeyValue[K, V]:
        kv = self._peeked
        if kv is not None:
            self._peeked = None
            return kv
        kv = self._advance()
        if kv is None:
            raise StopIteration
        return kv

    def peek_next_key(self) -> K | None:
        """The next key without consuming it, or None at the end."""
        if self._peeked is None:
            self._peeked = self._advance()
        return None if self._peeked is None else self._peeked.key

    def has_next(self) -> bool:
        """Whether another pair follows."""
        if self._peeked is None:
            self._peeked = self._advance()
        return self._peeked is not None

    def close(self) -> None:
        """Close the current partition's iterator; idempotent."""
        self._closed = True
        self._peeked = None
        current, self._current = self._current, None
        if current is not None:
            current.close()

    def __enter__(self) -> CompositeKeyValueIterator[K, V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CompositeReadOnlyKeyValueStore(_Base, Generic[K, V]):
    """A key-value store's local partitions as one read-only store: what
    :meth:`Application.store <txstore.queries.Application.store>` returns for a key-value store
    (Kafka's ``CompositeReadOnlyKeyValueStore``).

    Every operation first checks which partitions it may read (one integer comparison while
    nothing changed; O(P log P) for P hosted partitions after a change), so a store obtained
    before a rebalance keeps working after it. Errors: :class:`~txstore.errors.InvalidArgumentError`
    for a ``None`` key; :class:`~txstore.errors.StreamsRebalancingError` while partitions are
    restored; :class:`~txstore.errors.StateStoreMigratedError` when no partition can be read or
    one closes under a read (:class:`~txstore.errors.StateStoreNotAvailableError` once the
    application shuts down).
    Iterators chain the partitions in partition order: key order within a partition, none
    across partitions, as in Kafka.
    """

    def get(self, key: K) -> V | None:
        """The value of ``key`` in the local partitions, or None. O(log n): one partition
        (or every local one with ``route_keys=False``)."""
        cached = self._cached
        if cached is not None and cached[0] == self._provider.generation:
            res = cached[1]
        else:
            res = self._resolve()
        if key is None:
            raise InvalidArgumentError("key cannot be null")
        kb = self._serialize(key)
        if kb is None:
            raise InvalidArgumentError(f"the key serde turned {key!r} into null")
        route = res.route
        if route is not None:
            reader = res.by_partition.get(route(kb, res.num_partitions))
            if reader is None:
                return None
            value: V | None = reader.get(kb)
            return value
        for reader in res.readers:
            value = reader.get(kb)
            if value is not None:
                return value
        return None

    def _chain(self, open_one: Callable[[Any], Any]) -> CompositeKeyValueIterator[K, V]:
        return CompositeKeyValueIterator(self._resolve().readers, open_one)

    def range(self, key_from: K | None, key_to: K | None) -> CompositeKeyValueIterator[K, V]:
        """Pairs with ``key_from <= key <= key_to`` (``None``: unbounded) of each partition in
        turn. O(log n) per partition to start, O(1) amortized a pair."""
        return self._chain(lambda view: view.range(key_from, key_to))

    def reverse_range(
        self, key_from: K | None, key_to: K | None
    ) -> CompositeKeyValueIterator[K, V]:
        """:meth:`range`, descending within each partition; same cost."""
        return self._chain(lambda view: view.reverse_range(key_from, key_to))

    def all(self) -> CompositeKeyValueIterator[K, V]:
        """Every pair of each partition in turn: O(n) over the local partitions."""
        return self._chain(lambda view: view.all())

    def reverse_all(self) -> CompositeKeyValueIterator[K, V]:
        """Every pair, descending within each partition: O(n)."""
        return self._chain(lambda view: view.reverse_all())

    def prefix_scan(
        self, prefix: Any, prefix_serializer: Serde[Any]
    ) -> CompositeKeyValueIterator[K, V]:
        """Pairs whose serialized key starts with ``prefix_serializer.serialize(prefix)``, of
        each partition in turn. O(log n) per partition to start, O(1) amortized a pair."""
        return self._chain(lambda view: view.prefix_scan(prefix, prefix_serializer))

    def approximate_num_entries(self) -> int:
        """The sum of the partitions' estimates (O(1) each), at most the largest long."""
        total = 0
        for reader in self._resolve().readers:
            total += reader.call(lambda view: view.approximate_num_entries())
        return min(total, _LONG_MAX)

    def __repr__(self) -> str:
        return f"<CompositeReadOnlyKeyValueStore {self.name!r}>"


#: Kafka's default partitioner on a serialized key.
default_route = partition_for_key
