"""The demo's two query servers (``txstore serve`` processes) over its state directory.

They start before the restarted streaming job, so the demo asks them questions while the job
runs (read-committed: each answer is the last committed micro-batch), and again once it is done.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from txstore.queries import QueryClient

__all__ = ["QueryServers"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class QueryServers:
    """Two instances, A (every partition but the last) and B (the last), on free loopback
    ports; :attr:`client` asks A, which routes each key to its owner."""

    def __init__(self, state: Path, out: Path, partitions: int, env: dict[str, str]) -> None:
        self.hosts = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        split = max(1, partitions - 1)
        self.owned = {
            self.hosts[0]: list(range(split)),
            self.hosts[1]: list(range(split, partitions)),
        }
        assignment = {
            "application_id": "page-views",
            "num_partitions": partitions,
            "instances": {host: {"active": parts} for host, parts in self.owned.items()},
        }
        plan = out / "assignment.json"
        plan.write_text(json.dumps(assignment))
        command = [sys.executable, "-m", "txstore", "serve", str(state)]
        command += ["--application-id", "page-views", "--assignment", str(plan), "-q"]
        self.procs = [
            subprocess.Popen(
                [*command, "--application-server", host],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for host in self.hosts
        ]
        self.client = QueryClient(self.hosts[0])

    def wait_running(self, timeout_s: float = 60.0) -> None:
        """Wait until both instances report RUNNING (TimeoutError after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if all(self.client.health(h).get("state") == "RUNNING" for h in self.hosts):
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the query servers did not start within {timeout_s:g} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM both, then wait (SIGKILL after 30 s). Idempotent."""
        self.client.close()
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
