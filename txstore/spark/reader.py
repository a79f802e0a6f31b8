"""Reading one planned partition into Arrow record batches (runs inside Spark's executors).

:func:`read_task` opens the partition read-only *inside the calling process* (PySpark's daemon
forks its workers, and an LMDB environment must be opened after a fork), begins one read
transaction, checks it against the plan (:func:`txstore.spark.plan.check_cut`: the planned
commit, or a later whole commit of a live partition), scans the
store in key order in chunks of ``batch_size`` rows and turns each chunk into one
``pyarrow.RecordBatch`` of exactly the declared schema. The environment and the transaction
are released in ``finally``, also when Spark stops consuming early.

Decoding is columnar where the serde allows it. The C column codecs split window and session
keys and stored values into Arrow's own layouts (one data buffer plus int32 offsets, int64
timestamps: :mod:`txstore.codecs.columns`), which become Arrow arrays without a copy or an
object per row; ``int``/``long``/``double`` keys and values are checked for their width and
byte-swapped in one pass over one buffer, strings are checked as UTF-8 by Arrow; only JSON,
custom serdes and headers take a Python call per row.
"""

from __future__ import annotations

import gc
import json
import sys
from array import array
from collections.abc import Generator, Iterator, Sequence
from itertools import islice
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from txstore.codecs import ValueFormat, decode_headers
from txstore.codecs._native import session_key_columns, split_value_columns, window_key_columns
from txstore.codecs.columns import BinaryColumn
from txstore.engine.base import Snapshot
from txstore.engine.iterators import KeyRange
from txstore.engine.partition import Partition
from txstore.errors import SerializationError, TxStoreError
from txstore.runtime.catalog import StoreView, open_view
from txstore.runtime.committed import open_served
from txstore.runtime.snapshot import begin_cut
from txstore.spark.plan import ReadTask, check_cut
from txstore.spark.pushdown import MAX_TIME, Pushdown
from txstore.spark.schema import ColumnDecoder, ReadLayout
from txstore.stores.serdes import serde_by_name

__all__ = ["BatchBuilder", "read_task"]

_FIXED: Final[dict[str, tuple[int, str]]] = {
    "int32": (4, "i"),
    "int64": (8, "q"),
    "float64": (8, "d"),
}
_SERDE_LABEL: Final = {"int32": "Integer", "int64": "Long", "float64": "Double"}
_SWAP: Final = sys.byteorder == "little"
_LONG_MAX: Final = 2**63 - 1
_MAX_MS: Final = (2**63 - 1) // 1000
_MIN_MS: Final = -_MAX_MS
_TS_MICROS: Final = pa.timestamp("us", tz="UTC")


#: Serialized keys or values of one chunk: a column from the C codecs, or a list of ``bytes``.
Raws = BinaryColumn | Sequence[bytes]


def _first_bad(raws: Raws, ok: Any) -> int:
    for i in range(len(raws)):
        if not ok(raws[i]):
            return i
    return -1  # pragma: no cover - called only after a batch check failed


def _binary(raws: Raws) -> pa.Array:
    """``raws`` as an Arrow binary array; a column's buffers are used as they are."""
    if isinstance(raws, BinaryColumn):  # data from pa.allocate_buffer (see BatchBuilder.build)
        buffers = [None, pa.py_buffer(raws.offsets), raws.data]
        return pa.Array.from_buffers(pa.binary(), len(raws), buffers)
    return pa.array(raws, pa.binary())


