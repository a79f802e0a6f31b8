"""Merge iterators: bounds, direction, peek/close, store close, writes during iteration, leaks."""

from __future__ import annotations

import gc
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txstore.bytestores.kv import BytesKeyValueStore, MemoryPartition
from txstore.engine.base import PartitionBase
from txstore.engine.chunk_reads import read_lmdb_chunk
from txstore.engine.iterators import (
    CHUNK_MIN,
    ChunkedIterator,
    KeyRange,
    MergedSource,
    Row,
    merge_rows,
    next_prefix,
)
from txstore.engine.partition import Partition

FLAVOURS = ["lmdb-tx", "lmdb-direct", "memory-tx", "memory-direct"]

# A leaked iterator or snapshot (ResourceWarning) fails the test, whatever the config.
pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(params=FLAVOURS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BytesKeyValueStore]:
    p: PartitionBase = (
        Partition(tmp_path / "p", sync=False)
        if request.param.startswith("lmdb")
        else MemoryPartition()
    )
    s = BytesKeyValueStore("kv", p, transactional=request.param.endswith("-tx"))
    yield s
    p.close()


def keys(it: Iterator[tuple[bytes, bytes]]) -> list[bytes]:
    return [k for k, _ in it]


def fill(store: BytesKeyValueStore, n: int = 10) -> None:
    store.put_all((b"k%02d" % i, b"v%02d" % i) for i in range(n))
    store.commit(1)


# -- building blocks ----------------------------------------------------------------------


