"""Torn tails told from damaged committed data (changelog format 2), on real files.

A crash leaves the file ending inside the last transaction, at worst inside the second copy of
its commit marker: that tail is truncated. Any other change to the bytes of a committed
transaction, down to one flipped bit in the last commit marker, raises
``ChangelogCorruptionError`` naming the file, the byte and the record offset, and leaves every
file as it was. Files written by format version 1 stay readable.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from txstore.changelog.format import HEADER_SIZE, T_BATCH, T_MARKER, Frame, FrameReader
from txstore.changelog.log import ChangelogRecord, CommitInfo, FileChangelog
from txstore.changelog.markers import marker_pair_size, read_last_marker
from txstore.changelog.segments import segment_name
from txstore.errors import ChangelogCorruptionError, ConfigConflictError, StorageError

pytestmark = pytest.mark.filterwarnings("error")

DATA = Path(__file__).parent / "data" / "v1"
SEG0 = "00000000000000000000.log"


def files(path: Path) -> dict[str, bytes]:
    """Every file of a changelog directory but the lock, by name."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name != "writer.lock"}


def records(log: FileChangelog, from_offset: int = 0) -> list[ChangelogRecord]:
    with log.read_committed(from_offset) as it:
        return list(it)


def four_commits(path: Path, **kw: object) -> list[int]:
    """Four transactions in one segment (records with headers and tombstones, an empty commit
    with metadata, a last one with records); returns the file size after each commit."""
    sizes = []
    with FileChangelog(path, fsync=False, **kw) as log:  # type: ignore[arg-type]
        log.append_many([(b"a%d" % i, b"x" * i, 100 + i, b"\x02\x02h\x01") for i in range(5)])
        log.commit(1)
        sizes.append(os.path.getsize(path / SEG0))
        log.append_many([(b"b", None, 200), (b"c", b"yy", 201)])
        log.commit(2, metadata=b'{"seq":2}')
        sizes.append(os.path.getsize(path / SEG0))
        log.commit(3, metadata=b"empty")
        sizes.append(os.path.getsize(path / SEG0))
        log.append_many([(b"d", b"zzz", 300), (b"e", None, 301, b"\x02\x02h\x00")])
        log.commit(4, metadata=b"last")
        sizes.append(os.path.getsize(path / SEG0))
    return sizes


def test_every_flipped_byte_of_a_committed_segment_raises_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """One flipped byte anywhere in the active segment, in a record batch, a marker's first or
    second copy, a header, a checksum, the last commit's marker included: opening the log (as
    writer or reader) raises ChangelogCorruptionError naming the segment, and no file changes.
    (Format 1 truncated the last transaction when its marker was the damaged frame.)"""
    log_dir = tmp_path / "log"
    sizes = four_commits(log_dir)
    seg = log_dir / SEG0
    good = seg.read_bytes()
    assert len(good) == sizes[-1]
    names = sorted(os.listdir(log_dir))
    fd = os.open(seg, os.O_RDWR)
    try:
        for mask in (0x40, 0xFF):
            for pos in range(len(good)):
                os.pwrite(fd, bytes([good[pos] ^ mask]), pos)
                # (a reader looks 5 times over 0.1 s before it calls a scan corrupt: sampled)
                for readonly in (False, True) if pos % 113 == 0 else (False,):
                    with pytest.raises(ChangelogCorruptionError) as err:
                        FileChangelog(log_dir, fsync=False, readonly=readonly)
                    assert err.value.path == str(seg), (mask, pos)
                    assert 0 <= err.value.position <= len(good)
                    assert str(seg) in str(err.value)
                    changed = os.pread(fd, len(good) + 1, 0)
                    assert changed[pos] == good[pos] ^ mask, f"byte {pos} ^ {mask:#x}"
                    assert changed[:pos] + changed[pos + 1 :] == good[:pos] + good[pos + 1 :]
                    assert sorted(os.listdir(log_dir)) == names
                os.pwrite(fd, good[pos : pos + 1], pos)
    finally:
        os.close(fd)
    with FileChangelog(log_dir, fsync=False) as log:
        assert log.last_committed_input_position == 4 and log.committed_end_offset == 9


