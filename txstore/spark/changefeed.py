"""The change feed: a store's changelog records as Spark rows, in batch and streaming form.

::

    changes = (spark.readStream.format("txstore").option("readChangeFeed", "true")
               .option("store", "counts").load("/var/lib/app/state"))

A store partition's changelog (``<partition>/changelog/<store>/``) is read-only here
(:class:`~txstore.changelog.log.FileChangelog` with ``readonly=True``, no lock: it runs next to
the application that writes it) and only up to its last commit marker: uncommitted or aborted
records never appear. Offsets are changelog offsets per partition, as JSON
(``{"0": 1200, "1": 980}``: the next offset to read in each partition).

Columns: the batch reader's (:mod:`txstore.spark.schema`: ``key``, ``window`` or
``session_window``, ``value``, ``timestamp`` and ``headers`` where the store's format has them,
``partition_id``), then ``operation`` (``put``, or ``delete`` for a tombstone, whose ``value``
is null) and ``offset`` (the record's changelog offset). The timestamp and headers are the
record's (for timestamped and header formats, the stored ones). Rows come in offset order
within a partition.

Options, besides the reader's ``path``, ``store``, ``partitions``, ``decode``, ``keySchema``,
``valueSchema`` and ``batchSize``:

====================  =========================================================================
``readChangeFeed``    ``true``: read the change feed (required: without it ``format("txstore")``
                      reads the store's current rows, and a stream refuses to start)
``startingOffsets``   ``earliest`` (default), ``latest`` (streams: only new changes) or JSON
                      ``{"<partition>": <offset>}`` (missing partitions start at the earliest)
``endingOffsets``     batch reads: ``latest`` (default) or JSON as above
====================  =========================================================================

Compaction and retention of a changelog remove old records as Kafka's do: a feed that starts
at ``earliest`` sees what the log still holds (the latest record of each key at least, for a
compacted key-value changelog); offsets skip what was removed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from txstore.changelog.log import FileChangelog
from txstore.codecs import decode_headers
from txstore.codecs._native import session_key_columns, window_key_columns
from txstore.errors import InvalidArgumentError
from txstore.spark.options import ReadOptions, parse_options
from txstore.spark.plan import ReadTask, StoreSpec, resolve
from txstore.spark.reader import BatchBuilder
from txstore.spark.schema import ReadLayout, layout

__all__ = [
    "CHANGE_FEED_OPTIONS",
    "ChangeFeed",
    "ChangeFeedBatchReader",
    "ChangeFeedStreamReader",
    "change_feed",
    "is_change_feed",
    "read_changes",
]

CHANGE_FEED_OPTIONS: Final = ("readChangeFeed", "startingOffsets", "endingOffsets")
_LOWER: Final = {n.lower(): n for n in CHANGE_FEED_OPTIONS}
_TS: Final = pa.timestamp("us", tz="UTC")
_MAX_MS: Final = (2**63 - 1) // 1000
_LONG_MAX: Final = 2**63 - 1


def is_change_feed(options: Mapping[str, str]) -> bool:
    """Whether ``options`` ask for the change feed (``readChangeFeed=true``)."""
    for key, value in options.items():
        if key.lower() == "readchangefeed":
            low = str(value).strip().lower()
            if low not in ("true", "false"):
                raise InvalidArgumentError(
                    f"option readChangeFeed must be true or false: {value!r}"
                )
            return low == "true"
    return False


@dataclass(frozen=True)
class ChangeFeed:
    """A resolved change feed (picklable): the store, its columns, where its changelogs are."""

    options: ReadOptions
    spec: StoreSpec
    layout: ReadLayout
    partitions: Mapping[int, str]
    starting: str
    ending: str

    @property
    def schema(self) -> StructType:
        fields = [
            *self.layout.schema.fields,
            StructField("operation", StringType(), False),
            StructField("offset", LongType(), False),
        ]
        return StructType(fields)

    def changelog_dir(self, partition: int) -> str:
        return os.path.join(self.partitions[partition], "changelog", self.spec.name)

    def latest(self) -> dict[str, int]:
        """Every partition's committed end offset, now (O(partitions), no lock taken)."""
        out: dict[str, int] = {}
        for p in self.spec.partitions:
            d = self.changelog_dir(p)
            if not os.path.isdir(d):
                out[str(p)] = 0
                continue
            with FileChangelog(d, readonly=True) as log:
                out[str(p)] = log.committed_end_offset
        return out

    def offsets(self, text: str, what: str) -> dict[str, int]:
        """``earliest``, ``latest`` or JSON offsets, for every partition of the store."""
        low = text.strip().lower()
        if low == "earliest":
            return {str(p): 0 for p in self.spec.partitions}
        if low == "latest":
            return self.latest()
        try:
            given = json.loads(text)
            parsed = {str(int(k)): int(v) for k, v in given.items()}
        except (ValueError, TypeError, AttributeError):
            raise InvalidArgumentError(
                f'option {what} must be earliest, latest or JSON like {{"0": 10, "1": 7}}, '
                f"got {text!r}"
            ) from None
        unknown = sorted(set(parsed) - {str(p) for p in self.spec.partitions}, key=int)
        if unknown or any(v < 0 for v in parsed.values()):
            raise InvalidArgumentError(
                f"option {what}: partitions {unknown} do not hold store {self.spec.name!r}"
                if unknown
                else f"option {what}: offsets cannot be negative"
            )
        return {str(p): parsed.get(str(p), 0) for p in self.spec.partitions}


