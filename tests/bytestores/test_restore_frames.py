"""``BytesKeyValueStore.restore_frames``: key-value restore reading the changelog's batches in
place (``restore_frames`` in ``csrc/restore_rows.c``, fed by ``read_committed_frames``) must
give exactly what decoding the records and ``restore_rows`` / ``restore_records`` give, for
every value format, with and without checksums, any slicing of the batches; bad input gets a
typed error and nothing is written."""

from __future__ import annotations

import contextlib
import random
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bytestores.test_kv_bytes import FLAVOURS, Env, committed
from tests.changelog.test_batch_columns import frame_of, patched
from tests.restore.test_runs import dump
from txstore._checksums import encode_run, restore_frames_run
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.bytestores.restore_runs import SortedRuns
from txstore.changelog.format import (
    batch_layout,
)
from txstore.changelog.log import FileChangelog
from txstore.codecs import ValueFormat
from txstore.engine.checksums import restore_frames, restore_rows
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, InvalidTypeError

pytestmark = pytest.mark.filterwarnings("error")

FORMATS = list(ValueFormat)
Slice = tuple[bytes, int, int, int, int, int, int]


@pytest.fixture(params=FLAVOURS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(request.param, tmp_path)
    yield e
    e.close()


def batches(
    seed: int, n: int
) -> list[tuple[list[bytes], list[bytes | None], list[int], list[bytes]]]:
    """Changelog batches of random sizes whose keys repeat across batches (shared 8-byte
    prefixes, keys shorter than 8 bytes, trailing zeros), with and without tombstones and
    headers columns, empty values, any timestamps."""
    rng = random.Random(seed)
    pool = [rng.randbytes(rng.randint(1, 30)) for _ in range(max(1, n // 3))]
    pool += [b"user-000" + str(i).encode() for i in range(40)]
    pool += [b"a", b"a\x00", b"a\x00\x00", b"\x00", b"\xff" * 9, b"\xff" * 8, b"k" * 511]
    out = []
    left = n
    while left:
        m = min(left, rng.choice((1, 2, 7, 100, 333)))
        left -= m
        keys = [rng.choice(pool) for _ in range(m)]
        dead = rng.random() < 0.7
        values: list[bytes | None] = [
            None if dead and rng.random() < 0.2 else rng.randbytes(rng.choice((0, 5, 70)))
            for _ in range(m)
        ]
        stamps = [rng.randint(-(2**63), 2**63 - 1) for _ in range(m)]
        with_headers = rng.random() < 0.5
        headers = [
            rng.randbytes(rng.choice((0, 5, 200))) if with_headers else b"" for _ in range(m)
        ]
        out.append((keys, values, stamps, headers))
    return out


def slices_of(
    seed: int, n: int
) -> tuple[list[Slice], list[bytes], list[bytes | None], list[int], list[bytes]]:
    """Frame slices (a random ``[lo, hi)`` of some batches) and the records they hold."""
    rng = random.Random(seed)
    frames: list[Slice] = []
    keys: list[bytes] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[bytes] = []
    for k, v, t, h in batches(seed, n):
        frame = frame_of(k, v, t, h)
        _, pos, end, m, has_headers, _, _ = batch_layout(frame)
        lo, hi = 0, m
        if rng.random() < 0.3:
            lo = rng.randint(0, m)
            hi = rng.randint(lo, m)
        frames.append((frame.buf, pos, end, m, has_headers, lo, hi))
        keys += k[lo:hi]
        values += v[lo:hi]
        stamps += t[lo:hi]
        headers += h[lo:hi]
    return frames, keys, values, stamps, headers


@pytest.mark.parametrize("seed", range(6))
def test_the_frames_pass_returns_what_restore_rows_returns(seed: int) -> None:
    """Also as one sorted run (``restore_frames_run``): the bytes ``encode_run`` makes of
    the same rows."""
    frames, keys, values, stamps, headers = slices_of(seed, 1500)
    for fmt in FORMATS:
        for seal in (False, True):
            got = restore_frames(frames, int(fmt), seal, 511)
            assert got == restore_rows(keys, values, stamps, headers, int(fmt), seal, 511)
            assert restore_frames_run(frames, int(fmt), seal, 511) == encode_run(*got)
            assert got[2], "the seed makes no tombstone: the run's deletes go untested"
    assert restore_frames([], 1, True, 511) == ([], [], [])
    assert restore_frames_run([], 1, True, 511) == b""


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_store_restored_from_frames_equals_one_restored_from_records(
    env: Env, tmp_path: Path, fmt: ValueFormat
) -> None:
    frames, keys, values, stamps, headers = slices_of(int(fmt) + 10, 3000)
    half = len(frames) // 2
    cut = sum(f[6] - f[5] for f in frames[:half])
    s = env.store
    s.put_all([(keys[0], b"there before"), (b"only before", b"x")])
    s.commit(1)
    s.restore_frames(frames[:half], fmt, cut)
    s.restore_frames(frames[half:], fmt, len(keys))
    with Partition(tmp_path / "ref", sync=False, checksums=env.partition.checksums) as part:
        ref = BytesKeyValueStore("kv", part, transactional=True)
        ref.put_all([(keys[0], b"there before"), (b"only before", b"x")])
        ref.commit(1)
        ref.restore_records(keys, values, stamps, headers, fmt, len(keys))
        assert committed(s) == committed(ref) and list(s.all()) == committed(ref)
    assert s.committed_offset == len(keys)


def test_the_reader_gives_frames_holding_its_batches(tmp_path: Path) -> None:
    """``read_committed_frames`` from any offset: each batch decodes to what
    ``read_committed_batches`` gives, and ``nbytes`` counts the slice's bytes."""
    rng = random.Random(3)
    with FileChangelog(tmp_path / "log", fsync=False) as log:
        for i in range(30):
            log.append_many(
                [
                    (rng.randbytes(5), None if j % 4 else rng.randbytes(j), i * 100 + j)
                    for j in range(37)
                ]
            )
            if i % 3 == 2:
                log.commit(log.end_offset)
        log.commit(log.end_offset)
        for start in (0, 1, 36, 37, 500, log.end_offset - 1):
            with log.read_committed_batches(start) as it:
                want = list(it)
            with log.read_committed_frames(start) as frames:
                got = [f.decode() for f in frames]
            assert [list(b) for b in got] == [list(b) for b in want]
            with log.read_committed_frames(start) as frames:
                for f in frames:
                    d = f.decode()
                    live = sum(len(v) for v in d.values if v is not None)
                    assert f.nbytes == sum(map(len, d.keys)) + live + sum(map(len, d.headers))
                    assert len(f) == len(d)


def good_frame() -> Slice:
    frame = frame_of([b"k1", b"k2", b"k1"], [b"a", None, b"b"], [1, 2, 3], [b"", b"", b""])
    _, pos, end, n, has_headers, _, _ = batch_layout(frame)
    return (frame.buf, pos, end, n, has_headers, 0, n)


def bad_inputs() -> tuple[list[tuple[str, Any, type[Exception]]], list[tuple[str, Any, str]]]:
    """Bad frames: (what, frames, the C pass's error), for which the method raises
    InvalidArgumentError; and frames with a bad key: (what, frames, the typed error's text)."""
    buf, pos, end, n, hh, lo, hi = good_frame()
    broken = patched(frame_of([b"k1", b"k2"], [b"a", b"b"], [1, 2], [b"", b""]), 1, 0, "<i", -2)
    _, bpos, bend, bn, bhh, _, _ = batch_layout(broken)
    empty_key = frame_of([b"k1", b""], [b"a", b"b"], [1, 2], [b"", b""])
    _, epos, eend, en, ehh, _, _ = batch_layout(empty_key)
    long_key = frame_of([b"k" * 512], [b"a"], [1], [b""])
    _, lpos, lend, ln, lhh, _, _ = batch_layout(long_key)
    return [
        ("not a tuple", [[buf, pos, end, n, hh, lo, hi]], TypeError),
        ("a short tuple", [(buf, pos, end)], TypeError),
        ("buf not bytes", [(bytearray(buf), pos, end, n, hh, lo, hi)], TypeError),
        ("a position not an int", [(buf, "0", end, n, hh, lo, hi)], TypeError),
        ("end past the buffer", [(buf, pos, len(buf) + 1, n, hh, lo, hi)], ValueError),
        ("a negative lo", [(buf, pos, end, n, hh, -1, hi)], ValueError),
        ("hi past the batch", [(buf, pos, end, n, hh, 0, n + 1)], ValueError),
        ("lo after hi", [(buf, pos, end, n, hh, 2, 1)], ValueError),
        ("n too large", [(buf, pos, end, n + 100, hh, 0, 1)], ValueError),
        ("lengths not adding up", [(broken.buf, bpos, bend, bn, bhh, 0, bn)], ValueError),
        (
            "after a good frame",
            [good_frame(), (broken.buf, bpos, bend, bn, bhh, 0, bn)],
            ValueError,
        ),
    ], [
        (
            "an empty key",
            [good_frame(), (empty_key.buf, epos, eend, en, ehh, 0, en)],
            "must not be empty",
        ),
        (
            "a key above 511 bytes",
            [(long_key.buf, lpos, lend, ln, lhh, 0, ln)],
            "above LMDB's maximum",
        ),
    ]


def test_bad_frames_get_typed_errors_and_nothing_is_written(tmp_path: Path) -> None:
    bad, bad_keys = bad_inputs()
    with Partition(tmp_path / "p", sync=False) as part:
        s = BytesKeyValueStore("kv", part, transactional=True)
        s.put_all([(b"k1", b"before")])
        s.commit(5)
        for what, frames, c_error in bad:
            for c_pass in (restore_frames, restore_frames_run):
                with pytest.raises(c_error):
                    c_pass(frames, 1, True, 511)
            with pytest.raises(InvalidArgumentError):
                s.restore_frames(frames, ValueFormat.TIMESTAMPED, 9)
            assert committed(s) == [(b"k1", b"before")] and s.committed_offset == 5, what
        for what, frames, text in bad_keys:
            for c_pass in (restore_frames, restore_frames_run):
                with pytest.raises(ValueError, match="key length"):
                    c_pass(frames, 1, True, 511)
            with pytest.raises(InvalidArgumentError, match=text):
                s.restore_frames(frames, ValueFormat.TIMESTAMPED, 9)
            assert committed(s) == [(b"k1", b"before")] and s.committed_offset == 5, what
        with pytest.raises(InvalidTypeError):
            s.restore_frames(7, ValueFormat.TIMESTAMPED, 9)  # type: ignore[arg-type]
        for c_pass in (restore_frames, restore_frames_run):
            with pytest.raises(ValueError, match="unknown value format"):
                c_pass([good_frame()], 9, True, 511)
            with pytest.raises(TypeError, match="must be a list"):
                c_pass((good_frame(),), 1, True, 511)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="takes 4 arguments"):
                c_pass([good_frame()], 1, True)  # type: ignore[call-arg]
        s.restore_frames([good_frame()], ValueFormat.PLAIN, 9)  # still works afterwards
        assert committed(s) == [(b"k1", b"b")] and s.committed_offset == 9


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (resource.getpagesize() // 1024)


@pytest.mark.parametrize("calls", [pytest.param(300_000, marks=pytest.mark.slow), 30_000])
def test_error_paths_do_not_leak(calls: int) -> None:
    bad, bad_keys = bad_inputs()
    frames = [f for _, f, _ in bad] + [f for _, f, _ in bad_keys]
    good = [good_frame()] * 50

    def run(k: int) -> None:
        for i in range(k):
            with contextlib.suppress(TypeError, ValueError):
                restore_frames(frames[i % len(frames)], 2, True, 511)
            with contextlib.suppress(TypeError, ValueError):
                restore_frames_run(frames[i % len(frames)], 2, True, 511)
            if i % 10 == 0:
                restore_frames(good, 2, True, 511)
                restore_frames_run(good, 2, True, 511)

    run(calls // 10)  # warm up the allocator
    before = rss_kib()
    run(calls)
    assert rss_kib() - before < 4096, "restore_frames(_run) leaks on its error paths"


def test_a_chunk_larger_than_the_map_grows_it_and_is_written_whole(tmp_path: Path) -> None:
    """A restore chunk of ~3 MB into a 1 MiB map: the map grows before the write (or on a
    full map, replaying it) and every row is there, once."""
    rng = random.Random(5)
    keys = [rng.randbytes(16) for _ in range(20_000)]
    values: list[bytes | None] = [rng.randbytes(100) for _ in keys]
    frame = frame_of(keys, values, list(range(len(keys))), [b""] * len(keys))
    _, pos, end, n, has_headers, _, _ = batch_layout(frame)
    with Partition(tmp_path / "p", sync=False, map_size=1 << 20) as part:
        s = BytesKeyValueStore("kv", part, transactional=True)
        s.restore_frames([(frame.buf, pos, end, n, has_headers, 0, n)], ValueFormat.PLAIN, n)
        assert committed(s) == sorted(zip(keys, values, strict=True))
        assert part.info()["map_size"] > 3 * 2**20


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_sorted_runs_from_frames_write_what_runs_from_records_write(
    tmp_path: Path, fmt: ValueFormat, checksums: bool
) -> None:
    """``SortedRuns.add_frames`` (the sorted restore reading the changelog in place) and
    ``SortedRuns.add`` (decoded records) give the same store, byte for byte."""
    frames, keys, values, stamps, headers = slices_of(int(fmt) * 2 + checksums, 3000)
    for name in ("frames", "records"):
        with (
            Partition(tmp_path / name, sync=False, checksums=checksums) as part,
            BytesKeyValueStore("kv", part) as s,
        ):
            with SortedRuns(s, fmt) as runs:
                if name == "frames":
                    runs.add_frames(frames[: len(frames) // 2])
                    runs.add_frames(frames[len(frames) // 2 :])
                else:
                    runs.add(keys, values, stamps, headers)
                runs.commit(len(keys))
            assert s.committed_offset == len(keys)
    assert dump(tmp_path / "frames") == dump(tmp_path / "records")
    assert dump(tmp_path / "frames")[b"kv"]


def test_sorted_runs_refuse_bad_frames_with_typed_errors(tmp_path: Path) -> None:
    bad, bad_keys = bad_inputs()
    with Partition(tmp_path / "p", sync=False) as part, BytesKeyValueStore("kv", part) as s:
        with SortedRuns(s, ValueFormat.TIMESTAMPED) as runs:
            runs.add_frames([good_frame()])
            for what, frames, _ in bad:
                with pytest.raises(InvalidArgumentError):
                    runs.add_frames(frames)
                assert len(runs.runs) == 1, what  # no run written
            for what, frames, text in bad_keys:
                with pytest.raises(InvalidArgumentError, match=text):
                    runs.add_frames(frames)
                assert len(runs.runs) == 1, what
            with pytest.raises(InvalidTypeError):
                runs.add_frames(7)  # type: ignore[arg-type]
        assert s.committed_offset is None
