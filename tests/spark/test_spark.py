"""The txstore Spark data sources through a real local Spark session (one for the whole run).

Every read is compared with a direct read of the same stores through txstore's typed API.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import txstore
from tests import _engine_child as child
from txstore import (
    AggregationWithHeaders,
    Headers,
    Serdes,
    SessionWindow,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
    serde_by_name,
)
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.cli.main import main as cli
from txstore.engine.partition import Partition
from txstore.runtime.snapshot import read_manifest, snapshot_state_dir

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3

pytestmark = pytest.mark.filterwarnings("error")


# -- the state directory every read test uses ----------------------------------------------------

STORES: dict[str, tuple[str, str, ValueFormat]] = {
    "plain": ("string", "long", ValueFormat.PLAIN),
    "ints": ("integer", "string", ValueFormat.PLAIN),
    "blobs": ("bytes", "bytes", ValueFormat.PLAIN),
    "stamped": ("long", "json", ValueFormat.TIMESTAMPED),
    "headed": ("string", "double", ValueFormat.HEADERS),
    "empty": ("string", "long", ValueFormat.PLAIN),
}


#: Window and session stores (every format): name -> (key, value serde, format).
WINDOWS: dict[str, tuple[str, str, ValueFormat]] = {
    "w_plain": ("string", "long", ValueFormat.PLAIN),
    "w_stamped": ("integer", "double", ValueFormat.TIMESTAMPED),
    "w_headed": ("string", "string", ValueFormat.HEADERS),
    "w_plain_headers": ("long", "json", ValueFormat.PLAIN_HEADERS),
}
SESSIONS: dict[str, tuple[str, str, ValueFormat]] = {
    "s_plain": ("string", "long", ValueFormat.PLAIN),
    "s_headers": ("string", "json", ValueFormat.PLAIN_HEADERS),
    "s_stamped": ("string", "double", ValueFormat.TIMESTAMPED),
    "s_stamped_headers": ("string", "string", ValueFormat.HEADERS),
}
WINDOW_SIZE, RETENTION = 5_000, 3_600_000


def _segmented_value(fmt: ValueFormat, serde: str, session: bool, i: int) -> Any:
    inner: Any = {"long": i, "double": i / 8, "string": f"s{i}", "json": {"i": i}}[serde]
    headers = Headers([("h", b"%d" % i)] if i % 3 else [])
    if fmt == ValueFormat.TIMESTAMPED:
        return ValueAndTimestamp(inner, 1_000 + i)
    if fmt == ValueFormat.HEADERS:
        return ValueTimestampHeaders(inner, 1_000 + i, headers)
    if fmt == ValueFormat.PLAIN_HEADERS:
        return (
            AggregationWithHeaders(inner, headers) if session else ValueAndHeaders(inner, headers)
        )
    return inner


def _write_segmented(db: txstore.Database, p: int) -> dict[str, int]:
    for name, (k, v, fmt) in WINDOWS.items():
        w = db.window_store(
            name,
            serde_by_name(k),
            serde_by_name(v),
            retention_period=RETENTION,
            window_size=WINDOW_SIZE,
            retain_duplicates=name == "w_plain",
            format=fmt,
        )
        for i in range(60 + p):
            key = {"string": f"key{i % 7}", "integer": i % 7 - 3, "long": i % 7}[k]
            w.put(key, _segmented_value(fmt, v, False, i), (i // 7) * 1_000_000)  # many segments
        if name == "w_plain":
            w.put("key0", 999, 0)  # retained duplicate
    for name, (k, v, fmt) in SESSIONS.items():
        s = db.session_store(
            name, serde_by_name(k), serde_by_name(v), retention_period=RETENTION, format=fmt
        )
        for i in range(40 + p):
            start = i * 10_000
            s.put(
                Windowed(f"u{i % 5}", SessionWindow(start, start + i * 7)),
                _segmented_value(fmt, v, True, i),
            )
    return {name: 9 + p for name in [*WINDOWS, *SESSIONS]}


def _value(store: str, p: int, i: int) -> Any:
    fmt = STORES[store][2]
    inner: Any = {
        "plain": i * 1000 + p,
        "ints": f"v{i}-é",
        "blobs": bytes([i % 256, p]) * (i % 5),
        "stamped": {"n": i, "tags": ["a", "b"][: i % 3], "m": {"x": i}},
        "headed": i / 4,
    }[store]
    if fmt == ValueFormat.TIMESTAMPED:
        return ValueAndTimestamp(inner, -1 if i == 0 else 1_600_000_000_000 + i)
    if fmt == ValueFormat.HEADERS:
        headers = Headers([("h", bytes([i % 256])), ("none", None)] if i % 2 else [])
        return ValueTimestampHeaders(inner, i, headers)
    return inner


def _key(store: str, p: int, i: int) -> Any:
    serde = STORES[store][0]
    return {
        "string": f"{store}-{p}-{i:04d}",
        "integer": p * 10_000 + i - 500,  # negative keys too
        "long": p * 10**12 + i,
        "bytes": b"\x00k%d-%d" % (p, i),
    }[serde]


def _open_typed(db: txstore.Database, store: str) -> Any:
    k, v, fmt = STORES[store]
    return db.key_value_store(store, serde_by_name(k), serde_by_name(v), format=fmt)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spark") / "state"
    for p in range(PARTITIONS):
        with txstore.open(root / str(p)) as db:
            offsets = {}
            for store in STORES:
                if store == "headed" and p == 1:
                    continue  # a store missing from one partition
                s = _open_typed(db, store)
                n = 0 if store == "empty" else 200 + 37 * p
                s.put_all((_key(store, p, i), _value(store, p, i)) for i in range(n))
                offsets[store] = 100 * p + len(store)
            offsets.update(_write_segmented(db, p))
            up = db.key_value_store("upgraded", Serdes.string(), Serdes.long())
            up.put_all((f"old{i}", i) for i in range(30))
            offsets["upgraded"] = 1
            db.commit(offsets)
        with txstore.open(root / str(p)) as db:  # reopened in a later format: a lazy upgrade
            up2 = db.key_value_store(
                "upgraded", Serdes.string(), Serdes.long(), format=ValueFormat.HEADERS
            )
            up2.put_all((f"new{i}", ValueTimestampHeaders(i, 5, Headers())) for i in range(20))
            up2.put("old3", ValueTimestampHeaders(-3, 6, Headers([("x", None)])))
            db.commit({"upgraded": 2})
        with Partition(root / str(p)) as part:  # a store of the bytes layer (no serdes)
            raw = BytesKeyValueStore("raw", part)
            raw.put_all((b"r%05d" % i, b"\xff" * (i % 3)) for i in range(50))
            raw.commit(7)
    return root


def _direct(root: Path, store: str) -> list[tuple[Any, ...]]:
    """The rows a Spark read must return, from txstore's typed API (partition order)."""
    fmt = STORES[store][2]
    out: list[tuple[Any, ...]] = []
    for p in range(PARTITIONS):
        with txstore.open(root / str(p), readonly=True) as db:
            if store not in db.store_names():
                continue
            with _open_typed(db, store).all() as it:
                for kv in it:
                    row: list[Any] = [kv.key]
                    v = kv.value
                    if fmt == ValueFormat.PLAIN:
                        row.append(v)
                    else:
                        row.append(v.value)
                        row.append(None if v.timestamp == -1 else v.timestamp)
                    if fmt == ValueFormat.HEADERS:
                        row.append([(h.key, h.value) for h in v.headers])
                    row.append(p)
                    out.append(tuple(row))
    return out


