"""The stores of a join, as builders: what :class:`~txstore.joins.StreamJoin` opens in a task,
and what a pipeline that opens its stores itself (the Spark stateful step's ``stores()``)
gives it to open.

>>> from txstore.joins import JoinWindows
>>> list(join_store_builders("j", JoinWindows.of_time_difference_without_grace(5), "left"))
['j-left', 'j-right', 'j-outer', 'j-state', 'j-out']
"""

from __future__ import annotations

from typing import Any

from txstore import Serde, Serdes, Stores
from txstore.codecs import ValueFormat
from txstore.joins.windows import JoinWindows
from txstore.stores.builders import window_supplier

__all__ = ["join_store_builders"]


def join_store_builders(
    name: str,
    windows: JoinWindows,
    kind: str,
    *,
    key_serde: Serde[Any] | None = None,
    left_serde: Serde[Any] | None = None,
    right_serde: Serde[Any] | None = None,
    persistent: bool = True,
    buffer_format: ValueFormat = ValueFormat.PLAIN_HEADERS,
) -> dict[str, Any]:
    """Store name -> builder of every store of the join ``name`` (serdes default as
    :class:`~txstore.joins.StreamJoin`'s): the buffers (plain window stores with headers
    retaining duplicates; ``buffer_format`` is a persistent buffer's stored format), the
    waiting records of left and outer joins, the state, the outputs. O(1), no I/O."""
    key = key_serde or Serdes.string()
    left = left_serde or Serdes.json()
    right = left if kind == "self" else right_serde or Serdes.json()
    retention, size = windows.retention(), windows.buffer_window_size()

    def buffer(store: str, serde: Serde[Any]) -> Any:
        if persistent:
            fmt = ValueFormat(buffer_format)
            supplier = window_supplier(store, retention, size, True, True, fmt, True)
        else:
            supplier = Stores.in_memory_window_store_with_headers(store, retention, size, True)
        return Stores.window_store_with_headers_builder(supplier, key, serde)

    def kv(store: str, value_serde: Serde[Any]) -> Any:
        supplier = (
            Stores.persistent_key_value_store(store)
            if persistent
            else Stores.in_memory_key_value_store(store)
        )
        raw_keys = Serdes.string() if store.endswith("-state") else Serdes.bytes()
        return Stores.key_value_store_builder(supplier, raw_keys, value_serde)

    out: dict[str, Any] = {}
    if kind == "self":
        out[f"{name}-buffer"] = buffer(f"{name}-buffer", left)
    else:
        out[f"{name}-left"] = buffer(f"{name}-left", left)
        out[f"{name}-right"] = buffer(f"{name}-right", right)
    if kind in ("left", "outer"):
        out[f"{name}-outer"] = kv(f"{name}-outer", Serdes.bytes())
    out[f"{name}-state"] = kv(f"{name}-state", Serdes.long())
    out[f"{name}-out"] = kv(f"{name}-out", Serdes.bytes())
    return out
