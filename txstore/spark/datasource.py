"""The PySpark data sources ``txstore`` and ``txstore-metadata`` (Python Data Source API, 4.0+).

Life of a read, and in which process each step runs:

1. ``spark.read.format("txstore")...load(path)``: Spark creates :class:`TxStoreDataSource` in a
   Python worker and asks its :meth:`~TxStoreDataSource.schema`: the options are checked, the
   source and the store resolved (:func:`txstore.spark.plan.resolve`), and the schema follows
   from the store's format and serdes. Bad options fail here, before any query.
2. An action plans the query: Spark unpickles the data source in a planner worker and calls
   :meth:`TxStoreReader.partitions`, which takes the committed cut (:func:`txstore.spark.plan.plan`)
   and returns one :class:`TxStoreInputPartition` per store partition, holding only picklable
   data (path, partition, LMDB transaction id, offset). Nothing LMDB is kept on the reader, so
   it pickles. Spark reuses this plan for every later action on the *same* DataFrame.
3. Executors call :meth:`TxStoreReader.read` once per input partition, in forked Python
   workers: it opens the partition there (:func:`txstore.spark.reader.read_task`). When there is
   nothing to read, Spark still calls ``read`` once with ``InputPartition(None)``; it yields
   nothing.

**Filter pushdown** (:mod:`txstore.spark.pushdown`): PySpark refuses every read of a reader
that implements ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is set
(``DATA_SOURCE_PUSHDOWN_DISABLED``). :func:`txstore.spark.register` and
:func:`txstore.spark.local_session` set it; a session found by Spark's own discovery may not
have it. So :meth:`TxStoreDataSource.reader` returns :class:`TxStorePushdownReader` (with
``pushFilters``) only when it is called by PySpark's pushdown planner
(``pyspark.sql.worker.data_source_pushdown_filters``, which runs only when the setting is on),
and the plain :class:`TxStoreReader` otherwise: with the setting off, reads work unfiltered.
"""

from __future__ import annotations

import datetime
import inspect
import json
import struct
from collections.abc import Iterable, Iterator
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from txstore.engine.iterators import next_prefix
from txstore.errors import InvalidArgumentError, TxStoreError
from txstore.runtime.committed import open_served
from txstore.runtime.snapshot import begin_cut
from txstore.spark.changefeed import (
    ChangeFeedBatchReader,
    ChangeFeedStreamReader,
    change_feed,
    is_change_feed,
)
from txstore.spark.options import ReadOptions, parse_options
from txstore.spark.plan import (
    ReadTask,
    Source,
    StoreSpec,
    open_source,
    plan,
    resolve,
)
from txstore.spark.pushdown import MAX_TIME, Pushdown
from txstore.spark.reader import read_task
from txstore.spark.schema import ReadLayout, layout, metadata_schema
from txstore.spark.sink import TxStoreBatchWriter, TxStoreStreamWriter
from txstore.spark.write_plan import plan_write

__all__ = [
    "METADATA_SOURCE_NAME",
    "SOURCE_NAME",
    "TxStoreDataSource",
    "TxStoreInputPartition",
    "TxStoreMetadataDataSource",
    "TxStorePushdownReader",
    "TxStoreReader",
]

SOURCE_NAME = "txstore"
METADATA_SOURCE_NAME = "txstore-metadata"


def _arrow_schema(schema: StructType) -> pa.Schema:
    # Exactly what PySpark derives from the declared schema and checks every batch against.
    return to_arrow_schema(schema, timezone="UTC")


