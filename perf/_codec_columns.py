"""Pure-Python baselines of the column codecs, for ``bench_codecs.py``.

The column functions (``split_value_columns``, ``window_key_columns``, ``session_key_columns``)
turn many stored values or store keys into Arrow-layout columns: one data buffer plus int32
offsets per byte-string column, ``array("q")``/``array("i")`` per number column. The baselines
here produce exactly the same columns the way plain Python would: one loop that slices and
unpacks each item into lists, then ``b"".join`` and ``itertools.accumulate`` for the offsets.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

from txstore.codecs.columns import BinaryColumn, KeyColumns, ValueColumns

_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_QQ = struct.Struct(">qq")


def _column(items: list[bytes]) -> BinaryColumn:
    offsets = array("i", [0])
    offsets.extend(accumulate(map(len, items)))
    return BinaryColumn(b"".join(items), offsets)


def split_headers_columns(
    raws: Sequence[bytes], decode_varint: Callable[[bytes, int], tuple[int, int]]
) -> ValueColumns:
    """Columns of ``[varint hsize][headers][ts 8][value]`` values (ValueTimestampHeaders)."""
    values: list[bytes] = []
    stamps: list[int] = []
    headers: list[bytes] = []
    add_v, add_t, add_h = values.append, stamps.append, headers.append
    unpack = _Q.unpack_from
    for raw in raws:
        b = raw[0]
        if b < 0x80:  # one-byte size: the common case
            start, end = 1, ((b >> 1) ^ -(b & 1)) + 1
        else:
            size, start = decode_varint(raw, 0)
            end = start + size
        add_h(raw[start:end])
        add_t(unpack(raw, end)[0])
        add_v(raw[end + 8 :])
    return ValueColumns(_column(values), array("q", stamps), _column(headers))


def window_key_columns(raws: Sequence[bytes]) -> KeyColumns:
    """Columns of ``[key][ts 8][seq 4]`` window store keys."""
    unpack = _QI.unpack_from
    keys = [r[:-12] for r in raws]
    stamps, seqs = zip(*[unpack(r, len(r) - 12) for r in raws], strict=True) if raws else ((), ())
    return KeyColumns(_column(keys), array("q", stamps), array("i", seqs))


def session_key_columns(raws: Sequence[bytes]) -> KeyColumns:
    """Columns of ``[key][end 8][start 8]`` session store keys."""
    unpack = _QQ.unpack_from
    keys = [r[:-16] for r in raws]
    ends, starts = zip(*[unpack(r, len(r) - 16) for r in raws], strict=True) if raws else ((), ())
    return KeyColumns(_column(keys), array("q", ends), array("q", starts))


def as_lists(cols: Any) -> tuple[Any, ...]:
    """Comparable contents of a column result: every column's items as lists."""
    parts = (
        (cols.values, cols.timestamps, cols.headers)
        if isinstance(cols, ValueColumns)
        else (
            cols.keys,
            cols.first,
            cols.second,
        )
    )
    return tuple(
        (bytes(p.view()), p.offsets.tolist()) if isinstance(p, BinaryColumn) else p.tolist()
        for p in parts
    )
