"""Entry checksums (issue 24): every value a partition stores carries a CRC32C trailer over its
key and value; every read of committed data checks it, and a mismatch is a
:class:`~txstore.errors.DamagedFileError` naming the partition, the store's database, the key
(hex) and ``data.mdb``, never a wrong value.

The damage is real: bytes are flipped in the closed ``data.mdb`` file, which is then opened
again (cleanly closed before, so the page walk does not run and the checksum is what finds it).
"""

from __future__ import annotations

import os
import pickle
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

import txstore
from txstore import Serdes
from txstore.engine.checksums import (
    FLAG_KEY,
    ChecksumError,
    crc32c,
    hardware,
    recorded_damage,
    seal,
    seal_rows,
    set_hardware,
    sort_columns,
    sort_rows,
    unseal,
    unseal_rows,
)
from txstore.engine.partition import Partition
from txstore.errors import DamagedFileError

ROWS = {f"key-{i}".encode(): f"value-{i}-{'x' * i}".encode() for i in range(6)}


def raw_rows(path: Path, db: bytes) -> dict[bytes, bytes]:
    """The stored (key, value) bytes of database ``db``, read with py-lmdb."""
    env = lmdb.open(str(path / "data"), max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return dict(txn.cursor(env.open_db(db, txn=txn, create=False)).iternext())
    finally:
        env.close()


def write_store(path: Path, checksums: bool = True) -> None:
    with txstore.open(path, checksums=checksums) as db:
        store = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        for k, v in ROWS.items():
            store.put(k, v)
        store.commit(changelog_offset=1)


@pytest.fixture
def written(tmp_path: Path) -> Path:
    write_store(tmp_path)
    return tmp_path


def test_crc32c_matches_its_check_value_with_and_without_the_cpu_instruction() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC32C check value (RFC 3720)
    rnd = random.Random(5)
    blobs = [rnd.randbytes(n) for n in (0, 1, 7, 8, 9, 63, 64, 100, 1000, 4099)]
    with_hw = [crc32c(b) for b in blobs]
    previous = set_hardware(False)
    try:
        assert not hardware()
        assert [crc32c(b) for b in blobs] == with_hw  # the table agrees with the instruction
        assert crc32c(b"123456789") == 0xE3069283
    finally:
        set_hardware(previous)
    assert crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")  # it continues


def test_seal_and_unseal_round_trip_and_refuse_any_change() -> None:
    stored = seal(b"k", b"v")
    assert stored[:-4] == b"v" and stored[-4:] == crc32c(b"kv").to_bytes(4, "little")
    assert stored == bytes.fromhex("76 10 8a 37 8f")  # the example of docs/formats.md
    assert unseal(b"k", stored) == b"v" and unseal(b"k", None) is None
    assert unseal(b"k", seal(b"k", b"")) == b""  # an empty value is 4 bytes stored
    for bad_key, bad in ((b"j", stored), (b"k", stored[:3]), (b"k", b"w" + stored[1:])):
        with pytest.raises(ChecksumError) as err:
            unseal(bad_key, bad)
        assert err.value.args[0] == bad_key
    rows = [(b"a", b"1"), (b"b", None)]
    sealed = seal_rows(rows)
    assert sealed is not rows and sealed[1] == (b"b", None) and sealed[0][1] == seal(b"a", b"1")
    assert unseal_rows(sealed) is sealed and sealed == rows
    with pytest.raises(TypeError):
        seal("a", b"1")  # type: ignore[arg-type]


def test_unseal_of_a_value_nobody_else_holds_strips_it_in_place() -> None:
    held = seal(b"key", b"value")
    assert unseal(b"key", held) == b"value" and held == seal(b"key", b"value")  # a copy
    fresh = unseal(b"key", seal(b"key", b"value"))  # the only reference: shortened in place
    assert fresh == b"value" and len(fresh) == 5 and hash(fresh) == hash(b"value")
    assert {fresh: 1}[b"value"] == 1 and fresh + b"!" == b"value!"
    assert unseal(b"k", seal(b"k", b"v")) == b"v"  # too short to shorten: copied
    rows = [(b"a", seal(b"a", b"12")), (b"b", None), (b"c", seal(b"c", b"xyz"))]
    assert unseal_rows(rows) == [(b"a", b"12"), (b"b", None), (b"c", b"xyz")]
    shared = (b"k", seal(b"k", b"kept"))  # a row someone else holds too: left as it was
    rows = [shared, (b"j", seal(b"j", b"mine"))]
    assert unseal_rows(rows) == [(b"k", b"kept"), (b"j", b"mine")]
    assert rows[0] is not shared and shared == (b"k", seal(b"k", b"kept"))


def test_sort_rows_sorts_a_dict_bytewise_and_seals_in_the_same_pass() -> None:
    rng = random.Random(5)
    alphabet = b"\x00\x01ab\xff"
    for n in (0, 1, 2, 17, 300, 3000):
        staged: dict[bytes, bytes | None] = {}
        while len(staged) < n:  # keys sharing long prefixes, of every length from 1 to 20
            key = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 21)))
            staged[key] = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 30))
        expected = sorted(staged.items())
        assert sort_rows(staged, False) == expected
        assert sort_rows(staged, True) == [
            (k, None if v is None else seal(k, v)) for k, v in expected
        ]
    shared: dict[bytes, bytes | None] = {
        bytes(9) + bytes([i]): b"v" for i in range(40, 0, -1)
    }  # one 8-byte prefix
    assert [k for k, _ in sort_rows(shared, True)] == sorted(shared)
    with pytest.raises(TypeError, match="key must be bytes"):
        sort_rows({"a": b"1"}, True)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="value must be bytes"):
        sort_rows({b"a": 1}, False)  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        sort_rows([(b"a", b"1")], False)  # type: ignore[arg-type]


