"""Fuzzing the changelog reader with damaged real files: typed errors only, never a crash.

Real changelog directories (written by ``FileChangelog``: several segments, a compacted one
with sparse batches and delete horizons, headers, tombstones, metadata; and the format 1 files
of ``data/v1``) are damaged by random edits: bit flips, truncation, inserted, deleted and
overwritten bytes, whole files replaced by random bytes, and frames whose body is changed and
whose checksum is then recomputed (so the decoders behind the checksum see garbage too). Every
way of using the damaged log (open as writer or reader, verify, read from several offsets, the
commit history, roll back, append and commit, compact) must either work or raise a
``txstore.errors`` exception.

The short run (seeded, a few seconds) is part of the normal suite; ``--run-slow`` runs a long
one.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txstore.changelog.format import HEADER_SIZE, Frame, FrameReader
from txstore.changelog.log import FileChangelog
from txstore.errors import ChangelogCorruptionError, ConfigConflictError, TxStoreError

pytestmark = pytest.mark.filterwarnings("error")

DATA = Path(__file__).parent / "data" / "v1"


@cache
def templates() -> list[dict[str, bytes]]:
    """The undamaged directories, as ``{file name: bytes}``."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        with FileChangelog(path, fsync=False, segment_bytes=700, batch_bytes=150) as log:
            for c in range(1, 16):
                for _ in range(c % 4):
                    o = log.end_offset
                    value = None if o % 5 == 0 else b"value-%d" % o
                    log.append(b"key%d" % (o % 6), value, 1000 + o, b"\x02\x02h\x01" * (o % 2))
                log.commit(10 * c, metadata=b'{"seq":%d,"stores":["s"]}' % c)
                if c == 9:
                    log.clean(now_ms=2000, force=True)
        out.append({p.name: p.read_bytes() for p in path.iterdir() if p.name != "writer.lock"})
    out.append({p.name: p.read_bytes() for p in (DATA / "log").iterdir()})
    return out


def _frames(data: bytes) -> list[Frame]:
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        reader = FrameReader(f.fileno())
        frames = []
        while isinstance(frame := reader.next(), Frame):
            frames.append(frame)
    return frames


def mutate(data: bytes, op: tuple[object, ...]) -> bytes:
    """Apply one edit to the bytes of a file (positions wrap around its length)."""
    kind = op[0]
    n = max(1, len(data))
    if kind == "flip":
        pos, mask = op[1], op[2]
        assert isinstance(pos, int) and isinstance(mask, int)
        if not data:
            return data
        b = bytearray(data)
        b[pos % n] ^= mask
        return bytes(b)
    if kind == "truncate":
        assert isinstance(op[1], int)
        return data[: op[1] % n]
    if kind == "insert":
        pos, blob = op[1], op[2]
        assert isinstance(pos, int) and isinstance(blob, bytes)
        return data[: pos % n] + blob + data[pos % n :]
    if kind == "delete":
        pos, count = op[1], op[2]
        assert isinstance(pos, int) and isinstance(count, int)
        return data[: pos % n] + data[pos % n + count :]
    if kind == "overwrite":
        pos, blob = op[1], op[2]
        assert isinstance(pos, int) and isinstance(blob, bytes)
        return data[: pos % n] + blob + data[pos % n + len(blob) :]
    if kind == "random":
        blob = op[1]
        assert isinstance(blob, bytes)
        return blob
    if kind == "recrc":  # change a frame's body, then make its checksum match again
        which, pos, blob = op[1], op[2], op[3]
        assert isinstance(which, int) and isinstance(pos, int) and isinstance(blob, bytes)
        frames = _frames(data)
        if not frames:
            return data
        fr = frames[which % len(frames)]
        start, end = fr.pos + HEADER_SIZE, fr.end
        at = start + pos % max(1, end - start)
        b = bytearray(data)
        b[at : at + len(blob)] = blob[: max(0, end - at)]
        b[fr.pos + 4 : fr.pos + 8] = zlib.crc32(bytes(b[fr.pos + 8 : end])).to_bytes(4, "little")
        return bytes(b)
    raise AssertionError(kind)


positions = st.integers(0, 1 << 20)
edits = st.one_of(
    st.tuples(st.just("flip"), positions, st.integers(1, 255)),
    st.tuples(st.just("truncate"), positions),
    st.tuples(st.just("insert"), positions, st.binary(min_size=1, max_size=48)),
    st.tuples(st.just("delete"), positions, st.integers(1, 64)),
    st.tuples(st.just("overwrite"), positions, st.binary(min_size=1, max_size=48)),
    st.tuples(
        st.just("random"),
        st.lists(st.sampled_from([b"TXCL", b"\x00", b"\x01\x02", b"\xff" * 4, b"\x02\x00"]))
        .map(b"".join)
        .flatmap(lambda s: st.binary(max_size=300).map(lambda r: s + r)),
    ),
    st.tuples(st.just("recrc"), positions, positions, st.binary(min_size=1, max_size=12)),
)
damage = st.tuples(
    st.integers(0, 1),  # which template
    st.lists(st.tuples(positions, edits), min_size=1, max_size=4),  # (file, edit)
)


