"""Spark schemas of txstore stores: columns, serde-to-type mapping, user schemas.

Columns, in this order (the names of Spark's own state reader, plus the format's extras):

==================  =============================================  ==========================
column              Spark type                                     present for
==================  =============================================  ==========================
``key``             from the key serde (below)                     every store
``window``          ``struct<start timestamp, end timestamp>``     window stores
``session_window``  ``struct<start timestamp, end timestamp>``     session stores
``value``           from the value serde (below)                   every store
``timestamp``       ``timestamp`` (UTC; null for Kafka's ``-1``)    TIMESTAMPED, HEADERS
``headers``         ``array<struct<key string, value binary>>``    HEADERS, PLAIN_HEADERS
``partition_id``    ``int``                                        every store
==================  =============================================  ==========================

Window bounds are UTC timestamps: a window store's ``end`` is ``start + window size`` (clamped
to the largest long, as Kafka's ``timeWindowForSize``); a session's ``start`` and ``end`` are
both inclusive, as Kafka's ``SessionWindow``.

Serdes map to Spark types as ``bytes`` -> ``binary``, ``string`` -> ``string``, ``integer``
-> ``int``, ``long`` -> ``bigint``, ``double`` -> ``double``, ``json`` -> ``string`` (the JSON
text), or to the type given by ``keySchema``/``valueSchema`` for ``json`` and registered custom
serdes. With ``decode=false`` keys and values are ``binary`` (the serialized bytes).

User schemas are Spark DDL (``"name STRING, tags ARRAY<STRING>"``, a struct's fields;
``"BIGINT"``, any one type) or the JSON of a Spark ``DataType``. The DDL parser here covers
Spark's type grammar without a JVM (the planner and executors have none).

>>> parse_ddl("id BIGINT, tags ARRAY<STRING>, `a b` STRUCT<x: DOUBLE>").simpleString()
'struct<id:bigint,tags:array<string>,a b:struct<x:double>>'
>>> parse_ddl("map<string, int>").simpleString()
'map<string,int>'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    _parse_datatype_json_string,
)

from txstore.errors import InvalidArgumentError
from txstore.spark.options import ReadOptions
from txstore.spark.plan import StoreSpec

__all__ = [
    "HEADERS_TYPE",
    "WINDOW_TYPE",
    "ColumnDecoder",
    "ReadLayout",
    "layout",
    "metadata_schema",
    "parse_ddl",
    "parse_user_type",
]

WINDOW_TYPE: Final = StructType(
    [StructField("start", TimestampType(), False), StructField("end", TimestampType(), False)]
)
HEADERS_TYPE: Final = ArrayType(
    StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)]),
    False,
)

#: Decoders of the built-in serdes: (decoder kind, Spark type).
_BUILTIN: Final[dict[str, tuple[str, DataType]]] = {
    "bytes": ("binary", BinaryType()),
    "string": ("string", StringType()),
    "integer": ("int32", IntegerType()),
    "long": ("int64", LongType()),
    "double": ("float64", DoubleType()),
    "json": ("string", StringType()),
}


@dataclass(frozen=True)
class ColumnDecoder:
    """How the reader turns serialized keys or values into one Arrow column (picklable).

    ``kind`` is ``binary``, ``string``, ``int32``, ``int64``, ``float64`` (vectorized), ``json``
    (``json.loads`` then the user type) or ``serde`` (the registered serde ``serde``, then the
    user type).
    """

    kind: str
    serde: str
    type_json: str

    @property
    def spark_type(self) -> DataType:
        return _parse_datatype_json_string(self.type_json)


@dataclass(frozen=True)
class ReadLayout:
    """The schema of a read and the decoders of its key and value columns (picklable)."""

    schema_json: str
    key: ColumnDecoder
    value: ColumnDecoder
    value_format: str
    """The stored value layout (a :class:`~txstore.codecs.ValueFormat` name)."""
    has_timestamp: bool
    has_headers: bool
    kind: str = "key_value"
    window_size: int | None = None

    @property
    def schema(self) -> StructType:
        schema = _parse_datatype_json_string(self.schema_json)
        assert isinstance(schema, StructType)
        return schema


def _decoder(what: str, serde: str, decode: bool, user: str | None, store: str) -> ColumnDecoder:
    option = f"{what}Schema"
    if not decode:
        return ColumnDecoder("binary", serde, BinaryType().json())
    if user is not None:
        if serde in _BUILTIN and serde != "json":
            raise InvalidArgumentError(
                f"option {option}: the {what}s of store {store!r} use the {serde!r} serde, "
                f"which maps to {_BUILTIN[serde][1].simpleString()}; {option} applies to json "
                "and custom serdes"
            )
        dtype = parse_user_type(user, option)
        _check_user_type(dtype, option, json_serde=serde == "json")
        return ColumnDecoder("json" if serde == "json" else "serde", serde, dtype.json())
    if serde in _BUILTIN:
        kind, dtype = _BUILTIN[serde]
        return ColumnDecoder(kind, serde, dtype.json())
    raise InvalidArgumentError(
        f"the {what}s of store {store!r} use the custom serde {serde!r}, which has no Spark "
        f"type: give option {option} (the type its deserialize() returns, e.g. "
        f'"name STRING, n BIGINT"), or read bytes with decode=false'
    )


def layout(spec: StoreSpec, options: ReadOptions) -> ReadLayout:
    """The columns of a read of ``spec`` with ``options`` (see the module docstring)."""
    key = _decoder("key", spec.key_serde, options.decode, options.key_schema, spec.name)
    value = _decoder("value", spec.value_serde, options.decode, options.value_schema, spec.name)
    fields = [StructField("key", key.spark_type, False)]
    if spec.kind == "window":
        fields.append(StructField("window", WINDOW_TYPE, False))
    elif spec.kind == "session":
        fields.append(StructField("session_window", WINDOW_TYPE, False))
    fields.append(StructField("value", value.spark_type))
    if spec.format.has_timestamp:
        fields.append(StructField("timestamp", TimestampType(), True))
    if spec.format.has_headers:
        fields.append(StructField("headers", HEADERS_TYPE, False))
    fields.append(StructField("partition_id", IntegerType(), False))
    return ReadLayout(
        StructType(fields).json(),
        key,
        value,
        spec.format.name,
        spec.format.has_timestamp,
        spec.format.has_headers,
        spec.kind,
        spec.window_size,
    )


def metadata_schema() -> StructType:
    """The schema of the ``txstore-metadata`` source: one row per store."""
    return StructType(
        [
            StructField("store", StringType(), False),
            StructField("kind", StringType(), False),
            StructField("format", StringType(), True),
            StructField("key_serde", StringType(), True),
            StructField("value_serde", StringType(), True),
            StructField("num_partitions", IntegerType(), False),
            StructField("partitions", ArrayType(IntegerType(), False), False),
            StructField("committed_offsets", MapType(IntegerType(), LongType(), True), False),
            StructField("entries", LongType(), False),
            StructField("configuration", MapType(StringType(), StringType(), True), False),
            StructField("snapshot", BooleanType(), False),
        ]
    )


# -- user schemas ----------------------------------------------------------------------------------


def parse_user_type(text: str, option: str = "schema") -> DataType:
    """A Spark type from DDL or from the JSON of a ``DataType``; clear errors otherwise."""
    stripped = text.strip()
    if not stripped:
        raise InvalidArgumentError(f"option {option} is empty")
    if stripped.startswith("{") or stripped.startswith('"'):
        try:
            return _parse_datatype_json_string(stripped)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError(
                f"option {option}: not a Spark DataType JSON: {exc}"
            ) from exc
    try:
        return parse_ddl(stripped)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"option {option}: {exc}") from None


def _check_user_type(dtype: DataType, option: str, *, json_serde: bool) -> None:
    bad: list[str] = []

    def walk(t: DataType) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                walk(f.dataType)
        elif isinstance(t, ArrayType):
            walk(t.elementType)
        elif isinstance(t, MapType):
            if json_serde and not isinstance(t.keyType, StringType):
                bad.append(f"{t.simpleString()} (JSON object keys are strings)")
            walk(t.keyType)
            walk(t.valueType)
        elif isinstance(t, DecimalType):
            bad.append(t.simpleString())
        elif json_serde and isinstance(t, (BinaryType, DateType, TimestampType, TimestampNTZType)):
            bad.append(f"{t.simpleString()} (JSON has no such values: read a string and convert)")
        elif not isinstance(t, _SCALARS):
            bad.append(t.simpleString())

    walk(dtype)
    if bad:
        raise InvalidArgumentError(f"option {option}: unsupported type {', '.join(bad)}")


_SCALARS: Final = (
    StringType,
    BinaryType,
    BooleanType,
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DateType,
    TimestampType,
    TimestampNTZType,
)

_SIMPLE: Final[dict[str, DataType]] = {
    "string": StringType(),
    "varchar": StringType(),
    "char": StringType(),
    "binary": BinaryType(),
    "boolean": BooleanType(),
    "bool": BooleanType(),
    "tinyint": ByteType(),
    "byte": ByteType(),
    "smallint": ShortType(),
    "short": ShortType(),
    "int": IntegerType(),
    "integer": IntegerType(),
    "bigint": LongType(),
    "long": LongType(),
    "float": FloatType(),
    "real": FloatType(),
    "double": DoubleType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
}

_TOKEN: Final = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class _Ddl:
    """A recursive-descent parser of Spark's DDL type grammar (the subset types need)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise InvalidArgumentError(f"cannot parse {text!r} at {text[pos : pos + 12]!r}")
            self.tokens.append(next(g for g in m.groups() if g is not None))
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise InvalidArgumentError(f"{self.text!r} ends early")
        if expected is not None and tok.lower() != expected:
            raise InvalidArgumentError(f"expected {expected!r} in {self.text!r}, found {tok!r}")
        self.i += 1
        return tok

    def name(self) -> str:
        tok = self.take()
        if tok.startswith("`"):
            return tok[1:-1].replace("``", "`")
        if not (tok[0].isalpha() or tok[0] == "_"):
            raise InvalidArgumentError(f"expected a field name in {self.text!r}, found {tok!r}")
        return tok

    def field(self, colon: bool) -> StructField:
        name = self.name()
        if colon and self.peek() == ":":
            self.take(":")
        dtype = self.type()
        nullable = True
        if (self.peek() or "").lower() == "not":
            self.take()
            self.take("null")
            nullable = False
        return StructField(name, dtype, nullable)

    def type(self) -> DataType:
        word = self.take().lower()
        if word in ("array", "map", "struct"):
            self.take("<")
            result: DataType
            if word == "array":
                result = ArrayType(self.type(), True)
            elif word == "map":
                key = self.type()
                self.take(",")
                result = MapType(key, self.type(), True)
            else:
                fields: list[StructField] = []
                while self.peek() != ">":
                    if fields:
                        self.take(",")
                    fields.append(self.field(colon=True))
                result = StructType(fields)
            self.take(">")
            return result
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = int(self.take())
                if self.peek() == ",":
                    self.take(",")
                    scale = int(self.take())
                self.take(")")
            return DecimalType(precision, scale)
        if word in ("varchar", "char") and self.peek() == "(":
            self.take("(")
            self.take()
            self.take(")")
        simple = _SIMPLE.get(word)
        if simple is None:
            raise InvalidArgumentError(f"unknown type {word!r} in {self.text!r}")
        return simple

    def done(self) -> None:
        if self.peek() is not None:
            raise InvalidArgumentError(f"unexpected {self.peek()!r} in {self.text!r}")


def parse_ddl(text: str) -> DataType:
    """Parse Spark DDL: ``"a INT, b STRING"`` (a struct's fields) or one type."""
    p = _Ddl(text)
    if not p.tokens:
        raise InvalidArgumentError("empty type")
    # A single type ("bigint", "array<string>", "struct<...>"), if it parses to the end.
    try:
        single = p.type()
        if p.peek() is None:
            return single
    except InvalidArgumentError:
        pass
    p.i = 0
    fields = [p.field(colon=False)]
    while p.peek() == ",":
        p.take(",")
        fields.append(p.field(colon=False))
    p.done()
    return StructType(fields)
