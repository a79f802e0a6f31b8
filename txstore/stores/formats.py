"""Value formats at the typed layer: a value object plus a serde to and from stored bytes.

A store holds one :class:`ValueCodec`, chosen by its :class:`~txstore.codecs.ValueFormat`, so
there is one store class per kind (key-value, window, session) instead of one per format. The
rules are Kafka's (KIP-258, KIP-1271):

* a ``None`` value object, or a wrapper whose inner value is ``None``, stores as ``None``
  (a delete);
* a serde that returns ``None`` for the inner value also gives ``None``;
* decoding gives the wrapper type of the format (``ValueAndTimestamp`` for ``TIMESTAMPED``...).

>>> from txstore.stores.serdes import Serdes
>>> codec = value_codec(ValueFormat.TIMESTAMPED, Serdes.string())
>>> raw = codec.encode(ValueAndTimestamp("val", 1000))
>>> raw.hex()
'00000000000003e876616c'
>>> codec.decode(raw)
ValueAndTimestamp(value='val', timestamp=1000)
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from txstore import codecs
from txstore.codecs import ValueFormat
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.stores.serdes import Serde
from txstore.types import (
    AggregationWithHeaders,
    Headers,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueTimestampHeaders,
)

__all__ = ["DslStoreFormat", "ValueCodec", "ValueFormat", "value_codec"]

V = TypeVar("V")

#: Kafka's ``DslStoreFormat`` names the same four layouts.
DslStoreFormat = ValueFormat

_WRAPPERS: dict[ValueFormat, tuple[type, ...]] = {
    ValueFormat.PLAIN: (),
    ValueFormat.TIMESTAMPED: (ValueAndTimestamp,),
    ValueFormat.HEADERS: (ValueTimestampHeaders,),
    ValueFormat.PLAIN_HEADERS: (ValueAndHeaders, AggregationWithHeaders),
}


class ValueCodec(Generic[V]):
    """Encodes a store's value objects to stored bytes and back, for one format and serde.

    ``headers_type`` picks the wrapper a ``PLAIN_HEADERS`` codec decodes to:
    :class:`ValueAndHeaders` for window stores, :class:`AggregationWithHeaders` for sessions.
    """

    __slots__ = ("format", "headers_type", "serde")

    def __init__(
        self,
        fmt: ValueFormat,
        serde: Serde[V],
        headers_type: type = ValueAndHeaders,
    ) -> None:
        self.format = ValueFormat(fmt)
        self.serde = serde
        self.headers_type = headers_type

    @property
    def wrapper(self) -> str:
        """The Python type name of this format's value objects (``"V"`` for plain)."""
        if self.format == ValueFormat.PLAIN_HEADERS:
            return self.headers_type.__name__
        types = _WRAPPERS[self.format]
        return types[0].__name__ if types else "V"

    def encode(self, obj: Any) -> bytes | None:
        """Stored bytes of ``obj``, or ``None`` for a delete. O(size of the value)."""
        if obj is None:
            return None
        fmt = self.format
        if fmt == ValueFormat.PLAIN:
            return self.serde.serialize(obj)
        if not isinstance(obj, _WRAPPERS[fmt]):
            raise InvalidTypeError(
                f"a {fmt.name} store takes {self.wrapper} values, got {type(obj).__name__}"
            )
        return self._encode_wrapper(fmt, obj)

    def _encode_wrapper(self, fmt: ValueFormat, obj: Any) -> bytes | None:
        if fmt == ValueFormat.TIMESTAMPED:
            inner = self.serde.serialize(obj.value)
            return None if inner is None else codecs.pack_value(fmt, inner, obj.timestamp)
        if fmt == ValueFormat.HEADERS:
            inner = self.serde.serialize(obj.value)
            if inner is None:
                return None
            return codecs.pack_value(fmt, inner, obj.timestamp, codecs.encode_headers(obj.headers))
        value = obj.aggregation if isinstance(obj, AggregationWithHeaders) else obj.value
        inner = self.serde.serialize(value)
        if inner is None:
            return None
        return codecs.pack_value(fmt, inner, -1, codecs.encode_headers(obj.headers))

    def decode(self, raw: bytes | None) -> Any:
        """The value object stored as ``raw`` (``None`` for ``None``). O(size of the value)."""
        if raw is None:
            return None
        fmt = self.format
        if fmt == ValueFormat.PLAIN:
            return self.serde.deserialize(raw)
        value_bytes, ts, header_bytes = codecs.split_value(fmt, raw)
        value = self.serde.deserialize(value_bytes)
        if value is None:
            return None
        if fmt == ValueFormat.TIMESTAMPED:
            return ValueAndTimestamp(value, ts if ts is not None else -1)
        headers = codecs.decode_headers(header_bytes) if header_bytes else Headers()
        if fmt == ValueFormat.HEADERS:
            return ValueTimestampHeaders(value, ts if ts is not None else -1, headers)
        return self.headers_type(value, headers)

    def plain_value(self, raw: bytes | None) -> Any:
        """Only the inner value of ``raw``, deserialized (what a plain-typed query returns)."""
        if raw is None:
            return None
        if self.format == ValueFormat.PLAIN:
            return self.serde.deserialize(raw)
        return self.serde.deserialize(codecs.split_value(self.format, raw)[0])


def value_codec(
    fmt: ValueFormat | int, serde: Serde[Any], *, session: bool = False
) -> ValueCodec[Any]:
    """The codec for ``fmt`` and ``serde``; ``session=True`` decodes ``PLAIN_HEADERS`` values to
    :class:`AggregationWithHeaders` instead of :class:`ValueAndHeaders`."""
    try:
        f = ValueFormat(fmt)
    except ValueError:
        raise InvalidArgumentError(f"unknown value format {fmt!r}") from None
    return ValueCodec(f, serde, AggregationWithHeaders if session else ValueAndHeaders)
