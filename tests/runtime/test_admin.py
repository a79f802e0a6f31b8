"""stat, dump, get, offsets and check over real partition and state directories."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._task_child import model
from txstore.errors import InvalidArgumentError
from txstore.runtime import admin

ROOT = Path(__file__).resolve().parents[2]


def make_partition(path: Path, total: int = 60) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_task_child.py"), str(path), str(total), "20"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("state")
    make_partition(root / "0", 60)
    make_partition(root / "1", 40)
    return root


def test_stat_lists_every_store_of_every_partition(state_dir: Path) -> None:
    rows = admin.stat(state_dir)
    assert {(r["partition"], r["store"]) for r in rows} == {
        (p, s) for p in (0, 1) for s in ("counts", "latest", "tagged")
    }
    counts0 = next(r for r in rows if r["partition"] == 0 and r["store"] == "counts")
    assert counts0["kind"] == "key_value" and counts0["format"] == "PLAIN"
    assert counts0["entries"] == len(model(60)["counts"])
    assert counts0["key_serde"] == "string" and counts0["value_serde"] == "long"
    assert counts0["committed_offset"] == 60 and counts0["changelog_bytes"] > 0


def test_dump_decodes_with_the_recorded_serdes(state_dir: Path) -> None:
    got = {r["key"]: r["value"] for r in admin.dump(state_dir, "latest", partitions=[0])}
    assert got == model(60)["latest"]
    assert len(list(admin.dump(state_dir, "tagged", limit=3))) == 3
    raw = next(admin.dump(state_dir, "counts", decode=False))
    assert isinstance(raw["key"], bytes) and isinstance(raw["value"], bytes)
    with pytest.raises(InvalidArgumentError, match="no store 'nope'"):
        list(admin.dump(state_dir, "nope"))


def test_get_finds_the_key_in_its_partition(state_dir: Path) -> None:
    part, value = admin.get(state_dir / "1", "counts", "k3")
    assert (part, value) == (None, model(40)["counts"]["k3"])
    part, value = admin.get(state_dir, "counts", "k3")
    assert part in (0, 1) and value == model(60 if part == 0 else 40)["counts"]["k3"]
    assert admin.get(state_dir, "counts", "absent") == (None, None)


def test_offsets_show_store_and_changelog_positions(state_dir: Path) -> None:
    rows = {(r["partition"], r["store"]): r for r in admin.offsets(state_dir)}
    r = rows[(0, "counts")]
    assert r["store_offset"] == r["changelog_end"] == 60
    assert r["input_position"] == 60 and r["lag"] == 0


def test_check_passes_a_healthy_directory_and_names_problems(
    state_dir: Path, tmp_path: Path
) -> None:
    report = admin.check(state_dir)
    assert report.ok, report.problems
    assert report.partitions == 2 and report.stores == 6 and report.changelog_records > 0
    # Corrupt one committed changelog byte and leave a spill directory behind.
    make_partition(tmp_path / "p", 40)
    seg = sorted((tmp_path / "p" / "changelog" / "counts").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[60] ^= 0xFF
    seg.write_bytes(bytes(data))
    (tmp_path / "p" / "spill").mkdir(exist_ok=True)
    (tmp_path / "p" / "spill" / "data.mdb").write_bytes(b"x")
    report = admin.check(tmp_path / "p")
    whats = {p.what for p in report.problems}
    assert "leftover spill" in whats
    assert "changelog 'counts'" in whats


def test_check_next_to_a_committing_task_finds_no_store_ahead_of_its_changelog(
    tmp_path: Path,
) -> None:
    """A task process commits (changelog, then stores) once per record while check runs again
    and again. Check used to read the store's offset after its changelog snapshot, so a commit
    in between showed a healthy store "1 offsets ahead of its changelog: the changelog lost
    committed data" (in about one run in five); now every run passes."""
    path = tmp_path / "p"
    make_partition(path, 2000)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "_task_child.py"), str(path), "1000000", "1"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        runs, problems = 0, []
        deadline = time.monotonic() + 60
        first = None
        while time.monotonic() < deadline:
            report = admin.check(path)
            runs += 1
            problems += report.problems
            offset = admin.offsets(path)[0]["store_offset"]
            first = offset if first is None else first
            if runs >= 150 and offset - first >= 150:  # checks ran across many commits
                break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert offset - first >= 150, "the task process did not commit while check ran"
    assert problems == []


def test_paths_that_are_not_partitions_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        admin.stat(tmp_path / "missing")
    with pytest.raises(InvalidArgumentError, match="neither a partition"):
        admin.stat(tmp_path)
