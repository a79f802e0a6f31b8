"""The damage trial's child process: reopen a damaged copy of a partition and read it.

Run by the driver as ``python -m txstore.crashtest.damage_child RUN_JSON OUT [HEALTHY...]``
(``RUN_JSON`` names the damaged copy; ``HEALTHY``: the stores whose LMDB content the
healthy-store rule checks, none when the damage hit ``data/data.mdb``):

1. ``before`` (only with ``HEALTHY`` stores): read the committed content and offset of every
   store read-only (:class:`~txstore.crashtest.state.StateReader`), as any reader would;
2. ``reopen``: open a fresh :class:`~txstore.runtime.task.Task` with the workload's stores,
   :meth:`~txstore.runtime.task.Task.initialize` it, read the input position and every store
   through the task's own handles (a snapshot each; phase ``task read``; the in-memory
   stores' offsets and contents are kept: no other process sees them), close it;
3. ``read``: read every store read-only again: the state the driver compares with the model
   when the reopen succeeded, and the "after" of the healthy-store rule (skipped when the
   reopen failed and ``HEALTHY`` is empty: the damaged ``data.mdb`` would only be read again).

The content is compared read-only, as the driver checks every recovery: a task's window and
session handles hide windows past retention that are still stored, and the model holds what
is stored.

Each phase is announced as a JSON line on stdout (``{"ev": "phase", "phase": ...}``), so that
when the process dies by a signal the driver knows where. The results go to ``OUT`` as a
pickle (written whole, then renamed): the outcome of the reopen (or the exception's type,
whether it is a :class:`~txstore.errors.TxStoreError`, its message, where it was raised and
the traceback) and every store before and after. An exception in step 1 is recorded, one in
step 3 too (and is the outcome when the reopen succeeded). This module is not imported by
the :mod:`txstore.crashtest` package.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Hashable
from typing import Any

from txstore.crashtest.common import POSITION_KEY, POSITION_STORE, RunConfig, emit, open_task
from txstore.crashtest.state import StateReader
from txstore.crashtest.workload import Workload
from txstore.errors import DamagedFileError, TxStoreError

__all__ = ["main"]

#: One store's committed content: its offset and its entries (as the model holds them).
StoreState = tuple[int | None, dict[Hashable, Any]]


def _error(exc: BaseException) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "typed": isinstance(exc, TxStoreError),
        "message": str(exc),
        "where": where,
        "traceback": "".join(traceback.format_exception(exc)[-6:]),
    }


def read_all(config: RunConfig, workload: Workload) -> dict[str, StoreState]:
    """The committed content and offset of every store, read-only (a snapshot each)."""
    out: dict[str, StoreState] = {}
    with StateReader(config, workload) as reader:
        for spec in reader.specs:
            with reader.stores[spec.name].snapshot() as view:
                out[spec.name] = (view.committed_offset, spec.read(view))
        with reader.position.snapshot() as view:
            out[POSITION_STORE] = (view.committed_offset, {POSITION_KEY: view.get(POSITION_KEY)})
    return out


def reopen(config: RunConfig, workload: Workload) -> dict[str, Any]:
    """Open a fresh task on the copy, initialize it, read every store through the task's
    handles, close it; the outcome (the task's input position, or the error). A read that
    finds an entry whose checksum fails is Kafka's TaskCorruptedException: the task is closed
    and opened again, once, and its ``initialize()`` rebuilds the damaged stores from their
    changelogs (``rebuilt`` in the outcome)."""
    outcome = _reopen_once(config, workload)
    if not outcome["ok"] and outcome.get("checksum"):
        emit("phase", phase="reopen after damage")
        outcome = _reopen_once(config, workload)
    return outcome


def _reopen_once(config: RunConfig, workload: Workload) -> dict[str, Any]:
    rebuilt: list[str] = []
    try:
        task, stores, position_store = open_task(config, workload)
        with task:
            rebuilt = task.initialize().rebuilt
            emit("phase", phase="task read")
            with position_store.snapshot() as view:
                view.get(POSITION_KEY)
            entries = 0
            in_memory: dict[str, StoreState] = {}
            for spec in workload.stores():
                with stores[spec.name].snapshot() as view:
                    state = spec.read(view)
                    entries += len(state)
                if spec.in_memory:  # no other process sees it: its state is read here
                    in_memory[spec.name] = (stores[spec.name].committed_offset, state)
            input_position = task.input_position
    except Exception as exc:
        checksum = isinstance(exc, DamagedFileError) and exc.key is not None
        return {"ok": False, "error": _error(exc), "phase": "reopen", "checksum": checksum}
    return {
        "ok": True,
        "input_position": input_position,
        "entries": entries,
        "in_memory": in_memory,
        "rebuilt": rebuilt,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config = RunConfig.load(args[0])
    out_path, healthy = args[1], args[2:]
    workload = config.build_workload()
    result: dict[str, Any] = {"before": None, "before_error": None, "after": None}
    result["after_error"] = None
    if healthy:
        emit("phase", phase="before")
        try:
            result["before"] = read_all(config, workload)
        except Exception as exc:
            result["before_error"] = _error(exc)
    emit("phase", phase="reopen")
    outcome = reopen(config, workload)
    if outcome["ok"] or healthy:
        # The committed state as a reader sees it (the task's handles hide windows past
        # retention; the model holds what is stored, as the driver's checks read it).
        emit("phase", phase="read")
        try:
            result["after"] = read_all(config, workload)
        except Exception as exc:
            result["after_error"] = _error(exc)
            if outcome["ok"]:
                outcome = {"ok": False, "error": _error(exc), "phase": "read"}
    result["outcome"] = outcome
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    os.replace(tmp, out_path)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
