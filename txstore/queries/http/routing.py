"""The query clients' routing: the application's metadata, where a key lives, the retries.

:class:`RoutingFlows` (the base of both clients' logic) learns the application's metadata from
any instance it knows (which instance owns which partition, the stores and their serdes),
computes a key's partition itself (Kafka's murmur2 partitioner over the key serialized by the
store's key serde; for custom partitioners or unknown serdes it asks an instance) and sends a
query to the partition's owner.

Retries (:meth:`RoutingFlows._retrying`): when an instance cannot be reached, answers 409
(the partition moved) or 503 (starting, restoring, rebalancing), the client waits (backoff from
20 ms, doubling up to 0.5 s), re-reads the metadata from any instance that answers (the
bootstrap ones, then every instance it learnt of) and tries again on the partition's owner as
the metadata now names it (a stale query: on a standby) - for up to ``retry_timeout``
seconds. The first metadata read happens inside that loop too, so a client created while its
instances start or move waits for them. Other errors are raised at once.

The methods here are generators (flows, see :mod:`txstore.queries.http.transport`); the
clients run them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from txstore.codecs import partition_for_key
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    NotCaughtUpError,
    QueryServiceError,
    StateStoreNotAvailableError,
    TxStoreError,
    UnknownStateStoreError,
)
from txstore.queries.http.transport import Call, Flow, Sleep, raise_for
from txstore.queries.http.wire import key_to_json, key_to_text
from txstore.queries.types import HostInfo, KeyQueryMetadata, StreamsMetadata
from txstore.stores.serdes import Serde, serde_by_name

__all__ = ["RoutingFlows", "StoreInfo"]

_RETRY = (0, 409, 503)


@dataclass(frozen=True)
class StoreInfo:
    """A store as the client knows it from ``/v1/stores``: kind, serde names, default
    queryable type, partitioner, and the serdes themselves when known in this process."""

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


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, (UnknownStateStoreError, NotCaughtUpError)):
        return False
    if isinstance(exc, StateStoreNotAvailableError):
        return True
    return getattr(exc, "status", None) in _RETRY


class RoutingFlows:
    """The metadata and the routing of the query clients (see the module docstring).
    ``bootstrap``: one ``"host:port"`` or several; ``retry_timeout``: how long a query retries
    unreachable, moved or rebalancing instances before raising the last error."""

    def __init__(self, bootstrap: str | Sequence[str], *, retry_timeout: float) -> None:
        items = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        if not items:
            raise InvalidArgumentError("give at least one instance")
        self._bootstrap = [HostInfo.parse(b) for b in items]
        if retry_timeout < 0:
            raise InvalidArgumentError("retry_timeout must be >= 0")
        self.retry_timeout = float(retry_timeout)
        self._meta: _Meta | None = None
        self._stores: dict[str, StoreInfo] = {}
        self._meta_lock = threading.Lock()
        #: The position of the last answer: ``{store: {partition: committed offset}}``.
        self.last_position: dict[str, dict[int, int | None]] = {}

    # ---- requests -----------------------------------------------------------------------

    def _call(
        self,
        host: HostInfo,
        path: str,
        query: dict[str, Any] | None = None,
        method: str = "GET",
        body: Any = None,
    ) -> Flow[Any]:
        """The decoded answer of one request; an error answer raises its error."""
        status, doc = yield Call(host, method, path, query, body)
        if status != 200:
            raise_for(status, doc)
        return doc

    def _any(self, path: str, query: dict[str, Any] | None = None) -> Flow[Any]:
        """Ask the known instances in turn until one answers (an unreachable or 503 one is
        skipped); raises the last one's error."""
        hosts = list(self._bootstrap)
        meta = self._meta
        if meta is not None:
            hosts += [m.host_info for m in meta.instances if m.host_info not in hosts]
        last: Exception | None = None
        for host in hosts:
            try:
                return (yield from self._call(host, path, query))
            except TxStoreError as exc:  # QueryServiceError, or the error the server named
                if getattr(exc, "status", None) not in (0, 503):
                    raise
                last = exc
        assert last is not None
        raise last

    def _retrying(self, attempt: Callable[[bool], Flow[Any]]) -> Flow[Any]:
        """Run ``attempt(retrying)`` until it succeeds, retrying unreachable, moved and
        rebalancing instances with backoff and a metadata refresh for up to
        ``retry_timeout`` seconds (see the module docstring)."""
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.02
        retrying = False
        while True:
            try:
                return (yield from attempt(retrying))
            except (QueryServiceError, InvalidStateStoreError) as exc:
                if not _retriable(exc) or time.monotonic() + delay > deadline:
                    raise
            yield Sleep(delay)
            delay = min(delay * 2, 0.5)
            retrying = True
            with contextlib.suppress(TxStoreError):  # all down or busy: the next try reports it
                yield from self._refresh()

    # ---- metadata -----------------------------------------------------------------------

    def _refresh(self) -> Flow[None]:
        """Re-read the metadata and the stores from any instance: two requests."""
        doc = yield from self._any("/v1/metadata")
        instances = tuple(StreamsMetadata.from_json(d) for d in doc["instances"])
        owners = {p: m.host_info for m in instances for p in m.partitions}
        standbys: dict[int, tuple[HostInfo, ...]] = {}
        for m in instances:
            for p in m.standby_partitions:
                standbys[p] = (*standbys.get(p, ()), m.host_info)
        stores = (yield from self._any("/v1/stores"))["stores"]
        infos = {
            s["name"]: StoreInfo(
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
        if doc.get("num_partitions") is None:
            raise QueryServiceError(
                "the instance has no assignment yet", status=503, error="NotAssigned"
            )
        with self._meta_lock:
            self._meta = _Meta(int(doc["num_partitions"]), instances, owners, standbys)
            self._stores = infos

    def _metadata(self) -> Flow[_Meta]:
        meta = self._meta
        if meta is None:
            yield from self._refresh()
            meta = self._meta
            assert meta is not None
        return meta

    def _store_info(self, name: str) -> Flow[StoreInfo]:
        """The store's description (metadata read, with retries, the first time)."""

        def attempt(retrying: bool) -> Flow[StoreInfo]:
            info = self._stores.get(name)
            if info is None:
                yield from self._refresh()
                info = self._stores.get(name)
                if info is None:
                    raise UnknownStateStoreError(name)
            return info

        info: StoreInfo = yield from self._retrying(attempt)
        return info

    def _metadata_flow(self) -> Flow[list[StreamsMetadata]]:
        yield from self._retrying(lambda _: self._refresh())
        meta = yield from self._metadata()
        return list(meta.instances)

    def _metadata_for_store_flow(self, store: str) -> Flow[list[StreamsMetadata]]:
        path = f"/v1/metadata/stores/{quote(store, safe='')}"
        doc = yield from self._retrying(lambda _: self._any(path))
        return [StreamsMetadata.from_json(d) for d in doc["instances"]]

    def _metadata_for_key_flow(self, store: str, key: Any) -> Flow[KeyQueryMetadata]:
        info = yield from self._store_info(store)
        path = f"/v1/metadata/stores/{quote(store, safe='')}/key"
        query = self._key_query(info, key)
        doc = yield from self._retrying(lambda _: self._any(path, query))
        return KeyQueryMetadata.from_json(doc)

    def _stores_flow(self) -> Flow[list[dict[str, Any]]]:
        doc = yield from self._retrying(lambda _: self._any("/v1/stores"))
        result: list[dict[str, Any]] = doc["stores"]
        return result

    def _health_flow(self, host: str | HostInfo) -> Flow[dict[str, Any]]:
        h = host if isinstance(host, HostInfo) else HostInfo.parse(host)
        doc: dict[str, Any] = yield from self._call(h, "/v1/health")
        return doc

    # ---- routing ------------------------------------------------------------------------

    @staticmethod
    def _key_query(info: StoreInfo, key: Any, name: str = "key") -> dict[str, str]:
        text = key_to_text(info.key_serde, key)
        if text is not None:
            return {name: text}
        return {f"{name}_b64": key_to_json("custom", key, info.key)}

    def _locate_key(
        self, info: StoreInfo, key: Any, stale: bool, fallback: bool
    ) -> Flow[tuple[HostInfo, int]]:
        meta = yield from self._metadata()
        if info.partitioner == "default" and info.key is not None:
            kb = info.key.serialize(key)
            if kb is None:
                raise InvalidArgumentError(f"the key serde turned {key!r} into null")
            p = partition_for_key(kb, meta.num_partitions)
        else:
            path = f"/v1/metadata/stores/{quote(info.name, safe='')}/key"
            doc = yield from self._any(path, self._key_query(info, key))
            p = KeyQueryMetadata.from_json(doc).partition
        return (yield from self._locate_partition(p, stale, fallback))

    def _locate_partition(self, p: int, stale: bool, fallback: bool) -> Flow[tuple[HostInfo, int]]:
        """The owner of partition ``p``; on the retry of a stale query, a standby if any."""
        meta = yield from self._metadata()
        host = meta.owners.get(p)
        if stale and fallback and meta.standbys.get(p):
            host = meta.standbys[p][0]
        if host is None or host == HostInfo.UNAVAILABLE:
            raise StateStoreNotAvailableError(f"no instance hosts partition {p} now")
        return host, p

    def _routed(
        self,
        store: str,
        locate: Callable[[bool], Flow[tuple[HostInfo, int]]],
        path: str,
        query: dict[str, Any],
        method: str = "GET",
        body: Any = None,
    ) -> Flow[Any]:
        """Send to the located owner, with the retries of :meth:`_retrying`; records the
        answer's position in :attr:`last_position`."""

        def attempt(retrying: bool) -> Flow[Any]:
            host, _ = yield from locate(retrying)
            return (yield from self._call(host, path, query, method, body))

        doc = yield from self._retrying(attempt)
        pos = doc.get("position") if isinstance(doc, dict) else None
        if isinstance(pos, dict):
            mine = self.last_position.setdefault(store, {})
            for p, o in pos.items():
                mine[int(p)] = o
        return doc
