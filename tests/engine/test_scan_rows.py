"""The C chunk reader of committed rows (``csrc/scan_rows.c``, issue 27).

:func:`~txstore.engine.chunk_reads.read_lmdb_chunk` positions an LMDB cursor and hands its
iterator to ``txstore._checksums.scan_rows``, which reads at most n rows, stops at the range's
end and checks and strips the checksum trailers as it reads. Each test holds it against the
Python path it replaced (:func:`~txstore.engine.chunk_reads.read_lmdb_chunk_py` followed by the
partition's ``verify_rows``) or against a model: on random real LMDB files, for every
inclusive/exclusive bound, both directions, checksums on and off, under an overlay of puts,
deletes and inserts. A flipped byte in ``data.mdb`` must raise the same
:class:`~txstore.errors.DamagedFileError` (same key) and record the same damage as before; no
path leaks (reference counts of rows it did not own, RSS over many chunks and errors).
"""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from txstore._checksums import scan_rows
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.checksums import recorded_damage, seal, unseal_rows
from txstore.engine.chunk_reads import read_lmdb_chunk, read_lmdb_chunk_py
from txstore.engine.iterators import ChunkedIterator, KeyRange, Row
from txstore.engine.partition import Partition
from txstore.errors import DamagedFileError

pytestmark = pytest.mark.filterwarnings("error")


def random_rows(rnd: random.Random, n: int) -> dict[bytes, bytes]:
    """Short keys (many shared prefixes, some 0xff bytes) and values of 0 to 12 bytes."""
    alphabet = b"ab\x00\xff"
    return {
        bytes(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 6))): rnd.randbytes(
            rnd.randrange(0, 13)
        )
        for _ in range(n)
    }


def random_range(rnd: random.Random, keys: list[bytes]) -> KeyRange:
    """A range whose ends are keys, keys plus a byte, or None, each end inclusive or not."""
    lo, hi = sorted(rnd.sample(keys, 2))
    return KeyRange(
        rnd.choice([lo, None, lo + b"\x00", lo[:1]]),
        rnd.choice([hi, None, hi + b"\x00", hi[:1]]),
        rnd.random() < 0.5,
        rnd.random() < 0.5,
    )


def inside(rng: KeyRange, k: bytes) -> bool:
    return (rng.lo is None or k > rng.lo or (k == rng.lo and rng.lo_inclusive)) and (
        rng.hi is None or k < rng.hi or (k == rng.hi and rng.hi_inclusive)
    )


def never(rows: list[Any]) -> list[Any]:
    raise AssertionError("a healthy chunk took the Python path")


@pytest.mark.parametrize("sealed", [False, True])
def test_read_lmdb_chunk_equals_the_python_path(tmp_path: Path, sealed: bool) -> None:
    rnd = random.Random(27 + sealed)
    data = random_rows(rnd, 400)
    keys = sorted(data)
    env = lmdb.open(str(tmp_path / "env"), map_size=1 << 22)
    try:
        with env.begin(write=True) as txn:
            for k, v in data.items():
                txn.put(k, seal(k, v) if sealed else v)
        for _ in range(600):
            rng = random_range(rnd, keys)
            reverse, n = rnd.random() < 0.5, rnd.choice([1, 2, 3, 7, 50, 128, 1024])
            with env.begin() as txn:
                got = read_lmdb_chunk(txn.cursor(), rng, reverse, n, never if sealed else None)
                rows, frontier = read_lmdb_chunk_py(txn.cursor(), rng, reverse, n)
            assert got == ((unseal_rows(rows) if sealed else rows), frontier), (rng, reverse, n)
        # the whole range, chunk after chunk, against the model
        for _ in range(100):
            rng, reverse, n = random_range(rnd, keys), rnd.random() < 0.5, rnd.randrange(1, 40)
            out: list[Row] = []
            cur = rng
            while True:
                with env.begin() as txn:
                    rows, frontier = read_lmdb_chunk(
                        txn.cursor(), cur, reverse, n, never if sealed else None
                    )
                assert len(rows) <= n and rows == sorted(rows)
                out.extend(reversed(rows) if reverse else rows)
                if frontier is None:
                    break
                cur = cur.after(frontier, reverse)
            expected = [(k, data[k]) for k in keys if inside(rng, k)]
            assert out == (expected[::-1] if reverse else expected), (rng, reverse, n)
    finally:
        env.close()


def test_scan_rows_reads_no_row_past_n_and_stops_at_the_bound() -> None:
    rows = [(b"%02d" % i, b"v%d" % i) for i in range(10)]
    it = iter(rows)
    assert scan_rows(it, 3, None, True, False, False) == (rows[:3], False)
    assert next(it) == rows[3]  # the fourth row was not taken
    assert scan_rows(iter(rows), 20, b"04", True, False, False) == (rows[:5], True)
    assert scan_rows(iter(rows), 20, b"04", False, False, False) == (rows[:4], True)
    down = iter(rows[::-1])
    assert scan_rows(down, 20, b"07", False, True, False) == (rows[8:], True)
    assert scan_rows(iter(rows[::-1]), 20, b"07", True, True, False) == (rows[7:], True)
    assert scan_rows(iter(rows[::-1]), 4, None, True, True, False) == (rows[6:], False)
    assert scan_rows(iter([]), 4, b"x", True, False, True) == ([], False)
    many = [(b"%05d" % i, seal(b"%05d" % i, b"v")) for i in range(3000)]  # past 1,024 rows
    assert scan_rows(iter(many), 2500, None, True, False, False) == (many[:2500], False)
    assert scan_rows(iter(many[::-1]), 2950, b"00100", False, True, True) == (
        [(k, b"v") for k, _ in many[101:]],
        True,
    )