@contextmanager
def no_reader_retry_wait() -> Iterator[None]:
    """A read-only open looks again 5 times over 0.1 s before it calls a scan corrupt (a
    writer may be mid-write); nobody writes here, so skip the waiting."""
    real = time.sleep
    time.sleep = lambda _s: None
    try:
        yield
    finally:
        time.sleep = real


def exercise(path: Path) -> None:
    """Use the damaged log every way there is; only txstore errors may come out."""
    for readonly in (True, False):
        try:
            with FileChangelog(path, readonly=readonly, fsync=False, segment_bytes=700) as log:
                end = log.committed_end_offset
                for start in sorted({0, log.log_start_offset, end // 2, end}):
                    with log.read_committed(start) as it:
                        for _ in it:
                            pass
                log.verify()
                log.recent_commits(4)
                log.last_commit()
                if readonly:
                    continue
                if log.last_committed_input_position is not None:
                    log.rollback_last_commit()
                log.append(b"k", b"v", 1)
                log.commit(1, metadata=b"after")
                log.clean(now_ms=10**13, force=True)
                log.verify()
        except TxStoreError:
            pass


def run_case(case: tuple[int, list[tuple[int, tuple[object, ...]]]]) -> None:
    which, edits_ = case
    template = templates()[which]
    names = sorted(template)
    contents = dict(template)
    for file_index, op in edits_:
        name = names[file_index % len(names)]
        contents[name] = mutate(contents[name], op)
    tmp = Path(tempfile.mkdtemp())
    try:
        for name, data in contents.items():
            (tmp / name).write_bytes(data)
        with no_reader_retry_wait():
            exercise(tmp)
    finally:
        shutil.rmtree(tmp)


@settings(
    max_examples=500,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(damage)
def test_damaged_files_give_typed_errors_only(
    case: tuple[int, list[tuple[int, tuple[object, ...]]]],
) -> None:
    run_case(case)


@pytest.mark.slow
@settings(
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(damage)
def test_damaged_files_give_typed_errors_only_long_run(
    case: tuple[int, list[tuple[int, tuple[object, ...]]]],
) -> None:
    run_case(case)


def test_every_template_is_a_valid_log() -> None:
    """The fuzzing starts from logs that open and read cleanly."""
    for template in templates():
        tmp = Path(tempfile.mkdtemp())
        try:
            for name, data in template.items():
                (tmp / name).write_bytes(data)
            with FileChangelog(tmp, readonly=True) as log:
                assert log.verify() > 10
                assert len(log.recent_commits(100)) >= 3
        finally:
            shutil.rmtree(tmp)


def test_a_batch_with_forged_offsets_and_a_matching_checksum_is_corruption(
    tmp_path: Path,
) -> None:
    """Found by the long run: a batch of a closed segment whose base offset was changed and
    whose checksum was recomputed read back as records out of offset order (and compaction
    failed with struct.error). Readers and compaction check that batch offsets ascend within
    their segment."""
    with FileChangelog(tmp_path, fsync=False, segment_bytes=300) as log:
        for c in range(6):
            log.append_many([(b"k%d" % i, b"v" * 20, c) for i in range(4)])
            log.commit(c)
    second = sorted(tmp_path.glob("*.log"))[1]
    data = second.read_bytes()
    forged = mutate(data, ("recrc", 0, 0, (1).to_bytes(8, "little")))  # base offset -> 1
    assert forged != data
    second.write_bytes(forged)
    with FileChangelog(tmp_path, fsync=False) as log:
        with pytest.raises(ChangelogCorruptionError, match="out of sequence"):
            log.verify()
        with pytest.raises(ChangelogCorruptionError, match="out-of-sequence record batch"):
            log.clean(now_ms=10**13, force=True)
        assert second.read_bytes() == forged


def test_a_metadata_file_nested_too_deep_is_refused(tmp_path: Path) -> None:
    with FileChangelog(tmp_path, fsync=False):
        pass
    (tmp_path / "changelog.json").write_bytes(b"[" * 100_000)
    with pytest.raises(ConfigConflictError, match="not a txstore changelog metadata file"):
        FileChangelog(tmp_path)
