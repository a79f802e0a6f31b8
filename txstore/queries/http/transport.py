"""The query clients' transport: httpx connection pools, and the driver of the client's logic.

The routing and query logic of the clients (:mod:`txstore.queries.http.routing`,
:mod:`txstore.queries.http.client`) is written once, as generators that *yield* what they need
done (:class:`Call`: one HTTP request; :class:`Sleep`: a backoff) and get the answer back. A
:class:`SyncTransport` (``httpx.Client``) drives them for
:class:`~txstore.queries.QueryClient`, an :class:`AsyncTransport` (``httpx.AsyncClient``) for
:class:`~txstore.queries.AsyncQueryClient`. Both pool keep-alive connections per instance; a
connection failure is thrown into the generator as
:class:`~txstore.errors.QueryServiceError` with ``status`` 0.

An error answer becomes the txstore error the server names (:func:`raise_for`).

>>> from txstore.errors import UnknownStateStoreError
>>> try:
...     raise_for(404, {"error": "UnknownStateStoreError", "message": "no store x"})
... except UnknownStateStoreError as exc:
...     print(exc, exc.status)
no store x 404
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx

from txstore import errors
from txstore.errors import QueryServiceError, TxStoreError
from txstore.queries.types import HostInfo

__all__ = ["AsyncTransport", "Call", "Flow", "Sleep", "SyncTransport", "raise_for"]

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One HTTP request to ``host``; the answer sent back is ``(status, JSON document)``."""

    host: HostInfo
    method: str
    path: str
    query: dict[str, Any] | None = None
    body: Any = None


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (a retry's backoff)."""

    seconds: float


#: The client's logic: a generator yielding calls and sleeps, returning its result.
Flow = Generator[Call | Sleep, Any, T]


def raise_for(status: int, doc: Any) -> None:
    """Raise the error an answer with ``status`` (not 200) and JSON ``doc`` describes: the
    txstore error class it names (with ``status`` set), else
    :class:`~txstore.errors.QueryServiceError`."""
    name = doc.get("error", "") if isinstance(doc, dict) else ""
    message = doc.get("message", "") if isinstance(doc, dict) else str(doc)[:200]
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, TxStoreError) and cls is not QueryServiceError:
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        exc.status = status  # type: ignore[attr-defined]
        raise exc
    raise QueryServiceError(message or f"HTTP {status}", status=status, error=name)


def _decode(resp: httpx.Response) -> tuple[int, Any]:
    data = resp.content
    try:
        doc = json.loads(data) if data else None
    except ValueError:
        doc = {"error": "", "message": data[:200].decode("utf-8", "replace")}
    return resp.status_code, doc


def _unreachable(host: HostInfo, exc: Exception) -> QueryServiceError:
    err = QueryServiceError(
        f"cannot reach {host}: {exc or type(exc).__name__}", status=0, error="ConnectionError"
    )
    err.__cause__ = exc
    return err


def _options(token: str | None, timeout: float, max_connections: int) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return {
        "headers": headers,
        "timeout": httpx.Timeout(timeout),
        "limits": httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        "trust_env": False,
    }


def _advance(flow: Flow[Any], answer: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Resume ``flow`` with ``answer`` (or ``error``): ``(True, result)`` when it returned,
    else ``(False, its next step)``; shared by both transports' drive loops."""
    try:
        return False, flow.throw(error) if error is not None else flow.send(answer)
    except StopIteration as stop:
        return True, stop.value


def _outcome(request: Any, call: Call) -> tuple[Any, BaseException | None]:
    """``(answer, None)`` of a blocking request, or ``(None, error)`` for a service error."""
    try:
        return request(call), None
    except QueryServiceError as exc:
        return None, exc


def _request_args(call: Call) -> dict[str, Any]:
    url = f"http://{call.host}{call.path}"
    if call.query:  # encoded here: cheaper than httpx merging params into the URL
        url += "?" + urlencode(call.query)
    args: dict[str, Any] = {"method": call.method, "url": url}
    if call.body is not None:
        args["content"] = json.dumps(call.body).encode()
        args["headers"] = {"Content-Type": "application/json"}
    return args


class SyncTransport:
    """Drives the client's flows with an ``httpx.Client`` (thread-safe, pooled)."""

    def __init__(self, *, token: str | None, timeout: float, max_connections: int) -> None:
        self.timeout = float(timeout)
        self._http = httpx.Client(**_options(token, timeout, max_connections))

    def _request(self, call: Call) -> tuple[int, Any]:
        try:
            return _decode(self._http.request(**_request_args(call)))
        except httpx.TransportError as exc:
            raise _unreachable(call.host, exc) from exc

    def _drive(self, flow: Flow[T]) -> T:
        """Run ``flow`` to its result."""
        outcome: tuple[Any, BaseException | None] = (None, None)
        while True:
            done, step = _advance(flow, *outcome)
            if done:
                return step  # type: ignore[no-any-return]
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                outcome = (None, None)
            else:
                outcome = _outcome(self._request, step)

    def close(self) -> None:
        """Close the pooled connections. Idempotent."""
        self._http.close()


class AsyncTransport:
    """Drives the client's flows with an ``httpx.AsyncClient`` (pooled)."""

    def __init__(self, *, token: str | None, timeout: float, max_connections: int) -> None:
        self.timeout = float(timeout)
        self._http = httpx.AsyncClient(**_options(token, timeout, max_connections))

    async def _request(self, call: Call) -> tuple[int, Any]:
        try:
            return _decode(await self._http.request(**_request_args(call)))
        except httpx.TransportError as exc:
            raise _unreachable(call.host, exc) from exc

    async def _drive(self, flow: Flow[T]) -> T:
        """Run ``flow`` to its result."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            done, step = _advance(flow, answer, error)
            if done:
                return step  # type: ignore[no-any-return]
            answer = error = None
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                answer = await self._request(step)
            except QueryServiceError as exc:
                error = exc

    async def aclose(self) -> None:
        """Close the pooled connections. Idempotent."""
        await self._http.aclose()
