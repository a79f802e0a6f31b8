"""The executor side of the stateful step: one partition's records in that partition's Task.

A Spark task of the step runs in a Python worker. It takes the :class:`~txstore.runtime.task.Task`
of its partition (opening, recovering and restoring it the first time), and:

* when the Task's input position is past the micro-batch id, the batch was already applied
  (a replay after a failure, or a second attempt that lost the race): nothing is written;
* otherwise it hands the records to the processor, then commits the Task with
  ``batch_id + 1`` as the input position, and the processor's output in the outbox store in
  the same commit; an exception anywhere before the commit aborts the Task (the attempt leaves
  nothing) and fails the Spark task;
* in both cases it writes the batch's output file from the outbox if it is not there yet.

**Open Tasks are kept across micro-batches** in the worker (Spark reuses Python workers,
``spark.python.worker.reuse``, the default). Another worker that needs a partition held open by
an idle one asks for it: it creates ``release.request`` in the partition's changelog directory,
and a thread of the holder closes the Task as soon as no Spark task uses it, then removes the
file. A holder that is busy (a speculative or retried attempt racing a running one) keeps it:
the asker waits up to ``lock_timeout_s`` and then fails with
:class:`~txstore.errors.WriterLockedError`, having written nothing; when it gets the Task after
the first attempt committed, it finds the batch applied and skips it.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from txstore.errors import IllegalStateError, InvalidArgumentError, WriterLockedError
from txstore.runtime.statedir import partition_path
from txstore.runtime.task import Task
from txstore.spark.streaming.routing import PARTITION_COLUMN

__all__ = ["RELEASE_FILE", "PartitionContext", "held_partitions", "release_all", "run_partition"]

RELEASE_FILE = "release.request"
#: How often a holder's thread looks for release requests.
POLL_S = 0.02


@dataclass
class PartitionContext:
    """What a processor gets with the records of one partition in one micro-batch."""

    partition: int
    batch_id: int
    task: Task
    attempt: int = 0
    outputs: list[pa.Table] = field(default_factory=list)

    def store(self, name: str) -> Any:
        """The partition's store ``name`` (read-your-writes within the batch)."""
        return self.task.store(name)

    def emit(self, rows: pa.Table | pa.RecordBatch | list[dict[str, Any]]) -> None:
        """Output rows, written exactly once per micro-batch (see the step's ``output_dir``)."""
        if isinstance(rows, list):
            rows = pa.Table.from_pylist(rows)
        elif isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        self.outputs.append(rows)


class StepConfig(Protocol):
    """What a Spark task needs of its step (:class:`~txstore.spark.streaming.StatefulStep`)."""

    state_dir: str
    changelog_dir: str | None
    output_dir: str | None
    output_schema: pa.Schema | None
    order_by: Sequence[str]
    outbox_store: str
    sync: bool
    overlay_budget_bytes: int
    lock_timeout_s: float
    token: str

    @property
    def processor(self) -> Callable[[PartitionContext, pa.Table], None]: ...

    def open_stores(self, task: Task) -> None: ...

    def coordination_dir(self, partition: int) -> Path: ...


@dataclass
class _Held:
    task: Task
    token: str
    coordination: Path
    busy: threading.Lock = field(default_factory=threading.Lock)


_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()
_WATCHER: threading.Thread | None = None


def held_partitions() -> list[str]:
    """The partition directories whose Tasks this process holds open."""
    with _GUARD:
        return sorted(_HELD)


def _watch() -> None:
    while True:
        time.sleep(POLL_S)
        with _GUARD:
            items = list(_HELD.items())
        for path, held in items:
            if not (held.coordination / RELEASE_FILE).exists():
                continue
            if not held.busy.acquire(blocking=False):
                continue  # in use: the asker waits
            try:
                _drop(path, held)
            finally:
                held.busy.release()


def _drop(path: str, held: _Held) -> None:
    with _GUARD:
        if _HELD.get(path) is held:
            del _HELD[path]
    held.task.close()
    with contextlib.suppress(FileNotFoundError):
        (held.coordination / RELEASE_FILE).unlink()


def release_all() -> None:
    """Close every Task this process holds (they are idle: nothing uncommitted is lost)."""
    with _GUARD:
        items = list(_HELD.items())
    for path, held in items:
        with held.busy:
            _drop(path, held)


def open_task(step: StepConfig, partition: int) -> Task:
    """Open, recover and restore the Task of ``partition`` (raises WriterLockedError if held)."""
    path = partition_path(step.state_dir, partition)
    changelogs = None if step.changelog_dir is None else Path(step.changelog_dir) / str(partition)
    task = Task(
        path,
        changelog_dir=changelogs,
        sync=step.sync,
        overlay_budget_bytes=step.overlay_budget_bytes,
    )
    try:
        step.open_stores(task)
        task.initialize()
    except BaseException:
        task.close()
        raise
    return task


