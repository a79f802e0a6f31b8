"""A damaged ``data.mdb`` is a typed error in every path that opens an environment, never a
signal (issue 15, item 3).

LMDB maps the data file and reads pages through the map: a file truncated below the pages its
meta page names used to kill the process with SIGBUS at the first read of a missing page (a
writable open, a read-only one, ``txstore stat/check/dump``, a snapshot, the Spark reader's
planning). Each case runs in a child process, which must exit normally having caught
:class:`~txstore.errors.DamagedFileError`. A file that LMDB itself leaves shorter than its last
page (the missing pages are free: "the file may be shorter if the freeDB lists the final
pages", mdb.c) must still open.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

import txstore
from txstore.engine.lmdb_files import check_data_file
from txstore.errors import DamagedFileError, StorageError

ROOT = str(Path(__file__).resolve().parents[2])

CHILD = r"""
import os, sys
action, path = sys.argv[1], sys.argv[2]

def run():
    import txstore
    from txstore.engine.partition import Partition
    if action in ("open", "open-readonly"):
        with txstore.open(path, readonly=action == "open-readonly") as db:
            for name in db.store_names():
                store = db.key_value_store(name)
                with store.all() as it:
                    sum(1 for _ in it)
    elif action == "partition-readonly":
        with Partition(path, readonly=True) as p:
            for name in p.store_names():
                with p.snapshot() as snap:
                    snap.count(p.db_name(name))
    elif action == "snapshot":
        from txstore.runtime.snapshot import snapshot_partition
        snapshot_partition(path, sys.argv[3])
    elif action == "spark-plan":
        from txstore.spark.plan import open_source, store_metas
        store_metas(open_source(path))
    elif action == "check-file":
        from txstore.engine.lmdb_files import check_data_file
        check_data_file(os.path.join(path, "data.mdb"), True)
        import lmdb
        env = lmdb.open(path, readonly=True, max_dbs=16, lock=False)
        with env.begin() as txn:  # read every page a database uses
            names = list(txn.cursor().iternext(values=False))
            sum(len(v) for v in txn.cursor().iternext(keys=False))
            for name in names:
                try:  # a named database, or a key of the main database
                    db = env.open_db(name, txn=txn, create=False)
                except lmdb.Error:
                    continue
                sum(len(v) for v in txn.cursor(db).iternext(keys=False))
        env.close()
    else:
        raise SystemExit(f"unknown action {action}")

try:
    run()
    print("OK")
except Exception as exc:
    print(type(exc).__name__)
    print(exc)
