"""The sync query client, :class:`QueryClient`, on httpx (its asyncio twin:
:mod:`txstore.queries.http.aclient`).

Both run the same logic (:mod:`txstore.queries.http.flows`, :mod:`txstore.queries.http.routing`):
they learn the metadata from any instance, compute a key's partition, send each query to its
partition's owner over pooled keep-alive connections, page through large answers, and retry an
unreachable, moved or rebalancing owner (backoff, metadata refresh) for up to
``retry_timeout`` seconds. Errors are raised as the txstore error the server names
(:class:`~txstore.errors.StateStoreMigratedError`, :class:`~txstore.errors.UnknownStateStoreError`,
:class:`~txstore.errors.NotCaughtUpError`...), or :class:`~txstore.errors.QueryServiceError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from txstore.queries.http.flows import QueryFlows
from txstore.queries.http.transport import SyncTransport
from txstore.queries.types import HostInfo, KeyQueryMetadata, StreamsMetadata
from txstore.types import KeyValue

__all__ = ["QueryClient"]


class QueryClient(QueryFlows, SyncTransport):
    """Query an application through its HTTP query services (see the module docstring).

    ``bootstrap``: one ``"host:port"`` or several; ``token``: the bearer token; ``timeout``:
    seconds per HTTP request; ``retry_timeout``: how long a query retries an unreachable,
    moved (409) or rebalancing (503) instance, re-reading the metadata between tries
    (``rebalance_wait`` is its old name); ``max_connections``: the connection pool's size.
    Thread-safe (one pool shared by the threads). Creating one is O(1) and sends nothing;
    close it (or use it in a ``with`` block) to close its connections.

    Costs: the first query, and any retried one, first reads the metadata (two HTTP requests
    to the first instance that answers: instances and stores); a key's partition is computed
    locally. Errors: a store the application does not have raises
    :class:`~txstore.errors.UnknownStateStoreError`; a partition no instance hosts (after
    ``retry_timeout``) :class:`~txstore.errors.StateStoreNotAvailableError`; a query the
    server refuses raises the error it names (:class:`~txstore.errors.InvalidArgumentError`
    for bad arguments...), else :class:`~txstore.errors.QueryServiceError` (``status`` 0: no
    instance reachable).

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

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry_timeout: float | None = None,
        rebalance_wait: float | None = None,
        max_connections: int = 16,
    ) -> None:
        wait = retry_timeout if retry_timeout is not None else rebalance_wait
        QueryFlows.__init__(self, bootstrap, retry_timeout=10.0 if wait is None else wait)
        SyncTransport.__init__(self, token=token, timeout=timeout, max_connections=max_connections)

    def request(
        self,
        host: str | HostInfo,
        path: str,
        query: dict[str, Any] | None = None,
        method: str = "GET",
        body: Any = None,
    ) -> Any:
        """One request to one instance, without routing or retries: the decoded JSON answer;
        an error answer raises its error (as queries do)."""
        h = host if isinstance(host, HostInfo) else HostInfo.parse(host)
        return self._drive(self._call(h, path, query, method, body))

    def refresh(self) -> None:
        """Re-read the metadata and the stores from any instance (two HTTP requests, retried
        as queries are)."""
        self._drive(self._retrying(lambda _: self._refresh()))

    def metadata(self) -> list[StreamsMetadata]:
        """Every instance (fresh from an instance): a :meth:`refresh`, two HTTP requests."""
        return self._drive(self._metadata_flow())

    def metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """The instances hosting ``store``: one HTTP request to any instance, uncached."""
        return self._drive(self._metadata_for_store_flow(store))

    def metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """Where ``key`` lives, as an instance computes it: one HTTP request to any instance
        (after a :meth:`refresh` the first time ``store`` is seen). Raises
        :class:`~txstore.errors.UnknownStateStoreError` for an unknown store."""
        return self._drive(self._metadata_for_key_flow(store, key))

    def stores(self) -> list[dict[str, Any]]:
        """The application's stores (name, kind, format, serdes...): one HTTP request."""
        return self._drive(self._stores_flow())

    def health(self, host: str | HostInfo) -> dict[str, Any]:
        """The ``/v1/health`` document of one instance: one HTTP request to it, not retried.

        Raises :class:`~txstore.errors.InvalidArgumentError` for a malformed ``host`` and
        :class:`~txstore.errors.QueryServiceError` (``status`` 0) if it cannot be reached.
        """
        return self._drive(self._health_flow(host))

    def get(
        self,
        store: str,
        key: Any,
        *,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
        min_position: Mapping[int, int] | None = None,
        wait: float | None = None,
    ) -> Any:
        """The value of ``key`` in key-value store ``store`` (None if absent), from its owner.

        ``min_position`` (``{partition: committed offset}``) demands an answer reflecting at
        least those commits: the owner waits up to ``wait`` seconds for them, then the client
        raises :class:`~txstore.errors.NotCaughtUpError`. The position the answer reflects is
        in :attr:`last_position`.

        One HTTP request to the key's owner (plus, for a custom partitioner or a key serde the
        client does not know, one to ask an instance for the key's partition). Errors and
        retries as in the class docstring.
        """
        return self._drive(
            self._get(
                store,
                key,
                type=type,
                stale=stale,
                read_committed=read_committed,
                min_position=min_position,
                wait=wait,
            )
        )

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
        return self._drive(
            self._range(
                store,
                key_from,
                key_to,
                reverse=reverse,
                limit=limit,
                type=type,
                stale=stale,
                read_committed=read_committed,
            )
        )

    def all(
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
    ) -> list[KeyValue[Any, Any]]:
        """Every pair of a key-value or window store, partition after partition (with
        ``min_position`` and ``wait`` as :meth:`get`).

        One HTTP request per partition, in partition order, to each partition's owner,
        stopping once ``limit`` items arrived. A partition with more than the server's
        ``max_results`` items is read page after page (one more request a page), so the answer
        is complete. Errors and retries as in the class docstring.
        """
        return self._drive(
            self._all(
                store,
                reverse=reverse,
                limit=limit,
                type=type,
                stale=stale,
                read_committed=read_committed,
                min_position=min_position,
                wait=wait,
            )
        )

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
        return self._drive(
            self._prefix_scan(
                store, prefix, limit=limit, type=type, stale=stale, read_committed=read_committed
            )
        )

    def approximate_num_entries(self, store: str, *, read_committed: bool = False) -> int:
        """The sum of the partitions' approximate entry counts.

        One HTTP request per partition, to its owner. Errors and retries as in the class
        docstring.
        """
        return self._drive(self._approximate_num_entries(store, read_committed=read_committed))

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
        return self._drive(
            self._fetch(
                store,
                *args,
                backward=backward,
                limit=limit,
                type=type,
                stale=stale,
                read_committed=read_committed,
            )
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
        return self._drive(
            self._fetch_all(
                store,
                time_from,
                time_to,
                backward=backward,
                limit=limit,
                type=type,
                stale=stale,
                read_committed=read_committed,
            )
        )

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
        return self._drive(
            self._find_sessions(
                store,
                *args,
                backward=backward,
                limit=limit,
                type=type,
                stale=stale,
                read_committed=read_committed,
            )
        )

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
        return self._drive(
            self._fetch_session(
                store,
                key,
                session_start,
                session_end,
                type=type,
                stale=stale,
                read_committed=read_committed,
            )
        )

    def __enter__(self) -> QueryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<QueryClient {', '.join(map(str, self._bootstrap))}>"