def test_sort_rows_and_sort_columns_past_the_bucket_pass() -> None:
    """From 4,096 rows the sort starts with a bucket pass on 16 bits of the 8-byte prefixes:
    random keys, keys sharing their first bytes (the buckets come from the bits that differ),
    keys shorter than 8 bytes (zero-padded prefixes tied with longer keys), one 8-byte prefix
    for all, and prefixes differing only in their last bits, in both outputs."""
    rng = random.Random(27)
    shapes = {
        "random": lambda i: rng.randbytes(16),
        "shared head": lambda i: b"\x00\x00\x00store" + rng.randbytes(rng.randrange(0, 6)),
        "short": lambda i: rng.randbytes(rng.randrange(1, 9)),
        "one prefix": lambda i: b"12345678" + rng.randbytes(3),
        "low bits": lambda i: bytes(7) + bytes([rng.randrange(256)]) + rng.randbytes(2),
        "skewed": lambda i: (b"a" * 8 if i % 2 else rng.randbytes(8)) + rng.randbytes(4),
    }
    for name, make in shapes.items():
        staged: dict[bytes, bytes | None] = {}
        i = 0
        while len(staged) < 6000:
            staged[make(i)] = rng.randbytes(rng.randrange(0, 12))
            i += 1
        expected = sorted(staged.items())
        assert sort_rows(staged, False) == expected, name
        keys, values = sort_columns(staged, True)
        assert keys == [k for k, _ in expected], name
        assert values == [seal(k, v) for k, v in expected if v is not None], name
    with pytest.raises(TypeError, match="sort_columns"):
        sort_columns([(b"a", b"1")], False)  # type: ignore[arg-type]


def test_a_new_partition_stores_trailers_and_records_its_flag(written: Path) -> None:
    stored = raw_rows(written, b"s")
    assert stored == {k: seal(k, v) for k, v in ROWS.items()}  # 4 bytes an entry, no more
    assert raw_rows(written, b"__txstore_meta__")[FLAG_KEY] == b"crc32c-le32-key-value"
    with Partition(written, readonly=True) as part:
        assert part.checksums
        assert part.get(b"s", b"key-1") == ROWS[b"key-1"]


def test_checksums_false_writes_the_legacy_layout_and_add_checksums_upgrades_it(
    tmp_path: Path,
) -> None:
    write_store(tmp_path, checksums=False)
    assert raw_rows(tmp_path, b"s") == ROWS  # byte for byte what was put
    assert FLAG_KEY not in raw_rows(tmp_path, b"__txstore_meta__")
    with txstore.open(tmp_path) as db:  # an existing partition keeps its layout
        assert not db.partition.checksums
        store = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        store.put(b"new", b"n")
        store.commit(changelog_offset=2)
        assert db.partition.add_checksums() == len(ROWS) + 1
        assert db.partition.add_checksums() == 0  # once
        assert store.get(b"new") == b"n" and store.get(b"key-2") == ROWS[b"key-2"]
    assert raw_rows(tmp_path, b"s") == {k: seal(k, v) for k, v in {**ROWS, b"new": b"n"}.items()}
    with txstore.open(tmp_path, checksums=False) as db:  # the flag on disk decides
        assert db.partition.checksums