rows_strategy = st.dictionaries(
    st.binary(min_size=1, max_size=3), st.one_of(st.none(), st.binary(max_size=2)), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(upper=rows_strategy, lower=rows_strategy, keep=st.booleans())
def test_merge_rows_matches_a_dict_model(
    upper: dict[bytes, bytes | None], lower: dict[bytes, bytes | None], keep: bool
) -> None:
    if not keep:
        lower = {k: v for k, v in lower.items() if v is not None}  # committed tiers: no tombstones
    model = {**lower, **upper}
    expected = sorted((k, v) for k, v in model.items() if keep or v is not None)
    got = merge_rows(sorted(upper.items()), sorted(lower.items()), keep)
    assert got == expected


def test_merge_rows_in_c_on_chunk_sized_tiers_and_bad_rows() -> None:
    rng = random.Random(11)
    committed: dict[bytes, bytes | None] = {
        rng.randbytes(rng.randrange(1, 20)): rng.randbytes(8) for _ in range(1500)
    }
    lower = sorted(committed.items())
    for density in (0.01, 0.1, 0.5, 2.0):  # sparse (bisected) and dense (walked) upper tiers
        staged: dict[bytes, bytes | None] = {}
        for k, _ in rng.sample(lower, int(len(lower) * min(density, 1.0))):
            staged[k] = None if rng.random() < 0.3 else b"new"  # deletes and updates
        for _ in range(int(len(lower) * density / 2)):
            staged[rng.randbytes(rng.randrange(1, 20))] = b"inserted"
        upper = sorted(staged.items())
        for keep in (False, True):
            model = {**committed, **staged}
            expected = sorted((k, v) for k, v in model.items() if keep or v is not None)
            assert merge_rows(upper, lower, keep) == expected
    assert merge_rows([], lower, False) is lower  # nothing staged: the committed chunk as is
    for bad_upper, bad_lower in (
        ([(1, b"v")], lower),  # a key that is not bytes
        ([(b"k",)], lower),  # not a 2-tuple
        ([(b"k", b"v")], [[b"a", b"v"]]),  # a list, not a tuple
    ):
        with pytest.raises(TypeError):
            merge_rows(bad_upper, bad_lower, False)  # type: ignore[arg-type]


class _FlakySource:
    """A source of ``n`` rows whose reads fail while ``fail`` is set."""

    def __init__(self, n: int) -> None:
        self.rows: list[Row] = [(b"%04d" % i, b"v") for i in range(n)]
        self.fail = False
        self.reads = 0

    def read_chunk(self, rng: KeyRange, reverse: bool, n: int) -> tuple[list[Row], bytes | None]:
        self.reads += 1
        if self.fail:
            raise OSError("read failed")
        inside = [
            r
            for r in self.rows
            if (rng.lo is None or r[0] > rng.lo or (r[0] == rng.lo and rng.lo_inclusive))
            and (rng.hi is None or r[0] < rng.hi or (r[0] == rng.hi and rng.hi_inclusive))
        ]
        chunk = inside[-n:] if reverse else inside[:n]
        if len(inside) <= n:
            return chunk, None
        return chunk, chunk[0][0] if reverse else chunk[-1][0]


@pytest.mark.parametrize("reverse", [False, True])
def test_chunked_iterator_retries_a_failed_read_and_peeks_across_chunks(reverse: bool) -> None:
    source = _FlakySource(CHUNK_MIN * 3 + 5)
    expect = source.rows[::-1] if reverse else source.rows
    closed: list[ChunkedIterator] = []
    it = ChunkedIterator(source, KeyRange(), reverse, closed.append)
    got = [next(it) for _ in range(CHUNK_MIN)]  # the whole first chunk
    assert it.peek_next_key() == expect[CHUNK_MIN][0]  # reads the second chunk ahead
    assert it.has_next() and next(it) == expect[CHUNK_MIN]
    got.append(expect[CHUNK_MIN])
    while len(got) < CHUNK_MIN * 3:  # the rest of the second chunk (256 rows)
        got.append(next(it))
    source.fail = True
    for _ in range(2):  # every next() while the source fails raises its error
        with pytest.raises(OSError, match="read failed"):
            next(it)
    assert not it.closed
    source.fail = False
    got += list(it)  # the read is retried: nothing lost, nothing twice
    assert got == expect and it.closed and closed == [it]
    assert it.peek_next_key() is None and list(it) == []


def test_chunked_iterator_closed_mid_chunk_stops_at_once() -> None:
    source = _FlakySource(50)
    it = ChunkedIterator(source, KeyRange())
    assert next(it) == source.rows[0]
    reads = source.reads
    it.close()
    assert list(it) == [] and it.peek_next_key() is None and source.reads == reads
    gc.collect()  # no warning from a closed iterator (warnings are errors)


def test_next_prefix_and_prefix_range() -> None:
    assert next_prefix(b"ab") == b"ac"
    assert next_prefix(b"a\xff\xff") == b"b"
    assert next_prefix(b"\xff\xff") is None
    assert next_prefix(b"") is None
    rng = KeyRange.prefix(b"\xff")
    assert (rng.lo, rng.hi) == (b"\xff", None)
    assert KeyRange(b"b", b"a").is_empty() and KeyRange(b"a", b"a", False, True).is_empty()
    assert not KeyRange(b"a", b"a").is_empty()


def test_read_lmdb_chunk_against_a_model(tmp_path: Path) -> None:
    rnd = random.Random(7)
    data = sorted(
        {bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4))) for _ in range(300)}
    )
    env = lmdb.open(str(tmp_path / "env"), map_size=1 << 22)
    with env.begin(write=True) as txn:
        for k in data:
            txn.put(k, k)
    try:
        for _ in range(400):
            lo, hi = sorted(rnd.sample(data, 2))
            rng = KeyRange(
                rnd.choice([lo, None, lo + b"\x00"]),
                rnd.choice([hi, None, hi + b"\x00"]),
                rnd.random() < 0.5,
                rnd.random() < 0.5,
            )
            reverse, n = rnd.random() < 0.5, rnd.randrange(1, 50)
            expected = [
                (k, k)
                for k in data
                if (rng.lo is None or k > rng.lo or (k == rng.lo and rng.lo_inclusive))
                and (rng.hi is None or k < rng.hi or (k == rng.hi and rng.hi_inclusive))
            ]
            got: list[Row] = []
            cur_rng = rng
            while True:
                with env.begin() as txn:
                    rows, frontier = read_lmdb_chunk(txn.cursor(), cur_rng, reverse, n)
                assert len(rows) <= n and rows == sorted(rows)
                got.extend(reversed(rows) if reverse else rows)
                if frontier is None:
                    break
                cur_rng = cur_rng.after(frontier, reverse)
            assert got == (expected[::-1] if reverse else expected), (rng, reverse, n)
    finally:
        env.close()


