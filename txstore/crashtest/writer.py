"""The writer process: recover, report, then process the workload and commit until killed.

Run by the driver as ``python -m txstore.crashtest.writer RUN_JSON INCARNATION``, usually with
``TXSTORE_FAULTS`` armed (:mod:`txstore.faults`). It speaks JSON lines on stdout:

1. opens the task and calls :meth:`~txstore.runtime.task.Task.initialize` (recover + restore), timed
   from before the task is opened to the end of restore; reports ``recovered`` with the input
   position, the commit sequence, the time and what was restored or rolled back;
2. waits for one line on stdin: ``go`` (process) or anything else (close and exit), so that the
   driver checks the recovered state while nothing moves;
3. processes input records from the recovered position; at each commit point writes the
   position store, commits, and reports ``committed`` (after
   :meth:`~txstore.runtime.task.Task.commit`
   returned: an acknowledged commit must survive any crash).

It never exits on its own before ``max_records`` (the driver kills it). An error is a
traceback on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
import time

import txstore.runtime.task
from txstore.crashtest.common import (
    POSITION_KEY,
    RunConfig,
    emit,
    open_task,
    write_status,
)
from txstore.crashtest.state import encode_in_memory

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config = RunConfig.load(args[0])
    incarnation = int(args[1])
    workload = config.build_workload()
    if config.restore_batch > 0 and "task.restore_batch" in os.environ.get("TXSTORE_FAULTS", ""):
        # Small restore batches make the crash land between batches of one store, not only
        # between stores. Other writers restore with the default batch, so the recovery times
        # reported are the product's.
        txstore.runtime.task.RESTORE_BATCH = config.restore_batch
    write_status(config.status_path, incarnation, "recovering")
    started = time.perf_counter()
    task, stores, position_store = open_task(config, workload)
    with task:
        report = task.initialize()
        recovery_ms = (time.perf_counter() - started) * 1000
        write_status(config.status_path, incarnation, "running")
        position = task.input_position or 0
        emit(
            "recovered",
            position=position,
            seq=task.commit_sequence,
            ms=recovery_ms,
            initialize_ms=report.seconds * 1000,
            restored=report.restored,
            rolled_back=report.rolled_back,
            discarded=report.discarded_uncommitted,
            in_memory=encode_in_memory(workload, stores),
        )
        if sys.stdin.readline().strip() != "go":
            return 0
        context = task.context
        record, process, commit_after = workload.record, workload.process, workload.commit_after
        i = position
        while i < config.max_records:
            rec = record(i)
            context.timestamp = rec.ts
            process(stores, rec)
            i += 1
            if commit_after(i - 1):
                position_store.put(POSITION_KEY, i)
                task.commit(i)
                emit("committed", position=i)
        emit("done", position=i)
    return 0


if __name__ == "__main__":
    sys.exit(main())
