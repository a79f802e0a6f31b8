"""The query clients' logic, written once for the sync and the async client.

Give a client any instance (or several); it learns the application's metadata from it (which
instance owns which partition, the stores and their serdes), computes a key's partition itself
(Kafka's murmur2 partitioner over the key serialized by the store's key serde; for custom
partitioners or unknown serdes it asks an instance) and sends the query to the owner, over
pooled keep-alive connections. Retries: :mod:`txstore.queries.http.routing`.

Queries over many keys (``range``, ``all``, ``prefix_scan``, ``fetch_all``, key-range
``fetch`` and ``find_sessions``) ask each partition's owner for that partition, in partition
order, and stop at ``limit`` items. An answer larger than the server's ``max_results`` (its
bound per request) is read page after page: a truncated page names the position of its last
item and the client asks again from just after it (:mod:`txstore.queries.http.paging`), so every
answer is complete; a truncated page without a position raises
:class:`~txstore.errors.TruncatedResultError` rather than return part of the answer.

Each method here is a flow (a generator, :mod:`txstore.queries.http.transport`);
:class:`~txstore.queries.QueryClient` and :class:`~txstore.queries.AsyncQueryClient` run them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from txstore.errors import InvalidArgumentError, TruncatedResultError
from txstore.queries.http.routing import RoutingFlows, StoreInfo
from txstore.queries.http.transport import Flow
from txstore.queries.http.wire import decode_key, decode_value, decoder
from txstore.queries.types import HostInfo, QueryableStoreTypes
from txstore.types import KeyValue

__all__ = ["QueryFlows"]


class QueryFlows(RoutingFlows):
    """The queries of both clients, as flows (see the module docstring)."""

    # ---- decoding -----------------------------------------------------------------------

    def _decoders(
        self, info: StoreInfo, type_name: str | None
    ) -> tuple[Callable[[Any], Any], Callable[[Any], Any], str]:
        qtype = QueryableStoreTypes.by_name(type_name or info.default_type)
        return (
            decoder(info.key_serde, info.key),
            decoder(info.value_serde, info.value),
            qtype.value_type,
        )

    def _options(
        self,
        type: str | None,
        stale: bool,
        read_committed: bool,
        extra: dict[str, Any],
        min_position: Mapping[int, int] | None = None,
        wait: float | None = None,
    ) -> dict[str, Any]:
        q = dict(extra)
        if min_position:
            q["min_position"] = ",".join(f"{p}:{o}" for p, o in sorted(min_position.items()))
        if wait is not None:
            q["wait_ms"] = max(0, round(wait * 1000))
        if type is not None:
            q["type"] = type
        if stale:
            q["stale"] = "true"
        if read_committed:
            q["read_committed"] = "true"
        return q

    def _items(
        self, info: StoreInfo, docs: list[dict[str, Any]], type: str | None, windowed: str | None
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

    def _to_owner(
        self, info: StoreInfo, key: Any, stale: bool, op: str, query: dict[str, Any]
    ) -> Flow[Any]:
        """Send ``op`` on ``key`` to the key's owner (with the retries of :meth:`_routed`)."""
        return (
            yield from self._routed(
                info.name,
                lambda fb: self._locate_key(info, key, stale, fb),
                self._path(info.name, op),
                query,
            )
        )

    def _keyed_pages(
        self,
        info: StoreInfo,
        key: Any,
        stale: bool,
        op: str,
        query: dict[str, Any],
        limit: int | None,
    ) -> Flow[list[dict[str, Any]]]:
        """Every item of an iterator query on one key, from its owner, page after page."""
        return (
            yield from self._pages(
                lambda fb: self._locate_key(info, key, stale, fb), info.name, op, query, limit
            )
        )

    def _key_range(
        self, info: StoreInfo, query: dict[str, Any], lo: Any, hi: Any, lo_name: str, hi_name: str
    ) -> None:
        """Add the bounds of a key range to ``query`` (``None``: unbounded)."""
        if lo is not None:
            query.update(self._key_query(info, lo, lo_name))
        if hi is not None:
            query.update(self._key_query(info, hi, hi_name))

    def _get(
        self,
        store: str,
        key: Any,
        *,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
        min_position: Mapping[int, int] | None = None,
        wait: float | None = None,
    ) -> Flow[Any]:
        """The flow of :meth:`QueryClient.get`."""
        info = yield from self._store_info(store)
        q = self._options(
            type, stale, read_committed, self._key_query(info, key), min_position, wait
        )
        doc = yield from self._to_owner(info, key, stale, "get", q)
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
    ) -> Flow[list[KeyValue[Any, Any]]]:
        info = yield from self._store_info(store)
        stale = query.get("stale") == "true"
        out: list[KeyValue[Any, Any]] = []
        for p in range((yield from self._metadata()).num_partitions):
            locate = functools.partial(self._locate_partition, p, stale)
            docs = yield from self._pages(
                locate, store, op, dict(query, partition=p), limit, len(out)
            )
            out += self._items(info, docs, type, windowed)
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def _pages(
        self,
        locate: Callable[[bool], Flow[tuple[HostInfo, int]]],
        store: str,
        op: str,
        query: dict[str, Any],
        limit: int | None,
        have: int = 0,
    ) -> Flow[list[dict[str, Any]]]:
        """Every item of an iterator query on one partition (or ``limit - have`` of them),
        page after page: a truncated answer's ``resume`` position goes back as ``after``
        (see :mod:`txstore.queries.http.paging`). A truncated answer without one raises
        :class:`~txstore.errors.TruncatedResultError`."""
        items: list[dict[str, Any]] = []
        q = dict(query)
        while True:
            if limit is not None:
                q["limit"] = limit - have - len(items)
            doc = yield from self._routed(store, locate, self._path(store, op), q)
            items += doc["items"]
            if not doc.get("truncated") or (limit is not None and have + len(items) >= limit):
                return items
            resume = doc.get("resume")
            if not isinstance(resume, str) or not doc["items"]:
                raise TruncatedResultError(
                    f"the answer of {op!r} on store {store!r} (partition "
                    f"{query.get('partition', 'of the key')}) was truncated at the server's "
                    f"result limit after {len(items)} items, and the server gave no position "
                    "to resume from (an older server?); narrow the query (a smaller key or "
                    "time range) or pass limit= to take only the first items"
                )
            q["after"] = resume

    def _range(
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
    ) -> Flow[list[KeyValue[Any, Any]]]:
        """The flow of :meth:`QueryClient.range`."""
        info = yield from self._store_info(store)
        q: dict[str, Any] = {}
        self._key_range(info, q, key_from, key_to, "from", "to")
        if reverse:
            q["reverse"] = "true"
        q = self._options(type, stale, read_committed, q)
        return (yield from self._fan_out(store, "range", q, limit, None, type))

    def _all(
        self,
        store: str,
        *,
        reverse: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
        min_position: Mapping[int, int] | None = None,
        wait: float | None = None,
    ) -> Flow[list[KeyValue[Any, Any]]]:
        """The flow of :meth:`QueryClient.all`."""
        info = yield from self._store_info(store)
        extra = {"reverse": "true"} if reverse else {}
        q = self._options(type, stale, read_committed, extra, min_position, wait)
        windowed = "time" if info.kind == "window" else None
        return (yield from self._fan_out(store, "all", q, limit, windowed, type))

    def _prefix_scan(
        self,
        store: str,
        prefix: Any,
        *,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Flow[list[KeyValue[Any, Any]]]:
        """The flow of :meth:`QueryClient.prefix_scan`."""
        info = yield from self._store_info(store)
        q = self._options(type, stale, read_committed, self._key_query(info, prefix, "prefix"))
        return (yield from self._fan_out(store, "prefix", q, limit, None, type))

    def _approximate_num_entries(self, store: str, *, read_committed: bool = False) -> Flow[int]:
        """The flow of :meth:`QueryClient.approximate_num_entries`."""
        yield from self._store_info(store)
        q = self._options(None, False, read_committed, {})
        total = 0
        for p in range((yield from self._metadata()).num_partitions):
            doc = yield from self._routed(
                store,
                functools.partial(self._locate_partition, p, False),
                self._path(store, "count"),
                dict(q, partition=p),
            )
            total += int(doc["count"])
        return total

    def _fetch(
        self,
        store: str,
        *args: Any,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Flow[Any]:
        """The flow of :meth:`QueryClient.fetch`."""
        info = yield from self._store_info(store)
        extra: dict[str, Any] = {"backward": "true"} if backward else {}
        if len(args) in (2, 3):
            key = args[0]
            q: dict[str, Any] = dict(self._key_query(info, key))
            if len(args) == 2:
                q["time"] = args[1]
            else:
                q.update(time_from=args[1], time_to=args[2])
            q = self._options(type, stale, read_committed, {**extra, **q})
            if len(args) == 2:
                doc = yield from self._to_owner(info, key, stale, "fetch", q)
                _, vdec, wrapper = self._decoders(info, type)
                return decode_value(doc["value"], wrapper, vdec)
            return self._items(
                info,
                (yield from self._keyed_pages(info, key, stale, "fetch", q, limit)),
                type,
                "time",
            )
        if len(args) == 4:
            q = dict(extra, time_from=args[2], time_to=args[3])
            self._key_range(info, q, args[0], args[1], "key_from", "key_to")
            q = self._options(type, stale, read_committed, q)
            return (yield from self._fan_out(store, "fetch", q, limit, "time", type))
        raise InvalidArgumentError(
            f"fetch takes 2, 3 or 4 arguments after the store, got {len(args)}"
        )

    def _fetch_all(
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
    ) -> Flow[list[KeyValue[Any, Any]]]:
        """The flow of :meth:`QueryClient.fetch_all`."""
        q: dict[str, Any] = {"time_from": time_from, "time_to": time_to}
        if backward:
            q["backward"] = "true"
        q = self._options(type, stale, read_committed, q)
        return (yield from self._fan_out(store, "fetch_all", q, limit, "time", type))

    def _find_sessions(
        self,
        store: str,
        *args: Any,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Flow[list[KeyValue[Any, Any]]]:
        """The flow of :meth:`QueryClient.find_sessions`."""
        info = yield from self._store_info(store)
        extra: dict[str, Any] = {"backward": "true"} if backward else {}
        if len(args) == 3:
            key = args[0]
            q = dict(
                extra, earliest_end=args[1], latest_start=args[2], **self._key_query(info, key)
            )
            q = self._options(type, stale, read_committed, q)
            docs = yield from self._keyed_pages(info, key, stale, "sessions", q, limit)
            return self._items(info, docs, type, "session")
        if len(args) == 4:
            q = dict(extra, earliest_end=args[2], latest_start=args[3])
            self._key_range(info, q, args[0], args[1], "key_from", "key_to")
            q = self._options(type, stale, read_committed, q)
            return (yield from self._fan_out(store, "sessions", q, limit, "session", type))
        raise InvalidArgumentError(f"find_sessions takes 3 or 4 arguments, got {len(args)}")

    def _fetch_session(
        self,
        store: str,
        key: Any,
        session_start: int,
        session_end: int,
        *,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Flow[Any]:
        """The flow of :meth:`QueryClient.fetch_session`."""
        info = yield from self._store_info(store)
        q = dict(self._key_query(info, key), start=session_start, end=session_end)
        q = self._options(type, stale, read_committed, q)
        doc = yield from self._to_owner(info, key, stale, "session", q)
        _, vdec, wrapper = self._decoders(info, type)
        return decode_value(doc["value"], wrapper, vdec)
