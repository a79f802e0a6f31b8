"""Columns: many rows of a batch codec as a few buffers, in Apache Arrow's layouts.

A batch codec that returns a list pays for one Python object per item (~12 ns for the
``bytes`` alone, more than the C work of most layouts), so its gain over a Python loop is
small. The column functions of :mod:`txstore.codecs._native` (``split_value_columns``,
``window_key_columns``, ``session_key_columns``) return these types instead: the items of a
column end to end in one buffer plus ``n + 1`` int32 offsets (Arrow's ``binary`` layout), and
numbers as ``array("q")`` / ``array("i")`` (Arrow's fixed-width layout). The Spark reader hands
the buffers to Arrow without copying them or making an object per row.

>>> col = BinaryColumn(b"abcde", array("i", [0, 2, 2, 5]))
>>> len(col), col[0], col[1], col[-1]
(3, b'ab', b'', b'cde')
>>> col.to_list()
[b'ab', b'', b'cde']
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from itertools import pairwise
from typing import Any, NamedTuple

from txstore.codecs._common import _cut


class BinaryColumn:
    """``n`` byte strings stored end to end in ``data``, item ``i`` at
    ``data[offsets[i]:offsets[i + 1]]``; ``offsets`` is an ``array("i")`` of ``n + 1`` ints
    starting at 0 (Arrow's ``binary`` layout, so ``data`` stays under 2 GiB).

    ``data`` is any buffer at least ``offsets[-1]`` bytes long (``bytes``, the C library's
    output buffer, which it keeps alive, or a ``pyarrow.Buffer``).
    Indexing costs O(1) and makes one ``bytes``; :meth:`to_list` makes them all in one call.
    """

    __slots__ = ("data", "offsets")

    def __init__(self, data: Any, offsets: array[int]) -> None:
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        n = len(self.offsets) - 1
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"column index {i} out of range for {n} items")
        return bytes(self.view()[self.offsets[j] : self.offsets[j + 1]])

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.to_list())

    def lengths(self) -> list[int]:
        """The length of every item, O(n)."""
        return [b - a for a, b in pairwise(self.offsets)]

    def to_list(self) -> list[bytes]:
        """Every item as ``bytes``, O(n), cut from ``data`` with one ``struct`` call."""
        return _cut(self.view(), self.lengths())

    def view(self) -> memoryview:
        """The items' bytes end to end (``offsets[-1]`` bytes), without a copy."""
        view = memoryview(self.data)
        if view.itemsize != 1 or view.ndim != 1:  # slicing would count items, not bytes
            view = view.cast("B")
        return view[: self.offsets[-1]]

    def __repr__(self) -> str:
        return f"BinaryColumn({len(self)} items, {self.offsets[-1]} bytes)"


class ValueColumns(NamedTuple):
    """Stored values split by :func:`~txstore.codecs._native.split_value_columns`.

    ``timestamps`` holds -1 for every row of a format without timestamps, and ``headers``
    holds an empty item for every row of a format without headers.
    """

    values: BinaryColumn
    timestamps: array[int]
    headers: BinaryColumn


class KeyColumns(NamedTuple):
    """Window or session store keys split by ``window_key_columns`` / ``session_key_columns``.

    Window keys ``[key][ts][seq]``: ``first`` is the window start, ``second`` the sequence
    number (an ``array("i")``). Session keys ``[key][end][start]``: ``first`` is the session
    end, ``second`` its start (an ``array("q")``).
    """

    keys: BinaryColumn
    first: array[int]
    second: array[int]
