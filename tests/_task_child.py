"""A task worker for crash tests: processes a deterministic input stream and commits.

Run as ``python tests/_task_child.py PATH TOTAL COMMIT_EVERY`` (usually with TXSTORE_FAULTS set,
so that it is SIGKILLed at a named point). The same functions serve as the model the tests
compare against.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from txstore import (
    Headers,
    Serdes,
    Stores,
    ValueAndTimestamp,
    ValueTimestampHeaders,
)
from txstore.runtime.task import Task


def open_task(path: str, *, tagged: bool = True, **kwargs: Any) -> Task:
    """The task of 'counts', 'latest' and (unless ``tagged`` is False) 'tagged'."""
    budget = os.environ.get("TASK_CHILD_OVERLAY_BUDGET")
    if budget:
        kwargs.setdefault("overlay_budget_bytes", int(budget))
    task = Task(path, changelog_options={"segment_bytes": 4096}, **kwargs)
    try:
        task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            )
        )
        task.key_value_store(
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store("latest"),
                Serdes.string(),
                Serdes.long(),
            )
        )
        if not tagged:
            return task
        task.key_value_store(
            Stores.timestamped_key_value_store_with_headers_builder(
                Stores.persistent_timestamped_key_value_store_with_headers("tagged"),
                Serdes.string(),
                Serdes.string(),
            )
        )
    except BaseException:
        task.close()  # a store that cannot be opened (a damaged changelog): close the others
        raise
    return task


def process(task: Task, i: int) -> None:
    """Process input record ``i`` (read-modify-write, so double processing shows)."""
    key = f"k{i % 7}"
    task.context.timestamp = 1_000 * i
    counts = task.store("counts")
    counts.put(key, (counts.get(key) or 0) + 1)
    task.store("latest").put(key, ValueAndTimestamp(i, 1_000 * i))
    tagged = task.store("tagged")
    if i % 5 == 4:
        tagged.delete(key)
    else:
        tagged.put(
            key, ValueTimestampHeaders(f"v{i}", 1_000 * i, Headers([("i", str(i).encode())]))
        )


def model(n: int) -> dict[str, dict[str, Any]]:
    """The state of every store after processing records ``0 .. n-1`` exactly once."""
    counts: dict[str, int] = {}
    latest: dict[str, Any] = {}
    tagged: dict[str, Any] = {}
    for i in range(n):
        key = f"k{i % 7}"
        counts[key] = counts.get(key, 0) + 1
        latest[key] = ValueAndTimestamp(i, 1_000 * i)
        if i % 5 == 4:
            tagged.pop(key, None)
        else:
            tagged[key] = ValueTimestampHeaders(
                f"v{i}", 1_000 * i, Headers([("i", str(i).encode())])
            )
    return {"counts": counts, "latest": latest, "tagged": tagged}


def state(task: Task) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in ("counts", "latest", "tagged"):
        with task.store(name).all() as it:
            out[name] = {kv.key: kv.value for kv in it}
    return out


if __name__ == "__main__":
    from tests._children import process_and_commit

    process_and_commit(open_task, process, sys.argv[1:])
