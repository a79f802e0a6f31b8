"""Filters pushed into a read: which partitions, which keys, which window starts (no PySpark).

The data source translates Spark's pushed filters (``DataSourceReader.pushFilters``) into one
:class:`Pushdown`, which travels in the plan to every task. A pushdown only narrows *what is
read*: every filter is also handed back to Spark, which applies it to the rows read, so a
pushdown reads a superset of the answer and can never change it. What narrows, and how:

================================  ==============================================================
filter                            effect
================================  ==============================================================
``partition_id`` =, IN, <, <=...   tasks only for the matching partitions
``key`` = v, ``key`` IN (...)      key-value stores: a point read per key (O(log n)); at planning,
                                   only partitions whose cut holds one of the keys get a task.
                                   Window and session stores: those keys' records only
``key`` <, <=, >, >=, LIKE 'p%'    string and binary keys (whose byte order is Spark's order):
                                   a key range of the B-tree
``window.start`` / ``window.end``  window stores: the segments and records of that time range
================================  ==============================================================

Keys are serialized by the store's key serde (``string``, ``bytes``, ``integer``, ``long``;
``decode=false`` compares the serialized bytes themselves); other serdes are not narrowed.

>>> p = Pushdown(keys=(b"b", b"a"))
>>> p.key_range().lo, p.key_range().hi
(b'a', b'b')
>>> Pushdown(partitions=frozenset({1})).allows_partition(2)
False
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from txstore.engine.iterators import KeyRange

__all__ = ["MAX_TIME", "Pushdown"]

MAX_TIME: Final = 2**63 - 1


@dataclass(frozen=True)
class Pushdown:
    """What a read may skip (see the module docstring); the default skips nothing."""

    partitions: frozenset[int] | None = None
    """Partitions that may hold matching rows (None: all)."""
    keys: tuple[bytes, ...] | None = None
    """Serialized keys: the only keys that may match (None: any key)."""
    lo: bytes | None = None
    lo_inclusive: bool = True
    hi: bytes | None = None
    hi_inclusive: bool = True
    start_from: int = 0
    """Window stores: the earliest window start that may match (ms)."""
    start_to: int = MAX_TIME
    """Window stores: the latest window start that may match (ms)."""

    @property
    def empty(self) -> bool:
        """True when no row can match (contradicting filters)."""
        if self.keys is not None and not self.keys:
            return True
        if self.partitions is not None and not self.partitions:
            return True
        return self.key_range().is_empty() or self.start_from > self.start_to

    @property
    def narrows_keys(self) -> bool:
        return self.keys is not None or self.lo is not None or self.hi is not None

    @property
    def narrows(self) -> bool:
        """True when a task reads less than its whole store."""
        return self.narrows_keys or self.start_from > 0 or self.start_to < MAX_TIME

    def allows_partition(self, number: int) -> bool:
        return self.partitions is None or number in self.partitions

    def key_range(self) -> KeyRange:
        """The serialized keys that may match, as one range (the keys' span when ``keys``)."""
        if self.keys is not None and self.keys:
            return KeyRange(min(self.keys), max(self.keys), True, True)
        return KeyRange(self.lo, self.hi, self.lo_inclusive, self.hi_inclusive)

    def with_partitions(self, numbers: frozenset[int]) -> Pushdown:
        have = self.partitions
        return replace(self, partitions=numbers if have is None else have & numbers)

    def with_keys(self, keys: tuple[bytes, ...]) -> Pushdown:
        have = self.keys
        if have is not None:
            keys = tuple(k for k in have if k in set(keys))
        return replace(self, keys=tuple(sorted(set(keys))))

    def with_bound(self, lower: bool, bound: bytes, inclusive: bool) -> Pushdown:
        """Intersect with ``key >= bound`` (``lower``) or ``key <= bound`` (exclusive unless
        ``inclusive``)."""
        if lower:
            if self.lo is None or bound > self.lo or (bound == self.lo and not inclusive):
                return replace(self, lo=bound, lo_inclusive=inclusive)
            return self
        if self.hi is None or bound < self.hi or (bound == self.hi and not inclusive):
            return replace(self, hi=bound, hi_inclusive=inclusive)
        return self

    def with_starts(self, start_from: int, start_to: int) -> Pushdown:
        return replace(
            self,
            start_from=max(self.start_from, start_from),
            start_to=min(self.start_to, start_to),
        )

    def key_matches(self, key: bytes) -> bool:
        """Whether serialized ``key`` may match (planning's point checks use it)."""
        if self.keys is not None and key not in self.keys:
            return False
        rng = self.key_range()
        if rng.lo is not None and (key < rng.lo or (key == rng.lo and not rng.lo_inclusive)):
            return False
        return not (
            rng.hi is not None and (key > rng.hi or (key == rng.hi and not rng.hi_inclusive))
        )
