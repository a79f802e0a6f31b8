"""The driver: starts, kills and restarts the writer, checks every recovery, runs the reader.

For each :class:`~txstore.crashtest.plan.Step` the driver starts a writer incarnation (with the
step's fault point armed, if any), waits for its ``recovered`` report and checks the recovered
state (:meth:`Driver.verify`) while the writer waits, then lets it process until it dies at the
armed point or the driver kills it (random moment, or an armed point not reached within
``armed_timeout``). After the last step one more writer recovers and is checked, then stops.

A check failure, a writer or reader error, or a recovery that takes longer than
``recover_timeout`` ends the run with :attr:`CrashtestReport.failure` set; the state directory
is then kept for inspection.
"""

from __future__ import annotations

import queue
import shutil
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from txstore.crashtest.common import RunConfig
from txstore.crashtest.damage_pass import DamagePass, DamageTrial
from txstore.crashtest.damage_report import progress_text
from txstore.crashtest.model import Check, Model, check_position
from txstore.crashtest.plan import FAULT_POINTS, RANDOM, Step, make_plan, reachable_points
from txstore.crashtest.procs import Child
from txstore.crashtest.report import CrashtestReport, KillRecord, Progress, RecoveryRecord
from txstore.crashtest.specs import segmented_available
from txstore.crashtest.state import StateReader, add_in_memory, check_changelogs, check_state
from txstore.crashtest.workload import DEFAULT_WORKLOAD, Workload
from txstore.errors import InvalidArgumentError

__all__ = ["WIPE_RESTORE", "CrashtestConfig", "CrashtestFailure", "Driver"]

#: The label of the final check: every store rebuilt from its changelog alone.
WIPE_RESTORE = "wipe-restore"


@dataclass
class CrashtestConfig:
    """Every setting of a run; ``txstore crashtest --help`` documents each."""

    seed: int = 1
    kills: int = 50
    points: list[str] | None = None  # None: every fault point the workload can reach
    random_fraction: float = 0.4
    max_delay: float = 0.4
    workload: str = DEFAULT_WORKLOAD
    workload_params: dict[str, Any] = field(default_factory=dict)
    overlay_budget_bytes: int = 16 * 1024
    segment_bytes: int = 64 * 1024
    restore_batch: int = 16
    sync: bool = True
    reader: bool = True
    armed_timeout: float = 5.0
    recover_timeout: float = 120.0
    workdir: str | None = None
    keep: bool = False
    replay: int | None = None
    wipe_sizes: list[int] = field(default_factory=list)
    wipe_repeats: int = 3
    wipe_tail: int = 1000
    out: str | None = None
    plot: bool = True
    progress: bool = True
    damage: int = 0  # damage trials, one after each of the first kills (at least this many)
    damage_timeout: float = 120.0