"""


def run_child(*args: object) -> tuple[str, str]:
    """Run CHILD with ``args``: (the exception class name or "OK", its message). The child must
    exit normally: a signal (SIGBUS) fails the test."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise AssertionError(f"child died of {name}: {proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    return lines[0], "\n".join(lines[1:])


def make_partition(path: Path, rows: int = 2000) -> int:
    """A partition with one store of ``rows`` 100-byte values; the size of its data.mdb."""
    with txstore.open(path) as db:
        store: txstore.KeyValueStore[bytes, bytes] = db.key_value_store("s")
        store.put_all([(b"k%06d" % i, b"v" * 100) for i in range(rows)])
        db.commit({"s": 1})
    return os.path.getsize(path / "data" / "data.mdb")


def truncated_copy(src: Path, dest: Path, size: int) -> Path:
    shutil.copytree(src, dest)
    os.truncate(dest / "data" / "data.mdb", size)
    return dest


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("damaged") / "p"
    return path, make_partition(path)


SIZES = [100, 4096, 8192, 12288, 16384, 65536, -4096, -1]
"""Truncation sizes; negative: that many bytes short of the file's size."""


@pytest.mark.parametrize("action", ["open", "open-readonly", "partition-readonly", "spark-plan"])
@pytest.mark.parametrize("size", SIZES)
def test_truncated_data_file_is_a_typed_error_in_every_open(
    tmp_path: Path, source: tuple[Path, int], action: str, size: int
) -> None:
    src, full = source
    path = truncated_copy(src, tmp_path / "p", size if size > 0 else full + size)
    before = sorted(os.listdir(path / "data"))
    kind, message = run_child(action, path)
    assert kind == "DamagedFileError", message
    assert str(path / "data" / "data.mdb") in message
    assert "truncated" in message or "ends inside meta page" in message
    assert sorted(os.listdir(path / "data")) == before  # nothing created, nothing changed
    if "truncated" in message:
        assert os.path.getsize(path / "data" / "data.mdb") == (size if size > 0 else full + size)


def test_damaged_file_error_is_a_storage_error(tmp_path: Path, source: tuple[Path, int]) -> None:
    path = truncated_copy(source[0], tmp_path / "p", 8192)
    with pytest.raises(DamagedFileError) as info:  # the check alone: it never maps the file
        check_data_file(str(path / "data" / "data.mdb"), True)
    assert isinstance(info.value, StorageError)
    assert info.value.path == str(path / "data" / "data.mdb")
    assert "truncated" in info.value.reason


def test_snapshot_of_a_damaged_partition_and_a_damaged_snapshot(
    tmp_path: Path, source: tuple[Path, int]
) -> None:
    damaged = truncated_copy(source[0], tmp_path / "p", 12288)
    kind, message = run_child("snapshot", damaged, tmp_path / "snap-of-damaged")
    assert kind == "DamagedFileError", message
    # a good snapshot whose copy was truncated afterwards
    kind, message = run_child("snapshot", source[0], tmp_path / "snap")
    assert kind == "OK", message
    data = tmp_path / "snap" / "data" / "data.mdb"
    os.chmod(data, 0o644)
    os.truncate(data, 8192)
    # planning a Spark read of a snapshot reads its manifest only; its executors open the
    # copy as a read-only Partition (txstore.spark.reader.read_task)
    for action in ("open-readonly", "partition-readonly"):
        kind, message = run_child(action, tmp_path / "snap")
        assert kind == "DamagedFileError", (action, message)


@pytest.mark.parametrize("command", ["stat", "check", "dump", "offsets"])
def test_admin_commands_report_a_damaged_file(
    tmp_path: Path, source: tuple[Path, int], command: str
) -> None:
    path = truncated_copy(source[0], tmp_path / "p", 8192)
    args = [str(path), "s"] if command == "dump" else [str(path)]
    proc = subprocess.run(
        [sys.executable, "-m", "txstore", command, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=ROOT,
    )
    assert proc.returncode > 0, (proc.returncode, proc.stderr[-2000:])  # not a signal
    assert "damaged file" in proc.stdout + proc.stderr


def test_empty_data_file_is_damaged_for_a_reader(tmp_path: Path) -> None:
    """An empty data.mdb can only be initialized by a writer; a reader calls it damaged (a
    writer's open of a directory that held data is refused one level up, see
    tests/runtime/test_damaged_partition.py)."""
    make_partition(tmp_path / "p", 10)
    os.truncate(tmp_path / "p" / "data" / "data.mdb", 0)
    kind, message = run_child("partition-readonly", tmp_path / "p")
    assert kind == "DamagedFileError" and "empty" in message
    kind, message = run_child("open-readonly", tmp_path / "p")
    assert kind == "PartitionDataLostError" and "empty" in message


@pytest.mark.parametrize(
    ("offset", "data", "reason"),
    [
        (16, b"\0\0\0\0", "magic"),  # meta page 0's magic number
        (20, b"\x07\0\0\0", "format version 7"),
        (4096 + 16, b"\0\0\0\0", "magic"),  # meta page 1's
        (40, b"\x00\x30\0\0", "page size"),  # 12288: not a power of two
    ],
)
def test_unreadable_meta_pages(
    tmp_path: Path, source: tuple[Path, int], offset: int, data: bytes, reason: str
) -> None:
    path = tmp_path / "p"
    shutil.copytree(source[0], path)
    with open(path / "data" / "data.mdb", "r+b") as f:
        f.seek(offset)
        f.write(data)
    for action in ("open", "open-readonly"):
        kind, message = run_child(action, path)
        assert kind == "DamagedFileError", message
        assert reason in message


# ---- files LMDB leaves shorter than their last page -----------------------------------------


def churn_until_short(path: Path, seed: int, lib_version: int = 0) -> bool:
    """Random puts, deletes and drops in the LMDB environment ``path`` until a commit leaves
    the file shorter than its meta page's last page (its final pages free and never written);
    True when one did (within 400 commits)."""
    rnd = random.Random(seed)
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=8, lib_version=lib_version)
    try:
        dbs = [env.open_db(b"d%d" % i) for i in range(5)]
        for _ in range(400):
            with env.begin(write=True) as txn:
                op, db = rnd.random(), rnd.choice(dbs)
                if op < 0.5:
                    for _ in range(rnd.randint(1, 500)):
                        value = rnd.randbytes(rnd.choice([10, 100, 1000, 3000]))
                        txn.put(rnd.randbytes(8), value, db=db)
                elif op < 0.9:
                    keys = list(txn.cursor(db).iternext(values=False))
                    for k in rnd.sample(keys, min(len(keys), rnd.randint(1, 800))):
                        txn.delete(k, db=db)
                else:
                    txn.drop(db, delete=False)
            info, size = env.info(), os.path.getsize(path / "data.mdb")
            if size < (info["last_pgno"] + 1) * env.stat()["psize"]:
                return True
        return False
    finally:
        env.close()


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_a_file_lmdb_left_short_still_opens(tmp_path: Path, seed: int) -> None:
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    assert churn_until_short(env_dir, seed)
    check_data_file(str(env_dir / "data.mdb"), True)
    kind, message = run_child("check-file", env_dir)
    assert kind == "OK", message


def test_a_short_file_under_a_partition_opens(tmp_path: Path) -> None:
    """The same through txstore's own open: a partition whose environment LMDB left short."""
    path = tmp_path / "p"
    make_partition(path, 10)
    assert churn_until_short(path / "data", 1)
    kind, message = run_child("open", path)
    assert kind == "OK", message
    with txstore.open(path) as db:
        store: txstore.KeyValueStore[bytes, bytes] = db.key_value_store("s")
        assert store.get(b"k000003") == b"v" * 100


def test_truncating_pages_that_hold_data_of_a_short_file(tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    assert churn_until_short(env_dir, 1)
    size = os.path.getsize(env_dir / "data.mdb")
    os.truncate(env_dir / "data.mdb", size - 4096 * 8)
    with pytest.raises(DamagedFileError, match="truncated"):
        check_data_file(str(env_dir / "data.mdb"), True)


def test_lmdb_1_0_format_files_are_checked_too(tmp_path: Path) -> None:
    """py-lmdb 3 also writes LMDB 1.0's format (24-byte page headers, format version 3)."""
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    env = lmdb.open(str(env_dir), map_size=1 << 30, lib_version=1)
    with env.begin(write=True) as txn:
        for i in range(3000):
            txn.put(b"%08d" % i, b"x" * 200)
    env.close()
    check_data_file(str(env_dir / "data.mdb"), True)
    kind, message = run_child("check-file", env_dir)
    assert kind == "OK", message
    os.truncate(env_dir / "data.mdb", 12288)
    with pytest.raises(DamagedFileError, match="truncated"):
        check_data_file(str(env_dir / "data.mdb"), True)


def test_missing_file_passes_and_empty_file_passes_for_a_writer(tmp_path: Path) -> None:
    check_data_file(str(tmp_path / "nope" / "data.mdb"), True)
    (tmp_path / "data.mdb").touch()
    check_data_file(str(tmp_path / "data.mdb"), False)
    with pytest.raises(DamagedFileError, match="empty"):
        check_data_file(str(tmp_path / "data.mdb"), True)