class TxStoreInputPartition(InputPartition):
    """One store partition to read, at the planned cut (picklable)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task.partition)
        self.task = task

    def __repr__(self) -> str:
        t = self.task
        return (
            f"TxStoreInputPartition(partition={t.partition}, store={t.store!r}, "
            f"offset={t.committed_offset}, snapshot={t.snapshot})"
        )


class TxStoreDataSource(DataSource):
    """``spark.read.format("txstore")``: one store across the partitions of a state directory,
    a partition directory or a snapshot. Options: :mod:`txstore.spark.options`; columns:
    :mod:`txstore.spark.schema`."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._resolved: tuple[ReadOptions, StoreSpec, ReadLayout] | None = None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _resolve(self) -> tuple[ReadOptions, StoreSpec, ReadLayout]:
        if self._resolved is None:
            opts = parse_options(dict(self.options))
            _, spec = resolve(opts)
            self._resolved = (opts, spec, layout(spec, opts))
        return self._resolved

    def schema(self) -> StructType:
        if is_change_feed(self.options):  # the change feed's columns (txstore.spark.changefeed)
            return change_feed(dict(self.options)).schema
        return self._resolve()[2].schema

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_change_feed(self.options):
            return ChangeFeedBatchReader(change_feed(dict(self.options)))
        opts, spec, lay = self._resolve()
        if schema != lay.schema:
            raise InvalidArgumentError(
                f"the txstore source decides its schema ({lay.schema.simpleString()}); "
                f"got {schema.simpleString()}: drop .schema(...) and use the options "
                "keySchema/valueSchema/decode"
            )
        if _called_by_pushdown_planner():
            return TxStorePushdownReader(opts, spec, lay)
        return TxStoreReader(opts, spec, lay)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("txstore").option("readChangeFeed", "true")``: the
        change feed of the store (:mod:`txstore.spark.changefeed`)."""
        if not is_change_feed(self.options):
            raise InvalidArgumentError(
                'a stream of a txstore store is its change feed: add .option("readChangeFeed", '
                '"true") (columns: those of a read, plus operation and offset)'
            )
        return ChangeFeedStreamReader(change_feed(dict(self.options)))

    # -- writing (txstore.spark.sink) ---------------------------------------------------------

    def writer(self, schema: StructType, overwrite: bool) -> TxStoreBatchWriter:
        """``df.write.format("txstore")``: checked and planned here, before any task runs."""
        return TxStoreBatchWriter(plan_write(dict(self.options), schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> TxStoreStreamWriter:
        """``writeStream.format("txstore")``: micro-batch ``b`` commits as input position
        ``b + 1``; a replayed batch is applied once."""
        return TxStoreStreamWriter(plan_write(dict(self.options), schema, overwrite))


_PUSHDOWN_PLANNER: Final = "data_source_pushdown_filters"


def _called_by_pushdown_planner() -> bool:
    frame = inspect.currentframe()
    try:
        caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
        if caller is None:
            return False
        where = f"{caller.f_globals.get('__name__', '')} {caller.f_globals.get('__file__', '')}"
        return _PUSHDOWN_PLANNER in where
    finally:
        del frame


class TxStoreReader(DataSourceReader):
    """Plans the cut on the driver and reads one partition per task (see the module doc)."""

    def __init__(self, options: ReadOptions, spec: StoreSpec, layout: ReadLayout) -> None:
        self.options = options
        self.spec = spec
        self.layout = layout
        self.planned_source: str | None = None
        self.pushdown = Pushdown()

    def partitions(self) -> list[InputPartition]:
        source, tasks = plan(self.options, self.spec, self.pushdown)
        self.planned_source = source.path
        return [TxStoreInputPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TxStoreInputPartition):
            return iter(())  # Spark's single call for an empty plan: InputPartition(None)
        return _short_errors(
            read_task(
                partition.task,
                self.layout,
                _arrow_schema(self.layout.schema),
                self.options.batch_size,
                self.pushdown,
            )
        )


def _short_errors(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, with a txstore error raised from here without the reader's frames: the
    ``PythonException`` Spark shows is one frame and the line naming the error class."""
    try:
        yield from batches
    except TxStoreError as exc:
        raise exc.with_traceback(None) from None


