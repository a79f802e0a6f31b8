"""The overlay: dict + lazy sorted index, tombstones, budget accounting, spill, ordered reads."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from txstore.engine.iterators import KeyRange, Row
from txstore.engine.overlay import ENTRY_OVERHEAD, NOT_FOUND, DbOverlay, Overlay, SpillEnv
from txstore.errors import StorageError

# A leaked iterator or snapshot (ResourceWarning) fails the test, whatever the config.
pytestmark = pytest.mark.filterwarnings("error")


def memory_overlay(budget: int = 1 << 30) -> Overlay:
    return Overlay(budget, None)


def spilling_overlay(tmp_path: Path, budget: int) -> Overlay:
    return Overlay(budget, SpillEnv(str(tmp_path / "spill"), max_dbs=16, map_size=1 << 20))


def scan(ov: DbOverlay, rng: KeyRange, reverse: bool = False, n: int = 3) -> list[Row]:
    """Read the merged overlay in chunks of ``n`` the way iterators do."""
    out: list[Row] = []
    while True:
        rows, frontier = ov.read_chunk(rng, reverse, n)
        out.extend(reversed(rows) if reverse else rows)
        if frontier is None:
            return out
        rng = rng.after(frontier, reverse)


def test_point_operations_and_tombstones() -> None:
    ov = memory_overlay().db("s", b"s")
    assert ov.get(b"a") is NOT_FOUND
    ov.put(b"a", b"1")
    ov.put(b"b", None)
    assert ov.get(b"a") == b"1"
    assert ov.get(b"b") is None  # a tombstone, not NOT_FOUND: it hides committed data
    ov.put(b"b", b"2")
    ov.put(b"a", None)
    assert (ov.get(b"a"), ov.get(b"b")) == (None, b"2")
    assert ov.staged_counts() == (1, 1)  # one put, one tombstone
    ov._check()


def test_index_is_lazy_and_consistent() -> None:
    ov = memory_overlay().db("s", b"s")
    for k in (b"c", b"a", b"b", b"a"):
        ov.put(k, k)
    assert ov._pending is None and ov._index is None  # no index before an ordered read
    ov._check()
    assert scan(ov, KeyRange()) == [(b"a", b"a"), (b"b", b"b"), (b"c", b"c")]
    assert ov._pending == [] and list(ov._index or ()) == [b"a", b"b", b"c"]
    ov.put(b"bb", None)
    ov.put(b"b", b"B")  # not a new key: not pending
    assert ov._pending == [b"bb"]  # new keys only, not yet indexed
    ov._check()
    assert scan(ov, KeyRange(), reverse=True) == [
        (b"c", b"c"),
        (b"bb", None),
        (b"b", b"B"),
        (b"a", b"a"),
    ]
    assert ov._pending == []
    ov.clear()
    assert ov._pending is None and ov._index is None
    ov._check()


def test_budget_accounting() -> None:
    top = memory_overlay()
    ov = top.db("s", b"s")
    ov.put(b"key", b"value")
    assert ov.mem_bytes == 3 + 5 + ENTRY_OVERHEAD
    ov.put(b"key", b"v")  # overwrite: the value length changes, the entry stays
    assert ov.mem_bytes == 3 + 1 + ENTRY_OVERHEAD
    ov.put(b"key", None)
    assert ov.mem_bytes == 3 + ENTRY_OVERHEAD
    other = top.db("t", b"t")
    other.put(b"x", b"y")
    assert top.mem_bytes == ov.mem_bytes + other.mem_bytes
    assert top.uncommitted_bytes("s") == ov.uncommitted_bytes()
    ov.clear()
    assert top.mem_bytes == other.mem_bytes and ov.is_empty()
    ov._check()


def test_db_name_collision_between_stores_is_refused() -> None:
    top = memory_overlay()
    top.db("a", b"x")
    with pytest.raises(StorageError, match="owned by store 'a'"):
        top.db("b", b"x")


def test_memory_flavour_never_spills() -> None:
    top = memory_overlay(budget=10)
    ov = top.db("s", b"s")
    for i in range(100):
        ov.put(b"%03d" % i, b"v")
    assert not ov.spilled and top.mem_bytes > 10
    with pytest.raises(StorageError, match="no spill environment"):
        top.spill_env()


def test_spill_round_trip(tmp_path: Path) -> None:
    top = spilling_overlay(tmp_path, budget=4096)
    ov = top.db("s", b"s")
    other = top.db("t", b"t")
    other.put(b"o", b"other")
    model: dict[bytes, bytes | None] = {}
    for i in range(300):
        k = b"k%04d" % (i * 7 % 300)
        v = None if i % 5 == 0 else b"v%d" % i
        ov.put(k, v)
        model[k] = v
    assert ov.spilled and other.spilled  # past the budget every memory tier spills
    assert (tmp_path / "spill").is_dir()
    assert top.mem_bytes < 4096 + 200
    # overwrite spilled keys in memory: memory wins over spill
    for k in list(model)[:20]:
        ov.put(k, b"new")
        model[k] = b"new"
    for k, v in model.items():
        assert ov.get(k) == v
    assert ov.get(b"absent") is NOT_FOUND
    assert other.get(b"o") == b"other"
    expected = sorted(model.items())
    assert scan(ov, KeyRange()) == expected
    assert scan(ov, KeyRange(), reverse=True) == expected[::-1]
    assert scan(ov, KeyRange(b"k0100", b"k0200")) == [
        e for e in expected if b"k0100" <= e[0] <= b"k0200"
    ]
    chunks = list(ov.sorted_chunks(n=64))
    assert [r for c in chunks for r in c] == expected and len(chunks) > 1
    top.clear_store("s")
    assert ov.is_empty() and ov.get(b"k0001") is NOT_FOUND
    assert (tmp_path / "spill").is_dir()  # "t" still has spilled rows
    top.clear_store("t")
    assert not (tmp_path / "spill").exists()  # deleted once nothing is spilled


def test_spill_environment_grows_its_map(tmp_path: Path) -> None:
    top = spilling_overlay(tmp_path, budget=256 * 1024)
    ov = top.db("s", b"s")
    for i in range(1200):
        ov.put(b"%06d" % i, os.urandom(2000))  # ~2.4 MB through a 1 MiB spill map
    ov.spill()
    assert ov.get(b"000001") is not NOT_FOUND
    assert len(scan(ov, KeyRange(), n=500)) == 1200
    top.close()
    assert not (tmp_path / "spill").exists()


def test_drop_hides_committed_and_discards_writes() -> None:
    ov = memory_overlay().db("s", b"s.100")
    ov.put(b"a", b"1")
    ov.drop()
    assert ov.dropped and not ov.is_empty()
    assert ov.get(b"a") is None and ov.get(b"zzz") is None  # the whole database is gone
    ov.put(b"b", b"2")  # writes after the drop re-create it
    assert ov.get(b"b") == b"2"


@pytest.mark.parametrize("spill", [False, True])
def test_random_model(tmp_path: Path, spill: bool) -> None:
    """Seeded random operations against a plain dict, with ordered reads of random ranges."""
    rnd = random.Random(892)
    top = spilling_overlay(tmp_path, budget=2000) if spill else memory_overlay()
    ov = top.db("s", b"s")
    model: dict[bytes, bytes | None] = {}
    keys = [bytes([rnd.randrange(4)]) * rnd.randrange(1, 4) + b"%d" % i for i in range(60)]
    for step in range(1500):
        op = rnd.random()
        k = rnd.choice(keys)
        if op < 0.55:
            v = b"v%d" % step
            ov.put(k, v)
            model[k] = v
        elif op < 0.75:
            ov.put(k, None)
            model[k] = None
        elif op < 0.9:
            assert ov.get(k) == model.get(k, NOT_FOUND)
        else:
            lo, hi = sorted(rnd.sample(keys, 2))
            rng = KeyRange(
                rnd.choice([lo, None]),
                rnd.choice([hi, None]),
                rnd.random() < 0.5,
                rnd.random() < 0.5,
            )
            expected = [
                (kk, vv)
                for kk, vv in sorted(model.items())
                if (rng.lo is None or kk > rng.lo or (kk == rng.lo and rng.lo_inclusive))
                and (rng.hi is None or kk < rng.hi or (kk == rng.hi and rng.hi_inclusive))
            ]
            reverse = rnd.random() < 0.5
            got = scan(ov, rng, reverse, n=rnd.randrange(1, 9))
            assert got == (expected[::-1] if reverse else expected), (rng, reverse)
        if step % 100 == 0:
            ov._check()
    assert ov.spilled == spill


@pytest.mark.parametrize("budget", [1 << 30, 3000])
def test_put_many_equals_put_one_by_one(tmp_path: Path, budget: int) -> None:
    """``put_many`` stages what ``put`` in a loop stages: same reads, counts and byte
    accounting, also when its batches cross spills (small budget) and re-stage keys."""
    rnd = random.Random(1035)
    keys = [b"k%03d" % i for i in range(300)]
    batches = [
        [(rnd.choice(keys), rnd.choice([None, b"v%d" % i * rnd.randrange(1, 4)])) for i in range(n)]
        for n in (0, 1, 255, 256, 257, 900)
    ]
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    one = spilling_overlay(tmp_path / "one", budget)
    many = spilling_overlay(tmp_path / "many", budget)
    a, b = one.db("s", b"s"), many.db("s", b"s")
    for batch in batches:
        for k, v in batch:
            a.put(k, v)
        b.put_many(batch)
        if budget == 1 << 30:  # no spill: the very same memory tier
            assert b.staged_counts() == a.staged_counts()
            assert (b.mem_bytes, b.tombstones) == (a.mem_bytes, a.tombstones)
        else:  # spills come up to 256 rows later (counts of re-staged keys then differ)
            assert b.mem_bytes <= budget + 256 * (4 + 12 + ENTRY_OVERHEAD)
        assert many.mem_bytes == b.mem_bytes  # the owner's total follows the database's
        assert scan(b, KeyRange(), n=50) == scan(a, KeyRange(), n=50)
        b._check()
    assert b.spilled == a.spilled == (budget < 1 << 30)
    assert [b.get(k) for k in keys] == [a.get(k) for k in keys]
