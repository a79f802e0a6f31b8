"""The command line that replays a crash-test run: what a failure report prints."""

from __future__ import annotations

import json
import shlex
from typing import Any

from txstore.crashtest.driver import CrashtestConfig
from txstore.crashtest.workload import DEFAULT_WORKLOAD

__all__ = ["replay_command"]


def replay_command(config: CrashtestConfig, index: int | None) -> str:
    """The ``txstore crashtest`` command that replays ``config``'s plan up to kill ``index``
    (``None``: the whole run), with every setting that changes the run."""
    d = CrashtestConfig()
    argv = ["txstore", "crashtest", "--seed", str(config.seed), "--kills", str(config.kills)]
    flags: list[tuple[str, Any, Any]] = [
        ("--points", ",".join(config.points) if config.points else None, None),
        ("--random-fraction", config.random_fraction, d.random_fraction),
        ("--max-delay", config.max_delay, d.max_delay),
        ("--workload", config.workload, DEFAULT_WORKLOAD),
        ("--overlay-budget", config.overlay_budget_bytes, d.overlay_budget_bytes),
        ("--segment-bytes", config.segment_bytes, d.segment_bytes),
        ("--restore-batch", config.restore_batch, d.restore_batch),
    ]
    for flag, value, default in flags:
        if value != default:
            argv += [flag, str(value)]
    if config.workload_params:
        argv += ["--workload-params", json.dumps(config.workload_params, sort_keys=True)]
    if not config.sync:
        argv.append("--no-sync")
    if config.damage:
        argv += ["--damage", str(config.damage)]
    if index is not None:
        argv += ["--replay", str(index)]
    argv += ["--wipe-sizes", "", "--keep"]
    return shlex.join(argv)
