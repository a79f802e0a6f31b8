"""The memory tier's chunk read by bisection and slicing (``index_chunk``, issue 27) gives what
the ``irange`` read (``read_sorted_chunk``) gives: the same rows and frontier for every kind of
range (bounds absent, inclusive or exclusive, empty, inverted), both directions and chunk sizes
below, at and above the rows in range, over an index of several sublists."""

from __future__ import annotations

import random

from txstore.engine.chunk_reads import read_sorted_chunk
from txstore.engine.iterators import KeyRange
from txstore.engine.overlay import SortedKeys, index_chunk


def test_index_chunk_matches_the_irange_read() -> None:
    rnd = random.Random(27)
    mem: dict[bytes, bytes | None] = {}
    for i in range(5000):  # past sortedcontainers' load of 1,000: several sublists
        k = rnd.randbytes(rnd.randrange(1, 4))
        mem[k] = None if i % 7 == 0 else rnd.randbytes(3)
    index = SortedKeys(mem)
    assert len(index.lists) > 2
    keys = list(index)
    probes = [None, b"", b"\x00", b"\xff\xff\xff\xff", *rnd.sample(keys, 40)]
    probes += [rnd.randbytes(2) for _ in range(20)]
    checked = 0
    for _ in range(3000):
        rng = KeyRange(
            rnd.choice(probes), rnd.choice(probes), rnd.random() < 0.5, rnd.random() < 0.5
        )
        reverse = rnd.random() < 0.5
        n = rnd.choice([1, 2, 7, 128, 1024, 6000])
        expected = read_sorted_chunk(index, mem, rng, reverse, n)
        assert index_chunk(index, mem, rng, reverse, n) == expected, (rng, reverse, n)
        checked += bool(expected[0])
    assert checked > 1000  # most ranges were not empty
    assert index_chunk(SortedKeys(), {}, KeyRange(), False, 10) == ([], None)
