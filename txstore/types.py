"""Public value types, named and behaving as in Kafka Streams.

Kafka's null rules carry over: ``ValueAndTimestamp.make(None, ts)`` is ``None`` (a ``None``
value means "delete" throughout the store API), and so is every other ``make`` given a ``None``
value. The constructors themselves accept ``None`` values, like Kafka's ``makeAllowNullable``.

>>> ValueAndTimestamp.make("v", 100)
ValueAndTimestamp(value='v', timestamp=100)
>>> ValueAndTimestamp.make(None, 100) is None
True
>>> Headers([("k", b"v")]).last_header("k")
b'v'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar, overload

from txstore.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "NO_TIMESTAMP",
    "AggregationWithHeaders",
    "Header",
    "Headers",
    "KeyValue",
    "SessionWindow",
    "TimeWindow",
    "ValueAndHeaders",
    "ValueAndTimestamp",
    "ValueTimestampHeaders",
    "Windowed",
]

K = TypeVar("K")
V = TypeVar("V")

NO_TIMESTAMP = -1
"""Kafka's ``ConsumerRecord.NO_TIMESTAMP``: the surrogate timestamp given to values that never
had one (plain values upgraded to a timestamped format)."""

_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1


def check_long(name: str, value: object) -> int:
    """Return ``value`` if it is an int in Java's long range, else raise a typed error."""
    if type(value) is not int:
        if isinstance(value, int) and not isinstance(value, bool):
            value = int(value)
        else:
            raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise InvalidArgumentError(f"{name} {value} is outside the 64-bit signed range")
    return value


class Header(NamedTuple):
    """One record header: a text key and a bytes value, which may be ``None``."""

    key: str
    """The header's name (several headers may share one)."""
    value: bytes | None
    """The header's bytes; ``None`` is a header without a value."""


#: Makes a :class:`Header` of a ``(key, value)`` pair in C (``Header(key, value)`` runs
#: Python code): ~100 ns.
_as_header = partial(tuple.__new__, Header)


class Headers:
    """An immutable, ordered list of record headers (Kafka's ``Headers``).

    Order is insertion order and duplicate keys are kept, as Kafka does. Equality compares the
    headers in order. ``None`` and an empty list are the same "no headers".

    The headers are kept as plain ``(key, value)`` pairs and handed out as :class:`Header`
    tuples, made on first access (as Kafka's ``LazyHeaders``): decoding a value's headers
    costs no ``Header`` objects unless they are looked at one by one.

    >>> h = Headers([("a", None), ("bc", b"\\x01\\x02")])
    >>> len(h), h[0]
    (2, Header(key='a', value=None))
    >>> h.add("a", b"x").headers("a")
    [None, b'x']
    """

    __slots__ = ("_headers", "pairs")

    pairs: list[tuple[str, bytes | None]]
    """The ``(key, value)`` pairs, in a list that is never changed (a list, as decoders build
    one: making it a tuple would cost a copy). Read it, never change it: the codecs encode from
    it and :meth:`from_pairs` hands a decoder's list over as it is."""
    # _headers: the same as Header tuples, once made (_as_headers).
    _headers: tuple[Header, ...]

    def __init__(self, items: Iterable[tuple[str, bytes | None]] | None = None) -> None:
        out: list[tuple[str, bytes | None]] = []
        for item in items or ():
            try:
                key, value = item
            except (TypeError, ValueError):
                raise InvalidTypeError(
                    f"a header must be a (key, value) pair, got {item!r}"
                ) from None
            if not isinstance(key, str):
                raise InvalidTypeError(f"a header key must be str, got {type(key).__name__}")
            if value is not None and not isinstance(value, bytes):
                if isinstance(value, (bytearray, memoryview)):
                    value = bytes(value)
                else:
                    raise InvalidTypeError(
                        f"a header value must be bytes or None, got {type(value).__name__}"
                    )
            out.append((key, value))
        self.pairs = out

    @classmethod
    def from_pairs(cls, items: list[tuple[str, bytes | None]]) -> Headers:
        """Headers over ``items`` as they are, without the constructor's checks. O(1).

        For decoders that built ``items`` themselves, so every item is already a pair of a
        ``str`` key and a ``bytes`` or ``None`` value, and that hand the list over (nothing
        may change it afterwards). :func:`txstore.codecs.decode_headers` inlines this.
        """
        headers = object.__new__(cls)
        headers.pairs = items
        return headers

    def _as_headers(self) -> tuple[Header, ...]:
        try:
            return self._headers
        except AttributeError:  # first access
            self._headers = tuple(map(_as_header, self.pairs))
            return self._headers

    @classmethod
    def of(cls, headers: Headers | Iterable[tuple[str, bytes | None]] | None) -> Headers:
        """Return ``headers`` as a :class:`Headers` (``None`` gives the empty headers)."""
        if isinstance(headers, Headers):
            return headers
        return cls(headers)

    def add(self, key: str, value: bytes | None) -> Headers:
        """Return new headers with ``(key, value)`` appended. O(n)."""
        return Headers([*self.pairs, (key, value)])

    def last_header(self, key: str) -> bytes | None:
        """The value of the last header named ``key``, or ``None`` if there is none. O(n)."""
        for k, value in reversed(self.pairs):
            if k == key:
                return value
        return None

    def headers(self, key: str) -> list[bytes | None]:
        """Every value of headers named ``key``, in order. O(n)."""
        return [value for k, value in self.pairs if k == key]

    def to_list(self) -> list[Header]:
        """The headers as a list of :class:`Header` tuples."""
        return list(self._as_headers())

    def __iter__(self) -> Iterator[Header]:
        return iter(self._as_headers())

    def __len__(self) -> int:
        return len(self.pairs)

    def __bool__(self) -> bool:
        return bool(self.pairs)

    @overload
    def __getitem__(self, index: int) -> Header: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Header, ...]: ...
    def __getitem__(self, index: int | slice) -> Header | tuple[Header, ...]:
        return self._as_headers()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self.pairs == other.pairs
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.pairs))

    def __repr__(self) -> str:
        return f"Headers({self.pairs!r})"


