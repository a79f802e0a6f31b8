"""``txstore crashtest --damage N``: after a kill, damage one file of a copy of the partition,
reopen the copy in a child process and classify what recovery did.

**A trial.** Right after a kill (before the next writer starts) the driver copies the crashed
partition (lock files left out), damages one file of the copy (:mod:`txstore.crashtest.damage`,
seeded: ``random.Random(f"{seed}:damage:{trial}")``) and keeps a second copy of the damaged
state. The writer then goes on with the original. Once the next writer has recovered the
original and the driver has checked it (so the committed input position ``P`` of the crash is
known and the model is at ``P``), the trial runs: a child process
(:mod:`txstore.crashtest.damage_child`) opens a fresh task on the damaged copy, initializes it
and reads every store. A kill during recovery leaves its trial pending until the next checked
recovery (restoring commits no input, so ``P`` is the same).

**Classes** (exactly one per trial, :data:`CLASSES`):

* ``exact``: the reopen succeeded and the input position is ``P`` and every store equals the
  model at ``P``;
* ``refused``: a :class:`~txstore.errors.TxStoreError` whose message names the damaged file
  (its path, relative or absolute) or the store whose file it is (its changelog directory, or
  the name quoted); for ``data.mdb``, the LMDB environment (``data.mdb`` or its directory);
* ``silent_divergence``: the reopen succeeded but the position or a store differs from the
  model at ``P``;
* ``signal``: the child died by a signal (``SIGBUS``, ``SIGSEGV``...);
* ``untyped``: any other exception, a ``TxStoreError`` that names neither the file nor its
  store (:attr:`DamageTrial.note` says so), or no answer within the timeout.

**Healthy stores unchanged** (:attr:`DamageTrial.healthy_changed`, a flag besides the class).
The healthy stores are every store but the one whose changelog file was damaged (all of them
when ``data.mdb`` or a spill file was). Recovery after a crash legitimately writes to every
store: it truncates torn changelog tails, rolls back changelogs that got ahead of the task's
last complete commit, deletes compaction leftovers, and restores each store's LMDB data. So
the rule is: after the reopen (success or refusal), each healthy store's files are either
**as they were** before the reopen, or **as the recovery of the undamaged partition left
them**, file by file:

* each file of a healthy store's changelog directory (SHA-256 before and after the reopen;
  the reference is the same file of the original partition, which the next writer has just
  recovered and which does not change while the trial runs);
* each healthy store's committed LMDB content and offset (read read-only in the child before
  and after the reopen; the reference is the model at ``P`` and the offset the driver read
  from the recovered original), unless the damaged file is ``data.mdb`` itself. A child that
  died by a signal or timed out has no "after" read: only the changelog files are checked.

The damaged copies of the first :data:`KEEP_EXAMPLES` trials of each non-exact class are kept
in ``<workdir>/damage/trial-NNNN.damaged`` (as damaged, before the reopen).
"""

from __future__ import annotations

import pickle
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from txstore.crashtest.common import POSITION_KEY, POSITION_STORE, RunConfig
from txstore.crashtest.damage import (
    Damage,
    apply_damage,
    damage_targets,
    hash_files,
    live_entries,
    plan_damage,
    store_files,
)
from txstore.crashtest.model import Check, Model, compare_store
from txstore.crashtest.procs import Child
from txstore.crashtest.workload import Workload

__all__ = ["CLASSES", "KEEP_EXAMPLES", "DamagePass", "DamageTrial", "names_damage"]

#: The classes of a trial, in report order.
CLASSES = ("exact", "refused", "silent_divergence", "signal", "untyped")
#: Damaged copies kept per non-exact class.
KEEP_EXAMPLES = 3
#: Seconds a trial's child may take.
TRIAL_TIMEOUT = 120.0

_LOCKS = shutil.ignore_patterns("writer.lock", "lock.mdb")


@dataclass
class DamageTrial:
    """One damage trial and its outcome (see the module docstring)."""

    index: int
    kill: int  # the kill after which the partition was copied
    after: str  # that kill's crash point
    damage: Damage
    outcome: str = ""
    expected_position: int = 0
    position: int | None = None  # the reopened task's, when it opened
    error_type: str | None = None
    error: str | None = None
    signal: str | None = None
    phase: str | None = None  # the child's phase when it died or raised
    note: str = ""
    findings: list[str] = field(default_factory=list)
    healthy_changed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    kept: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Pending:
    trial: DamageTrial
    copy: Path
    run_json: Path
    healthy: list[str]  # stores whose changelog files must not change
    lmdb_healthy: list[str]  # stores whose LMDB content must not change
    hashes: dict[str, str | None]


def names_damage(message: str, damage: Damage, copy: Path) -> bool:
    """Whether ``message`` names the damaged file or the store whose file it is."""
    file = copy / damage.file
    if damage.file in message or str(file) in message:
        return True
    if damage.store is not None:
        store_dir = copy / "changelog" / damage.store
        quoted = re.search(rf"""['"`]{re.escape(damage.store)}['"`]""", message)
        return str(store_dir) in message or quoted is not None
    if damage.file_type == "data.mdb":
        return "data.mdb" in message or str(file.parent) in message
    return "spill" in message