def _collect(df: Any, store: str) -> list[tuple[Any, ...]]:
    """Rows of a txstore DataFrame as plain tuples (timestamps as epoch ms, JSON parsed)."""
    import json

    fmt = STORES[store][2]
    cols = ["key", "value"]
    if fmt.has_timestamp:
        cols.append("unix_millis(timestamp) AS ts")
    if fmt.has_headers:
        cols.append("headers")
    cols.append("partition_id")
    out = []
    for r in df.selectExpr(*cols).collect():
        row = list(r)
        if isinstance(row[0], bytearray):
            row[0] = bytes(row[0])
        if isinstance(row[1], bytearray):
            row[1] = bytes(row[1])
        if STORES[store][1] == "json":
            row[1] = json.loads(row[1])
        if fmt.has_headers:
            row[-2] = [
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in row[-2]
            ]
        out.append(tuple(row))
    return out


@pytest.mark.parametrize("store", [s for s in STORES if s != "empty"])
def test_each_format_equals_a_direct_read(spark: Any, state: Path, store: str) -> None:
    df = spark.read.format("txstore").option("store", store).load(str(state))
    expected = _direct(state, store)
    assert len(expected) > 400
    assert _collect(df, store) == expected


def _segmented_direct(root: Path, name: str) -> list[tuple[Any, ...]]:
    session = name in SESSIONS
    k, v, fmt = (SESSIONS if session else WINDOWS)[name]
    out: list[tuple[Any, ...]] = []
    for p in range(PARTITIONS):
        with txstore.open(root / str(p), readonly=True) as db:
            if session:
                store: Any = db.session_store(
                    name, serde_by_name(k), serde_by_name(v), retention_period=RETENTION, format=fmt
                )
                it = store.fetch(None, None)
            else:
                store = db.window_store(
                    name,
                    serde_by_name(k),
                    serde_by_name(v),
                    retention_period=RETENTION,
                    window_size=WINDOW_SIZE,
                    retain_duplicates=name == "w_plain",
                    format=fmt,
                )
                it = store.all()
            with it:
                for kv in it:
                    w, value = kv.key.window, kv.value
                    row: list[Any] = [kv.key.key, w.start, w.end]
                    if fmt == ValueFormat.PLAIN:
                        row.append(value)
                    elif fmt == ValueFormat.PLAIN_HEADERS:
                        row.append(value.aggregation if session else value.value)
                    else:
                        row.append(value.value)
                    if fmt.has_timestamp:
                        row.append(value.timestamp)
                    if fmt.has_headers:
                        row.append([(h.key, h.value) for h in value.headers])
                    row.append(p)
                    out.append(tuple(row))
    return sorted(out, key=repr)


