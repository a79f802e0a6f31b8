"""Planning a Spark write into a txstore state directory, on the driver (no PySpark needed).

:func:`plan_write` checks the options of ``df.write.format("txstore")`` (or of the streaming
sink) against the DataFrame's columns and the stores on disk, and returns a picklable
:class:`WritePlan` that the executors (staging) and the driver (commit) follow. Every check
happens here, before any row is staged or any state changes: an unknown option, a store
configuration that contradicts the one on disk (:class:`~txstore.errors.ConfigConflictError`),
a partition count that differs from the state directory's, a missing or mistyped column
(:class:`~txstore.errors.InvalidArgumentError`).

=====================  ======================================================================
option                 meaning
=====================  ======================================================================
``path``               (``save(path)`` / ``start(path)``) the state directory: one partition
                       directory per partition (``<path>/0``, ``<path>/1``...)
``store``              the store to write (required)
``numPartitions``      how many partitions the application has; required when the state
                       directory has none yet, else checked against it
``kind``               ``key_value`` (default), ``window`` or ``session``: for a new store
``format``             ``PLAIN`` (default), ``TIMESTAMPED``, ``HEADERS``, ``PLAIN_HEADERS``
``keySerde``           the key serde's registered name; default from the ``key`` column's
                       type (``string``, ``bigint`` -> ``long``, ``int`` -> ``integer``,
                       ``double``, ``binary`` -> ``bytes``)
``valueSerde``         the same for values (a struct, array or map column -> ``json``)
``windowSize``         window stores: the window size in ms (required for a new one)
``retention``          window and session stores: retention in ms (default one day, at
                       least the window size)
``segmentInterval``    window and session stores (default ``max(retention / 2, 60000)``)
``retainDuplicates``   window stores: ``true`` or ``false`` (default)
``stagingDir``         where tasks stage their rows until the commit (default
                       ``<path>/_spark_staging``); must be reachable from the executors and
                       the driver
=====================  ======================================================================

``kind``, ``format``, the serdes and the window options describe the store: given for an
existing store, they must match its metadata (or a :class:`~txstore.errors.ConfigConflictError`
names the difference); left out, they are taken from it.

Columns (the batch reader's, :mod:`txstore.spark.schema`): ``key`` (required, never null),
``value`` (null deletes), ``window`` (window stores: the ``start`` is used; an ``end`` must be
``start + windowSize``), ``session_window`` (session stores: ``start`` and ``end``),
``timestamp`` (formats with one; null or missing: Kafka's ``-1``), ``headers`` (formats with
them; null or missing: none), ``partition_id`` (optional: the partition a row goes to; null or
missing: Kafka's default partitioner, murmur2 of the serialized key), ``operation``
(optional: ``put`` or ``delete``, as the change feed writes it). Key and value columns are of
the serde's type, or ``binary`` holding the serialized bytes.

>>> o = parse_write_options({"path": "/s", "store": "counts", "numPartitions": "4"})
>>> o.store, o.num_partitions, o.kind
('counts', 4, None)
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from txstore.codecs import ValueFormat
from txstore.errors import ConfigConflictError, InvalidArgumentError
from txstore.runtime.statedir import partition_dirs
from txstore.spark.plan import SUPPORTED_FORMATS, Source, store_metas
from txstore.stores.assembly import KV_FORMAT_VERSION, SEGMENTED_FORMAT_VERSION
from txstore.stores.serdes import serde_by_name

__all__ = [
    "WRITE_OPTION_NAMES",
    "ColumnEncoder",
    "WriteOptions",
    "WritePlan",
    "parse_write_options",
    "plan_write",
]

WRITE_OPTION_NAMES: Final = (
    "path",
    "store",
    "numPartitions",
    "kind",
    "format",
    "keySerde",
    "valueSerde",
    "windowSize",
    "retention",
    "segmentInterval",
    "retainDuplicates",
    "stagingDir",
)
_BY_LOWER: Final = {n.lower(): n for n in WRITE_OPTION_NAMES}
#: Options Spark itself passes to a streaming sink (kept by Spark, ignored here).
_SPARK_OPTIONS: Final = frozenset({"checkpointlocation", "queryname"})
_KINDS: Final = ("key_value", "window", "session")
DEFAULT_RETENTION: Final = 24 * 3600 * 1000
STAGING: Final = "_spark_staging"


@dataclass(frozen=True)
class WriteOptions:
    """Checked options of one write (see the module docstring)."""

    path: str
    store: str
    num_partitions: int | None = None
    kind: str | None = None
    format: str | None = None
    key_serde: str | None = None
    value_serde: str | None = None
    window_size: int | None = None
    retention: int | None = None
    segment_interval: int | None = None
    retain_duplicates: bool | None = None
    staging_dir: str | None = None


def _int(name: str, text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise InvalidArgumentError(f"option {name} must be an integer >= {low}, got {text!r}")
    return value


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check the options of a write; :class:`~txstore.errors.InvalidArgumentError` names the
    bad one."""
    given: dict[str, str] = {}
    for key, value in options.items():
        if key.lower() in _SPARK_OPTIONS:
            continue
        name = _BY_LOWER.get(key.lower())
        if name is None:
            known = ", ".join(n for n in WRITE_OPTION_NAMES if n != "path")
            raise InvalidArgumentError(
                f"unknown option {key!r} for writing; the txstore sink knows {known}"
            )
        given[name] = str(value)
    path = given.get("path")
    if not path:
        raise InvalidArgumentError(
            'no path: give the state directory to write, as df.write.format("txstore").save(path)'
        )
    store = (given.get("store") or "").strip()
    if not store:
        raise InvalidArgumentError("option store is required: the store to write")
    kind = given.get("kind")
    if kind is not None and kind not in _KINDS:
        raise InvalidArgumentError(f"option kind must be one of {', '.join(_KINDS)}, got {kind!r}")
    fmt = given.get("format")
    if fmt is not None:
        fmt = fmt.strip().upper()
        if fmt not in ValueFormat.__members__:
            known = ", ".join(ValueFormat.__members__)
            raise InvalidArgumentError(f"option format must be one of {known}, got {fmt!r}")
    retain = None
    if "retainDuplicates" in given:
        low = given["retainDuplicates"].strip().lower()
        if low not in ("true", "false"):
            raise InvalidArgumentError(
                f"option retainDuplicates must be true or false, got {given['retainDuplicates']!r}"
            )
        retain = low == "true"
    staging = given.get("stagingDir")
    if staging is not None and not os.path.isabs(staging):
        raise InvalidArgumentError(f"option stagingDir must be an absolute path, got {staging!r}")
    return WriteOptions(
        path=os.path.abspath(path),
        store=store,
        num_partitions=_int("numPartitions", given["numPartitions"], 1)
        if "numPartitions" in given
        else None,
        kind=kind,
        format=fmt,
        key_serde=given.get("keySerde"),
        value_serde=given.get("valueSerde"),
        window_size=_int("windowSize", given["windowSize"], 0) if "windowSize" in given else None,
        retention=_int("retention", given["retention"], 0) if "retention" in given else None,
        segment_interval=_int("segmentInterval", given["segmentInterval"], 1)
        if "segmentInterval" in given
        else None,
        retain_duplicates=retain,
        staging_dir=staging,
    )


