"""The crash harness's pieces: workload, model and classification, plan, report, command
line, replay, and the harness finding real losses and leaks."""

from __future__ import annotations

import itertools
import json
import shlex
import shutil
from pathlib import Path

import pytest

from txstore import Headers, ValueTimestampHeaders, crashtest
from txstore.cli.crashtest import config_from_args, parse_sizes
from txstore.cli.main import main
from txstore.crashtest.common import POSITION_KEY, RunConfig, open_task
from txstore.crashtest.driver import CrashtestConfig
from txstore.crashtest.model import Check, Model, check_position, compare_store
from txstore.crashtest.plan import FAULT_POINTS, RANDOM, make_plan, reachable_points
from txstore.crashtest.replay import replay_command
from txstore.crashtest.report import (
    CrashtestReport,
    KillRecord,
    RecoveryRecord,
    WipeResult,
    percentile,
    size_label,
)
from txstore.crashtest.specs import CountsSpec, LatestSpec, StoreModel
from txstore.crashtest.state import StateReader, check_state
from txstore.crashtest.workload import (
    DEFAULT_WORKLOAD,
    StandardWorkload,
    Workload,
    load_workload,
)
from txstore.errors import InvalidArgumentError

# ---- workload ------------------------------------------------------------------------------


def test_records_and_commit_points_are_pure_functions_of_seed_and_index() -> None:
    a, b = StandardWorkload(seed=3), StandardWorkload(seed=3)
    assert [a.record(i) for i in range(50)] == [b.record(i) for i in range(50)]
    other = StandardWorkload(seed=4)
    assert [a.record(i) for i in range(50)] != [other.record(i) for i in range(50)]
    assert all(len(a.record(i).payload) == a.value_bytes for i in range(20))
    assert any(a.record(i).delete for i in range(200))
    commits = [i + 1 for i in range(20_000) if a.commit_after(i)]
    assert 20_000 / len(commits) == pytest.approx(a.commit_every, rel=0.2)
    for p in commits[:50]:
        assert a.is_commit_position(p)
        assert a.next_commit(p - 1) == p
    assert a.is_commit_position(0)
    assert a.next_commit(commits[3]) == commits[4]


def test_load_workload_checks_its_argument() -> None:
    w = load_workload(DEFAULT_WORKLOAD, 2, {"keys": 9, "segmented": False})
    assert isinstance(w, StandardWorkload) and (w.seed, w.keys) == (2, 9)
    assert load_workload(DEFAULT_WORKLOAD, 2, w.params()).params() == w.params()
    for bad in ("nomodule", "txstore.nope:X", "txstore.crashtest.workload:nothing"):
        with pytest.raises(InvalidArgumentError):
            load_workload(bad, 1)
    with pytest.raises(InvalidArgumentError, match="Workload"):
        load_workload("txstore.crashtest.report:size_label", 1)
    with pytest.raises(InvalidArgumentError, match="keys"):
        StandardWorkload(keys=0)


def test_model_moves_forward_incrementally_and_rebuilds_backwards() -> None:
    w = StandardWorkload(seed=5, keys=20)
    m = Model(w)
    m.advance(300)
    m.advance(700)
    fresh = Model(w)
    fresh.advance(700)
    assert {n: s.live() for n, s in m.stores.items()} == {
        n: s.live() for n, s in fresh.stores.items()
    }
    m.advance(10)
    assert m.position == 10 and sum(m.stores["counts"].live().values()) == 10


