"""The HTTP query service's protocol: a request's parameters, and errors as statuses and JSON.

An error answer is ``{"error": <txstore error class>, "message": ..., "status": ...}``; the
status says what to do: 400 bad arguments, 404 unknown store or path, 409 migrated (the key's
partition is not here: ``active_host`` names its owner), 503 starting, rebalancing or stopping
(retry), 500 otherwise (the message hides the details; the server logs them).

>>> status_for(StateStoreMigratedError("moved")), status_for(KeyError("x"))
(409, 500)
>>> Args("key=a&limit=5").need_int("limit")
5
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from txstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    InvalidTypeError,
    SerializationError,
    StateStoreMigratedError,
    StateStoreNotAvailableError,
    StreamsNotStartedError,
    StreamsRebalancingError,
    TxStoreError,
    UnknownStateStoreError,
    UnsupportedOperationError,
)

__all__ = ["Args", "HttpError", "bad", "error_doc", "status_for"]


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


class Args:
    """A request's query parameters (each at most once)."""

    def __init__(self, query: str) -> None:
        try:
            parsed = parse_qs(query, keep_blank_values=True, max_num_fields=64)
        except ValueError as exc:
            raise bad(f"bad query string: {exc}") from None
        self._d: dict[str, str] = {}
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