def change_feed(options: Mapping[str, str]) -> ChangeFeed:
    """Check the options of a change feed and resolve its store (the driver, at ``load()``)."""
    own: dict[str, str] = {}
    rest: dict[str, str] = {}
    for key, value in options.items():
        name = _LOWER.get(key.lower())
        if name is None:
            rest[key] = value
        else:
            own[name] = str(value)
    opts = parse_options(rest)
    if opts.snapshot != "false":
        raise InvalidArgumentError("the change feed reads live changelogs: drop option snapshot")
    source, spec = resolve(opts)
    if source.is_snapshot:
        raise InvalidArgumentError(
            f"{source.path!r} is a snapshot, which holds no changelogs: read the change feed "
            "of the live state directory"
        )
    feed = ChangeFeed(
        opts,
        spec,
        layout(spec, opts),
        {p: source.partitions[p] for p in spec.partitions},
        own.get("startingOffsets", "earliest"),
        own.get("endingOffsets", "latest"),
    )
    feed.offsets(feed.starting, "startingOffsets")  # checked now, at load()
    if feed.ending.strip().lower() == "earliest":
        raise InvalidArgumentError("option endingOffsets must be latest or JSON offsets")
    feed.offsets(feed.ending, "endingOffsets")
    return feed


class ChangeFeedPartition(InputPartition):
    """The changelog records ``[start, end)`` of one store partition (picklable)."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.partition, self.start, self.end = partition, start, end

    def __repr__(self) -> str:
        return f"ChangeFeedPartition({self.partition}, {self.start}, {self.end})"


def _plan(feed: ChangeFeed, start: Mapping[str, int], end: Mapping[str, int]) -> list[Any]:
    wanted = feed.options.partitions
    return [
        ChangeFeedPartition(p, int(start.get(str(p), 0)), int(end[str(p)]))
        for p in feed.spec.partitions
        if (wanted is None or p in wanted) and int(end.get(str(p), 0)) > int(start.get(str(p), 0))
    ]


def _millis_to_ts(millis: Sequence[int], nulls: bool) -> pa.Array:
    arr = pa.array(millis, pa.int64())
    clipped = pc.min_element_wise(pc.max_element_wise(arr, -_MAX_MS), _MAX_MS)
    micros = pc.multiply(clipped, 1000).cast(_TS)
    return pc.if_else(pc.equal(arr, -1), pa.scalar(None, _TS), micros) if nulls else micros


def _batch(
    feed: ChangeFeed, builder: BatchBuilder, schema: pa.Schema, part: int, records: Any
) -> pa.RecordBatch:
    n = len(records.keys)
    lay = feed.layout
    cols: dict[str, pa.Array] = {}
    keys: Any = list(records.keys)
    window = None
    if lay.kind == "window":
        w = window_key_columns(keys, pa.allocate_buffer)
        keys, starts = w.keys, list(w.first)
        size = lay.window_size or 0
        ends = [min(s + size, _LONG_MAX) for s in starts]
        window = "window"
    elif lay.kind == "session":
        s = session_key_columns(keys, pa.allocate_buffer)
        keys, starts, ends = s.keys, list(s.second), list(s.first)
        window = "session_window"
    if window is not None:
        cols[window] = pa.StructArray.from_arrays(
            [_millis_to_ts(starts, False), _millis_to_ts(ends, False)],
            fields=list(schema.field(window).type),
        )
    cols["key"] = builder.decode(lay.key, keys, schema.field("key").type, "key")
    values = records.values
    puts = [v for v in values if v is not None]
    decoded = builder.decode(lay.value, puts, schema.field("value").type, "value")
    if len(puts) != n:
        index: list[int | None] = []
        i = 0
        for v in values:
            index.append(None if v is None else i)
            i += v is not None
        decoded = decoded.take(pa.array(index, pa.int64()))
    cols["value"] = decoded
    if lay.has_timestamp:
        cols["timestamp"] = _millis_to_ts(records.timestamps, True)
    if lay.has_headers:
        cols["headers"] = pa.array(
            [[tuple(h) for h in decode_headers(hb)] if hb else [] for hb in records.headers],
            schema.field("headers").type,
        )
    cols["partition_id"] = pa.repeat(pa.scalar(part, pa.int32()), n)
    cols["operation"] = pa.array(["delete" if v is None else "put" for v in values], pa.string())
    cols["offset"] = pa.array(records.offsets, pa.int64())
    return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


def read_changes(feed: ChangeFeed, part: ChangeFeedPartition) -> Iterator[pa.RecordBatch]:
    """The committed records ``[start, end)`` of one partition's changelog, as record
    batches of the feed's schema (at most ``batchSize`` rows each)."""
    schema = to_arrow_schema(feed.schema, timezone="UTC")
    task = ReadTask(
        part.partition,
        feed.partitions[part.partition],
        feed.spec.name,
        False,
        0,
        None,
        0,
        feed.spec.meta,
    )
    builder = BatchBuilder(feed.layout, schema, task)
    limit = feed.options.batch_size
    with FileChangelog(feed.changelog_dir(part.partition), readonly=True) as log:
        it = log.read_committed_batches(min(part.start, log.committed_end_offset))
        try:
            for records in it:
                offsets = records.offsets
                keep = len(offsets)
                if offsets[-1] >= part.end:
                    keep = next(i for i, o in enumerate(offsets) if o >= part.end)
                for lo in range(0, keep, limit):
                    hi = min(lo + limit, keep)
                    chunk = type(records)(
                        offsets[lo:hi],
                        records.keys[lo:hi],
                        records.values[lo:hi],
                        records.timestamps[lo:hi],
                        records.headers[lo:hi],
                    )
                    yield _batch(feed, builder, schema, part.partition, chunk)
                if keep < len(offsets):
                    return
        finally:
            it.close()


class ChangeFeedBatchReader(DataSourceReader):
    """``spark.read.format("txstore").option("readChangeFeed", "true")``: the records between
    ``startingOffsets`` and ``endingOffsets``, fixed when the query is planned."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed

    def partitions(self) -> Sequence[InputPartition]:
        feed = self.feed
        return _plan(
            feed,
            feed.offsets(feed.starting, "startingOffsets"),
            feed.offsets(feed.ending, "endingOffsets"),
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangeFeedPartition):
            return iter(())
        return read_changes(self.feed, partition)


class ChangeFeedStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("txstore").option("readChangeFeed", "true")``: each
    micro-batch reads every partition's records committed since the last one."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed

    def initialOffset(self) -> dict[str, int]:
        return self.feed.offsets(self.feed.starting, "startingOffsets")

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        latest = self.feed.latest()
        return {p: max(int(o), int(start.get(p, 0))) for p, o in latest.items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return _plan(self.feed, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangeFeedPartition):
            return iter(())
        return read_changes(self.feed, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the changelogs are read without a lock or a consumer group."""
