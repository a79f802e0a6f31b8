"""The B-tree page walk of ``data.mdb`` (:mod:`txstore.engine.lmdb_pages`) and when a partition
runs it (the clean-close marker, ``verify=``).

Real LMDB files written by py-lmdb and by txstore, damaged page by page (zeroed, a header byte
flipped, garbled): every damaged page the newest snapshot uses is a
:class:`~txstore.errors.DamagedFileError` naming the file and the page. The SIGABRT case of
issue 15 is reproduced in a child process: with the walk off (``TXSTORE_VERIFY=never``) LMDB's
own assertion kills it; by default the child gets the typed error.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from txstore import (
    Headers,
    Serdes,
    SessionWindow,
    ValueAndTimestamp,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.engine import lmdb_pages
from txstore.engine.lmdb_pages import page_kinds, walk_data_file
from txstore.engine.partition import Partition
from txstore.engine.writer_lock import CLEAN_CLOSE
from txstore.errors import DamagedFileError, InvalidArgumentError
from txstore.runtime.database import Database

from .test_damaged_files import churn_until_short

PSIZE = 4096


def _make_env(path: Path, lib_version: int = 0) -> None:
    """Named databases, overflow values, a 3-level tree (200-byte keys: few per branch page),
    deletes and rewrites (a free-page database with records)."""
    path.mkdir()
    rnd = random.Random(3)
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=8, lib_version=lib_version)
    try:
        wide, big, small = (env.open_db(n) for n in (b"wide", b"big", b"small"))
        for c in range(6):
            with env.begin(write=True) as txn:
                for i in range(c * 600, (c + 1) * 600):
                    txn.put(b"%0200d" % i, rnd.randbytes(60), db=wide)
                for _ in range(15):
                    txn.put(b"b%04d" % rnd.randrange(60), rnd.randbytes(9000), db=big)
                for _ in range(200):
                    txn.put(b"s%05d" % rnd.randrange(5000), rnd.randbytes(20), db=small)
                for i in range(0, c * 600, 7):
                    txn.delete(b"%0200d" % i, db=wide)
    finally:
        env.close()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("walk") / "env"
    _make_env(path)
    return path


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst / "data.mdb"


def test_a_healthy_file_walks_with_every_kind_of_page(healthy: Path) -> None:
    kinds = page_kinds(healthy / "data.mdb")
    seen = {(kind, db) for kind, db in kinds.values()}
    assert ("branch", "database 'wide'") in seen  # below the root: 3 levels
    assert ("overflow", "database 'big'") in seen
    assert ("root", "the free-page database") in seen
    assert ("root", "database 'small'") in seen
    walk = walk_data_file(healthy / "data.mdb")
    env = lmdb.open(str(healthy), readonly=True, max_dbs=8)
    try:
        with env.begin() as txn:
            stats = {n: txn.stat(env.open_db(n, txn=txn)) for n in (b"wide", b"big", b"small")}
        entries = sum(s["entries"] for s in stats.values())
        depth = stats[b"wide"]["depth"]
    finally:
        env.close()
    assert depth == 3
    assert walk.databases == 5 and walk.entries > entries + 3 and walk.free_pages > 0
    overflow = sum(1 for kind, _ in kinds.values() if kind == "overflow")
    assert walk.pages > len(kinds) - overflow + 2 * overflow  # 9000-byte values: 3 pages a run


def _damage(path: Path, pgno: int, how: str, rnd: random.Random) -> None:
    with open(path, "r+b") as f:
        f.seek(pgno * PSIZE)
        page = bytearray(f.read(PSIZE))
        if how == "zero":
            page[:] = bytes(PSIZE)
        elif how == "flip-pgno":
            page[0] ^= 0x40
        elif how == "flip-flags":
            page[10] ^= 0x03  # P_BRANCH <-> P_LEAF
        elif how == "flip-lower":
            page[12] ^= 0x81  # mp_lower (mp_pages on an overflow page)
        else:  # garble: random bytes over the header and the node offsets
            page[8:64] = rnd.randbytes(56)
        f.seek(pgno * PSIZE)
        f.write(page)


TARGETS = [
    ("branch", "database 'wide'"),
    ("leaf", "database 'wide'"),
    ("overflow", "database 'big'"),
    ("root", "database 'small'"),
    ("root", "the free-page database"),
    ("root", "the main database"),
]


@pytest.mark.parametrize("how", ["zero", "flip-pgno", "flip-flags", "flip-lower", "garble"])
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t[0]}:{t[1].split()[-1]}")
def test_each_damaged_page_is_named(
    healthy: Path, tmp_path: Path, target: tuple[str, str], how: str
) -> None:
    kinds = page_kinds(healthy / "data.mdb")
    pages = sorted(p for p, k in kinds.items() if k == target)
    pgno = pages[len(pages) // 2]
    data = _copy(healthy, tmp_path / "env")
    _damage(data, pgno, how, random.Random(pgno))
    with pytest.raises(DamagedFileError, match=rf"page {pgno}\b") as info:
        walk_data_file(data)
    assert info.value.path == str(data)


def test_a_page_reached_twice_or_lost_is_damage(healthy: Path, tmp_path: Path) -> None:
    """A branch node pointing at another leaf: LMDB would read it without complaint (both are
    leaves), the walk sees one page reached twice and another used by nothing."""
    kinds = page_kinds(healthy / "data.mdb")
    leaves = sorted(p for p, k in kinds.items() if k == ("leaf", "database 'wide'"))
    data = _copy(healthy, tmp_path / "env")
    blob = bytearray(data.read_bytes())
    old, new = leaves[3].to_bytes(4, "little"), leaves[4].to_bytes(4, "little")
    branches = [p for p, k in kinds.items() if k == ("branch", "database 'wide'")]
    for b in branches:
        page = blob[b * PSIZE : (b + 1) * PSIZE]
        at = page.find(old[:2] + old[2:4])
        if at >= 16:
            blob[b * PSIZE + at : b * PSIZE + at + 4] = new
            break
    else:
        pytest.fail("no branch node points at the chosen leaf")
    data.write_bytes(bytes(blob))
    with pytest.raises(DamagedFileError, match=rf"page {leaves[4]} is reached twice"):
        walk_data_file(data)


def test_a_file_lmdb_left_short_walks(tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    assert churn_until_short(env_dir, 1)
    walk = walk_data_file(env_dir / "data.mdb")
    assert walk.pages > 0 and walk.free_pages > 0


def test_lmdb_1_0_format_files_are_not_walked(tmp_path: Path) -> None:
    """py-lmdb 3 can write LMDB 1.0's format, whose nodes differ: the walk leaves it to the
    pre-map check rather than misread it."""
    _make_env(tmp_path / "env", lib_version=1)
    assert walk_data_file(tmp_path / "env" / "data.mdb").pages == 0


def test_missing_and_empty_files_walk_nothing(tmp_path: Path) -> None:
    assert walk_data_file(tmp_path / "none.mdb").pages == 0
    (tmp_path / "empty.mdb").write_bytes(b"")
    assert walk_data_file(tmp_path / "empty.mdb").pages == 0


@pytest.mark.parametrize("fmt", ["PLAIN", "TIMESTAMPED", "HEADERS"])
def test_healthy_partitions_of_every_store_kind_walk(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "p"
    with Database(path) as db:
        kv = db.key_value_store("kv", Serdes.string(), Serdes.bytes(), format=ValueFormat[fmt])
        windows = [
            db.window_store(
                name,
                Serdes.string(),
                Serdes.long(),
                window_size=60_000,
                retention_period=600_000,
                retain_duplicates=dups,
            )
            for name, dups in (("win", False), ("dups", True))
        ]
        ses = db.session_store("ses", Serdes.string(), Serdes.long(), retention_period=600_000)
        for i in range(3000):
            value = bytes(50 if i % 97 else 5000)
            if fmt == "TIMESTAMPED":
                kv.put(f"k{i}", ValueAndTimestamp(value, i))
            elif fmt == "HEADERS":
                kv.put(f"k{i}", ValueTimestampHeaders(value, i, Headers([("h", b"x")])))
            else:
                kv.put(f"k{i}", value)
            for win in windows:
                win.put(f"w{i % 50}", i, i * 1000)
            ses.put(Windowed(f"s{i % 40}", SessionWindow(i * 10, i * 10 + 5)), i)
        db.commit({"kv": 1, "win": 1, "dups": 1, "ses": 1})
    walk = walk_data_file(path / "data" / "data.mdb")
    assert walk.entries > 6000 and walk.databases >= 7


# ---- when a partition walks: the clean-close marker and verify= -------------------------------

CHILD = """
import os, signal, sys
from txstore import Serdes
from txstore.errors import TxStoreError
from txstore.runtime.task import Task

