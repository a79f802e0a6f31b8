"""``BytesKeyValueStore.restore_records``: restore's one C pass (``restore_rows`` in
``csrc/restore_rows.c``: the last record of each key, sorted, converted to the store's value
format, sealed) must write exactly what the Python path writes (``records_to_values`` then
``restore_batch``), and refuse bad input with the same typed errors, writing nothing."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bytestores.test_kv_bytes import FLAVOURS, Env, committed
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.codecs import ValueFormat, records_to_values
from txstore.engine.checksums import restore_rows, unseal
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, InvalidTypeError, OffsetError

pytestmark = pytest.mark.filterwarnings("error")

FORMATS = list(ValueFormat)


@pytest.fixture(params=FLAVOURS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(request.param, tmp_path)
    yield e
    e.close()


def records(seed: int, n: int) -> tuple[list[bytes], list[bytes | None], list[int], list[bytes]]:
    """Changelog columns whose keys share prefixes (so that the sort's first 8 bytes tie),
    are shorter than 8 bytes or end in zero bytes, repeat, and are sometimes tombstones."""
    rng = random.Random(seed)
    pool = [rng.randbytes(rng.randint(1, 30)) for _ in range(n // 3)]
    pool += [b"user-000" + str(i).encode() for i in range(40)]  # 8 equal leading bytes
    pool += [b"a", b"a\x00", b"a\x00\x00", b"\x00", b"\xff" * 9, b"\xff" * 8]
    keys = [rng.choice(pool) for _ in range(n)]
    values: list[bytes | None] = [
        None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 70)) for _ in range(n)
    ]
    stamps = [rng.randint(-(2**63), 2**63 - 1) for _ in range(n)]
    headers = [rng.randbytes(rng.choice((0, 0, 5, 70, 200))) for _ in range(n)]
    return keys, values, stamps, headers


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_c_pass_writes_what_the_python_path_writes(env: Env, fmt: ValueFormat) -> None:
    keys, values, stamps, headers = records(int(fmt), 3000)
    s = env.store
    s.put_all([(keys[0], b"there before"), (b"only before", b"x"), (keys[1], b"y")])
    s.commit(1)
    s.restore_records(keys[:1500], values[:1500], stamps[:1500], headers[:1500], fmt, 1500)
    s.restore_records(keys[1500:], values[1500:], stamps[1500:], headers[1500:], fmt, 3000)
    stored = records_to_values(fmt, values, stamps, headers)
    want: dict[bytes, bytes | None] = {keys[0]: b"there before", b"only before": b"x"}
    want[keys[1]] = b"y"
    want.update(zip(keys, stored, strict=True))
    expected = sorted((k, v) for k, v in want.items() if v is not None)
    assert committed(s) == expected and list(s.all()) == expected
    assert s.committed_offset == 3000
    if env.persistent:
        s = env.reopen()
        assert committed(s) == expected and s.committed_offset == 3000


def test_rows_come_back_sorted_deduplicated_and_sealed() -> None:
    keys, values, stamps, headers = records(7, 5000)
    for fmt in FORMATS:
        for seal in (False, True):
            ordered, stored, deletes = restore_rows(
                keys, values, stamps, headers, int(fmt), seal, 511
            )
            latest = dict(zip(keys, records_to_values(fmt, values, stamps, headers), strict=True))
            assert ordered == sorted(k for k, v in latest.items() if v is not None)
            assert deletes == sorted(k for k, v in latest.items() if v is None)
            got = {k: unseal(k, v) if seal else v for k, v in zip(ordered, stored, strict=True)}
            assert got == {k: v for k, v in latest.items() if v is not None}
    assert restore_rows([], [], [], [], 2, True, 511) == ([], [], [])


def test_a_legacy_partition_gets_values_without_trailers(tmp_path: Path) -> None:
    with Partition(tmp_path / "p", sync=False, checksums=False) as part:
        s = BytesKeyValueStore("kv", part, transactional=True)
        s.restore_records([b"k", b"j"], [b"v", None], [5, 6], [b"", b""], ValueFormat.PLAIN, 2)
        assert not part.checksums and committed(s) == [(b"k", b"v")]


# What each bad item gets: the same typed error as restore_batch / records_to_values gives it,
# and nothing written (the C pass refuses it; the checked Python path names it).
@pytest.mark.parametrize(
    ("column", "bad", "error", "text"),
    [
        ("keys", b"", InvalidArgumentError, "must not be empty"),
        ("keys", b"k" * 512, InvalidArgumentError, "above LMDB's maximum"),
        ("keys", "str", InvalidTypeError, "key must be bytes"),
        ("keys", None, InvalidArgumentError, "must not be None"),
        ("values", "str", InvalidTypeError, "value must be bytes"),
        ("values", 5, InvalidTypeError, "value must be bytes"),
        ("timestamps", 2**63, InvalidArgumentError, "timestamp"),
        ("timestamps", "1", InvalidTypeError, "timestamp"),
        ("headers", "h", InvalidTypeError, "headers"),
    ],
)
def test_bad_records_are_refused_before_anything_is_written(
    env: Env, column: str, bad: Any, error: type, text: str
) -> None:
    s = env.store
    s.put(b"a", b"1")
    s.commit(1)
    cols: dict[str, list[Any]] = {
        "keys": [b"ok", b"b"],
        "values": [b"1", b"2"],
        "timestamps": [1, 2],
        "headers": [b"", b""],
    }
    cols[column][1] = bad
    with pytest.raises(error, match=text):
        s.restore_records(
            cols["keys"],
            cols["values"],
            cols["timestamps"],
            cols["headers"],
            ValueFormat.HEADERS,
            5,
        )
    with pytest.raises(InvalidArgumentError, match="same length"):
        s.restore_records([b"b"], [b"2"], [], [b""], ValueFormat.TIMESTAMPED, 5)
    with pytest.raises(OffsetError, match="backwards"):
        s.restore_records([b"b"], [b"2"], [1], [b""], ValueFormat.TIMESTAMPED, 0)
    assert committed(s) == [(b"a", b"1")] and s.committed_offset == 1
