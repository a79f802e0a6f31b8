"""Timing helpers shared by txstore's benchmarks (``perf/bench_*.py``).

The machine the benchmarks run on is shared and its speed drifts by 30% over a run, so every
comparison here is *interleaved*: round ``r`` runs each variant once, in an order rotated by
``r``, and each variant's result is the median over the rounds. A variant is a zero-argument
callable that processes ``items`` items once; the harness repeats it enough times for one
sample to last ``target_ns`` and reports nanoseconds per item.

The garbage collector is off while a sample runs (as in :mod:`timeit`); reference counting
still frees everything the benchmarked code allocates.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Settings",
    "Timing",
    "compare",
    "compare_staged",
    "consume",
    "fmt_ns",
    "fmt_ratio",
    "table",
]


def consume(iterable: Iterable[object]) -> None:
    """Exhaust ``iterable`` at C speed, keeping nothing (``deque(it, maxlen=0)``)."""
    deque(iterable, maxlen=0)


@dataclass(frozen=True)
class Settings:
    """How long and how often to measure."""

    repeats: int  # interleaved rounds; the result is the median over them
    target_ns: int  # minimum duration of one sample
    warmup: int = 2  # untimed calls of each variant before the first round


@dataclass(frozen=True)
class Timing:
    """Nanoseconds per item of one variant, over ``samples`` interleaved rounds.

    ``values`` keeps every round's ns per item, in round order: the raw timings that the
    benchmark's JSON record saves (``_record.Record.add_timings``).
    """

    median_ns: float
    min_ns: float
    max_ns: float
    samples: int
    values: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: Sequence[float]) -> Timing:
        """The timing of these per-round values (ns per item)."""
        return cls(statistics.median(values), min(values), max(values), len(values), tuple(values))

    def scaled(self, by: float) -> Timing:
        """Every value divided by ``by`` (per-run times -> per-item times)."""
        if self.values:
            return Timing.of([v / by for v in self.values])
        return Timing(self.median_ns / by, self.min_ns / by, self.max_ns / by, self.samples)

    @property
    def spread(self) -> float:
        """``(max - min) / median``: how noisy the rounds were."""
        return (self.max_ns - self.min_ns) / self.median_ns if self.median_ns else 0.0


def _time_once(fn: Callable[[], object], loops: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(loops):
        fn()
    return time.perf_counter_ns() - t0


def compare(
    variants: Mapping[str, Callable[[], object]], items: int, settings: Settings
) -> dict[str, Timing]:
    """Time ``variants`` interleaved; return each one's ns per item (median over the rounds)."""
    names = list(variants)
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        loops: dict[str, int] = {}
        for name in names:
            fn = variants[name]
            best = min(_time_once(fn, 1) for _ in range(max(1, settings.warmup)))
            loops[name] = max(1, -(-settings.target_ns // max(best, 1)))
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(settings.repeats):
            k = r % len(names)
            order = names[k:] + names[:k]
            if r % 2:
                order.reverse()
            for name in order:
                n = loops[name]
                samples[name].append(_time_once(variants[name], n) / (n * items))
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: Timing.of(s) for name, s in samples.items()}


def compare_staged(
    variants: Mapping[str, Callable[[], Mapping[str, int]]],
    items: int,
    rounds: int,
    warmup: int = 1,
) -> dict[str, dict[str, Timing]]:
    """Time variants that need untimed set-up and tear-down around each run.

    Each variant is called once per round (interleaved and rotated as in :func:`compare`) and
    times itself: it returns nanoseconds per *phase* (e.g. ``{"put": ..., "commit": ...}``),
    measured around its own timed part only. The result maps each variant to its phases, each
    a :class:`Timing` in ns per item (median over the rounds); a ``"total"`` phase (the sum of
    the phases) is added when the variant does not return one. ``warmup`` untimed calls of
    each variant run first. The garbage collector is off during the calls and a full
    collection runs, untimed, before each one.
    """
    names = list(variants)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(warmup):
            for name in names:
                gc.collect()
                variants[name]()
        for r in range(rounds):
            k = r % len(names)
            order = names[k:] + names[:k]
            if r % 2:
                order.reverse()
            for name in order:
                gc.collect()
                phases = dict(variants[name]())
                phases.setdefault("total", sum(phases.values()))
                for phase, ns in phases.items():
                    samples[name].setdefault(phase, []).append(ns / items)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        name: {phase: Timing.of(s) for phase, s in phases.items()}
        for name, phases in samples.items()
    }


def fmt_ns(value: float | None) -> str:
    """A per-item time for a table cell (``-`` when there is none)."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_ratio(value: float | None) -> str:
    """A ratio for a table cell (``-`` when there is none)."""
    if value is None:
        return "-"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Plain-text table: first column left-aligned, the others right-aligned."""
    all_rows = [list(header), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(all_rows[0]), rule, *(line(r) for r in all_rows[1:])])
