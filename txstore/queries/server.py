"""The HTTP query service: an application's metadata and stores, as JSON.

KIP-67 left the remote listener to users; txstore ships this one. It is built on the standard
library's :class:`http.server.ThreadingHTTPServer` speaking HTTP/1.1 with keep-alive, one thread
per connection (``docs/queries.md`` explains the choice). Safe defaults:

* it binds a loopback address unless ``allow_remote=True``;
* with a ``token``, every request needs ``Authorization: Bearer <token>`` (401 otherwise);
* a request line or body above ``max_request_bytes`` gets 414 / 413; an iterator query returns
  at most ``max_results`` items (``"truncated": true`` when there were more); at most
  ``max_connections`` connections are served at once (503 beyond); an idle keep-alive
  connection is closed after ``idle_timeout`` seconds;
* errors are JSON ``{"error": <txstore error class>, "message": ..., "status": ...}``: 400 bad
  arguments, 401, 404 unknown store or path, 405, 409 migrated (the key's partition is not
  here: ``active_host`` names its owner), 503 starting, rebalancing or stopping (with
  ``Retry-After``), 500 otherwise. JSON only; nothing is ever pickled.

Endpoints (``{store}`` URL-quoted; every query takes ``type=<queryable store type>``,
``stale=true`` and ``read_committed=true``):

===========================================  ===============================================
``GET /v1/health``                           state, thread state, hosted partitions
``GET /v1/metadata``                         every instance (``StreamsMetadata``)
``GET /v1/metadata/stores/{store}``          the instances hosting a store
``GET /v1/metadata/stores/{store}/key``      ``KeyQueryMetadata`` of ``?key=`` (or ``key_b64``)
``GET /v1/stores``                           the stores, their kinds, formats and serdes
``GET /v1/stores/{store}/get?key=``          a key-value store's value
``POST /v1/stores/{store}/get``              several keys: body ``{"keys": [...]}``
``GET /v1/stores/{store}/range``             ``from``, ``to``, ``reverse``, ``limit``
``GET /v1/stores/{store}/prefix?prefix=``    prefix scan (prefix serialized by the key serde)
``GET /v1/stores/{store}/all``               every entry (``reverse``, ``limit``)
``GET /v1/stores/{store}/count``             approximate number of entries
``GET /v1/stores/{store}/fetch``             window fetch: ``key`` + ``time``; ``key`` +
                                             ``time_from`` + ``time_to``; ``key_from`` +
                                             ``key_to`` + ``time_from`` + ``time_to``
``GET /v1/stores/{store}/fetch_all``         windows starting in ``time_from..time_to``
``GET /v1/stores/{store}/sessions``          ``key`` (or ``key_from``/``key_to``) +
                                             ``earliest_end`` + ``latest_start``
``GET /v1/stores/{store}/session``           ``key`` + ``start`` + ``end``: one session
===========================================  ===============================================

Queries on one key go to the key's partition on this instance; where it is not hosted here the
answer is 409 with its owner, so a client that guessed wrong learns where to go.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

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
from txstore.queries.application import Application, StoreSpec
from txstore.queries.types import (
    HostInfo,
    QueryableStoreType,
    QueryableStoreTypes,
    StoreQueryParameters,
)
from txstore.queries.wire import (
    b64decode,
    encode_key,
    encode_value,
    encoder,
    key_from_json,
    key_from_text,
)

__all__ = ["QueryServer", "status_for"]

_log = logging.getLogger("txstore.queries.server")

_JSON = "application/json; charset=utf-8"


class _HttpError(Exception):
    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.doc: dict[str, Any] = {
            "error": error,
            "message": message,
            "status": status,
            **extra,
        }


def _bad(message: str) -> _HttpError:
    return _HttpError(400, "InvalidArgumentError", message)


def status_for(exc: BaseException) -> int:
    """The HTTP status of a txstore error (see the module docstring)."""
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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Args:
    """A request's query parameters (each at most once)."""

    def __init__(self, query: str) -> None:
        try:
            parsed = parse_qs(query, keep_blank_values=True, max_num_fields=64)
        except ValueError as exc:
            raise _bad(f"bad query string: {exc}") from None
        self._d: dict[str, str] = {}
        for k, vs in parsed.items():
            if len(vs) != 1:
                raise _bad(f"parameter {k!r} is given {len(vs)} times")
            self._d[k] = vs[0]

    def has(self, name: str) -> bool:
        return name in self._d

    def text(self, name: str, default: str | None = None) -> str | None:
        return self._d.get(name, default)

    def need(self, name: str) -> str:
        v = self._d.get(name)
        if v is None:
            raise _bad(f"missing parameter {name!r}")
        return v

    def integer(self, name: str, default: int | None = None) -> int | None:
        v = self._d.get(name)
        if v is None:
            return default
        try:
            return int(v, 10)
        except ValueError:
            raise _bad(f"parameter {name!r} must be an integer, got {v[:40]!r}") from None

    def need_int(self, name: str) -> int:
        v = self.integer(name)
        if v is None:
            raise _bad(f"missing parameter {name!r}")
        return v

    def flag(self, name: str) -> bool:
        v = self._d.get(name)
        if v is None:
            return False
        if v.lower() in ("1", "true", "yes", ""):
            return True
        if v.lower() in ("0", "false", "no"):
            return False
        raise _bad(f"parameter {name!r} must be true or false, got {v[:20]!r}")


