"""``df.write.format("txstore")`` on a real local Spark session.

Each store kind and format is written, read back through the reader, checked against Kafka's
partitioner, and restored from its changelog into a fresh partition (the same rows). Then the
modes, the bad inputs (each refused before any state changes) and a retried task (a child
process with ``local[2,2]``).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from txstore.codecs import partition_for_key
from txstore.engine.partition import Partition
from txstore.runtime.catalog import open_view
from txstore.runtime.task import Task

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from txstore.changelog.log import FileChangelog
from txstore.spark.writer import store_builder

pytestmark = pytest.mark.filterwarnings("error")

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC
PARTS = 3


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC)


def _naive(t: dt.datetime | None) -> dt.datetime | None:
    """Spark's collect() gives naive datetimes in the session time zone (UTC here)."""
    return None if t is None else t.astimezone(UTC).replace(tzinfo=None)


def _save(df: Any, path: Path, mode: str = "append", **options: str) -> None:
    w = df.write.format("txstore").mode(mode)
    for k, v in {"store": "s", "numPartitions": str(PARTS), **options}.items():
        w = w.option(k, v)
    w.save(str(path))


def _read(spark: Any, path: Path, store: str = "s") -> list[Any]:
    return sorted(
        spark.read.format("txstore").option("store", store).load(str(path)).collect(),
        key=lambda r: (
            str(r["key"]),
            str(r.asDict().get("window") or r.asDict().get("session_window")),
        ),
    )


def _committed(path: Path, store: str) -> list[tuple[bytes, bytes]]:
    with Partition(path, readonly=True) as p, open_view(p, store) as view, view.rows() as it:
        return list(it)


def _changelog(path: Path, store: str) -> list[Any]:
    with (
        FileChangelog(path / "changelog" / store, readonly=True) as log,
        log.read_committed() as it,
    ):
        return list(it)


def _restored_equal(state: Path, tmp: Path, store: str) -> None:
    """Each partition restored from its changelog alone holds the same committed rows."""
    for p in range(PARTS):
        src = state / str(p)
        meta = Partition(src, readonly=True)
        with meta:
            m = meta.store_meta(store)
        assert m is not None
        dst = tmp / f"restored-{p}"
        shutil.copytree(src / "changelog", dst / "changelog")
        with Task(dst) as task:
            store_builder(store, m).build(task.db)
            task.initialize()
        assert _committed(dst, store) == _committed(src, store)


H1 = [("trace", b"t1"), ("n", None)]
HEADERS = "headers array<struct<key:string,value:binary>>"
WIN = "window struct<start:timestamp,end:timestamp>"
SES = "session_window struct<start:timestamp,end:timestamp>"

