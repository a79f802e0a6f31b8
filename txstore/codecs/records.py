"""Record converters (KIP-258, KIP-1271): a changelog record (plain value, record timestamp,
serialized record headers) to the stored value of a store's format. Restore calls
:func:`records_to_values` once per batch; the single-record form is :func:`record_to_value`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import repeat

from txstore._fastpaths import value_function as _value_function
from txstore.codecs._common import (
    _HEADERS,
    _PLAIN,
    _PLAIN_HEADERS,
    _TIMESTAMPED,
    ValueFormat,
    _format,
    _pack_q,
)
from txstore.codecs.values import _LEN, _join, encode_varint, pack_value
from txstore.errors import InvalidArgumentError

__all__ = ["record_to_value", "records_to_values"]


def _record_to_value(
    fmt: ValueFormat, value: bytes | None, timestamp: int, headers: bytes
) -> bytes | None:
    """Record converter: a changelog record (plain value, record timestamp, serialized record
    headers) to the stored value of ``fmt``. A ``None`` value stays ``None`` (a delete). O(n).

    >>> record_to_value(ValueFormat.TIMESTAMPED, b"val", 1000, b"").hex()
    '00000000000003e876616c'
    """
    if value is None:
        return None
    if fmt is _HEADERS and type(headers) is bytes:  # pack_value's HEADERS path, inlined
        try:
            n = len(headers)
            hsize = _LEN[n] if n < 64 else encode_varint(n)
            return _join((hsize, headers, _pack_q(timestamp), value))
        except (TypeError, struct.error):
            pass
    return pack_value(fmt, value, timestamp, headers)


def records_to_values(
    fmt: ValueFormat,
    values: Sequence[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes],
) -> list[bytes | None]:
    """Batch :func:`record_to_value`: restore's hot path. O(total bytes).

    One call of the C builtin :func:`record_to_value` per record through ``map`` (40-45 ns a
    100-byte record, against 80-140 for a Python loop building the same bytes): a one-C-call
    batch measured slower still (``perf/bench_codecs.py``: 0.86x of the loop for 1,000
    records), because packing the input and cutting the output cost more than the
    conversion. A bad item goes to the Python function behind the builtin, which raises the
    typed error.

    >>> records_to_values(ValueFormat.TIMESTAMPED, [b"v", None], [1000, 5], [b"", b""])
    [b'\\x00\\x00\\x00\\x00\\x00\\x00\\x03\\xe8v', None]
    """
    fmt = _format(fmt)
    n = len(values)
    if len(timestamps) != n or len(headers) != n:
        raise InvalidArgumentError("values, timestamps and headers must have the same length")
    return list(map(record_to_value, repeat(fmt, n), values, timestamps, headers))


#: A C builtin (csrc/fastpaths.c) in front of the Python function: see codecs/values.py.
record_to_value = _value_function(
    "record_to_value", _record_to_value, (_PLAIN, _TIMESTAMPED, _HEADERS, _PLAIN_HEADERS)
)
