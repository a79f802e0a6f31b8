"""perf/report.py: saved benchmark outputs -> the table and chart of docs/performance.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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

OUTPUT = """# run: 2026-11-22 abc1234
some table
figure: kv_get_vs_lmdb = 0.61 x
figure: kv_merged_scan_rows_per_s = 2950000 rows/s
figure: spill_rss_growth_mib = 12.3 MiB
figure: kv_get_vs_lmdb = 0.80 x
"""


def _results(tmp_path: Path, text: str = OUTPUT, name: str = "kv") -> Path:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    (results / f"{name}.txt").write_text(text, encoding="utf-8")
    return results


def test_parse_keeps_the_last_line_of_each_figure(tmp_path: Path) -> None:
    figures = report.collect(_results(tmp_path))
    by_name = {f.name: f for f in figures}
    assert [f.name for f in figures] == [
        "kv_get_vs_lmdb",
        "kv_merged_scan_rows_per_s",
        "spill_rss_growth_mib",
    ]
    assert by_name["kv_get_vs_lmdb"].value == 0.80
    assert by_name["spill_rss_growth_mib"].unit == "MiB"
    assert {f.run for f in figures} == {"2026-11-22 abc1234"}
    assert {f.source for f in figures} == {"kv"}


def test_table_says_which_goals_are_met(tmp_path: Path) -> None:
    text = OUTPUT + "figure: kv_put_commit_vs_lmdb = 0.5 x\nfigure: crashtest_lost = 0\n"
    table = report.render_table(report.collect(_results(tmp_path, text)))
    rows = {line.split("|")[2].strip(" `"): line for line in table.splitlines()[2:]}
    assert "| ≥ 0.75 x | yes |" in rows["kv_get_vs_lmdb"]  # >= goal met
    assert "| ≥ 0.7 x | **no** |" in rows["kv_put_commit_vs_lmdb"]  # >= goal missed
    assert "| 12.3 MiB | ≤ 64 MiB | yes |" in rows["spill_rss_growth_mib"]  # <= goal
    assert "| 2,950,000 rows/s | ≥ 2,000,000 rows/s | yes |" in rows["kv_merged_scan_rows_per_s"]
    assert "| = 0 | yes |" in rows["crashtest_lost"]


def test_goal_margins_point_the_same_way_for_both_directions() -> None:
    assert report.Goal(">=", 2).margin(4) == 2.0
    assert report.Goal("<=", 2).margin(1) == 2.0
    assert report.Goal("<=", 2).margin(4) == 0.5
    assert not report.Goal("<=", 1.0).met(1.01)


def test_output_without_figures_is_an_error(tmp_path: Path) -> None:
    results = _results(tmp_path, "# run: today\nno figures here\n")
    with pytest.raises(report.ReportError, match="no 'figure:"):
        report.collect(results)
    with pytest.raises(report.ReportError, match="no saved benchmark outputs"):
        report.collect(tmp_path / "empty")


def test_unreadable_figure_line_is_an_error_not_a_gap(tmp_path: Path) -> None:
    # "1,455,628" and "not measured" would otherwise vanish from the table without a word
    for bad in ("figure: spark_rows_per_s = 1,455,628 rows/s", "figure: x_at_1m = not measured"):
        results = _results(tmp_path, OUTPUT + bad + "\n")
        with pytest.raises(report.ReportError, match=r"kv\.txt:\d+: unreadable figure line"):
            report.collect(results)


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
    assert "`kv_get_vs_lmdb` | 0.8 x" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.main([*argv, "--check"]) == 0


def test_unknown_benchmark_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--run", "nosuch", "--results", str(tmp_path)]) == 2
    assert "unknown benchmark 'nosuch'" in capsys.readouterr().err


def test_performance_page_matches_the_saved_results() -> None:
    """docs/performance.md's table is what perf/results/ holds: rerun perf/report.py after a
    benchmark run, or this fails."""
    assert report.main(["--check"]) == 0
