"""Sorted runs and their merge (``csrc/restore_runs.c``, :mod:`txstore.bytestores.restore_runs`):
a sorted restore into an empty store must commit exactly what the chunked restore commits
(``restore_records`` chunk after chunk), for every value format, with and without entry
checksums; a bad item raises the chunked path's typed error and commits nothing."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tests.bytestores.test_restore_records import records
from txstore._checksums import encode_run, merge_runs
from txstore.bytestores import restore_runs
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.bytestores.restore_runs import SortedRuns, sorted_restore_applies
from txstore.codecs import ValueFormat
from txstore.engine.partition import Partition
from txstore.errors import IllegalStateError, InvalidArgumentError, InvalidTypeError, StorageError

pytestmark = pytest.mark.filterwarnings("error")


def dump(path: Path) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Every named database of the partition at ``path``, row by row, bytes exact."""
    env = lmdb.open(str(path / "data"), readonly=True, max_dbs=64, lock=True)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            return {n: list(txn.cursor(env.open_db(n, txn=txn, create=False))) for n in names}
    finally:
        env.close()


def chunks(cols: tuple[list[Any], ...], size: int) -> list[tuple[list[Any], ...]]:
    n = len(cols[0])
    return [tuple(c[i : i + size] for c in cols) for i in range(0, n, size)]


def run_of(rows: dict[bytes, bytes | None]) -> bytes:
    live = sorted(k for k, v in rows.items() if v is not None)
    dead = sorted(k for k, v in rows.items() if v is None)
    return encode_run(live, [rows[k] or b"" for k in live], dead)


@pytest.mark.parametrize("window", [1, 7, 64, 10_000])
def test_merge_in_small_windows_keeps_the_latest_run_and_drops_tombstones(window: int) -> None:
    rng = random.Random(window)
    runs, want = [], {}
    for _ in range(9):
        rows: dict[bytes, bytes | None] = {}
        for _ in range(rng.randrange(0, 200)):
            key = rng.randbytes(rng.randint(1, 3))  # few keys: many repeats across runs
            rows[key] = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 30))
        runs.append(run_of(rows))
        want.update(rows)
    read = [0] * len(runs)
    bufs, pos, more = [b""] * len(runs), [0] * len(runs), [len(r) > 0 for r in runs]
    out: list[tuple[bytes, bytes]] = []
    while True:
        keys, values, need = merge_runs(bufs, pos, more, 17)
        assert len(keys) <= 17
        out += zip(keys, values, strict=True)
        if need < 0 and not keys:
            break
        if need >= 0:  # read more of that run, as SortedRuns.merged does
            chunk = runs[need][read[need] : read[need] + window]
            read[need] += len(chunk)
            bufs[need] = bufs[need][pos[need] :] + chunk
            pos[need] = 0
            more[need] = read[need] < len(runs[need])
    assert out == sorted((k, v) for k, v in want.items() if v is not None)


def test_a_run_cut_inside_a_record_is_a_value_error() -> None:
    run = run_of({b"a": b"1", b"b": b"2"})
    with pytest.raises(ValueError, match="ends inside a record"):
        merge_runs([run[:-1]], [0], [False], 10)
    with pytest.raises(TypeError):
        encode_run([b"a"], ["not bytes"], [])  # type: ignore[list-item]


def restore_both(
    tmp_path: Path, fmt: ValueFormat, checksums: bool, seed: int, memory: int | None = None
) -> None:
    """Restore the same changelog chunk by chunk into one partition and by sorted runs into
    another (``memory``: bytes of runs kept in memory, the rest filed; None: the default):
    the two must hold the same bytes."""
    cols = records(seed, 3000)
    parts = chunks(cols, 400)
    opts: dict[str, Any] = {"sync": False, "checksums": checksums}
    with Partition(tmp_path / "chunked", **opts) as p, BytesKeyValueStore("s", p) as s:
        done = 0
        for keys, values, stamps, headers in parts:
            done += len(keys)
            s.restore_records(keys, values, stamps, headers, fmt, done)
    with Partition(tmp_path / "sorted", **opts) as p, BytesKeyValueStore("s", p) as s:
        assert sorted_restore_applies(s)
        budget = {} if memory is None else {"memory_bytes": memory}
        with SortedRuns(s, fmt, **budget) as runs:
            for keys, values, stamps, headers in parts:
                runs.add(keys, values, stamps, headers)
            assert len(runs.runs) == len(parts)
            held = [run for run in runs.runs if isinstance(run, bytes)]
            assert sum(map(len, held)) <= runs.memory_bytes
            if memory is None:  # 3,000 small records: every run in memory
                assert len(held) == len(parts)
            elif memory == 0:
                assert held == []
            else:  # runs held while they fit, the others filed
                assert 0 < len(held) < len(parts)
                assert isinstance(runs.runs[0], bytes)
            runs.commit(3000)
        assert s.committed_offset == 3000
        assert not sorted_restore_applies(s)  # it holds rows now
    assert dump(tmp_path / "sorted") == dump(tmp_path / "chunked")


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("fmt", [ValueFormat.PLAIN, ValueFormat.TIMESTAMPED, ValueFormat.HEADERS])
def test_sorted_restore_writes_what_the_chunked_restore_writes(
    tmp_path: Path, fmt: ValueFormat, checksums: bool
) -> None:
    restore_both(tmp_path, fmt, checksums, int(fmt) * 2 + checksums)


