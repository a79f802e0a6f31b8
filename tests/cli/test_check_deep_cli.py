"""``txstore check --deep`` from the command line (a real process over real files)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.cli.test_cli import txstore
from tests.runtime.test_check_deep import lmdb_get, lmdb_put, make_task_dir


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deep-cli")
    make_task_dir(root / "0", total=120)
    make_task_dir(root / "1", total=240)
    return root


def test_help_names_the_deep_option() -> None:
    assert "--deep" in txstore("check", "--help").stdout


def test_a_healthy_state_directory_passes(state: Path) -> None:
    out = txstore("check", "--deep", str(state)).stdout.splitlines()
    assert out[0].startswith("2 partition(s), 20 store(s), ")
    assert out[1].startswith("deep: ") and out[1].endswith(" 0 not compared")
    assert out[-1] == "ok"
    assert "PROBLEM" not in "\n".join(out)


def test_a_changed_value_exits_1_and_names_store_partition_key_and_values(
    state: Path, tmp_path: Path
) -> None:
    path = tmp_path / "state"
    make_task_dir(path / "0", total=120)
    old = lmdb_get(path / "0", b"kv_plain", b"k3")
    assert old is not None
    lmdb_put(path / "0", b"kv_plain", b"k3", struct.pack(">q", 4242))
    plain = txstore("check", str(path), check=False)
    assert plain.returncode == 0 and plain.stdout.strip().endswith("ok")
    deep = txstore("check", "--deep", str(path), check=False)
    assert deep.returncode == 1, deep.stderr
    problems = [line for line in deep.stdout.splitlines() if line.startswith("PROBLEM")]
    expected = struct.unpack(">q", old)[0]
    assert problems == [
        f"PROBLEM partition 0: store 'kv_plain': value differs: key 6b33 ('k3'): expected "
        f"{expected} ({old.hex()}), found 4242 ({struct.pack('>q', 4242).hex()})"
    ]
    assert deep.stdout.strip().endswith("1 problem(s)")
    report = json.loads(txstore("check", "--deep", "--json", str(path), check=False).stdout)
    assert report["ok"] is False and report["deep"] is True
    [problem] = report["problems"]
    assert problem["partition"] == 0 and problem["key"] == "6b33"
    assert problem["what"] == "store 'kv_plain': value differs"


def test_a_broken_row_in_a_partition_directory_exits_1(tmp_path: Path) -> None:
    make_task_dir(tmp_path / "p", total=60)
    lmdb_put(tmp_path / "p", b"kv_headers", b"k1", b"\x7f")
    deep = txstore("check", "--deep", str(tmp_path / "p"), check=False)
    assert deep.returncode == 1
    assert "PROBLEM store 'kv_headers': bad row: key 6b31 ('k1'): " in deep.stdout