def test_model_matches_the_real_stores_with_expiry_and_restore(tmp_path: Path) -> None:
    """The independent model against the stores themselves, read as the harness reads them
    (read-only, another handle): 3,000 records drop segments of the window and session stores
    several times; a wipe-and-restore from the changelogs gives the same state."""
    w = StandardWorkload(seed=8, keys=40, segmented=True)
    config = RunConfig(path=str(tmp_path / "task"), workload=DEFAULT_WORKLOAD, seed=8,
                       params=w.params())  # fmt: skip

    def check() -> Check:
        with StateReader(config, w) as reader:
            obs = reader.observe()
        assert obs.stable and obs.position == position
        result = Check()
        check_state(w, Model(w), obs, result)
        assert result.checked > 100
        return result

    task, stores, position_store = open_task(config, w)
    with task:
        task.initialize()
        for i in range(3_000):
            rec = w.record(i)
            task.context.timestamp = rec.ts
            w.process(stores, rec)
            if w.commit_after(i):
                position_store.put(POSITION_KEY, i + 1)
                task.commit(i + 1)
        position = task.input_position or 0
    assert check().ok
    model = Model(w)
    model.advance(position)
    clicks = model.stores["clicks"].live()
    first_window = min(k.window.start for k in clicks)  # type: ignore[attr-defined]
    assert first_window > w.T0 + 60_000  # early segments were dropped
    shutil.rmtree(tmp_path / "task" / "data")
    task, stores, position_store = open_task(config, w)
    with task:
        assert sum(task.initialize().restored.values()) > 0
    assert check().ok


# ---- classification ------------------------------------------------------------------------


def _latest(i: int) -> ValueTimestampHeaders[str]:
    return ValueTimestampHeaders(f"p{i}", 1000 * i, Headers([("i", str(i).encode())]))


def test_differences_are_classified_as_lost_or_leaked() -> None:
    spec = LatestSpec("latest")
    model = StoreModel()
    model.put("same", _latest(1), 1)
    model.put("older", _latest(5), 5)
    model.put("newer", _latest(5), 5)
    model.put("missing", _latest(2), 2)
    model.delete("deleted-lost", 7)
    model.delete("deleted-leak", 7)
    actual = {
        "same": _latest(1),
        "older": _latest(3),  # an update was lost
        "newer": _latest(9),  # an uncommitted update is visible
        "deleted-lost": _latest(4),  # a committed delete was lost
        "deleted-leak": _latest(8),  # a write after the committed delete leaked
        "never": _latest(10),  # a key the committed input never wrote
    }
    check = Check()
    compare_store(spec, actual, model, check)
    kinds = {f.key: f.kind for f in check.findings}
    assert kinds == {
        "'older'": "lost",
        "'newer'": "leaked",
        "'deleted-lost'": "lost",
        "'deleted-leak'": "leaked",
        "'never'": "leaked",
        "'missing'": "lost",
    }
    assert (check.lost, check.leaked, check.checked) == (3, 3, 7)
    assert "expected value of record 5" in str(check.findings[0])


def test_counts_higher_than_the_model_leak_lower_lose() -> None:
    spec, model = CountsSpec("counts"), StoreModel()
    model.put("a", 3, 3)
    model.put("b", 3, 3)
    check = Check()
    compare_store(spec, {"a": 4, "b": 2}, model, check)
    assert (check.lost, check.leaked) == (1, 1)


def test_recovered_position_against_the_acknowledged_one() -> None:
    w = StandardWorkload(seed=1)
    acked = w.next_commit(1000)
    for position, lost, leaked in [
        (acked, 0, 0),
        (w.next_commit(acked), 0, 0),  # committed, acknowledgement not read before the kill
        (w.next_commit(w.next_commit(acked)), 0, 1),  # beyond what could have committed
        (acked + 1 if not w.is_commit_position(acked + 1) else acked + 2, 0, 1),
    ]:
        check = Check()
        check_position(w, position, acked, check)
        assert (check.lost, check.leaked) == (lost, leaked), position
    check = Check()
    check_position(w, 1000 - 40, 1000, check)
    assert check.lost == 40


# ---- plan ----------------------------------------------------------------------------------


def test_plan_covers_every_point_deterministically() -> None:
    points = reachable_points(segmented=True)
    plan = make_plan(7, 50, points)
    assert plan == make_plan(7, 50, points)
    assert plan != make_plan(8, 50, points)
    assert len(plan) == 50 and [s.index for s in plan] == list(range(50))
    assert {s.point for s in plan} == {*points, RANDOM}
    for prev, step in itertools.pairwise(plan):
        if step.point == "task.restore_batch":  # something to restore
            assert prev.point in ("task.after_changelog_commit", "partition.mid_commit")
    for s in plan:
        if s.random:
            assert 0 <= s.delay <= 0.4 and s.faults_env == ""
        else:
            lo, hi = FAULT_POINTS[s.point]
            assert lo <= s.nth <= hi and s.faults_env == f"{s.point}={s.nth}"
    assert "segments.drop" not in reachable_points(segmented=False)
    assert len(make_plan(1, 3, points)) == 3
    assert {s.point for s in make_plan(1, 20, [])} == {RANDOM}
    with pytest.raises(ValueError, match="unknown"):
        make_plan(1, 5, ["no.such.point"])