def open_task(path):
    task = Task(path, sync=False)
    for name in ("small", "big"):
        task.db.key_value_store(name, Serdes.string(), Serdes.bytes())
    return task

mode, path = sys.argv[1], sys.argv[2]
if mode == "write":  # commit, then die by SIGKILL: no clean close
    task = open_task(path)
    task.initialize()
    small, big = task.store("small"), task.store("big")
    for i in range(4000):
        small.put(f"k{i:05d}", bytes([i % 251]) * 120)
        if i % 100 == 0:
            big.put(f"b{i:05d}", bytes([i % 251]) * 9000)
    task.commit(1)
    os.kill(os.getpid(), signal.SIGKILL)
try:  # read: reopen, recover, read every row
    task = open_task(path)
    task.initialize()
    rows = sum(1 for _ in task.store("small").all()) + sum(1 for _ in task.store("big").all())
    task.close()
except TxStoreError as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
print("rows", rows)
"""


def _child(mode: str, path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task partition whose writer was SIGKILLed after its commit."""
    path = tmp_path_factory.mktemp("crashed") / "task"
    done = _child("write", path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not (path / CLEAN_CLOSE).exists()
    return path


def test_a_zeroed_leaf_was_sigabrt_and_is_now_a_typed_error(crashed: Path, tmp_path: Path) -> None:
    """Issue 15's signal: LMDB's ``IS_LEAF(mp)`` assertion aborts a process that iterates onto
    a zeroed leaf page. Without the walk (``TXSTORE_VERIFY=never``, the behaviour before it)
    the child dies of SIGABRT; by default it gets DamagedFileError naming the page."""
    kinds = page_kinds(crashed / "data" / "data.mdb")
    leaves = sorted(p for p, k in kinds.items() if k == ("leaf", "database 'small'"))
    pgno = leaves[len(leaves) // 2]
    copy = tmp_path / "task"
    shutil.copytree(crashed, copy)
    _damage(copy / "data" / "data.mdb", pgno, "zero", random.Random(0))
    before = _child("read", copy, TXSTORE_VERIFY="never")
    assert before.returncode == -signal.SIGABRT, before.stdout + before.stderr
    assert "IS_LEAF(mp)" in before.stderr
    after = _child("read", copy)
    assert after.returncode == 3, after.stdout + after.stderr
    assert after.stdout.startswith("DamagedFileError")
    assert f"page {pgno} of database 'small'" in after.stdout and "data.mdb" in after.stdout


def test_a_clean_close_leaves_the_marker_and_skips_the_walk(crashed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "task"
    shutil.copytree(crashed, copy)
    with Partition(copy) as part:  # the writer died: walked
        assert part.page_walk is not None and part.page_walk.pages > 0
        assert not (copy / CLEAN_CLOSE).exists()
    assert (copy / CLEAN_CLOSE).exists()
    with Partition(copy, readonly=True) as ro:
        assert ro.page_walk is None
    with Partition(copy) as part:  # closed cleanly: not walked, the marker taken
        assert part.page_walk is None and not (copy / CLEAN_CLOSE).exists()
    with Partition(copy, verify="always") as part:
        assert part.page_walk is not None
    with Partition(copy, readonly=True, verify="always") as ro:
        assert ro.page_walk is not None


def test_verify_modes(crashed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "task"
    shutil.copytree(crashed, copy)
    with Partition(copy, readonly=True) as ro:  # no marker, no live writer: walked
        assert ro.page_walk is not None
    with Partition(copy, verify="never") as part:
        assert part.page_walk is None
    (copy / CLEAN_CLOSE).unlink()
    monkeypatch.setenv("TXSTORE_VERIFY", "never")
    with Partition(copy) as part:
        assert part.page_walk is None
    with pytest.raises(InvalidArgumentError, match="verify must be one of"):
        Partition(copy, verify="sometimes")
    monkeypatch.setenv("TXSTORE_VERIFY", "yes")
    with pytest.raises(InvalidArgumentError, match="TXSTORE_VERIFY must be one of"):
        Partition(copy)


def test_a_damaged_page_found_at_open_leaves_no_marker(crashed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "task"
    shutil.copytree(crashed, copy)
    kinds = page_kinds(copy / "data" / "data.mdb")
    pgno = min(p for p, k in kinds.items() if k == ("overflow", "database 'big'"))
    _damage(copy / "data" / "data.mdb", pgno, "zero", random.Random(0))
    for _ in range(2):  # refused again: the failed open did not mark the partition clean
        with pytest.raises(DamagedFileError, match=rf"page {pgno}\b"):
            Partition(copy)
        assert not (copy / CLEAN_CLOSE).exists()


# ---- the C walk: cycles, depth, truncation, fuzzing, memory ------------------------------------


def _nodes(page: bytes | bytearray) -> list[tuple[int, bytes, int]]:
    """(offset, key, data field) of each node of a branch or leaf page of the 0.9 format; the
    data field of a branch node is its child page."""
    lower = int.from_bytes(page[12:14], "little")
    out = []
    for i in range((lower - 16) // 2):
        at = int.from_bytes(page[16 + 2 * i : 18 + 2 * i], "little")
        lo, hi, flags, ksize = struct.unpack_from("<HHHH", page, at)
        out.append((at, bytes(page[at + 8 : at + 8 + ksize]), lo | hi << 16 | flags << 32))
    return out


def _point_branch_node(data: Path, pgno: int, index: int, child: int) -> None:
    """Make node ``index`` of the branch page ``pgno`` point at page ``child``."""
    with open(data, "r+b") as f:
        f.seek(pgno * PSIZE)
        page = f.read(PSIZE)
        at = _nodes(page)[index][0]
        f.seek(pgno * PSIZE + at)
        f.write(struct.pack("<HHH", child & 0xFFFF, child >> 16 & 0xFFFF, child >> 32))


def test_branch_pages_forming_a_cycle_are_damage(healthy: Path, tmp_path: Path) -> None:
    """A branch node pointing back at the root of its tree, or at its own page: the walk stops
    at the page reached twice instead of going round (LMDB's own cursor would)."""
    kinds = page_kinds(healthy / "data.mdb")
    (root,) = [p for p, k in kinds.items() if k == ("root", "database 'wide'")]
    branches = sorted(p for p, k in kinds.items() if k == ("branch", "database 'wide'"))
    data = _copy(healthy, tmp_path / "up")
    _point_branch_node(data, branches[0], 0, root)
    with pytest.raises(DamagedFileError, match=rf"page {root} is reached twice") as info:
        walk_data_file(data)
    assert f"(again by a branch node of page {branches[0]} of database 'wide')" in str(info.value)
    data = _copy(healthy, tmp_path / "self")
    _point_branch_node(data, branches[1], 1, branches[1])
    with pytest.raises(DamagedFileError, match=rf"page {branches[1]} is reached twice"):
        walk_data_file(data)
    data = _copy(healthy, tmp_path / "root")  # the root's own first node: a one-page cycle
    _point_branch_node(data, root, 0, root)
    with pytest.raises(DamagedFileError, match=rf"page {root} is reached twice"):
        walk_data_file(data)


def _set_depth(data: Path, main_root: int, name: bytes, depth: int) -> None:
    """Set ``md_depth`` in the record of the named database ``name`` (a leaf node of the main
    database's root page)."""
    with open(data, "r+b") as f:
        f.seek(main_root * PSIZE)
        page = f.read(PSIZE)
        ((at, key, _),) = [n for n in _nodes(page) if n[1] == name]
        f.seek(main_root * PSIZE + at + 8 + len(key) + 6)  # MDB_db: md_pad u32, md_flags u16
        f.write(struct.pack("<H", depth))


@pytest.mark.parametrize(
    ("depth", "message"),
    [
        (2, r"page \d+ of database 'wide' is a branch page at depth 2 of 2"),
        (64, r"page \d+ of database 'wide' is a leaf page at depth 3 of 64"),
        (65, r"database 'wide' has root page \d+ but depth 65"),
        (0xFFFF, r"database 'wide' has root page \d+ but depth 65535"),
        (0, r"database 'wide' has root page \d+ but depth 0"),
    ],
)
def test_a_wrong_or_huge_claimed_depth_is_damage(
    healthy: Path, tmp_path: Path, depth: int, message: str
) -> None:
    """The tree of 'wide' is 3 levels deep; its record claims another depth. The walk's stack
    is bounded by the depth it accepts (at most 64, as LMDB's cursor stack is 32)."""
    kinds = page_kinds(healthy / "data.mdb")
    (main_root,) = [p for p, k in kinds.items() if k == ("root", "the main database")]
    data = _copy(healthy, tmp_path / "env")
    _set_depth(data, main_root, b"wide", depth)
    with pytest.raises(DamagedFileError, match=message):
        walk_data_file(data)


def test_a_file_truncated_mid_walk_is_damage(healthy: Path, tmp_path: Path) -> None:
    """The file shrinks after the walk learnt its size (another process truncated it): the
    reads that come back short are damage naming the page; a file cut inside a page in use is
    refused too (by the check before mapping, which the walk runs first)."""
    data = _copy(healthy, tmp_path / "env")
    size = data.stat().st_size
    fd = os.open(data, os.O_RDONLY)
    try:
        os.truncate(data, size // 2)
        with pytest.raises(lmdb_pages._Damage, match=r"page \d+ \(of .*\) is past the end"):
            lmdb_pages._walk(fd, size, str(data))
    finally:
        os.close(fd)
    kinds = page_kinds(healthy / "data.mdb")
    cut = sorted(p for p, k in kinds.items() if k[0] == "leaf")[-1]
    os.truncate(data, cut * PSIZE + PSIZE // 2)
    with pytest.raises(DamagedFileError, match=r"data\.mdb"):
        walk_data_file(data)
    with pytest.raises(DamagedFileError, match=rf"page \d+ \(.*\) is past the end of the file "
                       rf"\({cut} complete pages of {PSIZE} bytes\)"):  # fmt: skip
        page_kinds(data)


FUZZ_CHILD = """
import os, sys
from hypothesis import HealthCheck, given, settings, strategies as st
from txstore.engine import lmdb_pages
from txstore.engine.lmdb_pages import page_kinds, walk_data_file
from txstore.errors import DamagedFileError

src, work, examples, derandomize = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
psize = 4096
live = sorted(page_kinds(src))
original = open(src, "rb").read()
with open(work, "wb") as f:
    f.write(original)
fd = os.open(work, os.O_RDWR)
seen = {"ok": 0, "damaged": 0}
edit = st.tuples(
    st.integers(0, len(live) - 1),
    st.one_of(st.integers(0, 63), st.integers(0, psize - 1)),  # the header and node offsets, often
    st.binary(min_size=1, max_size=48),
)

@settings(max_examples=examples, derandomize=derandomize, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(edit, min_size=1, max_size=6))
def fuzz(edits):
    touched = set()
    for index, at, data in edits:
        os.pwrite(fd, data[: psize - at], live[index] * psize + at)
        touched.add(live[index])
    try:
        walk_data_file(work)
        seen["ok"] += 1
    except DamagedFileError:
        seen["damaged"] += 1
    finally:
        for pg in touched:
            os.pwrite(fd, original[pg * psize : (pg + 1) * psize], pg * psize)

fuzz()
print("outcomes", seen["ok"], seen["damaged"])
"""


def _fuzz(healthy: Path, tmp_path: Path, examples: int, derandomize: bool) -> None:
    """Random bytes written into random pages in use (headers and node offsets more often) of a
    real file, in a child process: each walk succeeds or raises DamagedFileError. Any other
    exception fails the child; a crash of the C code kills the child, not pytest."""
    args = [str(healthy / "data.mdb"), str(tmp_path / "data.mdb"), str(examples)]
    done = subprocess.run(
        [sys.executable, "-c", FUZZ_CHILD, *args, "1" if derandomize else "0"],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    _, ok, damaged = done.stdout.split()
    assert int(damaged) > examples // 4 and int(ok) + int(damaged) >= examples


def test_fuzzed_pages_give_damage_or_success_never_a_crash(healthy: Path, tmp_path: Path) -> None:
    _fuzz(healthy, tmp_path, 250, derandomize=True)


@pytest.mark.slow
def test_fuzzed_pages_give_damage_or_success_never_a_crash_long_run(
    healthy: Path, tmp_path: Path
) -> None:
    _fuzz(healthy, tmp_path, 20_000, derandomize=False)


MEMORY_CHILD = """
import resource, sys
from txstore.engine.lmdb_pages import walk_data_file

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
walk = walk_data_file(sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(walk.bytes, (after - before) * 1024)
"""


def test_the_walk_does_not_hold_the_file_in_memory(tmp_path: Path) -> None:
    """A 64 MiB file walked in a fresh process: its peak memory grows by far less than the
    file (a bitmap of pages, page buffers, the free list), never by the file's size."""
    env = lmdb.open(str(tmp_path), map_size=1 << 30, sync=False)
    rnd = random.Random(5)
    with env.begin(write=True) as txn:
        for i in range(60_000):
            txn.put(b"%016d" % i, rnd.randbytes(1000))
    env.close()
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(tmp_path / "data.mdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    walked, grown = map(int, done.stdout.split())
    assert walked > 60 << 20
    assert grown < 4 << 20, f"the walk's peak memory grew by {grown} bytes"


# ---- key order: within every page, and within the bounds its parent gives it ----------------


def _page(data: Path, pgno: int) -> bytes:
    with open(data, "rb") as f:
        f.seek(pgno * PSIZE)
        return f.read(PSIZE)


def _set_byte(data: Path, offset: int, value: int) -> None:
    with open(data, "r+b") as f:
        f.seek(offset)
        f.write(bytes([value]))


def _wide(healthy: Path) -> tuple[int, list[int], list[int]]:
    """The root, branch and leaf pages of 'wide' (3 levels: root, branches, leaves)."""
    kinds = page_kinds(healthy / "data.mdb")
    (root,) = [p for p, k in kinds.items() if k == ("root", "database 'wide'")]
    branches = sorted(p for p, k in kinds.items() if k == ("branch", "database 'wide'"))
    leaves = sorted(p for p, k in kinds.items() if k == ("leaf", "database 'wide'"))
    return root, branches, leaves


def test_a_key_flipped_out_of_order_within_a_leaf_is_named(healthy: Path, tmp_path: Path) -> None:
    """A digit of a middle key of a leaf of 'wide' (keys ``%0200d``) becomes '9' high up: the
    key now sorts after its right neighbour in the same page. LMDB would serve the row under
    the new key (its binary search lands anywhere); the walk names the page and the nodes."""
    _root, _branches, leaves = _wide(healthy)
    pgno = leaves[len(leaves) // 2]
    data = _copy(healthy, tmp_path / "env")
    nodes = _nodes(_page(data, pgno))
    index = len(nodes) // 2
    at, key, _ = nodes[index]
    assert key[190:191] == b"0" and len(nodes) > index + 1
    _set_byte(data, pgno * PSIZE + at + 8 + 190, ord("9"))
    with pytest.raises(DamagedFileError) as info:
        walk_data_file(data)
    assert str(info.value).startswith(f"damaged file '{data}': page {pgno} of database 'wide' "
                                      f"has keys out of order: the key of node {index + 1} "
                                      f"(offset {nodes[index + 1][0]}) is not above the key of "
                                      f"node {index}")  # fmt: skip
    assert info.value.path == str(data)


def _parent_and_slot(data: Path, branches: list[int], child: int) -> tuple[int, int]:
    for b in branches:
        for i, (_at, _key, pointer) in enumerate(_nodes(_page(data, b))):
            if pointer == child:
                return b, i
    raise AssertionError(f"no branch page of 'wide' points at page {child}")


def test_the_last_key_of_a_leaf_past_its_parents_next_separator_is_caught_by_the_bounds(
    healthy: Path, tmp_path: Path
) -> None:
    """The last key of a leaf grows past everything: still the largest key of its own page
    (in order there), but not below the separator its parent keeps for the next leaf."""
    _root, branches, leaves = _wide(healthy)
    data = _copy(healthy, tmp_path / "env")
    pgno = leaves[3]
    parent, slot = _parent_and_slot(data, branches, pgno)
    siblings = _nodes(_page(data, parent))
    assert slot + 1 < len(siblings), "the chosen leaf is the last child of its parent"
    nodes = _nodes(_page(data, pgno))
    at, key, _ = nodes[-1]
    assert key[190:191] == b"0"
    _set_byte(data, pgno * PSIZE + at + 8 + 190, ord("9"))
    with pytest.raises(DamagedFileError) as info:
        walk_data_file(data)
    assert (f"page {pgno} of database 'wide' has keys out of order: the key of node "
            f"{len(nodes) - 1} (offset {at}) is not below the key of node {slot + 1} of page "
            f"{parent}, the upper bound its parent gives it") in str(info.value)  # fmt: skip


def test_a_flipped_separator_of_a_branch_page_is_caught(healthy: Path, tmp_path: Path) -> None:
    """Two flips of one separator key of a branch page of 'wide': grown past the next separator
    (out of order in the branch page itself); lowered to the last key of the child before it,
    still above the separator before (in order in the branch page), so that child's last key is
    no longer below its upper bound: the child is named, with the separator's page and node."""
    _root, branches, _leaves = _wide(healthy)
    branch = branches[0]
    seps = _nodes(_page(healthy / "data.mdb", branch))
    assert len(seps) >= 4
    data = _copy(healthy, tmp_path / "up")
    at, key, _ = seps[2]
    _set_byte(data, branch * PSIZE + at + 8 + 190, key[190] + 5)
    with pytest.raises(DamagedFileError, match=rf"page {branch} of database 'wide' has keys out "
                       rf"of order: the key of node 3 \(offset {seps[3][0]}\) is not above the "
                       rf"key of node 2"):  # fmt: skip
        walk_data_file(data)
    # Lower separator 2 into child 1's range: a one-byte change of its last digits that keeps
    # it above separator 1 but makes it at most the last key of child 1.
    child = seps[1][2]
    last = _nodes(_page(healthy / "data.mdb", child))[-1][1]
    candidates = [
        (pos, digit)
        for pos in range(180, 200)
        for digit in b"0123456789"
        if seps[1][1] < key[:pos] + bytes([digit]) + key[pos + 1 :] <= last
    ]
    assert candidates, "no one-byte change lowers separator 2 into child 1's keys"
    pos, digit = candidates[0]
    data = _copy(healthy, tmp_path / "down")
    _set_byte(data, branch * PSIZE + at + 8 + pos, digit)
    with pytest.raises(DamagedFileError, match=rf"page {child} of database 'wide' has keys out of "
                       rf"order: the key of node \d+ \(offset \d+\) is not below the key of node "
                       rf"2 of page {branch}, the upper bound its parent gives it"):  # fmt: skip
        walk_data_file(data)


def test_a_flipped_key_that_keeps_every_order_is_not_caught(healthy: Path, tmp_path: Path) -> None:
    """The limit of the check, pinned: the last byte of a leaf key ``...x9`` whose right
    neighbour is ``...(x+1)0`` flipped to 0xb9 (one bit) still sorts between its neighbours.
    Every page is in order, the walk passes, and LMDB serves the row under a key that was never
    written (LMDB keeps no checksums; ``txstore check --deep`` compares rows with the
    changelog)."""
    _root, _branches, leaves = _wide(healthy)
    for pgno in leaves:
        nodes = _nodes(_page(healthy / "data.mdb", pgno))
        for i in range(1, len(nodes) - 1):
            key = nodes[i][1]
            flipped = key[:-1] + bytes([key[-1] ^ 0x80])
            if nodes[i - 1][1] < flipped < nodes[i + 1][1]:
                break
        else:
            continue
        break
    else:
        pytest.fail("no leaf key of 'wide' can be flipped in order")
    data = _copy(healthy, tmp_path / "env")
    at = nodes[i][0]
    _set_byte(data, pgno * PSIZE + at + 8 + len(key) - 1, flipped[-1])
    walk = walk_data_file(data)
    assert walk.pages > 0
    env = lmdb.open(str(data.parent), readonly=True, max_dbs=8, lock=False)
    try:
        with env.begin(db=env.open_db(b"wide", create=False)) as txn:
            assert txn.get(key) is None and txn.get(flipped) is not None
    finally:
        env.close()


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 write transactions while a reader holds an old snapshot: no freed page can be
    reused, so the free-page database keeps one record per transaction, in two levels. Its
    keys are txnids as native integers, past 255: a memcmp of their little-endian bytes would
    put 256 before 255, so a walk comparing them so would refuse this healthy file."""
    path = tmp_path_factory.mktemp("busy") / "env"
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=2, sync=False)
    try:
        db = env.open_db(b"rows")
        with env.begin(write=True) as txn:
            for i in range(2000):
                txn.put(b"r%05d" % i, bytes(40), db=db)
        reader = env.begin()
        try:
            for t in range(2000):
                with env.begin(write=True) as txn:
                    txn.put(b"r%05d" % (t * 7 % 2000), bytes([t % 251]) * 40, db=db)
        finally:
            reader.abort()
    finally:
        env.close()
    return path


def test_the_free_page_database_of_a_busy_file_walks_in_txnid_order(busy: Path) -> None:
    kinds = page_kinds(busy / "data.mdb")
    leaves = [p for p, k in kinds.items() if k == ("leaf", "the free-page database")]
    assert len(leaves) >= 10  # below a branch root: the leaves get bounds from it
    walk = walk_data_file(busy / "data.mdb")
    assert walk.free_pages > 2000


def test_a_free_page_record_key_out_of_order_is_caught(busy: Path, tmp_path: Path) -> None:
    """The high byte of a txnid key in a leaf of the free-page database set: in LMDB's integer
    order (``mdb_cmp_long``) it now sorts after its neighbours; LMDB would hand the pages of
    that record out again at the wrong time."""
    kinds = page_kinds(busy / "data.mdb")
    leaves = sorted(p for p, k in kinds.items() if k == ("leaf", "the free-page database"))
    pgno = leaves[len(leaves) // 2]
    data = _copy(busy, tmp_path / "env")
    nodes = _nodes(_page(data, pgno))
    at, key, _ = nodes[1]
    assert len(key) == 8 and key[7] == 0
    _set_byte(data, pgno * PSIZE + at + 8 + 7, 0x01)
    with pytest.raises(DamagedFileError, match=rf"page {pgno} of the free-page database has keys "
                       rf"out of order: the key of node 2 \(offset {nodes[2][0]}\) is not above "
                       rf"the key of node 1"):  # fmt: skip
        walk_data_file(data)