def test_scan_rows_leaves_rows_it_does_not_own_as_they_were() -> None:
    """Rows and values someone else holds are copied, never shortened in place; only a row and
    value this read holds alone (what py-lmdb makes) are reused."""
    plain = [(b"k%d" % i, b"value-%d" % i) for i in range(50)]
    stored = [(k, seal(k, v)) for k, v in plain]
    before = [(sys.getrefcount(r), sys.getrefcount(r[1])) for r in stored]
    got, stopped = scan_rows(iter(stored), 100, None, True, False, True) or ([], True)
    assert got == plain and not stopped
    assert all(g is not s for g, s in zip(got, stored, strict=True))
    assert stored == [(k, seal(k, v)) for k, v in plain]  # untouched
    del got
    assert [(sys.getrefcount(r), sys.getrefcount(r[1])) for r in stored] == before

    def fresh() -> Iterator[tuple[bytes, bytes]]:  # rows only the reader holds
        for k, v in plain:
            yield (k, seal(k, v + b"!"))

    got, _ = scan_rows(fresh(), 100, None, True, False, True) or ([], True)
    assert got == [(k, v + b"!") for k, v in plain]
    assert {r[1]: 1 for r in got}[b"value-3!"] == 1  # shortened in place, hashes as it reads
    # a value too short to shorten in place (1 byte once stripped): copied
    assert scan_rows(iter([(b"a", seal(b"a", b"x"))]), 5, None, True, False, True) == (
        [(b"a", b"x")],
        False,
    )


def test_scan_rows_gives_the_general_path_anything_unusual() -> None:
    good = (b"a", seal(b"a", b"value"))
    for odd in [
        (b"b", seal(b"a", b"value")),  # a mismatch (the trailer of another key)
        (b"b", b"abc"),  # shorter than a trailer
        (b"b", bytearray(seal(b"b", b"x"))),  # not exactly bytes
        (b"b", seal(b"b", b"v"), b"extra"),  # not a 2-tuple
        [b"b", seal(b"b", b"v")],  # not a tuple
    ]:
        assert scan_rows(iter([good, odd]), 5, None, True, False, True) is None, odd
    odd_value = (b"b", bytearray(b"v"))
    # with a bound to compare, a key that is not bytes goes to Python too
    assert scan_rows(iter([good, (bytearray(b"b"), b"v")]), 5, b"z", True, False, False) is None
    # with neither a bound nor trailers, 2-tuples are taken as they come (as list(islice()))
    assert scan_rows(iter([good, odd_value]), 5, None, True, False, False) == (
        [good, odd_value],
        False,
    )
    assert scan_rows(iter([good, (b"b",)]), 5, None, True, False, False) is None

    def failing() -> Iterator[tuple[bytes, bytes]]:
        yield good
        raise lmdb.CorruptedError("a damaged page")

    with pytest.raises(lmdb.CorruptedError):
        scan_rows(failing(), 5, None, True, False, True)
    with pytest.raises(TypeError):
        scan_rows([good], 5, None, True, False, True)  # a list, not an iterator
    with pytest.raises(TypeError):
        scan_rows(iter([good]), 5, "a", True, False, True)  # type: ignore[arg-type]  # a str bound


def committed_and_staged(
    tmp_path: Path, checksums: bool, seed: int
) -> tuple[Partition, BytesKeyValueStore, dict[bytes, bytes]]:
    """A store with random committed rows and an overlay of puts, deletes and inserts; the
    model of what it reads."""
    rnd = random.Random(seed)
    part = Partition(tmp_path / f"p{checksums}", sync=False, checksums=checksums)
    store = BytesKeyValueStore("kv", part)
    committed = random_rows(rnd, 1500)
    store.put_all(committed.items())
    store.commit(1)
    model = dict(committed)
    for k in rnd.sample(sorted(committed), 200):
        model[k] = rnd.randbytes(rnd.randrange(0, 9))
        store.put(k, model[k])
    for k in rnd.sample(sorted(committed), 150):
        model.pop(k, None)
        store.delete(k)
    for k, v in random_rows(rnd, 150).items():
        model[k] = v
        store.put(k, v)
    return part, store, model


def drain(it: Any) -> list[tuple[bytes, bytes]]:
    with it:
        return list(it)


