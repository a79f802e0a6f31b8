"""The reader process: reads the committed state in a loop while the writer runs and crashes.

Run by the driver as ``python -m txstore.crashtest.reader RUN_JSON``; stops when a line (or
end of file) arrives on stdin, then prints a ``summary`` JSON line. Each round reads the writer
status, an :class:`~txstore.crashtest.state.Observation` of every store, and the status again:

* always: every store's committed offset and the committed input position only move forward
  (a step back is counted as lost: the reader saw committed data that is gone);
* when the observation is *stable* (one committed state of the whole task) and the writer was
  ``running`` in the same incarnation before and after: every store equals the model at the
  observed position, which must be a commit point: a whole committed state, nothing more;
* otherwise, while a writer recovers, the stores are restored one after another, each in
  batches, so a reader may see a mix of two committed states: counted (``mixed_in_recovery``),
  not a failure. An observation that is not stable while the writer runs (a commit landed
  in between) is simply retried (``torn``).

The reader reopens its read-only handle every :data:`REOPEN_SECONDS`.
"""

from __future__ import annotations

import select
import sys
import time
from typing import Any

from txstore.crashtest.common import RunConfig, emit, read_status
from txstore.crashtest.model import Check, Model
from txstore.crashtest.state import Observation, StateReader, check_state
from txstore.crashtest.workload import Workload

__all__ = ["REOPEN_SECONDS", "ReaderStats", "main", "run_reader"]

#: The reader opens a fresh read-only handle this often: a long-lived read-only process
#: keeps an LMDB handle for every segment database it has seen, dropped or not, and fails with
#: ``MDB_DBS_FULL`` once they exceed ``max_dbs`` (docs/crashtest.md, "Limits").
REOPEN_SECONDS = 1.0


class ReaderStats:
    """What the reader counted (its ``summary`` line)."""

    def __init__(self) -> None:
        self.rounds = 0
        self.checked_states = 0
        self.entries = 0
        self.torn = 0
        self.in_recovery = 0
        self.mixed_in_recovery = 0
        self.max_position = 0
        self.reopened = 0
        self.check = Check()

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "checked_states": self.checked_states,
            "entries": self.entries,
            "torn": self.torn,
            "in_recovery": self.in_recovery,
            "mixed_in_recovery": self.mixed_in_recovery,
            "max_position": self.max_position,
            "reopened": self.reopened,
            "lost": self.check.lost,
            "leaked": self.check.leaked,
            "findings": [str(f) for f in self.check.findings],
        }


def _stop_requested(timeout: float) -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready)


def run_reader(config: RunConfig, pause: float = 0.005) -> ReaderStats:
    """Read and check until asked to stop (see the module docstring)."""
    workload = config.build_workload()
    model = Model(workload)
    stats = ReaderStats()
    last_offsets: dict[str, int | None] = {}
    reader = StateReader(config, workload)
    opened = time.perf_counter()
    try:
        while not _stop_requested(pause):
            if time.perf_counter() - opened > REOPEN_SECONDS:
                reader.close()
                reader = StateReader(config, workload)
                opened = time.perf_counter()
                stats.reopened += 1
            before = read_status(config.status_path)
            obs = reader.observe()
            after = read_status(config.status_path)
            _check_round(workload, model, stats, last_offsets, obs, before, after)
    finally:
        reader.close()
    return stats


def _check_round(
    workload: Workload,
    model: Model,
    stats: ReaderStats,
    last_offsets: dict[str, int | None],
    obs: Observation,
    before: tuple[int, str] | None,
    after: tuple[int, str] | None,
) -> None:
    stats.rounds += 1
    for name, offset in obs.offsets.items():
        previous = last_offsets.get(name)
        if previous is not None and (offset is None or offset < previous):
            stats.check.add("lost", name, "<committed offset>", f">= {previous}", str(offset))
        last_offsets[name] = offset if offset is not None else previous
    if obs.position < stats.max_position:
        stats.check.add("lost", "input", "position", f">= {stats.max_position}",
                        str(obs.position))  # fmt: skip
    stats.max_position = max(stats.max_position, obs.position)
    running = before == after and before is not None and before[1] == "running"
    if not running:
        stats.in_recovery += 1
        probe = Check()
        check_state(workload, model, obs, probe)
        stats.mixed_in_recovery += 0 if probe.ok else 1
        return
    if not obs.stable:
        stats.torn += 1
        return
    check = Check()
    if not workload.is_commit_position(obs.position):
        check.add("leaked", "input", "position", "a commit point", str(obs.position))
    check_state(workload, model, obs, check)
    stats.checked_states += 1
    stats.entries += check.checked
    if not check.ok:
        emit("violation", position=obs.position, findings=[str(f) for f in check.findings])
    stats.check.merge(check)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config = RunConfig.load(args[0])
    started = time.perf_counter()
    stats = run_reader(config)
    emit("summary", seconds=time.perf_counter() - started, **stats.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
