"""What may follow the last complete commit of a changelog segment (issue 15).

A crash of the writing process (SIGKILL) leaves the file ending where the writer stopped: after
the last complete commit, complete valid frames of the open transaction, then at most a prefix
of one frame or of the marker pair. That tail is truncated. Bytes the writer never wrote (zeros,
a bad frame header, a complete frame whose checksum fails, a frame of another transaction) are
not a torn tail: they may hide a later commit (``crashtest --damage`` zeroed a page over the
last marker pair of a changelog and recovery took it for a commit that never happened). Opening
the log raises ``ChangelogCorruptionError`` naming the file, the byte position and the first
record offset, writes nothing, and gives the ``truncate`` command that cuts the file at the last
complete commit, for the one other cause (a power loss on a file system that exposes unwritten
blocks).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from txstore.changelog.format import (
    BAD_HEADER,
    HEADER_SIZE,
    TORN,
    Frame,
    FrameReader,
    batch_frame,
    header_prefix_ok,
)
from txstore.changelog.log import ChangelogRecord, FileChangelog
from txstore.changelog.markers import marker_frame, marker_pair_size, read_last_marker
from txstore.changelog.segments import segment_name
from txstore.errors import ChangelogCorruptionError

pytestmark = pytest.mark.filterwarnings("error")

DATA = Path(__file__).parent / "data" / "v1"
SEG0 = segment_name(0)


def records(log: FileChangelog) -> list[ChangelogRecord]:
    with log.read_committed(0) as it:
        return list(it)


def two_commits(path: Path) -> tuple[int, int]:
    """A log of two commits (the second of three record batches, then metadata): returns the
    file size after the first and after the second."""
    with FileChangelog(path, fsync=False, batch_bytes=64) as log:
        log.append_many([(b"a%d" % i, b"x" * i, 100 + i) for i in range(4)])
        log.commit(1, metadata=b"first")
        first = os.path.getsize(path / SEG0)
        log.append_many([(b"b%d" % i, b"y" * 20 if i % 3 else None, 200 + i) for i in range(9)])
        log.commit(2, metadata=b"second")
    return first, os.path.getsize(path / SEG0)


def batch(txn_id: int, base: int, n: int = 2) -> bytes:
    return b"".join(
        batch_frame(
            txn_id,
            base,
            [b"t%d" % i for i in range(n)],
            [b"tail"] * n,
            [7] * n,
            [b""] * n,
            tombstones=False,
            has_headers=False,
            max_timestamp=7,
        )
    )


def refused(log_dir: Path, seg: Path, position: int, offset: int, cut: int) -> str:
    """Opening ``log_dir`` as writer and reader raises ChangelogCorruptionError for ``seg`` at
    ``position`` (records from ``offset``), with the command that cuts it at ``cut``, and
    changes no file. Returns that command."""
    before = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.name != "writer.lock"}
    for readonly in (False, True):
        with pytest.raises(ChangelogCorruptionError) as err:
            FileChangelog(log_dir, fsync=False, readonly=readonly)
        e = err.value
        assert (e.path, e.position, e.offset) == (str(seg), position, offset), str(e)
        assert "after the last complete commit" in str(e)
    after = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.name != "writer.lock"}
    assert after == before
    command = re.search(r"`(truncate -s \d+ \S+)`", str(e))
    assert command is not None and command.group(1) == f"truncate -s {cut} {seg}"
    return command.group(1)


# --------------------------------------------------------------------------- what a crash leaves


def test_a_frame_cut_at_any_byte_is_torn_and_no_prefix_of_zeros_is() -> None:
    """FrameReader.next at the end of the data: a prefix of a real frame (a batch, a marker of
    version 2, a marker of version 1) cut at every byte, inside the header included, is TORN;
    zeros or foreign bytes of every length below a header are BAD_HEADER."""
    v1_marker = (DATA / "log" / segment_name(24)).read_bytes()
    with open(DATA / "log" / segment_name(24), "rb") as f:
        m = read_last_marker(f.fileno(), len(v1_marker))
    assert m is not None and m.version == 1
    frames = [
        batch(5, 10, 3),
        marker_frame(5, 13, 1, 7, 0, b"meta", start_offset=10, txn_start_pos=0),
        v1_marker[m.pos :],
    ]
    for frame in frames:
        for cut in range(1, len(frame)):
            assert _next(frame[:cut]) == TORN, cut
            assert header_prefix_ok(frame[:cut]) == (cut < HEADER_SIZE)
        assert isinstance(_next(frame), Frame)
    rng = random.Random(3)
    for n in range(1, HEADER_SIZE):
        assert _next(b"\0" * n) == BAD_HEADER, n
        assert _next(bytes(rng.randrange(256) for _ in range(n)).replace(b"T", b"t")) == BAD_HEADER
    for bad in (
        b"TXCL" + b"\0" * 5,
        b"TXCL" + b"x" * 7,
        b"TXCLcrc!\x02\x09",
        b"TXCLcrc!\x02\x02\x01",
    ):
        assert _next(bad) == BAD_HEADER, bad


def _next(data: bytes) -> Frame | str:
    fd = os.memfd_create("frame")
    try:
        os.write(fd, data)
        return FrameReader(fd).next()
    finally:
        os.close(fd)


def test_every_cut_of_an_uncommitted_multi_batch_tail_is_truncated(tmp_path: Path) -> None:
    """Cut at every byte after the first commit (three batches and a marker pair of the second:
    complete frames, then the prefix of one), the log reopens at the first commit, writes
    nothing on a read-only open, truncates on a writer's, and goes on."""
    src = tmp_path / "src"
    first, full = two_commits(src)
    with FileChangelog(src, fsync=False) as log:
        kept = [r for r in records(log) if r.offset < 4]
    for length in range(first, full):
        work = tmp_path / "work"
        shutil.copytree(src, work)
        os.truncate(work / SEG0, length)
        with FileChangelog(work, readonly=True) as reader:
            assert reader.committed_end_offset == 4, length
        assert os.path.getsize(work / SEG0) == length
        with FileChangelog(work, fsync=False) as log:
            assert log.last_committed_metadata == b"first" and records(log) == kept, length
            assert os.path.getsize(work / SEG0) == first
            assert log.append(b"next", b"v", 1) == 4
            log.commit(3)
        shutil.rmtree(work)


