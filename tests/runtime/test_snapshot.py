"""Snapshots: exact cuts, immutable copies, manifests, a writer process committing meanwhile."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

import txstore
from tests import _engine_child as child
from txstore import Serdes, ValueAndTimestamp, ValueFormat
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.cli.main import main as cli
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, StorageError
from txstore.runtime.snapshot import (
    MANIFEST_NAME,
    Manifest,
    begin_cut,
    is_snapshot,
    read_manifest,
    remove_snapshot,
    snapshot_partition,
    snapshot_state_dir,
)

pytestmark = pytest.mark.filterwarnings("error")


def _fill(path: Path, n: int, offset: int, *, extra: bool = True) -> None:
    with txstore.open(path) as db:
        kv = db.key_value_store("kv", Serdes.string(), Serdes.long())
        kv.put_all((f"k{i:05d}", i) for i in range(n))
        stores = {"kv": offset}
        if extra:
            ts = db.key_value_store(
                "ts", Serdes.long(), Serdes.json(), format=ValueFormat.TIMESTAMPED
            )
            ts.put(1, ValueAndTimestamp({"a": 1}, 5))
            stores["ts"] = offset + 1
        db.commit(stores)


def _items(path: Path, store: str = "kv") -> tuple[list[tuple[bytes, bytes]], int | None]:
    with Partition(path, readonly=True) as p:
        bs = BytesKeyValueStore(store, p)
        with bs.read_committed().snapshot() as view:
            with view.all() as it:
                rows = [(k, v) for k, v in it if v is not None]
            return rows, view.committed_offset


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for f in sorted(root.rglob("*")):
        if f.is_file():
            out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def test_partition_snapshot_is_the_committed_cut(tmp_path: Path) -> None:
    src, dst = tmp_path / "7", tmp_path / "snap"
    _fill(src, 300, 40)
    with txstore.open(src) as db:
        kv = db.key_value_store("kv", Serdes.string(), Serdes.long())
        kv.put("uncommitted", 1)  # in the overlay only: never in a snapshot
        manifest = snapshot_partition(db.partition, dst)
        kv.put("after", 2)
        db.commit({"kv": 41})  # after the snapshot: not in it
    assert manifest.kind == "partition" and manifest.root == str(dst)
    (cut,) = manifest.partitions
    assert cut.partition == 7 and cut.path == "."  # number from the directory name
    assert cut.stores["kv"].committed_offset == 40 and cut.stores["kv"].entries == 300
    assert cut.stores["ts"].committed_offset == 41
    assert dict(cut.stores["kv"].meta)["value_serde"] == "long"
    assert read_manifest(dst) == manifest
    rows, offset = _items(dst)
    assert offset == 40 and len(rows) == 300
    assert (b"uncommitted", b"\0" * 7 + b"\1") not in rows
    with txstore.open(dst, readonly=True) as snap:
        assert snap.store_names() == ["kv", "ts"]
        assert snap.key_value_store("kv", Serdes.string(), Serdes.long()).get("k00007") == 7


def test_state_dir_snapshot_manifest_and_progress(tmp_path: Path) -> None:
    state, dst = tmp_path / "state", tmp_path / "snap"
    for p in (0, 1, 3):
        _fill(state / str(p), 50 + p, 10 * p + 1, extra=p != 1)
    steps: list[Any] = []
    manifest = snapshot_state_dir(state, dst, progress=steps.append)
    assert [s.partition for s in steps] == [0, 1, 3]
    assert [(s.index, s.total) for s in steps] == [(1, 3), (2, 3), (3, 3)]
    assert manifest.kind == "state_dir" and manifest.source == str(state)
    assert [c.partition for c in manifest.partitions] == [0, 1, 3]
    assert manifest.store_names() == ["kv", "ts"]
    assert "ts" not in manifest.partition(1).stores
    for c in manifest.partitions:
        assert c.path == str(c.partition)
        assert c.data_bytes == (dst / c.path / "data" / "data.mdb").stat().st_size
        rows, offset = _items(manifest.partition_path(c))
        assert len(rows) == 50 + c.partition and offset == 10 * c.partition + 1
    with pytest.raises(InvalidArgumentError, match=r"no partition 2"):
        manifest.partition(2)
    # a subset of partitions
    sub = snapshot_state_dir(state, tmp_path / "sub", partitions=[3])
    assert [c.partition for c in sub.partitions] == [3]
    with pytest.raises(
        InvalidArgumentError, match=r"no partition 5, 6 in .* \(partitions: 0, 1, 3\)"
    ):
        snapshot_state_dir(state, tmp_path / "bad", partitions=[5, 6])


def test_snapshot_files_are_immutable_and_read_only_open_writes_only_the_lock(
    tmp_path: Path,
) -> None:
    src, dst = tmp_path / "0", tmp_path / "snap"
    _fill(src, 20, 3)
    snapshot_partition(src, dst)
    data = dst / "data"
    assert stat.S_IMODE((data / "data.mdb").stat().st_mode) == 0o444
    assert stat.S_IMODE((dst / MANIFEST_NAME).stat().st_mode) == 0o444
    assert (data / "lock.mdb").is_file()  # shipped, so readers need not create it
    before = _digest(dst)
    assert len(_items(dst)[0]) == 20
    with txstore.open(dst, readonly=True) as db:
        assert db.key_value_store("kv", Serdes.string(), Serdes.long()).get("k00001") == 1
    after = _digest(dst)
    changed = {f for f in before if before[f] != after.get(f)} | (set(after) - set(before))
    assert changed <= {os.path.join("data", "lock.mdb")}
    if os.geteuid() != 0:  # root ignores mode bits
        with pytest.raises(StorageError):
            txstore.open(dst)


def test_destination_checks_and_no_partial_snapshot_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "0"
    _fill(src, 10, 1)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(InvalidArgumentError, match="not an empty directory"):
        snapshot_partition(src, busy)
    with pytest.raises(InvalidArgumentError, match="parent directory"):
        snapshot_partition(src, tmp_path / "missing" / "snap")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert snapshot_partition(src, empty).root == str(empty)  # an empty directory is fine

    import txstore.runtime.snapshot as snapshot_mod

    def boom(*args: object) -> None:
        raise StorageError("disk full (simulated)")

    monkeypatch.setattr(snapshot_mod, "_copy_env", boom)
    with pytest.raises(StorageError, match="simulated"):
        snapshot_partition(src, tmp_path / "failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "busy", "empty"]


def test_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not a txstore snapshot"):
        read_manifest(tmp_path)
    assert not is_snapshot(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"format": "txstore-snapshot", "version": 9}))
    with pytest.raises(StorageError, match="version 9 is not supported"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(StorageError, match="cannot read snapshot manifest"):
        read_manifest(tmp_path)
    with pytest.raises(StorageError, match="not a txstore snapshot manifest"):
        Manifest.from_json({"format": "other"})


def test_remove_snapshot(tmp_path: Path) -> None:
    src, dst = tmp_path / "0", tmp_path / "snap"
    _fill(src, 5, 1)
    snapshot_partition(src, dst)
    remove_snapshot(dst)
    assert not dst.exists()
    with pytest.raises(InvalidArgumentError):
        remove_snapshot(src)  # not a snapshot: refused
    assert src.exists()


def test_begin_cut_retries_when_metadata_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "0"
    _fill(src, 5, 1)
    with Partition(src, readonly=True) as p:
        calls = {"n": 0}
        real = p.store_names

        def moving() -> list[str]:
            calls["n"] += 1
            names = real()
            return names if calls["n"] > 1 else names[:1]  # a store "appears" once

        monkeypatch.setattr(p, "store_names", moving)
        snap, cut = begin_cut(p)
        snap.close()
    assert sorted(cut.stores) == ["kv", "ts"] and calls["n"] >= 4


def test_snapshot_while_a_writer_process_commits(tmp_path: Path) -> None:
    """The writer sets every key of "state" to the commit number c and commits offset c (and
    grows its map); each snapshot must hold one whole commit whose number is its offset."""
    path = tmp_path / "state" / "0"
    path.parent.mkdir()
    n_keys = 50
    proc = child.spawn("writer-loop", path, n_keys, 400)
    try:
        child.wait_line(proc, "READY")
        seen = set()
        for i in range(6):
            manifest = snapshot_state_dir(path.parent, tmp_path / f"snap{i}")
            (cut,) = manifest.partitions
            offset = cut.stores["state"].committed_offset
            assert offset is not None
            rows, copied_offset = _items(manifest.partition_path(cut), "state")
            assert copied_offset == offset
            assert len(rows) == n_keys == cut.stores["state"].entries
            assert {v for _, v in rows} == {b"%08d" % offset}
            seen.add(offset)
    finally:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert len(seen) >= 2, "the writer should have committed between snapshots"


def test_cli_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    for p in (0, 2):
        _fill(state / str(p), 10, 5)
    assert cli(["snapshot", str(state), str(tmp_path / "s1")]) == 0
    err = capsys.readouterr().err
    assert "partition 2 (2/2)" in err and "2 partition(s), 2 store(s)" in err
    assert [c.partition for c in read_manifest(tmp_path / "s1").partitions] == [0, 2]
    assert cli(["snapshot", "-q", "--partitions", "2", str(state), str(tmp_path / "s2")]) == 0
    assert capsys.readouterr().err == ""
    assert [c.partition for c in read_manifest(tmp_path / "s2").partitions] == [2]
    assert cli(["snapshot", str(state / "0"), str(tmp_path / "s3")]) == 0
    assert read_manifest(tmp_path / "s3").kind == "partition"
    assert cli(["snapshot", str(state), str(tmp_path / "s1")]) == 2  # a usage error
    assert "not an empty directory" in capsys.readouterr().err
    assert cli(["snapshot", "--help"]) == 0
    assert "manifest.json" in capsys.readouterr().out
