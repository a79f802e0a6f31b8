"""The HTTP query service as an ASGI application, on Starlette.

:func:`asgi_app` returns a Starlette application answering the query API of
``docs/queries.md`` for an :class:`~txstore.queries.Application`; mount it in your own ASGI
application or serve it with :class:`~txstore.queries.QueryServer` (uvicorn, what
``txstore serve`` runs). Every answer is JSON; every bad request a 4xx with a JSON error
document (``{"error", "message", "status"}``), never a 500 (a 500 is a bug, logged):

* a bearer token (``Authorization: Bearer <token>``, the scheme case-insensitive, the token
  compared in constant time) when ``token`` is given, 401 otherwise;
* a URL or body above ``max_request_bytes`` gets 414 / 413, a chunked body 411, a body that
  does not arrive within ``body_timeout`` seconds 408, a body that is not strict JSON (NaN,
  nesting deeper than 32, a lone surrogate...) 400;
* at most ``max_in_flight`` requests are in progress at once (503 with ``Retry-After``
  beyond); queries run on the event loop (an LMDB read takes microseconds), so a request only
  stays in flight while its body arrives or while it waits for a ``min_position``;
* a query with ``min_position=<partition>:<offset>,...`` waits up to ``wait_ms``
  (at most ``max_position_wait`` seconds) for those committed offsets, then answers 412
  ``NotCaughtUpError``.

``GET /v1/ping`` answers ``{"ok": true}`` through the same stack (authentication included)
and nothing else: the floor the query endpoints are measured against (``perf/``).

Nothing is ever pickled.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from txstore.errors import InvalidArgumentError, NotCaughtUpError
from txstore.queries.application import Application
from txstore.queries.http.protocol import Args, HttpError, error_doc
from txstore.queries.http.service import Service

__all__ = ["asgi_app", "json_response"]

_log = logging.getLogger("txstore.queries.http")

_JSON = "application/json; charset=utf-8"
_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
_CLOSE = {408, 411, 413, 414}


_NOT_HTTP_1 = {
    "error": "BadRequest",
    "message": "not an HTTP/1.1 request (HTTP/2 is not served)",
    "status": 400,
}


def json_response(status: int, doc: Any) -> Response:
    """``doc`` as a JSON answer (``Retry-After`` on 503, ``WWW-Authenticate`` on 401,
    ``Connection: close`` after a body the server did not read)."""
    try:
        payload = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a custom serde's text with a lone surrogate
        payload = json.dumps(doc, separators=(",", ":")).encode()
    headers = {}
    if status == 401:
        headers["www-authenticate"] = 'Bearer realm="txstore"'
    elif status == 503:
        headers["retry-after"] = "1"
    elif status in _CLOSE or doc is _NOT_HTTP_1:
        headers["connection"] = "close"
    return Response(payload, status, headers, _JSON)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (a target outside every route, such as ``*``) as JSON."""
    if request.scope.get("http_version") not in ("1.0", "1.1"):
        return json_response(400, _NOT_HTTP_1)
    status = exc.status_code if isinstance(exc, HTTPException) else 400
    doc = {"error": "NotFound" if status == 404 else "BadRequest", "status": status}
    doc["message"] = getattr(exc, "detail", "") or "bad request"
    return json_response(status, doc)