EMPTY_HEADERS = Headers()


@dataclass(frozen=True, slots=True)
class ValueAndTimestamp(Generic[V]):
    """A value with its timestamp (KIP-258); stored as ``[ts 8 BE][value]``."""

    value: V
    """The value."""
    timestamp: int
    """Epoch milliseconds of the record the value came from (:data:`NO_TIMESTAMP` for a value
    upgraded from a plain store)."""

    @classmethod
    def make(cls, value: V | None, timestamp: int) -> ValueAndTimestamp[V] | None:
        """``None`` if ``value`` is ``None``, else a new instance (Kafka's ``make``)."""
        return None if value is None else cls(value, check_long("timestamp", timestamp))

    @classmethod
    def make_allow_nullable(cls, value: V, timestamp: int) -> ValueAndTimestamp[V]:
        """A new instance even for a ``None`` value (Kafka's ``makeAllowNullable``)."""
        return cls(value, check_long("timestamp", timestamp))

    @staticmethod
    def value_or_none(vat: ValueAndTimestamp[V] | None) -> V | None:
        """Kafka's ``getValueOrNull``: the value, or ``None`` for a ``None`` argument."""
        return None if vat is None else vat.value

    @staticmethod
    def get_value_or_null(vat: ValueAndTimestamp[V] | None) -> V | None:
        """Kafka's ``getValueOrNull`` (same as :meth:`value_or_none`)."""
        return None if vat is None else vat.value

    def __str__(self) -> str:
        return f"<{self.value},{self.timestamp}>"


@dataclass(frozen=True, slots=True)
class ValueTimestampHeaders(Generic[V]):
    """Value, timestamp and headers (KIP-1271).

    Stored as ``[varint headersSize][headers][ts 8 BE][value]``.
    """

    value: V
    """The value."""
    timestamp: int
    """Epoch milliseconds of the record the value came from."""
    headers: Headers = EMPTY_HEADERS
    """The record's headers (empty by default)."""

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Headers):
            object.__setattr__(self, "headers", Headers.of(self.headers))

    @classmethod
    def make(
        cls, value: V | None, timestamp: int, headers: Any = None
    ) -> ValueTimestampHeaders[V] | None:
        """``None`` if ``value`` is ``None``; ``None`` headers become empty headers."""
        if value is None:
            return None
        return cls(value, check_long("timestamp", timestamp), Headers.of(headers))

    @classmethod
    def make_allow_nullable(
        cls, value: V, timestamp: int, headers: Any = None
    ) -> ValueTimestampHeaders[V]:
        """A new instance even for a ``None`` value (Kafka's ``makeAllowNullable``)."""
        return cls(value, check_long("timestamp", timestamp), Headers.of(headers))

    @staticmethod
    def get_value_or_null(vth: ValueTimestampHeaders[V] | None) -> V | None:
        """The value, or ``None`` for a ``None`` argument (Kafka's ``getValueOrNull``)."""
        return None if vth is None else vth.value


