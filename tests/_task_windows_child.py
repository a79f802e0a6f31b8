"""A task worker with window and session stores, for crash tests (see
tests/runtime/test_task_windows.py).

``python tests/_task_windows_child.py PATH TOTAL COMMIT_EVERY`` processes input records
``input_position .. TOTAL-1`` and commits every COMMIT_EVERY records. Retention is short (two
minutes over a five-minute stream), so segments are created and dropped as stream time moves.
"""

from __future__ import annotations

import sys
from typing import Any

from txstore import (
    AggregationWithHeaders,
    Headers,
    Serdes,
    SessionWindow,
    Stores,
    ValueAndHeaders,
    Windowed,
)
from txstore.runtime.task import Task

RETENTION = 120_000
WINDOW = 60_000


def open_task(path: str) -> Task:
    task = Task(path, changelog_options={"segment_bytes": 8192})
    task.window_store(
        Stores.window_store_with_headers_builder(
            Stores.persistent_window_store_with_headers("views", RETENTION, WINDOW, False),
            Serdes.string(),
            Serdes.long(),
        )
    )
    task.window_store(
        Stores.window_store_builder(
            Stores.persistent_window_store("dups", RETENTION, WINDOW, True),
            Serdes.string(),
            Serdes.long(),
        )
    )
    task.session_store(
        Stores.session_store_with_headers_builder(
            Stores.persistent_session_store_with_headers("sessions", RETENTION),
            Serdes.string(),
            Serdes.long(),
        )
    )
    return task


def process(task: Task, i: int) -> None:
    ts = 1_000 * i
    task.context.timestamp = ts
    page = f"p{i % 5}"
    start = ts // WINDOW * WINDOW
    views = task.store("views")
    old = views.fetch(page, start)
    count = (old.value if old is not None else 0) + 1
    views.put(page, ValueAndHeaders(count, Headers([("last", str(i).encode())])), start)
    task.store("dups").put(page, i, start)
    sid = i // 10
    user = f"u{sid % 3}"
    window = SessionWindow(sid * 10_000, sid * 10_000 + 9_000)
    sessions = task.store("sessions")
    agg = sessions.fetch_session(user, window.start, window.end)
    n = (agg.aggregation if agg is not None else 0) + 1
    sessions.put(
        Windowed(user, window), AggregationWithHeaders(n, Headers([("i", bytes([i % 256]))]))
    )


def state(task: Task) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name in ("views", "dups"):
        with task.store(name).all() as it:
            out[name] = [(kv.key, kv.value) for kv in it]
    with task.store("sessions").fetch(None, None) as it:
        out["sessions"] = [(kv.key, kv.value) for kv in it]
    return out


if __name__ == "__main__":
    from tests._children import process_and_commit

    process_and_commit(open_task, process, sys.argv[1:])