def test_merged_source_stacks_tiers() -> None:
    class ListSource:
        def __init__(self, rows: dict[bytes, bytes | None]) -> None:
            self.rows = sorted(rows.items())

        def read_chunk(
            self, rng: KeyRange, reverse: bool, n: int
        ) -> tuple[list[Row], bytes | None]:
            inside = [
                r
                for r in self.rows
                if (rng.lo is None or r[0] > rng.lo or (r[0] == rng.lo and rng.lo_inclusive))
                and (rng.hi is None or r[0] < rng.hi or (r[0] == rng.hi and rng.hi_inclusive))
            ]
            chunk = inside[-n:] if reverse else inside[:n]
            if len(inside) <= n:
                return chunk, None
            return chunk, chunk[0][0] if reverse else chunk[-1][0]

    lower = ListSource({b"%02d" % i: b"c" for i in range(0, 40, 2)})
    upper = ListSource({b"04": None, b"05": b"u", b"06": b"u", b"39": b"u"})
    merged = MergedSource(upper, lower, keep_tombstones=False)
    expect = sorted(
        [(b"%02d" % i, b"c") for i in range(0, 40, 2) if i not in (4, 6)]
        + [(b"05", b"u"), (b"06", b"u"), (b"39", b"u")]
    )
    for reverse in (False, True):
        it = ChunkedIterator(merged, KeyRange(), reverse)
        assert list(it) == (expect[::-1] if reverse else expect)
        assert it.closed  # exhausted iterators close themselves


# -- through the store --------------------------------------------------------------------


def test_inclusive_bounds_and_none_sides(store: BytesKeyValueStore) -> None:
    fill(store)
    assert keys(store.range(b"k02", b"k04")) == [b"k02", b"k03", b"k04"]
    assert keys(store.range(b"k02a", b"k04")) == [b"k03", b"k04"]  # bounds need not exist
    assert keys(store.range(None, b"k01")) == [b"k00", b"k01"]
    assert keys(store.range(b"k08", None)) == [b"k08", b"k09"]
    assert len(keys(store.range(None, None))) == 10
    assert keys(store.range(b"k03", b"k03")) == [b"k03"]
    assert keys(store.reverse_range(b"k02", b"k04")) == [b"k04", b"k03", b"k02"]
    assert keys(store.reverse_range(None, b"k01")) == [b"k01", b"k00"]
    assert keys(store.reverse_all())[:2] == [b"k09", b"k08"]
    assert keys(store.prefix_scan(b"k0")) == keys(store.all())
    assert keys(store.prefix_scan(b"k05")) == [b"k05"]
    assert keys(store.prefix_scan(b"zz")) == []


def test_prefix_scan_with_ff_bytes(store: BytesKeyValueStore) -> None:
    for k in (b"\xfe\xff", b"\xff", b"\xff\x00", b"\xff\xff\xff", b"a"):
        store.put(k, b"v")
    assert keys(store.prefix_scan(b"\xff")) == [b"\xff", b"\xff\x00", b"\xff\xff\xff"]
    assert keys(store.prefix_scan(b"\xfe")) == [b"\xfe\xff"]
    assert len(keys(store.prefix_scan(b""))) == 5


def test_from_above_to_is_empty_with_kafkas_warning(
    store: BytesKeyValueStore, caplog: pytest.LogCaptureFixture
) -> None:

    fill(store)
    with caplog.at_level(logging.WARNING, logger="txstore"):
        assert list(store.range(b"k05", b"k01")) == []
        assert list(store.reverse_range(b"k05", b"k01")) == []
    msgs = [r.getMessage() for r in caplog.records if r.name == "txstore"]
    assert len(msgs) == 2
    assert msgs[0].startswith(
        "Returning empty iterator for fetch with invalid key range: from > to."
    )
    assert "serdes that don't preserve ordering" in msgs[0]
    assert msgs[0].endswith("do not follow this for negative numbers")