# kind, format, schema, rows, extra options
CASES: dict[str, tuple[str, str, str, list[tuple[Any, ...]], dict[str, str]]] = {
    "kv-plain": (
        "key_value",
        "PLAIN",
        "key string, value bigint",
        [("a", 1), ("b", 2), ("c", 3)],
        {},
    ),
    "kv-timestamped": (
        "key_value",
        "TIMESTAMPED",
        "key bigint, value string, timestamp timestamp",
        [(1, "x", _ts(1000)), (2, "y", None), (3, "z", _ts(3000))],
        {},
    ),
    "kv-headers": (
        "key_value",
        "HEADERS",
        f"key string, value double, timestamp timestamp, {HEADERS}",
        [("a", 0.5, _ts(5), H1), ("b", 1.5, _ts(6), [])],
        {},
    ),
    "window-plain": (
        "window",
        "PLAIN",
        f"key string, {WIN}, value bigint",
        [
            ("a", (_ts(0), _ts(5000)), 1),
            ("a", (_ts(5000), _ts(10000)), 2),
            ("b", (_ts(0), _ts(5000)), 3),
        ],
        {"windowSize": "5000"},
    ),
    "window-timestamped": (
        "window",
        "TIMESTAMPED",
        "key int, window struct<start:timestamp>, value double, timestamp timestamp",
        [(1, (_ts(0),), 0.25, _ts(10)), (2, (_ts(5000),), 0.5, _ts(20))],
        {"windowSize": "5000"},
    ),
    "window-headers": (
        "window",
        "HEADERS",
        f"key string, {WIN}, value string, timestamp timestamp, {HEADERS}",
        [("a", (_ts(0), _ts(5000)), "v", _ts(1), H1)],
        {"windowSize": "5000"},
    ),
    "window-plain-headers": (
        "window",
        "PLAIN_HEADERS",
        f"key bigint, {WIN}, value string, {HEADERS}",
        [(7, (_ts(0), _ts(5000)), '{"i": 1}', H1), (8, (_ts(0), _ts(5000)), "[1, 2]", [])],
        {"windowSize": "5000", "valueSerde": "json"},
    ),
    "session-plain": (
        "session",
        "PLAIN",
        f"key string, {SES}, value bigint",
        [
            ("a", (_ts(0), _ts(400)), 4),
            ("a", (_ts(9000), _ts(9000)), 1),
            ("b", (_ts(10), _ts(20)), 2),
        ],
        {},
    ),
    "session-plain-headers": (
        "session",
        "PLAIN_HEADERS",
        f"key string, {SES}, value binary, {HEADERS}",
        [("a", (_ts(0), _ts(400)), b"\x00agg", H1)],
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kind_and_format_round_trips(spark: Any, tmp_path: Path, case: str) -> None:
    kind, fmt, schema, rows, extra = CASES[case]
    state = tmp_path / "state"
    df = spark.createDataFrame(rows, schema)
    _save(df, state, kind=kind, format=fmt, **extra)
    got = _read(spark, state)
    assert len(got) == len(rows)
    assert sorted(str(r["key"]) for r in got) == sorted(str(r[0]) for r in rows)
    names = df.columns
    by_key = {(str(r[0]), str(r[1]) if kind != "key_value" else ""): r for r in rows}
    for row in got:
        d = row.asDict()
        win = d.get("window") or d.get("session_window")
        if win is not None:
            src = next(r for r in rows if r[0] == d["key"] and _naive(r[1][0]) == win["start"])
        else:
            src = by_key[(str(d["key"]), "")]
        expected = dict(zip(names, src, strict=True))
        assert d["value"] == expected["value"]  # JSON text is kept as written
        if "timestamp" in expected:
            assert d["timestamp"] == _naive(expected["timestamp"])
        if "headers" in expected:
            assert [(h["key"], h["value"]) for h in d["headers"]] == expected["headers"]
        if kind == "session":
            assert (win["start"], win["end"]) == tuple(map(_naive, expected["session_window"]))
    # Kafka's default partitioner over the serialized key
    from txstore.stores.serdes import serde_by_name

    with Partition(state / "0", readonly=True) as p:
        key_serde = serde_by_name(p.store_meta("s")["key_serde"])  # type: ignore[index]
    for row in got:
        want = partition_for_key(key_serde.serialize(row["key"]), PARTS)  # type: ignore[arg-type]
        assert row["partition_id"] == want
    _restored_equal(state, tmp_path, "s")
    assert not os.listdir(state / "_spark_staging")


def test_append_and_overwrite(spark: Any, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = [(f"k{i}", i) for i in range(20)]
    _save(spark.createDataFrame(first, "key string, value bigint"), state)
    more = [("k0", 100), ("k19", None), ("new", 7)]  # update, delete (null value), insert
    _save(spark.createDataFrame(more, "key string, value bigint"), state)
    got = {r["key"]: r["value"] for r in _read(spark, state)}
    want = dict(first)
    want.update(k0=100, new=7)
    del want["k19"]
    assert got == want
    # overwrite: the store holds exactly the new rows; the changelog tombstones the old keys
    fresh = [("k1", 1), ("z", 26)]
    _save(spark.createDataFrame(fresh, "key string, value bigint"), state, mode="overwrite")
    assert {r["key"]: r["value"] for r in _read(spark, state)} == dict(fresh)
    logged = [r for p in range(PARTS) for r in _changelog(state / str(p), "s")]
    assert sum(1 for r in logged if r.value is None) == 1 + len(want)  # k19, then every key
    _restored_equal(state, tmp_path, "s")
    # the operation column of the change feed deletes too
    ops = spark.createDataFrame(
        [("z", 0, "delete"), ("y", 25, "put")], "key string, value bigint, operation string"
    )
    _save(ops, state)
    assert {r["key"]: r["value"] for r in _read(spark, state)} == {"k1": 1, "y": 25}


def _state_bytes(state: Path) -> dict[str, list[Any]]:
    return {
        str(p): sorted(_committed(state / str(p), "s")) + _changelog(state / str(p), "s")
        for p in range(PARTS)
    }


#: Bad writes into a store holding a and b, and what each gets (all before any state changes).
BAD: list[tuple[list[Any], str, dict[str, str], str]] = [
    ([(None, 1)], "key string, value bigint", {}, "a key is null"),
    ([("a", "x")], "key string, value string", {}, "serde 'long' takes bigint"),
    ([("a", 1)], "key string, value bigint", {"valueSerde": "string"}, "exists with another"),
    (
        [("a", 1)],
        "key string, value bigint",
        {"kind": "window", "windowSize": "5"},
        "exists with another",
    ),
    ([("a", 1)], "key string, value bigint", {"numPartitions": "4"}, "has 3 partitions"),
    ([("a", 1, 5)], "key string, value bigint, extra int", {}, "do not belong"),
    ([("a", 1, 9)], "key string, value bigint, partition_id int", {}, "outside 0..2"),
    ([("a", 1)], "key string, value bigint", {"colour": "red"}, "unknown option 'colour'"),
    ([("a", 1, "upsert")], "key string, value bigint, operation string", {}, "put or delete"),
]


def test_bad_input_changes_nothing(spark: Any, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _save(spark.createDataFrame([("a", 1), ("b", 2)], "key string, value bigint"), state)
    before = _state_bytes(state)
    for rows, schema, options, message in BAD:
        with pytest.raises(Exception, match=message):
            _save(spark.createDataFrame(rows, schema), state, **options)
        assert _state_bytes(state) == before, message
        assert not os.listdir(state / "_spark_staging")


def test_new_store_needs_partitions_and_window_size(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a", 1)], "key string, value bigint")
    with pytest.raises(Exception, match="give option numPartitions"):
        df.write.format("txstore").mode("append").option("store", "s").save(str(tmp_path / "x"))
    wdf = spark.createDataFrame(
        [("a", (_ts(0),), 1)], "key string, window struct<start:timestamp>, value bigint"
    )
    with pytest.raises(Exception, match="windowSize is required"):
        _save(wdf, tmp_path / "y", kind="window")
    with pytest.raises(Exception, match="ErrorIfExists"):  # Spark's own check of the mode
        df.write.format("txstore").option("store", "s").save(str(tmp_path / "z"))
    assert not (tmp_path / "x").exists() and not (tmp_path / "z").exists()


def test_a_retried_task_leaves_no_half_batch(tmp_path: Path) -> None:
    state, marker = tmp_path / "state", tmp_path / "failed-once"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TXSTORE_FAULTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("_spark_write_child.py")),
            "retry",
            str(state),
            str(marker),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stderr[-3000:]
    assert marker.exists()  # the first attempt of a task failed part way, and was retried
    logged = [r for p in range(PARTS) for r in _changelog(state / str(p), "s")]
    assert len(logged) == 200  # every row once: nothing of the failed attempt
    values = sorted(int.from_bytes(r.value, "big") for r in logged)
    assert values == list(range(200))
    rows = [r for p in range(PARTS) for r in _committed(state / str(p), "s")]
    assert len(rows) == 200
    assert not os.listdir(state / "_spark_staging")
