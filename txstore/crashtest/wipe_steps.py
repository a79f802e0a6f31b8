"""The steps of :mod:`txstore.crashtest.wipe` (recovery versus the wipe), each run in its own
process: ``python -m txstore.crashtest.wipe_steps build|crash|recover|wipe PATH [N]``.

* ``build PATH N``: a task with one timestamped key-value store with headers holding ``N``
  distinct keys, committed every 50,000 records, changelog compacted;
* ``crash PATH TAIL``: update ``TAIL`` keys and commit (the parent arms
  ``task.after_changelog_commit``, so the process is killed after the changelog commit);
* ``wipe PATH``: delete the LMDB environment, then initialize the task (replays the whole
  changelog), timed; ``recover PATH``: initialize the task as it is, timed.

Each step reports on stdout as one JSON line (:func:`~txstore.crashtest.common.emit`). This
module is not imported by the :mod:`txstore.crashtest` package, so ``python -m`` runs it once.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

from txstore.crashtest.common import emit
from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import Serdes
from txstore.types import Headers, ValueTimestampHeaders

__all__ = ["main"]

_STORE = "state"
_CHUNK = 10_000
_COMMIT_EVERY = 50_000


def _open(path: str) -> tuple[Task, KeyValueStore[str, Any]]:
    task = Task(path)
    store = task.key_value_store(
        Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store_with_headers(_STORE),
            Serdes.string(),
            Serdes.string(),
        )
    )
    return task, store


def _value(i: int, ts: int) -> ValueTimestampHeaders[str]:
    return ValueTimestampHeaders(f"{i:012d}" + "v" * 88, ts, Headers([("i", str(i).encode())]))


def _build(path: str, keys: int) -> None:
    started = time.perf_counter()
    task, store = _open(path)
    with task:
        task.initialize()
        done = 0
        while done < keys:
            n = min(_CHUNK, keys - done)
            store.put_all([(f"key{i:010d}", _value(i, i)) for i in range(done, done + n)])
            done += n
            if done % _COMMIT_EVERY == 0 or done == keys:
                task.commit(done)
        task.clean_changelogs()
    emit("built", keys=keys, seconds=time.perf_counter() - started)


def _crash(path: str, tail: int) -> None:
    task, store = _open(path)
    task.initialize()
    position = task.input_position or 0
    step = 7919  # spread the updates over the key space
    keys = max(position, 1)
    store.put_all(
        [(f"key{(j * step) % keys:010d}", _value(position + j, position + j)) for j in range(tail)]
    )
    task.commit(position + tail)  # SIGKILLed at task.after_changelog_commit (armed)
    emit("not-killed")


def _recover(path: str, wipe: bool) -> None:
    started = time.perf_counter()
    if wipe:
        shutil.rmtree(os.path.join(path, "data"))
    task, _ = _open(path)
    with task:
        report = task.initialize()
    emit("recovered", ms=(time.perf_counter() - started) * 1000, restored=report.restored[_STORE])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    op, path = args[0], args[1]
    if op == "build":
        _build(path, int(args[2]))
    elif op == "crash":
        _crash(path, int(args[2]))
    elif op in ("recover", "wipe"):
        _recover(path, op == "wipe")
    else:
        print(f"unknown step {op!r}: build, crash, recover or wipe", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
