"""The asyncio query client, :class:`AsyncQueryClient`: the methods of
:class:`~txstore.queries.QueryClient`, awaitable, over an ``httpx.AsyncClient`` pool (the same
routing, paging and retries: :mod:`txstore.queries.http.flows`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from txstore.queries.http.flows import QueryFlows
from txstore.queries.http.transport import AsyncTransport
from txstore.queries.types import HostInfo, KeyQueryMetadata, StreamsMetadata
from txstore.types import KeyValue

__all__ = ["AsyncQueryClient"]


class AsyncQueryClient(QueryFlows, AsyncTransport):
    """:class:`QueryClient` for asyncio: the same methods, awaitable, the same routing,
    paging and retries, over an ``httpx.AsyncClient`` pool. Use it in ``async with`` (or
    ``await client.aclose()``). Not shared between event loops.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry_timeout: float = 10.0,
        max_connections: int = 16,
    ) -> None:
        QueryFlows.__init__(self, bootstrap, retry_timeout=retry_timeout)
        AsyncTransport.__init__(self, token=token, timeout=timeout, max_connections=max_connections)

    async def refresh(self) -> None:
        """As :meth:`QueryClient.refresh`."""
        await self._drive(self._retrying(lambda _: self._refresh()))

    async def metadata(self) -> list[StreamsMetadata]:
        """As :meth:`QueryClient.metadata`."""
        return await self._drive(self._metadata_flow())

    async def metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """As :meth:`QueryClient.metadata_for_store`."""
        return await self._drive(self._metadata_for_store_flow(store))

    async def metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """As :meth:`QueryClient.metadata_for_key`."""
        return await self._drive(self._metadata_for_key_flow(store, key))

    async def stores(self) -> list[dict[str, Any]]:
        """As :meth:`QueryClient.stores`."""
        return await self._drive(self._stores_flow())

    async def health(self, host: str | HostInfo) -> dict[str, Any]:
        """As :meth:`QueryClient.health`."""
        return await self._drive(self._health_flow(host))

    async def get(
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
        """As :meth:`QueryClient.get`."""
        return await self._drive(
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

    async def range(
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
        """As :meth:`QueryClient.range`."""
        return await self._drive(
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

    async def all(
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
        """As :meth:`QueryClient.all`."""
        return await self._drive(
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

    async def prefix_scan(
        self,
        store: str,
        prefix: Any,
        *,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """As :meth:`QueryClient.prefix_scan`."""
        return await self._drive(
            self._prefix_scan(
                store, prefix, limit=limit, type=type, stale=stale, read_committed=read_committed
            )
        )

    async def approximate_num_entries(self, store: str, *, read_committed: bool = False) -> int:
        """As :meth:`QueryClient.approximate_num_entries`."""
        return await self._drive(
            self._approximate_num_entries(store, read_committed=read_committed)
        )

    async def fetch(
        self,
        store: str,
        *args: Any,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> Any:
        """As :meth:`QueryClient.fetch`."""
        return await self._drive(
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

    async def fetch_all(
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
        """As :meth:`QueryClient.fetch_all`."""
        return await self._drive(
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

    async def find_sessions(
        self,
        store: str,
        *args: Any,
        backward: bool = False,
        limit: int | None = None,
        type: str | None = None,
        stale: bool = False,
        read_committed: bool = False,
    ) -> list[KeyValue[Any, Any]]:
        """As :meth:`QueryClient.find_sessions`."""
        return await self._drive(
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

    async def fetch_session(
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
        """As :meth:`QueryClient.fetch_session`."""
        return await self._drive(
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

    async def __aenter__(self) -> AsyncQueryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncQueryClient {', '.join(map(str, self._bootstrap))}>"