def _int64s(values: array[int]) -> pa.Array:
    """An ``array("q")`` as an Arrow int64 array, without a copy."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


class BatchBuilder:
    """Turns chunks of ``(key, stored value)`` rows into record batches of one schema."""

    def __init__(self, layout: ReadLayout, schema: pa.Schema, task: ReadTask) -> None:
        self.layout = layout
        self.schema = schema
        self.fmt = ValueFormat[layout.value_format]
        self.task = task
        self.key_type = schema.field("key").type
        self.value_type = schema.field("value").type
        self.partition_id = pa.scalar(task.partition, pa.int32())
        self._serdes: dict[str, Any] = {}

    def _where(self, what: str, raw: bytes) -> str:
        return f"{what} {raw[:40]!r} of store {self.task.store!r}, partition {self.task.partition}"

    def decode(self, dec: ColumnDecoder, raws: Raws, atype: pa.DataType, what: str) -> pa.Array:
        """One column from serialized keys or values (see the module docstring)."""
        kind = dec.kind
        if kind == "binary":
            return _binary(raws)
        if kind == "string":
            try:
                return _binary(raws).cast(pa.string())
            except pa.ArrowInvalid:
                i = _first_bad(raws, _is_utf8)
                raise SerializationError(
                    f"{self._where(what, raws[i])} is not UTF-8 text ({dec.serde!r} serde); "
                    "read it with decode=false"
                ) from None
        fixed = _FIXED.get(kind)
        if fixed is not None:
            return self._fixed(raws, fixed[0], fixed[1], atype, kind, what)
        if isinstance(raws, BinaryColumn):
            raws = raws.to_list()
        if kind == "json":
            objs = []
            for raw in raws:
                try:
                    objs.append(json.loads(raw))
                except ValueError as exc:
                    raise SerializationError(
                        f"{self._where(what, raw)} is not valid JSON: {exc}"
                    ) from None
            return self._objects(objs, raws, atype, what)
        if kind == "serde":
            serde = self._serdes.get(dec.serde)
            if serde is None:
                try:
                    serde = self._serdes[dec.serde] = serde_by_name(dec.serde)
                except TxStoreError as exc:
                    raise SerializationError(
                        f"store {self.task.store!r} uses the serde {dec.serde!r}, which is not "
                        "registered in this Spark worker: register it (txstore.register_serde) "
                        "in a module the workers import, or read with decode=false "
                        f"({exc})"
                    ) from None
            return self._objects([serde.deserialize(r) for r in raws], raws, atype, what)
        raise AssertionError(f"unknown decoder {kind!r}")  # pragma: no cover

    def _fixed(
        self, raws: Raws, width: int, code: str, atype: pa.DataType, kind: str, what: str
    ) -> pa.Array:
        n = len(raws)
        try:
            fsb = _binary(raws).cast(pa.binary(width))  # Arrow checks every width
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            i = _first_bad(raws, lambda r: len(r) == width)
            raise SerializationError(
                f"{self._where(what, raws[i])} has {len(raws[i])} bytes; the "
                f"{_SERDE_LABEL[kind]} serde writes {width}: read it with decode=false"
            ) from None
        buf = fsb.buffers()[1]
        values = array(code)
        values.frombytes(memoryview(buf)[: n * width])
        if _SWAP:
            values.byteswap()  # Kafka's serdes are big-endian
        return pa.Array.from_buffers(atype, n, [None, pa.py_buffer(values)])

    def _objects(
        self, objs: list[Any], raws: Sequence[bytes], atype: pa.DataType, what: str
    ) -> pa.Array:
        try:
            return pa.array(objs, atype)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            for obj, raw in zip(objs, raws, strict=True):
                try:
                    pa.array([obj], atype)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
                    raise SerializationError(
                        f"{self._where(what, raw)} does not fit the schema {atype}: {obj!r:.120}"
                    ) from None
            raise  # pragma: no cover

    def build(self, rows: Sequence[tuple[bytes, Any]]) -> pa.RecordBatch:
        """One record batch from a chunk of committed rows (store keys, stored values)."""
        raw_keys, stored = zip(*rows, strict=True)
        n = len(raw_keys)
        columns: dict[str, pa.Array] = {}
        kind = self.layout.kind
        keys: Raws = raw_keys
        if kind == "window":  # [key][start 8][seq 4]
            wcols = window_key_columns(raw_keys, pa.allocate_buffer)
            keys, starts = wcols.keys, _int64s(wcols.first)
            size = self.layout.window_size or 0
            ends = pc.if_else(pc.greater(starts, _LONG_MAX - size), _LONG_MAX, pc.add(starts, size))
            columns["window"] = self._window(starts, ends, "window")
        elif kind == "session":  # [key][end 8][start 8]
            scols = session_key_columns(raw_keys, pa.allocate_buffer)
            keys = scols.keys
            columns["session_window"] = self._window(
                _int64s(scols.second), _int64s(scols.first), "session_window"
            )
        columns["key"] = self.decode(self.layout.key, keys, self.key_type, "key")
        values: Raws = stored
        if self.fmt != ValueFormat.PLAIN:
            # committed values are never None; Arrow's pool reuses its pages (no page faults)
            vcols = split_value_columns(self.fmt, stored, pa.allocate_buffer)
            values = vcols.values
            if self.layout.has_timestamp:
                columns["timestamp"] = _timestamps(_int64s(vcols.timestamps))
            if self.layout.has_headers:
                columns["headers"] = _headers(vcols.headers, self.schema.field("headers").type)
        columns["value"] = self.decode(self.layout.value, values, self.value_type, "value")
        columns["partition_id"] = pa.repeat(self.partition_id, n)
        return pa.RecordBatch.from_arrays(
            [columns[name] for name in self.schema.names], schema=self.schema
        )

    def _window(self, starts: pa.Array, ends: pa.Array, name: str) -> pa.Array:
        wtype = self.schema.field(name).type
        return pa.StructArray.from_arrays(
            [_timestamps(starts, nulls=False), _timestamps(ends, nulls=False)],
            fields=list(wtype),
        )


def _headers(raws: Raws, atype: pa.DataType) -> pa.Array:
    """The headers column: the serialized headers are dictionary-encoded by Arrow, each distinct
    value is decoded once (records of a store mostly share a few), then taken by index."""
    encoded = pc.dictionary_encode(_binary(raws))
    distinct = pa.array(
        [
            [tuple(h) for h in decode_headers(raw)] if raw else []
            for raw in encoded.dictionary.to_pylist()
        ],
        atype,
    )
    return distinct.take(encoded.indices)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _timestamps(millis: Sequence[int] | pa.Array, *, nulls: bool = True) -> pa.Array:
    """Epoch milliseconds to UTC timestamps; values beyond Spark's range saturate, and with
    ``nulls`` Kafka's ``-1`` (no timestamp) becomes null."""
    arr = millis if isinstance(millis, pa.Array) else pa.array(millis, pa.int64())
    clipped = pc.min_element_wise(pc.max_element_wise(arr, _MIN_MS), _MAX_MS)
    micros = pc.multiply(clipped, 1000).cast(_TS_MICROS)
    if not nulls:
        return micros
    return pc.if_else(pc.equal(arr, -1), pa.scalar(None, _TS_MICROS), micros)


