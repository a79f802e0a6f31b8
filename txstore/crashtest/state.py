"""Reading a run's committed state from another process, and checking it.

:class:`StateReader` opens the partition read-only (as any reader process would,
``txstore.open(path, readonly=True)``) with every store of the workload and the position
store. :meth:`StateReader.observe` reads one :class:`Observation`: the committed offsets of
every store from one partition snapshot before and one after, and each store's full content
from its own snapshot in between. When the before and after offsets agree and every store's
snapshot has those same offsets, no commit happened in between (every task commit moves the
position store's offset), so the observation is one committed state of the whole task.

:func:`check_state` compares an observation with the model at the observed position;
:func:`check_changelogs` checks the offsets after a recovery: every store at its changelog's
committed end, every changelog's last commit at the recovered input position.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txstore.changelog.log import FileChangelog
from txstore.crashtest.common import POSITION_KEY, POSITION_STORE, RunConfig
from txstore.crashtest.model import Check, Finding, Model, compare_store
from txstore.crashtest.workload import Workload
from txstore.runtime.database import Database
from txstore.stores.serdes import Serdes

__all__ = [
    "Observation",
    "StateReader",
    "add_in_memory",
    "check_changelogs",
    "check_state",
    "encode_in_memory",
]


@dataclass
class Observation:
    """One read of every store (see the module docstring)."""

    position: int
    offsets: dict[str, int | None]  # per store, from the partition snapshot before
    stable: bool  # one committed state of the whole task (no commit in between)
    states: dict[str, dict[Hashable, Any]]

    @property
    def entries(self) -> int:
        return sum(len(s) for s in self.states.values())


class StateReader:
    """Read-only views of every store of a run."""

    def __init__(self, config: RunConfig, workload: Workload) -> None:
        # In-memory stores live in the writer only: it reports their state after recovery.
        self.specs = [s for s in workload.stores() if not s.in_memory]
        self.db = Database(config.path, readonly=True)
        try:
            self.stores = {spec.name: spec.open_readonly(self.db) for spec in self.specs}
            self.position = self.db.key_value_store(POSITION_STORE, Serdes.string(), Serdes.long())
        except BaseException:
            self.db.close()
            raise
        self.names = [*self.stores, *workload.extra_stores(), POSITION_STORE]

    def offsets(self) -> dict[str, int | None]:
        """The committed offset of every store, from one snapshot of the partition."""
        with self.db.partition.snapshot() as snap:
            return {name: snap.committed_offset(name) for name in self.names}

    def observe(self) -> Observation:
        before = self.offsets()
        seen: dict[str, int | None] = {}
        with self.position.snapshot() as view:
            position = view.get(POSITION_KEY) or 0
            seen[POSITION_STORE] = view.committed_offset
        states = {}
        for spec in self.specs:
            with self.stores[spec.name].snapshot() as view:
                states[spec.name] = spec.read(view)
                seen[spec.name] = view.committed_offset
        stable = before == {**before, **seen} == self.offsets()
        return Observation(position, before, stable, states)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_state(workload: Workload, model: Model, obs: Observation, check: Check) -> None:
    """Compare every store of ``obs`` with ``model`` advanced to the observed position (the
    in-memory stores only when ``obs`` holds them: the writer's report of its recovery)."""
    model.advance(obs.position)
    for spec in workload.stores():
        if spec.name in obs.states or not spec.in_memory:
            compare_store(spec, obs.states[spec.name], model.stores[spec.name], check)


def _commit_seq(metadata: bytes) -> tuple[int, list[str]]:
    """The task commit sequence number and participants of a commit marker's metadata
    (``{"seq": n, "stores": [...]}``, :mod:`txstore.runtime.task`)."""
    if not metadata:
        return 0, []
    try:
        doc = json.loads(metadata)
        return int(doc["seq"]), sorted(str(s) for s in doc["stores"])
    except (ValueError, KeyError, TypeError):
        return -1, []


def check_changelogs(path: str, obs: Observation, position: int, seq: int, check: Check) -> None:
    """After a recovery: each store's committed offset is its changelog's committed end, each
    changelog's last commit is task commit ``seq`` of every store at input ``position``, and
    the position store holds ``position`` too."""
    check.checked += 1
    if obs.position != position:
        kind = "lost" if obs.position < position else "leaked"
        check.add(kind, POSITION_STORE, POSITION_KEY, str(position), str(obs.position))
    for name, offset in obs.offsets.items():
        check.checked += 1
        with FileChangelog(Path(path) / "changelog" / name, readonly=True) as log:
            end = log.committed_end_offset
            committed_at = log.last_committed_input_position
            marker_seq, participants = _commit_seq(log.last_committed_metadata)
        if (offset or 0) != end:
            # Behind its changelog: a committed range missing; ahead: data the changelog
            # does not hold as committed.
            kind = "lost" if (offset or 0) < end else "leaked"
            check.add(kind, name, "<committed offset>", f"{end} (changelog)", str(offset))
        if position and committed_at != position:
            kind = "lost" if (committed_at or 0) < position else "leaked"
            check.add(kind, name, "<changelog input position>", str(position), str(committed_at))
        if marker_seq != seq or (seq and participants != sorted(obs.offsets)):
            kind = "lost" if marker_seq < seq else "leaked"
            check.add(kind, name, "<changelog commit>", f"commit {seq} of every store",
                      f"commit {marker_seq} of {participants}")  # fmt: skip


def add_in_memory(obs: Observation, encoded: str) -> None:
    """Add to ``obs`` the in-memory stores' committed offsets and states as the writer
    reported them after its recovery (:func:`encode_in_memory`; empty: none)."""
    if not encoded:
        return
    for name, (offset, state) in pickle.loads(base64.b64decode(encoded)).items():
        obs.offsets[name] = offset
        obs.states[name] = state


def encode_in_memory(workload: Workload, stores: dict[str, Any]) -> str:
    """The writer's report of its in-memory stores, right after recovery (nothing is
    uncommitted then): each store's committed offset and full state, pickled (read by our own
    driver process)."""
    out: dict[str, tuple[int | None, dict[Hashable, Any]]] = {}
    for spec in workload.stores():
        if spec.in_memory:
            store = stores[spec.name]
            out[spec.name] = (store.committed_offset, spec.read(store))
    return base64.b64encode(pickle.dumps(out)).decode("ascii")


def describe(findings: list[Finding]) -> list[str]:
    """Findings as text lines."""
    return [str(f) for f in findings]
