"""The query client's transport: keep-alive HTTP connections and JSON requests over them.

:class:`HttpTransport` (the base of :class:`~txstore.queries.QueryClient`) keeps one
keep-alive connection per instance and thread, sends a request and decodes the JSON answer,
and turns an error answer into the txstore error the server names (:func:`raise_for`) or
:class:`~txstore.errors.QueryServiceError`.

>>> from txstore.errors import UnknownStateStoreError
>>> try:
...     raise_for(404, {"error": "UnknownStateStoreError", "message": "no store x"})
... except UnknownStateStoreError as exc:
...     print(exc, exc.status)
no store x 404
"""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any
from urllib.parse import urlencode

from txstore import errors
from txstore.errors import QueryServiceError, TxStoreError
from txstore.queries.types import HostInfo

__all__ = ["HttpTransport", "raise_for"]


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


class HttpTransport:
    """Keep-alive connections to the instances, one per instance and thread, and JSON requests
    over them. ``token``: the bearer token; ``timeout``: seconds per HTTP request."""

    def __init__(self, *, token: str | None, timeout: float) -> None:
        self._headers = {"Accept": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self.timeout = float(timeout)
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []
        self._conns_lock = threading.Lock()

    def _conn(self, host: HostInfo) -> http.client.HTTPConnection:
        conns: dict[HostInfo, http.client.HTTPConnection] | None = getattr(
            self._local, "conns", None
        )
        if conns is None:
            conns = {}
            self._local.conns = conns
        c = conns.get(host)
        if c is None:
            c = http.client.HTTPConnection(host.host, host.port, timeout=self.timeout)
            conns[host] = c
            with self._conns_lock:
                self._conns.append(c)
        return c

    def request(
        self,
        host: HostInfo,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> tuple[int, Any]:
        """One HTTP request to ``host``; returns ``(status, decoded JSON)``. A keep-alive
        connection the server closed meanwhile is reopened once. Connection failures raise
        ``OSError``."""
        target = path + ("?" + urlencode(query) if query else "")
        payload = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            c = self._conn(host)
            try:
                c.request(method, target, body=payload, headers=headers)
                resp = c.getresponse()
                data = resp.read()
                if resp.will_close:
                    c.close()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                c.close()
                if attempt:
                    raise
            except (OSError, http.client.HTTPException):
                c.close()
                raise
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = {"error": "", "message": data[:200].decode("utf-8", "replace")}
        return resp.status, doc

    def _call(
        self,
        host: HostInfo,
        path: str,
        query: dict[str, Any] | None = None,
        method: str = "GET",
        body: Any = None,
    ) -> Any:
        """The decoded answer of a request; an error answer raises its error
        (:func:`raise_for`), an unreachable ``host`` a ``QueryServiceError`` with status 0."""
        try:
            status, doc = self.request(host, method, path, query, body)
        except (OSError, http.client.HTTPException) as exc:
            raise QueryServiceError(
                f"cannot reach {host}: {exc}", status=0, error="ConnectionError"
            ) from exc
        if status != 200:
            raise_for(status, doc)
        return doc

    def close(self) -> None:
        """Close every connection this client opened (in any thread). Idempotent."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        self._local = threading.local()
