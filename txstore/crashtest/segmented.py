"""Window and session store specs: Kafka's segment expiry in the model.

The observed stream time is the largest segment time written (window start for window stores,
session end for session stores), and every segment below ``segment_id(observed - retention)``
is dropped (``docs/stores.md``); a reader in another process sees exactly the segments still
present, so the model drops the same entries. The workload's event time only moves forward,
so a model's entries, kept in first-write order, are in segment-time order too and expire from
the front.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from txstore.codecs import ValueFormat
from txstore.crashtest.specs import Rec, StoreModel, StoreSpec
from txstore.runtime.database import Database
from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes
from txstore.types import (
    Headers,
    SessionWindow,
    TimeWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    Windowed,
)

__all__ = ["EventsWindowSpec", "SessionCountSpec", "WindowCountSpec"]


def _event_order(event: str) -> tuple[int, str]:
    """``e12`` < ``e12b`` < ``e13``: events in the order the workload wrote them."""
    digits = event[1:].rstrip("b")
    return int(digits), event


def _segment_id(ts: int, interval: int) -> int:
    """``ts / interval`` truncated toward zero (Java), as Kafka's segments number them."""
    q = abs(ts) // interval
    return q if ts >= 0 else -q


class _SegmentedSpec(StoreSpec):
    segmented = True

    def __init__(self, name: str, *, retention: int) -> None:
        super().__init__(name)
        self.retention = retention
        #: Kafka's default segment interval: ``max(retention / 2, 60 s)``.
        self.segment_interval = max(retention // 2, 60_000)

    def segment_time(self, key: Any) -> int:
        raise NotImplementedError

    def advance(self, model: StoreModel, ts: int) -> None:
        """A write at segment time ``ts``: advance the observed time and drop expired
        segments (entries are in first-write order, which is segment-time order here)."""
        if ts > model.observed:
            model.observed = ts
        min_live = _segment_id(model.observed - self.retention, self.segment_interval)
        entries = model.entries
        while entries:
            key = next(iter(entries))
            if _segment_id(self.segment_time(key), self.segment_interval) >= min_live:
                break
            del entries[key]

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "retention": self.retention,
            "segment_interval": self.segment_interval,
        }


class WindowCountSpec(_SegmentedSpec):
    """Plain window store with headers: a read-modify-write count per key and window."""

    kind = "window"

    def __init__(self, name: str, *, retention: int, window_size: int) -> None:
        super().__init__(name, retention=retention)
        self.window_size = window_size

    def _supplier(self) -> Any:
        return Stores.persistent_window_store_with_headers(
            self.name, self.retention, self.window_size, False
        )

    def open(self, task: Task) -> Any:
        builder = Stores.window_store_with_headers_builder(
            self._supplier(), Serdes.string(), Serdes.long()
        )
        return task.window_store(builder)

    def open_readonly(self, db: Database) -> Any:
        return db.window_store(
            self.name,
            Serdes.string(),
            Serdes.long(),
            retention_period=self.retention,
            window_size=self.window_size,
            format=ValueFormat.PLAIN_HEADERS,
        )

    def _start(self, rec: Rec) -> int:
        return rec.ts - rec.ts % self.window_size

    def _value(self, n: int, rec: Rec) -> ValueAndHeaders[int]:
        return ValueAndHeaders(n, Headers([("i", str(rec.i).encode())]))

    def write(self, store: Any, rec: Rec) -> None:
        start = self._start(rec)
        old = store.fetch(rec.key, start)
        store.put(rec.key, self._value((old.value if old else 0) + 1, rec), start)

    def expect(self, model: StoreModel, rec: Rec) -> None:
        start = self._start(rec)
        key = Windowed(rec.key, TimeWindow(start, start + self.window_size))
        old = model.get(key)
        n = (old.value if old else 0) + 1
        model.put(key, self._value(n, rec), n)
        self.advance(model, start)

    def segment_time(self, key: Any) -> int:
        return int(key.window.start)

    def order(self, value: Any) -> int:
        return int(value.value)

    def config(self) -> dict[str, Any]:
        return dict(super().config(), format="PLAIN_HEADERS", window_size=self.window_size)


