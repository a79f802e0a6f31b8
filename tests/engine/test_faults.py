"""Fault points: off by default, raise or SIGKILL when armed, armable through the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from txstore import faults
from txstore.errors import InvalidArgumentError


def test_disarmed_point_does_nothing() -> None:
    before = faults.hits("task.after_changelog_commit")  # earlier tests may have armed it
    faults.point("task.after_changelog_commit")
    assert faults.hits("task.after_changelog_commit") == before


def test_armed_point_raises_at_the_nth_hit_then_disarms() -> None:
    try:
        faults.arm("overlay.spill", nth=2, action="raise")
        faults.point("overlay.spill")
        with pytest.raises(faults.InjectedFault, match=r"overlay\.spill"):
            faults.point("overlay.spill")
        faults.point("overlay.spill")  # disarmed after firing
    finally:
        faults.disarm()


def test_bad_arming_is_a_typed_error() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown fault point"):
        faults.arm("no.such.point")
    with pytest.raises(InvalidArgumentError):
        faults.arm("overlay.spill", nth=0)
    with pytest.raises(InvalidArgumentError):
        faults.arm("overlay.spill", action="explode")  # type: ignore[arg-type]


def test_environment_arms_a_real_sigkill_in_a_child() -> None:
    code = (
        "from txstore import faults\n"
        "print('before', flush=True)\n"
        "faults.point('task.restore_batch')\n"
        "print('survived first', flush=True)\n"
        "faults.point('task.restore_batch')\n"
        "print('survived second', flush=True)\n"
    )
    env = dict(os.environ, TXSTORE_FAULTS="task.restore_batch=2")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.split() == ["before", "survived", "first"]
