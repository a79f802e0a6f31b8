"""The kill plan: which crash each writer incarnation gets, a pure function of the seed.

A :class:`Step` is either a random-moment kill (the driver sends ``SIGKILL`` after a random
delay while the writer processes) or a fault point armed for its ``nth`` hit
(``TXSTORE_FAULTS=point=nth`` in the writer's environment: the writer kills itself exactly
there). Every reachable fault point gets at least one step when there are enough kills; the
rest are random kills (``random_fraction`` of them) and fault points drawn at random.

A crash *during restore* needs something to restore: ``task.restore_batch`` is always planned
right after a step that leaves the stores behind their changelogs (``task.after_changelog_commit``
or ``partition.mid_commit``). ``segments.drop`` is reachable only when a store of the workload
drops segments.

>>> plan = make_plan(seed=1, kills=12, points=sorted(FAULT_POINTS))
>>> len(plan), {s.point for s in plan} >= set(FAULT_POINTS) - {"segments.drop"}
(12, True)
>>> make_plan(seed=1, kills=12, points=sorted(FAULT_POINTS)) == plan
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from txstore.faults import POINTS

__all__ = ["FAULT_POINTS", "RANDOM", "Step", "make_plan", "reachable_points"]

#: The label of random-moment kills in plans and reports.
RANDOM = "random"

#: Fault points and the range of ``nth`` drawn for each: how many hits pass before the kill.
#: Hits per task commit: one for the task points and ``partition.mid_commit``; one per store
#: for ``changelog.after_append``; stores - 1 for ``task.between_changelog_commits``.
FAULT_POINTS: dict[str, tuple[int, int]] = {
    "task.before_changelog_commit": (1, 6),
    "changelog.after_append": (1, 12),
    "task.between_changelog_commits": (1, 8),
    "task.after_changelog_commit": (1, 6),
    "partition.mid_commit": (1, 6),
    "task.after_store_commit": (1, 6),
    "overlay.spill": (1, 4),
    "task.restore_batch": (1, 3),
    "segments.drop": (1, 2),
}
assert set(FAULT_POINTS) == set(POINTS), "a fault point of txstore.faults is not planned here"

#: Points after which the stores are behind their changelogs (the next start restores).
_LEAVE_RESTORE = ("task.after_changelog_commit", "partition.mid_commit")


@dataclass(frozen=True)
class Step:
    """One writer incarnation's crash: ``point`` (a fault point, or :data:`RANDOM`), the hit
    it fires at (``nth``), or the delay of a random kill (seconds after processing starts)."""

    index: int
    point: str
    nth: int = 0
    delay: float = 0.0

    @property
    def random(self) -> bool:
        return self.point == RANDOM

    @property
    def faults_env(self) -> str:
        """The ``TXSTORE_FAULTS`` value of the step ('' for a random kill)."""
        return "" if self.random else f"{self.point}={self.nth}"

    def describe(self) -> str:
        if self.random:
            return f"random kill {self.delay * 1000:.0f} ms into processing"
        return f"{self.point}={self.nth}"


def reachable_points(segmented: bool) -> list[str]:
    """The fault points a workload can reach (``segments.drop`` needs segmented stores)."""
    return sorted(p for p in FAULT_POINTS if segmented or p != "segments.drop")


def make_plan(
    seed: int,
    kills: int,
    points: list[str],
    *,
    random_fraction: float = 0.4,
    max_delay: float = 0.4,
) -> list[Step]:
    """``kills`` steps for ``seed`` (see the module docstring)."""
    unknown = set(points) - set(FAULT_POINTS)
    if unknown:
        raise ValueError(f"unknown fault points {sorted(unknown)}; known: {sorted(FAULT_POINTS)}")
    rng = random.Random(f"txstore-crashtest-plan-{seed}")
    ordinary = [p for p in points if p != "task.restore_batch"]
    restore = "task.restore_batch" in points
    # Units of one or two steps; a restore_batch crash follows one that leaves a restore.
    units: list[list[str]] = [[p] for p in ordinary]
    if restore:
        units.append([rng.choice(_LEAVE_RESTORE), "task.restore_batch"])
    rng.shuffle(units)
    chosen: list[str] = []
    for unit in units:
        if len(chosen) + len(unit) <= kills:
            chosen += unit
    while len(chosen) < kills:
        if not points or rng.random() < random_fraction:
            chosen.append(RANDOM)
        elif restore and len(chosen) + 2 <= kills and rng.random() < 1 / max(len(points), 1):
            chosen += [rng.choice(_LEAVE_RESTORE), "task.restore_batch"]
        else:
            chosen.append(rng.choice(ordinary or [RANDOM]))
    # Spread the mandatory points through the run, keeping restore pairs together.
    units = []
    for p in chosen:
        if p == "task.restore_batch" and units:
            units[-1].append(p)
        else:
            units.append([p])
    rng.shuffle(units)
    steps: list[Step] = []
    for p in (p for unit in units for p in unit):
        if p == RANDOM:
            steps.append(Step(len(steps), p, delay=round(rng.uniform(0.0, max_delay), 4)))
        else:
            lo, hi = FAULT_POINTS[p]
            steps.append(Step(len(steps), p, nth=rng.randint(lo, hi)))
    return steps
