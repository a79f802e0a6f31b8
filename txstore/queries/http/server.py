"""The HTTP query service's server: the ASGI application of :mod:`txstore.queries.http.asgi`
served by uvicorn (asyncio, h11), what ``txstore serve`` runs.

Safe defaults, on top of the application's own limits (:func:`~txstore.queries.asgi_app`):

* it binds a loopback address unless ``allow_remote=True`` (then give a ``token``);
* slow and idle clients cannot starve the others: connections cost no thread; a connection
  must complete each request's headers within ``header_timeout`` seconds of its opening (or of
  its previous answer), else it gets 408 and is closed (slowloris); an idle keep-alive
  connection is closed after ``idle_timeout`` seconds (uvicorn's ``timeout_keep_alive``); a
  request line and header block above 16 KiB gets 431 and is closed; beyond ``max_connections`` open
  connections a new one gets 503 and is closed; the listen backlog is ``backlog``;
* a request line or header block that is not HTTP/1.1 (an HTTP/2 preface, garbage) gets a 400
  with a JSON body and the connection is closed.

Shutting down (:meth:`QueryServer.close`) stops accepting at once and gives requests in
progress ``graceful_timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
import threading
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from txstore.errors import InvalidArgumentError
from txstore.queries.application import Application
from txstore.queries.http.asgi import asgi_app
from txstore.queries.types import HostInfo

__all__ = ["QueryServer"]

_log = logging.getLogger("txstore.queries.http")

#: The largest request line + header block accepted (431 beyond).
MAX_HEADER_BYTES = 16 * 1024


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _raw_answer(status: int, reason: str, error: str, message: str) -> bytes:
    body = json.dumps({"error": error, "message": message, "status": status}).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n"
        + ("Retry-After: 1\r\n" if status == 503 else "")
        + "\r\n"
    ).encode() + body


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, a connection limit and JSON 400s."""

    header_timeout = 10.0
    max_connections = 1024
    _header_timer: asyncio.TimerHandle | None = None
    _got_bytes = False

    def connection_made(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # headers and body are two writes: no Nagle
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(
                _raw_answer(
                    503, "Service Unavailable", "TooManyConnections", "too many connections"
                )
            )
            transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._got_bytes = False
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self.conn.their_state is h11.IDLE:  # headers still arriving: bound their size
            buf = self.conn.trailing_data[0] + data
            end = buf.find(b"\r\n\r\n")
            if (end if end >= 0 else len(buf)) > MAX_HEADER_BYTES:
                self._disarm()
                self.transport.write(
                    _raw_answer(
                        431,
                        "Request Header Fields Too Large",
                        "HeadersTooLarge",
                        f"the request line and headers are above {MAX_HEADER_BYTES} bytes",
                    )
                )
                self.transport.close()
                return
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a request's headers arrived
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self._got_bytes:  # a request started and never finished its headers
            self.transport.write(
                _raw_answer(
                    408,
                    "Request Timeout",
                    "RequestTimeout",
                    f"the request headers did not arrive within {self.header_timeout} s",
                )
            )
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._disarm()
        self.transport.write(
            _raw_answer(
                400,
                "Bad Request",
                "BadRequest",
                "not an HTTP/1.1 request (" + msg.rstrip(".") + ")",
            )
        )
        self.transport.close()


class QueryServer:
    """Serve ``app``'s metadata and stores over HTTP with uvicorn (see the module docstring
    and :func:`~txstore.queries.asgi_app` for the limits it passes on).

    ``host``/``port`` default to the application's ``application_server``; port 0 picks a free
    port (and, before ``app.start()``, becomes the application's advertised port). The port
    is bound here: a port in use raises :class:`~txstore.errors.InvalidArgumentError` naming
    the address. ``start()`` serves from a background thread (its own event loop);
    ``close()`` stops serving.
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
        max_connections: int = 1024,
        max_in_flight: int = 256,
        idle_timeout: float = 5.0,
        header_timeout: float = 10.0,
        body_timeout: float = 10.0,
        max_position_wait: float = 30.0,
        graceful_timeout: float = 1.0,
        backlog: int = 1024,
    ) -> None:
        host = app.host_info.host if host is None else host
        port = app.host_info.port if port is None else port
        if not allow_remote and not _is_loopback(host):
            raise InvalidArgumentError(
                f"{host!r} is not a loopback address: allow remote clients explicitly "
                "(txstore serve --allow-remote, with a token) to serve other machines"
            )
        if allow_remote and token is None:
            _log.warning("serving %s without a token: anyone who reaches it can query", host)
        if max_connections < 1 or idle_timeout <= 0 or header_timeout <= 0:
            raise InvalidArgumentError(
                "need max_connections >= 1, idle_timeout > 0 and header_timeout > 0"
            )
        self.asgi = asgi_app(
            app,
            token=token,
            max_results=max_results,
            max_request_bytes=max_request_bytes,
            max_in_flight=max_in_flight,
            body_timeout=body_timeout,
            max_position_wait=max_position_wait,
        )
        protocol = type(
            "Protocol",
            (_Protocol,),
            {"header_timeout": float(header_timeout), "max_connections": max_connections},
        )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
        except OSError as exc:
            sock.close()
            raise InvalidArgumentError(
                f"cannot listen on {HostInfo(host, port)}: {exc.strerror or exc}"
            ) from None
        sock.setblocking(False)
        self._sock = sock
        self.app = app
        self.address = HostInfo(host, int(sock.getsockname()[1]))
        if app.host_info.port == 0 and app.state.name == "CREATED":
            app.host_info = self.address
        config = uvicorn.Config(
            self.asgi,
            http=protocol,
            loop="asyncio",
            lifespan="off",
            log_config=None,  # a library: leave the process's logging configuration alone
            access_log=False,
            timeout_keep_alive=idle_timeout,  # type: ignore[arg-type]
            timeout_graceful_shutdown=max(1, round(graceful_timeout)),
            backlog=backlog,
            server_header=False,
            date_header=False,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.address}"

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self) -> QueryServer:
        """Serve from a background thread (returns once it accepts connections); returns
        self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"txstore-query-{self.address}", daemon=True
            )
            self._thread.start()
            deadline = time.monotonic() + 30
            while not self._server.started and self._thread.is_alive():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            if self._error is not None:
                raise InvalidArgumentError(f"the query server did not start: {self._error}")
        return self

    def serve_forever(self) -> None:
        """Serve from the calling thread until :meth:`close` (from another thread) or, in the
        main thread, SIGINT/SIGTERM."""
        self._server.run(sockets=[self._sock])

    def close(self) -> None:
        """Stop accepting, end the connections, release the port. Idempotent."""
        self._server.should_exit = True
        thread = self._thread
        if thread is not None:
            thread.join(10)
            if thread.is_alive():
                self._server.force_exit = True
                thread.join(5)
            self._thread = None
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> QueryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<QueryServer {self.url} for {self.app.application_id!r}>"