def test_peek_has_next_close(store: BytesKeyValueStore) -> None:
    fill(store, 3)
    with store.all() as it:
        assert it.peek_next_key() == b"k00" and it.peek_next_key() == b"k00"
        assert it.has_next()
        assert next(it) == (b"k00", b"v00")
        assert it.peek_next_key() == b"k01"
        it.close()
        assert it.closed and not it.has_next() and it.peek_next_key() is None
        assert list(it) == []
        it.close()  # idempotent
    it = store.range(b"k02", None)
    assert next(it) == (b"k02", b"v02")
    assert not it.has_next() and it.closed  # exhausted: closed, no warning later
    with pytest.raises(StopIteration):
        next(it)


def test_store_close_closes_iterators(store: BytesKeyValueStore) -> None:
    fill(store, 3)
    it = store.all()
    view_it = store.read_committed().all()
    assert next(it)[0] == b"k00" and next(view_it)[0] == b"k00"
    store.close()
    assert it.closed and view_it.closed
    assert it.peek_next_key() is None and list(it) == [] and list(view_it) == []


def test_tombstones_hide_committed_and_overlay_wins(tmp_path: Path) -> None:
    with Partition(tmp_path / "p", sync=False) as p:
        s = BytesKeyValueStore("kv", p)
        fill(s, 6)
        s.delete(b"k01")
        s.put(b"k02", b"new")
        s.put(b"k025", b"ins")
        s.delete(b"k05")
        expected = [(b"k00", b"v00"), (b"k02", b"new"), (b"k025", b"ins")]
        expected += [(b"k03", b"v03"), (b"k04", b"v04")]
        assert list(s.all()) == expected
        assert list(s.reverse_all()) == expected[::-1]
        assert len(list(s.read_committed().all())) == 6


@pytest.mark.parametrize("reverse", [False, True])
def test_writes_during_iteration(store: BytesKeyValueStore, reverse: bool) -> None:
    """No crash, keys strictly monotonic, every key that exists throughout is seen once."""
    n = 600  # several chunks
    store.put_all((b"k%04d" % i, b"v") for i in range(0, 2 * n, 2))
    store.commit(1)
    stable = {b"k%04d" % i for i in range(0, 2 * n, 2) if i % 6 != 0}
    seen: list[bytes] = []
    rnd = random.Random(3)
    with store.reverse_all() if reverse else store.all() as it:
        for k, _ in it:
            seen.append(k)
            for _ in range(2):
                j = rnd.randrange(2 * n)
                if j % 2:
                    store.put(b"k%04d" % j, b"new")  # inserts before and after the cursor
                elif j % 6 == 0:
                    store.delete(b"k%04d" % j)  # deletes only non-stable keys
                else:
                    store.put(b"k%04d" % j, b"upd")
            if len(seen) % 97 == 0 and not store.transactional:
                store.commit(len(seen))
            if len(seen) % 150 == 0 and store.transactional:
                store.commit(len(seen))  # commits during iteration too
    assert seen == sorted(seen, reverse=reverse) and len(seen) == len(set(seen))
    assert stable <= set(seen)


def test_leaked_iterator_emits_resource_warning(store: BytesKeyValueStore) -> None:
    fill(store, 3)
    it = store.all()
    next(it)
    with pytest.warns(ResourceWarning, match="unclosed txstore iterator"):
        del it
        gc.collect()


def test_exhausted_or_closed_iterators_do_not_warn(store: BytesKeyValueStore) -> None:
    fill(store, 3)
    list(store.all())
    it = store.all()
    it.close()
    del it
    gc.collect()  # -W error turns a stray ResourceWarning into a failure


def test_merged_scan_of_a_large_overlay_over_committed_rows(tmp_path: Path) -> None:
    """A scan merging 20,000 overlay writes into 200,000 committed rows returns every key once,
    the overlay's value where it wrote one. (Its speed is measured in perf/bench_kv.py.)"""
    with Partition(tmp_path / "p", sync=False) as p:
        s = BytesKeyValueStore("kv", p)
        n = 200_000
        expected = {b"k%08d" % i: b"v" * 16 for i in range(0, 2 * n, 2)}
        s.put_all(expected.items())
        s.commit(1)
        rnd = random.Random(1)
        for _ in range(n // 10):
            key = b"k%08d" % rnd.randrange(2 * n)
            s.put(key, b"x")
            expected[key] = b"x"
        rows = list(s.all())
        assert [k for k, _ in rows] == sorted(expected)
        assert dict(rows) == expected