class _Service:
    """Request routing and the queries, independent of the HTTP plumbing."""

    def __init__(self, app: Application, max_results: int) -> None:
        self.app = app
        self.max_results = max_results
        self._composites: dict[tuple[Any, ...], Any] = {}
        self._encoders: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}

    # ---- helpers ----------------------------------------------------------------------

    def _spec(self, name: str) -> StoreSpec:
        spec = next((s for s in self.app.stores if s.name == name), None)
        if spec is None:
            raise UnknownStateStoreError(name)
        return spec

    def _qtype(self, spec: StoreSpec, args: _Args) -> QueryableStoreType:
        name = args.text("type")
        if name is None:
            return QueryableStoreTypes.default_for(spec.kind, spec.format)
        try:
            return QueryableStoreTypes.by_name(name)
        except InvalidArgumentError as exc:
            raise _bad(str(exc)) from None

    def _codecs(self, spec: StoreSpec) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        c = self._encoders.get(spec.name)
        if c is None:
            c = (encoder(spec.key_serde), encoder(spec.value_serde))
            self._encoders[spec.name] = c
        return c

    def _store(self, spec: StoreSpec, args: _Args, partition: int | None = None) -> Any:
        qtype = self._qtype(spec, args)
        if partition is None:
            partition = args.integer("partition")
            if partition is not None and partition < 0:
                raise _bad("partition must be >= 0")
        stale, rc = args.flag("stale"), args.flag("read_committed")
        key = (spec.name, qtype.name, partition, stale, rc)
        store = self._composites.get(key)
        if store is None:
            params = StoreQueryParameters.from_name_and_type(spec.name, qtype).with_partition(
                partition
            )
            if stale:
                params = params.enable_stale_stores()
            if rc:
                params = params.enable_read_committed()
            store = self.app.store(params)
            if len(self._composites) < 4096:
                self._composites[key] = store
        return store

    def _key(self, spec: StoreSpec, args: _Args, name: str = "key") -> Any:
        try:
            b64 = args.text(f"{name}_b64")
            if b64 is not None:
                return spec.key_serde.deserialize(b64decode(b64))
            text = args.text(name)
            if text is None:
                raise _bad(f"missing parameter {name!r} (or {name}_b64)")
            return key_from_text(spec.key_serde, text)
        except (InvalidArgumentError, SerializationError) as exc:
            raise _bad(str(exc)) from None

    def _optional_key(self, spec: StoreSpec, args: _Args, name: str) -> Any:
        if not args.has(name) and not args.has(f"{name}_b64"):
            return None
        return self._key(spec, args, name)

    def _partition_of(self, spec: StoreSpec, key: Any) -> int:
        return self.app.partition_for_key(spec.name, key)

    def _keyed(self, spec: StoreSpec, args: _Args, key: Any) -> tuple[Any, int]:
        """The composite store of ``key``'s partition (409 with its owner if not here)."""
        p = self._partition_of(spec, key)
        try:
            return self._store(spec, args, p), p
        except InvalidStateStorePartitionError as exc:
            raise self._misdirected(spec.name, p, exc) from None

    def _misdirected(self, store: str, p: int, exc: InvalidStateStoreError) -> _HttpError:
        a = self.app._assignment
        owner = a.active.get(p) if a is not None else None
        return _HttpError(
            409,
            "StateStoreMigratedError",
            str(exc),
            partition=p,
            active_host=None if owner is None else str(owner),
        )

    def _limit(self, args: _Args) -> int:
        limit = args.integer("limit", self.max_results)
        assert limit is not None
        if limit < 1:
            raise _bad("limit must be >= 1")
        return min(limit, self.max_results)

    def _items(self, it: Any, limit: int, item: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        with it:
            out: list[dict[str, Any]] = []
            for kv in it:
                if len(out) == limit:
                    return {"items": out, "truncated": True}
                out.append(item(kv))
        return {"items": out, "truncated": False}

    def _pair(self, spec: StoreSpec) -> Callable[[Any], dict[str, Any]]:
        kenc, venc = self._codecs(spec)
        return lambda kv: {"key": encode_key(kv.key, kenc), "value": encode_value(kv.value, venc)}

    def _timed(self, spec: StoreSpec) -> Callable[[Any], dict[str, Any]]:
        _, venc = self._codecs(spec)
        return lambda kv: {"timestamp": kv.key, "value": encode_value(kv.value, venc)}

    # ---- routing ------------------------------------------------------------------------

    def dispatch(self, method: str, target: str, body: bytes | None) -> tuple[int, Any]:
        parts = urlsplit(target)
        segs = [unquote(s) for s in parts.path.split("/")[1:]]
        args = _Args(parts.query)
        if segs and segs[-1] == "":
            segs.pop()
        if not segs or segs[0] != "v1":
            raise _HttpError(404, "NotFound", f"no such endpoint {parts.path!r}")
        segs = segs[1:]
        if method == "POST":
            if len(segs) == 3 and segs[0] == "stores" and segs[2] == "get":
                return 200, self.multi_get(self._spec(segs[1]), args, body or b"")
            raise _HttpError(405, "MethodNotAllowed", f"POST is not allowed on {parts.path!r}")
        if segs == ["health"]:
            return 200, self.health()
        if segs == ["metadata"]:
            return 200, self.metadata()
        if len(segs) == 3 and segs[:2] == ["metadata", "stores"]:
            self._spec(segs[2])
            return 200, {
                "instances": [m.to_json() for m in self.app.all_metadata_for_store(segs[2])]
            }
        if len(segs) == 4 and segs[:2] == ["metadata", "stores"] and segs[3] == "key":
            spec = self._spec(segs[2])
            meta = self.app.query_metadata_for_key(spec.name, self._key(spec, args))
            assert meta is not None
            return 200, meta.to_json()
        if segs == ["stores"]:
            return 200, {
                "application_id": self.app.application_id,
                "stores": self.app.describe_stores(),
            }
        if len(segs) == 3 and segs[0] == "stores":
            spec = self._spec(segs[1])
            op = _OPS.get(segs[2])
            if op is None:
                raise _HttpError(404, "NotFound", f"no such store operation {segs[2]!r}")
            return 200, op(self, spec, args)
        raise _HttpError(404, "NotFound", f"no such endpoint {parts.path!r}")

    # ---- endpoints ----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        app = self.app
        return {
            "application_id": app.application_id,
            "application_server": str(app.host_info),
            "state": str(app.state),
            "thread_state": str(app.thread_state),
            "active_partitions": app.active_partitions,
            "standby_partitions": app.standby_partitions,
        }

    def metadata(self) -> dict[str, Any]:
        app = self.app
        instances = app.all_metadata()
        a = app._assignment
        return {
            "application_id": app.application_id,
            "num_partitions": None if a is None else a.num_partitions,
            "instances": [m.to_json() for m in instances],
        }

    def get(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        key = self._key(spec, args)
        store, p = self._keyed(spec, args, key)
        kenc, venc = self._codecs(spec)
        try:
            value = store.get(key)
        except InvalidStateStorePartitionError as exc:
            raise self._misdirected(spec.name, p, exc) from None
        return {
            "key": encode_key(key, kenc),
            "value": encode_value(value, venc),
            "found": value is not None,
            "partition": p,
        }

    def multi_get(self, spec: StoreSpec, args: _Args, body: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise _bad(f"the body is not JSON: {exc}") from None
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, list):
            raise _bad('the body must be {"keys": [...]}')
        if len(keys) > self.max_results:
            raise _bad(f"at most {self.max_results} keys per request, got {len(keys)}")
        kenc, venc = self._codecs(spec)
        results = []
        for k in keys:
            try:
                key = key_from_json(spec.key_serde, k)
            except (InvalidArgumentError, SerializationError) as exc:
                raise _bad(str(exc)) from None
            try:
                store, p = self._keyed(spec, args, key)
                value = store.get(key)
            except _HttpError as exc:
                results.append({"key": k, **exc.doc})
                continue
            except TxStoreError as exc:
                results.append({"key": k, **_error_doc(exc)})
                continue
            results.append(
                {"key": encode_key(key, kenc), "value": encode_value(value, venc), "partition": p}
            )
        return {"results": results}

    def range(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "key_value")
        lo = self._optional_key(spec, args, "from")
        hi = self._optional_key(spec, args, "to")
        store = self._store(spec, args)
        it = store.reverse_range(lo, hi) if args.flag("reverse") else store.range(lo, hi)
        return self._items(it, self._limit(args), self._pair(spec))

    def prefix(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "key_value")
        prefix = self._key(spec, args, "prefix")
        store = self._store(spec, args)
        return self._items(
            store.prefix_scan(prefix, spec.key_serde), self._limit(args), self._pair(spec)
        )

    def all(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        store = self._store(spec, args)
        rev = args.flag("reverse")
        if spec.kind == "key_value":
            it = store.reverse_all() if rev else store.all()
        elif spec.kind == "window":
            it = store.backward_all() if rev else store.all()
        else:
            raise _bad("session stores have no 'all'; use sessions with key_from/key_to")
        return self._items(it, self._limit(args), self._pair(spec))

    def count(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "key_value")
        return {"count": self._store(spec, args).approximate_num_entries()}

    def fetch(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "window")
        back = args.flag("backward")
        limit = self._limit(args)
        if args.has("key") or args.has("key_b64"):
            key = self._key(spec, args)
            store, _p = self._keyed(spec, args, key)
            if args.has("time"):
                _, venc = self._codecs(spec)
                value = store.fetch(key, args.need_int("time"))
                return {"value": encode_value(value, venc), "found": value is not None}
            t0, t1 = args.need_int("time_from"), args.need_int("time_to")
            it = store.backward_fetch(key, t0, t1) if back else store.fetch(key, t0, t1)
            return self._items(it, limit, self._timed(spec))
        lo = self._optional_key(spec, args, "key_from")
        hi = self._optional_key(spec, args, "key_to")
        t0, t1 = args.need_int("time_from"), args.need_int("time_to")
        store = self._store(spec, args)
        it = store.backward_fetch(lo, hi, t0, t1) if back else store.fetch(lo, hi, t0, t1)
        return self._items(it, limit, self._pair(spec))

    def fetch_all(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "window")
        t0, t1 = args.need_int("time_from"), args.need_int("time_to")
        store = self._store(spec, args)
        it = store.backward_fetch_all(t0, t1) if args.flag("backward") else store.fetch_all(t0, t1)
        return self._items(it, self._limit(args), self._pair(spec))

    def sessions(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "session")
        e, s = args.need_int("earliest_end"), args.need_int("latest_start")
        name = "backward_find_sessions" if args.flag("backward") else "find_sessions"
        if args.has("key") or args.has("key_b64"):
            key = self._key(spec, args)
            store, _ = self._keyed(spec, args, key)
            it = getattr(store, name)(key, e, s)
        else:
            lo = self._optional_key(spec, args, "key_from")
            hi = self._optional_key(spec, args, "key_to")
            it = getattr(self._store(spec, args), name)(lo, hi, e, s)
        return self._items(it, self._limit(args), self._pair(spec))

    def session(self, spec: StoreSpec, args: _Args) -> dict[str, Any]:
        self._kind(spec, "session")
        key = self._key(spec, args)
        store, _ = self._keyed(spec, args, key)
        _, venc = self._codecs(spec)
        value = store.fetch_session(key, args.need_int("start"), args.need_int("end"))
        return {"value": encode_value(value, venc), "found": value is not None}

    @staticmethod
    def _kind(spec: StoreSpec, kind: str) -> None:
        if spec.kind != kind:
            raise _bad(f"store {spec.name!r} is a {spec.kind} store; this is a {kind} operation")


_OPS: dict[str, Callable[[_Service, StoreSpec, _Args], dict[str, Any]]] = {
    "get": _Service.get,
    "range": _Service.range,
    "prefix": _Service.prefix,
    "all": _Service.all,
    "count": _Service.count,
    "fetch": _Service.fetch,
    "fetch_all": _Service.fetch_all,
    "sessions": _Service.sessions,
    "session": _Service.session,
}


def _error_doc(exc: BaseException) -> dict[str, Any]:
    status = status_for(exc)
    name = type(exc).__name__ if isinstance(exc, TxStoreError) else "InternalError"
    message = str(exc) if isinstance(exc, TxStoreError) else "internal error; see the server log"
    return {"error": name, "message": message, "status": status}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "txstore-query/1"
    sys_version = ""
    # Buffer the response: headers and body leave in one segment when the handler flushes
    # (two small writes would meet Nagle's algorithm and the client's delayed ACK: 40 ms).
    wbufsize = 64 * 1024
    service: _Service
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
            raise _HttpError(411, "LengthRequired", "send a Content-Length, not chunked bodies")
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise _bad("bad Content-Length") from None
        if n < 0:
            self.close_connection = True
            raise _bad("bad Content-Length")
        if n > self.max_request_bytes:
            self.close_connection = True  # the body is not read
            raise _HttpError(
                413, "RequestTooLarge", f"the body is {n} bytes; at most {self.max_request_bytes}"
            )
        return self.rfile.read(n)

    def _handle(self, method: str) -> None:
        try:
            if len(self.path) > self.max_request_bytes:
                self._discard_body()
                raise _HttpError(
                    414, "UriTooLong", f"the URL is above {self.max_request_bytes} bytes"
                )
            token = self.token
            if token is not None:
                got = (self.headers.get("Authorization") or "").encode("latin-1", "replace")
                if not hmac.compare_digest(got, token):
                    self._discard_body()
                    raise _HttpError(401, "Unauthorized", "missing or wrong bearer token")
            body = self._read_body() if method == "POST" else None
            if method == "GET":
                self._discard_body()
            status, doc = self.service.dispatch(method, self.path, body)
        except _HttpError as exc:
            status, doc = exc.status, exc.doc
        except Exception as exc:
            doc = _error_doc(exc)
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
                "service": _Service(app, max_results),
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
