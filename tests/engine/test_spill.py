"""The spill environment: sorted runs, tiered merges, remapping, growth, and the overlay over it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine import spill as spill_mod
from txstore.engine.iterators import KeyRange, Row
from txstore.engine.overlay import NOT_FOUND, DbOverlay, Overlay
from txstore.engine.partition import Partition
from txstore.engine.spill import MERGE_FANOUT, Run, SpillEnv
from txstore.errors import StorageError

pytestmark = pytest.mark.filterwarnings("error")


def spill_env(tmp_path: Path, max_dbs: int = 16, map_size: int = 1 << 20) -> SpillEnv:
    return SpillEnv(str(tmp_path / "spill"), max_dbs=max_dbs, map_size=map_size)


def scan(ov: DbOverlay, rng: KeyRange, reverse: bool = False, n: int = 7) -> list[Row]:
    out: list[Row] = []
    while True:
        rows, frontier = ov.read_chunk(rng, reverse, n)
        out.extend(reversed(rows) if reverse else rows)
        if frontier is None:
            return out
        rng = rng.after(frontier, reverse)


def test_runs_newest_wins_and_tombstones(tmp_path: Path) -> None:
    env = spill_env(tmp_path)
    old = env.write_run([(b"a", b"1"), (b"b", b"1"), (b"c", None)], 1)
    new = env.write_run([(b"b", None), (b"c", b"2"), (b"d", b"2")], 1)
    newest_first = [new, old]
    assert env.get(newest_first, b"a") == b"1"
    assert env.get(newest_first, b"b") is None  # a tombstone in the newer run hides the older
    assert env.get(newest_first, b"c") == b"2"
    assert env.get(newest_first, b"zz") is NOT_FOUND
    merged = env.merge([old, new], 1)
    assert (merged.level, merged.rows, merged.tombstones) == (1, 4, 1) and env.run_count == 1
    assert [env.get([merged], k) for k in (b"a", b"b", b"c", b"d")] == [b"1", None, b"2", b"2"]
    env.close()
    assert not (tmp_path / "spill").exists()


def test_append_of_unsorted_rows_is_refused_and_leaves_no_run(tmp_path: Path) -> None:
    env = spill_env(tmp_path)
    with pytest.raises(StorageError, match="keys not sorted"):
        env.write_run([(b"b", b"1"), (b"a", b"1")], 0)
    assert env.run_count == 0
    env.close()


def test_tiered_merges_keep_levels_bounded(tmp_path: Path) -> None:
    top = Overlay(600, spill_env(tmp_path))
    ov = top.db("s", b"s")
    model: dict[bytes, bytes | None] = {}
    rnd = random.Random(7)
    for i in range(3000):
        k = b"k%05d" % rnd.randrange(1500)
        v = None if i % 7 == 0 else b"v%d" % i
        ov.put(k, v)
        model[k] = v
        if i % 500 == 0:
            ov._check()
    ov._check()
    levels = [r.level for r in ov.runs]
    assert max(levels) >= 2, levels  # spilled often enough to merge merged runs
    assert all(levels.count(lv) < MERGE_FANOUT for lv in set(levels))
    assert top.spill_env().run_count == len(ov.runs)  # merged inputs were dropped
    for k, v in model.items():
        assert ov.get(k) == v
    expected = sorted(model.items())
    assert scan(ov, KeyRange()) == expected
    assert scan(ov, KeyRange(), reverse=True) == expected[::-1]
    assert [r for c in ov.sorted_chunks(n=100) for r in c] == expected
    ov.clear()
    assert ov.is_empty() and top.spill_env().run_count == 0
    top.close()


def test_environment_reopens_with_more_databases(tmp_path: Path) -> None:
    env = spill_env(tmp_path, max_dbs=1)  # raised to 2 x MERGE_FANOUT, then doubled
    runs: list[Run] = [env.write_run([(b"k%03d" % i, b"v")], 0) for i in range(40)]
    assert env.run_count == 40 and env._max_dbs == 64
    assert all(env.get([run], b"k%03d" % i) == b"v" for i, run in enumerate(runs))
    env.close()


def test_map_grows_during_runs_and_merges(tmp_path: Path) -> None:
    env = spill_env(tmp_path, map_size=1 << 20)
    value = b"x" * 1500
    runs = [env.write_run([(b"%02d%05d" % (r, i), value) for i in range(300)], 0) for r in range(3)]
    merged = env.merge(runs, 1)  # ~2.7 MB through a 1 MiB map, twice
    assert merged.rows == 900 and env.get([merged], b"0100299") == value
    env.close()


def test_remap_mid_merge_and_mid_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing and reopening the map (to unmap the pages reads touched) keeps every run."""
    monkeypatch.setattr(spill_mod, "REMAP_BYTES", 1)  # reopen at every opportunity
    monkeypatch.setattr(spill_mod, "MERGE_READ", 5)
    monkeypatch.setattr(spill_mod, "WRITE_PIECE", 7)
    reopened = []
    original = SpillEnv._reopen

    def counting(self: SpillEnv) -> None:
        reopened.append(1)
        original(self)

    monkeypatch.setattr(SpillEnv, "_reopen", counting)
    top = Overlay(2000, spill_env(tmp_path))
    ov = top.db("s", b"s")
    model: dict[bytes, bytes | None] = {}
    for i in range(400):
        k = b"k%04d" % (i * 37 % 400)
        v = None if i % 3 == 0 else b"v%d" % i
        ov.put(k, v)
        model[k] = v
    for i in range(0, 400, 7):  # tombstones over spilled puts, and puts over tombstones
        k = b"k%04d" % i
        v = None if model[k] is not None else b"back"
        ov.put(k, v)
        model[k] = v
    ov.spill()
    assert any(r.level > 0 for r in ov.runs) and any(r.tombstones for r in ov.runs)
    ov._check()
    merges = len(reopened)
    assert merges > 0
    assert scan(ov, KeyRange(b"k0100", None), n=3) == [
        e for e in sorted(model.items()) if e[0] >= b"k0100"
    ]
    assert scan(ov, KeyRange(None, b"k0300"), reverse=True, n=4) == [
        e for e in sorted(model.items(), reverse=True) if e[0] <= b"k0300"
    ]
    assert len(reopened) > merges  # the scan reopened the map too
    assert all(ov.get(k) == v for k, v in model.items())
    top.close()


