"""Serdes: the one place where Python objects become bytes (and back).

Stores apply serdes once, at the typed layer; everything below speaks ``bytes``. The built-in
serdes produce the same bytes as Kafka's (``StringSerializer`` is UTF-8, ``IntegerSerializer``
4-byte big-endian, ``LongSerializer`` 8-byte big-endian, ``DoubleSerializer`` IEEE 754
big-endian). ``None`` serializes to ``None`` and deserializes from ``None``, as in Kafka.

A user serde is any object with a ``name`` and ``serialize``/``deserialize`` methods
(:class:`Serde`); :func:`register_serde` makes it known by name, so a store's metadata can
record which serdes it was written with.

>>> Serdes.long().serialize(1).hex()
'0000000000000001'
>>> Serdes.string().deserialize(b"caf\\xc3\\xa9")
'café'
"""

from __future__ import annotations

import json
import struct
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError

__all__ = [
    "BytesSerde",
    "DoubleSerde",
    "IntegerSerde",
    "JsonSerde",
    "LongSerde",
    "Serde",
    "Serdes",
    "StringSerde",
    "register_serde",
    "serde_by_name",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class Serde(Protocol[T]):
    """What a store needs of a serde: a stable ``name`` and the two conversions."""

    @property
    def name(self) -> str:
        """The serde's registered name (see :func:`register_serde`), recorded in a store's
        metadata: ``"string"``, ``"long"``..."""
        ...

    def serialize(self, value: T | None) -> bytes | None:
        """``value`` as bytes; ``None`` gives ``None`` (a delete, in a store).

        The built-in serdes raise :class:`~txstore.errors.InvalidTypeError` for a value of the
        wrong type and :class:`~txstore.errors.InvalidArgumentError` for one that does not fit
        (an int outside 32 bits for :meth:`Serdes.integer`...).
        """
        ...

    def deserialize(self, data: bytes | None) -> T | None:
        """The value ``data`` holds; ``None`` gives ``None``. The built-in serdes raise
        :class:`~txstore.errors.SerializationError` for bytes they cannot decode (wrong
        length, invalid UTF-8 or JSON)."""
        ...


class _FixedSerde(Generic[T]):
    """A serde over one ``struct`` layout (int, long, double)."""

    def __init__(self, name: str, fmt: str, kind: type, label: str) -> None:
        self._name = name
        self._struct = struct.Struct(fmt)
        self._kind = kind
        self._label = label

    @property
    def name(self) -> str:
        """The registered name: ``"integer"``, ``"long"`` or ``"double"``."""
        return self._name

    def serialize(self, value: T | None) -> bytes | None:
        """``value`` packed big-endian (``None`` gives ``None``). Raises
        :class:`~txstore.errors.InvalidTypeError` for another type (``bool`` included; the
        double serde takes ``int`` too), :class:`~txstore.errors.InvalidArgumentError` for
        an int out of range."""
        if value is None:
            return None
        int_as_float = self._kind is float and isinstance(value, int)
        if isinstance(value, bool) or not (isinstance(value, self._kind) or int_as_float):
            raise InvalidTypeError(
                f"{self._label} serde needs {self._kind.__name__}, got {type(value).__name__}"
            )
        try:
            return self._struct.pack(value)
        except struct.error as e:
            raise InvalidArgumentError(f"{value!r} does not fit the {self._label} serde") from e

    def deserialize(self, data: bytes | None) -> T | None:
        """The number ``data`` holds (``None`` gives ``None``). Raises
        :class:`~txstore.errors.SerializationError` unless ``data`` has the layout's size
        (4 or 8 bytes), with Kafka's message."""
        if data is None:
            return None
        if len(data) != self._struct.size:
            raise SerializationError(
                f"Size of data received by {self._label}Deserializer is not {self._struct.size}"
            )
        value: T = self._struct.unpack(data)[0]
        return value

    def __repr__(self) -> str:
        return f"Serdes.{self._name}()"


class BytesSerde:
    """Identity serde for ``bytes`` (``bytearray``/``memoryview`` are copied to ``bytes``)."""

    name = "bytes"

    def serialize(self, value: bytes | None) -> bytes | None:
        """``value`` itself (a ``bytearray`` or ``memoryview`` copied to ``bytes``). Raises
        :class:`~txstore.errors.InvalidTypeError` for anything else."""
        if value is None or type(value) is bytes:
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise InvalidTypeError(f"bytes serde needs bytes, got {type(value).__name__}")

    def deserialize(self, data: bytes | None) -> bytes | None:
        """``data`` itself."""
        return data

    def __repr__(self) -> str:
        return "Serdes.bytes()"


class StringSerde:
    """UTF-8 text, as Kafka's ``StringSerializer`` with its default encoding."""

    name = "string"

    def serialize(self, value: str | None) -> bytes | None:
        """``value`` in UTF-8. Raises :class:`~txstore.errors.InvalidTypeError` for a value
        that is not a ``str``, :class:`~txstore.errors.InvalidArgumentError` for one UTF-8
        cannot encode (a lone surrogate)."""
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidTypeError(f"string serde needs str, got {type(value).__name__}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"string {value!r} cannot be encoded as UTF-8") from e

    def deserialize(self, data: bytes | None) -> str | None:
        """``data`` decoded from UTF-8. Raises :class:`~txstore.errors.SerializationError`
        for bytes that are not valid UTF-8."""
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SerializationError(f"bytes are not valid UTF-8: {e}") from e

    def __repr__(self) -> str:
        return "Serdes.string()"


class JsonSerde:
    """JSON text in UTF-8 (compact separators, keys in insertion order).

    Not a Kafka built-in; it matches what a Kafka JSON serde based on Jackson writes for the
    same values up to whitespace.
    """

    name = "json"

    def serialize(self, value: Any) -> bytes | None:
        """``value`` as compact JSON in UTF-8. Raises :class:`~txstore.errors.InvalidTypeError`
        for a value JSON cannot represent (a ``set``, an arbitrary object). Floats ``nan`` and
        ``inf`` are written ``NaN`` and ``Infinity``, as Python's ``json`` does.

        >>> Serdes.json().serialize({"a": [1, 2.5, None]})
        b'{"a":[1,2.5,null]}'
        """
        if value is None:
            return None
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise InvalidTypeError(f"value is not JSON-serializable: {e}") from e

    def deserialize(self, data: bytes | None) -> Any:
        """The JSON value ``data`` holds. Raises :class:`~txstore.errors.SerializationError`
        for bytes that are not valid UTF-8 JSON."""
        if data is None:
            return None
        try:
            return json.loads(data)
        except (UnicodeDecodeError, ValueError) as e:
            raise SerializationError(f"bytes are not valid JSON: {e}") from e

    def __repr__(self) -> str:
        return "Serdes.json()"


class IntegerSerde(_FixedSerde[int]):
    """4-byte big-endian signed ints (Kafka's ``IntegerSerializer``)."""

    def __init__(self) -> None:
        super().__init__("integer", ">i", int, "Integer")


class LongSerde(_FixedSerde[int]):
    """8-byte big-endian signed ints (Kafka's ``LongSerializer``)."""

    def __init__(self) -> None:
        super().__init__("long", ">q", int, "Long")


class DoubleSerde(_FixedSerde[float]):
    """8-byte big-endian IEEE 754 doubles (Kafka's ``DoubleSerializer``)."""

    def __init__(self) -> None:
        super().__init__("double", ">d", float, "Double")


_REGISTRY: dict[str, Serde[Any]] = {}


def register_serde(serde: Serde[Any]) -> Serde[Any]:
    """Make ``serde`` known by its ``name`` (for store metadata and tools); returns it.

    Registering a different object under a name that is taken raises
    :class:`~txstore.errors.InvalidArgumentError`; registering the same one again is a no-op.
    """
    if not isinstance(serde, Serde):
        raise InvalidTypeError("a serde needs a name, serialize() and deserialize()")
    name = serde.name
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("a serde name must be a non-empty str")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not serde and type(existing) is not type(serde):
        raise InvalidArgumentError(f"a different serde is already registered as {name!r}")
    _REGISTRY[name] = serde
    return serde


def serde_by_name(name: str) -> Serde[Any]:
    """The registered serde called ``name``.

    >>> serde_by_name("string")
    Serdes.string()
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise InvalidArgumentError(f"no serde named {name!r}; known serdes: {known}") from None


class Serdes:
    """Factories for the built-in serdes, named after Kafka's ``Serdes``: each returns one
    shared, registered instance (O(1)). Their bytes are Kafka's.

    >>> Serdes.integer().serialize(258)
    b'\\x00\\x00\\x01\\x02'
    >>> Serdes.string().serialize("é"), Serdes.json().deserialize(b'{"n":1}')
    (b'\\xc3\\xa9', {'n': 1})
    >>> Serdes.long().deserialize(b"\\x01")
    Traceback (most recent call last):
    ...
    txstore.errors.SerializationError: Size of data received by LongDeserializer is not 8
    """

    _bytes = register_serde(BytesSerde())
    _string = register_serde(StringSerde())
    _integer = register_serde(IntegerSerde())
    _long = register_serde(LongSerde())
    _double = register_serde(DoubleSerde())
    _json = register_serde(JsonSerde())

    @staticmethod
    def bytes() -> Serde[bytes]:
        """Identity serde for ``bytes``."""
        return Serdes._bytes

    @staticmethod
    def string() -> Serde[str]:
        """UTF-8 ``str``."""
        return Serdes._string

    @staticmethod
    def integer() -> Serde[int]:
        """4-byte big-endian signed ``int``."""
        return Serdes._integer

    @staticmethod
    def long() -> Serde[int]:
        """8-byte big-endian signed ``int``."""
        return Serdes._long

    @staticmethod
    def double() -> Serde[float]:
        """8-byte big-endian IEEE 754 ``float``."""
        return Serdes._double

    @staticmethod
    def json() -> Serde[Any]:
        """JSON values as UTF-8 text."""
        return Serdes._json