class DamagePass:
    """The damage trials of one run (driven by :class:`~txstore.crashtest.driver.Driver`)."""

    def __init__(
        self,
        trials: int,
        seed: int,
        workdir: Path,
        run_config: RunConfig,
        workload: Workload,
        timeout: float = TRIAL_TIMEOUT,
    ) -> None:
        self.wanted = trials
        self.seed = seed
        self.dir = workdir / "damage"
        self.run_config = run_config
        self.workload = workload
        self.timeout = timeout
        self.stores = [s.name for s in workload.stores()] + [POSITION_STORE]
        #: In-memory stores have no LMDB content: only their changelogs are checked as healthy.
        self.in_memory = {s.name for s in workload.stores() if s.in_memory}
        self.pending: list[_Pending] = []
        self.trials: list[DamageTrial] = []
        self.kept: dict[str, int] = {}
        #: The module the trial's child runs (tests substitute one).
        self.child_module = "txstore.crashtest.damage_child"

    @property
    def started(self) -> int:
        return len(self.trials) + len(self.pending)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CLASSES, 0)
        for t in self.trials:
            out[t.outcome] += 1
        return out

    # ---- after a kill: copy and damage --------------------------------------------------

    def after_kill(self, kill: int, point: str) -> None:
        """Copy the crashed partition and damage the copy (if trials remain)."""
        if self.started >= self.wanted:
            return
        index = self.started
        base = self.dir / f"trial-{index:04d}"
        copy = base / "task"
        shutil.copytree(self.run_config.path, copy, ignore=_LOCKS)
        targets = damage_targets(copy)
        sizes = {t.file: (copy / t.file).stat().st_size for t in targets}
        entries = live_entries(copy)
        data = (copy / "data" / "data.mdb").read_bytes() if entries else b""
        damage = plan_damage(
            random.Random(f"{self.seed}:damage:{index}"), targets, sizes, entries, data
        )
        apply_damage(copy, damage)
        shutil.copytree(copy, base.with_name(base.name + ".damaged") / "task")
        healthy = [s for s in self.stores if s != damage.store]
        run_json = base / "run.json"
        # No fsync on a throwaway copy: the trial crashes nothing, and fsync is most of its time.
        replace(self.run_config, path=str(copy), sync=False).save(run_json)
        self.pending.append(
            _Pending(
                DamageTrial(index, kill, point, damage),
                copy,
                run_json,
                healthy,
                []
                if damage.file_type == "data.mdb"
                else [s for s in healthy if s not in self.in_memory],
                hash_files(copy, store_files(copy, healthy)),
            )
        )

    # ---- after the next checked recovery: reopen and classify ----------------------------

    def run_pending(
        self,
        position: int,
        model: Model,
        offsets: dict[str, int | None],
        say: Callable[[DamageTrial], None] | None = None,
    ) -> None:
        """Run every pending trial against the committed position ``position`` (``model``
        is there; ``offsets``: the recovered original's committed offset per store)."""
        pending, self.pending = self.pending, []
        for p in pending:
            started = time.perf_counter()
            self._run(p, position, model, offsets)
            p.trial.seconds = time.perf_counter() - started
            self._finish(p)
            self.trials.append(p.trial)
            if say is not None:
                say(p.trial)

    def _run(
        self, p: _Pending, position: int, model: Model, offsets: dict[str, int | None]
    ) -> None:
        t = p.trial
        t.expected_position = position
        out = p.copy.parent / "result.pickle"
        child = Child(
            self.child_module,
            [str(p.run_json), str(out), *p.lmdb_healthy],
            p.copy.parent / "child.stderr",
        )
        if not child.wait_for_exit(self.timeout):
            child.kill()
        rc = child.wait()
        phases = [e["phase"] for e in child.drain() if e.get("ev") == "phase"]
        last_phase = phases[-1] if phases else "start"
        self._check_files(p)
        if child.killed or rc != 0:
            t.phase = last_phase
        if child.killed:
            t.outcome = "untyped"
            t.error = f"no answer within {self.timeout:.0f} s (killed)"
            return
        if rc < 0:
            t.outcome = "signal"
            t.signal = _signal_name(-rc)
            t.error = child.stderr_tail(3) or None
            return
        if rc != 0 or not out.exists():
            t.outcome = "untyped"
            t.error = f"child exited with status {rc}: {child.stderr_tail(5)}"
            return
        with open(out, "rb") as f:
            result = pickle.load(f)  # written by our own child process
        outcome = result["outcome"]
        if outcome.get("rebuilt"):
            t.note = f"healed: the task rebuilt {', '.join(outcome['rebuilt'])} from changelog"
        if outcome["ok"]:
            try:
                self._compare(t, result, outcome, position, model)
            except Exception as exc:
                # A value the harness cannot interpret (not an int, not UTF-8...) was served
                # as data: that is a divergence, not a reason to stop.
                t.outcome = "silent_divergence"
                t.note = f"a value the harness cannot interpret: {type(exc).__name__}: {exc}"
                t.findings = [t.note]
        else:
            err = outcome["error"]
            t.phase = outcome["phase"]
            t.error_type = err["type"]
            t.error = err["message"]
            if err["typed"] and names_damage(err["message"], t.damage, p.copy):
                t.outcome = "refused"
            else:
                t.outcome = "untyped"
                t.note = (
                    "a TxStoreError naming neither the damaged file nor its store"
                    if err["typed"]
                    else f"not a TxStoreError, raised at {err['where']}"
                )
        try:
            self._check_lmdb(p, result, position, model, offsets)
        except Exception as exc:
            t.healthy_changed.append(f"a healthy store's value the harness cannot interpret: {exc}")

    def _compare(
        self,
        t: DamageTrial,
        result: dict[str, Any],
        outcome: dict[str, Any],
        position: int,
        model: Model,
    ) -> None:
        """Classify a reopen that succeeded: ``exact`` or ``silent_divergence``."""
        # In-memory stores exist only in the reopened task: the child read them there.
        after = {**result["after"], **outcome["in_memory"]}
        t.position = int(after[POSITION_STORE][1][POSITION_KEY] or 0)
        check = Check()
        if t.position != position:
            kind = "lost" if t.position < position else "leaked"
            check.add(kind, "input", "position", str(position), str(t.position))
        for spec in self.workload.stores():
            compare_store(spec, after[spec.name][1], model.stores[spec.name], check)
        if check.ok:
            t.outcome = "exact"
        else:
            t.outcome = "silent_divergence"
            note = f"{check.lost} lost, {check.leaked} leaked"
            t.note = "; ".join(filter(None, [t.note, note]))
            t.findings = [str(f) for f in check.findings[:8]]

    def _check_files(self, p: _Pending) -> None:
        """The healthy stores' changelog files: unchanged, or as the undamaged recovery left
        them (the original partition)."""
        after = hash_files(p.copy, store_files(p.copy, p.healthy))
        original = Path(self.run_config.path)
        for rel in sorted(set(after) | set(p.hashes)):
            before, now = p.hashes.get(rel), after.get(rel)
            if now == before:
                continue
            reference = hash_files(original, [rel])[rel]
            if now == reference:
                continue
            what = "deleted" if now is None else "created" if before is None else "rewritten"
            ref = "absent" if reference is None else "different"
            p.trial.healthy_changed.append(
                f"{rel}: {what} by the reopen (the undamaged recovery left it {ref})"
            )

    def _check_lmdb(
        self,
        p: _Pending,
        result: dict[str, Any],
        position: int,
        model: Model,
        offsets: dict[str, int | None],
    ) -> None:
        """The healthy stores' committed LMDB content: unchanged, or the recovered state."""
        if not p.lmdb_healthy:
            return
        before, after = result["before"], result["after"]
        if before is None:
            err = result["before_error"]
            if err is not None:
                text = f"healthy stores unreadable before the reopen: {err['message']}"
                p.trial.note = "; ".join(filter(None, [p.trial.note, text]))
            return
        if after is None:
            err = result["after_error"]
            if err is not None:
                p.trial.healthy_changed.append(
                    f"healthy stores unreadable after the reopen: {err['type']}: {err['message']}"
                )
            return
        specs = {s.name: s for s in self.workload.stores()}
        for name in p.lmdb_healthy:
            if after[name] == before[name]:
                continue
            offset, state = after[name]
            check = Check()
            if name in specs:
                compare_store(specs[name], state, model.stores[name], check)
            elif state != {POSITION_KEY: position}:
                check.add("lost", name, POSITION_KEY, str(position), str(state))
            if check.ok and offset == offsets.get(name):
                continue
            detail = f"offset {before[name][0]} -> {offset} (recovered: {offsets.get(name)})"
            if not check.ok:
                detail += f"; {check.findings[0]}"
            p.trial.healthy_changed.append(f"LMDB store {name}: {detail}")

    def _finish(self, p: _Pending) -> None:
        """Remove the trial's copies, but keep the first damaged copies of each non-exact
        class (and of each trial that changed a healthy store)."""
        t = p.trial
        base = p.copy.parent
        damaged = base.with_name(base.name + ".damaged")
        key = "healthy_changed" if t.healthy_changed else t.outcome
        keep = key != "exact" and self.kept.get(key, 0) < KEEP_EXAMPLES
        if keep:
            self.kept[key] = self.kept.get(key, 0) + 1
            shutil.copyfile(base / "child.stderr", damaged / "child.stderr")
            t.kept = str(damaged)
        shutil.rmtree(base, ignore_errors=True)
        if not keep:
            shutil.rmtree(damaged, ignore_errors=True)

    def discard(self) -> None:
        """Drop the trials still pending (the run ended without another checked recovery)."""
        for p in self.pending:
            shutil.rmtree(p.copy.parent, ignore_errors=True)
            damaged = p.copy.parent.with_name(p.copy.parent.name + ".damaged")
            shutil.rmtree(damaged, ignore_errors=True)
        self.pending = []


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