@dataclass(frozen=True)
class ColumnEncoder:
    """How a task turns a key or value column into serialized bytes (picklable).

    ``kind``: ``binary`` (the column holds the serialized bytes), ``string`` (UTF-8),
    ``int32``/``int64``/``float64`` (Kafka's big-endian layouts, vectorized), ``json_text``
    (a string column holding JSON text, checked), ``serde`` (the registered serde ``serde``
    applied to each row's Python object; JSON objects of struct, array and map columns).
    """

    kind: str
    serde: str


#: A built-in serde -> (encoder kind, the Spark types its column may have).
_BUILTIN: Final[dict[str, tuple[str, tuple[type[DataType], ...]]]] = {
    "bytes": ("binary", (BinaryType,)),
    "string": ("string", (StringType,)),
    "integer": ("int32", (IntegerType, ShortType, ByteType)),
    "long": ("int64", (LongType, IntegerType, ShortType, ByteType)),
    "double": ("float64", (DoubleType, FloatType)),
}
_DEFAULT_SERDE: Final[tuple[tuple[type[DataType], str], ...]] = (
    (StringType, "string"),
    (LongType, "long"),
    (IntegerType, "integer"),
    (DoubleType, "double"),
    (BinaryType, "bytes"),
    (StructType, "json"),
    (ArrayType, "json"),
    (MapType, "json"),
)


