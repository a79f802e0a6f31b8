"""The command line's second newcomer pass (issue 26): one message for one mistake, nothing
silently ignored, and JSON a standard tool reads (docs/cli.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import ROOT, txstore


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Partitions 0 and 1 of a task's state directory (stores counts, latest, tagged)."""
    root = tmp_path_factory.mktemp("newcomer") / "state"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for p, total in ((0, 30), (1, 10)):
        subprocess.run(
            [sys.executable, str(ROOT / "tests" / "_task_child.py"), str(root / str(p)),
             str(total), "10"],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return root


def test_a_missing_partition_is_one_usage_error_in_every_command(
    state: Path, tmp_path: Path
) -> None:
    """--partitions 7 of a state directory with partitions 0 and 1: exit 2 and the same
    message from dump (which printed nothing and exited 0), check, snapshot and export
    (which said it three other ways); nothing is written."""
    expected = f"{state} has no partition 7 (its partitions: 0, 1)"
    for args in (
        ("dump", str(state), "counts"),
        ("check", str(state)),
        ("snapshot", str(state), str(tmp_path / "snap")),
        ("export", str(state), str(tmp_path / "out"), "--store", "counts"),
    ):
        proc = txstore(*args, "--partitions", "7", check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert expected in proc.stderr and proc.stdout == "", (args, proc.stderr)
    assert not (tmp_path / "snap").exists() and not (tmp_path / "out").exists()
    one = txstore("dump", str(state / "0"), "counts", "--partitions", "0", check=False)
    assert one.returncode == 2 and "is one partition directory" in one.stderr


def test_get_with_an_unknown_store_lists_the_stores(state: Path) -> None:
    proc = txstore("get", str(state), "count", "k1", check=False)
    assert proc.returncode == 2
    assert "no store 'count'" in proc.stderr and "stores: counts, latest, tagged" in proc.stderr


def test_export_refuses_an_ambiguous_snapshot_value(state: Path, tmp_path: Path) -> None:
    """--snapshot maybe (a typo of true/false) wrote a snapshot directory ./maybe; now it is
    a usage error, and a directory is given with a '/'."""
    proc = subprocess.run(
        [sys.executable, "-m", "txstore", "export", str(state), str(tmp_path / "out"),
         "--store", "counts", "--snapshot", "maybe"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "'--snapshot'" in proc.stderr and "./maybe" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_stat_prints_the_partition_size_once(state: Path) -> None:
    """The text table showed the partition's LMDB size on every store's row, as if each
    store had that size; now on the partition's first row, with each store's changelog."""
    lines = txstore("stat", str(state)).stdout.splitlines()
    header, rows = lines[0], [line for line in lines[2:] if line.strip()]
    assert "data size" in header and "changelog size" in header
    sized = [r for r in rows if r.count("MiB") == 2]
    assert len(rows) == 6 and len(sized) == 2  # two partitions of three stores each


def test_json_is_one_document_and_json_lines_one_per_line(state: Path) -> None:
    """--json printed JSON lines, which `python -m json.tool` could not read: it is now one
    JSON document (an array of rows), --json-lines the lines it printed before."""
    for args in (("stat", str(state)), ("dump", str(state), "counts"), ("offsets", str(state))):
        doc = txstore(*args, "--json").stdout
        rows = json.loads(doc)
        assert isinstance(rows, list) and len(rows) >= 2, args
        tool = subprocess.run(
            [sys.executable, "-m", "json.tool"], input=doc, capture_output=True, text=True
        )
        assert tool.returncode == 0, args
        lines = txstore(*args, "--json-lines").stdout.splitlines()
        assert [json.loads(line) for line in lines] == rows, args
    empty = txstore("dump", str(state), "counts", "--limit", "0", "--json").stdout
    assert json.loads(empty) == []
    check = json.loads(txstore("check", str(state), "--json").stdout)
    assert check["ok"] is True


def test_rows_name_the_partition_partition_id_as_spark_does(state: Path) -> None:
    """One name for a partition's number in rows: partition_id, the Spark source's column
    (after Spark's state reader); the old key partition stays for the scripts reading it."""
    for args in (("stat", str(state)), ("dump", str(state), "counts"), ("offsets", str(state))):
        rows = json.loads(txstore(*args, "--json").stdout)
        assert all(r["partition_id"] == r["partition"] for r in rows), args
        assert {r["partition_id"] for r in rows} == {0, 1}, args
        assert next(iter(rows[0])) == "partition_id"
    got = json.loads(txstore("get", str(state), "counts", "k1", "--json").stdout)
    assert got["partition_id"] == got["partition"] is not None
