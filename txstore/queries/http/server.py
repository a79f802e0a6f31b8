"""The HTTP query service: an application's metadata and stores, as JSON.

KIP-67 left the remote listener to users; txstore ships this one. It is built on the standard
library's :class:`http.server.ThreadingHTTPServer` speaking HTTP/1.1 with keep-alive, one thread
per connection (``docs/queries.md`` explains the choice). Safe defaults:

* it binds a loopback address unless ``allow_remote=True``;
* with a ``token``, every request needs ``Authorization: Bearer <token>`` (401 otherwise);
* a request line or body above ``max_request_bytes`` gets 414 / 413; an iterator query returns
  at most ``max_results`` items (``"truncated": true`` when there were more, with a ``resume``
  position on one partition: :mod:`txstore.queries.http.paging`); at most
  ``max_connections`` connections are served at once (503 beyond); an idle keep-alive
  connection is closed after ``idle_timeout`` seconds;
* errors are JSON ``{"error": <txstore error class>, "message": ..., "status": ...}``: 400 bad
  arguments, 401, 404 unknown store or path, 405, 409 migrated (the key's partition is not
  here: ``active_host`` names its owner), 503 starting, rebalancing or stopping (with
  ``Retry-After``), 500 otherwise. JSON only; nothing is ever pickled.

The endpoints, their parameters and the queries are in :mod:`txstore.queries.http.service`; request
parameters and error documents in :mod:`txstore.queries.http.protocol`. This module is the HTTP
side: the request handler (authentication, size limits, JSON answers), the server (connection
limit) and :class:`QueryServer`, which runs them.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from txstore.errors import InvalidArgumentError
from txstore.queries.application import Application
from txstore.queries.http.protocol import HttpError, bad, error_doc
from txstore.queries.http.service import Service
from txstore.queries.types import HostInfo

__all__ = ["QueryServer"]

_log = logging.getLogger("txstore.queries.http.server")

_JSON = "application/json; charset=utf-8"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "txstore-query/1"
    sys_version = ""
    # Buffer the response: headers and body leave in one segment when the handler flushes
    # (two small writes would meet Nagle's algorithm and the client's delayed ACK: 40 ms).
    wbufsize = 64 * 1024
    service: Service
    token: bytes | None
    max_request_bytes: int

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        if _log.isEnabledFor(logging.DEBUG):  # every request logs: keep it cheap
            _log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _not_allowed(self) -> None:
        self._discard_body()
        self._send(405, {"error": "MethodNotAllowed", "message": "use GET or POST", "status": 405})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own errors (a malformed request line, too many headers...)
        as JSON too."""
        self.close_connection = True
        doc = {"error": "BadRequest" if code == 400 else f"HTTP{code}", "status": code}
        doc["message"] = message or explain or ""
        if self.command == "HEAD":
            self.send_response(code)
            self.send_header("Connection", "close")
            self.end_headers()
            return
        self._send(code, doc)

    def _discard_body(self) -> None:
        if self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise HttpError(411, "LengthRequired", "send a Content-Length, not chunked bodies")
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise bad("bad Content-Length") from None
        if n < 0:
            self.close_connection = True
            raise bad("bad Content-Length")
        if n > self.max_request_bytes:
            self.close_connection = True  # the body is not read
            raise HttpError(
                413, "RequestTooLarge", f"the body is {n} bytes; at most {self.max_request_bytes}"
            )
        return self.rfile.read(n)

    def _handle(self, method: str) -> None:
        try:
            if len(self.path) > self.max_request_bytes:
                self._discard_body()
                raise HttpError(
                    414, "UriTooLong", f"the URL is above {self.max_request_bytes} bytes"
                )
            token = self.token
            if token is not None:
                got = (self.headers.get("Authorization") or "").encode("latin-1", "replace")
                if not hmac.compare_digest(got, token):
                    self._discard_body()
                    raise HttpError(401, "Unauthorized", "missing or wrong bearer token")
            body = self._read_body() if method == "POST" else None
            if method == "GET":
                self._discard_body()
            status, doc = self.service.dispatch(method, self.path, body)
        except HttpError as exc:
            status, doc = exc.status, exc.doc
        except Exception as exc:
            doc = error_doc(exc)
            status = doc["status"]
            if status == 500:
                _log.exception("query %s %s failed", method, self.path)
        self._send(status, doc)

    def _send(self, status: int, doc: Any) -> None:
        payload = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", _JSON)
        self.send_header("Content-Length", str(len(payload)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="txstore"')
        if status == 503:
            self.send_header("Retry-After", "1")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                body = (
                    b'{"error":"TooManyConnections","message":"too many connections","status":503}'
                )
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def _release(self, request: Any) -> None:
        with self._open_lock:
            if request in self._open:
                self._open.discard(request)
                self._slots.release()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def close_connections(self) -> None:
        with self._open_lock:
            sockets = list(self._open)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class QueryServer:
    """Serve ``app``'s metadata and stores over HTTP (see the module docstring).

    ``host``/``port`` default to the application's ``application_server``; port 0 picks a free
    port (and, before ``app.start()``, becomes the application's advertised port).
    ``start()`` serves from a background thread, ``serve_forever()`` from the caller's;
    ``close()`` stops serving and closes open connections.
    """

    def __init__(
        self,
        app: Application,
        *,
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
        allow_remote: bool = False,
        max_request_bytes: int = 64 * 1024,
        max_results: int = 1000,
        max_connections: int = 64,
        idle_timeout: float = 30.0,
    ) -> None:
        host = app.host_info.host if host is None else host
        port = app.host_info.port if port is None else port
        if not allow_remote and not _is_loopback(host):
            raise InvalidArgumentError(
                f"{host!r} is not a loopback address: pass allow_remote=True (with a token) to "
                "serve other machines"
            )
        if allow_remote and token is None:
            _log.warning("serving %s without a token: anyone who reaches it can query", host)
        if max_request_bytes < 1024 or max_results < 1 or max_connections < 1:
            raise InvalidArgumentError(
                "need max_request_bytes >= 1024, max_results >= 1, max_connections >= 1"
            )
        if token is not None and (not token or not token.isprintable() or " " in token):
            raise InvalidArgumentError("the token must be a non-empty printable word")
        handler = type(
            "Handler",
            (_Handler,),
            {
                "service": Service(app, max_results),
                "token": None if token is None else f"Bearer {token}".encode(),
                "max_request_bytes": max_request_bytes,
                "timeout": idle_timeout,
            },
        )
        self.app = app
        self._server = _Server((host, port), handler, max_connections)
        bound = self._server.server_address
        self.address = HostInfo(host, int(bound[1]))
        if app.host_info.port == 0 and app.state.name == "CREATED":
            app.host_info = self.address
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.address}"

    def start(self) -> QueryServer:
        """Serve from a background thread; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"txstore-query-{self.address}",
                daemon=True,
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve from the calling thread until :meth:`close` (from another thread) or
        ``KeyboardInterrupt``."""
        self._server.serve_forever(poll_interval=0.1)

    def close(self) -> None:
        """Stop accepting, close open connections, release the port. Idempotent."""
        if self._thread is not None or self._server.socket.fileno() >= 0:
            with contextlib.suppress(Exception):
                if self._thread is not None:
                    self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(5)
                self._thread = None

    def __enter__(self) -> QueryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<QueryServer {self.url} for {self.app.application_id!r}>"