_FIXED_KEYS: Final = {"integer": struct.Struct(">i"), "long": struct.Struct(">q")}
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: A timestamp literal without a time zone is widened by this much each way (Spark's session
#: time zone is not known here; the filter itself is applied by Spark afterwards anyway).
_NAIVE_SLACK_MS: Final = 27 * 3_600_000


class TxStorePushdownReader(TxStoreReader):
    """:class:`TxStoreReader` with filter pushdown (see :mod:`txstore.spark.pushdown`).

    Every filter is returned to Spark as still to be evaluated: the pushdown only narrows
    what is read, so the result is the same with and without it.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            self.pushdown = self._push(self.pushdown, f)
        return filters

    def _serialize_key(self, value: Any) -> bytes | None:
        serde = self.layout.key.serde if self.options.decode else "bytes"
        if serde in ("bytes", "binary") or not self.options.decode:
            return bytes(value) if isinstance(value, bytes | bytearray) else None
        if serde == "string":
            return value.encode("utf-8") if isinstance(value, str) else None
        fixed = _FIXED_KEYS.get(serde)
        if fixed is not None and isinstance(value, int) and not isinstance(value, bool):
            try:
                return fixed.pack(value)
            except struct.error:
                return None
        return None

    def _ordered_keys(self) -> bool:
        """Whether serialized keys sort as Spark compares the key column (binary order)."""
        return not self.options.decode or self.layout.key.serde in ("string", "bytes")

    def _push(self, p: Pushdown, f: Filter) -> Pushdown:
        column = f.attribute if hasattr(f, "attribute") else ()
        value: Any = getattr(f, "value", None)
        if column == ("partition_id",):
            return _push_partition(p, f, value)
        if column == ("key",):
            if isinstance(f, EqualTo | In):
                values = list(value) if isinstance(f, In) else [value]
                keys = [self._serialize_key(v) for v in values]
                if any(k is None for k in keys):
                    return p
                return p.with_keys(tuple(k for k in keys if k is not None))
            if not self._ordered_keys():
                return p
            if isinstance(f, StringStartsWith) and isinstance(value, str):
                prefix = value.encode("utf-8")
                p = p.with_bound(True, prefix, True)
                nxt = next_prefix(prefix)
                return p if nxt is None else p.with_bound(False, nxt, False)
            bound = self._serialize_key(value)
            if bound is None:
                return p
            if isinstance(f, GreaterThan | GreaterThanOrEqual):
                return p.with_bound(True, bound, isinstance(f, GreaterThanOrEqual))
            if isinstance(f, LessThan | LessThanOrEqual):
                return p.with_bound(False, bound, isinstance(f, LessThanOrEqual))
            return p
        if self.spec.kind == "window" and column in (("window", "start"), ("window", "end")):
            shift = self.spec.window_size or 0 if column[1] == "end" else 0
            return _push_start(p, f, value, shift)
        return p


def _push_partition(p: Pushdown, f: Filter, value: Any) -> Pushdown:
    values = list(value) if isinstance(f, In) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return p
    if isinstance(f, EqualTo | In):
        return p.with_partitions(frozenset(values))
    bound = values[0]
    lo, hi = 0, 2**31 - 1
    if isinstance(f, GreaterThan):
        lo = bound + 1
    elif isinstance(f, GreaterThanOrEqual):
        lo = bound
    elif isinstance(f, LessThan):
        hi = bound - 1
    elif isinstance(f, LessThanOrEqual):
        hi = bound
    else:
        return p
    return p.with_partitions(frozenset(n for n in range(max(lo, 0), min(hi, 1 << 16) + 1)))


def _millis(value: Any) -> tuple[int, int] | None:
    """A timestamp literal as the smallest and largest epoch millisecond it may mean."""
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:
        ms = (value.replace(tzinfo=datetime.UTC) - _EPOCH) // datetime.timedelta(milliseconds=1)
        return ms - _NAIVE_SLACK_MS, ms + _NAIVE_SLACK_MS
    ms = (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    return ms, ms + 1  # microseconds below the millisecond


def _push_start(p: Pushdown, f: Filter, value: Any, shift: int) -> Pushdown:
    """``window.start`` (shift 0) or ``window.end`` (= start + ``shift``) filters."""
    span = _millis(value)
    if span is None:
        return p
    lo, hi = span[0] - shift, span[1] - shift
    if isinstance(f, EqualTo):
        return p.with_starts(lo, hi)
    if isinstance(f, GreaterThan | GreaterThanOrEqual):
        return p.with_starts(lo, MAX_TIME)
    if isinstance(f, LessThan | LessThanOrEqual):
        return p.with_starts(0, hi)
    return p


# -- metadata ----------------------------------------------------------------------------------


class TxStoreMetadataDataSource(DataSource):
    """``spark.read.format("txstore-metadata").load(path)``: one row per store.

    Columns: ``store``, ``kind``, ``format``, ``key_serde``, ``value_serde``,
    ``num_partitions``, ``partitions``, ``committed_offsets`` (partition -> offset, null when
    never committed), ``entries`` (committed entries over all partitions), ``configuration``
    (every metadata field; values that are not text as JSON), ``snapshot`` (read from a
    snapshot). Live partitions are each read in one read transaction.
    """

    @classmethod
    def name(cls) -> str:
        return METADATA_SOURCE_NAME

    def schema(self) -> StructType:
        given = {k.lower() for k in self.options}
        unknown = sorted(given - {"path"})
        if unknown:
            raise InvalidArgumentError(
                f"unknown option {unknown[0]!r}: the txstore-metadata source takes only a path"
            )
        if not self.options.get("path"):
            raise InvalidArgumentError(
                'no path: spark.read.format("txstore-metadata").load(<state dir or snapshot>)'
            )
        open_source(str(self.options["path"]))
        return metadata_schema()

    def reader(self, schema: StructType) -> MetadataReader:
        return MetadataReader(str(self.options["path"]), schema)


class MetadataReader(DataSourceReader):
    """Reads the store metadata of every partition in one task."""

    def __init__(self, path: str, schema: StructType) -> None:
        self.path = path
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(self.path)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows = metadata_rows(open_source(self.path))
        schema = _arrow_schema(self.schema)
        if not rows:
            return iter(())
        columns = {name: [r[name] for r in rows] for name in schema.names}
        return iter(
            [
                pa.RecordBatch.from_arrays(
                    [pa.array(columns[f.name], f.type) for f in schema], schema=schema
                )
            ]
        )


def metadata_rows(source: Source) -> list[dict[str, Any]]:
    """One dict per store of ``source`` (the columns of ``txstore-metadata``)."""
    per_store: dict[str, dict[str, Any]] = {}

    def add(number: int, name: str, meta: dict[str, Any], offset: int | None, n: int) -> None:
        row = per_store.setdefault(
            name,
            {
                "store": name,
                "kind": str(meta.get("kind", "")),
                "format": meta.get("format"),
                "key_serde": meta.get("key_serde"),
                "value_serde": meta.get("value_serde"),
                "partitions": [],
                "committed_offsets": [],
                "entries": 0,
                "configuration": {
                    k: v if isinstance(v, str) else json.dumps(v) for k, v in sorted(meta.items())
                },
                "snapshot": source.is_snapshot,
            },
        )
        row["partitions"].append(number)
        row["committed_offsets"].append((number, offset))
        row["entries"] += n

    if source.manifest is not None:
        for cut in source.manifest.partitions:
            for name, sc in sorted(cut.stores.items()):
                add(cut.partition, name, dict(sc.meta), sc.committed_offset, sc.entries)
    else:
        for number, path in source.partitions.items():
            with open_served(path) as p:
                snap, cut = begin_cut(p, number=number, path=path)
                snap.close()
            for name, sc in sorted(cut.stores.items()):
                add(number, name, dict(sc.meta), sc.committed_offset, sc.entries)
    rows = [per_store[name] for name in sorted(per_store)]
    for row in rows:
        row["num_partitions"] = len(row["partitions"])
    return rows
