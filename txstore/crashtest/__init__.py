"""The crash-recovery harness: real processes, real ``SIGKILL``, an independent model.

A writer process runs a deterministic, seeded workload over a :class:`~txstore.runtime.task.Task`
with several stores (small overlay budget, so spills happen; periodic commits). The driver
kills it at random moments and at every named fault point (:mod:`txstore.faults`), restarts
it, lets it recover and restore, and checks the full state of every store against a model
computed from the committed input position alone: nothing committed lost, nothing uncommitted
visible, offsets consistent. A reader process meanwhile reads read-committed in a loop and
checks that it only sees whole committed states, moving forward. See ``docs/crashtest.md``.

>>> from txstore import crashtest
>>> report = crashtest.run(kills=3, seed=5, progress=False)      # doctest: +SKIP
>>> report.ok, report.lost, report.leaked                        # doctest: +SKIP
(True, 0, 0)

Modules: :mod:`~txstore.crashtest.workload` and :mod:`~txstore.crashtest.specs` (the workload,
its stores and their model), :mod:`~txstore.crashtest.model` (the model and the
classification of differences), :mod:`~txstore.crashtest.writer` and
:mod:`~txstore.crashtest.reader` (the child processes), :mod:`~txstore.crashtest.driver` and
:mod:`~txstore.crashtest.plan` (the kill loop), :mod:`~txstore.crashtest.report` and
:mod:`~txstore.crashtest.plot` (output), :mod:`~txstore.crashtest.wipe` (recovery versus
wipe-and-replay, its steps in :mod:`~txstore.crashtest.wipe_steps`), and
:mod:`~txstore.crashtest.replay` (the command line that replays a run), and the damage
trials of ``--damage N``: :mod:`~txstore.crashtest.damage` (which files, which damage),
:mod:`~txstore.crashtest.damage_pass` (copy, damage, reopen, classify, the healthy-store
rule) and :mod:`~txstore.crashtest.damage_report`. The modules run as child processes
(``writer``, ``reader``, ``wipe_steps``, ``damage_child``) are not imported by this package.

The join workload (``--workload join``) is :mod:`~txstore.crashtest.joins`.

May import: ``txstore.runtime`` and below, and ``txstore.joins`` (the join workload);
matplotlib only inside :func:`~txstore.crashtest.plot.plot_report` (optional). Never
``txstore.queries``, ``txstore.spark`` or ``txstore.cli`` (which imports it).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from txstore.crashtest.common import POSITION_STORE
from txstore.crashtest.damage_report import damage_counts
from txstore.crashtest.driver import (
    CrashtestConfig,
    CrashtestFailure,
    Driver,
    make_workdir,
    remove_workdir,
)
from txstore.crashtest.plot import plot_report
from txstore.crashtest.replay import replay_command
from txstore.crashtest.report import CrashtestReport, Progress
from txstore.crashtest.specs import Rec, StoreModel, StoreSpec
from txstore.crashtest.wipe import measure_recovery_vs_wipe
from txstore.crashtest.workload import StandardWorkload, Workload

__all__ = [
    "CrashtestConfig",
    "CrashtestReport",
    "Rec",
    "StandardWorkload",
    "StoreModel",
    "StoreSpec",
    "Workload",
    "run",
]


def run(config: CrashtestConfig | None = None, **overrides: Any) -> CrashtestReport:
    """Run the harness (settings: :class:`CrashtestConfig` fields, as ``config`` or keyword
    arguments) and return its report; :attr:`CrashtestReport.ok` says whether it passed.

    Writes ``crashtest.json`` and ``crashtest.png`` to ``out`` when it is set. The state
    directory is removed after a passing run (unless ``keep``) and kept after a failure.
    """
    config = dataclasses.replace(config or CrashtestConfig(), **overrides)
    report = CrashtestReport(config=dataclasses.asdict(config))
    workdir, temporary = make_workdir(config)
    progress = Progress(config.kills, config.progress)
    started = time.perf_counter()
    driver: Driver | None = None
    try:
        driver = Driver(config, workdir, report)
        report.stores = [s.config() for s in driver.workload.stores()]
        report.stores.append({"name": POSITION_STORE, "kind": "key_value", "format": "PLAIN"})
        driver.run(progress)
    except CrashtestFailure as exc:
        report.failure = {"message": str(exc), **exc.details}
    except BaseException:
        progress.close()
        if temporary:
            remove_workdir(workdir)
        raise
    progress.close()
    if report.ok and config.wipe_sizes:
        try:
            report.wipe = measure_recovery_vs_wipe(
                list(config.wipe_sizes),
                workdir,
                repeats=config.wipe_repeats,
                tail=config.wipe_tail,
                say=progress.message,
            )
        except RuntimeError as exc:
            report.failure = {"message": f"recovery vs wipe measurement failed: {exc}"}
    report.seconds = time.perf_counter() - started
    if not report.ok:
        _describe_failure(report, config, workdir)
    if config.out:
        _write_outputs(report, Path(config.out), config.plot)
    if report.ok and temporary and not config.keep:
        remove_workdir(workdir)
    else:
        report.files["state directory"] = str(workdir)
    return report


def _describe_failure(report: CrashtestReport, config: CrashtestConfig, workdir: Path) -> None:
    failure = report.failure if report.failure is not None else {}
    whole_run = False
    if not failure and not report.damage_ok:  # only damage trials found something
        c = damage_counts(report.damage)
        failure["message"] = (
            f"damage trials: {c['silent_divergence']} silent divergence, {c['signal']} died by a "
            f"signal, {c['healthy_store_changed']} changed a healthy store (see above)"
        )
        whole_run = True
    elif not failure:  # only the reader's summary found something
        r = report.reader or {}
        failure["message"] = (
            f"the reader saw {r.get('lost', 0)} lost and {r.get('leaked', 0)} leaked entries"
        )
        failure["findings"] = r.get("findings", [])
        whole_run = True
    last = report.kills[-1] if report.kills else None
    failure["seed"] = config.seed
    failure["crash_point"] = "none (first start)" if last is None else last.point
    failure["planned"] = None if last is None else last.planned
    failure["replay"] = replay_command(config, None if last is None or whole_run else last.index)
    failure["state_directory"] = str(workdir)
    report.failure = failure


def _write_outputs(report: CrashtestReport, out: Path, plot: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "crashtest.json"
    report.files["json report"] = str(json_path)
    if plot:
        png = out / "crashtest.png"
        if plot_report(report, png):
            report.files["plot"] = str(png)
        else:
            report.files["plot"] = "skipped (matplotlib is not installed)"
    report.write_json(json_path)
