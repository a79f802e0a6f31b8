"""A task with one store of every kind, for the commit-failure tests.

``counts`` (key-value), ``views`` (window store with headers), ``dups`` (window store with
retain_duplicates) and ``sessions`` (session store with headers); every input record updates
all four, read-modify-write where the kind allows, so processing a record twice shows.

Run as ``python tests/runtime/_all_kinds.py PATH TOTAL EVERY`` it processes the input from the
task's committed position to TOTAL, committing every EVERY records. With
``ALL_KINDS_FAIL=STORE:COMMIT`` the commit marker write of STORE's changelog fails with ENOSPC
during the task's COMMIT-th commit of this run (a full disk, after half the bytes were written);
the worker then retries that commit once (which must be refused) and kills itself with SIGKILL,
leaving the files as a crash after a failed commit leaves them.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
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
    Windowed,
)
from txstore.changelog.log import FileChangelog
from txstore.errors import StorageError
from txstore.runtime.task import Task

STORES = ["counts", "dups", "sessions", "views"]  # the order a task commits them in
#: Record ``i`` has timestamp ``1000 * i``: a window and a session per 10 records, so a task
#: committing every 10 records never reopens in the middle of one (a retain_duplicates store
#: restarts its sequence numbers when reopened, as Kafka's does, and would overwrite
#: duplicates a clean run keeps). Retention keeps 3 windows: segments are dropped as stream
#: time moves.
WINDOW = 10_000
RETENTION = 30_000


def open_task(path: str | Path, **kwargs: Any) -> Task:
    kwargs.setdefault("changelog_options", {"segment_bytes": 8192})
    task = Task(path, **kwargs)
    try:
        task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            )
        )
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
    except BaseException:
        task.close()
        raise
    return task


def process(task: Task, i: int) -> None:
    """Process input record ``i``: every store is written."""
    ts = 1_000 * i
    task.context.timestamp = ts
    counts = task.store("counts")
    key = f"k{i % 7}"
    counts.put(key, (counts.get(key) or 0) + 1)
    page = f"p{i % 3}"
    start = ts // WINDOW * WINDOW
    views = task.store("views")
    old = views.fetch(page, start)
    n = (old.value if old is not None else 0) + 1
    views.put(page, ValueAndHeaders(n, Headers([("last", str(i).encode())])), start)
    task.store("dups").put(page, i, start)
    user = f"u{i % 2}"
    window = SessionWindow(start, start + WINDOW - 1_000)
    sessions = task.store("sessions")
    agg = sessions.fetch_session(user, window.start, window.end)
    total = (agg.aggregation if agg is not None else 0) + i
    sessions.put(Windowed(user, window), AggregationWithHeaders(total, Headers([("i", b"%d" % i)])))


def state(task: Task) -> dict[str, list[Any]]:
    """What every store returns (read through the task's handles)."""
    out: dict[str, list[Any]] = {}
    for name in ("counts", "views", "dups"):
        with task.store(name).all() as it:
            out[name] = [(kv.key, kv.value) for kv in it]
    with task.store("sessions").fetch(None, None) as it:
        out["sessions"] = [(kv.key, kv.value) for kv in it]
    return out


def changelog(task: Task, store: str) -> FileChangelog:
    log = next(s.changelog for s in task.db.stacks() if s.name == store)
    assert isinstance(log, FileChangelog)
    return log


class FailingWrite:
    """While installed, the ``nth`` ``os.writev`` to the changelog file of ``store`` (in a
    commit with records: 1 = the record batch, 2 = the commit marker) writes half of its bytes,
    and the write of the rest fails with ``err`` (a full disk); every other call is the real
    one. This injects a failing write, nothing else: the files are real."""

    def __init__(
        self,
        task: Task,
        store: str,
        nth: int = 2,
        err: int = errno.ENOSPC,
        raising: BaseException | None = None,
    ) -> None:
        self.log = changelog(task, store)
        self.nth = nth
        self.err = err
        self.raising = raising  # raised instead of the OSError (an interruption)
        self.calls = 0
        self._writev, self._write = os.writev, os.write

    @property
    def fired(self) -> bool:
        return self.calls >= self.nth

    def __enter__(self) -> FailingWrite:
        setattr(os, "writev", self.writev)  # noqa: B010 (a function of the os module)
        setattr(os, "write", self.write)  # noqa: B010
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(os, "writev", self._writev)  # noqa: B010
        setattr(os, "write", self._write)  # noqa: B010

    def writev(self, fd: int, parts: list[bytes]) -> int:
        if fd != self.log._fd or self.fired:
            return self._writev(fd, parts)
        self.calls += 1
        if not self.fired:
            return self._writev(fd, parts)
        data = b"".join(parts)
        return self._write(fd, data[: len(data) // 2])

    def write(self, fd: int, data: bytes) -> int:
        if fd == self.log._fd and self.fired:
            raise self.raising or OSError(self.err, os.strerror(self.err))
        return self._write(fd, data)


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt and its like: not an error of the file system."""


def main(argv: list[str]) -> None:
    path, total, every = argv[0], int(argv[1]), int(argv[2])
    fail = os.environ.get("ALL_KINDS_FAIL")
    store, nth = (fail.split(":")[0], int(fail.split(":")[1])) if fail else ("", 0)
    with open_task(path) as task:
        task.initialize()
        pos = task.input_position or 0
        commits = 0
        while pos < total:
            end = min(total, pos + every)
            for i in range(pos, end):
                process(task, i)
            commits += 1
            if commits == nth:
                with FailingWrite(task, store):
                    try:
                        task.commit(end)
                    except StorageError:
                        pass
                    else:
                        raise AssertionError("the injected write failure did not fail")
                try:
                    task.commit(end)  # the retry
                except StorageError:
                    pass
                else:
                    raise AssertionError("a retry on a changelog that failed was not refused")
                os.kill(os.getpid(), signal.SIGKILL)
            task.commit(end)
            pos = end


if __name__ == "__main__":
    main(sys.argv[1:])
