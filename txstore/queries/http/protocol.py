"""The HTTP query service's protocol: a request's parameters, and errors as statuses and JSON.

An error answer is ``{"error": <txstore error class>, "message": ..., "status": ...}``; the
status says what to do: 400 bad arguments, 404 unknown store or path, 409 migrated (the key's
partition is not here: ``active_host`` names its owner), 412 not caught up (a demanded position
was not reached in time), 503 starting, rebalancing or stopping (retry), 500 otherwise (a bug:
the message hides the details; the server logs them).

>>> status_for(StateStoreMigratedError("moved")), status_for(KeyError("x"))
(409, 500)
>>> Args("key=a&limit=5").need_int("limit")
5
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs

from txstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    InvalidTypeError,
    NotCaughtUpError,
    SerializationError,
    StateStoreMigratedError,
    StateStoreNotAvailableError,
    StreamsNotStartedError,
    StreamsRebalancingError,
    TxStoreError,
    UnknownStateStoreError,
    UnsupportedOperationError,
)

__all__ = [
    "MAX_DEPTH",
    "Args",
    "HttpError",
    "bad",
    "error_doc",
    "parse_bound",
    "parse_json",
    "status_for",
]

#: The deepest nesting of arrays and objects a request body may have.
MAX_DEPTH = 32

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BOUND = re.compile(r"(\d{1,9}):(-?\d{1,19})")


class HttpError(Exception):
    """An answer other than 200, with its JSON document (``doc``); ``extra`` adds fields."""

    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.doc: dict[str, Any] = {
            "error": error,
            "message": message,
            "status": status,
            **extra,
        }


def bad(message: str) -> HttpError:
    """A 400 answer (a bad argument)."""
    return HttpError(400, "InvalidArgumentError", message)


def status_for(exc: BaseException) -> int:
    """The HTTP status of an error raised by a query (see the module docstring)."""
    if isinstance(exc, UnknownStateStoreError):
        return 404
    if isinstance(exc, NotCaughtUpError):
        return 412
    if isinstance(exc, (StateStoreMigratedError, InvalidStateStorePartitionError)):
        return 409
    if isinstance(
        exc,
        (
            StreamsRebalancingError,
            StreamsNotStartedError,
            StateStoreNotAvailableError,
            IllegalStateError,
        ),
    ):
        return 503
    if isinstance(
        exc,
        (
            InvalidStateStoreError,
            InvalidArgumentError,
            InvalidTypeError,
            SerializationError,
            UnsupportedOperationError,
        ),
    ):
        return 400
    return 500


def error_doc(exc: BaseException) -> dict[str, Any]:
    """The JSON document of an error raised by a query (txstore errors name themselves; any
    other exception is an internal error)."""
    status = status_for(exc)
    name = type(exc).__name__ if isinstance(exc, TxStoreError) else "InternalError"
    message = str(exc) if isinstance(exc, TxStoreError) else "internal error; see the server log"
    return {"error": name, "message": message, "status": status}


def _reject_constant(name: str) -> Any:
    raise bad(f"the body holds {name}, which is not JSON")


def parse_json(body: bytes) -> Any:
    """A request body as JSON, strictly: UTF-8, no ``NaN``/``Infinity``, at most
    :data:`MAX_DEPTH` levels of arrays and objects, no lone surrogate in a string; anything
    else is a 400 answer.

    >>> parse_json(b'{"keys": ["a"]}')
    {'keys': ['a']}
    >>> parse_json(b"[" * 40 + b"]" * 40)
    Traceback (most recent call last):
    ...
    txstore.queries.http.protocol.HttpError: the body nests deeper than 32 levels
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("the body is not UTF-8") from None
    depth = deepest = 0
    for ch in _STRINGS.sub("", text):
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    raise bad(f"the body nests deeper than {MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise bad(f"the body is not JSON: {exc}") from None
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise bad("the body holds a lone surrogate (\\udXXX) in a string") from None
    return doc


def parse_bound(text: str | None) -> dict[int, int]:
    """A ``min_position`` argument, ``<partition>:<offset>[,...]``, as a dict (400 if
    malformed).

    >>> parse_bound("0:15,3:7")
    {0: 15, 3: 7}
    """
    if not text:
        return {}
    out: dict[int, int] = {}
    for part in text.split(","):
        m = _BOUND.fullmatch(part.strip())
        if m is None:
            raise bad(f"min_position must be <partition>:<offset>[,...], got {text[:60]!r}")
        out[int(m[1])] = int(m[2])
    return out


class Args:
    """A request's query parameters (each at most once). Percent-escapes must decode to UTF-8
    text without lone surrogates (400 otherwise)."""

    def __init__(self, query: str | bytes) -> None:
        try:
            if isinstance(query, bytes):
                query = query.decode("ascii")
            parsed = parse_qs(
                query,
                keep_blank_values=True,
                max_num_fields=64,
                errors="strict",
                strict_parsing=False,
            )
        except ValueError as exc:  # UnicodeDecodeError too
            raise bad(f"bad query string: {exc}") from None
        self._d: dict[str, str] = {}
        #: The partitions the query read (set by the service; None: every hosted one).
        self.touched: set[int] | None = None
        for k, vs in parsed.items():
            if len(vs) != 1:
                raise bad(f"parameter {k!r} is given {len(vs)} times")
            self._d[k] = vs[0]

    def has(self, name: str) -> bool:
        """Whether ``name`` is given."""
        return name in self._d

    def text(self, name: str, default: str | None = None) -> str | None:
        """The text of ``name``, or ``default``."""
        return self._d.get(name, default)

    def need(self, name: str) -> str:
        """The text of ``name``; 400 if missing."""
        v = self._d.get(name)
        if v is None:
            raise bad(f"missing parameter {name!r}")
        return v

    def integer(self, name: str, default: int | None = None) -> int | None:
        """``name`` as an int, or ``default``; 400 if not an integer."""
        v = self._d.get(name)
        if v is None:
            return default
        try:
            return int(v, 10)
        except ValueError:
            raise bad(f"parameter {name!r} must be an integer, got {v[:40]!r}") from None

    def need_int(self, name: str) -> int:
        """``name`` as an int; 400 if missing or not an integer."""
        v = self.integer(name)
        if v is None:
            raise bad(f"missing parameter {name!r}")
        return v

    def flag(self, name: str) -> bool:
        """``name`` as a boolean (``true``, ``1``, ``yes`` or empty; ``false``, ``0``, ``no``);
        False if missing."""
        v = self._d.get(name)
        if v is None:
            return False
        if v.lower() in ("1", "true", "yes", ""):
            return True
        if v.lower() in ("0", "false", "no"):
            return False
        raise bad(f"parameter {name!r} must be true or false, got {v[:20]!r}")