def test_damage_in_the_last_commit_marker_names_the_copy_and_the_records(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    sizes = four_commits(log_dir)
    seg = log_dir / SEG0
    good = seg.read_bytes()
    pair = marker_pair_size(len(b"last"))
    first, second = len(good) - pair, len(good) - pair // 2
    with open(seg, "rb") as f:
        marker = read_last_marker(f.fileno(), len(good))
    assert marker is not None and (marker.pos, marker.commit_end_pos) == (first, len(good))
    assert (marker.start_offset, marker.end_offset, marker.txn_start_pos) == (7, 9, sizes[2])
    cases = [
        # a bit of the first copy's metadata: its checksum fails, the second copy is valid
        (first + HEADER_SIZE + 52, first, f"checksum mismatch in {seg} at byte {first} "
         f"(records from offset 9 on); the commit marker at byte {second} makes it committed"),
        # the first copy's magic: the frame chain breaks, the search finds the second copy
        (first, first, f"a bad frame header (magic, version, type, flags or length) in {seg} "
         f"at byte {first} (records from offset 9 on); the commit marker at byte {second}"),
        # the second copy's end_offset
        (second + HEADER_SIZE, second, f"the second copy of the commit marker at byte {first} "
         f"differs from the first in {seg} at byte {second} (records from offset 7 on); this "
         "is committed data"),
    ]  # fmt: skip
    for flipped, position, message in cases:
        bad = bytearray(good)
        bad[flipped] ^= 0x10
        seg.write_bytes(bytes(bad))
        with pytest.raises(ChangelogCorruptionError) as err:
            FileChangelog(log_dir, fsync=False)
        assert message in str(err.value)
        assert err.value.position == position
        assert seg.read_bytes() == bytes(bad)


def test_a_torn_marker_pair_is_truncated_to_the_commit_before(tmp_path: Path) -> None:
    """Cut anywhere inside the last commit's marker pair, the second copy included (a crash
    while the pair was written: the commit never returned), the log opens at the commit before
    it, truncates the tail and goes on. Cut inside the second copy and followed by other
    bytes, it is damage."""
    src = tmp_path / "src"
    sizes = four_commits(src)
    pair = marker_pair_size(len(b"last"))
    with FileChangelog(src, fsync=False) as log:
        before_last = records(log)[:7]
    work = tmp_path / "work"
    for length in range(sizes[-1] - pair, sizes[-1]):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name, data in files(src).items():
            (work / name).write_bytes(data[:length] if name == SEG0 else data)
        with FileChangelog(work, readonly=True) as reader:  # a reader sees the commit before
            assert reader.committed_end_offset == 7 and records(reader) == before_last
        assert os.path.getsize(work / SEG0) == length  # ...and writes nothing
        with FileChangelog(work, fsync=False) as log:
            assert log.recovered is not None and log.recovered.truncated_bytes > 0
            assert os.path.getsize(work / SEG0) == sizes[2]
            assert log.last_committed_input_position == 3 and records(log) == before_last
            assert log.append(b"f", b"new", 400) == 7
            assert log.commit(5) == CommitInfo(7, 8, 5)
            log._check()
    # the second copy cut short but not at the end of the file: damage
    work = tmp_path / "spliced"
    shutil.copytree(src, work)
    data = (work / SEG0).read_bytes()
    (work / SEG0).write_bytes(data[: -pair // 4] + b"\xaa" * 3)
    with pytest.raises(ChangelogCorruptionError, match="second copy"):
        FileChangelog(work, fsync=False)


def test_a_damaged_closed_segment_marker_is_reported_at_open(tmp_path: Path) -> None:
    with FileChangelog(tmp_path, segment_bytes=200, fsync=False) as log:
        for i in range(5):
            log.append(b"k", b"v" * 60, i)
            log.commit(i)
    names = sorted(p.name for p in tmp_path.glob("*.log"))
    assert len(names) >= 3
    closed = tmp_path / names[1]
    size = closed.stat().st_size
    for pos in (size - 1, size - marker_pair_size(0) // 2 - 10):  # second copy, first copy
        data = bytearray(closed.read_bytes())
        data[pos] ^= 0x04
        closed.write_bytes(bytes(data))
        with pytest.raises(ChangelogCorruptionError, match="does not end with a valid commit"):
            FileChangelog(tmp_path, fsync=False)
        data[pos] ^= 0x04
        closed.write_bytes(bytes(data))
    with FileChangelog(tmp_path, fsync=False) as log:
        assert log.verify() == 5


# --------------------------------------------------------------------------- format version 1


def v1_expected() -> dict[str, object]:
    doc: dict[str, object] = json.loads((DATA / "log.json").read_text())
    return doc


def v1_records() -> list[ChangelogRecord]:
    rows = v1_expected()["records"]
    assert isinstance(rows, list)
    return [
        ChangelogRecord(o, bytes.fromhex(k), None if v is None else bytes.fromhex(v), t,
                        bytes.fromhex(h))
        for o, k, v, t, h in rows
    ]  # fmt: skip


def test_version_1_files_are_read_as_written_and_upgraded_by_the_first_write(
    tmp_path: Path,
) -> None:
    work = tmp_path / "log"
    shutil.copytree(DATA / "log", work)
    original = files(work)
    doc = v1_expected()
    for readonly in (True, False):
        with FileChangelog(work, readonly=readonly, fsync=False) as log:
            assert records(log) == v1_records()
            assert log.committed_end_offset == doc["committed_end_offset"]
            assert log.log_start_offset == doc["log_start_offset"]
            assert log.last_committed_input_position == doc["last_committed_input_position"]
            assert log.last_committed_metadata.decode() == doc["last_committed_metadata"]
            last = log.last_commit()
            assert last is not None and last.end_offset == doc["committed_end_offset"]
            log.verify()
    assert files(work) == original  # reading and opening wrote nothing
    end = doc["committed_end_offset"]
    assert isinstance(end, int)
    with FileChangelog(work, fsync=False, segment_bytes=600) as log:
        log.append(b"new", b"1", 5000)
        log.commit(999, metadata=b"v2")
        assert log.last_commit() == CommitInfo(end, end + 1, 999)
        log._check()
    meta = json.loads((work / "changelog.json").read_text())
    assert meta["version"] == 2  # a txstore that reads version 1 only refuses it now
    with FileChangelog(work, fsync=False, segment_bytes=600) as log:
        assert records(log) == [*v1_records(), ChangelogRecord(end, b"new", b"1", 5000, b"")]
        assert log.last_committed_metadata == b"v2"
        # the version 2 commit appended to a version 1 segment rolls back to it exactly
        assert log.rollback_last_commit() == CommitInfo(end, end + 1, 999)
        assert log.last_committed_metadata.decode() == doc["last_committed_metadata"]
        assert records(log) == v1_records()
        log.clean(now_ms=10**13, force=True)  # compaction rewrites version 1 segments
        log._check()
    assert {n: b for n, b in files(work).items() if n != "changelog.json"} != {
        n: b for n, b in original.items() if n != "changelog.json"
    }
    with FileChangelog(work, fsync=False) as log:
        rows = records(log)
        assert {r.key: r.value for r in rows} == {r.key: r.value for r in v1_records()}
        assert log.verify() == len(rows)


def test_a_torn_version_1_tail_is_still_truncated(tmp_path: Path) -> None:
    """Format 1 has one copy of each marker: the last transaction cut anywhere is a torn tail
    (as it always was)."""
    last = DATA / "log" / segment_name(24)
    with open(last, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        before = read_last_marker(f.fileno(), size)
    assert before is not None and before.version == 1
    # the last commit starts where the marker before it ends
    with open(last, "rb") as f:
        reader = FrameReader(f.fileno())
        frames = []
        while isinstance(frame := reader.next(), Frame):
            frames.append(frame)
        previous = read_last_marker(f.fileno(), frames[-3].end)
    assert [fr.ftype for fr in frames[-3:]] == [T_MARKER, T_BATCH, T_MARKER]
    assert previous is not None and previous.metadata == b"commit 11"
    commit_start = frames[-3].end
    expected = [r for r in v1_records() if r.offset < previous.end_offset]
    assert len(expected) == len(v1_records()) - 3  # commit 12 holds 3 records
    for length in range(commit_start, size):
        work = tmp_path / f"cut{length}"
        shutil.copytree(DATA / "log", work)
        os.truncate(work / last.name, length)
        with FileChangelog(work, fsync=False) as log:
            assert log.last_committed_metadata == b"commit 11", length
            assert records(log) == expected
        shutil.rmtree(work)


def test_a_newer_format_version_is_refused_with_its_number(tmp_path: Path) -> None:
    shutil.copytree(DATA / "log", tmp_path / "log")
    meta_path = tmp_path / "log" / "changelog.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(dict(meta, version=3)))
    with pytest.raises(ConfigConflictError, match=r"version 3; this txstore reads versions 1, 2"):
        FileChangelog(tmp_path / "log")
    with pytest.raises(ConfigConflictError, match="version 3"):
        FileChangelog(tmp_path / "log", readonly=True)


# --------------------------------------------------------------------------- write failures


@contextmanager
def failing(
    monkeypatch: pytest.MonkeyPatch, name: str, fd: Callable[[], int], after: int, err: int
) -> Iterator[None]:
    """Make ``os.<name>`` (``writev`` or ``fdatasync``) on the file descriptor ``fd()`` fail
    with ``err`` from its ``after``-th call on. The failing ``writev`` writes half of its bytes
    first and fails on the rest (which the log writes with ``os.write``), as a full disk does.
    Every other call goes to the real function: this injects a failing write, nothing else."""
    real_writev, real_write, real_sync = os.writev, os.write, os.fdatasync
    calls = [0]

    def writev(target: int, parts: list[bytes]) -> int:
        if target != fd():
            return real_writev(target, parts)
        calls[0] += 1
        if calls[0] < after:
            return real_writev(target, parts)
        data = b"".join(parts)
        return real_write(target, data[: len(data) // 2]) if len(data) > 1 else 0

    def write(target: int, data: bytes) -> int:
        if target == fd() and calls[0] >= after:
            raise OSError(err, os.strerror(err))
        return real_write(target, data)

    def fdatasync(target: int) -> None:
        if target == fd():
            calls[0] += 1
            if calls[0] >= after:
                raise OSError(err, os.strerror(err))
        real_sync(target)

    if name == "writev":
        monkeypatch.setattr(os, "writev", writev)
        monkeypatch.setattr(os, "write", write)
    else:
        monkeypatch.setattr(os, "fdatasync", fdatasync)
    try:
        yield
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize(
    ("name", "after", "what"),
    [("writev", 1, "batch"), ("writev", 2, "marker"), ("fdatasync", 1, "sync of the records"),
     ("fdatasync", 2, "sync of the marker")],
)  # fmt: skip
def test_a_failed_write_or_sync_refuses_further_writes_and_reopening_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, after: int, what: str
) -> None:
    log = FileChangelog(tmp_path)
    log.append_many([(b"k%d" % i, b"v", i) for i in range(3)])
    log.commit(1)
    committed = files(tmp_path)
    log.append_many([(b"n%d" % i, b"w" * 100, i) for i in range(3)])
    with (
        failing(monkeypatch, name, lambda: log._fd, after, errno.ENOSPC),
        pytest.raises(StorageError, match="No space left"),
    ):
        log.commit(2)
    assert log.broken is not None
    for write in (lambda: log.commit(2), lambda: log.append(b"x", b"y", 1), log.abort):
        with pytest.raises(StorageError, match="unusable after an I/O error"):
            write()
    log.close()
    assert files(tmp_path) == committed, what  # the failed transaction was truncated away
    with FileChangelog(tmp_path) as log:
        assert log.last_committed_input_position == 1 and log.committed_end_offset == 3
        log.append(b"after", b"1", 9)
        assert log.commit(2) == CommitInfo(3, 4, 2)


def test_a_segment_file_that_cannot_be_created_is_a_storage_error(tmp_path: Path) -> None:
    """Rolling to a new segment creates a file; if that fails (here: a file of that name is in
    the way), the log raises StorageError and refuses writes, rather than an OSError that
    leaves it writable."""
    log = FileChangelog(tmp_path, segment_bytes=100)
    log.append(b"k", b"v" * 200, 1)
    log.commit(1)
    (tmp_path / segment_name(1)).write_bytes(b"in the way")
    log.append(b"k2", b"v", 2)
    with pytest.raises(StorageError, match="write failed"):
        log.commit(2)
    with pytest.raises(StorageError, match="unusable"):
        log.commit(2)
    log.close()
    # The stray file holds no commit, but no crash of the writer leaves its bytes either: it is
    # refused, not deleted (it was deleted before the tail rule of test_changelog_tail.py).
    stray = tmp_path / segment_name(1)
    with pytest.raises(ChangelogCorruptionError, match=f"truncate -s 0 {stray}`") as err:
        FileChangelog(tmp_path)
    assert (err.value.path, err.value.position, err.value.offset) == (str(stray), 0, 1)
    assert stray.read_bytes() == b"in the way"
    os.truncate(stray, 0)  # the way out the message gives
    with FileChangelog(tmp_path) as log:  # an empty last segment holds no commit: removed
        assert log.committed_end_offset == 1
        assert sorted(p.name for p in tmp_path.glob("*.log")) == [SEG0]


def test_a_damaged_cleanup_policy_in_changelog_json_names_the_file(tmp_path: Path) -> None:
    """crashtest --damage: a flipped byte in changelog.json ('compact,deleve') raised an
    InvalidArgumentError about the cleanup_policy argument, naming no file."""
    from txstore.changelog.log import CleanupPolicy, FileChangelog
    from txstore.errors import ConfigConflictError

    with FileChangelog(tmp_path / "c", cleanup_policy=CleanupPolicy.COMPACT_DELETE) as log:
        log.append(b"k", b"v", 1, b"")
        log.commit(1)
    meta = tmp_path / "c" / "changelog.json"
    meta.write_bytes(meta.read_bytes().replace(b"compact,delete", b"compact,deleve"))
    with pytest.raises(ConfigConflictError, match=r"changelog\.json is damaged"):
        FileChangelog(tmp_path / "c")


def segmented(path: Path, policy: str = "compact") -> list[str]:
    """Ten one-record commits, a segment each (timestamps 1000, 2000, ...); the segment names."""
    with FileChangelog(path, cleanup_policy=policy, segment_bytes=1, fsync=False) as log:
        for i in range(10):
            log.append(b"k%d" % i, b"v%d" % i, 1000 * (i + 1), b"")
            log.commit(i + 1)
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def test_a_deleted_oldest_segment_is_refused_not_read_as_a_shorter_log(tmp_path: Path) -> None:
    """crashtest --damage seed 1: deleting the first segment of a key-value (compacted)
    changelog left a log that started later, and an in-memory store restored from it lost the
    keys that segment held. The log start is in changelog.json: a missing oldest segment is
    ChangelogCorruptionError for the writer and for a reader, and no file changes."""
    log_dir = tmp_path / "log"
    names = segmented(log_dir)
    assert len(names) >= 5
    assert json.loads((log_dir / "changelog.json").read_text())["log_start"] == 0
    (log_dir / names[0]).unlink()
    before = files(log_dir)
    for readonly in (False, True):
        with pytest.raises(ChangelogCorruptionError, match=r"offsets \[0, 1\) are missing"):
            FileChangelog(log_dir, readonly=readonly)
    assert files(log_dir) == before


def test_retention_records_the_log_start_before_it_deletes(tmp_path: Path) -> None:
    """A window store's changelog (compact,delete) deletes expired segments: the new start is
    recorded first, so the log opens from it; a segment a crash kept between the record and the
    deletions is removed by the next open; a damaged log_start is ConfigConflictError."""
    log_dir = tmp_path / "log"
    names = segmented(log_dir, "compact,delete")
    kept = (log_dir / names[0]).read_bytes()
    with FileChangelog(log_dir, retention_ms=3500, fsync=False) as log:
        assert log.clean(now_ms=10_000).deleted_segments == 6  # max timestamps 1000..6000
        assert log.log_start_offset == 6
    assert json.loads((log_dir / "changelog.json").read_text())["log_start"] == 6
    (log_dir / names[0]).write_bytes(kept)  # as if the process died before this unlink
    with FileChangelog(log_dir) as log:
        assert [r.offset for r in records(log)] == [6, 7, 8, 9]
    assert not (log_dir / names[0]).exists()
    (log_dir / sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[0]).unlink()
    with pytest.raises(ChangelogCorruptionError, match=r"offsets \[6, \d+\) are missing"):
        FileChangelog(log_dir, readonly=True)
    meta = log_dir / "changelog.json"
    meta.write_text(meta.read_text().replace('"log_start": 6', '"log_start": "6"'))
    with pytest.raises(ConfigConflictError, match="log_start"):
        FileChangelog(log_dir)
