"""Workloads: a deterministic, seeded input stream, the stores it writes, and its model.

A :class:`Workload` turns input record ``i`` into a :class:`~txstore.crashtest.specs.Rec`
(key, event time, whether it deletes, a payload), a pure function of the seed and ``i``. Each
store of the workload is a :class:`~txstore.crashtest.specs.StoreSpec`, which knows how to open
the store in a :class:`~txstore.runtime.task.Task` (change-logged) or read-only in another
process, how the writer applies a record to it, and how the model applies the same record to
plain dictionaries. The commit points are a pure function of ``i`` as well, so the state
committed at input position ``n`` is known without looking at any store: the model applies
records ``0 .. n-1``.

To crash-test your own stores, subclass :class:`Workload` (``stores`` and maybe ``record``)
and run ``txstore crashtest --workload your.module:YourWorkload``; see ``docs/crashtest.md``.

>>> w = StandardWorkload(seed=7, keys=10)
>>> w.record(3) == StandardWorkload(seed=7, keys=10).record(3)
True
>>> [s.name for s in w.stores()][:2]
['latest', 'counts']
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from txstore.crashtest.segmented import EventsWindowSpec, SessionCountSpec, WindowCountSpec
from txstore.crashtest.specs import (
    CountsSpec,
    LatestSpec,
    Rec,
    StoreModel,
    StoreSpec,
    segmented_available,
)
from txstore.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_WORKLOAD",
    "Rec",
    "StandardWorkload",
    "Workload",
    "load_workload",
    "mix64",
]

#: The workload ``txstore crashtest`` runs unless told otherwise.
DEFAULT_WORKLOAD = "txstore.crashtest.workload:StandardWorkload"

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    """SplitMix64's finalizer: a fast, well-mixed 64-bit hash of ``x``.

    >>> mix64(0) != mix64(1)
    True
    """
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class Workload:
    """Base class: the record stream, the commit points and the stores.

    Subclasses override :meth:`stores` (and :meth:`record` for another stream). A workload
    is rebuilt in the writer and reader processes from its import path and
    :meth:`params`, so its constructor takes only JSON-able keyword arguments.
    """

    #: Event time of record 0 and the event-time step between records (milliseconds).
    T0 = 1_700_000_000_000
    STEP_MS = 100

    def __init__(
        self,
        seed: int = 1,
        *,
        keys: int = 500,
        value_bytes: int = 200,
        commit_every: int = 50,
        delete_every: int = 8,
    ) -> None:
        for label, value in (
            ("keys", keys),
            ("value_bytes", value_bytes),
            ("commit_every", commit_every),
            ("delete_every", delete_every),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"workload {label} must be an int >= 1, got {value!r}")
        self.seed = int(seed)
        self.keys = keys
        self.value_bytes = value_bytes
        self.commit_every = commit_every
        self.delete_every = delete_every
        self._salt = mix64(self.seed) & ~0xFFFFFFFF
        self._commit_salt = mix64(self.seed ^ 0x5A5A5A5A)
        self._specs: list[StoreSpec] | None = None

    def params(self) -> dict[str, Any]:
        """Keyword arguments that rebuild this workload (the seed apart)."""
        return {
            "keys": self.keys,
            "value_bytes": self.value_bytes,
            "commit_every": self.commit_every,
            "delete_every": self.delete_every,
        }

    # ---- the stream ---------------------------------------------------------------------

    def record(self, i: int) -> Rec:
        """Input record ``i``: a pure function of the seed and ``i``. O(value_bytes)."""
        h = mix64(self._salt ^ i)
        key = f"k{h % self.keys:05d}"
        delete = (h >> 40) % self.delete_every == 0
        filler = f"{h:016x}"
        payload = f"{i}:" + filler * (self.value_bytes // 16 + 1)
        return Rec(i, key, self.T0 + i * self.STEP_MS, delete, payload[: self.value_bytes])

    def commit_after(self, i: int) -> bool:
        """Whether the writer commits right after processing record ``i`` (input position
        ``i + 1``): on average every ``commit_every`` records, at varying distances."""
        return self.commit_every == 1 or mix64(self._commit_salt ^ i) % self.commit_every == 0

    def next_commit(self, position: int) -> int:
        """The first commit position after ``position``."""
        i = position
        while not self.commit_after(i):
            i += 1
        return i + 1

    def is_commit_position(self, position: int) -> bool:
        """Whether a commit can leave the input at ``position`` (0: nothing committed)."""
        return position == 0 or self.commit_after(position - 1)

    # ---- stores -------------------------------------------------------------------------

    def make_stores(self) -> list[StoreSpec]:
        """The store specs of this workload (override this one)."""
        raise NotImplementedError

    def stores(self) -> list[StoreSpec]:
        """The store specs, built once."""
        if self._specs is None:
            self._specs = self.make_stores()
            names = [s.name for s in self._specs]
            if len(set(names)) != len(names):
                raise InvalidArgumentError(f"workload store names repeat: {names}")
        return self._specs

    def extra_stores(self) -> list[str]:
        """Stores the task holds besides the specs' (opened by a spec's ``open``, such as a
        join's buffers): checked for their offsets and commit markers, not their content."""
        return []

    @property
    def segmented(self) -> bool:
        """Whether a store drops segments (window and session stores)."""
        return any(s.segmented for s in self.stores())

    def process(self, stores: Mapping[str, Any], rec: Rec) -> None:
        """The writer's processing of input record ``rec`` (the caller sets the record
        context and commits)."""
        for spec in self.stores():
            spec.write(stores[spec.name], rec)

    def apply(self, model: Mapping[str, StoreModel], rec: Rec) -> None:
        """The model's processing of ``rec``: what :meth:`process` does, on dictionaries."""
        for spec in self.stores():
            spec.expect(model[spec.name], rec)


