"""The damage section of a crash-test report: counts per class, per file type and per kind of
damage, the first non-exact trials, the JSON and the ``figure:`` lines.

>>> damage_figures([])[0], damage_ok([])
('figure: damage_trials = 0', True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from txstore.crashtest.damage import ALL_KINDS, FILE_TYPES
from txstore.crashtest.damage_pass import CLASSES, DamageTrial

__all__ = [
    "EXAMPLES",
    "damage_counts",
    "damage_figures",
    "damage_json",
    "damage_lines",
    "damage_ok",
    "progress_text",
]

#: Trials shown per kind of finding in the summary (every one is in the JSON report).
EXAMPLES = 3

_SHORT = {
    "exact": "exact",
    "refused": "ref",
    "silent_divergence": "DIV",
    "signal": "SIG",
    "untyped": "untyped",
}


def damage_counts(trials: Sequence[DamageTrial]) -> dict[str, int]:
    """Trials per class, and ``healthy_store_changed``."""
    out = dict.fromkeys(CLASSES, 0)
    for t in trials:
        out[t.outcome] += 1
    out["healthy_store_changed"] = sum(1 for t in trials if t.healthy_changed)
    return out


def damage_ok(trials: Sequence[DamageTrial]) -> bool:
    """No silent divergence, no signal, no healthy store changed (the issue's target)."""
    c = damage_counts(trials)
    return c["silent_divergence"] == c["signal"] == c["healthy_store_changed"] == 0


def progress_text(trials: Sequence[DamageTrial]) -> str:
    """A short text for the progress bar."""
    c = damage_counts(trials)
    parts = [f"{c[k]} {_SHORT[k]}" for k in CLASSES if c[k] or k == "exact"]
    if c["healthy_store_changed"]:
        parts.append(f"{c['healthy_store_changed']} HEALTHY")
    return f"damage {len(trials)}: " + " ".join(parts)


def _table(
    trials: Sequence[DamageTrial], title: str, columns: Sequence[str], attr: str
) -> list[str]:
    cols = [c for c in columns if any(getattr(t.damage, attr) == c for t in trials)]
    widths = [max(len(c), 5) for c in cols]
    head = f"  {title:<22}" + "".join(f" {c:>{w}}" for c, w in zip(cols, widths, strict=True))
    out = [head + f" {'total':>6}"]
    rows: list[tuple[str, list[DamageTrial]]] = [
        (k, [t for t in trials if t.outcome == k]) for k in CLASSES
    ]
    rows.append(("healthy store changed", [t for t in trials if t.healthy_changed]))
    rows.append(("trials", list(trials)))
    for label, group in rows:
        cells = "".join(
            f" {sum(1 for t in group if getattr(t.damage, attr) == c):>{w}}"
            for c, w in zip(cols, widths, strict=True)
        )
        out.append(f"  {label:<22}{cells} {len(group):>6}")
    return out


def describe_trial(t: DamageTrial) -> list[str]:
    """A few lines on one trial: the damage, what the reopen did, what changed."""
    out = [f"  trial {t.index} (after kill {t.kill}, {t.after}): {t.damage.describe()}"]
    if t.outcome == "signal":
        out.append(f"    -> signal {t.signal} during {t.phase}")
    elif t.outcome == "silent_divergence":
        out.append(f"    -> reopened at input position {t.position} (committed: "
                   f"{t.expected_position}) and differs from the model: {t.note}")  # fmt: skip
        out += [f"       {f}" for f in t.findings[:3]]
    elif t.error is not None:
        note = f" [{t.note}]" if t.note else ""
        out.append(f"    -> {t.outcome}: {t.error_type or 'error'}: {_short(t.error)}{note}")
    else:
        out.append(f"    -> {t.outcome}")
    out += [f"    healthy store changed: {h}" for h in t.healthy_changed[:3]]
    if t.kept:
        out.append(f"    damaged copy kept: {t.kept}")
    return out


def _short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def damage_lines(trials: Sequence[DamageTrial]) -> list[str]:
    """The damage section of the summary."""
    out = [
        f"damage: {len(trials)} trials (after a kill, one file of a copy of the partition "
        "damaged, then reopened in a child process)"
    ]
    if not trials:
        return out
    out += _table(trials, "class / file type", FILE_TYPES, "file_type")
    out += _table(trials, "class / damage", ALL_KINDS, "kind")
    shown: set[int] = set()
    for label, group in _groups(trials):
        fresh = [t for t in group if t.index not in shown][:EXAMPLES]
        if not fresh:
            continue
        out.append(f"{label}: {len(group)} trials; the first {len(fresh)}:")
        for t in fresh:
            shown.add(t.index)
            out += describe_trial(t)
    return out


def _groups(trials: Sequence[DamageTrial]) -> list[tuple[str, list[DamageTrial]]]:
    """The findings, worst first."""
    return [
        ("silent divergence", [t for t in trials if t.outcome == "silent_divergence"]),
        ("died by a signal", [t for t in trials if t.outcome == "signal"]),
        ("healthy store changed", [t for t in trials if t.healthy_changed]),
        ("untyped", [t for t in trials if t.outcome == "untyped"]),
        ("refused", [t for t in trials if t.outcome == "refused"]),
    ]


def damage_json(trials: Sequence[DamageTrial]) -> dict[str, Any]:
    by_type: dict[str, dict[str, int]] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for t in trials:
        for table, key in ((by_type, t.damage.file_type), (by_kind, t.damage.kind)):
            row = table.setdefault(key, dict.fromkeys(CLASSES, 0))
            row[t.outcome] += 1
    return {
        "totals": damage_counts(trials),
        "by_file_type": by_type,
        "by_kind": by_kind,
        "ok": damage_ok(trials),
        "trials": [t.to_json() for t in trials],
    }


def damage_figures(trials: Sequence[DamageTrial]) -> list[str]:
    c = damage_counts(trials)
    return [
        f"figure: damage_trials = {len(trials)}",
        f"figure: damage_exact = {c['exact']}",
        f"figure: damage_refused = {c['refused']}",
        f"figure: damage_untyped = {c['untyped']}",
        f"figure: damage_silent_divergence = {c['silent_divergence']}",
        f"figure: damage_signals = {c['signal']}",
        f"figure: damage_healthy_store_changed = {c['healthy_store_changed']}",
    ]
