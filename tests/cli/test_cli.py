"""Every ``txstore`` subcommand from the command line, as a user runs it (a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _engine_child as child
from tests._task_child import model
from txstore.engine.partition import Partition

ROOT = Path(__file__).resolve().parents[2]


def txstore(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "txstore", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"txstore {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for p, total in ((0, 40), (1, 20)):
        subprocess.run(
            [sys.executable, str(ROOT / "tests" / "_task_child.py"), str(root / str(p)),
             str(total), "20"],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return root


def test_help_lists_every_subcommand() -> None:
    out = txstore("--help").stdout
    for cmd in ("demo", "stat", "dump", "get", "offsets", "check", "snapshot", "export",
                "crashtest", "serve"):  # fmt: skip
        assert cmd in out
    for cmd in ("stat", "dump", "get", "offsets", "check", "snapshot", "export", "serve"):
        assert "Usage: txstore" in txstore(cmd, "--help").stdout


def test_stat(state: Path) -> None:
    out = txstore("stat", str(state)).stdout
    assert "counts" in out and "HEADERS" in out
    out_lines = txstore("stat", str(state), "--json-lines").stdout.splitlines()
    rows = [json.loads(line) for line in out_lines]
    assert {(r["partition"], r["store"]) for r in rows} == {
        (p, s) for p in (0, 1) for s in ("counts", "latest", "tagged")
    }


def test_dump_and_get(state: Path) -> None:
    lines = txstore("dump", str(state / "0"), "counts").stdout.splitlines()
    assert len(lines) == len(model(40)["counts"])
    recs = [
        json.loads(x)
        for x in txstore("dump", str(state), "counts", "--json-lines").stdout.split("\n")
        if x
    ]
    assert len(recs) == 14
    assert txstore("dump", str(state), "tagged", "--limit", "2").stdout.count("\n") == 2
    out = txstore("get", str(state / "0"), "counts", "k3").stdout.strip()
    assert out == str(model(40)["counts"]["k3"])
    missing = txstore("get", str(state / "0"), "counts", "nope", check=False)
    assert missing.returncode == 1 and "(no value)" in missing.stdout


def test_a_store_made_at_the_bytes_level_is_inspected_like_the_others(tmp_path: Path) -> None:
    # BytesKeyValueStore records the format "bytes" (values stored as given): stat, check
    # and dump read it as the PLAIN layout instead of failing with KeyError: 'bytes'
    from txstore.bytestores.kv import BytesKeyValueStore

    with Partition(tmp_path / "p") as p:
        raw = BytesKeyValueStore("raw", p)
        raw.put_all([(b"k1", b"v1"), (b"k2", b"\xff")])
        raw.commit(7)
    stat = json.loads(txstore("stat", str(tmp_path / "p"), "--json-lines").stdout)
    assert (stat["store"], stat["format"], stat["entries"]) == ("raw", "bytes", 2)
    assert txstore("check", str(tmp_path / "p")).returncode == 0
    dump = txstore("dump", str(tmp_path / "p"), "raw").stdout.splitlines()
    assert [line.split("\t")[1:] for line in dump] == [["6b31", "7631"], ["6b32", "ff"]]


def test_offsets_and_check(state: Path) -> None:
    out_lines = txstore("offsets", str(state), "--json-lines").stdout.splitlines()
    rows = [json.loads(x) for x in out_lines]
    assert all(r["lag"] == 0 for r in rows)
    assert txstore("check", str(state)).stdout.strip().endswith("ok")


def test_bad_input_exits_2_with_a_message(state: Path, tmp_path: Path) -> None:
    proc = txstore("stat", str(tmp_path / "missing"), check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = txstore("dump", str(state), "no-such-store", check=False)
    assert proc.returncode == 2 and "no store 'no-such-store'" in proc.stderr
    assert txstore("frobnicate", check=False).returncode == 2


def test_check_reports_problems_with_exit_1(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_task_child.py"), str(tmp_path / "p"), "20", "20"],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (tmp_path / "p" / "spill").mkdir(exist_ok=True)
    (tmp_path / "p" / "spill" / "junk").write_bytes(b"x")
    proc = txstore("check", str(tmp_path / "p"), check=False)
    assert proc.returncode == 1 and "leftover spill" in proc.stdout


def test_check_next_to_a_live_spilling_writer_passes_and_reports_a_crashed_ones_spill(
    tmp_path: Path,
) -> None:
    """A writer process whose uncommitted puts spilled under a small overlay budget: check
    passes (exit 0) and notes the spill as the live writer's (it used to exit 1 calling it the
    leftover of a crashed writer). The same spill once that writer is SIGKILLed: exit 1,
    "leftover spill". Reopening for writing deletes it and check passes again."""
    path = tmp_path / "p"
    proc = child.spawn("hold-typed-spill", path, 5000)
    try:
        child.wait_line(proc, "READY")
        live = txstore("check", str(path), check=False)
        live_json = txstore("check", str(path), "--json", check=False)
    finally:
        child.kill(proc)
    spill = path / "spill"
    assert live.returncode == 0, live.stdout
    assert live.stdout.splitlines()[1:] == [
        f"NOTE spill of a live writer: {spill} holds the uncommitted writes of the process that "
        "has the partition open for writing (fine)",
        "ok",
    ]
    report = json.loads(live_json.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["notes"][0]["what"] == "spill of a live writer"
    assert any(spill.iterdir())  # the SIGKILLed writer left its spill behind
    dead = txstore("check", str(path), check=False)
    assert dead.returncode == 1
    assert dead.stdout.splitlines()[1:] == [
        "NOTE unclean shutdown: the last writer of this partition did not close it (it was "
        "killed or crashed); its next writer discards what it left uncommitted (a Task's "
        "initialize() reports what)",
        f"PROBLEM leftover spill: {spill} holds uncommitted data of a crashed writer; opening "
        "the partition for writing (or recover()) deletes it",
        "1 problem(s)",
    ]
    Partition(path).close()
    assert not spill.exists()
    assert txstore("check", str(path)).stdout.strip().endswith("ok")


def test_demo_runs_end_to_end_without_spark(tmp_path: Path) -> None:
    # The full demo (make demo) adds Spark; here the rest runs on a small stream.
    proc = txstore("demo", "--events", "4000", "--no-spark", "--out", str(tmp_path / "out"))
    assert "all checks passed" in proc.stdout
    assert "SIGKILLed mid-stream" in proc.stdout
    assert (tmp_path / "out" / "analytics.png").stat().st_size > 10_000
