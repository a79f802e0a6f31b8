"""Partitions hosted by this instance, and the per-store readers queries go through.

Threading (see also ``docs/queries.md``). A hosted partition has two guards:

* ``guard``, a re-entrant lock the **writer** holds while it processes and commits
  (:meth:`txstore.queries.Application.writer`). The overlay of uncommitted writes belongs to the
  writer thread; a *read-uncommitted* query from another thread takes the same lock for each
  point read and each iterator step, so it sees the state between two writer blocks: never a
  half-applied put, spill or commit. *Read-committed* queries never take it: they read LMDB
  committed data through short read transactions and never block the writer.
* a close gate: a read-committed (or standby) operation registers itself in ``inflight`` (a
  list; ``append`` and ``pop`` are atomic) and then checks ``closing``; closing a partition sets
  ``closing``, waits until no operation is in flight, takes ``guard`` (waiting for the
  writer's block and for read-uncommitted operations, which check ``closing`` under the guard)
  and only then closes the task. An operation that starts after that sees ``closing`` and
  raises the "migrated" error instead of touching a closed LMDB environment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from txstore.errors import (
    InvalidStateStoreError,
    StateStoreMigratedError,
    StateStoreNotAvailableError,
)
from txstore.queries.types import QueryableStoreType

__all__ = ["GONE_MESSAGE", "HostedPartition", "StoreReader"]

#: Kafka's message when a composite read meets a store that closed under it.
GONE_MESSAGE = (
    "State store is not available anymore and may have been migrated to another instance; "
    "please re-discover its location from the state metadata."
)


class HostedPartition:
    """One partition this instance hosts: ``task`` (active) or ``db`` (standby, read-only)."""

    def __init__(
        self,
        number: int,
        *,
        task: Any = None,
        db: Any = None,
        stores: dict[str, Any],
        running: Callable[[], bool],
    ) -> None:
        self.number = number
        self.task = task
        self.db = db
        self.standby = task is None
        self.stores = stores
        self.guard = threading.RLock()
        self.inflight: list[None] = []
        self.closing = False
        self._running = running
        self._readers: dict[tuple[str, str, bool], StoreReader] = {}
        self._readers_lock = threading.Lock()
        #: Each store's committed offset as of a task commit sequence (a position cache).
        self.offsets: dict[str, tuple[int, int | None]] = {}

    @property
    def task_id(self) -> str:
        """Kafka's task id of this partition (``0_<partition>``, one sub-topology)."""
        return f"0_{self.number}"

    def gone(self) -> InvalidStateStoreError:
        """The error of a read that met this partition closing."""
        if self._running():
            return StateStoreMigratedError(GONE_MESSAGE)
        return StateStoreNotAvailableError(GONE_MESSAGE)

    def reader(
        self, store_name: str, qtype: QueryableStoreType, read_committed: bool
    ) -> StoreReader:
        """The (cached) reader of ``store_name`` as ``qtype``."""
        key = (store_name, qtype.name, read_committed)
        r = self._readers.get(key)
        if r is None:
            with self._readers_lock:
                r = self._readers.get(key)
                if r is None:
                    r = StoreReader(self, self.stores[store_name], qtype, read_committed)
                    self._readers[key] = r
        return r

    def close(self, timeout: float = 60.0) -> None:
        """Stop new queries, wait for the ones in flight and for the writer's block to end,
        then close the task or database. Idempotent. Never call it from inside a writer block
        of this partition (a read waiting for that block would never drain)."""
        self.closing = True
        deadline = time.monotonic() + timeout
        self._drain(deadline)  # without the guard: reads queued behind the writer finish
        with self.guard:  # the writer's block is over; no new block can start (closing)
            self._drain(deadline)
            if self.task is not None:
                self.task.close()
            if self.db is not None:
                self.db.close()

    def _drain(self, deadline: float) -> None:
        delay = 0.0002
        while self.inflight and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def __repr__(self) -> str:
        role = "standby" if self.standby else "active"
        return f"<HostedPartition {self.number} {role}{' closing' if self.closing else ''}>"


class StoreReader:
    """How queries read one store of one hosted partition, as one queryable store type.

    ``view`` is the typed store reads go to: the writer's store (read-uncommitted, under the
    partition's ``guard``), its read-committed view, or a standby's read-only store.
    :meth:`get` takes serialized keys (the composite serializes once, to route the key).
    """

    __slots__ = ("_bget", "_convert", "_decode", "guard", "hosted", "partition", "view")

    def __init__(
        self,
        hosted: HostedPartition,
        store: Any,
        qtype: QueryableStoreType,
        read_committed: bool,
    ) -> None:
        self.hosted = hosted
        self.partition = hosted.number
        if hosted.standby:
            view = store  # a read-only partition: committed data, any thread
            guard = None
        elif read_committed:
            view = store.read_committed()
            guard = None
        else:
            view = store
            guard = hosted.guard
        self.view = view
        self.guard = guard
        self._convert = qtype.converter(store.codec.format)
        self._bget: Any = None
        self._decode: Any = None
        if qtype.kind == "key_value":
            # Read bytes once the key is serialized (the typed layer would serialize again);
            # the change-logging layer forwards reads, so bind the bytes store's method once.
            self._bget = view.bytes_store.get
            self._decode = view.decode_value

    def get(self, kb: bytes) -> Any:
        """The value of the serialized key ``kb`` (converted to the query's type), or None."""
        raw = self._gated(self._bget, kb)
        if raw is None:
            return None
        value = self._decode(raw)
        convert = self._convert
        return value if convert is None or value is None else convert(value)

    def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(view)`` under the close gate (reading uncommitted: under the guard)."""
        return self._gated(fn, self.view)

    def _gated(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)`` under the close gate; a store closed under it raises ``gone()``."""
        h = self.hosted
        guard = self.guard
        if guard is not None:
            # Reading uncommitted: the guard excludes the writer's blocks and the close (which
            # holds the guard while it closes the task), so ``closing`` is checked inside it.
            with guard:
                if h.closing:
                    raise h.gone()
                try:
                    return fn(arg)
                except InvalidStateStoreError as exc:
                    raise h.gone() from exc
        inflight = h.inflight
        inflight.append(None)
        try:
            if h.closing:
                raise h.gone()
            return fn(arg)
        except InvalidStateStoreError as exc:
            raise h.gone() from exc
        finally:
            inflight.pop()

    def convert(self, value: Any) -> Any:
        """A value of the store converted to the query's type."""
        c = self._convert
        return value if c is None or value is None else c(value)
