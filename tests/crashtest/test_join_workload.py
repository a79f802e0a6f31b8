"""The join workload under SIGKILL (txstore/crashtest/joins.py): every crash point once, 0
outputs lost and 0 duplicated; the model finds a join that emits wrong outputs; the command
line's ``--workload join`` names it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from txstore import crashtest
from txstore.cli.main import cli
from txstore.crashtest.joins import JoinModel, JoinWorkload, join_input
from txstore.crashtest.model import Check, Model, compare_store
from txstore.crashtest.plan import reachable_points
from txstore.joins import JoinRecord


def test_the_join_workload_loses_and_repeats_no_output_across_kills(tmp_path: Path) -> None:
    kills = 12
    report = crashtest.run(
        seed=4,
        kills=kills,
        workdir=str(tmp_path / "work"),
        workload="txstore.crashtest.joins:JoinWorkload",
        wipe_sizes=[],
        progress=False,
    )
    summary = report.summary()
    assert report.failure is None, summary
    assert (report.lost, report.leaked) == (0, 0), summary
    assert len(report.kills) == kills
    hit = report.points_hit()
    assert [p for p in reachable_points(segmented=True) if not hit.get(p)] == [], summary
    assert report.records_verified > 1_000, summary  # outputs were compared, not an empty store


def test_the_model_emits_joins_and_unmatched_records_and_drops_late_ones() -> None:
    workload = JoinWorkload(seed=2)
    model = Model(workload)
    model.advance(2_000)
    outputs = list(model.stores["join-out"].live().values())
    joined = [o for o in outputs if None not in o[1]]
    unmatched = [o for o in outputs if None in o[1]]
    assert len(joined) > 200 and len(unmatched) > 100
    records = [join_input(workload.record(i), 1_000) for i in range(2_000)]
    assert any(r.key is None for r in records) and any(r.value is None for r in records)
    ref = JoinModel(1_000, 1_000, 500, "outer")
    late = 0
    for r in records:
        if r.key is not None and r.value is not None and r.timestamp + 1_500 < ref.now:
            late += 1
        ref.feed(r)
    assert late > 10


def test_a_wrong_output_is_reported_lost_and_an_extra_one_leaked() -> None:
    workload = JoinWorkload(seed=2)
    model = Model(workload)
    model.advance(300)
    spec = workload.stores()[0]
    actual = dict(model.stores[spec.name].live())
    first = next(iter(actual))
    del actual[first]
    actual[(10**6, 0)] = ("k", ["x", None], 0)
    check = Check()
    compare_store(spec, actual, model.stores[spec.name], check)
    assert (check.lost, check.leaked) == (1, 1)


def test_the_command_line_names_the_join_workload(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["crashtest", "--workload", "join", "--kills", "2", "--seed", "3", "--wipe-sizes", "",
         "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "out"), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "join-out" in result.output and "lost = 0, leaked = 0" in result.output


def test_join_input_is_a_pure_function_of_the_record() -> None:
    w = JoinWorkload(seed=5)
    assert join_input(w.record(7), 1_000) == join_input(JoinWorkload(seed=5).record(7), 1_000)
    assert isinstance(join_input(w.record(7), 1_000), JoinRecord)