@pytest.mark.parametrize("memory", [0, 60_000])
def test_runs_in_the_file_or_partly_in_memory_write_the_same(tmp_path: Path, memory: int) -> None:
    """Every run filed (a budget of 0), or the first runs in memory and the later ones filed:
    the merge still lets the later run win across the two."""
    restore_both(tmp_path, ValueFormat.HEADERS, True, 11, memory)


def test_filed_runs_merge_through_the_map_in_small_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filed runs merged 100 rows at a time, their pages handed back after every batch
    (``RELEASE_BYTES`` 1): the pages are read again from the page cache when needed."""
    monkeypatch.setattr(restore_runs, "MERGE_BATCH", 100)
    monkeypatch.setattr(restore_runs, "RELEASE_BYTES", 1)
    rng = random.Random(5)
    want: dict[bytes, bytes | None] = {}
    with Partition(tmp_path, sync=False) as p, BytesKeyValueStore("s", p) as s:
        with SortedRuns(s, ValueFormat.PLAIN, memory_bytes=0) as runs:  # every run filed
            for _ in range(3):
                keys = [rng.randbytes(4) for _ in range(3000)] + list(want)[:500]
                values: list[bytes | None] = [rng.randbytes(40) for _ in keys]
                values[-1] = None
                runs.add(keys, values, [0] * len(keys), [b""] * len(keys))
                want.update(zip(keys, values, strict=True))
            assert all(isinstance(run, tuple) for run in runs.runs)
            batches = list(runs.merged())
            assert {len(keys) for keys, _ in batches[:-1]} == {100}
            runs.commit(9)
        with s.all() as it:
            assert list(it) == sorted((k, v) for k, v in want.items() if v is not None)


def test_a_cut_run_file_is_a_storage_error_and_nothing_is_committed(tmp_path: Path) -> None:
    """The run file shorter than its runs (it cannot happen to an unnamed file of the
    process, but a map past its end would kill the process with SIGBUS): a typed error."""
    with Partition(tmp_path, sync=False) as p, BytesKeyValueStore("s", p) as s:
        with SortedRuns(s, ValueFormat.PLAIN, memory_bytes=0) as runs:
            runs.add([b"a", b"b"], [b"1", b"2"], [0, 0], [b"", b""])
            runs.merged()  # nothing read before the first batch
            os.ftruncate(run_file_fd(tmp_path), 5)
            with pytest.raises(StorageError, match="ended early"):
                runs.commit(2)
        assert s.committed_offset is None
        assert s.approximate_num_entries() == 0


def test_a_run_the_disk_refuses_is_a_storage_error_and_nothing_is_committed(
    tmp_path: Path,
) -> None:
    """A file size limit (RLIMIT_FSIZE, as a full disk would) refuses the run file's write:
    a typed error names the directory; the store stays empty and can restore later."""
    rows: dict[bytes, bytes | None] = {i.to_bytes(4, "big"): bytes(100) for i in range(20_000)}
    keys, values = list(rows), list(rows.values())  # a ~2 MiB run
    with Partition(tmp_path, sync=False) as p, BytesKeyValueStore("s", p) as s:
        with SortedRuns(s, ValueFormat.PLAIN, memory_bytes=0) as runs:
            limit = resource.getrlimit(resource.RLIMIT_FSIZE)
            previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, limit[1]))
            try:
                with pytest.raises(StorageError, match=str(tmp_path)):
                    runs.add(keys, values, [0] * len(keys), [b""] * len(keys))
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, limit)
                signal.signal(signal.SIGXFSZ, previous)
        assert s.committed_offset is None and s.approximate_num_entries() == 0
        with SortedRuns(s, ValueFormat.PLAIN, memory_bytes=0) as runs:  # the limit lifted
            runs.add(keys, values, [0] * len(keys), [b""] * len(keys))
            runs.commit(1)
        assert s.approximate_num_entries() == len(rows)


def run_file_fd(directory: Path) -> int:
    """The descriptor of the run file in ``directory`` (through /proc: it has no name)."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{directory}/") and target.endswith("(deleted)"):
                return int(fd)
    raise AssertionError(f"no run file open in {directory}")


