"""How keys and values travel as JSON (the HTTP query service and its client).

A store's serdes decide the encoding, and the same rules apply both ways:

==========================  =============================  ==================================
key or value serde          JSON form                      key in a URL (``?key=``)
==========================  =============================  ==================================
``string``                  string                         the text itself
``long``, ``integer``       number                         decimal
``double``                  number                         decimal (``repr``)
``json``                    the JSON value                 JSON text
``bytes``                   base64 string                  base64 (standard or URL-safe)
anything else               base64 of the serialized       ``key_b64=`` (base64 of the
                            bytes                          serialized key)
==========================  =============================  ==================================

Wrapped values become objects: ``ValueAndTimestamp`` -> ``{"value", "timestamp"}``,
``ValueTimestampHeaders`` -> ``{"value", "timestamp", "headers"}``, ``ValueAndHeaders`` and
``AggregationWithHeaders`` -> ``{"value", "headers"}``; headers are ``[[key, base64 or
null], ...]``. Windowed keys are ``{"key", "window": {"start", "end"}}``. Nothing is ever
pickled.

>>> from txstore.stores.serdes import Serdes
>>> key_from_text(Serdes.long(), "42"), encoder(Serdes.bytes())(b"\\x00\\xff")
(42, 'AP8=')
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from typing import Any

from txstore.errors import InvalidArgumentError, SerializationError
from txstore.stores.serdes import Serde
from txstore.types import (
    AggregationWithHeaders,
    Headers,
    SessionWindow,
    TimeWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueTimestampHeaders,
    Windowed,
)

__all__ = [
    "NATIVE_SERDES",
    "b64decode",
    "decode_key",
    "decode_value",
    "decoder",
    "encode_key",
    "encode_value",
    "encoder",
    "key_from_json",
    "key_from_text",
    "key_to_json",
    "key_to_text",
]

#: Serdes whose objects are JSON values themselves.
NATIVE_SERDES = frozenset({"string", "long", "integer", "double", "json"})

_LONG = (-(2**63), 2**63 - 1)
_INT = (-(2**31), 2**31 - 1)


def b64decode(text: str) -> bytes:
    """Standard or URL-safe base64, padding optional; bad input raises
    :class:`~txstore.errors.InvalidArgumentError`."""
    t = text.strip().replace("-", "+").replace("_", "/")
    t += "=" * (-len(t) % 4)
    try:
        return base64.b64decode(t, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgumentError(f"not valid base64: {text[:40]!r}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encoder(serde: Serde[Any]) -> Callable[[Any], Any]:
    """``object -> JSON value`` for objects of ``serde``."""
    name = serde.name
    if name in NATIVE_SERDES:
        if name == "double":
            return _double_out
        return _identity
    if name == "bytes":
        return _b64

    def custom(obj: Any) -> Any:
        raw = serde.serialize(obj)
        return None if raw is None else _b64(raw)

    return custom


def decoder(serde_name: str, serde: Serde[Any] | None = None) -> Callable[[Any], Any]:
    """``JSON value -> object`` (the inverse of :func:`encoder`); a custom serde's values come
    back as bytes unless ``serde`` is given."""
    if serde_name in NATIVE_SERDES:
        if serde_name == "double":
            return _double_in
        return _identity
    if serde_name == "bytes" or serde is None:
        return lambda v: None if v is None else b64decode(v)
    return lambda v: None if v is None else serde.deserialize(b64decode(v))


def _identity(obj: Any) -> Any:
    return obj


def _double_out(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)  # "nan", "inf", "-inf": JSON has no such numbers
    return obj


def _double_in(obj: Any) -> Any:
    return float(obj) if isinstance(obj, str) else obj


def _headers(headers: Headers) -> list[list[Any]]:
    return [[h.key, None if h.value is None else _b64(h.value)] for h in headers]


def _headers_in(doc: Any) -> Headers:
    return Headers((str(k), None if v is None else b64decode(v)) for k, v in doc or ())


def encode_value(value: Any, enc: Callable[[Any], Any]) -> Any:
    """A store value (plain or wrapped) as JSON."""
    if value is None:
        return None
    if isinstance(value, ValueTimestampHeaders):
        return {
            "value": enc(value.value),
            "timestamp": value.timestamp,
            "headers": _headers(value.headers),
        }
    if isinstance(value, ValueAndTimestamp):
        return {"value": enc(value.value), "timestamp": value.timestamp}
    if isinstance(value, ValueAndHeaders):
        return {"value": enc(value.value), "headers": _headers(value.headers)}
    if isinstance(value, AggregationWithHeaders):
        return {"value": enc(value.aggregation), "headers": _headers(value.headers)}
    return enc(value)


def decode_value(doc: Any, wrapper: str, dec: Callable[[Any], Any]) -> Any:
    """The inverse of :func:`encode_value`; ``wrapper`` is the queried type's value type
    (``"V"``, ``"ValueAndTimestamp"``...)."""
    if doc is None:
        return None
    if wrapper == "V":
        return dec(doc)
    try:
        if wrapper == "ValueAndTimestamp":
            return ValueAndTimestamp(dec(doc["value"]), int(doc["timestamp"]))
        if wrapper == "ValueTimestampHeaders":
            return ValueTimestampHeaders(
                dec(doc["value"]), int(doc["timestamp"]), _headers_in(doc.get("headers"))
            )
        if wrapper == "ValueAndHeaders":
            return ValueAndHeaders(dec(doc["value"]), _headers_in(doc.get("headers")))
        if wrapper == "AggregationWithHeaders":
            return AggregationWithHeaders(dec(doc["value"]), _headers_in(doc.get("headers")))
    except (KeyError, TypeError, ValueError) as exc:
        raise SerializationError(f"malformed {wrapper} in a response: {exc}") from None
    raise InvalidArgumentError(f"unknown value type {wrapper!r}")


def encode_key(key: Any, enc: Callable[[Any], Any]) -> Any:
    """A store key (plain, windowed, or a window start timestamp) as JSON."""
    if isinstance(key, Windowed):
        w = key.window
        return {"key": enc(key.key), "window": {"start": w.start, "end": w.end}}
    return enc(key)


def decode_key(doc: Any, dec: Callable[[Any], Any], windowed: str | None = None) -> Any:
    """The inverse of :func:`encode_key`; ``windowed`` is ``"time"`` or ``"session"`` for
    windowed keys."""
    if windowed is None:
        return dec(doc)
    w = doc["window"]
    window = (TimeWindow if windowed == "time" else SessionWindow)(int(w["start"]), int(w["end"]))
    return Windowed(dec(doc["key"]), window)


def key_from_text(serde: Serde[Any], text: str) -> Any:
    """The key object a ``?key=`` text stands for, per the key serde (see the module
    docstring); custom serdes need ``key_b64`` instead."""
    name = serde.name
    if name == "string":
        return text
    if name in ("long", "integer"):
        lo, hi = _LONG if name == "long" else _INT
        try:
            value = int(text, 10)
        except ValueError:
            raise InvalidArgumentError(f"key {text[:40]!r} is not a decimal integer") from None
        if not lo <= value <= hi:
            raise InvalidArgumentError(f"key {value} does not fit a {name}")
        return value
    if name == "double":
        try:
            return float(text)
        except ValueError:
            raise InvalidArgumentError(f"key {text[:40]!r} is not a number") from None
    if name == "json":
        try:
            return json.loads(text)
        except ValueError:
            raise InvalidArgumentError(f"key {text[:40]!r} is not JSON text") from None
    if name == "bytes":
        return b64decode(text)
    raise InvalidArgumentError(
        f"keys of serde {name!r} are given as key_b64 (base64 of the serialized key)"
    )


def key_from_json(serde: Serde[Any], doc: Any) -> Any:
    """The key object a JSON key stands for (a request body's form, see the module
    docstring): native serdes take the JSON value, ``bytes`` base64, other serdes base64 of
    the serialized key."""
    name = serde.name
    if name in NATIVE_SERDES:
        ok = {
            "string": isinstance(doc, str),
            "long": isinstance(doc, int) and not isinstance(doc, bool),
            "integer": isinstance(doc, int) and not isinstance(doc, bool),
            "double": isinstance(doc, (int, float)) and not isinstance(doc, bool),
            "json": doc is not None,
        }[name]
        if not ok:
            raise InvalidArgumentError(f"{doc!r:.40} is not a key of serde {name!r}")
        return float(doc) if name == "double" else doc
    if not isinstance(doc, str):
        raise InvalidArgumentError(f"keys of serde {name!r} are base64 strings, got {doc!r:.40}")
    raw = b64decode(doc)
    return raw if name == "bytes" else serde.deserialize(raw)


def key_to_json(serde_name: str, key: Any, serde: Serde[Any] | None = None) -> Any:
    """The JSON form of a key (the inverse of :func:`key_from_json`)."""
    if serde_name in NATIVE_SERDES:
        return key
    if isinstance(key, (bytes, bytearray)) and (serde_name == "bytes" or serde is None):
        return _b64(bytes(key))
    if serde is None:
        raise InvalidArgumentError(
            f"a key of serde {serde_name!r} must be given serialized (bytes), or register the "
            "serde with txstore.register_serde"
        )
    raw = serde.serialize(key)
    if raw is None:
        raise InvalidArgumentError(f"the key serde turned {key!r} into null")
    return _b64(raw)


def key_to_text(serde_name: str, key: Any) -> str | None:
    """The ``?key=`` text of ``key`` for a store whose key serde is ``serde_name``, or None
    when only ``key_b64`` can carry it."""
    if serde_name == "string" and isinstance(key, str):
        return key
    if serde_name in ("long", "integer") and isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    if serde_name == "double" and isinstance(key, (int, float)) and not isinstance(key, bool):
        return repr(float(key))
    if serde_name == "json":
        return json.dumps(key, separators=(",", ":"))
    if serde_name == "bytes" and isinstance(key, (bytes, bytearray)):
        return _b64(bytes(key))
    return None
