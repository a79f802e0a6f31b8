"""The engine extensions window and session stores use: ``read_range`` (short range reads that
stop at the upper bound), ``write_through_dbs`` (several databases and drops in one write
transaction) and ``update_store_meta`` (format upgrades), on both partition flavours."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from txstore.engine.base import PartitionBase
from txstore.engine.memory import MemoryPartition
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError


@pytest.fixture(params=["lmdb", "memory"])
def part(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionBase]:
    p: PartitionBase = Partition(tmp_path / "p") if request.param == "lmdb" else MemoryPartition()
    p.register_store("s", {"kind": "test"})
    yield p
    p.close()


def test_read_range_bounds_limit_and_reverse(part: PartitionBase) -> None:
    rows: list[tuple[bytes, bytes | None]] = [(b"k%02d" % i, b"v%d" % i) for i in range(10)]
    part.write_through_dbs({b"s.1": rows})
    assert part.read_range(b"s.1", b"k02", b"k05") == (rows[2:6], False)
    assert part.read_range(b"s.1", b"k02", b"k05", reverse=True) == (rows[2:6], False)
    assert part.read_range(b"s.1", b"k02", b"k05", limit=3) == (rows[2:5], True)
    assert part.read_range(b"s.1", b"k02", b"k05", reverse=True, limit=3) == (rows[3:6], True)
    assert part.read_range(b"s.1", b"k015", b"k035") == (rows[2:4], False)  # bounds not keys
    assert part.read_range(b"s.1", b"k015", b"k035", reverse=True) == (rows[2:4], False)
    assert part.read_range(b"s.1", b"a", b"z", reverse=True) == (rows, False)
    assert part.read_range(b"s.1", b"x", b"z") == ([], False)
    assert part.read_range(b"s.1", b"a", b"b", reverse=True) == ([], False)
    assert part.read_range(b"s.1", b"k03", b"k03", shared=True) == (rows[3:4], False)
    assert part.read_range(b"missing", b"a", b"z") == ([], False)


def test_write_through_dbs_drops_then_writes_atomically(part: PartitionBase) -> None:
    part.write_through_dbs({b"s.1": [(b"a", b"1"), (b"b", b"2")], b"s.2": [(b"x", b"9")]})
    part.write_through_dbs({b"s.2": [(b"y", b"8"), (b"x", None)], b"s.1": []}, [b"s.1", b"s.9"])
    assert part.count(b"s.1") == 0 and part.get(b"s.1", b"a") is None
    assert part.read_range(b"s.2", b"a", b"z") == ([(b"y", b"8")], False)


def test_update_store_meta(part: PartitionBase) -> None:
    assert part.update_store_meta("s", {"kind": "test", "format": "X"})["format"] == "X"
    assert part.store_meta("s") == {"kind": "test", "format": "X"}
    with pytest.raises(InvalidArgumentError, match="not registered"):
        part.update_store_meta("nope", {})