class CrashtestFailure(Exception):
    """Ends a run: a check failed or a process misbehaved."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class Driver:
    """One run of the kill loop (use :func:`txstore.crashtest.run`)."""

    def __init__(self, config: CrashtestConfig, workdir: Path, report: CrashtestReport) -> None:
        self.config = config
        self.workdir = workdir
        self.report = report
        params = dict(config.workload_params)
        if config.workload == DEFAULT_WORKLOAD:
            params.setdefault("in_memory", True)
        self.run_config = RunConfig(
            path=str(workdir / "task"),
            workload=config.workload,
            seed=config.seed,
            params=params,
            overlay_budget_bytes=config.overlay_budget_bytes,
            segment_bytes=config.segment_bytes,
            restore_batch=config.restore_batch,
            sync=config.sync,
        )
        self.workload: Workload = self.run_config.build_workload()
        self.run_config.params = self.workload.params()  # what the children rebuild
        self.run_json = workdir / "run.json"
        self.run_config.save(self.run_json)
        self.model = Model(self.workload)
        self.acked = 0
        self.incarnation = 0
        self.reader: Child | None = None
        self.reader_done = False
        self.last_point = "start"
        self.damage: DamagePass | None = None
        if config.damage > 0:
            self.damage = DamagePass(
                config.damage,
                config.seed,
                workdir,
                self.run_config,
                self.workload,
                timeout=config.damage_timeout,
            )
            report.damage = self.damage.trials
        self.progress: Progress | None = None

    # ---- plan ----------------------------------------------------------------------------

    def plan(self) -> list[Step]:
        c = self.config
        reachable = reachable_points(self.workload.segmented)
        if not self.workload.segmented:
            why = (
                "no window or session store in the workload"
                if segmented_available()
                else "no window or session store: txstore.runtime.task.Task has no window_store / "
                "session_store yet"
            )
            self.report.unreachable["segments.drop"] = why
        unknown = sorted(set(c.points or ()) - set(FAULT_POINTS))
        if unknown:
            raise InvalidArgumentError(
                f"unknown fault points {unknown}; known: {', '.join(sorted(FAULT_POINTS))}"
            )
        points = reachable if c.points is None else [p for p in c.points if p in reachable]
        steps = make_plan(
            c.seed,
            max(c.kills, c.damage),
            points,
            random_fraction=c.random_fraction,
            max_delay=c.max_delay,
        )
        return steps if c.replay is None else steps[: c.replay + 1]

    # ---- the loop --------------------------------------------------------------------------

    def run(self, progress: Progress) -> None:
        steps = self.plan()
        progress.total = max(len(steps), 1)
        self.progress = progress
        try:
            for step in steps:
                self.step(step)
                self.check_reader()
                progress.update(len(self.report.kills), self._progress_text(step.describe()))
            self.step(None)  # the last recovery, checked, then a clean stop
            self.wipe_and_restore()
        finally:
            self.stop_reader()
            if self.damage is not None:
                self.damage.discard()

    def _progress_text(self, what: str) -> str:
        r = self.report
        if self.damage is not None:
            return f"{progress_text(r.damage)}  lost {r.lost} leaked {r.leaked}"
        return f"{what}  lost {r.lost} leaked {r.leaked}"

    def _trial_done(self, trial: DamageTrial) -> None:
        if self.progress is not None:
            self.progress.update(len(self.report.kills), self._progress_text(""))

    def _spawn(self, faults: str) -> Child:
        self.incarnation += 1
        return Child(
            "txstore.crashtest.writer",
            [str(self.run_json), str(self.incarnation)],
            self.workdir / "writer.stderr",
            faults,
        )

    def step(self, step: Step | None) -> None:
        """One writer incarnation: recover, check, then crash as ``step`` says (``None``: stop
        cleanly after the check)."""
        c = self.config
        writer = self._spawn(step.faults_env if step is not None else "")
        started = time.perf_counter()
        start_position: int | None = None
        phase = "recovery"
        try:
            recovered = self._wait_recovered(writer)
            if recovered is not None:
                start_position = int(recovered["position"])
                self.verify(recovered, step)
                if self.reader is None and c.reader and not self.reader_done:
                    self.start_reader()
                if step is None:
                    writer.send("stop")
                    if writer.wait() != 0:
                        raise CrashtestFailure(f"writer failed to stop:\n{writer.stderr_tail()}")
                    return
                phase = "processing"
                writer.send("go")
                exited = writer.wait_for_exit(step.delay if step.random else c.armed_timeout)
                if not exited:
                    writer.kill()
        except BaseException:
            writer.kill()
            writer.wait()
            raise
        rc = writer.wait()
        events = writer.drain()
        committed = [int(e["position"]) for e in events if e.get("ev") == "committed"]
        self.acked = max([self.acked, *committed])
        if rc != -signal.SIGKILL or step is None:
            raise CrashtestFailure(
                f"writer exited with status {rc} ({phase}) instead of being killed:\n"
                f"{writer.stderr_tail()}",
                step=None if step is None else asdict(step),
            )
        point = RANDOM if writer.killed else step.point
        self.last_point = point
        self.report.kills.append(
            KillRecord(
                step.index,
                point,
                step.point,
                phase,
                start_position,
                self.acked,
                time.perf_counter() - started,
            )
        )
        if self.damage is not None:
            self.damage.after_kill(step.index, point)

    def wipe_and_restore(self) -> None:
        """The changelogs must hold exactly the committed state after all the crashes: delete
        the stores' LMDB environment, restore everything from the changelogs, check it."""
        self.stop_reader()  # its environment would be the deleted one
        self.reader_done = True
        shutil.rmtree(Path(self.run_config.path) / "data")
        self.last_point = WIPE_RESTORE
        self.step(None)

    def _wait_recovered(self, writer: Child) -> dict[str, Any] | None:
        """The writer's ``recovered`` event, or ``None`` if it died before (killed at an
        armed point during recovery)."""
        deadline = time.perf_counter() + self.config.recover_timeout
        while True:
            try:
                ev = writer.next_event(max(deadline - time.perf_counter(), 0.001))
            except queue.Empty:
                raise CrashtestFailure(
                    f"writer did not recover within {self.config.recover_timeout:.0f} s"
                ) from None
            if ev is None:
                return None
            if ev.get("ev") == "recovered":
                return ev

    # ---- checks --------------------------------------------------------------------------

    def verify(self, recovered: dict[str, Any], step: Step | None) -> None:
        """Check the recovered state: position, offsets, every store against the model."""
        position = int(recovered["position"])
        check = Check()
        check_position(self.workload, position, self.acked, check)
        # A fresh read-only handle each time: a long-lived one leaks the LMDB handles of
        # dropped segments (docs/crashtest.md, "Limits").
        with StateReader(self.run_config, self.workload) as reader:
            obs = reader.observe()
        add_in_memory(obs, str(recovered.get("in_memory", "")))
        if not obs.stable:
            check.add("leaked", "task", "<state>", "no commit while the writer waits", "a commit")
        check_changelogs(self.run_config.path, obs, position, int(recovered["seq"]), check)
        check_state(self.workload, self.model, obs, check)
        self.report.recoveries.append(
            RecoveryRecord(
                self.last_point,
                position,
                float(recovered["ms"]),
                sum(recovered.get("restored", {}).values()),
                sum(recovered.get("rolled_back", {}).values()),
                bool(recovered.get("discarded")),
                check.checked,
                check.lost,
                check.leaked,
            )
        )
        if not check.ok:
            kill = self.report.kills[-1] if self.report.kills else None
            raise CrashtestFailure(
                f"{check.lost} lost, {check.leaked} leaked in the recovery at input position "
                f"{position} (last acknowledged commit {self.acked})",
                kill=None if kill is None else asdict(kill),
                findings=[str(f) for f in check.findings],
            )
        self.acked = max(self.acked, position)
        if self.damage is not None and self.damage.pending:
            # The model is at the committed position and the writer waits: the pending damage
            # trials run now, against this state (docs/crashtest.md, "Damage").
            self.damage.run_pending(position, self.model, obs.offsets, self._trial_done)

    # ---- reader --------------------------------------------------------------------------

    def start_reader(self) -> None:
        self.reader = Child(
            "txstore.crashtest.reader", [str(self.run_json)], self.workdir / "reader.stderr"
        )

    def check_reader(self) -> None:
        """Stop the run at the reader's first violation, or if the reader died."""
        reader = self.reader
        if reader is None:
            return
        while True:
            try:
                ev = reader.events.get_nowait()
            except queue.Empty:
                return
            if ev is None or not reader.alive():
                self.reader = None
                reader.wait()
                raise CrashtestFailure(f"the reader process died:\n{reader.stderr_tail()}")
            if ev.get("ev") == "violation":
                kill = self.report.kills[-1] if self.report.kills else None
                raise CrashtestFailure(
                    f"the reader saw a committed state that differs from the model at input "
                    f"position {ev.get('position')}",
                    kill=None if kill is None else asdict(kill),
                    findings=list(ev.get("findings", [])),
                )

    def stop_reader(self) -> None:
        reader, self.reader = self.reader, None
        if reader is None:
            return
        reader.send("stop")
        if not reader.wait_for_exit(60):
            reader.kill()
        rc = reader.wait()
        events = reader.drain()
        summary = next((e for e in events if e.get("ev") == "summary"), None)
        if rc != 0 or summary is None:
            self.report.reader = {"error": reader.stderr_tail()}
            if self.report.failure is None:
                self.report.failure = {"message": f"reader failed:\n{reader.stderr_tail()}"}
            return
        summary.pop("ev", None)
        self.report.reader = summary


def make_workdir(config: CrashtestConfig) -> tuple[Path, bool]:
    """The run's directory and whether it is a temporary one."""
    if config.workdir:
        path = Path(config.workdir)
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise InvalidArgumentError(f"work directory {path} is not empty")
        return path, False
    return Path(tempfile.mkdtemp(prefix="txstore-crashtest-")), True


def remove_workdir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