def test_uncommitted_state_and_counts_are_unchanged_by_merges(tmp_path: Path) -> None:
    """Counts keep their pre-merge meaning: a key re-staged across spills counts twice."""
    top = Overlay(10**9, spill_env(tmp_path))
    ov = top.db("s", b"s")
    for round_ in range(MERGE_FANOUT):
        ov.put(b"same", b"v%d" % round_)
        ov.put(b"gone%d" % round_, None)
        ov.spill()
    assert len(ov.runs) == 1 and ov.runs[0].level == 1  # the eighth spill merged them
    puts, tombstones = ov.staged_counts()
    assert (puts, tombstones) == (MERGE_FANOUT, MERGE_FANOUT)
    assert ov.get(b"same") == b"v%d" % (MERGE_FANOUT - 1)
    top.close()


def test_partition_commit_of_merged_runs(tmp_path: Path) -> None:
    with Partition(tmp_path / "p", overlay_budget_bytes=2048) as p:
        s = BytesKeyValueStore("kv", p)
        s.put_all((b"%05d" % i, b"old") for i in range(0, 2000, 2))
        s.commit(1)
        model = {b"%05d" % i: b"old" for i in range(0, 2000, 2)}
        rnd = random.Random(3)
        for i in range(4000):
            k = b"%05d" % rnd.randrange(2000)
            if i % 5 == 0:
                s.delete(k)
                model.pop(k, None)
            else:
                s.put(k, b"n%d" % i)
                model[k] = b"n%d" % i
        assert p.overlay is not None
        (ov,) = p.overlay.dbs("kv")
        assert any(r.level > 0 for r in ov.runs)
        with s.all() as it:
            assert list(it) == sorted(model.items())
        s.commit(2)
        assert not (tmp_path / "p" / "spill").exists()
        with s.all() as it:
            assert list(it) == sorted(model.items())
