"""Filter pushdown through a real Spark session: every filtered query returns the same rows
with pushdown on and off, and a key lookup plans one partition's task."""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import (
    Headers,
    Serdes,
    SessionWindow,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.codecs import partition_for_key

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from txstore.spark.options import parse_options
from txstore.spark.plan import plan, resolve
from txstore.spark.pushdown import Pushdown

pytestmark = pytest.mark.filterwarnings("error")

PARTITIONS = 3
WINDOW = 60_000
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keys partitioned as Kafka's default partitioner does (murmur2 of the key bytes)."""
    root = tmp_path_factory.mktemp("pushdown") / "state"
    for p in range(PARTITIONS):
        with txstore.open(root / str(p)) as db:
            users = db.key_value_store("users", Serdes.string(), Serdes.long())
            ids = db.key_value_store("ids", Serdes.long(), Serdes.string())
            windows = db.window_store(
                "clicks",
                Serdes.string(),
                Serdes.long(),
                retention_period=86_400_000,
                window_size=WINDOW,
                format=ValueFormat.HEADERS,
            )
            for i in range(300):
                key = f"user-{i:03d}"
                if partition_for_key(key.encode(), PARTITIONS) == p:
                    users.put(key, i)
                    for w in range(4):
                        windows.put(
                            key,
                            ValueTimestampHeaders(i * 10 + w, T0 + w, Headers([("h", b"x")])),
                            T0 + w * WINDOW,
                        )
                n = i - 150
                if partition_for_key(struct.pack(">q", n), PARTITIONS) == p:
                    ids.put(n, f"id{n}")
            sessions = db.session_store(
                "visits", Serdes.string(), Serdes.long(), retention_period=86_400_000
            )
            for i in range(30):
                key = f"v{i % 6}"
                if partition_for_key(key.encode(), PARTITIONS) == p:
                    sessions.put(Windowed(key, SessionWindow(T0 + i * 1000, T0 + i * 1000 + 5)), i)
            db.commit({"users": 1, "ids": 1, "clicks": 1, "visits": 1})
    return root


@pytest.fixture
def pushdown_off(spark: Any) -> Iterator[Any]:
    yield spark
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def _both(spark: Any, store: str, root: Path, where: str) -> tuple[list[Any], list[Any], int]:
    """Rows with pushdown, rows without, and the number of input partitions with it."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    df = spark.read.format("txstore").option("store", store).load(str(root)).where(where)
    pushed, tasks = sorted(df.collect()), df.rdd.getNumPartitions()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    df = spark.read.format("txstore").option("store", store).load(str(root)).where(where)
    plain = sorted(df.collect())
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    return pushed, plain, tasks


START = datetime.datetime.fromtimestamp((T0 + WINDOW) / 1000, datetime.UTC)
CASES = [
    ("users", "key = 'user-042'", 1, 1),
    ("users", "key = 'nobody'", 0, 0),
    ("users", "key IN ('user-001', 'user-002', 'user-299')", 3, None),
    ("users", "key >= 'user-100' AND key < 'user-110'", 10, PARTITIONS),
    ("users", "key LIKE 'user-2%'", 100, PARTITIONS),
    ("users", "key = 'user-042' AND partition_id = 2", None, None),
    ("users", "partition_id IN (0, 2)", None, 2),
    ("ids", "key = -7", 1, 1),
    ("ids", "key < 0 AND key > -3", 2, PARTITIONS),
    ("clicks", "key = 'user-007'", 4, PARTITIONS),
    ("clicks", f"key = 'user-007' AND window.start >= '{START.isoformat()}'", 3, None),
    ("visits", "key = 'v3'", 5, PARTITIONS),
    ("visits", "key IN ('v1', 'v4') AND session_window.end > '2023-11-14'", 10, None),
    ("clicks", f"key LIKE 'user-01%' AND window.start = '{START.isoformat()}'", 10, None),
]


@pytest.mark.parametrize(("store", "where", "count", "tasks"), CASES)
def test_pushdown_returns_what_a_full_read_returns(
    spark: Any, state: Path, store: str, where: str, count: int | None, tasks: int | None
) -> None:
    pushed, plain, planned = _both(spark, store, state, where)
    assert pushed == plain
    if count is not None:
        assert len(pushed) == count
    if tasks is not None:
        assert planned == max(tasks, 1)  # an empty plan is one empty Spark partition


def test_key_lookup_plans_the_one_partition_holding_the_key(state: Path) -> None:
    opts = parse_options({"path": str(state), "store": "users"})
    _, spec = resolve(opts)
    key = b"user-042"
    _, tasks = plan(opts, spec, Pushdown(keys=(key,)))
    assert [t.partition for t in tasks] == [partition_for_key(key, PARTITIONS)]
    _, tasks = plan(opts, spec, Pushdown(keys=(key,), partitions=frozenset({99})))
    assert tasks == []


def test_reads_work_with_pushdown_disabled(pushdown_off: Any, state: Path) -> None:
    """A session without the setting (Spark's discovery, no register call) still reads."""
    pushdown_off.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    df = pushdown_off.read.format("txstore").option("store", "users").load(str(state))
    assert df.where("key = 'user-042'").collect()[0].value == 42
    assert df.where("key = 'user-042'").rdd.getNumPartitions() == PARTITIONS


def test_pushdown_on_a_snapshot_reads_what_a_full_read_reads(state: Path, tmp_path: Path) -> None:
    """In-process (the executor's code): a snapshot source has no plan-time key check, each
    task reads the key itself."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from txstore.runtime.snapshot import snapshot_state_dir
    from txstore.spark.reader import read_task
    from txstore.spark.schema import layout

    snapshot_state_dir(state, tmp_path / "snap")
    for store, pushdown in [
        ("users", Pushdown(keys=(b"user-042", b"user-043"))),
        ("users", Pushdown(lo=b"user-1", hi=b"user-2", hi_inclusive=False)),
        ("clicks", Pushdown(keys=(b"user-007",), start_from=T0 + WINDOW)),
        ("visits", Pushdown(keys=(b"v2",))),
    ]:
        opts = parse_options({"path": str(tmp_path / "snap"), "store": store})
        _, spec = resolve(opts)
        lay = layout(spec, opts)
        schema = to_arrow_schema(lay.schema, timezone="UTC")
        narrowed, everything = (
            [
                r
                for t in plan(opts, spec, p)[1]
                for b in read_task(t, lay, schema, 50, p)
                for r in b.to_pylist()
            ]
            for p in (pushdown, Pushdown())
        )
        assert 0 < len(narrowed) < len(everything)
        expected = [r for r in everything if pushdown.key_matches(r["key"].encode())]
        if store == "clicks":
            start = datetime.datetime.fromtimestamp((T0 + WINDOW) / 1000, datetime.UTC)
            expected = [r for r in expected if r["window"]["start"] >= start]
        assert sorted(map(repr, narrowed)) == sorted(map(repr, expected))
