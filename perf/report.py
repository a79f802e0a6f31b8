"""The performance report: saved benchmark outputs -> the table and chart of docs/performance.md.

Every benchmark (``perf/bench_*.py``) and the crash harness end their output with lines
``figure: <name> = <value> <unit>``. ``make bench-full`` saves each full run's output as
``perf/results/<name>.txt`` (first line ``# run: <date> <commit>``); this script reads those
files and

* rewrites the figures table of ``docs/performance.md`` (between the two ``figures`` marker
  comments): every figure, its value, its goal and whether the goal is met;
* draws ``docs/img/perf-goals.png``: each figure that has a goal as its distance from the goal
  on a log scale (right of 1 = met), so that figures of different units share one chart.

``python perf/report.py --run kv,window,crashtest`` first runs those benchmarks at full size
(``crashtest``: the long harness pass, 1,000 kills, recovery versus wipe up to 1M keys, its
plot copied to ``docs/img/crashtest.png``), streaming their output and saving it, then updates
the page. ``python perf/report.py --check`` changes nothing and exits 1 when the page's table
differs from what the saved results give (the test suite runs it, so the page cannot drift
from the results). Nothing here measures anything: it only reads what the benchmarks printed.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results"
PAGE = ROOT / "docs" / "performance.md"
CHART = ROOT / "docs" / "img" / "perf-goals.png"
BEGIN = "<!-- figures:begin (perf/report.py writes this table) -->"
END = "<!-- figures:end -->"

FIGURE = re.compile(r"^figure: ([a-z0-9_]+) = (-?[0-9.]+)(?: (.+?))?\s*$")
ANY_FIGURE = re.compile(r"^figure:")
RUN = re.compile(r"^# run: (.+)$")


@dataclass(frozen=True)
class Goal:
    """A figure's goal: ``op`` is ``">="``, ``"<="`` or ``"=="``."""

    op: str
    value: float

    def met(self, measured: float) -> bool:
        if self.op == ">=":
            return measured >= self.value
        if self.op == "<=":
            return measured <= self.value
        return measured == self.value

    def margin(self, measured: float) -> float:
        """measured / goal for ``>=`` (goal / measured for ``<=``): above 1 means met."""
        if self.op == "<=":
            return self.value / measured if measured else float("inf")
        if self.op == ">=":
            return measured / self.value if self.value else float("inf")
        return 1.0 if measured == self.value else 0.0


# The goals the issues set (figures without one are reported as measured).
GOALS: dict[str, Goal] = {
    "codec_batch_speedup_min": Goal(">=", 8),
    "codec_single_slowdown_max": Goal("<=", 1.0),
    "kv_put_commit_vs_lmdb": Goal(">=", 0.7),
    "kv_put_commit_vs_quix": Goal(">=", 1.5),
    "kv_get_vs_lmdb": Goal(">=", 0.75),
    "kv_get_vs_quix": Goal(">=", 3),
    "kv_merged_scan_rows_per_s": Goal(">=", 2_000_000),
    "recover_ms_ratio_large_small": Goal("<=", 1.5),
    "spill_rss_growth_mib": Goal("<=", 64),
    "window_put_commit_vs_quix": Goal(">=", 1.5),
    "window_fetch_vs_quix": Goal(">=", 2),
    "plain_headers_bytes_saved_per_record": Goal("==", 8),
    "changelog_append_per_s": Goal(">=", 300_000),
    "changelog_replay_per_s": Goal(">=", 1_000_000),
    "restore_vs_quix": Goal(">=", 3),
    "restore_window_vs_quix": Goal(">=", 3),
    "iq_local_vs_direct": Goal(">=", 0.8),
    "spark_read_vs_parquet": Goal("<=", 2),
    "crashtest_lost": Goal("==", 0),
    "crashtest_leaked": Goal("==", 0),
}


@dataclass(frozen=True)
class Figure:
    source: str  # results file stem: "kv" for bench_kv's output, "crashtest"
    name: str
    value: float
    unit: str
    run: str  # the "# run:" line of its file ("" if none)

    @property
    def goal(self) -> Goal | None:
        return GOALS.get(self.name)


class ReportError(Exception):
    """A results file that cannot be read as benchmark output."""


def parse(path: Path) -> list[Figure]:
    """The figures of one saved output; the last line of a name wins (a rerun appended)."""
    run = ""
    found: dict[str, Figure] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if m := RUN.match(line):
            run = m.group(1)
        elif m := FIGURE.match(line):
            name, value, unit = m.group(1), float(m.group(2)), m.group(3) or ""
            found[name] = Figure(path.stem, name, value, unit, run)
        elif ANY_FIGURE.match(line):
            # a figure a benchmark printed but this page cannot read (a "1,234" value, a
            # "not measured" note) must not drop out of the table unseen
            raise ReportError(f"{path}:{number}: unreadable figure line: {line!r}")
    if not found:
        raise ReportError(f"{path}: no 'figure: <name> = <value> <unit>' line")
    return list(found.values())