@pytest.mark.parametrize("checksums", [False, True])
def test_merged_scans_equal_the_model(tmp_path: Path, checksums: bool) -> None:
    part, store, model = committed_and_staged(tmp_path, checksums, seed=5 + checksums)
    rnd = random.Random(11)
    keys = sorted(model)
    try:
        assert drain(store.all()) == sorted(model.items())
        assert drain(store.reverse_all()) == sorted(model.items(), reverse=True)
        for _ in range(60):
            lo, hi = sorted(rnd.sample(keys, 2))
            want = [(k, model[k]) for k in keys if lo <= k <= hi]
            assert drain(store.range(lo, hi)) == want
            assert drain(store.reverse_range(lo, hi)) == want[::-1]
            prefix = rnd.choice(keys)[: rnd.randrange(0, 3)]
            assert drain(store.prefix_scan(prefix)) == [
                (k, model[k]) for k in keys if k.startswith(prefix)
            ]
        # every bound kind through the committed source (the store's own ranges are inclusive)
        committed = {k: v for k, v in drain(store.read_committed().all())}
        ckeys = sorted(committed)
        for _ in range(60):
            rng, reverse = random_range(rnd, ckeys), rnd.random() < 0.5
            want = [(k, committed[k]) for k in ckeys if inside(rng, k)]
            got = drain(ChunkedIterator(part.source(store.db), rng, reverse))
            assert got == (want[::-1] if reverse else want), (rng, reverse)
        with store.snapshot() as snap:
            assert drain(snap.all()) == sorted(committed.items())
    finally:
        part.close()


def damage(path: Path, stored: bytes) -> None:
    """Flip the first byte of ``stored`` (found once) in the closed ``data.mdb``."""
    file = path / "data" / "data.mdb"
    raw = bytearray(file.read_bytes())
    at = raw.find(stored)
    assert at >= 0 and raw.find(stored, at + 1) < 0
    raw[at] ^= 0xFF
    file.write_bytes(bytes(raw))


def write_sealed(path: Path, n: int) -> list[tuple[bytes, bytes]]:
    """A checksummed partition at ``path`` whose store "kv" holds n rows (returned)."""
    rows = [(b"key-%05d" % i, b"value-%05d-" % i + b"x" * (i % 7)) for i in range(n)]
    with Partition(path, sync=False) as part:
        store = BytesKeyValueStore("kv", part)
        store.put_all(rows)
        store.commit(1)
        store.close()
    return rows


def first_error(fn: Any) -> DamagedFileError:
    with pytest.raises(DamagedFileError) as info:
        fn()
    return info.value


def test_a_flipped_byte_raises_the_typed_error_of_the_python_path(tmp_path: Path) -> None:
    rows = write_sealed(tmp_path, 600)
    for i in (250, 260):  # two damaged entries in one chunk
        damage(tmp_path, seal(*rows[i]))
    with Partition(tmp_path, sync=False) as part:
        store = BytesKeyValueStore("kv", part)
        db = store.db

        def python_path(reverse: bool) -> None:
            """What a scan's chunk reads did before: the Python read, then verify_rows."""
            rng, n = KeyRange(), 128
            none: tuple[list[Row], bytes | None] = ([], None)
            while True:
                chunk, frontier = part._read(
                    db,
                    False,
                    lambda txn, h: read_lmdb_chunk_py(txn.cursor(h), rng, reverse, n),  # noqa: B023
                    none,
                )
                part.verify_rows(db, chunk)
                if frontier is None:
                    return
                rng, n = rng.after(frontier, reverse), min(n * 2, 1024)

        for reverse in (False, True):
            want = first_error(lambda: python_path(reverse))  # noqa: B023
            it = store.reverse_all() if reverse else store.all()
            got = first_error(lambda: drain(it))  # noqa: B023
            assert (got.key, got.database, str(got)) == (want.key, want.database, str(want))
            assert got.key == rows[250][0]  # the smallest damaged key of the chunk, both ways
        view = store.read_committed()
        assert first_error(lambda: drain(view.all())).key == rows[250][0]
        view.close()
        with store.snapshot() as snap:
            assert first_error(lambda: drain(snap.reverse_all())).key == rows[250][0]
        assert drain(store.range(rows[0][0], rows[240][0])) == rows[:241]  # healthy part
        store.close()
    with Partition(tmp_path, sync=False, readonly=True) as part:
        assert recorded_damage(str(tmp_path)) == {part.db_name("kv")}


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def test_no_leak_over_many_chunks_and_errors(tmp_path: Path) -> None:
    rows = write_sealed(tmp_path, 3000)
    damage(tmp_path, seal(*rows[2900]))
    with Partition(tmp_path, sync=False, readonly=True) as part:
        source = part.source(part.db_name("kv"))

        def rounds(k: int) -> None:
            for _ in range(k):
                for reverse in (False, True):
                    rng = KeyRange(rows[0][0], rows[2800][0])
                    got = drain(ChunkedIterator(source, rng, reverse))
                    assert len(got) == 2801
                    with pytest.raises(DamagedFileError):
                        drain(ChunkedIterator(source, KeyRange(), reverse))

        rounds(20)
        gc.collect()
        start = rss_kib()
        rounds(150)  # ~1,500 chunks and 300 mismatches: a leaked row a chunk shows here
        gc.collect()
        assert rss_kib() - start < 4096
