"""Deterministic cases of txstore.joins: the emission rule of unmatched records, duplicates
buffered across restarts, replayed batches, the joiner's arguments, bad input."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from txstore import Serdes, Task, ValueAndHeaders
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.joins import (
    JoinedRecord,
    JoinRecord,
    JoinWindows,
    StreamJoin,
    join_store_builders,
    left,
    right,
)


def open_join(path: Path, kind: str = "left", **options: Any) -> tuple[Task, StreamJoin[Any, Any]]:
    task = Task(path, sync=False)
    windows = options.pop("windows", JoinWindows.of_time_difference_and_grace(10, 5))
    join: StreamJoin[Any, Any] = StreamJoin(task, "j", windows, kind, **options)  # type: ignore[arg-type]
    task.initialize()
    return task, join


def test_join_windows() -> None:
    w = JoinWindows.of_time_difference_and_grace(dt.timedelta(seconds=2), 100)
    assert (w.before_ms, w.after_ms, w.grace_period_ms(), w.size()) == (2000, 2000, 100, 4000)
    assert w.before(0).after(5).grace(0) == JoinWindows(0, 5, 0)
    assert w.bounds(1000, True) == (0, 3000) and w.bounds(5000, False) == (3000, 7000)
    with pytest.raises(InvalidArgumentError):
        JoinWindows(-5, 4, 0)
    with pytest.raises(InvalidArgumentError):
        JoinWindows.of_time_difference_and_grace(1, -1)
    with pytest.raises(InvalidArgumentError):
        JoinWindows.of_time_difference_without_grace(-1)
    with pytest.raises(InvalidTypeError):
        JoinWindows.of_time_difference_and_grace("1", 0)  # type: ignore[arg-type]


def test_unmatched_records_are_emitted_exactly_when_stream_time_passes_end_plus_grace(
    tmp_path: Path,
) -> None:
    """Window 10 both ways, grace 5: a left record at 100 closes once stream time is past
    115 (its end 110 plus grace), on the first record that moves stream time there."""
    task, join = open_join(tmp_path)
    with task:
        assert join.process([left("a", 1, 100), right("x", 0, 115)]) == []  # 115: still open
        assert join.process([right("x", 0, 115), left("y", 0, 110)]) == []  # time did not move
        # 116 closes it; the record at 110 (closes after 125) waits on
        assert join.process([right("x", 0, 116)]) == [JoinedRecord("a", [1, None], 100)]
        assert join.process([left("a", 2, 104)]) == []  # 104 + 10 + 5 >= 116: in time
        assert join.process([left("a", 3, 100)]) == []  # 100 + 15 < 116: late, dropped
        assert join.dropped_late == 1
        out = join.process([right("a", 9, 110)])  # joins 104 only (100 was emitted)
        assert out == [JoinedRecord("a", [2, 9], 110)]
        # records with a null key or value are dropped and do not move stream time
        assert join.process([left(None, 1, 130), left("n", None, 130)]) == []
        assert join.dropped_null == 2 and join.stream_time == 116
        assert join.process([right("q", 0, 130)]) == [JoinedRecord("y", [0, None], 110)]


def test_outer_join_emits_both_sides_oldest_first_and_keeps_its_state_across_restarts(
    tmp_path: Path,
) -> None:
    windows = JoinWindows(before_ms=2, after_ms=6, grace_ms=0)
    batches = [
        [right("b", "r1", 10), left("a", "l1", 10)],
        [left("c", "l2", 12)],
        [right("z", "r9", 17)],  # 17 > 10 + before 2 (r1) and > 10 + after 6 (l1)
        [right("z", "r9", 30)],
    ]
    outs = []
    for position, batch in enumerate(batches, 1):
        task, join = open_join(tmp_path, "outer", windows=windows)
        with task:
            outs.append([(r.key, r.value, r.timestamp) for r in join.process(batch)])
            task.commit(position)
    assert outs[2] == [("a", ["l1", None], 10), ("b", [None, "r1"], 10)]
    assert outs[3] == [("c", ["l2", None], 12), ("z", [None, "r9"], 17)]


@pytest.mark.parametrize("persistent", [True, False])
def test_duplicates_buffered_before_a_restart_survive_it(tmp_path: Path, persistent: bool) -> None:
    """Three left records of one key and time, in two task lifetimes (a persistent buffer
    reopened; an in-memory one restored from its changelog): all three join."""
    batches = [[left("a", 1, 10), left("a", 2, 10)], [left("a", 3, 10), right("a", 9, 10)]]
    out: list[JoinedRecord] = []
    for position, batch in enumerate(batches, 1):
        task, join = open_join(tmp_path, "inner", persistent=persistent)
        with task:
            out += join.process(batch)
            task.commit(position)
    assert [r.value for r in out] == [[1, 9], [2, 9], [3, 9]]


def test_the_joiner_gets_the_key_both_values_and_both_headers(tmp_path: Path) -> None:
    seen: list[tuple[Any, ...]] = []

    def joiner(key: Any, lv: ValueAndHeaders[Any] | None, rv: ValueAndHeaders[Any] | None) -> str:
        assert lv is not None and rv is not None
        seen.append((key, lv.value, rv.value, lv.headers.last_header("h"), rv.headers.to_list()))
        return f"{lv.value}+{rv.value}"

    task, join = open_join(
        tmp_path, "inner", joiner=joiner, left_serde=Serdes.long(), output_serde=Serdes.string()
    )
    with task:
        out = join.process_batch(
            [left("k", 7, 5, [("h", b"L")]), right("k", "r", 6, [("h", None), ("g", b"2")])], 1
        )
        task.commit(1)
    assert out == [JoinedRecord("k", "7+r", 6)]
    assert seen[0][:4] == ("k", 7, "r", b"L") and [tuple(h) for h in seen[0][4]] == [
        ("h", None),
        ("g", b"2"),
    ]


def test_a_replayed_batch_returns_what_its_first_run_emitted(tmp_path: Path) -> None:
    batch = [left("a", 1, 100), right("a", 2, 101)]
    task, join = open_join(tmp_path, "inner")
    with task:
        first = join.process_batch(batch, 7)
        task.commit(7)
    task, join = open_join(tmp_path, "inner")
    with task:
        assert join.process_batch(batch, 7) == first == [JoinedRecord("a", [1, 2], 101)]
        assert join.process_batch([], 8) == []
        assert [p for p, _ in join.all_outputs()] == [7]
        assert join.purge_outputs(8) == 1 and join.outputs_at(7) == []
        task.commit(8)
    # uncommitted work is gone after a crash (close without commit): processed again
    task, join = open_join(tmp_path, "inner")
    with task:
        assert join.process_batch([right("a", 3, 101)], 9) == [JoinedRecord("a", [1, 3], 101)]
    task, join = open_join(tmp_path, "inner")
    with task:
        assert join.process_batch([right("a", 3, 101)], 9) == [JoinedRecord("a", [1, 3], 101)]


@pytest.mark.parametrize(
    ("record", "error"),
    [
        (JoinRecord("middle", "a", 1, 5), InvalidArgumentError),
        (JoinRecord("left", "a", 1, -1), InvalidArgumentError),
        (JoinRecord("left", "a", 1, 2**63), InvalidArgumentError),
        (JoinRecord("left", "a", 1, 1.5), InvalidTypeError),  # type: ignore[arg-type]
        (JoinRecord("left", "a", 1, True), InvalidTypeError),
        (("left", "a"), InvalidTypeError),
    ],
)
def test_a_bad_record_is_refused_before_anything_of_its_batch_is_processed(
    tmp_path: Path, record: Any, error: type[Exception]
) -> None:
    task, join = open_join(tmp_path, "inner")
    with task:
        with pytest.raises(error):
            join.process([left("a", 1, 5), record])
        assert join.stream_time == -1
        assert join.process([right("a", 2, 5)]) == []  # the good record was not buffered


def test_bad_arguments(tmp_path: Path) -> None:
    with Task(tmp_path, sync=False) as task:
        w = JoinWindows.of_time_difference_without_grace(5)
        with pytest.raises(InvalidArgumentError):
            StreamJoin(task, "j", w, "cross")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            StreamJoin(task, "j", 5)  # type: ignore[arg-type]
        join: StreamJoin[Any, Any] = StreamJoin(task, "j", w)
        task.initialize()
        with pytest.raises(InvalidTypeError):
            join.process_batch([], "1")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            join.process_batch([], -1)


def test_stream_time_and_counters_survive_a_restart(tmp_path: Path) -> None:
    task, join = open_join(tmp_path, "left")
    with task:
        join.process([left("a", 1, 100), left(None, 1, 100)])
        task.commit(1)
    task, join = open_join(tmp_path, "left")
    with task:
        assert join.process([]) == []
        assert (join.stream_time, join.dropped_null, join.dropped_late) == (100, 1, 0)
        assert join.process([right("a", 2, 80)]) == []  # 80 + 10 + 5 < 100: late
        assert join.dropped_late == 1
        # the waiting record came back with the task: emitted once its window closes
        assert join.process([right("b", 0, 116)]) == [JoinedRecord("a", [1, None], 100)]


def test_a_join_over_stores_its_caller_opened(tmp_path: Path) -> None:
    """A pipeline that opens its stores itself (the Spark stateful step's ``stores()``) opens
    the join's builders, then attaches the join to the open stores each batch."""
    windows = JoinWindows.of_time_difference_without_grace(10)
    batches = [[left("a", 1, 5)], [right("a", 2, 9), right("z", 0, 30)]]
    out = []
    for position, batch in enumerate(batches, 1):
        with Task(tmp_path, sync=False) as task:
            for builder in join_store_builders("j", windows, "left").values():
                builder.build(task.db)
            task.initialize()
            join: StreamJoin[Any, Any] = StreamJoin(task, "j", windows, "left", open_stores=False)
            out += join.process(batch)
            task.commit(position)
    assert out == [JoinedRecord("a", [1, 2], 9)]
    # not opened: no such store
    with Task(tmp_path, sync=False) as task, pytest.raises(InvalidArgumentError):
        StreamJoin(task, "j", windows, "left", open_stores=False)


def test_reload_after_an_abort_forgets_the_aborted_batch(tmp_path: Path) -> None:
    task, join = open_join(tmp_path, "left")
    with task:
        join.process_batch([left("a", 1, 100)], 1)
        task.commit(1)
        join.process_batch([right("z", 0, 200)], 2)  # would emit a@100 as unmatched
        task.abort()
        join.reload()
        assert join.process([]) == []  # reads the committed state again
        assert join.stream_time == 100
        assert join.process_batch([right("a", 2, 101)], 2) == [JoinedRecord("a", [1, 2], 101)]
        task.commit(2)
        assert join.outputs_at(2) == [JoinedRecord("a", [1, 2], 101)]
