"""Store specs: one store of a crash-test workload, on both sides of the check.

A :class:`StoreSpec` opens its store (in a :class:`~txstore.runtime.task.Task`, change-logged, or
read-only in another process), applies an input record to the store (:meth:`StoreSpec.write`,
in the writer) and to a :class:`StoreModel` (:meth:`StoreSpec.expect`, the independent model),
and reads a committed view back as a dictionary comparable with the model
(:meth:`StoreSpec.read`). :meth:`StoreSpec.order` ranks two values of one key by how much
input they reflect, which tells a lost write (the store is behind the model) from a leaked
one (ahead of it).

Key-value specs are here; window and session specs are in :mod:`txstore.crashtest.segmented`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from txstore.codecs import ValueFormat
from txstore.runtime.database import Database
from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes
from txstore.types import Headers, ValueTimestampHeaders

__all__ = [
    "CountsSpec",
    "Entry",
    "LatestSpec",
    "Rec",
    "StoreModel",
    "StoreSpec",
    "segmented_available",
]


@dataclass(frozen=True, slots=True)
class Rec:
    """Input record ``i``: what every store spec applies (a
    :class:`~txstore.crashtest.workload.Workload` makes them)."""

    i: int
    key: str
    ts: int
    delete: bool
    payload: str


def segmented_available() -> bool:
    """Whether :class:`~txstore.runtime.task.Task` change-logs window and session stores."""
    return hasattr(Task, "window_store") and hasattr(Task, "session_store")


class Entry:
    """A model entry: the value (``None``: deleted, kept to classify differences) and its
    order (see :meth:`StoreSpec.order`)."""

    __slots__ = ("order", "value")

    def __init__(self, value: Any, order: int) -> None:
        self.value = value
        self.order = order

    def __repr__(self) -> str:
        return f"Entry({self.value!r}, order={self.order})"


class StoreModel:
    """The expected content of one store: key -> :class:`Entry`, in first-write order.

    ``observed`` is the observed stream time of segmented stores; ``aux`` is free for a spec's
    bookkeeping (the last session of each key, for example).
    """

    __slots__ = ("aux", "entries", "observed")

    def __init__(self) -> None:
        self.entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self.observed = -1
        self.aux: dict[Hashable, Any] = {}

    def get(self, key: Hashable) -> Any:
        """The live value of ``key``, or ``None``."""
        e = self.entries.get(key)
        return None if e is None else e.value

    def put(self, key: Hashable, value: Any, order: int) -> None:
        e = self.entries.get(key)
        if e is None:
            self.entries[key] = Entry(value, order)
        else:
            e.value, e.order = value, order

    def delete(self, key: Hashable, order: int) -> None:
        self.put(key, None, order)

    def live(self) -> dict[Hashable, Any]:
        """Every live (not deleted) key and value."""
        return {k: e.value for k, e in self.entries.items() if e.value is not None}

    def copy(self) -> StoreModel:
        out = StoreModel()
        out.entries = OrderedDict((k, Entry(e.value, e.order)) for k, e in self.entries.items())
        out.observed = self.observed
        out.aux = dict(self.aux)
        return out


class StoreSpec:
    """One store of a workload (see the module docstring). Subclasses implement every
    method but :meth:`read` and :meth:`describe`."""

    #: ``key_value``, ``window`` or ``session``.
    kind = "key_value"
    #: Whether the store drops segments (window and session stores).
    segmented = False
    #: Whether the store is in-memory: change-logged in the task and restored from its
    #: changelog on start, invisible to other processes (the writer reports its state).
    in_memory = False

    def __init__(self, name: str) -> None:
        self.name = name

    def open(self, task: Task) -> Any:
        """Open the store in ``task`` (change-logged). Called before ``task.initialize()``."""
        raise NotImplementedError

    def open_readonly(self, db: Database) -> Any:
        """Open the store in a read-only :class:`~txstore.runtime.database.Database`."""
        raise NotImplementedError

    def write(self, store: Any, rec: Rec) -> None:
        """The writer's processing of ``rec``."""
        raise NotImplementedError

    def expect(self, model: StoreModel, rec: Rec) -> None:
        """The model's processing of ``rec`` (must match :meth:`write` exactly)."""
        raise NotImplementedError

    def order(self, value: Any) -> int:
        """How much input ``value`` reflects (for one key: larger is later)."""
        raise NotImplementedError

    def read(self, view: Any) -> dict[Hashable, Any]:
        """The full content of a committed view (a snapshot), as the model holds it."""
        with view.all() as it:
            return {kv.key: kv.value for kv in it}

    def describe(self, value: Any) -> str:
        """A short text of ``value`` for failure reports."""
        text = repr(value)
        return text if len(text) <= 90 else text[:87] + "..."

    def config(self) -> dict[str, Any]:
        """What the report says about this store."""
        return {"name": self.name, "kind": self.kind}