# --------------------------------------------------------------------------- what no crash leaves


@pytest.mark.parametrize(
    "name",
    ["zeros 1", "zeros 23", "zeros 24", "zeros 4096", "garbage", "flipped crc", "valid then zeros",
     "foreign txn", "out of sequence", "torn foreign txn", "torn out of sequence"],
)  # fmt: skip
def test_bytes_no_crash_leaves_after_the_last_commit_are_refused(tmp_path: Path, name: str) -> None:
    """Each tail below follows the last commit (end offset 13); opening raises
    ChangelogCorruptionError at the first byte no writer wrote, changes nothing, and the
    truncate command of the message, run as given, cuts the file at the last commit: the log
    then opens with everything committed."""
    log_dir = tmp_path / "log"
    _, full = two_commits(log_dir)
    seg = log_dir / SEG0
    good = batch(77, 13)
    position, offset = full, 13
    tail = {
        "zeros 1": b"\0",
        "zeros 23": b"\0" * 23,
        "zeros 24": b"\0" * 24,
        "zeros 4096": b"\0" * 4096,
        "garbage": random.Random(1).randbytes(3000).replace(b"TXCL", b"txcl"),
        "flipped crc": good[:-1] + bytes([good[-1] ^ 1]),
        "valid then zeros": good + b"\0" * 100,
        "foreign txn": good + batch(78, 15),
        "out of sequence": batch(77, 14),
        "torn foreign txn": good + batch(78, 15)[:40],
        "torn out of sequence": good + batch(77, 16)[: HEADER_SIZE + 30],
    }[name]
    if name in ("valid then zeros", "foreign txn", "torn foreign txn", "torn out of sequence"):
        position, offset = full + len(good), 15
    with seg.open("ab") as f:
        f.write(tail)
    command = refused(log_dir, seg, position, offset, full)
    subprocess.run(command, shell=True, check=True)  # the way out, as the message gives it
    with FileChangelog(log_dir, fsync=False) as log:
        assert log.committed_end_offset == 13 and log.last_committed_metadata == b"second"
        assert len(records(log)) == 13
        log._check()


