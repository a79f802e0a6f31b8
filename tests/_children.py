"""Running the crash-test worker scripts of the test suite as real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent)


def run_child(
    script: str, path: Path, total: int, every: int, faults: str = "", **env_extra: str
) -> int:
    """Run ``tests/<script> PATH TOTAL EVERY`` (``TXSTORE_FAULTS=faults`` when given) and return
    its exit code: 0, or ``-SIGKILL`` when an armed fault point killed it. Any other ending is
    a test failure, with the child's stderr."""
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    env.pop("TXSTORE_FAULTS", None)
    if faults:
        env["TXSTORE_FAULTS"] = faults
    proc = subprocess.run(
        [sys.executable, str(Path(ROOT) / "tests" / script), str(path), str(total), str(every)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(proc.stderr)
    return proc.returncode


def process_and_commit(
    open_task: Callable[[str], Any], process: Callable[[Any, int], None], argv: list[str]
) -> None:
    """The workers' main loop: ``argv = [PATH, TOTAL, EVERY]``; resume from the committed
    input position, process, commit every EVERY records."""
    path, total, every = argv[0], int(argv[1]), int(argv[2])
    with open_task(path) as task:
        task.initialize()
        pos = task.input_position or 0
        while pos < total:
            end = min(total, pos + every)
            for i in range(pos, end):
                process(task, i)
            task.commit(end)
            pos = end