# ---- key-value stores ----------------------------------------------------------------------


class _KeyValueSpec(StoreSpec):
    def __init__(self, name: str, *, transactional: bool = True, in_memory: bool = False) -> None:
        super().__init__(name)
        #: ``False`` writes straight to LMDB (no KIP-892 buffering): the harness then finds
        #: uncommitted writes after crashes (the hazard Kafka answers with a wipe).
        self.transactional = transactional
        self.in_memory = in_memory

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": "key_value", "format": self.format.name}
        if self.in_memory:
            out["in_memory"] = True
        return out if self.transactional else dict(out, transactional=False)

    format = ValueFormat.PLAIN


class LatestSpec(_KeyValueSpec):
    """Timestamped key-value store with headers: the latest value of each key, or deleted."""

    format = ValueFormat.HEADERS

    def open(self, task: Task) -> Any:
        supplier = (
            Stores.in_memory_timestamped_key_value_store_with_headers
            if self.in_memory
            else Stores.persistent_timestamped_key_value_store_with_headers
        )
        return task.key_value_store(
            Stores.timestamped_key_value_store_with_headers_builder(
                supplier(self.name, transactional=self.transactional),
                Serdes.string(),
                Serdes.string(),
            )
        )

    def open_readonly(self, db: Database) -> Any:
        return db.key_value_store(
            self.name, Serdes.string(), Serdes.string(), format=ValueFormat.HEADERS
        )

    @staticmethod
    def value(rec: Rec) -> ValueTimestampHeaders[str]:
        return ValueTimestampHeaders(rec.payload, rec.ts, Headers([("i", str(rec.i).encode())]))

    def write(self, store: Any, rec: Rec) -> None:
        if rec.delete:
            store.delete(rec.key)
        else:
            store.put(rec.key, self.value(rec))

    def expect(self, model: StoreModel, rec: Rec) -> None:
        if rec.delete:
            model.delete(rec.key, rec.i)
        else:
            model.put(rec.key, self.value(rec), rec.i)

    def order(self, value: Any) -> int:
        raw = value.headers.last_header("i")
        return int(raw) if raw else -1

    def describe(self, value: Any) -> str:
        return f"value of record {self.order(value)} (ts {value.timestamp})"


class CountsSpec(_KeyValueSpec):
    """Plain key-value store: a read-modify-write count of records per key."""

    def open(self, task: Task) -> Any:
        supplier = (
            Stores.in_memory_key_value_store
            if self.in_memory
            else Stores.persistent_key_value_store
        )
        return task.key_value_store(
            Stores.key_value_store_builder(
                supplier(self.name, transactional=self.transactional),
                Serdes.string(),
                Serdes.long(),
            )
        )

    def open_readonly(self, db: Database) -> Any:
        return db.key_value_store(self.name, Serdes.string(), Serdes.long())

    def write(self, store: Any, rec: Rec) -> None:
        store.put(rec.key, (store.get(rec.key) or 0) + 1)

    def expect(self, model: StoreModel, rec: Rec) -> None:
        n = (model.get(rec.key) or 0) + 1
        model.put(rec.key, n, n)

    def order(self, value: Any) -> int:
        return int(value)
