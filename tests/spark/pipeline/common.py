"""What the pipeline tests share: a counting step and its plain-Python reference."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from txstore.codecs import partition_for_key
from txstore.spark.streaming import PartitionContext, StatefulStep
from txstore.stores.builders import KeyValueStoreBuilder
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes

OUTPUT_SCHEMA = pa.schema([("user", pa.string()), ("count", pa.int64())])


def count_stores() -> list[KeyValueStoreBuilder[Any, Any]]:
    return [
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        )
    ]


def count(ctx: PartitionContext, records: pa.Table) -> None:
    """Count records per user; emit each record's running count. A record whose ``v`` is
    negative raises after the stores were written (a processor that fails part way); a
    positive ``sleep_ms`` column pauses (so a test can kill the driver mid-stream); ``fail_once``
    fails the first attempt of a Spark task (Spark retries it)."""
    counts = ctx.store("counts")
    users = records.column("user").to_pylist()
    out = []
    for user, v in zip(users, records.column("v").to_pylist(), strict=True):
        n = (counts.get(user) or 0) + 1
        counts.put(user, n)
        out.append({"user": user, "count": n})
        if v < 0:
            raise ValueError(f"bad record v={v} for {user}")
    fail = "fail_once" in records.column_names and any(records.column("fail_once").to_pylist())
    if fail and ctx.attempt == 0:
        raise RuntimeError("first attempt fails after writing its stores")
    if "sleep_ms" in records.column_names:
        time.sleep(max(records.column("sleep_ms").to_pylist()) / 1000)
    ctx.emit(out)


def counting_step(root: Path, partitions: int = 3, **kw: Any) -> StatefulStep:
    kw.setdefault("output_dir", str(root / "out"))
    return StatefulStep(
        state_dir=str(kw.pop("state_dir", root / "state")),
        num_partitions=partitions,
        key="user",
        processor=count,
        stores=count_stores,
        output_schema=OUTPUT_SCHEMA,
        **kw,
    )


def state(step: StatefulStep) -> tuple[dict[str, int], dict[int, int | None]]:
    """Every partition's counts (checked to be in the partition that owns the key) and input
    position, read by opening each Task after the workers let go of them."""
    step.release()
    counts: dict[str, int] = {}
    positions: dict[int, int | None] = {}
    for p in range(step.num_partitions):
        with step.open_task(p) as task:
            positions[p] = task.input_position
            with task.store("counts").all() as it:
                for kv in it:
                    assert partition_for_key(kv.key.encode(), step.num_partitions) == p
                    counts[kv.key] = kv.value
    return counts, positions


def expected(*batches: list[tuple[str, int]]) -> dict[str, int]:
    return dict(Counter(user for rows in batches for user, *_ in rows))


def rows(n: int, users: int = 20, v: int = 1) -> list[tuple[str, int]]:
    return [(f"user-{i % users:02d}", v) for i in range(n)]
