"""Windowed stream-stream joins inside a task (Kafka's ``KStreamKStreamJoin``).

Owns :class:`JoinWindows` and :class:`StreamJoin` (inner, left, outer and self-joins whose
buffers are plain window stores with headers). It sits above the public ``txstore`` API and
may import ``txstore`` and the layers below it; ``queries/``, ``spark/``, ``crashtest/`` and
the layers above may import it. docs/joins.md explains the buffers and the emission rule.
"""

from __future__ import annotations

from txstore.joins.join import (
    JoinedRecord,
    Joiner,
    JoinKind,
    JoinRecord,
    StreamJoin,
    default_joiner,
    left,
    right,
)
from txstore.joins.stores import join_store_builders
from txstore.joins.windows import JoinWindows

__all__ = [
    "JoinKind",
    "JoinRecord",
    "JoinWindows",
    "JoinedRecord",
    "Joiner",
    "StreamJoin",
    "default_joiner",
    "join_store_builders",
    "left",
    "right",
]