def flips(path: Path, spans: list[tuple[int, int]]) -> Iterator[int]:
    """Flip (xor 0xff) each byte of ``spans`` of ``data.mdb`` in turn, yielding its offset
    while it is flipped; the file is as it was after each step."""
    file = path / "data" / "data.mdb"
    with open(file, "r+b") as f:
        for start, end in spans:
            for at in range(start, end):
                f.seek(at)
                old = f.read(1)[0]
                f.seek(at)
                f.write(bytes([old ^ 0xFF]))
                f.flush()
                try:
                    yield at
                finally:
                    f.seek(at)
                    f.write(bytes([old]))
                    f.flush()


def locate(path: Path, needles: list[bytes]) -> list[tuple[int, int]]:
    """Where each of ``needles`` is in ``data.mdb`` (each must be there exactly once)."""
    raw = (path / "data" / "data.mdb").read_bytes()
    spans = []
    for needle in needles:
        at = raw.find(needle)
        assert at >= 0 and raw.find(needle, at + 1) < 0, needle
        spans.append((at, at + len(needle)))
    return spans


def drain(it: Any) -> dict[bytes, bytes]:
    """Every pair of a store iterator, closed even when a read raises."""
    with it:
        return dict(it)


def read_all(path: Path) -> dict[str, Any]:
    """What every read path returns for the store, or the error class it raised."""
    out: dict[str, Any] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            out[name] = fn()
        except DamagedFileError as exc:
            assert "data.mdb" in exc.path and exc.database == "s" and exc.key is not None
            assert exc.key.hex() in str(exc) and str(path) in str(exc)
            out[name] = DamagedFileError

    with txstore.open(path) as db:
        store = db.key_value_store("s", Serdes.bytes(), Serdes.bytes())
        for k in ROWS:
            attempt(f"get {k!r}", lambda k=k: store.get(k))
        attempt("all", lambda: drain(store.all()))
        attempt("reverse_all", lambda: drain(store.reverse_all()))
        attempt("range", lambda: drain(store.range(b"key-1", b"key-4")))
        with store.read_committed() as view:
            attempt("view get", lambda: [view.get(k) for k in ROWS])
            attempt("view all", lambda: drain(view.all()))
        with store.snapshot() as snap:
            attempt("snapshot all", lambda: drain(snap.all()))
    return out


def test_every_value_byte_flipped_is_a_typed_error_or_the_right_value(written: Path) -> None:
    healthy = read_all(written)
    assert healthy["all"] == ROWS and healthy["get b'key-3'"] == ROWS[b"key-3"]
    stored = [seal(k, v) for k, v in ROWS.items()]
    damaged = 0
    for at in flips(written, locate(written, stored)):
        seen = read_all(written)
        for name, got in seen.items():
            assert got is DamagedFileError or got == healthy[name], (at, name, got)
        damaged += seen["all"] is DamagedFileError
    assert damaged == sum(map(len, stored))  # every flip of a value or trailer byte is caught
    assert read_all(written) == healthy  # restored file: all healthy again
    assert recorded_damage(str(written)) == {b"s"}  # the writer recorded where it found it


def test_a_flipped_key_byte_fails_scans(written: Path) -> None:
    (span,) = locate(written, [b"key-4" + seal(b"key-4", ROWS[b"key-4"])[:4]])
    key_span = [(span[0], span[0] + len(b"key-4"))]
    for at in flips(written, key_span):
        seen = read_all(written)
        assert seen["all"] is DamagedFileError, at
        assert seen["get b'key-1'"] == ROWS[b"key-1"]


def test_an_atomic_read_checks_too(written: Path) -> None:
    (span,) = locate(written, [seal(b"key-2", ROWS[b"key-2"])])
    for _ in flips(written, [(span[0], span[0] + 1)]):
        with Partition(written, readonly=True) as part:
            with pytest.raises(DamagedFileError):
                part.read_atomic([b"s"], lambda r: r.get(b"s", b"key-2"))
            with pytest.raises(DamagedFileError):
                part.read_atomic([b"s"], lambda r: r.read_range(b"s", b"a", b"z", False, 10))
            assert part.read_atomic([b"s"], lambda r: r.get(b"s", b"key-1")) == ROWS[b"key-1"]
    assert not os.path.exists(written / "damaged-stores")  # a reader records nothing


def test_the_error_names_its_entry_and_survives_pickling() -> None:
    """A Spark worker's error reaches the driver pickled: the entry's fields come along."""
    err = DamagedFileError("/p/data/data.mdb", "checksum mismatch", database="s", key=b"k")
    again = pickle.loads(pickle.dumps(err))
    assert (again.path, again.database, again.key, str(again)) == (
        err.path, "s", b"k", str(err),
    )  # fmt: skip
