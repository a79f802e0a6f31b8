"""Writing DataFrame rows into stores: staged by the Spark tasks, committed by the driver.

How Spark's commit protocol maps onto txstore's (the same for the batch writer and the
streaming sink, :mod:`txstore.spark.sink`):

1. **Tasks stage, never commit.** Each Spark task (:func:`stage_task`, in an executor) encodes
   its rows (serdes, Kafka's partitioner: ``murmur2(serialized key) % partitions``) and writes
   them to Arrow IPC files, one per target partition, in a directory of its own write
   (``<stagingDir>/<write id>/``), under a name unique to the attempt. It returns the list of
   its files as its commit message. A task that fails removes its files; one that was killed
   leaves files that no commit message names, so they are never applied.
2. **The driver decides** (:func:`apply_staged`, in Spark's commit of the job or micro-batch,
   which gets the messages of the successful attempts only). For every partition of the
   application it opens a :class:`~txstore.runtime.task.Task` (taking the partition's writer
   lock; a running application that holds it makes the write fail here, before anything
   changed), opens the store through the task (so every write goes to the changelog exactly as
   a running application's would), recovers it, and applies that partition's staged files into
   the task's uncommitted overlay and open changelog transaction. Only when **every** partition
   is prepared does it commit them, one task commit each (changelog marker, then the LMDB
   commit). A failure while preparing aborts every task: nothing is written anywhere.
3. **Abort** (Spark's ``abort`` after a failed job or batch) removes the staged files.

What is atomic: each partition's share of a write is one task commit (all its rows or none,
also across a crash: :mod:`txstore.runtime.task`). Across partitions, the commits follow one
another after everything was prepared; only an I/O error between two of them (a full disk)
leaves some partitions written and others not, and the error says which.

**Input positions.** A batch write keeps each partition's input position as it was (0 for a
partition never committed). The streaming sink commits micro-batch ``b`` with input position
``b + 1`` (the next batch to apply, as a Kafka consumer commits the next offset to read), and
skips a partition whose input position is already past ``b``: a replayed batch is applied
once, in each partition.

**Overwrite** deletes every key the store holds in every partition (one tombstone each in the
changelog, as an application deleting them would write), then puts the rows, all in the same
task commit per partition: readers see the old state or the new one, never a mix within a
partition.

Rows with the same key: applied in the order of the DataFrame's partitions, then of the rows
within each; the last one wins. A null ``value`` (or ``operation = 'delete'``) deletes.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from txstore.codecs import ValueFormat, encode_headers, pack_value, partitions_for_keys
from txstore.errors import InvalidArgumentError, SerializationError, StorageError
from txstore.runtime.catalog import builder_from_meta
from txstore.runtime.task import Task
from txstore.spark.write_plan import ColumnEncoder, WritePlan
from txstore.stores.serdes import serde_by_name

__all__ = [
    "STAGED_SCHEMA",
    "StagedFile",
    "WriteResult",
    "apply_staged",
    "discard",
    "stage_task",
    "store_builder",
]

#: The columns of a staged file: serialized key and plain value (null: delete), record
#: timestamp (ms, -1: none), serialized headers, window start / session start and end (ms).
STAGED_SCHEMA: Final = pa.schema(
    [
        pa.field("key", pa.binary(), False),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.int64(), False),
        pa.field("headers", pa.binary(), False),
        pa.field("start", pa.int64(), False),
        pa.field("end", pa.int64(), False),
    ]
)
_NP_TYPES: Final = {"int32": (">i4", pa.int32(), 4), "int64": (">i8", pa.int64(), 8)}
_NP_TYPES["float64"] = (">f8", pa.float64(), 8)
_QI: Final = struct.Struct(">qi")
_QQ: Final = struct.Struct(">qq")
_UNIT_PER_MS: Final = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}


@dataclass(frozen=True)
class StagedFile:
    """One staged file: the rows of one task attempt for one partition."""

    partition: int
    path: str
    rows: int


# -- encoding (executors) --------------------------------------------------------------------


def encode_column(enc: ColumnEncoder, arr: pa.Array, what: str) -> pa.Array:
    """Serialize a key or value column into a binary column (nulls stay null)."""
    kind = enc.kind
    if kind in ("binary", "string"):
        return arr.cast(pa.binary())
    fixed = _NP_TYPES.get(kind)
    if fixed is not None:
        np_type, atype, width = fixed
        typed = arr.cast(atype)
        big = typed.fill_null(0).to_numpy(zero_copy_only=False).astype(np_type)
        out = pa.Array.from_buffers(
            pa.binary(width), len(typed), [None, pa.py_buffer(big.tobytes())]
        ).cast(pa.binary())
        if typed.null_count:
            out = pc.if_else(typed.is_valid(), out, pa.scalar(None, pa.binary()))
        return out
    if kind == "json_text":
        for text in arr.to_pylist():
            if text is not None:
                try:
                    json.loads(text)
                except ValueError as exc:
                    raise SerializationError(
                        f"the {what} {text[:60]!r} is not JSON text ({exc}); the store's "
                        f"{what} serde is json"
                    ) from None
        return arr.cast(pa.binary())
    serde = serde_by_name(enc.serde)
    objs = arr.to_pylist(maps_as_pydicts="strict") if _has_map(arr.type) else arr.to_pylist()
    return pa.array([None if o is None else serde.serialize(o) for o in objs], pa.binary())


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    return False


def _millis(arr: pa.Array, missing: int) -> pa.Array:
    """Epoch milliseconds of a timestamp (or bigint ms) column; nulls -> ``missing``."""
    if pa.types.is_timestamp(arr.type):
        per_ms = _UNIT_PER_MS[arr.type.unit]
        raw = arr.cast(pa.int64())
        ms = pc.multiply(raw, 1000) if per_ms is None else pc.divide(raw, per_ms)
    else:
        ms = arr.cast(pa.int64())
    return ms.fill_null(missing)


def encode_batch(plan: WritePlan, batch: pa.RecordBatch) -> tuple[pa.Array, pa.RecordBatch]:
    """The target partitions and the staged rows of one input batch. Raises
    :class:`~txstore.errors.InvalidArgumentError` for a null key or a bad row."""
    n = batch.num_rows
    names = set(batch.schema.names)
    keys = encode_column(plan.key, batch.column("key"), "key")
    if keys.null_count:
        raise InvalidArgumentError(
            f"a key is null ({keys.null_count} of {n} rows in a batch): store keys cannot be "
            f"null; nothing of this write was committed"
        )
    values = encode_column(plan.value, batch.column("value"), "value")
    if "operation" in names:
        ops = batch.column("operation")
        bad = pc.invert(pc.is_in(ops, pa.array(["put", "delete"])))
        if pc.any(pc.fill_null(bad, True)).as_py():
            found = sorted({o for o in ops.to_pylist() if o not in ("put", "delete")}, key=str)
            raise InvalidArgumentError(f"column operation must be put or delete, found {found}")
        values = pc.if_else(pc.equal(ops, "delete"), pa.scalar(None, pa.binary()), values)
    zeros = pa.repeat(pa.scalar(0, pa.int64()), n)
    ts = _millis(batch.column("timestamp"), -1) if "timestamp" in names else zeros
    if "timestamp" not in names:
        ts = pa.repeat(pa.scalar(-1, pa.int64()), n)
    headers = pa.repeat(pa.scalar(b"", pa.binary()), n)
    if "headers" in names:
        headers = pa.array(
            [
                b"" if hs is None else encode_headers([(h["key"], h["value"]) for h in hs])
                for hs in batch.column("headers").to_pylist()
            ],
            pa.binary(),
        )
    start, end = zeros, zeros
    window = "window" if plan.kind == "window" else "session_window"
    if plan.kind != "key_value":
        struct_arr = batch.column(window)
        if struct_arr.null_count:
            raise InvalidArgumentError(f"column {window} is null in {struct_arr.null_count} rows")
        start = _millis(struct_arr.field("start"), -1)
        if pc.any(pc.less(start, 0)).as_py():
            raise InvalidArgumentError(f"a {window}.start is null or before 1970")
        if "end" in struct_arr.type.names:
            end = _millis(struct_arr.field("end"), -1)
        if plan.kind == "window" and "end" in struct_arr.type.names:
            size = plan.window_size
            want = pc.min_element_wise(pc.add(start, size), 2**63 - 1)
            if not pc.all(pc.equal(end, want)).as_py():
                raise InvalidArgumentError(
                    f"a window's end is not its start + the store's window size ({size} ms)"
                )
        if plan.kind == "session" and pc.any(pc.less(end, start)).as_py():
            raise InvalidArgumentError("a session_window ends before it starts")
    parts = _partitions(plan, batch, keys)
    staged = pa.RecordBatch.from_arrays(
        [keys, values, ts, headers, start, end], schema=STAGED_SCHEMA
    )
    return parts, staged


def _partitions(plan: WritePlan, batch: pa.RecordBatch, keys: pa.Array) -> pa.Array:
    n = plan.num_partitions
    hashed = pa.array(partitions_for_keys(keys.to_pylist(), n), pa.int32())
    if "partition_id" not in batch.schema.names:
        return hashed
    given = batch.column("partition_id").cast(pa.int32())
    bad = pc.or_(pc.less(given, 0), pc.greater_equal(given, n))
    if pc.any(pc.fill_null(bad, False)).as_py():
        raise InvalidArgumentError(
            f"a partition_id is outside 0..{n - 1} (the state directory has {n} partitions)"
        )
    return pc.coalesce(given, hashed)


def stage_task(plan: WritePlan, batches: Iterable[pa.RecordBatch]) -> list[StagedFile]:
    """Stage one task's rows (see the module docstring); on an error its files are removed."""
    directory = plan.write_dir()
    os.makedirs(directory, exist_ok=True)
    attempt = uuid.uuid4().hex
    open_files: dict[int, tuple[Any, Any, str]] = {}
    counts: dict[int, int] = {}
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            parts, staged = encode_batch(plan, batch)
            np_parts = parts.to_numpy(zero_copy_only=False)
            for p in np.unique(np_parts).tolist():
                rows = staged.take(pa.array(np.flatnonzero(np_parts == p)))
                entry = open_files.get(p)
                if entry is None:
                    path = os.path.join(directory, f"{p}-{attempt}.arrow")
                    sink = pa.OSFile(path, "wb")
                    entry = open_files[p] = (sink, pa.ipc.new_file(sink, STAGED_SCHEMA), path)
                entry[1].write_batch(rows)
                counts[p] = counts.get(p, 0) + rows.num_rows
        for sink, writer, _ in open_files.values():
            writer.close()
            sink.close()
    except BaseException:
        for sink, _, path in open_files.values():
            sink.close()
            _unlink(path)
        raise
    return [StagedFile(p, open_files[p][2], counts[p]) for p in sorted(open_files)]


