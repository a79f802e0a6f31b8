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
order, and stop at ``limit`` items. An answer larger than the server's ``max_results`` (its
bound per request) is read page after page: a truncated page names the position of its last
item and the client asks again from just after it (:mod:`txstore.queries.http.paging`), so every
answer is complete; a truncated page without a position (an older server) raises
:class:`~txstore.errors.TruncatedResultError` rather than return part of the answer.

The routing and the retries are in :mod:`txstore.queries.http.routing`, the connections in
:mod:`txstore.queries.http.transport`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from txstore.errors import InvalidArgumentError, TruncatedResultError
from txstore.queries.http.routing import RoutingClient, StoreInfo
from txstore.queries.http.wire import decode_key, decode_value, decoder
from txstore.queries.types import QueryableStoreTypes
from txstore.types import KeyValue

__all__ = ["QueryClient"]


class QueryClient(RoutingClient):
    """Query an application through its HTTP query services (see the module docstring).

    ``bootstrap``: one ``"host:port"`` or several; ``token``: the bearer token; ``timeout``:
    seconds per HTTP request; ``rebalance_wait``: how long to retry while an instance answers
    503. Thread-safe: each thread gets its own connections. Creating one is O(1) and sends
    nothing; close it (or use it in a ``with`` block) to close its connections.

    Costs: the first query, and any query after a 409 or an unreachable owner, first reads the
    metadata (two HTTP requests to the first instance that answers: instances and stores);
    a key's partition is computed locally. Errors: a store the application does not have
    raises :class:`~txstore.errors.UnknownStateStoreError` (after one metadata refresh); a
    partition no instance hosts :class:`~txstore.errors.StateStoreNotAvailableError`; a
    query the server refuses raises the error it names
    (:class:`~txstore.errors.StateStoreMigratedError` after the one retry,
    :class:`~txstore.errors.InvalidArgumentError` for bad arguments...), else
    :class:`~txstore.errors.QueryServiceError` (``status`` 0: no instance reachable).

    >>> import tempfile
    >>> from txstore import Serdes, Stores
    >>> from txstore.queries import Application, QueryServer
    >>> counts = Stores.key_value_store_builder(
    ...     Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long())
    >>> state_dir = tempfile.TemporaryDirectory()
    >>> app = Application("clicks", state_dir.name, [counts], num_partitions=2,
    ...                   application_server="127.0.0.1:0", task_options={"sync": False})
    >>> server = QueryServer(app).start()
    >>> app.start()
    >>> for user in ("ada", "bob", "ada"):
    ...     with app.writer(app.partition_for_key("counts", user)) as w:
    ...         w.store("counts").put(user, (w.store("counts").get(user) or 0) + 1)
    >>> with QueryClient(str(server.address)) as client:
    ...     client.get("counts", "ada"), sorted(kv.key for kv in client.all("counts"))
    (2, ['ada', 'bob'])
    >>> server.close()
    >>> app.close()
    >>> state_dir.cleanup()
    """

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
    ) -> Any:
        """Send ``op`` on ``key`` to the key's owner (with the retries of :meth:`_routed`)."""
        return self._routed(
            lambda fb: self._locate_key(info, key, stale, fb), self._path(info.name, op), query
        )

    def _keyed_pages(
        self,
        info: StoreInfo,
        key: Any,
        stale: bool,
        op: str,
        query: dict[str, Any],
        limit: int | None,
    ) -> list[dict[str, Any]]:
        """Every item of an iterator query on one key, from its owner, page after page."""
        return self._pages(
            lambda fb: self._locate_key(info, key, stale, fb), info.name, op, query, limit
        )

    def _key_range(
        self, info: StoreInfo, query: dict[str, Any], lo: Any, hi: Any, lo_name: str, hi_name: str
    ) -> None:
        """Add the bounds of a key range to ``query`` (``None``: unbounded)."""
        if lo is not None:
            query.update(self._key_query(info, lo, lo_name))
        if hi is not None:
            query.update(self._key_query(info, hi, hi_name))

    def get(
        self,
        store: str,
        key: Any,
        *,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Any:
        """The value of ``key`` in key-value store ``store`` (None if absent), from its owner.

        One HTTP request to the key's owner (plus, for a custom partitioner or a key serde the
        client does not know, one to ask an instance for the key's partition). Errors and
        retries as in the class docstring.
        """
        info = self._store(store)
        q = self._options(type, stale, read_committed, self._key_query(info, key))
        doc = self._to_owner(info, key, stale, "get", q)
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
            locate = functools.partial(self._locate_partition, p, stale)
            docs = self._pages(locate, store, op, dict(query, partition=p), limit, len(out))
            out += self._items(info, docs, type, windowed)
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def _pages(
        self,
        locate: Callable[[bool], tuple[Any, int]],
        store: str,
        op: str,
        query: dict[str, Any],
        limit: int | None,
        have: int = 0,
    ) -> list[dict[str, Any]]:
        """Every item of an iterator query on one partition (or ``limit - have`` of them),
        page after page: a truncated answer's ``resume`` position goes back as ``after``
        (see :mod:`txstore.queries.http.paging`). A truncated answer without one raises
        :class:`~txstore.errors.TruncatedResultError`."""
        items: list[dict[str, Any]] = []
        q = dict(query)
        while True:
            if limit is not None:
                q["limit"] = limit - have - len(items)
            doc = self._routed(locate, self._path(store, op), q)
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
        partition (``None``: unbounded).

        One HTTP request per partition, in partition order, to each partition's owner,
        stopping once ``limit`` items arrived. A partition with more than the server's
        ``max_results`` items is read page after page (one more request a page), so the answer
        is complete. Errors and retries as in the class docstring.
        """
        info = self._store(store)
        q: dict[str, Any] = {}
        self._key_range(info, q, key_from, key_to, "from", "to")
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
        """Every pair of a key-value or window store, partition after partition.

        One HTTP request per partition, in partition order, to each partition's owner,
        stopping once ``limit`` items arrived. A partition with more than the server's
        ``max_results`` items is read page after page (one more request a page), so the answer
        is complete. Errors and retries as in the class docstring.
        """
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
        """Pairs whose serialized key starts with the serialized ``prefix``.

        One HTTP request per partition, in partition order, to each partition's owner,
        stopping once ``limit`` items arrived. A partition with more than the server's
        ``max_results`` items is read page after page (one more request a page), so the answer
        is complete. Errors and retries as in the class docstring.
        """
        info = self._store(store)
        q = self._options(type, stale, read_committed, self._key_query(info, prefix, "prefix"))
        return self._fan_out(store, "prefix", q, limit, None, type)

    def approximate_num_entries(self, store: str, *, read_committed: bool = False) -> int:
        """The sum of the partitions' approximate entry counts.

        One HTTP request per partition, to its owner. Errors and retries as in the class
        docstring.
        """
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
        time_to)`` -> ``KeyValue(Windowed, value)`` list.

        The key forms cost one HTTP request to the key's owner (as :meth:`get`), the key-range
        form one per partition (as :meth:`range`); both are read page after page beyond the
        server's ``max_results``, as :meth:`range` says. Another number of arguments raises
        :class:`~txstore.errors.InvalidArgumentError`.
        """
        info = self._store(store)
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
                doc = self._to_owner(info, key, stale, "fetch", q)
                _, vdec, wrapper = self._decoders(info, type)
                return decode_value(doc["value"], wrapper, vdec)
            return self._items(
                info, self._keyed_pages(info, key, stale, "fetch", q, limit), type, "time"
            )
        if len(args) == 4:
            q = dict(extra, time_from=args[2], time_to=args[3])
            self._key_range(info, q, args[0], args[1], "key_from", "key_to")
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
        """Every window starting in ``[time_from, time_to]``, partition after partition.

        One HTTP request per partition, in partition order, to each partition's owner,
        stopping once ``limit`` items arrived. A partition with more than the server's
        ``max_results`` items is read page after page (one more request a page), so the answer
        is complete. Errors and retries as in the class docstring.
        """
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
        earliest_end, latest_start)`` from every partition.

        The key form costs one HTTP request to the key's owner (as :meth:`get`), the key-range
        form one per partition (as :meth:`range`); both are read page after page beyond the
        server's ``max_results``, as :meth:`range` says. Another number of arguments raises
        :class:`~txstore.errors.InvalidArgumentError`.
        """
        info = self._store(store)
        extra: dict[str, Any] = {"backward": "true"} if backward else {}
        if len(args) == 3:
            key = args[0]
            q = dict(
                extra, earliest_end=args[1], latest_start=args[2], **self._key_query(info, key)
            )
            q = self._options(type, stale, read_committed, q)
            docs = self._keyed_pages(info, key, stale, "sessions", q, limit)
            return self._items(info, docs, type, "session")
        if len(args) == 4:
            q = dict(extra, earliest_end=args[2], latest_start=args[3])
            self._key_range(info, q, args[0], args[1], "key_from", "key_to")
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
        """The aggregation of one session of ``key``, or None.

        One HTTP request to the key's owner (plus, for a custom partitioner or a key serde the
        client does not know, one to ask an instance for the key's partition). Errors and
        retries as in the class docstring.
        """
        info = self._store(store)
        q = dict(self._key_query(info, key), start=session_start, end=session_end)
        q = self._options(type, stale, read_committed, q)
        doc = self._to_owner(info, key, stale, "session", q)
        _, vdec, wrapper = self._decoders(info, type)
        return decode_value(doc["value"], wrapper, vdec)

    def __enter__(self) -> QueryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<QueryClient {', '.join(map(str, self._bootstrap))}>"
