"""Child processes of the harness: start, talk JSON lines, kill with a real ``SIGKILL``."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Child", "child_env"]


def child_env(faults: str = "") -> dict[str, str]:
    """The environment of a child: this process's, with this process's import path (so a
    workload importable here is importable there) and ``TXSTORE_FAULTS`` set to ``faults``
    only."""
    env = dict(os.environ)
    env.pop("TXSTORE_FAULTS", None)
    if faults:
        env["TXSTORE_FAULTS"] = faults
    paths = [p or os.getcwd() for p in sys.path]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class Child:
    """``python -m MODULE ARGS...`` with JSON lines on stdout (read by a thread into a queue),
    stdin for commands and stderr to a file."""

    def __init__(self, module: str, args: list[str], stderr: Path, faults: str = "") -> None:
        self.stderr_path = stderr
        self._stderr: TextIO = open(stderr, "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_env(faults),
            text=True,
            bufsize=1,
        )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.killed = False  # by us
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"ev": "garbage", "line": line[:200]})
        self.events.put(None)

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next event; ``None`` at end of output. Raises ``queue.Empty`` on timeout."""
        return self.events.get(timeout=timeout)

    def drain(self) -> list[dict[str, Any]]:
        """Every remaining event, once the process has exited (waits for end of output)."""
        self._pump.join()
        out: list[dict[str, Any]] = []
        while True:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return out
            if ev is not None:
                out.append(ev)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died meanwhile: the caller sees it in wait()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for_exit(self, timeout: float) -> bool:
        """Whether the process exited within ``timeout`` seconds."""
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        """``SIGKILL`` it now (if still running)."""
        if self.proc.poll() is None:
            self.killed = True
            os.kill(self.proc.pid, signal.SIGKILL)

    def wait(self) -> int:
        """Wait for the exit; the return code (``-9``: killed)."""
        rc = self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        self._pump.join()  # end of output: the process is gone
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return rc

    def stderr_tail(self, lines: int = 25) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])
