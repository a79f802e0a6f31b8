"""The JSON record each benchmark writes beside its output (``perf/bench_*.py``).

A benchmark makes one :class:`Record`, adds the raw timings its figures come from
(:meth:`Record.add_timings`) and its figures (:meth:`Record.figure`), and ends with
:meth:`Record.finish`, which prints the ``figure: <name> = <value> <unit>`` lines (the last lines
of the output, as before) and writes the record (``--json PATH``; by default
``perf/out/<bench>.json``, which git ignores; ``perf/report.py --run`` writes
``perf/results/<bench>.json``, from which docs/performance.md is made). The record::

    {
      "schema": "txstore-bench/1",
      "bench": "kv",                       # perf/bench_kv.py
      "size": "full",                      # or "quick" (--quick)
      "run": {"date": "2026-11-24", "commit": "d0e7b05"},
      "command": ["perf/bench_kv.py", ...],
      "seconds": 312.4,                    # the whole run
      "workload": {"keys": 200000, "rounds": 7, ...},
      "environment": {...},                # below
      "figures": [{"name": "kv_get_vs_lmdb", "value": 0.83, "unit": "x",
                   "based_on": ["get/lmdb: get (one read txn)", "get/txstore tx: get"]}, ...],
      "details": {...},                    # other readings (kv: the spill child's RSS), or {}
      "timings": {...}                     # a pyperf BenchmarkSuite, or null
    }

A figure's ``value`` is the number its ``figure:`` line prints (rounded as printed), so the
output and the record never disagree. Figures are derived numbers (ratios, rows/s, MiB, counts
that may be 0), which pyperf cannot hold as benchmark values (its units are second, byte and
integer, and its values must be > 0); the raw timings they come from can, so ``timings`` is
pyperf's own BenchmarkSuite JSON: one pyperf benchmark per timed series, named
``<section>/<variant>[/<phase>]``, in seconds per item (the item is in its ``per`` metadata),
one value per interleaved round, in round order. ``python perf/report.py --export-pyperf DIR``
writes them as ``DIR/<bench>.json`` for pyperf's tools (``python -m pyperf show``, ``stats``,
``compare_to``).

``environment`` is pyperf's metadata collector's output (date, platform, cpu_model_name,
cpu_count, cpu_freq, cpu_config, load_avg_1min, python_version, python_implementation, ...;
the host name is left out) plus ``load_avg_1min_at_start``, ``txstore_version``,
``txstore_commit`` (full hash of the checkout txstore was imported from), ``txstore_tree``
(``clean`` or ``modified``: uncommitted changes to tracked files under txstore/, csrc/ or perf/,
results aside) and
``<package>_version`` for lmdb, cffi, pyarrow, pyspark, quixstreams and pyperf (``not
installed`` when absent). The same metadata is attached to the pyperf runs, so an exported
suite carries it too.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _harness import Timing

SCHEMA = "txstore-bench/1"
PERF = Path(__file__).resolve().parent
PACKAGES = ("lmdb", "cffi", "pyarrow", "pyspark", "quixstreams", "pyperf")

__all__ = ["PACKAGES", "SCHEMA", "Record", "add_json_argument", "environment", "figure_line"]


def figure_line(name: str, text: str, unit: str) -> str:
    """``figure: <name> = <value> <unit>``, the line the benchmark prints."""
    return f"figure: {name} = {text} {unit}".rstrip()


def add_json_argument(parser: argparse.ArgumentParser, bench: str) -> None:
    """The ``--json PATH`` option every benchmark takes (``--json ''``: write no record)."""
    parser.add_argument(
        "--json",
        default=str(PERF / "out" / f"{bench}.json"),
        metavar="PATH",
        help=f"where to write the JSON record (default: perf/out/{bench}.json; '' for none)",
    )


def _git(root: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _txstore_root() -> Path | None:
    """The checkout the ``txstore`` package is imported from (PYTHONPATH first, as Python)."""
    spec = importlib.util.find_spec("txstore")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(load_at_start: float | None = None) -> dict[str, str | int | float]:
    """What the run ran on: pyperf's metadata plus txstore's checkout and package versions.

    Every value is a non-empty one-line string or a number, as pyperf's run metadata must be.
    """
    pyperf = importlib.import_module("pyperf")
    # pyperf collects its metadata when a Run is made (its own ``collect_metadata`` command
    # does this); the one value is a placeholder, dropped with the Run.
    env: dict[str, Any] = dict(pyperf.Run([1.0]).get_metadata())
    env.pop("hostname", None)
    if load_at_start is not None:
        env["load_avg_1min_at_start"] = round(load_at_start, 2)
    root = _txstore_root()
    try:
        env["txstore_version"] = importlib.import_module("txstore.version").__version__
    except ImportError:
        env["txstore_version"] = "unknown"
    commit = _git(root, "rev-parse", "HEAD") if root else ""
    env["txstore_commit"] = commit or "unknown"
    if commit and root:
        # tracked files changed in the code measured (not the results a bench-full run writes)
        changed = _git(
            root,
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "txstore",
            "csrc",
            "perf",
            ":(exclude)perf/results",
        )
        env["txstore_tree"] = "modified" if changed else "clean"
    for name in PACKAGES:
        env[f"{name}_version"] = _package_version(name)
    return env


def _series(timings: Mapping[str, Any]) -> list[tuple[str, Timing]]:
    """``{variant: Timing}`` or ``{variant: {phase: Timing}}`` -> ``[(name, Timing)]``."""
    out: list[tuple[str, Timing]] = []
    for variant, t in timings.items():
        if isinstance(t, Timing):
            out.append((variant, t))
        else:
            out.extend((f"{variant}/{phase}", pt) for phase, pt in t.items())
    return out


class Record:
    """One benchmark run: its figures, raw timings, workload and environment."""

    def __init__(
        self,
        bench: str,
        *,
        quick: bool,
        workload: Mapping[str, object],
        argv: Sequence[str] | None = None,
    ) -> None:
        if importlib.util.find_spec("pyperf") is None:  # fail now, not after the run
            raise SystemExit("pyperf is missing: pip install -e '.[bench]' (perf/_record.py)")
        self.bench = bench
        self.quick = quick
        self.workload = dict(workload)
        self.command = [
            os.path.relpath(sys.argv[0], PERF.parent) if sys.argv[0] else f"perf/bench_{bench}.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
        self._started = time.perf_counter()
        self._date = datetime.date.today().isoformat()  # the run's date: the day it started
        self._load_at_start = os.getloadavg()[0]
        self._series: dict[str, tuple[Timing, str]] = {}
        self.figures: list[dict[str, Any]] = []
        self._texts: list[str] = []
        #: readings that are no timing and no figure (JSON values), saved as ``details``
        self.details: dict[str, Any] = {}

    def add_timings(self, section: str, timings: Mapping[str, Any], per: str = "item") -> None:
        """Keep the per-round values of ``timings`` (``{variant: Timing}`` or ``{variant:
        {phase: Timing}}``, ns per ``per``) as series ``<section>/<variant>[/<phase>]``."""
        for name, t in _series(timings):
            full = f"{section}/{name}"
            if full in self._series:
                raise ValueError(f"timings {full!r} added twice")
            self._series[full] = (t, per)

    def figure(
        self,
        name: str,
        value: float,
        unit: str = "",
        *,
        digits: int = 2,
        based_on: Sequence[str] = (),
    ) -> None:
        """A figure, rounded to ``digits`` decimals as its line prints it; ``based_on``: the
        timing series (``<section>/<variant>...``) it is computed from."""
        if any(f["name"] == name for f in self.figures):
            raise ValueError(f"figure {name!r} given twice")
        missing = [
            s for s in based_on if not any(k == s or k.startswith(f"{s}/") for k in self._series)
        ]
        if missing:
            raise ValueError(f"figure {name!r} is based on unknown timings {missing}")
        if not math.isfinite(value):
            raise ValueError(f"figure {name!r} is not a finite number: {value!r}")
        text = f"{value:.{digits}f}"
        entry: dict[str, Any] = {
            "name": name,
            "value": int(text) if digits == 0 else float(text),
            "unit": unit,
        }
        if based_on:
            entry["based_on"] = list(based_on)
        self.figures.append(entry)
        self._texts.append(text)

    def lines(self) -> list[str]:
        """The ``figure:`` lines, as printed (the value with its ``digits`` decimals)."""
        return [
            figure_line(f["name"], text, f["unit"])
            for f, text in zip(self.figures, self._texts, strict=True)
        ]

    def timings_suite(self, env: Mapping[str, str | int | float]) -> dict[str, Any] | None:
        """The raw timings as pyperf BenchmarkSuite JSON (None when there are none)."""
        if not self._series:
            return None
        pyperf = importlib.import_module("pyperf")
        benchmarks = []
        for name, (t, per) in self._series.items():
            values = [v * 1e-9 for v in t.values]
            if not values or min(values) <= 0:
                continue  # pyperf holds positive values only; a median alone is no raw timing
            meta = {**env, "name": name, "unit": "second", "per": per}
            run = pyperf.Run(values, metadata=meta, collect_metadata=False)
            benchmarks.append(pyperf.Benchmark([run]))
        if not benchmarks:
            return None
        buf = io.StringIO()
        pyperf.BenchmarkSuite(benchmarks).dump(buf, compact=True)
        suite: dict[str, Any] = json.loads(buf.getvalue())
        return suite

    def to_json(self) -> dict[str, Any]:
        env = environment(self._load_at_start)
        root = _txstore_root()
        short = _git(root, "rev-parse", "--short", "HEAD") if root else ""
        return {
            "schema": SCHEMA,
            "bench": self.bench,
            "size": "quick" if self.quick else "full",
            "run": {
                "date": self._date,
                "commit": short or "uncommitted",
            },
            "command": self.command,
            "seconds": round(time.perf_counter() - self._started, 1),
            "workload": self.workload,
            "environment": env,
            "figures": self.figures,
            "details": self.details,
            "timings": self.timings_suite(env),
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the record to ``path`` (through a temporary file beside it)."""
        if not self.figures:
            raise ValueError(f"{self.bench}: a record without figures")
        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(dest.name + ".tmp")
        partial.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        partial.replace(dest)
        return dest

    def finish(self, path: str | os.PathLike[str] | None) -> None:
        """Write the record to ``path`` (none if empty), then print the ``figure:`` lines,
        which end the benchmark's output."""
        if path:
            print(f"JSON record: {self.write(path)}")
        elif not self.figures:
            raise ValueError(f"{self.bench}: a record without figures")
        for line in self.lines():
            print(line)
