"""perf/report.py: benchmark JSON records -> the table and chart of docs/performance.md; and
perf/_record.py, which writes the records."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("perf_report", ROOT / "perf" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["perf_report"] = module
    spec.loader.exec_module(module)
    return module


report = _load()

FIGURES = [
    {"name": "kv_get_vs_lmdb", "value": 1.02, "unit": "x"},
    {"name": "kv_merged_scan_rows_per_s", "value": 5100000, "unit": "rows/s"},
    {"name": "spill_rss_growth_mib", "value": 12.3, "unit": "MiB"},
]


def _record(bench: str = "kv", figures: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "schema": report.SCHEMA,
        "bench": bench,
        "size": "full",
        "run": {"date": "2026-11-22", "commit": "abc1234"},
        "command": [f"perf/bench_{bench}.py"],
        "workload": {"keys": 200_000},
        "environment": {"cpu_model_name": "test CPU", "cpu_count": 2},
        "figures": FIGURES if figures is None else figures,
        "details": {},
        "timings": None,
    }


def _results(tmp_path: Path, *records: dict[str, Any], raw: str | None = None) -> Path:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    for record in records or (_record(),):
        text = json.dumps(record) if raw is None else raw
        (results / f"{record['bench']}.json").write_text(text, encoding="utf-8")
    return results


def test_load_keeps_the_records_figures_in_order(tmp_path: Path) -> None:
    figures = report.collect(_results(tmp_path))
    assert [f.name for f in figures] == [f["name"] for f in FIGURES]
    by_name = {f.name: f for f in figures}
    assert by_name["kv_get_vs_lmdb"].value == 1.02
    assert by_name["spill_rss_growth_mib"].unit == "MiB"
    assert {f.run for f in figures} == {"2026-11-22 abc1234"}
    assert {f.source for f in figures} == {"kv"}


def test_records_are_read_in_file_name_order(tmp_path: Path) -> None:
    window = _record("window", [{"name": "window_fetch_vs_quix", "value": 2.5, "unit": "x"}])
    crash = _record("crashtest", [{"name": "crashtest_lost", "value": 0, "unit": ""}])
    figures = report.collect(_results(tmp_path, window, _record(), crash))
    assert [f.source for f in figures] == ["crashtest", "kv", "kv", "kv", "window"]


def test_table_says_which_goals_are_met(tmp_path: Path) -> None:
    figures = [
        *FIGURES,
        {"name": "kv_put_commit_vs_lmdb", "value": 0.5, "unit": "x"},
        {"name": "crashtest_lost", "value": 0, "unit": ""},
    ]
    table = report.render_table(report.collect(_results(tmp_path, _record(figures=figures))))
    rows = {line.split("|")[2].strip(" `"): line for line in table.splitlines()[2:]}
    assert "| ≥ 1 x | yes |" in rows["kv_get_vs_lmdb"]  # >= goal met
    assert "| ≥ 1 x | **no** |" in rows["kv_put_commit_vs_lmdb"]  # >= goal missed
    assert "| 12.3 MiB | ≤ 64 MiB | yes |" in rows["spill_rss_growth_mib"]  # <= goal
    assert "| 5,100,000 rows/s | ≥ 5,000,000 rows/s | yes |" in rows["kv_merged_scan_rows_per_s"]
    assert "| = 0 | yes |" in rows["crashtest_lost"]
    assert rows["kv_get_vs_lmdb"].endswith("| 2026-11-22 abc1234 |")


def test_goal_margins_point_the_same_way_for_both_directions() -> None:
    assert report.Goal(">=", 2).margin(4) == 2.0
    assert report.Goal("<=", 2).margin(1) == 2.0
    assert report.Goal("<=", 2).margin(4) == 0.5
    assert not report.Goal("<=", 1.0).met(1.01)


def test_no_records_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(report.ReportError, match="no benchmark records"):
        report.collect(tmp_path / "empty")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "kv.txt").write_text("figure: kv_get_vs_lmdb = 0.8 x\n")
    with pytest.raises(report.ReportError, match="no benchmark records"):
        report.collect(tmp_path / "old")  # outputs are logs; the page is made from records


def _with(change: dict[str, Any]) -> dict[str, Any]:
    record = _record()
    record.update(change)
    return record


def _figure(**change: Any) -> dict[str, Any]:
    return _with({"figures": [*FIGURES, {"name": "x_at_1m", "value": 1.0, "unit": "x", **change}]})


MALFORMED = {
    "another schema": (_with({"schema": "pyperf"}), "not a benchmark record"),
    "a quick run": (_with({"size": "quick"}), "a 'quick' run; the page shows full runs only"),
    "no size": (_with({"size": None}), "'size' is neither 'quick' nor 'full'"),
    "no run": (_with({"run": None}), "'run' is missing"),
    "no commit": (_with({"run": {"date": "2026-11-22"}}), "'commit' is missing"),
    "no environment": (_with({"environment": None}), "'environment' is missing"),
    "no figures": (_with({"figures": []}), "no figures"),
    "figures not a list": (_with({"figures": {"kv_get_vs_lmdb": 0.8}}), "'figures' is missing"),
    # a value the page cannot show must not drop out of the table without a word
    "value with commas": (_figure(value="1,455,628"), r"figure 3 \(x_at_1m\): the value is no"),
    "value not measured": (_figure(value="not measured"), "the value is no finite number"),
    "value missing": (_figure(value=None), "the value is no finite number"),
    "value true": (_figure(value=True), "the value is no finite number"),
    "value NaN": (_figure(value=float("nan")), "the value is no finite number"),
    "unit missing": (_figure(unit=None), "the unit is no string"),
    "bad name": (_figure(name="X at 1M"), "bad name"),
    "figure not an object": (_with({"figures": ["figure: a = 1"]}), "figure 0: not an object"),
    "name twice": (_with({"figures": [*FIGURES, FIGURES[0]]}), "'kv_get_vs_lmdb' appears twice"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_record_is_refused(tmp_path: Path, case: str) -> None:
    record, message = MALFORMED[case]
    results = _results(tmp_path, record)
    with pytest.raises(report.ReportError, match=message):
        report.collect(results)
    page = tmp_path / "performance.md"
    page.write_text(f"{report.BEGIN}\nold\n{report.END}\n", encoding="utf-8")
    argv = ["--results", str(results), "--page", str(page), "--chart", str(tmp_path / "c.png")]
    assert report.main(argv) == 2  # and the page is left as it was
    assert page.read_text(encoding="utf-8") == f"{report.BEGIN}\nold\n{report.END}\n"


def test_record_that_is_no_json_or_in_the_wrong_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(report.ReportError, match=r"kv\.json: not JSON"):
        report.collect(_results(tmp_path, raw='{"schema": "txstore-bench/1", '))
    other = tmp_path / "other"
    other.mkdir()
    (other / "kv.json").write_text(json.dumps(_record("window")), encoding="utf-8")
    with pytest.raises(report.ReportError, match="the record of 'window' in a file named"):
        report.collect(other)


def test_page_without_markers_is_an_error() -> None:
    with pytest.raises(report.ReportError, match="markers"):
        report.splice("# Performance\nno table\n", "| t |")


def test_update_rewrites_only_between_markers_and_draws_the_chart(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(f"intro\n{report.BEGIN}\nold\n{report.END}\noutro\n", encoding="utf-8")
    chart = tmp_path / "img" / "goals.png"
    argv = ["--results", str(_results(tmp_path)), "--page", str(page), "--chart", str(chart)]
    assert report.main([*argv, "--check"]) == 1  # out of date, and left as it was
    assert "\nold\n" in page.read_text(encoding="utf-8")
    assert report.main(argv) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith("\noutro\n") and "old" not in text
    assert "`kv_get_vs_lmdb` | 1.02 x" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.main([*argv, "--check"]) == 0


def test_unknown_benchmark_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--run", "nosuch", "--results", str(tmp_path)]) == 2
    assert "unknown benchmark 'nosuch'" in capsys.readouterr().err


def test_the_bench_lists_name_every_benchmark_once() -> None:
    """`make bench`, `make bench-full` and the report run the same benchmarks: every
    perf/bench_*.py script, none twice (a new script left out of the lists is never run)."""
    scripts = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "perf").glob("bench_*.py"))
    assert sorted(report.BENCHES) == scripts
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(x for x in makefile.splitlines() if x.startswith("BENCHES ?="))
    assert tuple(line.split("?=", 1)[1].split()) == report.BENCHES


def test_every_benchmark_has_a_quick_size() -> None:
    for name in report.BENCHES:
        text = (ROOT / "perf" / f"bench_{name}.py").read_text(encoding="utf-8")
        assert '"--quick"' in text, name


def test_export_writes_the_raw_timings_as_pyperf_suites(tmp_path: Path) -> None:
    suite = {"version": "1.0", "benchmarks": [{"runs": [{"values": [1e-6]}]}]}
    quick = _with({"timings": suite, "size": "quick"})  # quick runs' timings export too
    results = _results(tmp_path, quick, _record("window"))
    out = tmp_path / "pyperf"
    assert report.main(["--results", str(results), "--export-pyperf", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["kv.json"]  # window has no raw timings
    assert json.loads((out / "kv.json").read_text(encoding="utf-8")) == suite


def test_performance_page_matches_the_saved_results() -> None:
    """docs/performance.md's table is what perf/results/ holds: rerun perf/report.py after a
    benchmark run, or this fails."""
    assert report.main(["--check"]) == 0


def test_every_saved_record_has_its_log() -> None:
    """Each record in perf/results/ sits beside the output of the same run (its raw log)."""
    for path in sorted((ROOT / "perf" / "results").glob("*.json")):
        log = path.with_suffix(".txt")
        assert log.is_file(), f"{path.name} has no {log.name}"
        run = json.loads(path.read_text(encoding="utf-8"))["run"]
        assert log.read_text(encoding="utf-8").startswith(
            f"# run: {run['date']} {run['commit']}\n"
        ), path.name


@pytest.fixture
def record_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "perf"))
    return importlib.import_module("_record")


def test_a_benchmarks_record_is_what_the_report_reads(
    record_module: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harness = importlib.import_module("_harness")
    rec = record_module.Record("kv", quick=False, workload={"keys": 10}, argv=["--x"])
    rec.add_timings(
        "get",
        {"lmdb": harness.Timing.of([100.0, 120.0, 110.0]), "txstore": harness.Timing.of([150.0])},
        per="get",
    )
    rec.add_timings("put", {"txstore": {"put": harness.Timing.of([5.0, 6.0])}})
    rec.figure("kv_get_vs_lmdb", 110 / 150, "x", based_on=["get/lmdb", "get/txstore"])
    rec.figure("kv_merged_scan_rows_per_s", 2_950_123.4, "rows/s", digits=0)
    rec.figure("crashtest_lost", 0, digits=0)
    with pytest.raises(ValueError, match="unknown timings"):
        rec.figure("kv_get_vs_quix", 1.0, "x", based_on=["get/quix"])
    results = tmp_path / "results"
    rec.finish(results / "kv.json")
    out = capsys.readouterr().out.splitlines()
    # the figure lines end the output, with the values the record holds
    assert out[-3:] == [
        "figure: kv_get_vs_lmdb = 0.73 x",
        "figure: kv_merged_scan_rows_per_s = 2950123 rows/s",
        "figure: crashtest_lost = 0",
    ]
    figures = report.collect(results)
    assert [(f.name, f.value, f.unit) for f in figures] == [
        ("kv_get_vs_lmdb", 0.73, "x"),
        ("kv_merged_scan_rows_per_s", 2950123, "rows/s"),
        ("crashtest_lost", 0, ""),
    ]
    data = json.loads((results / "kv.json").read_text(encoding="utf-8"))
    assert data["size"] == "full" and data["workload"] == {"keys": 10}
    assert data["command"][1:] == ["--x"]
    env = data["environment"]
    for key in ("cpu_model_name", "cpu_count", "load_avg_1min", "python_version", "platform"):
        assert key in env, key
    assert "hostname" not in env
    assert env["txstore_commit"] != "" and env["lmdb_version"] != "not installed"
    pyperf = importlib.import_module("pyperf")
    suite = pyperf.BenchmarkSuite.loads(json.dumps(data["timings"]))
    assert sorted(suite.get_benchmark_names()) == ["get/lmdb", "get/txstore", "put/txstore/put"]
    lmdb = suite.get_benchmark("get/lmdb")
    assert lmdb.get_values() == pytest.approx((100e-9, 120e-9, 110e-9))  # every round, in order
    assert lmdb.get_unit() == "second" and lmdb.get_metadata()["per"] == "get"
    assert lmdb.get_metadata()["cpu_count"] == env["cpu_count"]
    quick = record_module.Record("kv", quick=True, workload={})
    quick.figure("kv_get_vs_lmdb", 1.0, "x")
    quick.write(results / "kv.json")
    with pytest.raises(report.ReportError, match="a 'quick' run"):
        report.collect(results)
