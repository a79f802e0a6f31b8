"""Results of a crash-test run: the records, the summary table, the figures, the JSON report
and the progress bar.

>>> percentile([5.0, 1.0, 3.0], 50), percentile([], 99)
(3.0, 0.0)
>>> size_label(1_000_000), size_label(10_000), size_label(1234)
('1m', '10k', '1234')
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from txstore.crashtest.damage_pass import DamageTrial
from txstore.crashtest.damage_report import (
    damage_figures,
    damage_json,
    damage_lines,
    damage_ok,
)
from txstore.crashtest.plan import RANDOM

#: Recovery labels that do not follow a kill: the first start, and the final rebuild of every
#: store from its changelog.
_NOT_AFTER_KILL = ("start", "wipe-restore")

__all__ = [
    "CrashtestReport",
    "KillRecord",
    "Progress",
    "RecoveryRecord",
    "WipeResult",
    "percentile",
    "size_label",
]


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def size_label(n: int) -> str:
    """``1m``, ``100k``... for state sizes."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


@dataclass
class KillRecord:
    """One writer incarnation's end. ``point`` is where it died: the fault point that fired,
    or ``random`` (killed by the driver: a random-moment kill, or an armed point that was not
    reached in time, then ``planned`` names it); ``phase`` is ``recovery`` or ``processing``."""

    index: int
    point: str
    planned: str
    phase: str
    start_position: int | None
    acked: int
    seconds: float


@dataclass
class RecoveryRecord:
    """One recovery and its check. ``after`` is the crash point of the kill before it (or
    ``start`` for the first writer on an empty directory)."""

    after: str
    position: int
    ms: float
    restored: int
    rolled_back: int
    discarded: bool
    checked: int
    lost: int
    leaked: int


@dataclass
class WipeResult:
    """Recovery after a crash versus Kafka's EOS baseline (wipe the store, replay the whole
    changelog) at one state size; times are medians over ``repeats``, in milliseconds."""

    keys: int
    recover_ms: float
    wipe_ms: float
    recover_restored: int
    wipe_restored: int
    repeats: int
    changelog_bytes: int = 0

    @property
    def ratio(self) -> float:
        return self.wipe_ms / self.recover_ms if self.recover_ms > 0 else math.inf