# -- applying (driver) -----------------------------------------------------------------------


@dataclass(frozen=True)
class _NamedBytes:
    """A serde that passes bytes through under a store's recorded serde name: the rows are
    serialized by the tasks already, and the store's metadata must keep its serde names."""

    name: str

    def serialize(self, value: Any) -> bytes | None:
        return value  # type: ignore[no-any-return]

    def deserialize(self, data: bytes | None) -> Any:
        return data


def store_builder(name: str, meta: Mapping[str, Any]) -> Any:
    """A builder of the store ``name`` that ``meta`` describes, with serdes that pass bytes
    through under the recorded serde names: what the commit opens in a task (and what a
    restore of the store's changelog into a fresh partition needs)."""
    ks, vs = _NamedBytes(str(meta["key_serde"])), _NamedBytes(str(meta["value_serde"]))
    return builder_from_meta(name, meta, ks, vs)


class _Applier:
    """Puts staged rows into one store of a task, through its change-logging layer."""

    def __init__(self, plan: WritePlan, store: Any) -> None:
        self.plan = plan
        self.store = store
        self.logged = store.bytes_store  # the change-logging layer over the bytes store
        self.fmt = plan.format

    def clear(self) -> int:
        """Delete every key the store holds (the overwrite mode); returns how many."""
        with self.logged.all() as it:
            keys = [k for k, _ in it]
        if self.plan.kind == "key_value":
            self.logged.put_all([(k, None) for k in keys])
        else:
            for k in keys:
                self.logged.remove(k)
        return len(keys)

    def apply(self, batch: pa.RecordBatch) -> None:
        keys = batch.column(0).to_pylist()
        values = batch.column(1).to_pylist()
        fmt = self.fmt
        plain = fmt == ValueFormat.PLAIN
        if plain:
            stored: Sequence[bytes | None] = values
        else:
            ts = batch.column(2).to_pylist()
            hs = batch.column(3).to_pylist()
            stored = [
                None if v is None else pack_value(fmt, v, t, h)
                for v, t, h in zip(values, ts, hs, strict=True)
            ]
        if self.plan.kind == "key_value":
            self.logged.put_all(list(zip(keys, stored, strict=True)))
            return
        starts = batch.column(4).to_pylist()
        if self.plan.kind == "session":
            ends = batch.column(5).to_pylist()
            for k, v, s, e in zip(keys, stored, starts, ends, strict=True):
                self.logged.put_at(k + _QQ.pack(e, s), e, v)
            return
        retain = self.plan.retain_duplicates
        store = self.store
        for k, v, s in zip(keys, stored, starts, strict=True):
            seq = 0
            if retain:
                if v is None:
                    self.logged.put_skipped_null(k, s)
                    continue
                store.seqnum = seq = (store.seqnum + 1) & 0x7FFFFFFF
            self.logged.put_at(k + _QI.pack(s, seq), s, v)


