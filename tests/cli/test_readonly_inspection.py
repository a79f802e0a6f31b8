"""Inspecting state the user cannot write (another user's state, a backup): ``stat``, ``get``
and ``check`` read it as py-lmdb can, without LMDB's lock table, while no writer runs; next to
a live writer they refuse with a message saying why (docs/cli.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import txstore
from tests.cli.test_cli import ROOT
from txstore import Serdes, Stores
from txstore.runtime.task import Task


def without_write_access(path: Path) -> list[str]:
    """A command prefix that runs a process unable to write ``path``: as root, one without
    the capabilities that bypass file modes (``path`` is given to nobody, mode 755; root could
    write anything otherwise); as another user, ``path`` made read-only."""
    if os.geteuid() != 0:
        for d, _, files in os.walk(path):
            os.chmod(d, 0o555)
            for f in files:
                os.chmod(os.path.join(d, f), 0o444)
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to drop write access")
    for d, _, files in os.walk(path):
        os.chown(d, 65534, 65534)
        for f in files:
            os.chown(os.path.join(d, f), 65534, 65534)
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def run(prefix: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [*prefix, sys.executable, "-m", "txstore", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def backup(tmp_path: Path) -> Iterator[Path]:
    """A task's partition directory (a store and its changelog) the tests cannot write."""
    part = tmp_path / "backup" / "0"
    with Task(part) as task:
        users = task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("users"), Serdes.string(), Serdes.long()
            )
        )
        task.initialize()
        users.put("ada", 36)
        task.commit(1)
    yield part
    for d, _, _ in os.walk(tmp_path):  # let pytest remove it again
        os.chmod(d, 0o755)


def test_stat_get_and_check_read_a_directory_they_cannot_write(backup: Path) -> None:
    """They failed with "is open read-only: Permission denied" (lock.mdb not writable)."""
    prefix = without_write_access(backup)
    probe = subprocess.run([*prefix, sys.executable, "-c",
                            f"import os; print(os.access({str(backup)!r}, os.W_OK))"],
                           capture_output=True, text=True)  # fmt: skip
    assert probe.stdout.strip() == "False"  # the child really cannot write it
    before = sorted(p.name for p in backup.rglob("*"))
    stat = run(prefix, "stat", str(backup), "--json")
    assert stat.returncode == 0, stat.stderr
    assert '"store": "users"' in stat.stdout
    got = run(prefix, "get", str(backup), "users", "ada")
    assert (got.returncode, got.stdout.strip()) == (0, "36"), got.stderr
    check = run(prefix, "check", str(backup))
    assert check.returncode == 0 and check.stdout.strip().endswith("ok"), check.stdout
    assert sorted(p.name for p in backup.rglob("*")) == before


def test_next_to_a_live_writer_it_refuses_with_the_reason(backup: Path) -> None:
    """Without the lock table the writer would not see the reader and could reuse pages
    under it: with a writer alive, the reader refuses (exit 3) and says what to do."""
    prefix = without_write_access(backup)
    with txstore.open(backup) as db:  # this process keeps its write access
        proc = run(prefix, "stat", str(backup))
        assert db.store_names() == ["users"]
    assert proc.returncode == 3
    assert "lock.mdb is not writable" in proc.stderr and "a writer has" in proc.stderr
