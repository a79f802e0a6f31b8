"""What the driver, the writer and the reader processes share: the run's configuration, the
harness's position store, the writer status file and the JSON-lines channel.

**The position store.** Besides the workload's stores, the writer keeps a plain key-value
store, :data:`POSITION_STORE`, holding the input position under :data:`POSITION_KEY`; it is
written just before every commit, so it is committed with the data in the same task commit
(one LMDB transaction). A reader therefore learns from the stores alone which committed state
it is looking at, and checks every other store against the model at that position.

**The status file.** The writer replaces ``status.json`` (atomically) with its incarnation
number and phase, ``recovering`` before it opens the task and ``running`` once
:meth:`~txstore.runtime.task.Task.initialize` returned. A reader that reads the same ``running``
status
before and after its reads knows that no recovery ran in between.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from txstore.crashtest.workload import Workload, load_workload
from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes

__all__ = [
    "POSITION_KEY",
    "POSITION_STORE",
    "RunConfig",
    "emit",
    "open_task",
    "read_status",
    "write_status",
]

POSITION_STORE = "crashtest_position"
POSITION_KEY = "position"


@dataclass
class RunConfig:
    """The part of the configuration the child processes need (written as ``run.json``)."""

    path: str
    workload: str
    seed: int
    params: dict[str, Any] = field(default_factory=dict)
    overlay_budget_bytes: int = 16 * 1024
    segment_bytes: int = 64 * 1024
    restore_batch: int = 16
    sync: bool = True
    max_records: int = 10**12

    @property
    def status_path(self) -> Path:
        return Path(self.path).parent / "status.json"

    def save(self, file: Path) -> None:
        file.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, file: str | os.PathLike[str]) -> RunConfig:
        return cls(**json.loads(Path(file).read_text()))

    def build_workload(self) -> Workload:
        return load_workload(self.workload, self.seed, self.params)


def open_task(config: RunConfig, workload: Workload) -> tuple[Task, dict[str, Any], Any]:
    """Open the writer's task: the workload's stores and the position store (not yet
    initialized)."""
    task = Task(
        config.path,
        sync=config.sync,
        overlay_budget_bytes=config.overlay_budget_bytes,
        changelog_options={"segment_bytes": config.segment_bytes},
    )
    try:
        stores = {spec.name: spec.open(task) for spec in workload.stores()}
        position = task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store(POSITION_STORE), Serdes.string(), Serdes.long()
            )
        )
    except BaseException:
        task.close()
        raise
    return task, stores, position


def write_status(path: Path, incarnation: int, phase: str) -> None:
    """Atomically replace the writer status file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"incarnation": incarnation, "phase": phase}))
    os.replace(tmp, path)


def read_status(path: Path) -> tuple[int, str] | None:
    """``(incarnation, phase)``, or ``None`` before the first writer."""
    try:
        doc = json.loads(path.read_text())
        return int(doc["incarnation"]), str(doc["phase"])
    except (OSError, ValueError, KeyError):
        return None


def emit(event: str, **fields: Any) -> None:
    """Write one event to the driver (a JSON line on stdout, flushed)."""
    sys.stdout.write(json.dumps({"ev": event, **fields}) + "\n")
    sys.stdout.flush()