class EventsWindowSpec(_SegmentedSpec):
    """Plain window store with ``retain_duplicates``: every event of a key, kept as
    duplicates.

    Each record puts one event, or two (duplicates of one key and timestamp) for one record in
    three, at the record's timestamp, as Kafka's stream-stream joins use such stores.
    ``at_window_start=True`` puts them at the start of the record's window instead, so that
    events of different records share a key and timestamp (see ``docs/crashtest.md``: the
    duplicate sequence number restarts with every process).
    """

    kind = "window"

    def __init__(
        self, name: str, *, retention: int, window_size: int, at_window_start: bool = False
    ) -> None:
        super().__init__(name, retention=retention)
        self.window_size = window_size
        self.at_window_start = at_window_start

    def open(self, task: Task) -> Any:
        supplier = Stores.persistent_window_store(self.name, self.retention, self.window_size, True)
        builder = Stores.window_store_builder(supplier, Serdes.string(), Serdes.string())
        return task.window_store(builder)

    def open_readonly(self, db: Database) -> Any:
        return db.window_store(
            self.name,
            Serdes.string(),
            Serdes.string(),
            retention_period=self.retention,
            window_size=self.window_size,
            retain_duplicates=True,
        )

    def _start(self, rec: Rec) -> int:
        return rec.ts - rec.ts % self.window_size if self.at_window_start else rec.ts

    @staticmethod
    def _events(rec: Rec) -> list[str]:
        return [f"e{rec.i}", f"e{rec.i}b"] if rec.i % 3 == 0 else [f"e{rec.i}"]

    def write(self, store: Any, rec: Rec) -> None:
        start = self._start(rec)
        for event in self._events(rec):
            store.put(rec.key, event, start)

    def expect(self, model: StoreModel, rec: Rec) -> None:
        start = self._start(rec)
        key = Windowed(rec.key, TimeWindow(start, start + self.window_size))
        events = (*(model.get(key) or ()), *self._events(rec))
        model.put(key, events, len(events))
        self.advance(model, start)

    def read(self, view: Any) -> dict[Hashable, Any]:
        out: dict[Hashable, tuple[str, ...]] = {}
        with view.all() as it:
            for kv in it:
                out[kv.key] = (*out.get(kv.key, ()), kv.value)
        return {k: tuple(sorted(v, key=_event_order)) for k, v in out.items()}

    def segment_time(self, key: Any) -> int:
        return int(key.window.start)

    def order(self, value: Any) -> int:
        return len(value)

    def describe(self, value: Any) -> str:
        return f"{len(value)} events, last {value[-1] if value else None}"

    def config(self) -> dict[str, Any]:
        return dict(
            super().config(),
            format="PLAIN",
            window_size=self.window_size,
            retain_duplicates=True,
            at_window_start=self.at_window_start,
        )


class SessionCountSpec(_SegmentedSpec):
    """Session store: sessions of records closer than ``gap``, with their count; plain, or
    ``timestamped`` (the count as a :class:`~txstore.types.ValueAndTimestamp` with the time of
    the session's last record: ``Stores.persistent_timestamped_session_store``)."""

    kind = "session"

    def __init__(self, name: str, *, retention: int, gap: int, timestamped: bool = False) -> None:
        super().__init__(name, retention=retention)
        self.gap = gap
        self.timestamped = timestamped

    def _builder(self) -> Any:
        if self.timestamped:
            supplier = Stores.persistent_timestamped_session_store(self.name, self.retention)
            return Stores.timestamped_session_store_builder(
                supplier, Serdes.string(), Serdes.long()
            )
        supplier = Stores.persistent_session_store(self.name, self.retention)
        return Stores.session_store_builder(supplier, Serdes.string(), Serdes.long())

    def open(self, task: Task) -> Any:
        return task.session_store(self._builder())

    def open_readonly(self, db: Database) -> Any:
        return db.open_session_store(self._builder())

    def _value(self, total: int, ts: int) -> Any:
        return ValueAndTimestamp(total, ts) if self.timestamped else total

    def _count(self, value: Any) -> int:
        return int(value.value if self.timestamped else value)

    def write(self, store: Any, rec: Rec) -> None:
        with store.find_sessions(rec.key, rec.ts - self.gap, rec.ts + self.gap) as it:
            found = list(it)
        start, total = rec.ts, 1
        for kv in found:
            start = min(start, kv.key.window.start)
            total += self._count(kv.value)
            store.remove(kv.key)
        store.put(Windowed(rec.key, SessionWindow(start, rec.ts)), self._value(total, rec.ts))

    def expect(self, model: StoreModel, rec: Rec) -> None:
        # Records come in event-time order, so only the key's last session can be in reach.
        start, total = rec.ts, 1
        last = model.aux.get(rec.key)
        merged = None if last is None else model.get(last)
        if last is not None and merged is not None and last.window.end >= rec.ts - self.gap:
            start = last.window.start
            total += self._count(merged)
            model.delete(last, self._count(merged))
        key = Windowed(rec.key, SessionWindow(start, rec.ts))
        model.put(key, self._value(total, rec.ts), total)
        model.aux[rec.key] = key
        self.advance(model, rec.ts)

    def read(self, view: Any) -> dict[Hashable, Any]:
        with view.fetch(None, None) as it:
            return {kv.key: kv.value for kv in it}

    def segment_time(self, key: Any) -> int:
        return int(key.window.end)

    def order(self, value: Any) -> int:
        return self._count(value)

    def config(self) -> dict[str, Any]:
        return dict(super().config(), format=self._builder().format.name, gap=self.gap)
