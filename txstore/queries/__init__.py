"""Interactive queries (KIP-67): query state where it lives, on one instance and across many.

* :class:`Application` hosts an application's partitions on this instance, with a lifecycle,
  and gives read-only composite stores over them (:meth:`Application.store`) and discovery
  (:meth:`Application.query_metadata_for_key` and friends);
* :class:`StaticAssignment` (one host) and :class:`ZooKeeperMembership` (instances on any
  machines, through ZooKeeper) say which instance owns which
  partition;
* :func:`asgi_app` is the HTTP (JSON) query service as an ASGI application (Starlette),
  :class:`QueryServer` serves it with uvicorn; :class:`QueryClient` (sync) and
  :class:`AsyncQueryClient` (asyncio), on httpx, find a key's owner through any instance and
  query it.

See ``docs/queries.md``.

May import: ``txstore.runtime`` and below. Its modules never import
:mod:`txstore.queries.http` (this ``__init__`` re-exports :func:`asgi_app`, :class:`QueryServer`
and the clients from it), nor ``txstore.spark`` or ``txstore.crashtest``.
"""

from __future__ import annotations

from txstore.queries.application import Application
from txstore.queries.composite import CompositeKeyValueIterator, CompositeReadOnlyKeyValueStore
from txstore.queries.hosting import PartitionWriter
from txstore.queries.http.aclient import AsyncQueryClient
from txstore.queries.http.asgi import asgi_app
from txstore.queries.http.client import QueryClient
from txstore.queries.http.server import QueryServer
from txstore.queries.membership import Assignment, Membership, StaticAssignment
from txstore.queries.specs import StoreSpec
from txstore.queries.types import (
    HostInfo,
    KeyQueryMetadata,
    QueryableStoreType,
    QueryableStoreTypes,
    State,
    StoreQueryParameters,
    StreamsMetadata,
    ThreadState,
    TopicPartition,
)
from txstore.queries.windowed import CompositeReadOnlySessionStore, CompositeReadOnlyWindowStore
from txstore.queries.zookeeper import ZooKeeperMembership

__all__ = [
    "Application",
    "Assignment",
    "AsyncQueryClient",
    "CompositeKeyValueIterator",
    "CompositeReadOnlyKeyValueStore",
    "CompositeReadOnlySessionStore",
    "CompositeReadOnlyWindowStore",
    "HostInfo",
    "KeyQueryMetadata",
    "Membership",
    "PartitionWriter",
    "QueryClient",
    "QueryServer",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "State",
    "StaticAssignment",
    "StoreQueryParameters",
    "StoreSpec",
    "StreamsMetadata",
    "ThreadState",
    "TopicPartition",
    "ZooKeeperMembership",
    "asgi_app",
]