# ---- report and command line ---------------------------------------------------------------


def _report(wipe_keys: list[int]) -> CrashtestReport:
    r = CrashtestReport(config={"seed": 4}, stores=[{"name": "s", "kind": "key_value"}])
    r.kills = [
        KillRecord(0, RANDOM, RANDOM, "processing", 0, 50, 0.1),
        KillRecord(1, "overlay.spill", "overlay.spill", "processing", 50, 90, 0.1),
    ]
    r.recoveries = [
        RecoveryRecord("start", 0, 100.0, 0, 0, False, 1, 0, 0),
        RecoveryRecord(RANDOM, 50, 4.0, 10, 0, True, 40, 0, 0),
        RecoveryRecord("overlay.spill", 90, 8.0, 0, 3, True, 60, 0, 0),
    ]
    r.wipe = [WipeResult(k, 10.0, 10.0 * k / 1000, 1000, k, 1) for k in wipe_keys]
    return r


def test_percentiles_and_size_labels() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0
    assert percentile([7.0], 99) == 7.0
    assert [size_label(n) for n in (5_000_000, 100_000, 1500)] == ["5m", "100k", "1500"]


def test_summary_ends_with_the_figures() -> None:
    r = _report([10_000, 1_000_000])
    lines = r.summary().splitlines()
    assert lines[-5:] == [
        "figure: crashtest_kills = 2",
        "figure: crashtest_lost = 0",
        "figure: crashtest_leaked = 0",
        "figure: recovery_ms_p99 = 8.0 ms",  # the first start is not a recovery after a kill
        "figure: recovery_vs_wipe_at_1m = 1000.0 x",
    ]
    assert any(line.startswith("overlay.spill") for line in lines)
    small = _report([10_000, 100_000]).figures()
    assert small[-2].startswith("figure: recovery_vs_wipe_at_1m = not measured")
    assert "100k" in small[-2] and small[-1] == "figure: recovery_vs_wipe_at_100k = 100.0 x"
    assert _report([]).figures()[-1].startswith("figure: recovery_vs_wipe_at_1m = not measured")
    doc = r.to_json()
    assert doc["ok"] and doc["totals"]["kills_per_point"] == {RANDOM: 1, "overlay.spill": 1}
    assert doc["totals"]["recoveries"] == 2 and doc["recovery_vs_wipe"][1]["ratio"] == 1000.0
    json.dumps(doc)


def test_failure_lines_name_seed_point_and_replay() -> None:
    r = _report([])
    r.failure = {
        "message": "1 lost, 0 leaked",
        "findings": ["lost: counts['k1']: expected 3, found 2"],
        "seed": 4,
        "crash_point": "overlay.spill",
        "planned": "overlay.spill",
        "replay": "txstore crashtest --seed 4 --kills 2 --replay 1",
        "state_directory": "/tmp/x",
    }
    assert not r.ok
    text = r.summary()
    assert "FAILED: 1 lost" in text and "lost: counts['k1']" in text
    assert "seed 4; crash point overlay.spill" in text
    assert "replay: txstore crashtest --seed 4 --kills 2 --replay 1" in text


def test_sizes_and_replay_command_round_trip_through_the_parser() -> None:
    assert parse_sizes("10k, 100K,1m,5m") == [10_000, 100_000, 1_000_000, 5_000_000]
    with pytest.raises(ValueError, match="not a size"):
        parse_sizes("ten")
    config = CrashtestConfig(
        seed=9,
        kills=70,
        points=["overlay.spill", "task.restore_batch"],
        workload_params={"keys": 7},
        overlay_budget_bytes=4096,
        sync=False,
    )
    argv = shlex.split(replay_command(config, 12))
    assert argv[:2] == ["txstore", "crashtest"]
    back = config_from_args(argv[2:])
    assert back.replay == 12 and back.wipe_sizes == [] and back.keep
    for name in ("seed", "kills", "points", "workload_params", "overlay_budget_bytes", "sync"):
        assert getattr(back, name) == getattr(config, name), name
    assert "--replay" not in replay_command(config, None)


