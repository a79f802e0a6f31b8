"""Typed iterators over pairs decoded in one go: the short single-key fetches of window and
session stores (:class:`DecodedIterator`), whose ``next()`` runs in C."""

from __future__ import annotations

from itertools import compress
from typing import TYPE_CHECKING, Any, TypeVar

from txstore.bytestores.segment_reads import SegmentedStoreState
from txstore.stores.kv import KeyValueIterator

__all__ = ["DecodedIterator", "decoded_iterator"]

K = TypeVar("K")
V = TypeVar("V")

if TYPE_CHECKING:
    _Compress = compress[Any]
else:
    _Compress = compress


class DecodedIterator(_Compress, KeyValueIterator[K, V]):
    """A typed iterator over pairs decoded in one go (a short single-key fetch); make one with
    :func:`decoded_iterator`.

    Same interface as :class:`~txstore.stores.kv.KeyValueIterator`; it yields nothing once closed or
    once its store is closed, and no pair of a segment dropped since it was read. It *is* an
    ``itertools.compress`` of a list iterator over the pairs by the **liveness cells** of their
    segments (a parallel list; a cell is a list that holds one element while its segment is
    live and none once the segment is dropped or the store closed:
    :mod:`txstore.bytestores.segment_reads`): ``next()`` and ``with`` run in C, with no call
    per element (measured on a 4-window fetch consumed in a ``with`` block: 700 ns for the
    iterator against 840 with a ``takewhile`` calling a predicate, and 1,190 with a Python
    ``__next__``). Closing it empties the list, which ends the list iterator; ``has_next``
    and ``peek_next_key`` read its position.
    """

    __slots__ = ("cells", "items", "items_iter", "store")
    items_iter: Any  # the list iterator over ``items`` that the ``compress`` reads
    items: list[Any]  # the pairs, emptied when the iterator is closed
    cells: list[list[bool]]  # the liveness cell of each pair's segment
    store: SegmentedStoreState  # the store they were read from: they end when it closes

    if TYPE_CHECKING:

        def __init__(self, data: Any, selectors: Any) -> None: ...

    else:
        # compress's own constructor, then object's __init__ (a C slot): no Python frame.
        __init__ = object.__init__
        __enter__ = compress.__iter__  # returns the iterator itself, in C

    def _next_index(self) -> int:
        """The index of the pair ``next()`` returns (``len(items)``: none). O(1) but for the
        pairs of dropped segments it passes over."""
        items, cells = self.items, self.cells
        n = len(items)
        i: int = n - self.items_iter.__length_hint__()
        while i < n and not cells[i]:
            i += 1
        return i

    def has_next(self) -> bool:
        """Whether another pair follows (``False`` once the store is closed). O(1)."""
        return self.store.is_open and self._next_index() < len(self.items)

    def peek_next_key(self) -> K | None:
        """The next key without consuming it, or ``None`` at the end. O(1)."""
        if not self.has_next():
            return None
        key: K = self.items[self._next_index()].key
        return key

    def close(self) -> None:
        """Drop the pairs not yet read; idempotent. O(1)."""
        self.items.clear()

    if TYPE_CHECKING:

        def __exit__(self, *exc: object) -> None: ...

    else:

        def __exit__(self, exc_type, exc, tb):  # three parameters: no tuple to pack
            self.items.clear()


def decoded_iterator(
    items: list[Any], store: SegmentedStoreState, cells: list[list[bool]]
) -> DecodedIterator[Any, Any]:
    """A :class:`DecodedIterator` over ``items`` (``KeyValue`` pairs) of ``store``, ``cells``
    the liveness cells of their segments (one per pair)."""
    it = iter(items)
    self: DecodedIterator[Any, Any] = DecodedIterator(it, iter(cells))
    self.items_iter = it
    self.items = items
    self.cells = cells
    self.store = store
    return self