def collect(results: Path) -> list[Figure]:
    """Every figure of every ``*.txt`` in ``results``, ordered by file name then output order."""
    files = sorted(results.glob("*.txt"))
    if not files:
        raise ReportError(f"{results}: no saved benchmark outputs (*.txt); run make bench-full")
    return [f for path in files for f in parse(path)]


def _number(value: float) -> str:
    if value == int(value) and abs(value) >= 1000:
        return f"{int(value):,}"
    return f"{value:g}"


def _goal_text(goal: Goal | None, unit: str) -> str:
    if goal is None:
        return ""
    op = {">=": "≥", "<=": "≤", "==": "="}[goal.op]
    return f"{op} {_number(goal.value)} {unit}".rstrip()


def render_table(figures: list[Figure]) -> str:
    """The markdown table that goes between the markers of docs/performance.md."""
    lines = [
        "| source | figure | measured | goal | met | run |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        goal = f.goal
        met = "" if goal is None else ("yes" if goal.met(f.value) else "**no**")
        source = f"`{f.source}`" if f.source == "crashtest" else f"`bench_{f.source}.py`"
        lines.append(
            f"| {source} | `{f.name}` | {_number(f.value)} {f.unit} | "
            f"{_goal_text(goal, f.unit)} | {met} | {f.run} |".replace("  ", " ")
        )
    return "\n".join(lines)


def splice(page: str, table: str) -> str:
    """``page`` with the text between the markers replaced by ``table``."""
    try:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ReportError(f"{PAGE.name}: the markers {BEGIN!r} and {END!r} are missing") from None
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def draw(figures: list[Figure], dest: Path) -> None:
    """Bar chart of every figure with a goal: measured relative to goal, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f, f.goal) for f in figures if f.goal is not None and f.goal.op != "=="]
    labels = [f.name for f, _ in rows]
    margins = [max(g.margin(f.value), 1e-3) for f, g in rows]
    colors = ["#2a9d5c" if m >= 1 else "#d1495b" for m in margins]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    ax.barh(labels, [m - 1 for m in margins], left=1, color=colors)  # from the goal line
    ax.set_xscale("log")
    ax.set_xlim(min(0.1, min(margins) / 2), max(10.0, max(margins) * 3))
    ax.axvline(1.0, color="black", linewidth=1)
    ax.invert_yaxis()
    ax.set_xlabel("measured relative to goal (log scale; right of 1 = goal met)")
    for i, (f, _) in enumerate(rows):
        ax.text(max(margins[i], 1.0), i, f"  {_number(f.value)} {f.unit}", va="center", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=110)
    plt.close(fig)


BENCHES = ("codecs", "kv", "window", "changelog", "restore", "queries", "spark")
CRASHTEST = ["--kills", "1000", "--seed", "1000", "--wipe-sizes", "10k,100k,1m"]


def run(name: str, results: Path) -> None:
    """Run one full benchmark (or the long crash-harness pass), streaming its output to the
    terminal and to ``results/<name>.txt``; raise :class:`ReportError` if it fails."""
    if name == "crashtest":
        out = ROOT / "perf" / "out" / "crashtest"
        cmd = [sys.executable, "-m", "txstore", "crashtest", *CRASHTEST, "--out", str(out)]
    elif name in BENCHES:
        cmd = [sys.executable, str(ROOT / "perf" / f"bench_{name}.py")]
    else:
        raise ReportError(f"unknown benchmark {name!r}; known: {', '.join(BENCHES)}, crashtest")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    results.mkdir(parents=True, exist_ok=True)
    partial = results / f"{name}.txt.partial"
    with partial.open("w", encoding="utf-8") as log:
        log.write(f"# run: {datetime.date.today().isoformat()} {commit or 'uncommitted'}\n")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        if proc.wait() != 0:
            raise ReportError(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    partial.replace(results / f"{name}.txt")
    if name == "crashtest":
        shutil.copyfile(out / "crashtest.png", CHART.parent / "crashtest.png")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="saved outputs (*.txt)")
    ap.add_argument("--page", type=Path, default=PAGE, help="the page holding the table")
    ap.add_argument("--chart", type=Path, default=CHART, help="the PNG to write")
    ap.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if the page is out of date"
    )
    ap.add_argument("--run", default="", help="comma-separated benchmarks to run first")
    args = ap.parse_args(argv)
    try:
        for name in filter(None, args.run.split(",")):
            run(name, args.results)
        figures = collect(args.results)
        page = args.page.read_text(encoding="utf-8")
        updated = splice(page, render_table(figures))
    except (ReportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != page:
            print(f"{args.page} is out of date with {args.results}; run perf/report.py")
            return 1
        print(f"{args.page}: table matches {len(figures)} figures")
        return 0
    args.page.write_text(updated, encoding="utf-8")
    draw(figures, args.chart)
    missed = [f.name for f in figures if f.goal is not None and not f.goal.met(f.value)]
    print(f"{len(figures)} figures -> {args.page}, {args.chart}")
    print(f"goals missed: {', '.join(missed) if missed else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
