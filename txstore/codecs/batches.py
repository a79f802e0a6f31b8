"""The list-returning batch codecs whose items C cannot make faster than one call each.

Each of these returns one new Python object per item (a ``bytes``, or a tuple of three), and
making that object is most of the work: a conversion from PLAIN to HEADERS is one
concatenation, ~37 ns in a list comprehension, while a cffi batch that packs the inputs,
converts them in C and cuts the output back into objects cost ~105 ns an item
(``perf/bench_codecs.py``). So they map the single-item codecs, which are C builtins
(``txstore._fastpaths``) in front of their Python functions, over the list: ~30-70 ns an
item, with the single-item codecs' checks and typed errors. The batches where C wins stay
in :mod:`txstore.codecs._native` (varints, murmur2 partitions, the column codecs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from txstore.codecs._common import ValueFormat
from txstore.codecs.converters import value_converter
from txstore.codecs.keys import (
    extract_session_key,
    extract_window_key,
    segment_id_function,
    session_key,
    window_key,
)
from txstore.codecs.values import split_value
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError

__all__ = [
    "convert_values",
    "extract_session_keys",
    "extract_window_keys",
    "segment_ids",
    "session_keys",
    "split_values",
    "window_keys",
]


#: The errors of the single-item codecs, which a batch reports with the index of the item.
_ITEM_ERRORS = (SerializationError, InvalidTypeError, InvalidArgumentError)


def _mapped(fn: Callable[..., Any], *columns: Sequence[Any]) -> list[Any]:
    """``list(map(fn, *columns))``; an item's error is raised again naming its index."""
    try:
        return list(map(fn, *columns))
    except _ITEM_ERRORS as e:
        raise _at_index(e, fn, columns) from None


def _at_index(
    error: Exception, fn: Callable[..., Any], columns: Sequence[Sequence[Any]]
) -> Exception:
    """``error`` (raised by ``fn`` on some item of ``columns``) with that item's index: the
    items are tried again one by one, which costs nothing until a batch fails."""
    for i, args in enumerate(zip(*columns, strict=True)):
        try:
            fn(*args)
        except _ITEM_ERRORS as again:
            return type(again)(f"{again} (item at index {i})")
    return error


def convert_values(
    raws: Sequence[bytes | None], src: ValueFormat, dst: ValueFormat
) -> list[bytes | None]:
    """Batch :func:`~txstore.codecs.convert_value`; ``None`` items give ``None``. O(total).

    >>> convert_values([b"v", None], ValueFormat.PLAIN, ValueFormat.TIMESTAMPED)
    [b'\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xffv', None]
    """
    return _mapped(value_converter(src, dst), raws)


def split_values(
    fmt: ValueFormat, raws: Sequence[bytes | None]
) -> list[tuple[bytes, int | None, bytes] | None]:
    """Batch :func:`~txstore.codecs.split_value`; ``None`` items give ``None``. O(total)."""

    def split(raw: bytes | None) -> tuple[bytes, int | None, bytes] | None:
        return None if raw is None else split_value(fmt, raw)

    try:
        return [None if raw is None else split_value(fmt, raw) for raw in raws]
    except _ITEM_ERRORS as e:
        raise _at_index(e, split, (raws,)) from None


def _same_length(n: int, what: str, *columns: Sequence[object] | None) -> None:
    if any(c is not None and len(c) != n for c in columns):
        raise InvalidArgumentError(f"{what} must have the same length")


def _no_none_key(keys: Sequence[bytes], kind: str, error: InvalidTypeError) -> Exception:
    """The error of a batch whose single-item codec refused a key: a ``None`` key is named as
    such (the batches always refused it with this error), any other stays as it was."""
    if any(k is None for k in keys):
        return InvalidArgumentError(f"a {kind} key cannot be None")
    return error


def window_keys(
    keys: Sequence[bytes], timestamps: Sequence[int], seqs: Sequence[int] | None = None
) -> list[bytes]:
    """Batch :func:`~txstore.codecs.window_key` (``seqs`` default to 0). O(total).

    >>> window_keys([b"a"], [1000])[0].hex()
    '6100000000000003e800000000'
    """
    _same_length(len(keys), "keys, timestamps and seqs", timestamps, seqs)
    try:
        if seqs is None:
            return _mapped(window_key, keys, timestamps)
        return _mapped(window_key, keys, timestamps, seqs)
    except InvalidTypeError as e:
        raise _no_none_key(keys, "window", e) from None


def extract_window_keys(raws: Sequence[bytes]) -> list[tuple[bytes, int, int]]:
    """Batch :func:`~txstore.codecs.extract_window_key`: ``(key, timestamp, seq)`` each."""
    return _mapped(extract_window_key, raws)


def session_keys(keys: Sequence[bytes], starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
    """Batch :func:`~txstore.codecs.session_key`. O(total)."""
    _same_length(len(keys), "keys, starts and ends", starts, ends)
    try:
        return _mapped(session_key, keys, starts, ends)
    except InvalidTypeError as e:
        raise _no_none_key(keys, "session", e) from None


def extract_session_keys(raws: Sequence[bytes]) -> list[tuple[bytes, int, int]]:
    """Batch :func:`~txstore.codecs.extract_session_key`: ``(key, start, end)`` each."""
    return _mapped(extract_session_key, raws)


def segment_ids(timestamps: Sequence[int], interval: int) -> list[int]:
    """Batch :func:`~txstore.codecs.segment_id` for one ``interval``. O(n).

    >>> segment_ids([-1, 60000, 119999], 60000)
    [0, 1, 1]
    """
    return _mapped(segment_id_function(interval), timestamps)
