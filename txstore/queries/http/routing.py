"""The query client's routing: the application's metadata, where a key lives, the retries.

:class:`RoutingClient` (the base of :class:`~txstore.queries.QueryClient`) learns the
application's metadata from any instance it knows (which instance owns which partition, the
stores and their serdes), computes a key's partition itself (Kafka's murmur2 partitioner over
the key serialized by the store's key serde; for custom partitioners or unknown serdes it asks
an instance) and sends a query to the partition's owner.

When the owner answers 409 (the partition moved) or cannot be reached, it re-reads the
metadata and retries **once**; when an instance answers 503 (restoring, rebalancing) it retries
with a short backoff for at most ``rebalance_wait`` seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from txstore import errors
from txstore.codecs import partition_for_key
from txstore.errors import (
    InvalidArgumentError,
    QueryServiceError,
    StateStoreNotAvailableError,
    TxStoreError,
)
from txstore.queries.http.transport import HttpTransport, raise_for
from txstore.queries.http.wire import key_to_json, key_to_text
from txstore.queries.types import HostInfo, KeyQueryMetadata, StreamsMetadata
from txstore.stores.serdes import Serde, serde_by_name

__all__ = ["RoutingClient", "StoreInfo"]

_WAIT = (503,)


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


class RoutingClient(HttpTransport):
    """The metadata and the routing of a :class:`~txstore.queries.QueryClient` (see the module
    docstring). ``bootstrap``: one ``"host:port"`` or several; ``rebalance_wait``: how long to
    retry while an instance answers 503; ``token`` and ``timeout`` go to the transport."""

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
        super().__init__(token=token, timeout=timeout)
        self.rebalance_wait = float(rebalance_wait)
        self._meta: _Meta | None = None
        self._stores: dict[str, StoreInfo] = {}
        self._meta_lock = threading.Lock()

    # ---- metadata -----------------------------------------------------------------------

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
            except TxStoreError as exc:  # QueryServiceError, or the error the server named
                if getattr(exc, "status", None) not in (0, 503):
                    raise
                last = exc
        assert last is not None
        raise last

    def refresh(self) -> None:
        """Re-read the metadata and the stores from any instance.

        Two HTTP requests (``/v1/metadata`` and ``/v1/stores``), each to the first known
        instance that answers (an unreachable or 503 one is skipped). Raises the last
        instance's error, :class:`~txstore.errors.QueryServiceError` with ``status`` 0 when
        none was reachable.
        """
        doc = self._any("/v1/metadata")
        instances = tuple(StreamsMetadata.from_json(d) for d in doc["instances"])
        owners = {p: m.host_info for m in instances for p in m.partitions}
        standbys: dict[int, tuple[HostInfo, ...]] = {}
        for m in instances:
            for p in m.standby_partitions:
                standbys[p] = (*standbys.get(p, ()), m.host_info)
        stores = self._any("/v1/stores")["stores"]
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

    def _store(self, name: str) -> StoreInfo:
        info = self._stores.get(name)
        if info is None:
            self.refresh()
            info = self._stores.get(name)
            if info is None:
                raise_for(
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
        """Every instance (fresh from an instance): a :meth:`refresh`, two HTTP requests."""
        self.refresh()
        return list(self._metadata().instances)

    def metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """The instances hosting ``store``: one HTTP request to any instance, uncached."""
        doc = self._any(f"/v1/metadata/stores/{quote(store, safe='')}")
        return [StreamsMetadata.from_json(d) for d in doc["instances"]]

    def metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """Where ``key`` lives, as an instance computes it.

        One HTTP request to any instance (after a :meth:`refresh` the first time ``store`` is
        seen). Raises :class:`~txstore.errors.UnknownStateStoreError` for an unknown store.
        """
        info = self._store(store)
        doc = self._any(
            f"/v1/metadata/stores/{quote(store, safe='')}/key", self._key_query(info, key)
        )
        return KeyQueryMetadata.from_json(doc)

    def stores(self) -> list[dict[str, Any]]:
        """The application's stores (name, kind, format, serdes...): one HTTP request."""
        result: list[dict[str, Any]] = self._any("/v1/stores")["stores"]
        return result

    def health(self, host: str | HostInfo) -> dict[str, Any]:
        """The ``/v1/health`` document of one instance: one HTTP request to it.

        Raises :class:`~txstore.errors.InvalidArgumentError` for a malformed ``host`` and
        :class:`~txstore.errors.QueryServiceError` (``status`` 0) if it cannot be reached.
        """
        h = host if isinstance(host, HostInfo) else HostInfo.parse(host)
        doc: dict[str, Any] = self._call(h, "/v1/health")
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
        with contextlib.suppress(TxStoreError):  # all down or busy: the retry reports it
            self.refresh()
