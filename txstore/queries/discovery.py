"""Discovery: what an assignment says about where stores and keys live (Kafka's metadata).

Pure functions of an :class:`~txstore.queries.membership.Assignment`, behind
:meth:`Application.metadata_for_all_streams_clients
<txstore.queries.Application.metadata_for_all_streams_clients>` and
:meth:`Application.query_metadata_for_key <txstore.queries.Application.query_metadata_for_key>`.

>>> from txstore.queries.membership import Assignment
>>> a = Assignment.from_json({"num_partitions": 2, "instances": {
...     "h:1": {"active": [0], "standby": [1]}, "h:2": {"active": [1]}}})
>>> m = instance_metadata(a, HostInfo("h", 1), frozenset({"counts"}), "words")
>>> sorted(tp.partition for tp in m.topic_partitions), sorted(m.standby_state_store_names)
([0], ['counts'])
>>> key_metadata(a, 1).active_host
HostInfo(host='h', port=2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.queries.membership import Assignment
from txstore.queries.types import HostInfo, KeyQueryMetadata, StreamsMetadata, TopicPartition

__all__ = ["instance_metadata", "key_metadata", "key_partition"]


def instance_metadata(
    a: Assignment, host: HostInfo, store_names: frozenset[str], topic: str
) -> StreamsMetadata:
    """What ``host`` hosts under ``a``: its active and standby partitions of ``topic`` and
    their stores (``store_names`` where the assignment does not name a host's stores)."""
    names = store_names if a.stores is None else a.stores.get(host, frozenset())
    active = a.active_partitions(host)
    standby = a.standby_partitions(host)
    return StreamsMetadata(
        host,
        names if active else frozenset(),
        frozenset(TopicPartition(topic, p) for p in active),
        names if standby else frozenset(),
        frozenset(TopicPartition(topic, p) for p in standby),
    )


def key_partition(
    key: Any,
    num_partitions: int,
    *,
    topic: str,
    serializer: Any,
    partitioner: Callable[..., Any] | None,
    route: Callable[[bytes, int], int],
) -> int:
    """The partition of ``key``: ``partitioner(topic, key, None, num_partitions)`` (an int or
    a set holding exactly one partition), or without a partitioner ``route(serialized key,
    num_partitions)``, ``serializer`` being a serde or a ``key -> bytes`` function."""
    n = num_partitions
    if partitioner is not None:
        result = partitioner(topic, key, None, n)
        if isinstance(result, int) and not isinstance(result, bool):
            partition = result
        elif isinstance(result, (set, frozenset)) and len(result) == 1:
            (partition,) = result
        else:
            raise InvalidArgumentError(
                "The partitions returned by StreamPartitioner#partitions method when used "
                "for fetching KeyQueryMetadata for key should be a singleton set"
            )
        if not 0 <= partition < n:
            raise InvalidArgumentError(f"the partitioner returned {partition}, not in 0..{n - 1}")
        return partition
    fn = getattr(serializer, "serialize", serializer)
    kb = fn(key)
    if not isinstance(kb, bytes):
        raise InvalidTypeError(f"the key serializer must return bytes, got {kb!r:.60}")
    return route(kb, n)


def key_metadata(a: Assignment, partition: int) -> KeyQueryMetadata:
    """The active host (``HostInfo.UNAVAILABLE`` if none) and standby hosts of ``partition``."""
    active = a.active.get(partition, HostInfo.UNAVAILABLE)
    return KeyQueryMetadata(active, frozenset(a.standby.get(partition, ())), partition)
