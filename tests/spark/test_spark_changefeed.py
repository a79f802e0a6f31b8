"""The change feed (``readChangeFeed``) in batch and streaming form, on a real Spark session.

Every row is compared with the changelog read directly; a feed replayed into another state
directory through the writer rebuilds the same store.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from txstore.changelog.log import FileChangelog
from txstore.engine.partition import Partition
from txstore.runtime.catalog import open_view

pytest.importorskip("pyspark")

pytestmark = pytest.mark.filterwarnings("error")

PARTS = 3


def _write(df: Any, path: Path, **options: str) -> None:
    w = df.write.format("txstore").mode("append")
    for k, v in {"store": "s", "numPartitions": str(PARTS), **options}.items():
        w = w.option(k, v)
    w.save(str(path))


def _feed(spark: Any, path: Path, **options: str) -> Any:
    r = spark.read.format("txstore").option("readChangeFeed", "true").option("store", "s")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(str(path))


def _logged(path: Path) -> list[tuple[int, int, bytes, bytes | None]]:
    out = []
    for p in range(PARTS):
        with (
            FileChangelog(path / str(p) / "changelog" / "s", readonly=True) as log,
            log.read_committed() as it,
        ):
            out += [(p, r.offset, r.key, r.value) for r in it]
    return out


def _committed(path: Path) -> list[Any]:
    rows = []
    for p in range(PARTS):
        with (
            Partition(path / str(p), readonly=True) as part,
            open_view(part, "s") as view,
            view.rows() as it,
        ):
            rows += list(it)
    return sorted(rows)


def test_batch_change_feed_is_the_changelog(spark: Any, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _write(
        spark.createDataFrame([(f"k{i}", i) for i in range(12)], "key string, value bigint"), state
    )
    _write(spark.createDataFrame([("k0", 100), ("k1", None)], "key string, value bigint"), state)
    feed = _feed(spark, state)
    assert feed.columns == ["key", "value", "partition_id", "operation", "offset"]
    rows = feed.collect()
    logged = _logged(state)
    got = sorted((r["partition_id"], r["offset"], r["key"].encode(), r["value"]) for r in rows)
    want = sorted(
        (p, o, k, None if v is None else int.from_bytes(v, "big")) for p, o, k, v in logged
    )
    assert got == want and len(rows) == 14
    ops = {(r["key"], r["value"]): r["operation"] for r in rows}
    assert ops[("k1", None)] == "delete" and ops[("k0", 100)] == "put"
    # offsets: from a JSON start, only what follows
    latest = {str(p): max((o for q, o, _, _ in logged if q == p), default=-1) for p in range(PARTS)}
    tail = _feed(spark, state, startingOffsets=json.dumps({"0": latest["0"]})).collect()
    assert sum(1 for r in tail if r["partition_id"] == 0) == 1
    with pytest.raises(Exception, match="startingOffsets must be earliest, latest or JSON"):
        _feed(spark, state, startingOffsets="yesterday").collect()
    stream = spark.readStream.format("txstore").option("store", "s").load(str(state))
    query = stream.writeStream.format("console").start()
    with pytest.raises(Exception, match="readChangeFeed"):  # the stream fails as it starts
        query.awaitTermination(120)
    query.stop()


def test_window_change_feed_and_replay_into_another_state(spark: Any, tmp_path: Path) -> None:
    state, copy = tmp_path / "state", tmp_path / "copy"
    utc = dt.UTC

    def ts(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, utc)

    rows = [("a", (ts(0),), "x", ts(1)), ("a", (ts(5000),), "y", ts(2)), ("b", (ts(0),), "z", None)]
    schema = "key string, window struct<start:timestamp>, value string, timestamp timestamp"
    options = {"kind": "window", "format": "TIMESTAMPED", "windowSize": "5000"}
    _write(spark.createDataFrame(rows, schema), state, **options)
    _write(spark.createDataFrame([("a", (ts(0),), None, None)], schema), state)  # a delete
    feed = _feed(spark, state)
    assert feed.columns == [
        "key",
        "window",
        "value",
        "timestamp",
        "partition_id",
        "operation",
        "offset",
    ]
    got = sorted(
        (
            (r["key"], r["window"]["start"], r["window"]["end"], r["value"], r["operation"])
            for r in feed.collect()
        ),
        key=str,
    )
    naive = [
        ts(0).replace(tzinfo=None),
        ts(5000).replace(tzinfo=None),
        ts(10000).replace(tzinfo=None),
    ]
    assert got == sorted(
        [
            ("a", naive[0], naive[1], None, "delete"),
            ("a", naive[0], naive[1], "x", "put"),
            ("a", naive[1], naive[2], "y", "put"),
            ("b", naive[0], naive[1], "z", "put"),
        ],
        key=str,
    )
    # the feed, in offset order, is a valid input of the writer: the same store again
    replay = feed.orderBy("partition_id", "offset").drop("offset").coalesce(1)
    _write(replay, copy, **options)
    assert _committed(copy) == _committed(state)


def test_streaming_change_feed_reads_each_commit_once(spark: Any, tmp_path: Path) -> None:
    state, checkpoint = tmp_path / "state", tmp_path / "checkpoint"
    _write(
        spark.createDataFrame([(f"k{i}", i) for i in range(5)], "key string, value bigint"), state
    )
    seen: list[Any] = []

    def run() -> None:
        query = (
            spark.readStream.format("txstore")
            .option("readChangeFeed", "true")
            .option("store", "s")
            .load(str(state))
            .writeStream.foreachBatch(lambda df, _: seen.extend(df.collect()))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)

    run()
    assert sorted((r["key"], r["value"]) for r in seen) == [(f"k{i}", i) for i in range(5)]
    seen.clear()
    _write(spark.createDataFrame([("k9", 9), ("k0", None)], "key string, value bigint"), state)
    run()  # restarted from its checkpoint: only the new commit
    assert sorted(((r["key"], r["value"], r["operation"]) for r in seen), key=str) == [
        ("k0", None, "delete"),
        ("k9", 9, "put"),
    ]