@pytest.mark.parametrize("name", [*WINDOWS, *SESSIONS])
def test_window_and_session_stores_equal_a_direct_read(spark: Any, state: Path, name: str) -> None:
    import json

    session = name in SESSIONS
    _, v, fmt = (SESSIONS if session else WINDOWS)[name]
    col = "session_window" if session else "window"
    df = spark.read.format("txstore").option("store", name).load(str(state))
    assert df.schema[col].dataType.simpleString() == "struct<start:timestamp,end:timestamp>"
    cols = ["key", f"unix_millis({col}.start)", f"unix_millis({col}.end)", "value"]
    if fmt.has_timestamp:
        cols.append("unix_millis(timestamp)")
    if fmt.has_headers:
        cols.append("headers")
    cols.append("partition_id")
    got = []
    for r in df.selectExpr(*cols).collect():
        row = list(r)
        if v == "json":
            row[3] = json.loads(row[3])
        if fmt.has_headers:
            row[-2] = [
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in row[-2]
            ]
        got.append(tuple(row))
    expected = _segmented_direct(state, name)
    assert len(expected) >= 90  # older segments expired and were dropped by the writer
    assert sorted(got, key=repr) == expected


def test_timestamped_session_store_schema_has_the_timestamp_column(spark: Any, state: Path) -> None:
    """As a timestamped window store: the value's timestamp is a nullable UTC timestamp column
    after the value, and HEADERS adds the headers after it."""
    df = spark.read.format("txstore").option("store", "s_stamped").load(str(state))
    assert df.schema.simpleString() == (
        "struct<key:string,session_window:struct<start:timestamp,end:timestamp>,value:double,"
        "timestamp:timestamp,partition_id:int>"
    )
    first = df.orderBy("partition_id", "session_window.start").first()
    assert first is not None and first["timestamp"].timestamp() * 1000 == pytest.approx(
        1_000 + int(first["value"] * 8)
    )
    df = spark.read.format("txstore").option("store", "s_stamped_headers").load(str(state))
    assert df.schema.simpleString() == (
        "struct<key:string,session_window:struct<start:timestamp,end:timestamp>,value:string,"
        "timestamp:timestamp,headers:array<struct<key:string,value:binary>>,partition_id:int>"
    )


def test_upgraded_key_value_store_reads_every_tier(spark: Any, state: Path) -> None:
    df = spark.read.format("txstore").option("store", "upgraded").load(str(state))
    assert df.schema.simpleString() == (
        "struct<key:string,value:bigint,timestamp:timestamp,"
        "headers:array<struct<key:string,value:binary>>,partition_id:int>"
    )
    rows = (
        df.where("partition_id = 0")
        .selectExpr("key", "value", "unix_millis(timestamp)", "headers")
        .collect()
    )
    got = {r[0]: (r[1], r[2], [(h.key, h.value) for h in r[3]]) for r in rows}
    assert len(got) == 50
    assert got["old1"] == (1, None, [])  # legacy PLAIN tier, converted
    assert got["old3"] == (-3, 6, [("x", None)])  # moved to the new tier by the write
    assert got["new7"] == (7, 5, [])