def _default_serde(what: str, dtype: DataType) -> str:
    for cls, name in _DEFAULT_SERDE:
        if isinstance(dtype, cls):
            return name
    raise InvalidArgumentError(
        f"the {what} column is {dtype.simpleString()}, which has no default serde: give "
        f"option {what}Serde (a registered serde), or write serialized bytes as binary"
    )


def _encoder(what: str, serde: str, dtype: DataType) -> ColumnEncoder:
    if isinstance(dtype, BinaryType):
        return ColumnEncoder("binary", serde)
    builtin = _BUILTIN.get(serde)
    if builtin is not None:
        kind, types = builtin
        if not isinstance(dtype, types):
            allowed = " or ".join(t().simpleString() for t in types)
            raise InvalidArgumentError(
                f"the {what} column is {dtype.simpleString()}, but the store's {what} serde "
                f"{serde!r} takes {allowed} (or binary: serialized bytes); cast the column"
            )
        return ColumnEncoder(kind, serde)
    if serde == "json":
        return ColumnEncoder("json_text" if isinstance(dtype, StringType) else "serde", serde)
    serde_by_name(serde)  # raises InvalidArgumentError naming an unregistered serde
    return ColumnEncoder("serde", serde)


@dataclass(frozen=True)
class WritePlan:
    """Everything the tasks and the commit of one write need (picklable)."""

    state_dir: str
    store: str
    meta: Mapping[str, Any]
    """The store's metadata: what a new store registers, or what the existing one holds."""
    num_partitions: int
    key: ColumnEncoder
    value: ColumnEncoder
    columns: tuple[str, ...]
    staging_dir: str
    overwrite: bool = False
    write_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    @property
    def format(self) -> ValueFormat:
        return ValueFormat[str(self.meta["format"])]

    @property
    def window_size(self) -> int:
        return int(self.meta.get("window_size") or 0)

    @property
    def retain_duplicates(self) -> bool:
        return bool(self.meta.get("retain_duplicates", False))

    def partition_dir(self, partition: int) -> str:
        return os.path.join(self.state_dir, str(partition))

    def write_dir(self, write_id: str | None = None) -> str:
        """Where the tasks of one write (or of one micro-batch) stage their rows."""
        return os.path.join(self.staging_dir, write_id or self.write_id)


#: Store metadata fields a write may be asked to set, by option.
_CONFIG_OPTIONS: Final = (
    ("window_size", "windowSize"),
    ("retention", "retention"),
    ("segment_interval", "segmentInterval"),
    ("retain_duplicates", "retainDuplicates"),
)