def _acquire(step: StepConfig, partition: int) -> _Held:
    """This process's hold of ``partition``'s Task, opened (or taken from an idle holder)
    if needed; returned with ``busy`` held."""
    global _WATCHER
    path = str(partition_path(step.state_dir, partition))
    coordination = step.coordination_dir(partition)
    with _GUARD:
        held = _HELD.get(path)
    if held is not None:
        held.busy.acquire()
        if _HELD.get(path) is held and held.token == step.token and held.task.state == "running":
            return held
        held.busy.release()
        if _HELD.get(path) is held:
            with held.busy:
                _drop(path, held)
    deadline = time.monotonic() + step.lock_timeout_s
    asked = False
    while True:
        try:
            task = open_task(step, partition)
            break
        except WriterLockedError as exc:
            if time.monotonic() >= deadline:
                raise WriterLockedError(
                    f"partition {partition} of {step.state_dir!r}: another attempt or process "
                    f"kept its Task for {step.lock_timeout_s:g} s (a speculative or retried "
                    f"Spark task racing a running one?); nothing was written ({exc})"
                ) from exc
            if not asked:
                coordination.mkdir(parents=True, exist_ok=True)
                (coordination / RELEASE_FILE).touch()
                asked = True
            time.sleep(POLL_S)
    with contextlib.suppress(FileNotFoundError):
        (coordination / RELEASE_FILE).unlink()  # ours, or a stale one: nobody else holds it
    held = _Held(task, step.token, coordination)
    held.busy.acquire()
    with _GUARD:
        _HELD[path] = held
        if _WATCHER is None:
            _WATCHER = threading.Thread(target=_watch, name="txstore-release", daemon=True)
            _WATCHER.start()
    return held


# ---- the outbox ------------------------------------------------------------------------------


def _outbox_key(batch_id: int, chunk: int) -> bytes:
    return struct.pack(">qi", batch_id, chunk)


def _write_outbox(step: StepConfig, ctx: PartitionContext) -> int:
    """Put the processor's output of this batch in the outbox (one Arrow IPC stream), and drop
    the outbox entries of earlier batches (their files were written: Spark started this one)."""
    outbox = ctx.task.store(step.outbox_store)
    with outbox.range(None, _outbox_key(ctx.batch_id, 0)) as it:
        stale = [kv.key for kv in it]
    for key in stale:
        outbox.delete(key)
    if not ctx.outputs:
        return 0
    table = pa.concat_tables(
        [t.cast(step.output_schema) if step.output_schema is not None else t for t in ctx.outputs]
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    outbox.put(_outbox_key(ctx.batch_id, 0), sink.getvalue().to_pybytes())
    return int(table.num_rows)


def output_path(output_dir: str | os.PathLike[str], batch_id: int, partition: int) -> Path:
    """The Parquet file of one micro-batch's output in one partition."""
    return Path(output_dir) / f"batch_id={batch_id}" / f"part-{partition:05d}.parquet"


def _write_file(step: StepConfig, task: Task, batch_id: int, partition: int) -> int:
    """Write the batch's output file from the outbox, unless it is there; rows written."""
    if step.output_dir is None:
        return 0
    dest = output_path(step.output_dir, batch_id, partition)
    if dest.exists():
        return 0
    outbox = task.store(step.outbox_store)
    data = outbox.get(_outbox_key(batch_id, 0))
    if data is None:
        return 0
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = pa.ipc.open_stream(data).read_all()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.tmp"  # hidden from Parquet readers
    pq.write_table(table, tmp)
    os.replace(tmp, dest)  # atomic; a replay writes the same rows again
    return int(table.num_rows)


# ---- one Spark task ----------------------------------------------------------------------------

SUMMARY_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("batch_id", pa.int64()),
        ("records", pa.int64()),
        ("skipped", pa.bool_()),
        ("outputs", pa.int64()),
        ("attempt", pa.int32()),
        ("pid", pa.int32()),
    ]
)


def run_partition(
    step: StepConfig, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The body of one Spark task of micro-batch ``batch_id`` (``mapInArrow`` after
    ``repartitionById``): yields one summary row."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    parts = [b for b in batches if b.num_rows]
    records = sum(b.num_rows for b in parts)
    if not parts:
        yield _summary(partition, batch_id, 0, False, 0, attempt)
        return
    table = pa.Table.from_batches(parts)
    routed = table.column(PARTITION_COLUMN)
    if routed.null_count or pc.any(pc.not_equal(routed, partition)).as_py():
        raise IllegalStateError(
            f"Spark task of partition {partition} got records routed elsewhere: the input was "
            "not repartitioned by the step (repartitionById on the partition column)"
        )
    table = table.drop_columns([PARTITION_COLUMN])
    if step.order_by:
        table = table.sort_by([(c, "ascending") for c in step.order_by])
    held = _acquire(step, partition)
    try:
        task = held.task
        position = task.input_position
        skipped = position is not None and position > batch_id
        if not skipped:
            ctx = PartitionContext(partition, batch_id, task, attempt)
            try:
                step.processor(ctx, table)
                _write_outbox(step, ctx)
                task.commit(batch_id + 1)
            except BaseException:
                _discard(held, step, partition)
                raise
        outputs = _write_file(step, task, batch_id, partition)
    finally:
        held.busy.release()
    yield _summary(partition, batch_id, records, skipped, outputs, attempt)


def _discard(held: _Held, step: StepConfig, partition: int) -> None:
    """A failed attempt: close the Task (its overlay and changelog tail are discarded; the next
    attempt's recovery finds nothing of this one)."""
    path = str(partition_path(step.state_dir, partition))
    with _GUARD:
        if _HELD.get(path) is held:
            del _HELD[path]
    held.task.close()


def _summary(
    partition: int, batch_id: int, records: int, skipped: bool, outputs: int, attempt: int
) -> pa.RecordBatch:
    return pa.record_batch(
        [[partition], [batch_id], [records], [skipped], [outputs], [attempt], [os.getpid()]],
        schema=SUMMARY_SCHEMA,
    )


def check_partition(partition: int, num_partitions: int) -> None:
    """Refuse a partition number outside ``[0, num_partitions)``."""
    if not 0 <= partition < num_partitions:
        raise InvalidArgumentError(f"partition {partition} is outside [0, {num_partitions})")