@dataclass(frozen=True, slots=True)
class ValueAndHeaders(Generic[V]):
    """A value with headers and no timestamp: the plain window store with headers.

    Stored as ``[varint headersSize][headers][value]`` (8 bytes smaller per record than
    :class:`ValueTimestampHeaders`).
    """

    value: V
    """The value."""
    headers: Headers = EMPTY_HEADERS
    """The record's headers (empty by default)."""

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Headers):
            object.__setattr__(self, "headers", Headers.of(self.headers))

    @classmethod
    def make(cls, value: V | None, headers: Any = None) -> ValueAndHeaders[V] | None:
        """``None`` if ``value`` is ``None``.

        >>> ValueAndHeaders.make(None, [("k", b"v")]) is None
        True
        >>> ValueAndHeaders.make_allow_nullable(None).value is None
        True
        """
        return None if value is None else cls(value, Headers.of(headers))

    @classmethod
    def make_allow_nullable(cls, value: V, headers: Any = None) -> ValueAndHeaders[V]:
        """A new instance even for a ``None`` value (``None`` headers become empty headers)."""
        return cls(value, Headers.of(headers))

    @staticmethod
    def get_value_or_null(vah: ValueAndHeaders[V] | None) -> V | None:
        """The value, or ``None`` for a ``None`` argument.

        >>> ValueAndHeaders.get_value_or_null(ValueAndHeaders("v"))
        'v'
        >>> ValueAndHeaders.get_value_or_null(None) is None
        True
        """
        return None if vah is None else vah.value


@dataclass(frozen=True, slots=True)
class AggregationWithHeaders(Generic[V]):
    """A session aggregation with headers (KIP-1271): ``[varint headersSize][headers][agg]``."""

    aggregation: V
    """The session's aggregated value."""
    headers: Headers = EMPTY_HEADERS
    """The record's headers (empty by default)."""

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Headers):
            object.__setattr__(self, "headers", Headers.of(self.headers))

    @classmethod
    def make(cls, aggregation: V | None, headers: Any = None) -> AggregationWithHeaders[V] | None:
        """``None`` if ``aggregation`` is ``None``."""
        return None if aggregation is None else cls(aggregation, Headers.of(headers))

    @classmethod
    def make_allow_nullable(cls, aggregation: V, headers: Any = None) -> AggregationWithHeaders[V]:
        """A new instance even for a ``None`` aggregation (Kafka's ``makeAllowNullable``)."""
        return cls(aggregation, Headers.of(headers))

    @staticmethod
    def get_aggregation_or_null(awh: AggregationWithHeaders[V] | None) -> V | None:
        """The aggregation, or ``None`` for a ``None`` argument."""
        return None if awh is None else awh.aggregation


@dataclass(frozen=True, slots=True, order=True)
class TimeWindow:
    """A time window ``[start, end)`` of a window store (Kafka's ``TimeWindow``).

    >>> TimeWindow(0, 10)
    TimeWindow(start=0, end=10)
    >>> TimeWindow(5, 5)
    Traceback (most recent call last):
    ...
    txstore.errors.InvalidArgumentError: Window endMs must be greater than window startMs.
    """

    start: int
    """Inclusive start, epoch milliseconds (>= 0)."""
    end: int
    """Exclusive end, epoch milliseconds (> start)."""

    def __post_init__(self) -> None:
        _check_window(self.start, self.end)
        if self.start == self.end:
            raise InvalidArgumentError("Window endMs must be greater than window startMs.")

    @classmethod
    def for_size(cls, start: int, size: int) -> TimeWindow:
        """The window starting at ``start`` of length ``size``, its end clamped to the
        largest long on overflow (Kafka's ``WindowKeySchema.timeWindowForSize``)."""
        end = start + size
        return cls(start, end if end <= _LONG_MAX else _LONG_MAX)


@dataclass(frozen=True, slots=True, order=True)
class SessionWindow:
    """A session window ``[start, end]``, both inclusive; ``start == end`` is allowed."""

    start: int
    """Epoch milliseconds of the session's first record (>= 0)."""
    end: int
    """Epoch milliseconds of its last record (>= start)."""

    def __post_init__(self) -> None:
        _check_window(self.start, self.end)


def _check_window(start: int, end: int) -> None:
    check_long("window start", start)
    check_long("window end", end)
    if start < 0:
        raise InvalidArgumentError("Window startMs time cannot be negative.")
    if end < start:
        raise InvalidArgumentError("Window endMs time cannot be smaller than window startMs time.")


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """A key together with the window it belongs to."""

    key: K
    """The record key."""
    window: TimeWindow | SessionWindow
    """The window it belongs to: a :class:`TimeWindow` (window stores) or a :class:`SessionWindow`
    (session stores)."""


class KeyValue(NamedTuple, Generic[K, V]):
    """A key-value pair, as iterators return them."""

    key: K
    """The key (a window store's single-key iterators: the window start)."""
    value: V
    """The value."""