def _new_meta(o: WriteOptions, key_serde: str, value_serde: str) -> dict[str, Any]:
    kind = o.kind or "key_value"
    fmt = o.format or "PLAIN"
    if fmt not in SUPPORTED_FORMATS[kind]:
        raise InvalidArgumentError(
            f"a {kind} store has no format {fmt}; it has "
            f"{', '.join(sorted(SUPPORTED_FORMATS[kind]))}"
        )
    meta: dict[str, Any] = {
        "kind": kind,
        "format": fmt,
        "key_serde": key_serde,
        "value_serde": value_serde,
        "format_version": KV_FORMAT_VERSION if kind == "key_value" else SEGMENTED_FORMAT_VERSION,
    }
    if kind == "key_value":
        for attr, option in _CONFIG_OPTIONS:
            if getattr(o, attr) is not None:
                raise InvalidArgumentError(f"option {option} applies to window and session stores")
        return meta
    if kind == "window" and o.window_size is None:
        raise InvalidArgumentError("option windowSize is required for a new window store")
    if kind == "session" and (o.window_size is not None or o.retain_duplicates is not None):
        raise InvalidArgumentError("options windowSize and retainDuplicates apply to window stores")
    retention = (
        o.retention if o.retention is not None else max(DEFAULT_RETENTION, o.window_size or 0)
    )
    if kind == "window" and (o.window_size or 0) > retention:
        raise InvalidArgumentError(
            f"the retention of window store {o.store!r} ({retention}) must be no smaller than "
            f"its window size ({o.window_size})"
        )
    meta["retention"] = retention
    meta["segment_interval"] = (
        o.segment_interval if o.segment_interval is not None else max(retention // 2, 60_000)
    )
    if kind == "window":
        meta["window_size"] = o.window_size
        meta["retain_duplicates"] = bool(o.retain_duplicates)
    return meta


def _check_against_disk(o: WriteOptions, disk: Mapping[str, Any]) -> None:
    asked: dict[str, Any] = {
        "kind": o.kind,
        "format": o.format,
        "key_serde": o.key_serde,
        "value_serde": o.value_serde,
    }
    asked.update({attr: getattr(o, attr) for attr, _ in _CONFIG_OPTIONS})
    diffs = [
        f"{name}: {value!r} asked, {disk.get(name)!r} on disk"
        for name, value in asked.items()
        if value is not None and value != disk.get(name)
    ]
    if diffs:
        raise ConfigConflictError(
            f"store {o.store!r} exists with another configuration ({'; '.join(diffs)}): leave "
            "those options out to write it as it is; nothing was written"
        )


def _state_partitions(o: WriteOptions) -> tuple[int, dict[int, str]]:
    if os.path.exists(o.path) and not os.path.isdir(o.path):
        raise InvalidArgumentError(f"{o.path!r} is not a directory")
    found = {n: str(p) for n, p in partition_dirs(o.path).items()} if os.path.isdir(o.path) else {}
    if not found:
        if o.num_partitions is None:
            raise InvalidArgumentError(
                f"{o.path!r} holds no partitions yet: give option numPartitions (how many "
                "partitions the application has)"
            )
        return o.num_partitions, found
    n = max(found) + 1
    if sorted(found) != list(range(n)):
        missing = sorted(set(range(n)) - set(found))
        raise InvalidArgumentError(
            f"state directory {o.path!r} lacks partitions {missing}: a write needs partitions "
            f"0..{n - 1} to place keys by Kafka's partitioner"
        )
    if o.num_partitions is not None and o.num_partitions != n:
        raise InvalidArgumentError(
            f"option numPartitions is {o.num_partitions}, but {o.path!r} has {n} partitions: "
            "keys are placed by murmur2(key) % partitions, so the count cannot change"
        )
    return n, found


_ALLOWED_TYPES: Final[dict[str, tuple[type[DataType], ...]]] = {
    "timestamp": (TimestampType, TimestampNTZType, LongType),
    "partition_id": (IntegerType, LongType, ShortType, ByteType),
    "operation": (StringType,),
}


def _check_columns(schema: StructType, meta: Mapping[str, Any], store: str) -> tuple[str, ...]:
    names = [f.name for f in schema.fields]
    kind = meta["kind"]
    fmt = ValueFormat[str(meta["format"])]
    allowed = {"key", "value", "partition_id", "operation"}
    if kind == "window":
        allowed.add("window")
    if kind == "session":
        allowed.add("session_window")
    if fmt.has_timestamp:
        allowed.add("timestamp")
    if fmt.has_headers:
        allowed.add("headers")
    extra = [n for n in names if n not in allowed]
    if extra:
        raise InvalidArgumentError(
            f"column(s) {extra} do not belong to {kind} store {store!r} in format {fmt.name}; "
            f"its columns are {sorted(allowed)}"
        )
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"duplicate column names in {names}")
    required = ["key", "value"] + (
        ["window"] if kind == "window" else ["session_window"] if kind == "session" else []
    )
    missing = [n for n in required if n not in names]
    if missing:
        raise InvalidArgumentError(
            f"column(s) {missing} are required to write {kind} store {store!r}"
        )
    by_name = {f.name: f.dataType for f in schema.fields}
    for name in ("window", "session_window"):
        if name in by_name:
            t = by_name[name]
            if not (
                isinstance(t, StructType)
                and "start" in t.names
                and all(isinstance(f.dataType, (TimestampType, TimestampNTZType)) for f in t.fields)
                and set(t.names) <= {"start", "end"}
            ):
                raise InvalidArgumentError(
                    f"column {name} must be struct<start: timestamp, end: timestamp>, got "
                    f"{t.simpleString()}"
                )
    if kind == "session" and "end" not in by_name["session_window"].names:  # type: ignore[attr-defined]
        raise InvalidArgumentError("column session_window needs both start and end")
    for name, types in _ALLOWED_TYPES.items():
        if name in by_name and not isinstance(by_name[name], types):
            raise InvalidArgumentError(
                f"column {name} must be {' or '.join(t().simpleString() for t in types)}, got "
                f"{by_name[name].simpleString()}"
            )
    if "headers" in by_name:
        t = by_name["headers"]
        ok = (
            isinstance(t, ArrayType)
            and isinstance(t.elementType, StructType)
            and t.elementType.names == ["key", "value"]
            and isinstance(t.elementType.fields[0].dataType, StringType)
            and isinstance(t.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise InvalidArgumentError(
                "column headers must be array<struct<key: string, value: binary>>, got "
                f"{t.simpleString()}"
            )
    return tuple(names)


def plan_write(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WritePlan:
    """Check a write of ``schema`` rows with ``options`` and plan it (see the module doc).

    Reads the metadata of the store in every partition (one read transaction each); changes
    nothing on disk.
    """
    o = parse_write_options(options)
    num_partitions, found = _state_partitions(o)
    metas = store_metas(Source(o.path, None, found)).get(o.store, {}) if found else {}
    by_name = {f.name: f.dataType for f in schema.fields}
    if "key" not in by_name or "value" not in by_name:
        raise InvalidArgumentError(
            f"a write into store {o.store!r} needs the columns key and value; got {sorted(by_name)}"
        )
    if metas:
        distinct = {json.dumps(_without_location(m), sort_keys=True) for m in metas.values()}
        if len(distinct) > 1:
            raise ConfigConflictError(
                f"store {o.store!r} has different configurations across the partitions of "
                f"{o.path!r}: {sorted(distinct)}"
            )
        meta = _without_location(next(iter(metas.values())))
        if meta.get("kind") not in _KINDS or "format" not in meta or meta["format"] == "bytes":
            raise InvalidArgumentError(
                f"store {o.store!r} was made below the typed layer ({meta!r}); it cannot be "
                "written by Spark"
            )
        _check_against_disk(o, meta)
    else:
        key_serde = o.key_serde or _default_serde("key", by_name["key"])
        value_serde = o.value_serde or _default_serde("value", by_name["value"])
        meta = _new_meta(o, key_serde, value_serde)
    columns = _check_columns(schema, meta, o.store)
    return WritePlan(
        state_dir=o.path,
        store=o.store,
        meta=meta,
        num_partitions=num_partitions,
        key=_encoder("key", str(meta["key_serde"]), by_name["key"]),
        value=_encoder("value", str(meta["value_serde"]), by_name["value"]),
        columns=columns,
        staging_dir=o.staging_dir or os.path.join(o.path, STAGING),
        overwrite=overwrite,
    )


def _without_location(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in ("db", "legacy")}