def test_schema_follows_format_and_serdes(spark: Any, state: Path) -> None:
    def schema(store: str, **opts: str) -> str:
        reader = spark.read.format("txstore").option("store", store)
        for k, v in opts.items():
            reader = reader.option(k, v)
        return str(reader.load(str(state)).schema.simpleString())

    assert schema("plain") == "struct<key:string,value:bigint,partition_id:int>"
    assert schema("ints") == "struct<key:int,value:string,partition_id:int>"
    assert schema("stamped") == (
        "struct<key:bigint,value:string,timestamp:timestamp,partition_id:int>"
    )
    assert schema("headed") == (
        "struct<key:string,value:double,timestamp:timestamp,"
        "headers:array<struct<key:string,value:binary>>,partition_id:int>"
    )
    assert schema("headed", decode="false") == (
        "struct<key:binary,value:binary,timestamp:timestamp,"
        "headers:array<struct<key:string,value:binary>>,partition_id:int>"
    )
    assert schema("raw") == "struct<key:binary,value:binary,partition_id:int>"


def test_decode_false_gives_the_serialized_bytes(spark: Any, state: Path) -> None:
    df = spark.read.format("txstore").option("store", "plain").option("decode", "false")
    rows = df.load(str(state)).where("partition_id = 2").orderBy("key").collect()
    expected = _direct(state, "plain")
    expected = [r for r in expected if r[-1] == 2]
    long_serde, string_serde = Serdes.long(), Serdes.string()
    assert [(bytes(r.key), bytes(r.value)) for r in rows] == [
        (string_serde.serialize(k), long_serde.serialize(v)) for k, v, _ in expected
    ]


def test_raw_bytes_store_and_empty_store(spark: Any, state: Path) -> None:
    rows = spark.read.format("txstore").option("store", "raw").load(str(state)).collect()
    assert len(rows) == 50 * PARTITIONS
    assert {bytes(r.value) for r in rows} == {b"", b"\xff", b"\xff\xff"}
    empty = spark.read.format("txstore").option("store", "empty").load(str(state))
    assert empty.count() == 0


def test_json_value_schema(spark: Any, state: Path) -> None:
    df = (
        spark.read.format("txstore")
        .option("store", "stamped")
        .option("valueSchema", "n INT, tags ARRAY<STRING>, m MAP<STRING, BIGINT>")
        .load(str(state))
    )
    assert df.schema["value"].dataType.simpleString() == (
        "struct<n:int,tags:array<string>,m:map<string,bigint>>"
    )
    rows = df.where("partition_id = 0").orderBy("key").collect()
    expected = [r for r in _direct(state, "stamped") if r[-1] == 0]
    assert [(r.key, r.value.n, r.value.tags, r.value.m) for r in rows] == [
        (k, v["n"], v["tags"], v["m"]) for k, v, _ts, _p in expected
    ]
    bad = (
        spark.read.format("txstore")
        .option("store", "stamped")
        .option("valueSchema", "n STRING, tags INT")
        .load(str(state))
    )
    with pytest.raises(Exception, match="does not fit the schema"):
        bad.collect()


def test_partitions_option(spark: Any, state: Path) -> None:
    df = spark.read.format("txstore").option("store", "plain").option("partitions", "0,2")
    rows = df.load(str(state)).collect()
    assert {r.partition_id for r in rows} == {0, 2}
    assert len(rows) == len([r for r in _direct(state, "plain") if r[-1] != 1])
    one = spark.read.format("txstore").option("store", "headed").option("partitions", "2")
    assert one.load(str(state)).count() == 200 + 37 * 2
    # Spark stops reading early: the reader's generator is closed, its snapshot released
    small = spark.read.format("txstore").option("store", "plain").option("batchSize", "16")
    assert len(small.load(str(state)).limit(5).collect()) == 5