@dataclass(frozen=True)
class WriteResult:
    """What :func:`apply_staged` did: rows applied and keys cleared per partition, and the
    partitions it skipped (the sink: the batch was applied there already)."""

    rows: dict[int, int]
    cleared: dict[int, int]
    skipped: tuple[int, ...]


def _files_by_partition(files: Iterable[StagedFile]) -> dict[int, list[StagedFile]]:
    out: dict[int, list[StagedFile]] = {}
    for f in files:
        out.setdefault(f.partition, []).append(f)
    return out


def apply_staged(
    plan: WritePlan,
    files: Sequence[StagedFile],
    position: Callable[[int | None], int | None],
    *,
    sync: bool = True,
) -> WriteResult:
    """Apply staged ``files`` (in their order) to every partition, as the module docstring
    says. ``position(last input position)`` gives the input position to commit a partition
    with, or ``None`` to leave it untouched (the sink's replayed batch)."""
    by_part = _files_by_partition(files)
    wrong = sorted(p for p in by_part if not 0 <= p < plan.num_partitions)
    if wrong:
        raise InvalidArgumentError(f"staged rows for partitions {wrong} outside the plan")
    tasks: list[Task] = []
    prepared: list[tuple[int, Task, int]] = []
    rows: dict[int, int] = {}
    cleared: dict[int, int] = {}
    skipped: list[int] = []
    try:
        for p in range(plan.num_partitions):
            path = plan.partition_dir(p)
            os.makedirs(path, exist_ok=True)
            task = Task(path, sync=sync)
            tasks.append(task)
            store = store_builder(plan.store, plan.meta).build(task.db)
            task.initialize()
            at = position(task.input_position)
            if at is None:
                skipped.append(p)
                continue
            applier = _Applier(plan, store)
            if plan.overwrite:
                cleared[p] = applier.clear()
            n = 0
            for staged in by_part.get(p, ()):
                with pa.memory_map(staged.path) as source:
                    reader = pa.ipc.open_file(source)
                    for i in range(reader.num_record_batches):
                        batch = reader.get_batch(i)
                        applier.apply(batch)
                        n += batch.num_rows
            rows[p] = n
            prepared.append((p, task, at))
        done: list[int] = []
        for p, task, at in prepared:
            try:
                task.commit(at)
            except Exception as exc:
                raise StorageError(
                    f"the write into store {plan.store!r} committed partitions {done} and failed "
                    f"at partition {p} ({exc}); partitions after it are unchanged"
                ) from exc
            done.append(p)
    finally:
        for task in tasks:
            task.close()
    return WriteResult(rows, cleared, tuple(skipped))


def discard(files: Iterable[StagedFile], directory: str | None = None) -> None:
    """Remove staged files, and the directories they (and ``directory``) are in with whatever
    else is left there: files of attempts that were killed, which no commit message names.
    A write's directory is its own (a micro-batch's: one batch at a time), so nothing of
    another write is touched."""
    dirs = {os.path.dirname(f.path) for f in files}
    if directory is not None:
        dirs.add(directory)
    for d in sorted(dirs):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            _unlink(os.path.join(d, name))
        with contextlib.suppress(OSError):
            os.rmdir(d)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def staged_files(messages: Iterable[Any]) -> Iterator[StagedFile]:
    """The staged files of the commit messages of successful tasks, in task order."""
    for message in messages:
        if message is not None:
            yield from getattr(message, "files", ())