# ---- end to end: the command, and the harness finding real failures -------------------------


def test_command_line_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["crashtest", "--kills", "3", "--points", "task.after_store_commit,overlay.spill"]
    argv += ["--wipe-sizes", "", "--out", str(out), "--no-plot", "-q", "--keys", "50"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "figure: crashtest_kills = 3" in text and "figure: crashtest_lost = 0" in text
    assert json.loads((out / "crashtest.json").read_text())["ok"] is True


def test_non_transactional_stores_fail_with_seed_point_and_a_replay_that_reproduces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without KIP-892 buffering, writes reach LMDB before the commit: after a crash the
    harness must find uncommitted data (the hazard Kafka answers with a wipe), and its replay
    command must find the same."""
    params = {"transactional": False, "segmented": False, "keys": 30}
    report = crashtest.run(
        seed=3,
        kills=4,
        points=["task.before_changelog_commit"],
        random_fraction=0.0,
        workload_params=params,
        workdir=str(tmp_path / "first"),
        reader=False,
        progress=False,
    )
    assert not report.ok and report.leaked > 0
    failure = report.failure
    assert failure is not None
    assert failure["seed"] == 3 and failure["crash_point"] == "task.before_changelog_commit"
    assert Path(failure["state_directory"]).is_dir()
    argv = shlex.split(failure["replay"])
    assert "--replay" in argv and argv[argv.index("--replay") + 1] == "0"
    argv += ["--workdir", str(tmp_path / "replay"), "--no-reader", "-q", "--out", ""]
    assert main(argv[1:]) == 1
    text = capsys.readouterr().out
    assert failure["findings"][0] in text
    assert "FAILED" in text and "replay: txstore crashtest --seed 3" in text


def test_every_workload_subclass_needs_stores() -> None:
    with pytest.raises(NotImplementedError):
        Workload(1).stores()


def test_the_docs_custom_workload_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/crashtest.md's ``my_workload.py``, crash-tested as the page says."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "crashtest.md").read_text()
    source = text.split("```python file=my_workload.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_workload.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    report = crashtest.run(
        workload="my_workload:MyWorkload",
        workload_params={"keys": 100},
        kills=4,
        points=["task.after_changelog_commit", "task.restore_batch", "overlay.spill"],
        workdir=str(tmp_path / "work"),
        progress=False,
    )
    assert report.ok, report.summary()
    assert [s["name"] for s in report.stores] == ["totals", "crashtest_position"]
    assert report.unreachable == {"segments.drop": "no window or session store in the workload"}


def test_command_line_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quick = ["--kills", "1", "--wipe-sizes", "", "--out", "", "-q", "--no-reader"]
    assert main(["crashtest", "--points", "no.such.point", *quick]) == 2
    assert "unknown fault points ['no.such.point']" in capsys.readouterr().err
    assert main(["crashtest", "--workload", "no_such_module:W", *quick]) == 2
    assert "cannot load workload" in capsys.readouterr().err
    (tmp_path / "busy").write_text("")
    assert main(["crashtest", "--workdir", str(tmp_path), *quick]) == 2
    assert "not empty" in capsys.readouterr().err


def test_the_reader_sees_uncommitted_writes_of_non_transactional_stores(tmp_path: Path) -> None:
    """Kills right after a store commit leave nothing uncommitted behind, so every recovery
    checks out; only the reader, reading while the writer runs, sees the uncommitted writes
    that non-transactional stores let through."""
    report = crashtest.run(
        seed=2,
        kills=8,
        points=["task.after_store_commit"],
        random_fraction=0.0,
        workload_params={"transactional": False, "segmented": False, "keys": 20},
        workdir=str(tmp_path / "work"),
        progress=False,
    )
    assert not report.ok and report.failure is not None
    assert report.failure["message"].startswith("the reader saw")
    assert all(r.lost == r.leaked == 0 for r in report.recoveries)
    assert any(f.startswith("leaked: ") for f in report.failure["findings"])
