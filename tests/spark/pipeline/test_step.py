"""The stateful step on a real local Spark session: routing, replay, failed and speculative
attempts, bad input, a partition moved to another local state directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from txstore.codecs import partition_for_key
from txstore.errors import ConfigConflictError, InvalidArgumentError, SerializationError
from txstore.spark.streaming import LAYOUT_FILE, StatefulStep, output_path, partitions
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes

from .common import count, counting_step, expected, rows, state


def frame(spark: Any, data: list[tuple[Any, ...]], schema: str = "user string, v long") -> Any:
    return spark.createDataFrame(data, schema)


def outputs(step: StatefulStep, batch_id: int) -> list[dict[str, Any]]:
    assert step.output_dir is not None
    found = []
    for p in range(step.num_partitions):
        path = output_path(step.output_dir, batch_id, p)
        if path.exists():
            found.extend(pq.read_table(path).to_pylist())
    return sorted(found, key=lambda r: (r["user"], r["count"]))


def test_routing_is_kafkas_default_partitioner() -> None:
    users = [f"user-{i}" for i in range(200)]
    batch = pa.record_batch({"user": users, "n": list(range(200))})
    got = partitions(batch, "user", Serdes.string(), 7).to_pylist()
    assert got == [partition_for_key(u.encode(), 7) for u in users]
    longs = pa.record_batch({"k": list(range(-50, 50))})
    want = [partition_for_key(Serdes.long().serialize(k) or b"", 5) for k in range(-50, 50)]
    assert partitions(longs, "k", Serdes.long(), 5).to_pylist() == want


def test_each_partition_holds_exactly_its_keys(spark: Any, tmp_path: Path) -> None:
    step = counting_step(tmp_path, partitions=4)
    data = rows(400, users=37)
    step.foreach_batch(frame(spark, data), 0)
    assert sorted(r["partition"] for r in step.last_batch) == [0, 1, 2, 3]
    counts, positions = state(step)  # state() asserts each key sits in its owner partition
    assert counts == expected(data)
    assert positions == {0: 1, 1: 1, 2: 1, 3: 1}
    layout = json.loads((tmp_path / "state" / LAYOUT_FILE).read_text())
    assert layout == {"num_partitions": 4, "key": "user", "stores": ["counts"]}


def test_a_replayed_batch_is_applied_once_and_its_output_written_once(
    spark: Any, tmp_path: Path
) -> None:
    step = counting_step(tmp_path)
    first, second = rows(300), rows(150, users=7)
    step.foreach_batch(frame(spark, first), 0)
    step.foreach_batch(frame(spark, second), 1)
    out1 = outputs(step, 1)
    assert len(out1) == len(second)
    # The driver died after the batch ran, before Spark logged it: Spark runs it again.
    step.foreach_batch(frame(spark, second), 1)
    assert all(r["skipped"] for r in step.last_batch)
    assert outputs(step, 1) == out1
    # ... and one output file was lost (a crash after the Task commit, before the file):
    assert step.output_dir is not None
    lost = output_path(step.output_dir, 1, step.last_batch[0]["partition"])
    lost.unlink()
    step.foreach_batch(frame(spark, second), 1)
    assert lost.exists() and outputs(step, 1) == out1
    counts, positions = state(step)
    assert counts == expected(first, second)
    assert set(positions.values()) == {2}
    assert len(outputs(step, 0)) == len(first)


def test_a_processor_that_raises_leaves_nothing_and_the_retry_applies_once(
    spark: Any, tmp_path: Path
) -> None:
    step = counting_step(tmp_path)
    good = rows(200)
    step.foreach_batch(frame(spark, good), 0)
    bad = [*rows(100), ("user-03", -1), *rows(50)]
    with pytest.raises(Exception, match="bad record v=-1"):
        step.foreach_batch(frame(spark, bad), 1)
    victim = partition_for_key(b"user-03", 3)
    counts, positions = state(step)
    mine = {u: n for u, n in counts.items() if partition_for_key(u.encode(), 3) == victim}
    want = {u: n for u, n in expected(good).items() if partition_for_key(u.encode(), 3) == victim}
    assert mine == want  # the failed attempt's writes are gone
    assert positions[victim] == 1
    assert not output_path(str(step.output_dir), 1, victim).exists()
    # (the other partitions' tasks may have committed batch 1: the replay skips them)
    fixed = [(u, 1) for u, _ in bad]  # the batch as it is replayed, fixed
    step.foreach_batch(frame(spark, fixed), 1)
    step.foreach_batch(frame(spark, fixed), 1)
    counts, _ = state(step)
    assert counts == expected(good, fixed)


def test_a_speculative_attempt_is_refused_cleanly_while_the_first_runs(
    spark: Any, tmp_path: Path
) -> None:
    step = counting_step(tmp_path, lock_timeout_s=0.5)
    first = rows(200)
    step.foreach_batch(frame(spark, first), 0)
    step.release()
    victim = partition_for_key(b"user-00", 3)
    second = rows(120)
    with step.open_task(victim) as running:  # the first attempt, still running
        with pytest.raises(Exception, match="WriterLockedError"):
            step.foreach_batch(frame(spark, second), 1)
        assert running.input_position == 1  # the refused attempt wrote nothing
    step.foreach_batch(frame(spark, second), 1)  # Spark's next attempt
    by_partition = {r["partition"]: r["skipped"] for r in step.last_batch}
    assert by_partition[victim] is False  # applied now
    counts, positions = state(step)
    assert counts == expected(first, second)
    assert set(positions.values()) == {2}


def test_bad_keys_fail_the_batch_before_any_state_changes(spark: Any, tmp_path: Path) -> None:
    step = counting_step(tmp_path)
    step.foreach_batch(frame(spark, rows(60)), 0)
    with pytest.raises(Exception, match=r"SerializationError.*null key"):
        step.foreach_batch(frame(spark, [*rows(30), (None, 1)]), 1)
    wrong = counting_step(tmp_path, key_serde="long")  # a long serde on a string key column
    with pytest.raises(Exception, match=r"SerializationError.*refused 'user-00'"):
        wrong.foreach_batch(frame(spark, rows(30)), 1)
    with pytest.raises(InvalidArgumentError, match="key column 'user' is not in"):
        step.foreach_batch(frame(spark, [(1, "x")], "v long, name string"), 1)
    counts, positions = state(step)
    assert counts == expected(rows(60))
    assert set(positions.values()) == {1}
    with pytest.raises(SerializationError, match="null key"):
        partitions(pa.record_batch({"user": ["a", None]}), "user", Serdes.string(), 3)


def test_another_layout_or_store_configuration_is_refused(spark: Any, tmp_path: Path) -> None:
    step = counting_step(tmp_path)
    step.foreach_batch(frame(spark, rows(60)), 0)
    with pytest.raises(ConfigConflictError, match=r"num_partitions.*3, 4"):
        counting_step(tmp_path, partitions=4).foreach_batch(frame(spark, rows(10)), 1)

    def as_window() -> list[Any]:  # store "counts" as a window store: not what is on disk
        return [
            Stores.window_store_builder(
                Stores.persistent_window_store("counts", 3_600_000, 60_000, False),
                Serdes.string(),
                Serdes.long(),
            )
        ]

    other = StatefulStep(
        state_dir=str(tmp_path / "state"),
        num_partitions=3,
        key="user",
        processor=count,
        stores=as_window,
    )
    step.release()
    with pytest.raises(Exception, match="ConfigConflictError"):
        other.foreach_batch(frame(spark, rows(10)), 1)
    counts, positions = state(step)
    assert counts == expected(rows(60))
    assert set(positions.values()) == {1}
    with pytest.raises(InvalidArgumentError, match="num_partitions"):
        counting_step(tmp_path, partitions=0)


def test_a_moved_partition_restores_from_the_shared_changelog(spark: Any, tmp_path: Path) -> None:
    shared = str(tmp_path / "shared-changelogs")
    here = counting_step(tmp_path, state_dir=tmp_path / "host-a", changelog_dir=shared)
    there = counting_step(tmp_path, state_dir=tmp_path / "host-b", changelog_dir=shared)
    batches = [rows(200), rows(100, users=9), rows(150, users=31), rows(80)]
    here.foreach_batch(frame(spark, batches[0]), 0)
    here.foreach_batch(frame(spark, batches[1]), 1)
    there.foreach_batch(frame(spark, batches[2]), 2)  # every partition moved to host b
    assert not any(r["skipped"] for r in there.last_batch)
    assert state(there)[0] == expected(*batches[:3])  # host b restored from the changelogs
    here.foreach_batch(frame(spark, batches[3]), 3)  # ... and back: host a's files are stale
    counts, positions = state(here)
    assert counts == expected(*batches)
    assert set(positions.values()) == {4}
    assert not (tmp_path / "host-a" / "0" / "changelog").exists()
