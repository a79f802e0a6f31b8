"""A task with one in-memory store of every kind and format, and one persistent store.

Each in-memory store is named ``m_<kind>_<format>``; ``p_counts`` is a persistent key-value
store (its name sorts before theirs, so a fault between two changelog commits leaves the
persistent store's changelog committed and the in-memory ones not). Every input record writes
every store: a read-modify-write count in ``p_counts`` and in each key-value store, a window
count per key and window, a session per record (the key's last session removed and merged),
so a record applied twice or lost shows.

Run as ``python tests/runtime/_in_memory_kinds.py PATH TOTAL EVERY`` it processes the input
from the task's committed position to TOTAL, committing every EVERY records; with
``IN_MEMORY_SLOW=SECONDS`` it sleeps that long after each record (so a parent can SIGKILL it
mid-processing) and prints each committed position on stdout.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make this checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from txstore import (
    AggregationWithHeaders,
    Headers,
    Serdes,
    SessionWindow,
    Stores,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.runtime.task import Task

RETENTION = 60_000
WINDOW = 10_000
PERSISTENT = "p_counts"


@dataclass(frozen=True)
class Kind:
    """One in-memory store kind and format: its name, the supplier + builder factory, and
    the value wrapper of its format."""

    name: str
    kind: str  # key_value, window, session
    fmt: ValueFormat
    builder: Callable[[str], Any]

    def wrap(self, n: int, i: int, ts: int) -> Any:
        headers = Headers([("i", str(i).encode())])
        if self.fmt is ValueFormat.PLAIN:
            return n
        if self.fmt is ValueFormat.TIMESTAMPED:
            return ValueAndTimestamp(n, ts)
        if self.fmt is ValueFormat.HEADERS:
            return ValueTimestampHeaders(n, ts, headers)
        if self.kind == "session":
            return AggregationWithHeaders(n, headers)
        return ValueAndHeaders(n, headers)

    def unwrap(self, value: Any) -> int:
        if value is None:
            return 0
        if self.fmt is ValueFormat.PLAIN:
            return int(value)
        if isinstance(value, AggregationWithHeaders):
            return int(value.aggregation)
        return int(value.value)


S, L = Serdes.string(), Serdes.long()
_KINDS = [
    Kind("m_kv_plain", "key_value", ValueFormat.PLAIN,
         lambda n: Stores.key_value_store_builder(Stores.in_memory_key_value_store(n), S, L)),
    Kind("m_kv_ts", "key_value", ValueFormat.TIMESTAMPED,
         lambda n: Stores.timestamped_key_value_store_builder(
             Stores.in_memory_timestamped_key_value_store(n), S, L)),
    Kind("m_kv_headers", "key_value", ValueFormat.HEADERS,
         lambda n: Stores.timestamped_key_value_store_with_headers_builder(
             Stores.in_memory_timestamped_key_value_store_with_headers(n), S, L)),
    Kind("m_win_plain", "window", ValueFormat.PLAIN,
         lambda n: Stores.window_store_builder(
             Stores.in_memory_window_store(n, RETENTION, WINDOW, False), S, L)),
    Kind("m_win_ts", "window", ValueFormat.TIMESTAMPED,
         lambda n: Stores.timestamped_window_store_builder(
             Stores.in_memory_timestamped_window_store(n, RETENTION, WINDOW, False), S, L)),
    Kind("m_win_ts_headers", "window", ValueFormat.HEADERS,
         lambda n: Stores.timestamped_window_store_with_headers_builder(
             Stores.in_memory_timestamped_window_store_with_headers(n, RETENTION, WINDOW, False),
             S, L)),
    Kind("m_win_headers", "window", ValueFormat.PLAIN_HEADERS,
         lambda n: Stores.window_store_with_headers_builder(
             Stores.in_memory_window_store_with_headers(n, RETENTION, WINDOW, False), S, L)),
    Kind("m_ses_plain", "session", ValueFormat.PLAIN,
         lambda n: Stores.session_store_builder(
             Stores.in_memory_session_store(n, RETENTION), S, L)),
    Kind("m_ses_headers", "session", ValueFormat.PLAIN_HEADERS,
         lambda n: Stores.session_store_with_headers_builder(
             Stores.in_memory_session_store_with_headers(n, RETENTION), S, L)),
    Kind("m_ses_ts", "session", ValueFormat.TIMESTAMPED,
         lambda n: Stores.timestamped_session_store_builder(
             Stores.in_memory_timestamped_session_store(n, RETENTION), S, L)),
    Kind("m_ses_ts_headers", "session", ValueFormat.HEADERS,
         lambda n: Stores.timestamped_session_store_with_headers_builder(
             Stores.in_memory_timestamped_session_store_with_headers(n, RETENTION), S, L)),
]  # fmt: skip
KINDS = {k.name: k for k in _KINDS}


def open_task(path: str | Path, kinds: list[str] | None = None, **kwargs: Any) -> Task:
    """A task with the persistent store and the in-memory stores ``kinds`` (all: None)."""
    kwargs.setdefault("changelog_options", {"segment_bytes": 8192})
    task = Task(path, **kwargs)
    try:
        task.key_value_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store(PERSISTENT), S, L)
        )
        for name in kinds or list(KINDS):
            task.db.open_store(KINDS[name].builder(name))
    except BaseException:
        task.close()
        raise
    return task


def process(task: Task, i: int) -> None:
    """Input record ``i`` (timestamp ``1000 * i``) written to every store of ``task``."""
    ts = 1_000 * i
    task.context.timestamp = ts
    key = f"k{i % 5}"
    counts = task.store(PERSISTENT)
    counts.put(key, (counts.get(key) or 0) + 1)
    for name in task.store_names:
        if name == PERSISTENT:
            continue
        kind, store = KINDS[name], task.store(name)
        if kind.kind == "key_value":
            if i % 11 == 10:
                store.delete(key)
            else:
                store.put(key, kind.wrap(kind.unwrap(store.get(key)) + 1, i, ts))
        elif kind.kind == "window":
            start = ts - ts % WINDOW
            n = kind.unwrap(store.fetch(key, start)) + 1
            store.put(key, kind.wrap(n, i, ts), start)
        else:
            start, total = ts, 1
            with store.find_sessions(key, ts - 5_000, ts) as it:
                found = list(it)
            for kv in found:
                start = min(start, kv.key.window.start)
                total += kind.unwrap(kv.value)
                store.remove(kv.key)
            store.put(Windowed(key, SessionWindow(start, ts)), kind.wrap(total, i, ts))


def state(task: Task) -> dict[str, list[Any]]:
    """What every store of ``task`` returns, in iteration order."""
    out: dict[str, list[Any]] = {}
    for name in task.store_names:
        store = task.store(name)
        kind = "key_value" if name == PERSISTENT else KINDS[name].kind
        with store.fetch(None, None) if kind == "session" else store.all() as it:
            out[name] = [(kv.key, kv.value) for kv in it]
    return out


def main(argv: list[str]) -> None:
    path, total, every = argv[0], int(argv[1]), int(argv[2])
    pause = float(os.environ.get("IN_MEMORY_SLOW", "0"))
    with open_task(path) as task:
        task.initialize()
        pos = task.input_position or 0
        while pos < total:
            end = min(total, pos + every)
            for i in range(pos, end):
                process(task, i)
                if pause:
                    time.sleep(pause)
            task.commit(end)
            print(end, flush=True)
            pos = end


if __name__ == "__main__":
    main(sys.argv[1:])