def test_a_grown_map_merges_again_from_the_start(tmp_path: Path) -> None:
    """The partition's map is too small and no estimate grows it first: LMDB's MapFull makes
    the write transaction run again on a grown map, which merges the runs from the start."""
    rows = {i.to_bytes(4, "big"): bytes(200) for i in range(20_000)}  # ~4 MiB
    with Partition(tmp_path, sync=False, map_size=1 << 20) as p, BytesKeyValueStore("s", p) as s:
        with SortedRuns(s, ValueFormat.PLAIN) as runs:
            keys = list(rows)
            runs.add(keys, list(rows.values()), [0] * len(keys), [b""] * len(keys))
            calls = []

            def batches() -> Any:
                calls.append(1)
                return runs.merged()

            p.commit_stream("s", s.db, batches, 1, 0)
        assert len(calls) > 1
        assert s.approximate_num_entries() == len(rows)
        assert s.committed_offset == 1


def test_run_files_leave_no_name_and_a_stale_one_is_removed(tmp_path: Path) -> None:
    stale = tmp_path / (restore_runs.PREFIX + "left-by-a-crash")
    with Partition(tmp_path, sync=False) as p, BytesKeyValueStore("s", p) as s:
        before = set(tmp_path.iterdir()) - {stale}
        stale.write_bytes(b"old runs")  # as a kernel without O_TMPFILE could leave one
        with SortedRuns(s, ValueFormat.PLAIN, memory_bytes=0) as runs:
            runs.add([b"a"], [b"1"], [0], [b""])
            assert isinstance(runs.runs[0], tuple)  # filed
            assert set(tmp_path.iterdir()) == before  # the runs have no name
        assert set(tmp_path.iterdir()) == before


def test_an_in_memory_store_takes_the_chunked_path(tmp_path: Path) -> None:
    with BytesKeyValueStore("s") as s:  # on a private MemoryPartition
        assert not sorted_restore_applies(s)
    assert not sorted_restore_applies(object())


def test_a_store_with_rows_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with Partition(tmp_path, sync=False) as p, BytesKeyValueStore("s", p) as s:
        s.put_all([(b"k", b"v")])  # non-empty, but never committed: no offset
        with SortedRuns(s, ValueFormat.PLAIN) as runs:
            runs.add([b"a"], [b"1"], [0], [b""])
            with pytest.raises(IllegalStateError, match="staged"):
                runs.commit(1)
            s.commit(0)
            with pytest.raises(IllegalStateError, match="not empty"):
                runs.commit(1)
        assert s.committed_offset == 0
        assert list(s.all()) == [(b"k", b"v")]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"key": "text"}, InvalidTypeError),  # a key that is not bytes
        ({"key": b""}, InvalidArgumentError),  # an empty key (LMDB refuses it)
        ({"key": b"k" * 600}, InvalidArgumentError),  # a key above LMDB's 511 bytes
        ({"value": 7}, InvalidTypeError),  # a value neither bytes nor None
        ({"stamp": "noon"}, InvalidTypeError),  # a timestamp that is not an int
    ],
)
def test_a_bad_item_raises_the_chunked_paths_typed_error_and_commits_nothing(
    tmp_path: Path, bad: dict[str, Any], error: type[Exception]
) -> None:
    keys: list[Any] = [b"a", b"b", b"c"]
    values: list[Any] = [b"1", None, b"3"]
    stamps: list[Any] = [1, 2, 3]
    keys[1] = bad.get("key", keys[1])
    values[1] = bad.get("value", values[1])
    stamps[2] = bad.get("stamp", stamps[2])  # a live record (a tombstone has no timestamp)
    fmt = ValueFormat.TIMESTAMPED
    with Partition(tmp_path, sync=False) as p, BytesKeyValueStore("s", p) as s:
        with pytest.raises(error) as chunked:
            s.restore_records(keys, values, stamps, [b""] * 3, fmt, 3)
        with SortedRuns(s, fmt) as runs:
            runs.add([b"x"], [b"fine"], [0], [b""])
            with pytest.raises(error) as sorted_:
                runs.add(keys, values, stamps, [b""] * 3)
            assert str(sorted_.value) == str(chunked.value)
            assert len(runs.runs) == 1  # the bad chunk wrote no run
        assert s.committed_offset is None
        assert s.approximate_num_entries() == 0