def test_bad_options_are_clear_errors(spark: Any, state: Path) -> None:
    cases = [
        ({}, r"option store is required: .* holds 16 stores: blobs, empty, headed, ints, plain"),
        ({"store": "nope"}, r"no store 'nope' in .*; stores: blobs, empty, headed, ints, plain"),
        ({"store": "plain", "partitions": "7"}, r"has no partition 7 \(it has 0-2\)"),
        ({"store": "plain", "partitions": "a"}, "is not a partition number or range"),
        ({"store": "headed", "partitions": "1"}, r"no store 'headed' in partitions 1 of"),
        ({"store": "plain", "decode": "yes please"}, "option decode must be true or false"),
        ({"store": "plain", "snapshot": "relative/dir"}, "option snapshot must be true, false"),
        ({"store": "plain", "snapshot": "/no/such/parent/snap"}, "parent directory of .*"),
        ({"store": "plain", "snapshot": str(state / "0" / "snap")}, "is inside the source"),
        ({"store": "plain", "snapshot": str(state / "0" / "data" / "data.mdb")}, "neither a snap"),
        ({"store": "plain", "batchSize": "0"}, "option batchSize must be an integer in 1.."),
        ({"store": "plain", "partitions": "3-1"}, r"range '3-1' is empty"),
        ({"store": "plain", "decode": "false", "keySchema": "x INT"}, "need decode=true"),
        ({"store": "plain", "keySchema": "BIGINT"}, "applies to json and custom serdes"),
        ({"store": "stamped", "valueSchema": "no such type"}, "valueSchema"),
        ({"store": "  "}, "option store is empty"),
        ({"store": "plain", "stores": "x"}, "unknown option 'stores'"),
        ({"store": "plain", "valueSchema": "INT"}, "applies to json and custom serdes"),
    ]
    for opts, message in cases:
        reader = spark.read.format("txstore")
        for k, v in opts.items():
            reader = reader.option(k, v)
        with pytest.raises(Exception, match=message):
            reader.load(str(state))
    with pytest.raises(Exception, match="holds no txstore partitions"):
        spark.read.format("txstore").load(str(state.parent))
    with pytest.raises(Exception, match="the txstore source decides its schema"):
        spark.read.format("txstore").schema("key STRING").option("store", "plain").load(
            str(state)
        ).collect()


def test_metadata_source(spark: Any, state: Path) -> None:
    rows = {r.store: r for r in spark.read.format("txstore-metadata").load(str(state)).collect()}
    kv = ["blobs", "empty", "headed", "ints", "plain", "raw", "stamped", "upgraded"]
    assert sorted(rows) == sorted([*kv, *WINDOWS, *SESSIONS])
    window = rows["w_headed"]
    assert (window.kind, window.format) == ("window", "HEADERS")
    assert window.configuration["window_size"] == str(WINDOW_SIZE)
    assert window.entries == len(_segmented_direct(state, "w_headed"))  # every segment counted
    assert rows["s_headers"].kind == "session"
    headed = rows["headed"]
    assert (headed.kind, headed.format, headed.key_serde, headed.value_serde) == (
        "key_value",
        "HEADERS",
        "string",
        "double",
    )
    assert headed.partitions == [0, 2] and headed.num_partitions == 2
    assert headed.committed_offsets == {0: 6, 2: 206}
    assert headed.entries == 200 + 274
    assert headed.configuration["format_version"] == "1"
    assert headed.snapshot is False
    assert rows["empty"].entries == 0
    assert rows["raw"].committed_offsets == {0: 7, 1: 7, 2: 7} and rows["raw"].format == "bytes"
    with pytest.raises(Exception, match="takes only a path"):
        spark.read.format("txstore-metadata").option("store", "x").load(str(state))


