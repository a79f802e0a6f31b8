"""A client of the HTTP query service that finds where each key lives.

Give :class:`QueryClient` any instance (or several); it learns the application's metadata from
it (which instance owns which partition, the stores and their serdes), computes a key's
partition itself (Kafka's murmur2 partitioner over the key serialized by the store's key serde;
for custom partitioners or unknown serdes it asks an instance) and sends the query to the
owner, over one keep-alive connection per instance and thread.

When the owner answers 409 (the partition moved) or cannot be reached, the client re-reads the
metadata and retries **once**; when an instance answers 503 (restoring, rebalancing) it retries
with a short backoff for at most ``rebalance_wait`` seconds. Errors are raised as the txstore
error the server names (:class:`~txstore.errors.StateStoreMigratedError`,
:class:`~txstore.errors.UnknownStateStoreError`...), or
:class:`~txstore.errors.QueryServiceError`.

Queries over many keys (``range``, ``all``, ``prefix_scan``, ``fetch_all``, key-range
``fetch`` and ``find_sessions``) ask each partition's owner for that partition, in partition
order, and stop at ``limit`` items.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from txstore import errors
from txstore.codecs import partition_for_key
from txstore.errors import (
    InvalidArgumentError,
    QueryServiceError,
    StateStoreNotAvailableError,
    TxStoreError,
)
from txstore.queries.types import (
    HostInfo,
    KeyQueryMetadata,
    QueryableStoreTypes,
    StreamsMetadata,
)
from txstore.queries.wire import (
    decode_key,
    decode_value,
    decoder,
    key_to_json,
    key_to_text,
)
from txstore.serdes import Serde, serde_by_name
from txstore.types import KeyValue

__all__ = ["QueryClient"]

_RETRY_ONCE = (409,)
_WAIT = (503,)


@dataclass(frozen=True)
class _StoreInfo:
    name: str
    kind: str
    key_serde: str
    value_serde: str
    default_type: str
    partitioner: str
    key: Serde[Any] | None  # the key serde, if known in this process
    value: Serde[Any] | None


@dataclass(frozen=True)
class _Meta:
    num_partitions: int
    instances: tuple[StreamsMetadata, ...]
    owners: dict[int, HostInfo]
    standbys: dict[int, tuple[HostInfo, ...]]


def _serde(name: str) -> Serde[Any] | None:
    try:
        return serde_by_name(name)
    except TxStoreError:
        return None


def _raise_for(status: int, doc: Any) -> None:
    name = doc.get("error", "") if isinstance(doc, dict) else ""
    message = doc.get("message", "") if isinstance(doc, dict) else str(doc)[:200]
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, TxStoreError) and cls is not QueryServiceError:
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        exc.status = status  # type: ignore[attr-defined]
        raise exc
    raise QueryServiceError(message or f"HTTP {status}", status=status, error=name)


class QueryClient:
    """Query an application through its HTTP query services (see the module docstring).

    ``bootstrap``: one ``"host:port"`` or several; ``token``: the bearer token; ``timeout``:
    seconds per HTTP request; ``rebalance_wait``: how long to retry while an instance answers
    503. Thread-safe: each thread gets its own connections.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 10.0,
        rebalance_wait: float = 10.0,
    ) -> None:
        items = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        if not items:
            raise InvalidArgumentError("give at least one instance")
        self._bootstrap = [HostInfo.parse(b) for b in items]
        self._headers = {"Accept": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self.timeout = float(timeout)
        self.rebalance_wait = float(rebalance_wait)
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []
        self._conns_lock = threading.Lock()
        self._meta: _Meta | None = None
        self._stores: dict[str, _StoreInfo] = {}
        self._meta_lock = threading.Lock()

    # ---- transport ----------------------------------------------------------------------

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
        try:
            status, doc = self.request(host, method, path, query, body)
        except (OSError, http.client.HTTPException) as exc:
            raise QueryServiceError(
                f"cannot reach {host}: {exc}", status=0, error="ConnectionError"
            ) from exc
        if status != 200:
            _raise_for(status, doc)
        return doc

    def _any(self, path: str, query: dict[str, Any] | None = None) -> Any:
        """Ask the known instances in turn until one answers."""
        hosts = list(self._bootstrap)
        meta = self._meta
        if meta is not None:
            hosts += [m.host_info for m in meta.instances if m.host_info not in hosts]
        last: Exception | None = None
        for host in hosts:
            try:
                return self._call(host, path, query)
            except QueryServiceError as exc:
                if exc.status not in (0, 503):
                    raise
                last = exc
        assert last is not None
        raise last

    # ---- metadata -----------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the metadata and the stores from any instance."""
        doc = self._any("/v1/metadata")
        instances = tuple(StreamsMetadata.from_json(d) for d in doc["instances"])
        owners = {p: m.host_info for m in instances for p in m.partitions}
        standbys: dict[int, tuple[HostInfo, ...]] = {}
        for m in instances:
            for p in m.standby_partitions:
                standbys[p] = (*standbys.get(p, ()), m.host_info)
        stores = self._any("/v1/stores")["stores"]
        infos = {
            s["name"]: _StoreInfo(
                s["name"],
                s["kind"],
                s["key_serde"],
                s["value_serde"],
                s["default_type"],
                s.get("partitioner", "default"),
                _serde(s["key_serde"]),
                _serde(s["value_serde"]),
            )
            for s in stores
        }
        with self._meta_lock:
            self._meta = _Meta(int(doc["num_partitions"]), instances, owners, standbys)
            self._stores = infos

    def _metadata(self) -> _Meta:
        meta = self._meta
        if meta is None:
            self.refresh()
            meta = self._meta
            assert meta is not None
        return meta

    def _store(self, name: str) -> _StoreInfo:
        info = self._stores.get(name)
        if info is None:
            self.refresh()
            info = self._stores.get(name)
            if info is None:
                _raise_for(
                    404,
                    {
                        "error": "UnknownStateStoreError",
                        "message": f"Cannot get state store {name} because no such store is "
                        "registered in the topology.",
                    },
                )
                raise AssertionError  # pragma: no cover
        return info

    def metadata(self) -> list[StreamsMetadata]:
        """Every instance (fresh from an instance)."""
        self.refresh()
        return list(self._metadata().instances)

    def metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """The instances hosting ``store``."""
        doc = self._any(f"/v1/metadata/stores/{quote(store, safe='')}")
        return [StreamsMetadata.from_json(d) for d in doc["instances"]]

    def metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """Where ``key`` lives, as an instance computes it."""
        info = self._store(store)
        doc = self._any(
            f"/v1/metadata/stores/{quote(store, safe='')}/key", self._key_query(info, key)
        )
        return KeyQueryMetadata.from_json(doc)

    def stores(self) -> list[dict[str, Any]]:
        """The application's stores (name, kind, format, serdes...)."""
        result: list[dict[str, Any]] = self._any("/v1/stores")["stores"]
        return result

    def health(self, host: str | HostInfo) -> dict[str, Any]:
        """The ``/v1/health`` document of one instance."""
        h = host if isinstance(host, HostInfo) else HostInfo.parse(host)
        doc: dict[str, Any] = self._call(h, "/v1/health")
        return doc

    # ---- routing ------------------------------------------------------------------------

    @staticmethod
    def _key_query(info: _StoreInfo, key: Any, name: str = "key") -> dict[str, str]:
        text = key_to_text(info.key_serde, key)
        if text is not None:
            return {name: text}
        return {f"{name}_b64": key_to_json("custom", key, info.key)}

    def _locate_key(
        self, info: _StoreInfo, key: Any, stale: bool, fallback: bool
    ) -> tuple[HostInfo, int]:
        meta = self._metadata()
        if info.partitioner == "default" and info.key is not None:
            kb = info.key.serialize(key)
            if kb is None:
                raise InvalidArgumentError(f"the key serde turned {key!r} into null")
            p = partition_for_key(kb, meta.num_partitions)
        else:
            p = self.metadata_for_key(info.name, key).partition
        return self._locate_partition(p, stale, fallback)

    def _locate_partition(self, p: int, stale: bool, fallback: bool) -> tuple[HostInfo, int]:
        """The owner of partition ``p``; on the retry of a stale query, a standby if any."""
        meta = self._metadata()
        host = meta.owners.get(p)
        if stale and fallback and meta.standbys.get(p):
            host = meta.standbys[p][0]
        if host is None or host == HostInfo.UNAVAILABLE:
            raise StateStoreNotAvailableError(f"no instance hosts partition {p} now")
        return host, p

    def _routed(
        self,
        locate: Callable[[bool], tuple[HostInfo, int]],
        path: str,
        query: dict[str, Any],
        method: str = "GET",
        body: Any = None,
    ) -> Any:
        """Send to the located owner; after a 409 or an unreachable owner re-read the metadata
        and retry once (a stale query retries on a standby, if there is one); retry 503
        answers for up to ``rebalance_wait`` seconds. ``locate(retrying)`` picks the host."""
        retried = False
        deadline = time.monotonic() + self.rebalance_wait
        delay = 0.02
        while True:
            try:
                host, _ = locate(retried)
                return self._call(host, path, query, method, body)
            except (QueryServiceError, errors.InvalidStateStoreError) as exc:
                status = getattr(exc, "status", None)
                if status == 409 or status == 0 or isinstance(exc, StateStoreNotAvailableError):
                    if retried:
                        raise
                    retried = True
                elif status in _WAIT and time.monotonic() + delay < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
                else:
                    raise
            self._safe_refresh()

    def _safe_refresh(self) -> None:
        with contextlib.suppress(QueryServiceError):  # all down or busy: the retry reports it
            self.refresh()

    # ---- decoding -----------------------------------------------------------------------

    def _decoders(
        self, info: _StoreInfo, type_name: str | None
    ) -> tuple[Callable[[Any], Any], Callable[[Any], Any], str]:
        qtype = QueryableStoreTypes.by_name(type_name or info.default_type)
        return (
            decoder(info.key_serde, info.key),
            decoder(info.value_serde, info.value),
            qtype.value_type,
        )

    def _options(
        self, type: str | None, stale: bool, read_committed: bool, extra: dict[str, Any]
    ) -> dict[str, Any]:
        q = dict(extra)
        if type is not None:
            q["type"] = type
        if stale:
            q["stale"] = "true"
        if read_committed:
            q["read_committed"] = "true"
        return q

    def _items(
        self, info: _StoreInfo, docs: list[dict[str, Any]], type: str | None, windowed: str | None
    ) -> list[KeyValue[Any, Any]]:
        kdec, vdec, wrapper = self._decoders(info, type)
        out = []
        for d in docs:
            if "timestamp" in d and "key" not in d:
                key: Any = int(d["timestamp"])
            else:
                key = decode_key(d["key"], kdec, windowed)
            out.append(KeyValue(key, decode_value(d["value"], wrapper, vdec)))
        return out

    # ---- queries ------------------------------------------------------------------------

    def _path(self, store: str, op: str) -> str:
        return f"/v1/stores/{quote(store, safe='')}/{op}"

    def get(
        self,
        store: str,
        key: Any,
        *,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Any:
        """The value of ``key`` in key-value store ``store`` (None if absent), from its owner."""
        info = self._store(store)
        q = self._options(type, stale, read_committed, self._key_query(info, key))
        doc = self._routed(
            lambda fb: self._locate_key(info, key, stale, fb), self._path(store, "get"), q
        )
        _, vdec, wrapper = self._decoders(info, type)
        return decode_value(doc["value"], wrapper, vdec)

    def _fan_out(
        self,
        store: str,
        op: str,
        query: dict[str, Any],
        limit: int | None,
        windowed: str | None,
        type: str | None,
    ) -> list[KeyValue[Any, Any]]:
        info = self._store(store)
        stale = query.get("stale") == "true"
        out: list[KeyValue[Any, Any]] = []
        for p in range(self._metadata().num_partitions):
            q = dict(query, partition=p)
            if limit is not None:
                q["limit"] = limit - len(out)
            doc = self._routed(
                functools.partial(self._locate_partition, p, stale), self._path(store, op), q
            )
            out += self._items(info, doc["items"], type, windowed)
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def range(
        self,
        store: str,
        key_from: Any = None,
        key_to: Any = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """Pairs with ``key_from <= key <= key_to`` of every partition, partition after
        partition (``None``: unbounded)."""
        info = self._store(store)
        q: dict[str, Any] = {}
        if key_from is not None:
            q.update(self._key_query(info, key_from, "from"))
        if key_to is not None:
            q.update(self._key_query(info, key_to, "to"))
        if reverse:
            q["reverse"] = "true"
        q = self._options(type, stale, read_committed, q)
        return self._fan_out(store, "range", q, limit, None, type)

    def all(
        self,
        store: str,
        *,
        reverse: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """Every pair of a key-value or window store, partition after partition."""
        info = self._store(store)
        q = self._options(type, stale, read_committed, {"reverse": "true"} if reverse else {})
        windowed = "time" if info.kind == "window" else None
        return self._fan_out(store, "all", q, limit, windowed, type)

    def prefix_scan(
        self,
        store: str,
        prefix: Any,
        *,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """Pairs whose serialized key starts with the serialized ``prefix``."""
        info = self._store(store)
        q = self._options(type, stale, read_committed, self._key_query(info, prefix, "prefix"))
        return self._fan_out(store, "prefix", q, limit, None, type)

    def approximate_num_entries(self, store: str, *, read_committed: bool = False) -> int:
        """The sum of the partitions' approximate entry counts."""
        self._store(store)
        q = self._options(None, False, read_committed, {})
        total = 0
        for p in range(self._metadata().num_partitions):
            doc = self._routed(
                functools.partial(self._locate_partition, p, False),
                self._path(store, "count"),
                dict(q, partition=p),
            )
            total += int(doc["count"])
        return total

    def fetch(
        self,
        store: str,
        *args: Any,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Any:
        """Window store fetch, by arity: ``(key, time)`` -> value; ``(key, time_from,
        time_to)`` -> ``KeyValue(window start, value)`` list; ``(key_from, key_to, time_from,
        time_to)`` -> ``KeyValue(Windowed, value)`` list."""
        info = self._store(store)
        extra: dict[str, Any] = {"backward": "true"} if backward else {}
        if len(args) in (2, 3):
            key = args[0]
            q: dict[str, Any] = dict(self._key_query(info, key))
            if len(args) == 2:
                q["time"] = args[1]
            else:
                q.update(time_from=args[1], time_to=args[2])
                if limit is not None:
                    q["limit"] = limit
            q = self._options(type, stale, read_committed, {**extra, **q})
            doc = self._routed(
                lambda fb: self._locate_key(info, key, stale, fb), self._path(store, "fetch"), q
            )
            if len(args) == 2:
                _, vdec, wrapper = self._decoders(info, type)
                return decode_value(doc["value"], wrapper, vdec)
            return self._items(info, doc["items"], type, "time")
        if len(args) == 4:
            q = dict(extra, time_from=args[2], time_to=args[3])
            if args[0] is not None:
                q.update(self._key_query(info, args[0], "key_from"))
            if args[1] is not None:
                q.update(self._key_query(info, args[1], "key_to"))
            q = self._options(type, stale, read_committed, q)
            return self._fan_out(store, "fetch", q, limit, "time", type)
        raise InvalidArgumentError(
            f"fetch takes 2, 3 or 4 arguments after the store, got {len(args)}"
        )

    def fetch_all(
        self,
        store: str,
        time_from: int,
        time_to: int,
        *,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """Every window starting in ``[time_from, time_to]``, partition after partition."""
        q: dict[str, Any] = {"time_from": time_from, "time_to": time_to}
        if backward:
            q["backward"] = "true"
        q = self._options(type, stale, read_committed, q)
        return self._fan_out(store, "fetch_all", q, limit, "time", type)

    def find_sessions(
        self,
        store: str,
        *args: Any,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """``(key, earliest_end, latest_start)`` from the key's owner, or ``(key_from, key_to,
        earliest_end, latest_start)`` from every partition."""
        info = self._store(store)
        extra: dict[str, Any] = {"backward": "true"} if backward else {}
        if len(args) == 3:
            key = args[0]
            q = dict(
                extra, earliest_end=args[1], latest_start=args[2], **self._key_query(info, key)
            )
            if limit is not None:
                q["limit"] = limit
            q = self._options(type, stale, read_committed, q)
            doc = self._routed(
                lambda fb: self._locate_key(info, key, stale, fb), self._path(store, "sessions"), q
            )
            return self._items(info, doc["items"], type, "session")
        if len(args) == 4:
            q = dict(extra, earliest_end=args[2], latest_start=args[3])
            if args[0] is not None:
                q.update(self._key_query(info, args[0], "key_from"))
            if args[1] is not None:
                q.update(self._key_query(info, args[1], "key_to"))
            q = self._options(type, stale, read_committed, q)
            return self._fan_out(store, "sessions", q, limit, "session", type)
        raise InvalidArgumentError(f"find_sessions takes 3 or 4 arguments, got {len(args)}")

    def fetch_session(
        self,
        store: str,
        key: Any,
        session_start: int,
        session_end: int,
        *,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Any:
        """The aggregation of one session of ``key``, or None."""
        info = self._store(store)
        q = dict(self._key_query(info, key), start=session_start, end=session_end)
        q = self._options(type, stale, read_committed, q)
        doc = self._routed(
            lambda fb: self._locate_key(info, key, stale, fb), self._path(store, "session"), q
        )
        _, vdec, wrapper = self._decoders(info, type)
        return decode_value(doc["value"], wrapper, vdec)

    # ---- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection this client opened (in any thread). Idempotent."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        self._local = threading.local()

    def __enter__(self) -> QueryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<QueryClient {', '.join(map(str, self._bootstrap))}>"
