"""txstore's join equals the plain-Python reference (tests/joins/reference.py) on random
inputs: inner, left, outer and self-joins, out-of-order records, late records past grace, null
keys and values, headers, and restarts of the task between batches (persistent and in-memory
buffers, so duplicates buffered before a restart must survive it)."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.joins.reference import Reference, reference_self_join
from txstore import Task, ValueAndHeaders
from txstore.joins import JoinRecord, JoinWindows, StreamJoin


def headers_of(vh: ValueAndHeaders[Any] | None) -> list[tuple[str, bytes | None]] | None:
    return None if vh is None else [(h.key, h.value) for h in vh.headers]


def joiner(key: Any, left: Any, right: Any) -> tuple[Any, ...]:
    return (
        key,
        None if left is None else left.value,
        None if right is None else right.value,
        headers_of(left),
        headers_of(right),
    )


def timed(steps: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Records whose time mostly moves forward (by the step's first number) and now and then
    jumps back (by its second): out-of-order records, some of them past the grace period."""
    now, out = 0, []
    for *fields, forward, back in steps:
        now += forward
        fields.insert(-1, max(0, now - back))
        out.append(tuple(fields))
    return out


records_st = st.lists(
    st.tuples(
        st.sampled_from(["left", "right"]),
        st.sampled_from([None, "a", "b", "bc"]),
        st.one_of(st.none(), st.integers(0, 99)),
        st.sampled_from([None, [("h", b"1")], [("h", None), ("x", b"")]]),
        st.integers(0, 4),
        st.one_of(st.just(0), st.just(0), st.integers(0, 20)),
    ),
    max_size=40,
).map(timed)
windows_st = st.tuples(st.integers(-3, 12), st.integers(-3, 12), st.integers(0, 10)).filter(
    lambda w: w[0] + w[1] >= 0
)


def run_join(
    path: Path,
    kind: Any,
    windows: JoinWindows,
    batches: list[list[JoinRecord]],
    persistent: bool,
) -> tuple[list[tuple[Any, ...]], StreamJoin[Any, Any]]:
    """Each batch in its own task lifetime (a restart between batches), committed."""
    out: list[tuple[Any, ...]] = []
    for position, batch in enumerate(batches, 1):
        with Task(path, sync=False) as task:
            join: StreamJoin[Any, Any] = StreamJoin(
                task, "j", windows, kind, joiner=joiner, persistent=persistent
            )
            task.initialize()
            for rec in join.process(batch):
                out.append((*rec.value, rec.timestamp))
            task.commit(position)
    return out, join


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["inner", "left", "outer"]),
    w=windows_st,
    records=records_st,
    cuts=st.lists(st.integers(0, 40), max_size=3),
    persistent=st.booleans(),
)
def test_two_stream_joins_equal_the_reference(
    kind: str, w: tuple[int, int, int], records: list[Any], cuts: list[int], persistent: bool
) -> None:
    ref = Reference(w[0], w[1], w[2], kind)
    expected: list[tuple[Any, ...]] = []
    for side, key, value, ts, headers in records:
        expected += ref.feed(0 if side == "left" else 1, key, value, ts, headers)
    inputs = [JoinRecord(*r) for r in records]
    # a restart between batches: persistent buffers reopen, in-memory ones are restored from
    # their changelogs
    bounds = sorted({0, len(inputs), *(c for c in cuts if c <= len(inputs))})
    batches = [inputs[a:b] for a, b in itertools.pairwise(bounds)] or [[]]
    windows = JoinWindows(w[0], w[1], w[2])
    with tempfile.TemporaryDirectory() as tmp:
        got, join = run_join(Path(tmp), kind, windows, batches, persistent)
    assert got == expected
    assert (join.dropped_null, join.dropped_late) == (ref.dropped_null, ref.dropped_late)
    assert join.stream_time == ref.stream_time


@settings(max_examples=40, deadline=None)
@given(
    w=windows_st,
    records=st.lists(
        st.tuples(
            st.sampled_from([None, "a", "b"]),
            st.one_of(st.none(), st.integers(0, 9)),
            st.sampled_from([None, [("h", b"s")]]),
            st.integers(0, 4),
            st.one_of(st.just(0), st.integers(0, 20)),
        ),
        max_size=30,
    ).map(timed),
    cut=st.integers(0, 30),
)
def test_self_join_equals_the_reference(
    w: tuple[int, int, int], records: list[Any], cut: int
) -> None:
    expected = reference_self_join(w[0], w[1], w[2], records)
    inputs = [JoinRecord("left", *r) for r in records]
    batches = [inputs[:cut], inputs[cut:]]
    with tempfile.TemporaryDirectory() as tmp:
        got, _ = run_join(Path(tmp), "self", JoinWindows(w[0], w[1], w[2]), batches, True)
    assert got == expected