class StandardWorkload(Workload):
    """The default workload: every store kind and format the task can change-log.

    * ``latest``: timestamped key-value store with headers; each record puts the key's value
      (payload, event time, headers naming the record) or, one record in ``delete_every``,
      deletes it;
    * ``counts``: plain key-value store; read-modify-write count per key (so a record applied
      twice, or lost, shows);
    * ``clicks``: plain window store with headers, counting records per key and window
      (read-modify-write);
    * ``events``: window store with ``retain_duplicates``, keeping every event (one or two
      per record, at the record's timestamp; ``events_at_window_start=True`` puts them at the
      window start, see :class:`~txstore.crashtest.segmented.EventsWindowSpec`);
    * ``sessions``: session store merging records of a key closer than the inactivity gap,
      with their count (find, remove, put); ``ts_sessions`` the same in a timestamped session
      store (the count with the time of the session's last record);
    * ``mem_latest`` and ``mem_counts`` (``in_memory=True``; ``txstore crashtest`` sets it):
      ``latest`` and ``counts`` as in-memory stores, change-logged and restored from their
      changelogs on start; the writer reports their state after each recovery, and a damage
      trial's child reads them in the task it reopened (no other process sees them).

    The segmented stores' retention is short (two minutes of event time, 1,200 records), so
    segments expire and are dropped while the harness runs.

    ``transactional=False`` opens the key-value stores without KIP-892 write buffering (writes
    go straight to LMDB): what a store without transactions leaves after a crash, which the
    harness reports as leaked. ``segmented``: ``"auto"`` (default) adds the window and session
    stores when :class:`~txstore.runtime.task.Task` supports them; ``True`` requires them; ``False``
    leaves them out.
    """

    #: Window size, retention and session gap of the segmented stores (milliseconds).
    WINDOW_MS = 10_000
    RETENTION_MS = 120_000
    SESSION_GAP_MS = 5_000

    def __init__(
        self,
        seed: int = 1,
        *,
        segmented: bool | str = "auto",
        events_at_window_start: bool = False,
        transactional: bool = True,
        in_memory: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(seed, **kwargs)
        self.transactional = bool(transactional)
        self.in_memory = bool(in_memory)
        self.events_at_window_start = bool(events_at_window_start)
        if segmented not in (True, False, "auto"):
            raise InvalidArgumentError(f"segmented must be true, false or auto: {segmented!r}")
        if segmented is True and not segmented_available():
            raise InvalidArgumentError(
                "this txstore's Task does not change-log window and session stores yet "
                "(Task.window_store / Task.session_store); run with segmented=False"
            )
        self.with_segmented = segmented_available() if segmented == "auto" else bool(segmented)

    def params(self) -> dict[str, Any]:
        return dict(
            super().params(),
            segmented=self.with_segmented,
            events_at_window_start=self.events_at_window_start,
            transactional=self.transactional,
            in_memory=self.in_memory,
        )

    def make_stores(self) -> list[StoreSpec]:
        tx = self.transactional
        specs: list[StoreSpec] = [
            LatestSpec("latest", transactional=tx),
            CountsSpec("counts", transactional=tx),
        ]
        if self.in_memory:
            specs += [
                LatestSpec("mem_latest", transactional=tx, in_memory=True),
                CountsSpec("mem_counts", transactional=tx, in_memory=True),
            ]
        if self.with_segmented:
            r, w = self.RETENTION_MS, self.WINDOW_MS
            specs += [
                WindowCountSpec("clicks", retention=r, window_size=w),
                EventsWindowSpec(
                    "events",
                    retention=r,
                    window_size=w,
                    at_window_start=self.events_at_window_start,
                ),
                SessionCountSpec("sessions", retention=r, gap=self.SESSION_GAP_MS),
                SessionCountSpec(
                    "ts_sessions", retention=r, gap=self.SESSION_GAP_MS, timestamped=True
                ),
            ]
        return specs


def load_workload(path: str, seed: int, params: Mapping[str, Any] | None = None) -> Workload:
    """Build the workload ``module:Class`` (or ``module:factory``) with ``seed`` and
    ``params``.

    >>> load_workload(DEFAULT_WORKLOAD, 3, {"keys": 5}).keys
    5
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgumentError(f"workload must be 'module:Class', got {path!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgumentError(f"cannot load workload {path!r}: {exc}") from exc
    workload = factory(seed, **dict(params or {}))
    if not isinstance(workload, Workload):
        raise InvalidArgumentError(f"{path!r} did not build a txstore.crashtest Workload")
    return workload