def test_zeros_from_any_byte_of_the_last_commit_to_the_end_are_refused(tmp_path: Path) -> None:
    """crashtest --damage, trial 35 of seed 11: a page zeroed over the last marker pair up to
    the end of the file was taken for a torn tail. Zeros from every byte of the last commit
    (its batches, both marker copies) to the end: refused (or, where the zeros change no byte,
    nothing to refuse). Where the bytes before the zeros hold no complete commit after the
    first, the command cuts at the first commit."""
    log_dir = tmp_path / "log"
    first, full = two_commits(log_dir)
    seg = log_dir / SEG0
    good = seg.read_bytes()
    pair = marker_pair_size(len(b"second"))
    for start in range(first, full):
        bad = good[:start] + b"\0" * (full - start)
        seg.write_bytes(bad)
        if bad == good:
            continue
        with pytest.raises(ChangelogCorruptionError) as err:
            FileChangelog(log_dir, fsync=False)
        assert err.value.path == str(seg) and first <= err.value.position <= full, start
        if bad[: full - pair // 2] != good[: full - pair // 2]:  # no first copy: no commit
            assert f"truncate -s {first} {seg}" in str(err.value), start
        assert seg.read_bytes() == bad
    seg.write_bytes(good)
    with FileChangelog(log_dir, fsync=False) as log:
        assert log.committed_end_offset == 13


def test_a_zeroed_page_over_the_last_marker_pair_of_a_real_segment(tmp_path: Path) -> None:
    """The harness's damage exactly: the 4 KiB page of the file holding the start of the last
    marker pair zeroed up to the end of the file."""
    log_dir = tmp_path / "log"
    with FileChangelog(log_dir, fsync=False) as log:
        for i in range(40):
            log.append_many([(b"k%d" % j, b"v" * 30, i) for j in range(5)])
            log.commit(i + 1, metadata=b'{"seq":%d}' % (i + 1))
    seg = log_dir / SEG0
    data = seg.read_bytes()
    with open(seg, "rb") as f:
        last = read_last_marker(f.fileno(), len(data))
    assert last is not None and len(data) > 4096
    page = last.pos // 4096 * 4096
    assert len(data) <= page + 4096
    seg.write_bytes(data[:page] + b"\0" * (len(data) - page))
    with pytest.raises(ChangelogCorruptionError) as err:
        FileChangelog(log_dir, fsync=False)
    # the first bad frame is the one the page starts in; the last commit before it is intact
    assert err.value.position <= page < err.value.position + 300 and err.value.offset is not None
    cut = re.search(r"`truncate -s (\d+) ", str(err.value))
    assert cut is not None and int(cut.group(1)) <= err.value.position
    assert len(seg.read_bytes()) == len(data)
    with open(seg, "rb") as f:
        kept = read_last_marker(f.fileno(), int(cut.group(1)))
    assert kept is not None and kept.commit_end_pos == int(cut.group(1))


def test_a_zeroed_last_segment_without_a_commit_is_refused(tmp_path: Path) -> None:
    """A segment rolled for the next transaction holds no commit; zeros in it are not what a
    crash leaves either (the file used to be deleted as an uncommitted one)."""
    log_dir = tmp_path / "log"
    with FileChangelog(log_dir, fsync=False, segment_bytes=100) as log:
        log.append(b"a", b"1" * 120, 1)
        log.commit(1)
        log.append(b"b", b"2", 2)
        log.commit(2)
    seg = log_dir / segment_name(1)
    size = seg.stat().st_size
    seg.write_bytes(b"\0" * size)
    command = refused(log_dir, seg, 0, 1, 0)
    subprocess.run(command, shell=True, check=True)
    with FileChangelog(log_dir, fsync=False) as log:
        assert log.committed_end_offset == 1 and not seg.exists()


def test_zeros_after_a_version_1_segment_are_refused(tmp_path: Path) -> None:
    """Files of format 1 follow the same rule (their torn tails are still truncated:
    test_changelog_damage.py)."""
    shutil.copytree(DATA / "log", tmp_path / "log")
    seg = tmp_path / "log" / segment_name(24)
    size = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(b"\0" * 512)
    with FileChangelog(DATA / "log", readonly=True) as log:
        end = log.committed_end_offset
    refused(tmp_path / "log", seg, size, end, size)
