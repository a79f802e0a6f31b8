"""The file changelog on real files, real processes and real SIGKILLs (no mocks)."""

from __future__ import annotations

import gc
import os
import random
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import _changelog_child as child
from txstore.changelog.format import HEADER_SIZE, batch_frame
from txstore.changelog.log import (
    Changelog,
    ChangelogRecord,
    CleanupPolicy,
    CommitInfo,
    FileChangelog,
)
from txstore.changelog.markers import marker_pair_size
from txstore.codecs import decode_headers, encode_headers
from txstore.errors import (
    ChangelogCorruptionError,
    ConfigConflictError,
    InvalidArgumentError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
    StoreClosedError,
    WriterLockedError,
)
from txstore.types import Headers

pytestmark = pytest.mark.filterwarnings("error")

Rec = tuple[bytes, bytes | None, int, bytes]


def records(log: FileChangelog, from_offset: int = 0) -> list[ChangelogRecord]:
    with log.read_committed(from_offset) as it:
        return list(it)


def open_log(path: Path, **kw: object) -> FileChangelog:
    kw.setdefault("fsync", False)
    return FileChangelog(path, **kw)  # type: ignore[arg-type]


def segs(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.log"))


def replay(rows: list[ChangelogRecord]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for r in rows:
        if r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state


def expected(end: int) -> list[ChangelogRecord]:
    return [ChangelogRecord(o, *child.record(o)) for o in range(end)]


# --------------------------------------------------------------------------- round trips


def test_round_trip_and_reopen(tmp_path: Path) -> None:
    hdrs = Headers([("a", None), ("bc", b"\x01\x02")])
    with FileChangelog(tmp_path / "log") as log:  # fsync on: the default
        assert isinstance(log, Changelog)
        assert (log.end_offset, log.last_committed_offset, log.log_start_offset) == (0, None, 0)
        assert log.last_committed_input_position is None
        assert log.append(b"k1", b"v1", 5) == 0
        assert log.append(b"", b"", -1, hdrs) == 1  # empty key and value, NO_TIMESTAMP
        assert log.append(b"k1", None, 2**63 - 1, encode_headers([("x", b"y")])) == 2
        assert log.append_many([(b"k2", b"v2", 7), (b"k3", b"v3", 8, b"")]) == range(3, 5)
        big = [(b"K" * 2000 + b"%d" % i, os.urandom(50_000 + i), i) for i in range(3)]
        assert log.append_many(big) == range(5, 8)  # long fields: the decoder's slicing path
        assert log.end_offset == 8 and log.committed_end_offset == 0 and log.in_transaction
        info = log.commit(input_position=42, metadata=b"meta")
        assert info == CommitInfo(0, 8, 42) and info.offsets == range(8)
        assert log.last_committed_input_position == 42 and log.last_committed_offset == 7
        assert log.last_committed_metadata == b"meta"
        rows = records(log)
        log._check()
    assert [r.offset for r in rows] == list(range(8))
    assert [r[1:4] for r in rows[5:]] == big
    assert rows[0] == ChangelogRecord(0, b"k1", b"v1", 5, b"")
    assert rows[1] == ChangelogRecord(1, b"", b"", -1, encode_headers(hdrs))
    assert decode_headers(rows[1].headers) == hdrs
    assert rows[2].value is None and rows[2].timestamp == 2**63 - 1
    with FileChangelog(tmp_path / "log") as log:
        assert records(log) == rows
        assert (log.end_offset, log.last_committed_input_position) == (8, 42)
        assert log.last_committed_metadata == b"meta"
        assert records(log, 3) == rows[3:] and records(log, 8) == []
        for bad in (9, -1):
            with pytest.raises(OffsetError):
                log.read_committed(bad)
        assert log.append(b"k4", b"v4", 9) == 8  # offsets continue densely
        assert log.commit(43) == CommitInfo(8, 9, 43)
        assert log.verify() == 9
        log._check()


def test_uncommitted_and_aborted_records_are_never_read(tmp_path: Path) -> None:
    with open_log(tmp_path, batch_bytes=64) as log:  # tiny batches: appends reach the file
        log.append_many([(b"a", b"1", 1), (b"b", b"2", 2)])
        log.commit(1)
        size_committed = os.path.getsize(tmp_path / "00000000000000000000.log")
        for i in range(20):
            log.append(b"u%d" % i, b"x" * 50, 3)
        assert os.path.getsize(tmp_path / "00000000000000000000.log") > size_committed
        assert [r.key for r in records(log)] == [b"a", b"b"]  # written, not committed
        with FileChangelog(tmp_path, readonly=True) as reader:  # another reader sees the same
            assert [r.key for r in records(reader)] == [b"a", b"b"]
            assert reader.end_offset == 2
        log.abort()
        assert os.path.getsize(tmp_path / "00000000000000000000.log") == size_committed
        assert log.end_offset == 2 and not log.in_transaction
        assert log.append(b"c", b"3", 4) == 2  # aborted offsets go to the next transaction
        assert log.commit(2) == CommitInfo(2, 3, 2)
        assert [(r.offset, r.key) for r in records(log)] == [(0, b"a"), (1, b"b"), (2, b"c")]
        log.append(b"open", b"txn", 5)
        log._check()
    with open_log(tmp_path) as log:  # close() aborted the open transaction
        assert log.end_offset == 3 and [r.key for r in records(log)] == [b"a", b"b", b"c"]


def test_commit_marker_carries_input_position(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        assert log.commit(7) == CommitInfo(0, 0, 7)  # an empty commit still records it
        log.append(b"k", b"v", 1)
        assert log.commit(-1) == CommitInfo(0, 1, -1)
        assert log.commit(2**63 - 1).input_position == 2**63 - 1
        for bad in (1.5, "3", None, True):
            with pytest.raises(InvalidTypeError):
                log.commit(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            log.commit(2**63)
        with pytest.raises(InvalidTypeError):
            log.commit(1, metadata="text")  # type: ignore[arg-type]
    with open_log(tmp_path) as log:
        assert log.last_committed_input_position == 2**63 - 1
        assert log.committed_end_offset == 1


def test_bad_input_gets_typed_errors_and_loses_nothing(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(b"kept", b"v", 1)
        log.commit(1)
        log.append(b"pending", b"v", 2)
        bad_calls: list[tuple[object, object, object, object, type[Exception]]] = [
            ("str key", b"v", 1, b"", InvalidTypeError),
            (None, b"v", 1, b"", InvalidArgumentError),
            (bytearray(b"k"), b"v", 1, b"", InvalidTypeError),
            (b"k", "str value", 1, b"", InvalidTypeError),
            (b"k", 3, 1, b"", InvalidTypeError),
            (b"k", b"v", -2, b"", InvalidArgumentError),
            (b"k", b"v", 2**63, b"", InvalidArgumentError),
            (b"k", b"v", 1.0, b"", InvalidTypeError),
            (b"k", b"v", True, b"", InvalidTypeError),
            (b"k", b"v", None, b"", InvalidTypeError),
            (b"k", b"v", 1, "headers", InvalidTypeError),
            (b"k", b"v", 1, [("k", "not bytes")], InvalidTypeError),
        ]
        for key, value, ts, h, exc in bad_calls:
            with pytest.raises(exc):
                log.append(key, value, ts, h)  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="record 1"):
            log.append_many([(b"ok", b"v", 3), (b"bad", b"v", "ts")])  # type: ignore[list-item]
        with pytest.raises(InvalidTypeError):
            log.append_many([[b"k", b"v", 1]])  # type: ignore[list-item]
        assert log.end_offset == 2  # no bad call appended anything
        assert log.append(b"hdr", b"v", 3, [("h", b"1")]) == 2  # a header list is encoded
        log.commit(2)
        assert [r.key for r in records(log)] == [b"kept", b"pending", b"hdr"]
        with pytest.raises(InvalidTypeError):
            log.read_committed("0")  # type: ignore[arg-type]
        log._check()
    with pytest.raises(StoreClosedError):
        log.append(b"k", b"v", 1)
    log.close()  # idempotent


@pytest.mark.parametrize(
    ("kw", "exc"),
    [
        ({"segment_bytes": 0}, InvalidArgumentError),
        ({"batch_bytes": "1"}, InvalidTypeError),
        ({"cleanup_policy": "archive"}, InvalidArgumentError),
        ({"min_cleanable_dirty_ratio": 2.0}, InvalidArgumentError),
        ({"retention_ms": -1}, InvalidArgumentError),
    ],
)
def test_bad_configuration(tmp_path: Path, kw: dict[str, object], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        FileChangelog(tmp_path, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- recovery


def _committed_log(path: Path) -> tuple[int, int]:
    """Two commits, then a third small one; returns (size after the 2nd, full size)."""
    with open_log(path) as log:
        log.append_many([(b"a%d" % i, b"x" * i, i) for i in range(10)])
        log.commit(1)
        log.append_many([(b"b", None, 11), (b"c", b"y", 12, b"\x02\x02h\x01")])
        log.commit(2)
        size2 = os.path.getsize(path / "00000000000000000000.log")
        log.append_many([(b"d", b"zz", 13), (b"e", None, 14, b"\x02\x02h\x00")])
        log.commit(3)
    return size2, os.path.getsize(path / "00000000000000000000.log")


def test_torn_tail_at_every_byte_is_truncated_to_the_last_marker(tmp_path: Path) -> None:
    src = tmp_path / "src"
    size2, full = _committed_log(src)
    with open_log(src) as log:
        prefix = [r for r in records(log) if r.offset < 12]
    work = tmp_path / "work"
    for length in range(size2, full):  # every cut inside the last transaction (data + marker)
        shutil.copytree(src, work)
        seg = work / "00000000000000000000.log"
        os.truncate(seg, length)
        with open_log(work) as log:
            assert log.committed_end_offset == 12, length
            assert log.last_committed_input_position == 2
            assert records(log) == prefix
            assert os.path.getsize(seg) == size2  # truncated to the last marker
            log._check()
            log.append(b"after", b"crash", 99)  # and writable again at the same offset
            assert log.commit(4) == CommitInfo(12, 13, 4)
        shutil.rmtree(work)


def test_uncommitted_first_segment_is_removed(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=100) as log:
        log.append(b"a", b"1", 1)
        log.commit(1)
        log.append(b"b", b"2", 2)  # rolls: the new segment holds an uncommitted txn only
        log.commit(2)
    os.truncate(tmp_path / "00000000000000000001.log", 30)  # tear the 2nd segment's only txn
    with open_log(tmp_path) as log:
        assert segs(tmp_path) == ["00000000000000000000.log"]
        assert log.committed_end_offset == 1 and log.last_committed_input_position == 1
        assert log.recovered is not None and log.recovered.truncated_bytes == 30
        log._check()
    os.truncate(tmp_path / "00000000000000000000.log", 10)  # the log's only txn is torn
    with open_log(tmp_path) as log:
        assert segs(tmp_path) == [] and log.end_offset == 0 and records(log) == []
        log.append(b"new", b"1", 1)
        log.commit(1)
        assert segs(tmp_path) == ["00000000000000000000.log"]


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x40
    path.write_bytes(bytes(data))


def _corrupt_message(path: Path, what: str, pos: int, offset: int, marker: int | None) -> str:
    committed = (
        "this is committed data"
        if marker is None
        else f"the commit marker at byte {marker} makes it committed data"
    )
    return (
        f"changelog corrupt: {what} in {path} at byte {pos} (records from offset {offset} on); "
        f"{committed}, which txstore does not drop silently. Restore the directory from a "
        "backup, or delete the changelog and rebuild it from the stores"
    )


def test_crc_failure_in_committed_data_names_file_and_offset(tmp_path: Path) -> None:
    """One flipped byte inside committed data: opening the log fails with a message naming
    the file, the byte where the bad frame starts, its first record offset, what failed, and
    the commit marker after it. (It used to read "checksum mismatch before the commit marker
    at byte 277 in FILE at byte 0 (records from offset 0)".)"""
    src = tmp_path / "src"
    size2, _ = _committed_log(src)
    seg_name = "00000000000000000000.log"
    # Frames (format version 2: every commit marker is two 80-byte copies): batch [0, 277)
    # offsets 0-9, marker [277, 437), batch [437, 536) offsets 10-11, marker [536, 696), then
    # the 3rd transaction.
    assert size2 == 696 and marker_pair_size(0) == 160
    torn = "a frame running past the end of the data (torn, or a corrupt length field)"
    # a byte in the 1st batch's values, in the 2nd batch's last bytes, and in the 1st frame's
    # length field (the frame chain breaks there): all inside data closed by a valid marker
    cases = [
        (HEADER_SIZE + 200, "checksum mismatch", 0, 0, 277),
        (size2 - 160 - 3, "checksum mismatch", 437, 10, 536),
        (13, torn, 0, 0, 277),
    ]
    for flipped, what, pos, offset, marker in cases:
        work = tmp_path / f"w{flipped}"
        shutil.copytree(src, work)
        _flip(work / seg_name, flipped)
        with pytest.raises(ChangelogCorruptionError) as err:
            open_log(work)
        assert str(err.value) == _corrupt_message(work / seg_name, what, pos, offset, marker)
        assert err.value.path == str(work / seg_name)
        assert (err.value.position, err.value.offset) == (pos, offset)
        assert os.path.getsize(work / seg_name) == os.path.getsize(src / seg_name)  # untouched


def test_corruption_in_closed_segment_is_found_when_read(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=200) as log:
        for i in range(6):
            log.append_many([(b"k%d" % j, b"v" * 40, j) for j in range(3)])
            log.commit(i)
    names = segs(tmp_path)
    assert len(names) >= 3
    _flip(tmp_path / names[1], HEADER_SIZE + 40)  # inside a closed segment's batch
    base = int(names[1][:20])
    message = _corrupt_message(tmp_path / names[1], "checksum mismatch", 0, base, None)
    with open_log(tmp_path) as log:  # open reads closed segments' trailing markers only
        with pytest.raises(ChangelogCorruptionError) as err:
            log.verify()
        assert str(err.value) == message and err.value.offset == base
        with log.read_committed(0) as it:
            assert next(it).offset == 0  # the segment before it is fine
        # read from inside that segment: the message still names the bad frame's first
        # record offset, not the offset the reader started at
        with pytest.raises(ChangelogCorruptionError) as err, log.read_committed(base + 2) as it:
            list(it)
        assert str(err.value) == message
    _flip(tmp_path / names[1], os.path.getsize(tmp_path / names[1]) - 10)  # its last marker
    with pytest.raises(ChangelogCorruptionError, match="does not end with a valid commit"):
        open_log(tmp_path)


def test_an_uncommitted_tail_is_truncated_and_bytes_no_crash_leaves_are_refused(
    tmp_path: Path,
) -> None:
    """Valid frames of the open transaction, or the beginning of one, after the last commit are
    a torn tail: truncated. A frame whose checksum fails, zeros and a header that no writer
    wrote are not what a crash leaves: ChangelogCorruptionError at their position, nothing
    truncated (this test truncated them before: see tests/changelog/test_changelog_tail.py)."""
    _, full = _committed_log(tmp_path)
    seg = tmp_path / "00000000000000000000.log"
    valid = b"".join(
        batch_frame(
            7,
            14,
            [b"u"],
            [b"never"],
            [1],
            [b""],
            tombstones=False,
            has_headers=False,
            max_timestamp=1,
        )
    )
    for tail in (valid, valid[:-7], b"TXCL\x00\x01"):
        with seg.open("ab") as f:
            f.write(tail)
        with open_log(tmp_path) as log:
            assert log.committed_end_offset == 14 and os.path.getsize(seg) == full
            assert log.recovered is not None and log.recovered.tail_reason
            assert [r.offset for r in records(log)][-1] == 13
    for tail in (valid[:-1] + bytes([valid[-1] ^ 1]), b"\x00" * 100, b"TXCL" + b"x" * 7):
        with seg.open("ab") as f:
            f.write(tail)
        with pytest.raises(ChangelogCorruptionError, match=f"truncate -s {full} ") as err:
            open_log(tmp_path)
        assert (err.value.path, err.value.position, err.value.offset) == (str(seg), full, 14)
        assert os.path.getsize(seg) == full + len(tail)
        os.truncate(seg, full)


# --------------------------------------------------------------------------- real crashes


def _wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            proc.kill()
            raise AssertionError(f"child printed no {prefix!r} in {timeout}s")
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"child exited before {prefix!r}: {err}")
        if line.startswith(prefix):
            return line


def _kill(proc: subprocess.Popen[str]) -> list[str]:
    """SIGKILL the child; return the COMMITTED lines it printed."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    return [line for line in out.splitlines() if line.startswith("COMMITTED")]


def _check_prefix(path: Path, at_least: int, truncated: list[int] | None = None) -> int:
    """Reopen: the log must hold exactly the workload's first c commits, c >= at_least."""
    with FileChangelog(path, fsync=False) as log:
        c = (log.last_committed_input_position or 0) // 10
        assert c >= at_least
        end = child.boundaries(c)[-1]
        assert log.committed_end_offset == end
        assert records(log) == expected(end)
        log._check()
        if truncated is not None and log.recovered is not None:
            truncated.append(log.recovered.truncated_bytes)
    return c


def test_sigkill_while_appending_and_committing(tmp_path: Path) -> None:
    rng = random.Random(5)
    done = 0
    truncated: list[int] = []
    for _ in range(14):
        proc = child.spawn("writer", tmp_path, 100_000)
        try:
            _wait_line(proc, "READY")
            time.sleep(rng.uniform(0.0, 0.12))
        finally:
            lines = _kill(proc)
        if lines:
            done = int(lines[-1].split()[1])
        # the commit after the last printed line may have completed before the kill
        done = _check_prefix(tmp_path, done, truncated)
    assert done > 20  # the kills landed over many commits
    assert sum(1 for t in truncated if t) >= 2  # ...and often left an uncommitted tail


def test_sigkill_between_records_and_marker(tmp_path: Path) -> None:
    """The fault point fires after the records were written and synced, before the marker."""
    proc = child.spawn("writer", tmp_path, 100, env={"TXSTORE_FAULTS": "changelog.after_append=6"})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    assert out.count("COMMITTED") == 5
    assert _check_prefix(tmp_path, 5) == 5
    seg_sizes = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    proc = child.spawn("writer", tmp_path, 3)  # and the next writer goes on from there
    assert proc.communicate(timeout=60)[0].count("COMMITTED") == 3
    assert _check_prefix(tmp_path, 8) == 8
    assert sum(p.stat().st_size for p in tmp_path.glob("*.log")) > seg_sizes


def test_sigkill_during_compaction(tmp_path: Path) -> None:
    rng = random.Random(11)
    done = 0
    for _ in range(8):
        proc = child.spawn("compactor", tmp_path, 100_000)
        try:
            _wait_line(proc, "READY")
            time.sleep(rng.uniform(0.02, 0.25))
        finally:
            lines = _kill(proc)
        if lines:
            done = int(lines[-1].split()[1])
        with FileChangelog(tmp_path, fsync=False) as log:
            c = (log.last_committed_input_position or 0) // 10
            assert c >= done
            end = child.boundaries(c)[-1]
            assert log.committed_end_offset == end
            rows = records(log)
            log._check()
            assert not list(tmp_path.glob("*.cleaned"))
        # compaction drops superseded records only: the replayed state is the model's
        assert replay(rows) == replay(expected(end))
        assert all(r == ChangelogRecord(r.offset, *child.record(r.offset)) for r in rows)
        done = c


def test_single_writer_lock_and_readonly_reader_process(tmp_path: Path) -> None:
    proc = child.spawn("hold", tmp_path)
    try:
        _wait_line(proc, "READY")
        with pytest.raises(WriterLockedError):
            FileChangelog(tmp_path)
        with FileChangelog(tmp_path, readonly=True) as reader:
            assert records(reader) == []
            with pytest.raises(ReadOnlyError):
                reader.append(b"k", b"v", 1)
    finally:
        _kill(proc)
    with open_log(tmp_path) as log:
        with pytest.raises(WriterLockedError):
            FileChangelog(tmp_path)  # one writer per directory, in this process too
        log.commit(1)


def test_readonly_reader_follows_a_writer_process(tmp_path: Path) -> None:
    child.spawn("writer", tmp_path, 0).communicate(timeout=60)  # create the log
    proc = child.spawn("writer", tmp_path, 400)
    reads = 0
    try:
        _wait_line(proc, "READY")
        with FileChangelog(tmp_path, readonly=True) as reader:
            while proc.poll() is None or reads < 3:
                rows = records(reader)
                end = reader.committed_end_offset
                c = (reader.last_committed_input_position or 0) // 10
                assert len(rows) == end and end in child.boundaries(c)[-1:]
                assert rows == expected(len(rows))
                reads += 1
    finally:
        _kill(proc)
    assert reads >= 3


# --------------------------------------------------------------------------- segments, cleanup


def test_segments_roll_between_transactions(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=1000, batch_bytes=300) as log:
        for c in range(1, 30):
            log.append_many([(b"k%d" % (i % 7), b"v" * 30, c) for i in range(c % 9)])
            log.commit(c)
            log._check()
        rows = records(log)
        end = log.committed_end_offset
    names = segs(tmp_path)
    assert len(names) > 5 and names[0] == "00000000000000000000.log"
    with open_log(tmp_path) as log:
        refs, _ = log.segment_refs()
        for ref in refs:
            assert ref.path.endswith(f"{ref.base:020d}.log")
        assert [r.offset for r in rows] == list(range(end))
        assert records(log) == rows
        for start in (0, 17, refs[2].base, end - 1):
            assert records(log, start) == rows[start:]
        log._check()


def test_marker_only_segment_stays_small(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=500) as log:
        log.append(b"k", b"v", 1)
        log.commit(0)
        for i in range(1, 200):  # an idle task committing on a timer
            log.commit(i)
        assert os.path.getsize(tmp_path / "00000000000000000000.log") < 1500
        log.append(b"k2", b"v", 2)
        log.commit(200)
        for i in range(201, 400):
            log.commit(i)
        assert all(p.stat().st_size < 1500 for p in tmp_path.glob("*.log"))
        log._check()
    with open_log(tmp_path) as log:
        assert log.last_committed_input_position == 399
        assert [r.key for r in records(log)] == [b"k", b"k2"]


def _kv_workload(log: FileChangelog, rng: random.Random, commits: int) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for c in range(commits):
        for _ in range(rng.randrange(1, 30)):
            key = b"key%03d" % rng.randrange(40)
            if rng.random() < 0.15:
                log.append(key, None, c)
                model.pop(key, None)
            else:
                value = b"%d" % rng.randrange(10**9) * rng.randrange(1, 4)
                log.append(key, value, c, b"\x02\x02h\x00" if rng.random() < 0.2 else b"")
                model[key] = value
        log.commit(c)
    return model


def test_compaction_keeps_latest_per_key_and_offsets(tmp_path: Path) -> None:
    rng = random.Random(3)
    with open_log(tmp_path, segment_bytes=2048, batch_bytes=256) as log:
        model = _kv_workload(log, rng, 60)
        before = records(log)
        n_before = len(segs(tmp_path))
        result = log.clean(now_ms=1_000, force=True)
        log._check()
        after = records(log)
        assert result.compacted and result.records_kept < result.records_read
        assert result.segments_after < result.segments_before and len(segs(tmp_path)) < n_before
        assert replay(after) == replay(before) == model
        by_offset = {r.offset: r for r in before}
        assert all(by_offset[r.offset] == r for r in after)  # offsets and records unchanged
        active_base = log.segment_refs()[0][-1].base
        closed_latest = {r.key: r.offset for r in before if r.offset < active_base}
        assert {r.offset for r in after if r.offset < active_base} == set(closed_latest.values())
        tombstones = [r for r in after if r.value is None and r.offset < active_base]
        assert tombstones  # kept by the first compaction that saw them...
        assert log.clean(now_ms=1_000 + 24 * 3600 * 1000 - 1, force=True).tombstones_dropped == 0
        assert log.clean(now_ms=1_000 + 24 * 3600 * 1000, force=True).tombstones_dropped == len(
            tombstones
        )  # ...and dropped by a compaction past their delete horizon
        after2 = records(log)
        assert not [r for r in after2 if r.value is None and r.offset < active_base]
        assert replay(after2) == model
        log.append(b"new", b"v", 1)
        log.commit(99)
        assert replay(records(log)) == {**model, b"new": b"v"}
        log._check()
    with open_log(tmp_path) as log:
        assert replay(records(log)) == {**model, b"new": b"v"}
        assert log.committed_end_offset == before[-1].offset + 2
        assert log.last_committed_input_position == 99
        log._check()


def test_compaction_respects_the_dirty_ratio(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=1024) as log:
        _kv_workload(log, random.Random(4), 30)
        assert log.clean().compacted
        assert not log.clean().compacted  # nothing new since: nothing to do
        assert log.clean(force=True).compacted


def test_interrupted_merge_is_completed_on_open(tmp_path: Path) -> None:
    """A crash after the merged file was renamed into place but before the segments it
    replaced were deleted: reopening deletes them."""
    log_dir = tmp_path / "log"
    with open_log(log_dir, segment_bytes=1024) as log:
        model = _kv_workload(log, random.Random(9), 40)
    saved = {p.name: p.read_bytes() for p in log_dir.glob("*.log")}
    with open_log(log_dir, segment_bytes=1024) as log:
        log.clean(force=True)
        compacted = records(log)
    merged_away = set(saved) - set(segs(log_dir))
    assert merged_away
    for name in merged_away:  # put the merged-away segments back
        (log_dir / name).write_bytes(saved[name])
    (log_dir / "00000000000000000000.log.cleaned").write_bytes(b"half-written")
    with FileChangelog(log_dir, readonly=True) as reader:  # a reader skips them
        assert records(reader) == compacted
    with open_log(log_dir) as log:
        assert set(segs(log_dir)).isdisjoint(merged_away)
        assert not list(log_dir.glob("*.cleaned"))
        assert records(log) == compacted and replay(compacted) == model
        log._check()


def test_iterator_survives_compaction_under_it(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=1024, batch_bytes=128) as log:
        model = _kv_workload(log, random.Random(6), 50)
        it = log.read_committed()
        first = [next(it) for _ in range(5)]
        log.clean(force=True)
        rest = list(it)
        offsets = [r.offset for r in first + rest]
        assert offsets == sorted(set(offsets))
        assert replay(first + rest) == model
        assert it.closed


def test_time_retention_deletes_whole_old_segments(tmp_path: Path) -> None:
    day = 24 * 3600 * 1000
    with open_log(tmp_path, cleanup_policy="delete", segment_bytes=600, retention_ms=day) as log:
        for c in range(20):
            log.append_many([(b"w%d" % i, b"v" * 20, c * 1000 + i) for i in range(10)])
            log.commit(c)
        before = records(log)
        bases = [r.base for r in log.segment_refs()[0]]
        assert len(bases) > 4
        in_seg2 = [r.timestamp for r in before if bases[2] <= r.offset < bases[3]]
        cutoff = min(in_seg2) + 1  # segments 0 and 1 are all older; segment 2 straddles it
        result = log.clean(now_ms=day + cutoff)
        log._check()
        assert result.deleted_segments == 2 and not result.compacted
        assert log.log_start_offset == bases[2]
        kept = records(log)
        assert kept == [r for r in before if r.offset >= bases[2]]  # whole segments only
        assert log.clean(now_ms=day + cutoff).deleted_segments == 0
        assert records(log, 0) == kept  # reading below the log start starts at it
        everything = log.clean(now_ms=10**15)
        assert log.segment_refs()[0][-1].base == bases[-1]  # the active segment always stays
        assert everything.deleted_segments == len(bases) - 1 - result.deleted_segments
        log._check()
    with open_log(tmp_path) as log:
        assert log.log_start_offset == bases[-1] and log.committed_end_offset == 200


def test_compact_delete_policy_does_both(tmp_path: Path) -> None:
    with open_log(tmp_path, cleanup_policy="delete,compact", segment_bytes=800) as log:
        assert log.cleanup_policy is CleanupPolicy.COMPACT_DELETE
        for c in range(30):
            log.append_many([(b"w%d" % (i % 3), b"v" * 20, c * 100 + i) for i in range(8)])
            log.commit(c)
        result = log.clean(now_ms=log.retention_ms + 1000, force=True)  # cutoff: ts 1000
        assert result.deleted_segments and result.compacted
        assert records(log)[0].offset >= log.log_start_offset > 0
        log._check()


def test_reopen_with_other_policy_or_foreign_directory(tmp_path: Path) -> None:
    with open_log(tmp_path / "kv"):
        pass
    with pytest.raises(ConfigConflictError, match="compact"):
        open_log(tmp_path / "kv", cleanup_policy="delete")
    with open_log(tmp_path / "kv", cleanup_policy=CleanupPolicy.COMPACT) as log:
        assert log.cleanup_policy is CleanupPolicy.COMPACT
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "00000000000000000000.index").write_bytes(b"kafka")
    with pytest.raises(ConfigConflictError, match="not a txstore changelog"):
        open_log(foreign)
    (foreign / "changelog.json").write_text('{"format": "something-else"}')
    with pytest.raises(ConfigConflictError):
        open_log(foreign)
    with pytest.raises(InvalidArgumentError):
        FileChangelog(tmp_path / "missing", readonly=True)
    with pytest.raises(InvalidArgumentError):
        FileChangelog(tmp_path / "missing", create=False)


def test_missing_middle_segment_is_an_error(tmp_path: Path) -> None:
    with open_log(tmp_path, segment_bytes=100) as log:
        for c in range(5):
            log.append(b"k", b"v" * 50, c)
            log.commit(c)
    os.unlink(tmp_path / segs(tmp_path)[2])
    with pytest.raises(ChangelogCorruptionError, match="missing"):
        open_log(tmp_path)


def test_leaked_iterator_warns_and_close_closes_iterators(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append_many([(b"k%d" % i, b"v", i) for i in range(3)])
        log.commit(1)
        it = log.read_committed()
        next(it)
        with pytest.warns(ResourceWarning):
            del it
            gc.collect()
        kept = log.read_committed_batches()
    assert kept.closed  # closed by the log
    with pytest.raises(StoreClosedError):
        log.read_committed()
    leaked = open_log(tmp_path)
    with pytest.warns(ResourceWarning, match="unclosed FileChangelog"):
        del leaked
        gc.collect()
    open_log(tmp_path).close()  # the leaked writer's lock was released


# --------------------------------------------------------------------------- seeded stress


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_operations_against_a_model(tmp_path: Path, seed: int) -> None:
    """Appends, commits, aborts, reopens and compactions in random order; after every step the
    log's invariants hold and a read-committed scan agrees with the model of committed data."""
    rng = random.Random(seed)
    kw = {
        "segment_bytes": [300, 1500, 300, 10**6][seed - 1],
        "batch_bytes": [10**6, 64, 700, 700][seed - 1],
    }
    committed: dict[int, ChangelogRecord] = {}
    pending: list[Rec] = []
    end, position, next_offset = 0, None, 0
    log = open_log(tmp_path, **kw)
    stats = [0, 0]  # records compacted away, tombstones dropped
    try:
        for _ in range(300):
            op = rng.random()
            if op < 0.5:
                key = b"k%d" % rng.randrange(15)
                value = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 60))
                rec = (key, value, rng.randrange(-1, 10**6), rng.choice([b"", b"\x02\x02h\x01"]))
                assert log.append(*rec) == next_offset
                pending.append(rec)
                next_offset += 1
            elif op < 0.65:
                position = rng.randrange(10**9)
                assert log.commit(position) == CommitInfo(end, next_offset, position)
                for i, rec in enumerate(pending):
                    committed[end + i] = ChangelogRecord(end + i, *rec)
                end, pending = next_offset, []
            elif op < 0.72:
                log.abort()
                pending, next_offset = [], end
            elif op < 0.8:
                log.close()
                pending, next_offset = [], end
                log = open_log(tmp_path, **kw)
            elif op < 0.88:
                res = log.clean(now_ms=rng.choice([1, 10**13, 10**15]), force=rng.random() < 0.5)
                stats[0] += res.records_read - res.records_kept
                stats[1] += res.tombstones_dropped
            log._check()
            assert (log.end_offset, log.committed_end_offset) == (next_offset, end)
            assert log.last_committed_input_position == position
            rows = records(log)
            assert all(committed[r.offset] == r for r in rows)  # genuine committed records
            assert [r.offset for r in rows] == sorted({r.offset for r in rows})
            assert replay(rows) == replay([committed[o] for o in sorted(committed)])
            refs = log.segment_refs()[0]
            active = refs[-1].base if refs else 0  # never compacted: every record is there
            assert [r for r in rows if r.offset >= active] == [
                committed[o] for o in range(active, end)
            ]
            start = rng.randrange(end + 1)
            assert records(log, start) == [r for r in rows if r.offset >= start]
    finally:
        log.close()
    if kw["segment_bytes"] < 10**6:
        assert stats[0] > 0 and stats[1] > 0  # compaction dropped records and tombstones