class _Endpoint:
    """The request handling of :func:`asgi_app` (see the module docstring)."""

    def __init__(
        self,
        service: Service,
        token: str | None,
        max_request_bytes: int,
        max_in_flight: int,
        body_timeout: float,
        max_position_wait: float,
    ) -> None:
        self.service = service
        self.token = None if token is None else token.encode()
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self.body_timeout = body_timeout
        self.max_position_wait = max_position_wait
        self.in_flight = 0

    def _authenticate(self, request: Request) -> None:
        if self.token is None:
            return
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        got = credentials.strip().encode("latin-1", "replace")
        # compare_digest on every request, whatever the scheme: no timing difference
        ok = hmac.compare_digest(got, self.token)
        if not ok or scheme.lower() != "bearer":
            raise HttpError(401, "Unauthorized", "missing or wrong bearer token")

    async def _body(self, request: Request) -> bytes:
        headers = request.headers
        if "transfer-encoding" in headers:
            raise HttpError(411, "LengthRequired", "send a Content-Length, not a chunked body")
        try:
            n = int(headers.get("content-length") or 0)
        except ValueError:
            raise HttpError(400, "BadRequest", "bad Content-Length") from None
        if n > self.max_request_bytes:
            raise HttpError(
                413, "RequestTooLarge", f"the body is {n} bytes; at most {self.max_request_bytes}"
            )
        try:
            return await asyncio.wait_for(request.body(), self.body_timeout)
        except TimeoutError:
            raise HttpError(
                408,
                "RequestTimeout",
                f"the body did not arrive within {self.body_timeout} s (shorter than its "
                "Content-Length?)",
            ) from None
        except ClientDisconnect:
            raise HttpError(400, "BadRequest", "the connection closed inside the body") from None

    async def ping(self, request: Request) -> Response:
        """``GET /v1/ping``: the stack's floor."""
        try:
            self._authenticate(request)
            if request.method != "GET":
                raise HttpError(405, "MethodNotAllowed", "use GET")
        except HttpError as exc:
            return json_response(exc.status, exc.doc)
        return Response(b'{"ok":true}', 200, media_type=_JSON)

    async def handle(self, request: Request) -> Response:
        """Any other request: the query API."""
        if self.in_flight >= self.max_in_flight:
            return json_response(
                503,
                {"error": "TooManyRequests", "message": "too many requests", "status": 503},
            )
        self.in_flight += 1
        try:
            status, doc = await self._answer(request)
        finally:
            self.in_flight -= 1
        return json_response(status, doc)

    async def _answer(self, request: Request) -> tuple[int, Any]:
        method = request.method
        scope = request.scope
        if scope.get("http_version") not in ("1.0", "1.1"):
            return 400, _NOT_HTTP_1
        try:
            raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
            mount = scope.get("root_path", "").encode()
            if mount and raw_path.startswith(mount):  # mounted: the path inside the mount
                raw_path = raw_path[len(mount) :]
            query: bytes = scope["query_string"]
            if len(raw_path) + len(query) > self.max_request_bytes:
                raise HttpError(
                    414, "UriTooLong", f"the URL is above {self.max_request_bytes} bytes"
                )
            self._authenticate(request)
            if method not in ("GET", "POST"):
                raise HttpError(405, "MethodNotAllowed", "use GET or POST")
            body = await self._body(request) if method == "POST" else None
            try:
                target = raw_path.decode("ascii") + ("?" + query.decode("ascii") if query else "")
            except UnicodeDecodeError:
                raise HttpError(400, "BadRequest", "the URL is not ASCII") from None
            return await self._dispatch(method, target, body, query)
        except HttpError as exc:
            return exc.status, exc.doc
        except Exception as exc:
            doc = error_doc(exc)
            if doc["status"] == 500:
                _log.exception("query %s %s failed", method, scope.get("path"))
            return doc["status"], doc

    async def _dispatch(
        self, method: str, target: str, body: bytes | None, query: bytes
    ) -> tuple[int, Any]:
        deadline: float | None = None
        delay = 0.002
        while True:
            try:
                return self.service.dispatch(method, target, body)
            except NotCaughtUpError:
                if deadline is None:
                    wait_ms = Args(query).integer("wait_ms", 0) or 0
                    wait = min(max(wait_ms, 0) / 1000, self.max_position_wait)
                    deadline = time.monotonic() + wait
                if time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)


def asgi_app(
    app: Application,
    *,
    token: str | None = None,
    max_results: int = 1000,
    max_request_bytes: int = 64 * 1024,
    max_in_flight: int = 256,
    body_timeout: float = 10.0,
    max_position_wait: float = 30.0,
) -> Starlette:
    """The query service of ``app`` as a Starlette (ASGI) application (see the module
    docstring); mount it (``Mount("/txstore", asgi_app(app))``) or serve it.

    ``max_results`` bounds the items of one iterator answer (more are paged). Raises
    :class:`~txstore.errors.InvalidArgumentError` for limits below 1 (``max_request_bytes``
    below 1024) or a token that is not one printable word. O(1): nothing is read until a
    request arrives.
    """
    if max_request_bytes < 1024 or max_results < 1 or max_in_flight < 1:
        raise InvalidArgumentError(
            "need max_request_bytes >= 1024, max_results >= 1, max_in_flight >= 1"
        )
    if body_timeout <= 0 or max_position_wait < 0:
        raise InvalidArgumentError("need body_timeout > 0 and max_position_wait >= 0")
    if token is not None and (not token or not token.isprintable() or " " in token):
        raise InvalidArgumentError("the token must be a non-empty printable word")
    endpoint = _Endpoint(
        Service(app, max_results),
        token,
        max_request_bytes,
        max_in_flight,
        body_timeout,
        max_position_wait,
    )
    routes = [
        Route("/v1/ping", endpoint.ping, methods=_METHODS),
        Route("/{path:path}", endpoint.handle, methods=_METHODS),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