@dataclass
class CrashtestReport:
    """Everything a run found; :attr:`ok` says whether it passed."""

    config: dict[str, Any]
    stores: list[dict[str, Any]] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    kills: list[KillRecord] = field(default_factory=list)
    recoveries: list[RecoveryRecord] = field(default_factory=list)
    reader: dict[str, Any] | None = None
    wipe: list[WipeResult] = field(default_factory=list)
    failure: dict[str, Any] | None = None
    seconds: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    damage: list[DamageTrial] = field(default_factory=list)

    # ---- totals ---------------------------------------------------------------------------

    @property
    def lost(self) -> int:
        reader = int(self.reader.get("lost", 0)) if self.reader else 0
        return sum(r.lost for r in self.recoveries) + reader

    @property
    def leaked(self) -> int:
        reader = int(self.reader.get("leaked", 0)) if self.reader else 0
        return sum(r.leaked for r in self.recoveries) + reader

    @property
    def ok(self) -> bool:
        return self.failure is None and self.lost == 0 and self.leaked == 0 and self.damage_ok

    @property
    def damaging(self) -> bool:
        """Whether the run made damage trials (``--damage``)."""
        return bool(self.config.get("damage"))

    @property
    def damage_ok(self) -> bool:
        """No damage trial diverged silently, died by a signal or changed a healthy store."""
        return damage_ok(self.damage)

    @property
    def records_verified(self) -> int:
        return sum(r.checked for r in self.recoveries)

    def points_hit(self) -> dict[str, int]:
        """Kills per crash point (where the writer actually died)."""
        out: dict[str, int] = {}
        for k in self.kills:
            out[k.point] = out.get(k.point, 0) + 1
        return out

    def recovery_ms(self, after: str | None = None) -> list[float]:
        """Recovery times after kills (``after``: only after that crash point)."""
        return [r.ms for r in self.after_kills() if after in (None, r.after)]

    def after_kills(self) -> list[RecoveryRecord]:
        """The recoveries that followed a kill."""
        return [r for r in self.recoveries if r.after not in _NOT_AFTER_KILL]

    # ---- output ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        ms = self.recovery_ms()
        return {
            "ok": self.ok,
            "config": self.config,
            "stores": self.stores,
            "unreachable": self.unreachable,
            "totals": {
                "kills": len(self.kills),
                "recoveries": len(self.after_kills()),
                "records_verified": self.records_verified,
                "lost": self.lost,
                "leaked": self.leaked,
                "kills_per_point": self.points_hit(),
                "recovery_ms": {
                    p: percentile(ms, q) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))
                }
                | {"max": max(ms, default=0.0)},
            },
            "kills": [asdict(k) for k in self.kills],
            "recoveries": [asdict(r) for r in self.recoveries],
            "reader": self.reader,
            "recovery_vs_wipe": [asdict(w) | {"ratio": w.ratio} for w in self.wipe],
            "damage": damage_json(self.damage) if self.damaging else None,
            "failure": self.failure,
            "seconds": self.seconds,
            "figures": self.figures(),
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")

    def figures(self) -> list[str]:
        """The closing ``figure:`` lines."""
        p99 = percentile(self.recovery_ms(), 99)
        lines = [
            f"figure: crashtest_kills = {len(self.kills)}",
            f"figure: crashtest_lost = {self.lost}",
            f"figure: crashtest_leaked = {self.leaked}",
            f"figure: recovery_ms_p99 = {p99:.1f} ms",
        ]
        at_1m = [w for w in self.wipe if w.keys == 1_000_000]
        if at_1m:
            lines.append(f"figure: recovery_vs_wipe_at_1m = {at_1m[0].ratio:.1f} x")
        elif self.wipe:
            largest = max(self.wipe, key=lambda w: w.keys)
            label = size_label(largest.keys)
            lines.append(
                "figure: recovery_vs_wipe_at_1m = not measured in this run "
                f"(largest state measured: {label} keys; --wipe-sizes 10k,100k,1m measures it)"
            )
            lines.append(f"figure: recovery_vs_wipe_at_{label} = {largest.ratio:.1f} x")
        else:
            lines.append(
                "figure: recovery_vs_wipe_at_1m = not measured in this run "
                "(--wipe-sizes 10k,100k,1m measures it)"
            )
        if self.damaging:
            lines += damage_figures(self.damage)
        return lines

    def summary(self) -> str:
        """The summary table, ending with the figures."""
        out: list[str] = []
        cfg = self.config
        names = ", ".join(s["name"] for s in self.stores)
        out.append(
            f"txstore crashtest: seed {cfg.get('seed')}, {len(self.kills)} kills, "
            f"stores {names}; {self.seconds:.1f} s"
        )
        header = (
            f"{'crash point':<31} {'kills':>5} {'in recovery':>11} {'recovered':>9} {'lost':>4}"
            f" {'leaked':>6} {'recovery p50':>12} {'p99':>9}"
        )
        out += [header, "-" * len(header)]
        hit = self.points_hit()
        planned = sorted({k.planned for k in self.kills if k.planned != RANDOM} | set(hit))
        rows: list[tuple[str, list[KillRecord], list[RecoveryRecord]]] = [
            (
                p,
                [k for k in self.kills if k.point == p],
                [r for r in self.recoveries if r.after == p],
            )
            for p in [RANDOM] + [p for p in planned if p != RANDOM]
        ]
        rows.append(("-", [], []))
        rows.append(("total", self.kills, self.after_kills()))
        for point, kills, recs in rows:
            if point == "-":
                out.append("-" * len(header))
                continue
            ms = [r.ms for r in recs]
            in_recovery = sum(1 for k in kills if k.phase == "recovery")
            out.append(
                f"{point:<31} {len(kills):>5} {in_recovery:>11} {len(recs):>9} "
                f"{sum(r.lost for r in recs):>4} {sum(r.leaked for r in recs):>6}"
                f" {percentile(ms, 50):>9.1f} ms {percentile(ms, 99):>6.1f} ms"
            )
        missed = [k for k in self.kills if k.planned != k.point]
        if missed:
            text = ", ".join(sorted({k.planned for k in missed}))
            out.append(f"armed but not reached (killed at random instead): {text}")
        for point, why in sorted(self.unreachable.items()):
            out.append(f"not reachable with this workload: {point} ({why})")
        out.append(
            f"records verified after recoveries: {self.records_verified:,} "
            f"(store entries and offsets, against the model)"
        )
        for rec in self.recoveries:
            if rec.after == "wipe-restore":
                out.append(
                    f"changelogs: every store wiped and rebuilt from its changelog alone "
                    f"({rec.restored:,} records in {rec.ms:.0f} ms): "
                    f"lost {rec.lost}, leaked {rec.leaked}"
                )
        if self.reader:
            r = self.reader
            out.append(
                f"reader: {r.get('checked_states', 0):,} whole committed states checked "
                f"({r.get('entries', 0):,} entries, up to position {r.get('max_position', 0):,})"
                f": lost {r.get('lost', 0)}, leaked {r.get('leaked', 0)}"
            )
            out.append(
                f"reader: {r.get('torn', 0)} reads retried (a commit landed meanwhile); "
                f"{r.get('in_recovery', 0)} reads during recovery, "
                f"{r.get('mixed_in_recovery', 0)} of them a mix of two commits (not a failure: "
                "restore commits store by store)"
            )
        out.append(
            "recovery time (writer: open + recover + restore): "
            + "  ".join(f"p{q} {percentile(ms, q):.1f} ms" for q in (50, 90, 99))
            + f"  max {max(ms, default=0.0):.1f} ms"
        )
        out.append(f"lost = {self.lost}, leaked = {self.leaked}")
        if self.wipe:
            out.append("recovery after a crash vs wipe and replay (Kafka EOS without KIP-892):")
            out.append(f"  {'keys':>6} {'recovery':>11} {'wipe+replay':>12} {'ratio':>9}")
            for w in self.wipe:
                out.append(
                    f"  {size_label(w.keys):>6} {w.recover_ms:>8.1f} ms {w.wipe_ms:>9.1f} ms "
                    f"{w.ratio:>7.1f} x"
                )
        if self.damaging:
            out += damage_lines(self.damage)
        for what, path in self.files.items():
            out.append(f"{what}: {path}")
        out += self.failure_lines()
        return "\n".join(out + self.figures())

    def failure_lines(self) -> list[str]:
        """What failed, where, and the command that replays it (empty when passing)."""
        f = self.failure
        if not f:
            return []
        out = [f"FAILED: {f.get('message')}"]
        findings = list(f.get("findings", []))
        out += [f"  {line}" for line in findings[:8]]
        if len(findings) > 8:
            out.append(f"  ... {len(findings) - 8} more in the JSON report")
        out.append(
            f"  seed {f.get('seed')}; crash point {f.get('crash_point')} "
            f"(planned {f.get('planned')})"
        )
        out.append(f"  state directory kept: {f.get('state_directory')}")
        out.append(f"  replay: {f.get('replay')}")
        return out


class Progress:
    """A progress bar on a terminal (redrawn in place), or a line per tenth otherwise."""

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self._tenth = -1

    def update(self, done: int, text: str = "") -> None:
        if not self.enabled:
            return
        frac = min(done / self.total, 1.0)
        if self.tty:
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r[{bar:<30}] {done}/{self.total} {text[:60]:<60}")
            self.stream.flush()
        elif int(frac * 10) > self._tenth:
            self._tenth = int(frac * 10)
            self.stream.write(f"crashtest: {done}/{self.total} kills {text}\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        if self.enabled:
            self.stream.write(("\n" if self.tty else "") + f"crashtest: {text}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