def _store_chunks(
    partition: Partition, snap: Snapshot, task: ReadTask, n: int, pushdown: Pushdown
) -> Generator[list[Any], None, None]:
    """The committed rows of the task's store in ``snap``, ``n`` at a time: store keys and
    values in the store's format.

    A plain key-value store is one database, read in chunks straight from the snapshot. Other
    stores are read through their own read-committed view over the snapshot, which knows
    their layout: the legacy tiers of a key-value store being upgraded (merged, converted to
    the new format) and the segments of window and session stores (each converted from the
    format it was written in).
    """
    meta = task.meta
    if meta.get("kind") == "key_value" and "db" not in meta:
        source = snap.source(partition.db_name(task.store))
        if pushdown.keys is not None:  # point reads
            found = [source.read_chunk(KeyRange(k, k), False, 1)[0] for k in pushdown.keys]
            rows = [r for rs in found for r in rs if pushdown.key_matches(r[0])]
            for i in range(0, len(rows), n):
                yield rows[i : i + n]
            return
        rng = pushdown.key_range()
        while True:
            rows, frontier = source.read_chunk(rng, False, n)
            if rows:
                yield rows
            if frontier is None:
                return
            rng = rng.after(frontier, False)
    with open_view(partition, task.store, snap, meta) as view, _rows(view, pushdown) as it:
        while True:
            rows = list(islice(it, n))
            if not rows:
                return
            yield rows


def _rows(view: StoreView, pushdown: Pushdown) -> Any:
    """The rows of a window, session or upgraded key-value store that ``pushdown`` lets
    through (more, never fewer: Spark applies the filters again)."""
    if view.kind == "key_value" or not pushdown.narrows:
        return view.rows()
    times = (pushdown.start_from, pushdown.start_to) if view.kind == "window" else (0, MAX_TIME)
    if pushdown.keys is not None and len(pushdown.keys) == 1:
        (key,) = pushdown.keys
        return view.view.fetch(key, key, *times, single_key=view.kind == "window")
    rng = pushdown.key_range()
    return view.view.fetch(rng.lo, rng.hi, *times)


def read_task(
    task: ReadTask,
    layout: ReadLayout,
    schema: pa.Schema,
    batch_size: int,
    pushdown: Pushdown | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``task`` as record batches of ``schema`` (see the module docstring)."""
    partition = open_served(task.path)  # committed: a tail a dead writer left is replayed
    try:
        snap, cut = begin_cut(partition, number=task.partition, path=task.path)
        try:
            task = check_cut(task, cut)
            builder = BatchBuilder(layout, schema, task)
            chunks = _store_chunks(partition, snap, task, batch_size, pushdown or Pushdown())
            try:
                while True:
                    # A chunk allocates two bytes objects and a tuple per row, all garbage
                    # once the batch is built: the cyclic GC would only rescan them (measured
                    # 15% of the read), so it is paused for the chunk, never across a yield.
                    gc_was_enabled = gc.isenabled()
                    gc.disable()
                    try:
                        rows = next(chunks, None)
                        batch = None if rows is None else builder.build(rows)
                    finally:
                        if gc_was_enabled:
                            gc.enable()
                    if batch is None:
                        break
                    yield batch
            finally:
                chunks.close()
        finally:
            snap.close()
    finally:
        partition.close()
