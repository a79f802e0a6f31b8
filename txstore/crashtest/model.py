"""The independent model and the check of a store state against it.

:class:`Model` holds what every store must contain at input position ``n``: the workload
applied to input records ``0 .. n-1`` on plain dictionaries, never through a store. It only
moves forward (as committed positions do), incrementally; going back rebuilds it from 0.

:func:`compare_store` classifies every difference between a store and the model:

* **lost**: committed data the store does not hold: a key the model has and the store does
  not, or a value older than the model's (lower :meth:`~txstore.crashtest.specs.StoreSpec.order`),
  or a key the committed input deleted that the store still holds with an older value;
* **leaked**: data the committed input did not write: a key the committed input never wrote,
  or a value newer than the model's (it can only come from input after the committed position).

:func:`check_position` does the same for the input position itself: a recovered position
below the last one the writer acknowledged lost those records; one past the next commit point
(or not a commit point at all) shows uncommitted progress.

>>> from txstore.crashtest.workload import StandardWorkload
>>> w = StandardWorkload(seed=1, keys=4, segmented=False)
>>> m = Model(w)
>>> m.advance(10)
>>> actual = {name: store.live() for name, store in m.stores.items()}
>>> check = Check()
>>> for spec in w.stores():
...     compare_store(spec, actual[spec.name], m.stores[spec.name], check)
>>> check.ok, check.checked > 0
(True, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from txstore.crashtest.specs import StoreModel, StoreSpec
from txstore.crashtest.workload import Workload

__all__ = ["MAX_FINDINGS", "Check", "Finding", "Model", "check_position", "compare_store"]

#: Findings kept per check (the counts go on).
MAX_FINDINGS = 20


class Model:
    """The expected content of every store of ``workload`` at :attr:`position`."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.specs = workload.stores()
        self.position = 0
        self.stores: dict[str, StoreModel] = {s.name: StoreModel() for s in self.specs}

    def reset(self) -> None:
        self.position = 0
        self.stores = {s.name: StoreModel() for s in self.specs}

    def advance(self, position: int) -> None:
        """Move to ``position``: O(records applied); backwards rebuilds from 0."""
        if position < self.position:
            self.reset()
        apply, record = self.workload.apply, self.workload.record
        for i in range(self.position, position):
            apply(self.stores, record(i))
        self.position = position


@dataclass(frozen=True)
class Finding:
    """One difference between a store and the model."""

    kind: str  # "lost" or "leaked"
    store: str
    key: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return (
            f"{self.kind}: {self.store}[{self.key}]: expected {self.expected}, found {self.actual}"
        )


@dataclass
class Check:
    """Counts of a check (entries compared, lost, leaked) and the first findings."""

    checked: int = 0
    lost: int = 0
    leaked: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.leaked == 0

    def add(self, kind: str, store: str, key: Any, expected: str, actual: str) -> None:
        if kind == "lost":
            self.lost += 1
        else:
            self.leaked += 1
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(Finding(kind, store, _short(key), expected, actual))

    def merge(self, other: Check) -> None:
        self.checked += other.checked
        self.lost += other.lost
        self.leaked += other.leaked
        room = MAX_FINDINGS - len(self.findings)
        self.findings.extend(other.findings[: max(room, 0)])


def _short(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def compare_store(
    spec: StoreSpec, actual: Mapping[Any, Any], model: StoreModel, check: Check
) -> None:
    """Compare the full content ``actual`` of store ``spec`` with ``model``, adding to
    ``check``. O(entries)."""
    entries = model.entries
    name = spec.name
    for key, value in actual.items():
        check.checked += 1
        e = entries.get(key)
        if e is not None and e.value == value:
            continue
        if e is None:
            check.add("leaked", name, key, "absent (never written by committed input)",
                      spec.describe(value))  # fmt: skip
            continue
        kind = "leaked" if spec.order(value) > e.order else "lost"
        expected = "deleted" if e.value is None else spec.describe(e.value)
        check.add(kind, name, key, expected, spec.describe(value))
    for key, e in entries.items():
        if e.value is not None and key not in actual:
            check.checked += 1
            check.add("lost", name, key, spec.describe(e.value), "absent")


def check_position(workload: Workload, position: int, acked: int, check: Check) -> None:
    """Check a recovered input ``position`` against the last position the writer
    acknowledged (``acked``): it must be ``acked`` or the next commit point after it (a commit
    that completed before its acknowledgement was read)."""
    check.checked += 1
    if position < acked:
        # Input records acknowledged as committed and not covered by the recovered position.
        check.lost += acked - position
        if len(check.findings) < MAX_FINDINGS:
            check.findings.append(
                Finding("lost", "input", "position", f">= {acked} (acknowledged)", str(position))
            )
    elif position > workload.next_commit(acked) or not workload.is_commit_position(position):
        check.leaked += 1
        check.findings.append(
            Finding(
                "leaked",
                "input",
                "position",
                f"{acked} or {workload.next_commit(acked)}",
                str(position),
            )
        )
