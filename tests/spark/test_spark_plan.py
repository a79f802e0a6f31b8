"""The Spark reader without a Spark session: options, schemas, planning, reading in-process.

What runs here is what the planner and executor workers run; ``tests/spark/test_spark.py`` runs the
same through a real Spark session.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Headers, Serdes, ValueFormat, ValueTimestampHeaders
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, InvalidStateStoreError, SerializationError
from txstore.runtime.snapshot import snapshot_state_dir

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from txstore.spark.datasource import TxStoreReader  # noqa: E402
from txstore.spark.options import parse_options, parse_partitions  # noqa: E402
from txstore.spark.plan import (  # noqa: E402
    CutMovedError,
    SnapshotMismatchError,
    plan,
    resolve,
)
from txstore.spark.reader import _timestamps, read_task  # noqa: E402
from txstore.spark.schema import layout, parse_ddl, parse_user_type  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")


def _state(root: Path, partitions: int = 2) -> Path:
    for p in range(partitions):
        with txstore.open(root / str(p)) as db:
            a = db.key_value_store("a", Serdes.string(), Serdes.long())
            a.put_all((f"k{p}-{i}", i) for i in range(10))
            b = db.key_value_store("b", Serdes.integer(), Serdes.json())
            b.put(p, {"p": p})
            db.commit({"a": 1, "b": 1})
    return root


def _rows(opts: dict[str, str]) -> list[dict[str, Any]]:
    o = parse_options(opts)
    _, spec = resolve(o)
    lay = layout(spec, o)
    schema = to_arrow_schema(lay.schema, timezone="UTC")
    _, tasks = plan(o, spec)
    out: list[dict[str, Any]] = []
    for t in tasks:
        for batch in read_task(t, lay, schema, o.batch_size):
            assert batch.schema.equals(schema)
            out.extend(batch.to_pylist())
    return out


def test_import_txstore_does_not_import_pyspark() -> None:
    code = (
        "import sys, txstore, txstore.runtime.snapshot, txstore.spark; "
        "import txstore.spark.options, txstore.spark.plan; "
        "bad = [m for m in ('pyspark', 'pyarrow', 'py4j') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2]
    )


def test_parse_options_errors() -> None:
    assert parse_options({"PATH": "/x", "Store": "s", "DECODE": "False"}).decode is False
    cases = {
        "unknown option 'stores'": {"path": "/x", "stores": "a"},
        "no path": {"store": "a"},
        "option store is empty": {"path": "/x", "store": " "},
        "option decode must be true or false": {"path": "/x", "decode": "maybe"},
        "option snapshot must be true, false or an absolute": {"path": "/x", "snapshot": "a/b"},
        r"option batchSize must be an integer in 1\.\.": {"path": "/x", "batchSize": "0"},
        "need decode=true": {"path": "/x", "decode": "false", "valueSchema": "a INT"},
    }
    for message, opts in cases.items():
        with pytest.raises(InvalidArgumentError, match=message):
            parse_options(opts)
    assert parse_options({"path": "/x", "snapshot": "/tmp/s/"}).snapshot_dir == "/tmp/s"
    assert parse_options({"path": "/x", "snapshot": "TRUE"}).snapshot == "true"


def test_parse_partitions() -> None:
    assert parse_partitions("0, 2,5-7") == {0, 2, 5, 6, 7}
    for bad, message in (
        ("1,,2", "empty item"),
        ("x", "not a partition number"),
        ("-1", "not a partition number"),
        ("4-2", "is empty"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            parse_partitions(bad)


def test_ddl_and_json_schemas() -> None:
    assert parse_ddl("a INT, b ARRAY<STRING> NOT NULL") == StructType(
        [
            StructField("a", IntegerType()),
            StructField("b", ArrayType(StringType()), False),
        ]
    )
    assert parse_ddl("bigint") == LongType()
    assert parse_ddl("date STRING").simpleString() == "struct<date:string>"
    assert parse_ddl("m MAP<STRING, STRUCT<x: BIGINT, `y z`: DOUBLE>>").simpleString() == (
        "struct<m:map<string,struct<x:bigint,y z:double>>>"
    )
    assert parse_ddl("d DECIMAL(12, 3)") == StructType([StructField("d", DecimalType(12, 3))])
    schema = StructType([StructField("n", MapType(StringType(), LongType()))])
    assert parse_user_type(schema.json()) == schema
    for bad in ("a FOO", "a INT,", "struct<a INT", "a INT b INT", "   "):
        with pytest.raises(InvalidArgumentError):
            parse_user_type(bad, "valueSchema")


def test_resolve_errors(tmp_path: Path) -> None:
    root = _state(tmp_path / "s")
    cases = {
        r"option store is required: .* holds 2 stores: a, b": {},
        r"no store 'c' in .*; stores: a, b": {"store": "c"},
        r"option partitions: .* has no partition 3-4 \(it has 0-1\)": {
            "store": "a",
            "partitions": "0,3-4",
        },
        "applies to json and custom serdes": {"store": "a", "valueSchema": "x INT"},
        r"unsupported type decimal\(10,0\)": {"store": "b", "valueSchema": "x DECIMAL"},
        "JSON has no such values": {"store": "b", "valueSchema": "x TIMESTAMP"},
    }
    for message, extra in cases.items():
        o = parse_options({"path": str(root), **extra})
        with pytest.raises(InvalidArgumentError, match=message):
            _, spec = resolve(o)
            layout(spec, o)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        resolve(parse_options({"path": str(tmp_path / "nope")}))
    with pytest.raises(InvalidArgumentError, match="holds no txstore partitions"):
        resolve(parse_options({"path": str(tmp_path)}))


def test_unsupported_metadata_is_refused(tmp_path: Path) -> None:
    with Partition(tmp_path / "0") as p:
        BytesKeyValueStore("t", p, meta={"kind": "table", "format": "PLAIN"})
        BytesKeyValueStore("w", p, meta={"kind": "window", "format": "PLAIN", "retention": 1})
        BytesKeyValueStore("n", p, meta={"kind": "key_value", "format": "PLAIN", "x": 1})
    with pytest.raises(InvalidArgumentError, match="is a 'table' store; this reader reads"):
        resolve(parse_options({"path": str(tmp_path), "store": "t"}))
    with pytest.raises(InvalidArgumentError, match=r"missing fields \['format_version', 'key"):
        resolve(parse_options({"path": str(tmp_path), "store": "w"}))
    with pytest.raises(InvalidArgumentError, match=r"does not understand \(unknown fields"):
        resolve(parse_options({"path": str(tmp_path), "store": "n"}))


def test_custom_serde_needs_a_schema(tmp_path: Path) -> None:
    with Partition(tmp_path / "0") as p:
        meta = {
            "kind": "key_value",
            "format": "PLAIN",
            "key_serde": "string",
            "value_serde": "my-avro",
            "format_version": 1,
        }
        BytesKeyValueStore("c", p, meta=meta).put(b"k", b"v")
        p.commit_stores({"c": 1})
    o = parse_options({"path": str(tmp_path)})
    with pytest.raises(InvalidArgumentError, match=r"custom serde 'my-avro'.*valueSchema"):
        layout(resolve(o)[1], o)
    rows = _rows({"path": str(tmp_path), "decode": "false"})
    assert rows == [{"key": b"k", "value": b"v", "partition_id": 0}]
    with pytest.raises(SerializationError, match="'my-avro', which is not registered"):
        _rows({"path": str(tmp_path), "valueSchema": "STRING"})


def test_in_process_read_matches_store_and_empty_plan_call(tmp_path: Path) -> None:
    root = _state(tmp_path / "s")
    rows = _rows({"path": str(root), "store": "a"})
    assert sorted((r["key"], r["value"], r["partition_id"]) for r in rows) == sorted(
        (f"k{p}-{i}", i, p) for p in range(2) for i in range(10)
    )
    rows = _rows({"path": str(root), "store": "b", "valueSchema": "p BIGINT"})
    assert sorted((r["key"], r["value"]) for r in rows) == [(0, {"p": 0}), (1, {"p": 1})]
    rows = _rows({"path": str(root), "store": "a", "batchSize": "3", "partitions": "1"})
    assert len(rows) == 10
    o = parse_options({"path": str(root), "store": "a"})
    _, spec = resolve(o)
    reader = TxStoreReader(o, spec, layout(spec, o))
    from pyspark.sql.datasource import InputPartition

    assert list(reader.read(InputPartition(None))) == []


def test_bad_bytes_are_clear_errors(tmp_path: Path) -> None:
    meta = {
        "kind": "key_value",
        "format": "TIMESTAMPED",
        "key_serde": "string",
        "value_serde": "long",
        "format_version": 1,
    }
    with Partition(tmp_path / "0") as p:
        BytesKeyValueStore("utf", p, meta=meta).put(b"\xff\xfe", b"\0" * 16)
        BytesKeyValueStore("len", p, meta=meta).put(b"ok", b"\0" * 8 + b"short")
        BytesKeyValueStore("ts", p, meta=meta).put(b"ok", b"\0" * 5)
        p.commit_stores({"utf": 1, "len": 1, "ts": 1})
    with pytest.raises(SerializationError, match=r"key b'\\xff\\xfe' .* is not UTF-8"):
        _rows({"path": str(tmp_path), "store": "utf"})
    with pytest.raises(SerializationError, match="has 5 bytes; the Long serde writes 8"):
        _rows({"path": str(tmp_path), "store": "len"})
    with pytest.raises(SerializationError):
        _rows({"path": str(tmp_path), "store": "ts"})  # shorter than its timestamp
    assert len(_rows({"path": str(tmp_path), "store": "len", "decode": "false"})) == 1


def test_commit_after_planning_reads_the_newer_commit_whole(tmp_path: Path) -> None:
    """A live partition that commits between planning and reading is read at its newer commit
    (one read transaction: all of it, nothing else); only a changed configuration is refused."""
    root = _state(tmp_path / "s", partitions=3)
    o = parse_options({"path": str(root), "store": "a"})
    _, spec = resolve(o)
    lay = layout(spec, o)
    schema = to_arrow_schema(lay.schema, timezone="UTC")
    _, tasks = plan(o, spec)
    with txstore.open(root / "1") as db:  # another store, same partition: a new LMDB commit
        db.key_value_store("b", Serdes.integer(), Serdes.json()).put(9, [])
        db.commit({"b": 2})
    with txstore.open(root / "2") as db:  # the read store itself: one put, one delete
        a = db.key_value_store("a", Serdes.string(), Serdes.long())
        a.put("new", 99)
        a.delete("k2-0")
        a.put("staged-only", 1)  # never committed: never read
        db.commit({"a": 2})
        a.put("uncommitted", 1)
        read = [b.to_pylist() for t in tasks for b in read_task(t, lay, schema, 4)]
    rows = {(r["partition_id"], r["key"]): r["value"] for batch in read for r in batch}
    assert sum(1 for p, _ in rows if p == 0) == 10 and sum(1 for p, _ in rows if p == 1) == 10
    in_two = {k: v for (p, k), v in rows.items() if p == 2}
    assert in_two == {**{f"k2-{i}": i for i in range(1, 10)}, "new": 99, "staged-only": 1}
    with Partition(root / "0") as part:  # a different configuration: the schema is wrong now
        part.update_store_meta("a", {**(part.store_meta("a") or {}), "value_serde": "string"})
    with pytest.raises(CutMovedError, match=r"'a' in partition 0 .* changed its configuration"):
        list(read_task(tasks[0], lay, schema, 100))
    assert issubclass(CutMovedError, InvalidStateStoreError)


def test_snapshot_source_checks_its_manifest(tmp_path: Path) -> None:
    root = _state(tmp_path / "s")
    snap = tmp_path / "snap"
    snapshot_state_dir(root, snap)
    o = parse_options({"path": str(snap), "store": "a"})
    _, spec = resolve(o)
    lay = layout(spec, o)
    schema = to_arrow_schema(lay.schema, timezone="UTC")
    _, tasks = plan(o, spec)
    assert all(t.snapshot for t in tasks)
    # swap partition 1's copy for partition 0's: the manifest no longer matches
    data1 = snap / "1" / "data" / "data.mdb"
    data1.chmod(0o644)
    data1.write_bytes((snap / "0" / "data" / "data.mdb").read_bytes() + b"\0" * 4096)
    assert sum(b.num_rows for b in read_task(tasks[0], lay, schema, 100)) == 10
    with pytest.raises(SnapshotMismatchError, match="does not match its manifest"):
        list(read_task(tasks[1], lay, schema, 100))
    with pytest.raises(InvalidArgumentError, match="is already a snapshot"):
        resolve(parse_options({"path": str(snap), "snapshot": str(tmp_path / "x")}))


def test_headers_and_timestamps_in_process(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "0") as db:
        h = db.key_value_store("h", Serdes.string(), Serdes.double(), format=ValueFormat.HEADERS)
        h.put("a", ValueTimestampHeaders(1.5, -1, Headers([("x", b"1"), ("y", None)])))
        h.put("b", ValueTimestampHeaders(2.5, 1_700_000_000_123, Headers()))
        db.commit({"h": 1})
    rows = _rows({"path": str(tmp_path)})
    assert rows[0]["headers"] == [{"key": "x", "value": b"1"}, {"key": "y", "value": None}]
    assert rows[0]["timestamp"] is None  # Kafka's -1: no timestamp
    assert rows[1]["headers"] == [] and rows[1]["value"] == 2.5
    assert rows[1]["timestamp"].timestamp() == 1_700_000_000.123
    # beyond Spark's range: saturated, not an error
    micros = _timestamps([2**63 - 1, -(2**63), 0]).cast(pa.int64()).to_pylist()
    assert micros == [(2**63 - 1) // 1000 * 1000, -((2**63 - 1) // 1000 * 1000), 0]


def test_window_session_and_upgraded_stores_in_process(tmp_path: Path) -> None:
    """Window and session stores read through their committed views; a key-value store being
    upgraded reads its new and legacy tiers, converted to the new format."""
    from txstore import AggregationWithHeaders, SessionWindow, Windowed

    with txstore.open(tmp_path / "0") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.long(), retention_period=10_000, window_size=1_000
        )
        for i in range(5):
            w.put(f"k{i % 2}", i, i * 3_000)  # several segments
        s = db.session_store(
            "s",
            Serdes.string(),
            Serdes.json(),
            retention_period=10_000,
            format=ValueFormat.PLAIN_HEADERS,
        )
        s.put(Windowed("a", SessionWindow(10, 20)), AggregationWithHeaders({"n": 1}, Headers()))
        s.put(
            Windowed("b", SessionWindow(5, 5)),
            AggregationWithHeaders({"n": 2}, Headers([("h", b"x")])),
        )
        kv = db.key_value_store("u", Serdes.string(), Serdes.long())
        kv.put("old", 1)
        db.commit({"w": 1, "s": 1, "u": 1})
    with txstore.open(tmp_path / "0") as db:  # reopened in a later format: lazy upgrade
        kv2 = db.key_value_store(
            "u", Serdes.string(), Serdes.long(), format=ValueFormat.TIMESTAMPED
        )
        from txstore import ValueAndTimestamp

        kv2.put("new", ValueAndTimestamp(2, 77))
        db.commit({"u": 2})
        assert "db" in db.partition.store_meta("u")  # type: ignore[operator]
    rows = _rows({"path": str(tmp_path), "store": "w"})
    got = sorted(
        (r["key"], r["window"]["start"].timestamp(), r["window"]["end"].timestamp(), r["value"])
        for r in rows
    )
    assert got == sorted((f"k{i % 2}", i * 3.0, i * 3.0 + 1, i) for i in range(5))
    rows = _rows({"path": str(tmp_path), "store": "s", "valueSchema": "n INT"})
    sessions = sorted(
        (
            r["key"],
            r["session_window"]["start"].timestamp() * 1000,
            r["session_window"]["end"].timestamp() * 1000,
            r["value"],
            r["headers"],
        )
        for r in rows
    )
    assert sessions == [
        ("a", 10.0, 20.0, {"n": 1}, []),
        ("b", 5.0, 5.0, {"n": 2}, [{"key": "h", "value": b"x"}]),
    ]
    rows = _rows({"path": str(tmp_path), "store": "u"})
    assert sorted((r["key"], r["value"], r["timestamp"] is None) for r in rows) == [
        ("new", 2, False),
        ("old", 1, True),  # legacy PLAIN value: converted, timestamp -1 (null)
    ]


def test_snapshot_option_directory_checks(tmp_path: Path) -> None:
    root = _state(tmp_path / "s")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    with pytest.raises(InvalidArgumentError, match="neither a snapshot nor an empty directory"):
        resolve(parse_options({"path": str(root), "store": "a", "snapshot": str(busy)}))
    kept = tmp_path / "kept"
    rows = _rows({"path": str(root), "store": "a", "snapshot": str(kept), "partitions": "1"})
    assert {r["partition_id"] for r in rows} == {1}
    with pytest.raises(InvalidArgumentError, match=r"has no partition 0 \(it was taken with"):
        _rows({"path": str(root), "store": "a", "snapshot": str(kept)})
