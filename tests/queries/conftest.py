"""A real ZooKeeper server for the membership and failover tests: the one shipped in PySpark's
jars (``org.apache.zookeeper.server.ZooKeeperServerMain``), started once per test session on a
free loopback port with a tick of 250 ms (session timeouts of 0.5 to 5 s), stopped at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TICK_MS = 250


def _pyspark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    return jars if any(jars.glob("zookeeper-*.jar")) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    """ZooKeeper's ``srvr`` four-letter word (whitelisted by default) answers once it serves."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"srvr")
            return b"Zookeeper version" in s.recv(4096)
    except OSError:
        return False


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The connect string (``127.0.0.1:<port>``) of a running ZooKeeper server."""
    jars, java = _pyspark_jars(), shutil.which("java")
    if jars is None or java is None:
        pytest.fail("the ZooKeeper tests need java and pyspark's jars (pip install '.[spark]')")
    port = _free_port()
    data = tmp_path_factory.mktemp("zookeeper")
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            java,
            "-Xmx128m",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=srvr",
            "-cp",
            f"{jars}/*",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(port),
            str(data / "data"),
            str(TICK_MS),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("ZooKeeper did not start: " + (data / "server.log").read_text()[-2000:])
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