def test_snapshot_equals_live(spark: Any, state: Path, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    snapshot_state_dir(state, snap)
    for store in ("plain", "headed"):
        live = _collect(spark.read.format("txstore").option("store", store).load(str(state)), store)
        copy = _collect(spark.read.format("txstore").option("store", store).load(str(snap)), store)
        assert copy == live == _direct(state, store)
    for store in ("w_headed", "s_headers", "upgraded"):
        live_rows = spark.read.format("txstore").option("store", store).load(str(state)).collect()
        copy_rows = spark.read.format("txstore").option("store", store).load(str(snap)).collect()
        assert copy_rows == live_rows and len(live_rows) > 50
    meta = spark.read.format("txstore-metadata").load(str(snap)).where("store = 'plain'").first()
    assert meta.snapshot is True and meta.committed_offsets == {0: 5, 1: 105, 2: 205}


def _writable_copy(state: Path, dest: Path) -> Path:
    snapshot_state_dir(state, dest / "snap")
    for p in range(PARTITIONS):  # a live state directory of our own, to commit into
        (dest / "live" / str(p) / "data").mkdir(parents=True)
        src = dest / "snap" / str(p) / "data" / "data.mdb"
        (dest / "live" / str(p) / "data" / "data.mdb").write_bytes(src.read_bytes())
    return dest / "live"


def _commit_more(root: Path, p: int, offset: int) -> None:
    with txstore.open(root / str(p)) as db:
        _open_typed(db, "plain").put("new-key", 1)
        db.commit({"plain": offset})


def test_commit_after_planning_reads_the_newer_commit(
    spark: Any, state: Path, tmp_path: Path
) -> None:
    live = _writable_copy(state, tmp_path)
    df = spark.read.format("txstore").option("store", "plain").load(str(live))
    first = df.collect()  # plans the cut; Spark keeps this plan for the DataFrame
    _commit_more(live, 1, 1000)
    again = df.collect()  # same plan, moved partition: its newer commit, whole
    assert sorted(again) == sorted([*first, _row_of(again, "new-key")])
    assert _row_of(again, "new-key").partition_id == 1


def _row_of(rows: list[Any], key: str) -> Any:
    (row,) = [r for r in rows if r.key == key]
    return row


def test_snapshot_true_reads_the_plan_time_cut(spark: Any, state: Path, tmp_path: Path) -> None:
    live = _writable_copy(state, tmp_path)
    df = spark.read.format("txstore").option("store", "plain").option("snapshot", "true")
    df = df.load(str(live))
    first = sorted(df.collect())
    _commit_more(live, 0, 1000)
    assert sorted(df.collect()) == first  # the same plan reads the same plan-time snapshot


def test_snapshot_dir_is_taken_once_then_reused(spark: Any, state: Path, tmp_path: Path) -> None:
    live = _writable_copy(state, tmp_path)
    snap = tmp_path / "kept"

    def read() -> list[Any]:
        reader = spark.read.format("txstore").option("store", "plain")
        return sorted(reader.option("snapshot", str(snap)).load(str(live)).collect())

    first = read()
    assert read_manifest(snap).source == str(live)
    _commit_more(live, 2, 1000)
    assert read() == first  # the directory exists: read as it is
    other = spark.read.format("txstore").option("store", "plain").option("snapshot", str(snap))
    with pytest.raises(Exception, match="was taken from"):
        other.load(str(state))


_WRITER = """
import sys, time
from txstore import Serdes, Stores
from txstore.runtime.task import Task
tasks = [Task(path, sync=False) for path in sys.argv[1:]]
stores = []
for task in tasks:
    stores.append(task.key_value_store(Stores.key_value_store_builder(
        Stores.persistent_key_value_store("state"), Serdes.string(), Serdes.long())))
    task.initialize()
c = 0
while True:
    c += 1
    for task, store in zip(tasks, stores):
        store.put_all((f"key{i:04d}", c) for i in range(40 + c % 7))  # every key = commit
        for i in range(40 + c % 7, 47):
            store.delete(f"key{i:04d}")
        task.commit(input_position=c)
    if c == 1:
        print("READY", flush=True)
"""


def test_live_reads_while_a_writer_process_commits(spark: Any, tmp_path: Path) -> None:
    """A writer process commits two partitions through ``Task`` as fast as it can (every key =
    the commit number). Every live read succeeds and reads each partition at one commit;
    a read through a plan-time snapshot does too."""
    paths = [tmp_path / "state" / str(p) for p in range(2)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, *map(str, paths)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        child.wait_line(proc, "READY")
        commits: set[int] = set()
        for snapshot in ("false", "false", "false", "false", "true"):
            reader = spark.read.format("txstore").option("store", "state")
            df = reader.option("snapshot", snapshot).load(str(paths[0].parent))
            rows = df.collect()
            for p in (0, 1):
                values = {r.value for r in rows if r.partition_id == p}
                keys = {r.key for r in rows if r.partition_id == p}
                assert len(values) == 1, f"partition {p} mixed commits {sorted(values)}"
                (c,) = values
                assert keys == {f"key{i:04d}" for i in range(40 + c % 7)}
                commits.add(c)
        assert len(commits) > 2, "the writer should have committed between the reads"
        assert proc.poll() is None, proc.communicate()
    finally:
        proc.kill()
        proc.communicate()


def test_cli_export_parquet(spark: Any, state: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli(["export", str(state), str(out), "--store", "headed", "-q"]) == 0
    exported = _collect(spark.read.parquet(str(out)), "headed")
    assert sorted(exported, key=repr) == sorted(_direct(state, "headed"), key=repr)
    assert cli(["export", str(state), str(out), "--store", "headed", "-q"]) == 2  # exists
    assert cli(["export", str(state), str(out), "--store", "nope", "-q", "--overwrite"]) == 2
    assert spark.range(3).count() == 3  # the CLI did not stop the session it did not create
