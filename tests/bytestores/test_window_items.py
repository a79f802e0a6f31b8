"""The C reader of short single-key window fetches (``txstore._checksums.window_items``) and the
writer's path that uses it (``WindowFetches.fetch_window_items``).

The function is tested on real LMDB cursors against what the Python path computes from the
same rows (seek, range end, trailer check, window start, UTF-8 or a decoder), and for each
case where it must hand over to the general path (returns None) or raise. The store-level tests
check that a steady-state fetch really goes through it, with every value format and serde kind,
and that its results equal the general path's.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import lmdb
import pytest

import txstore
from txstore import KeyValue, Serdes, ValueAndTimestamp, ValueFormat
from txstore._checksums import ChecksumError, seal, window_items
from txstore.bytestores import window_fetch
from txstore.errors import DamagedFileError, SerializationError

pytestmark = pytest.mark.filterwarnings("error")

QI = struct.Struct(">qi")
MAX = 2**31 - 1


def row(key: bytes, start: int, seq: int = 0) -> bytes:
    return key + QI.pack(start, seq)


@pytest.fixture
def cursor(tmp_path: Path) -> Any:
    env = lmdb.open(str(tmp_path / "env"), map_size=2**24)
    txn = env.begin(write=True)
    yield txn.cursor()
    txn.abort()
    env.close()


def fill(cursor: Any, rows: dict[bytes, bytes], sealed: bool = True) -> None:
    for k, v in rows.items():
        cursor.put(k, seal(k, v) if sealed else v)


def fetch(cursor: Any, key: bytes, t0: int, t1: int, **kw: Any) -> list[Any] | None:
    limit, decode, sealed = kw.get("limit", 64), kw.get("decode"), kw.get("sealed", True)
    out = window_items(cursor, key, t0, t1, limit, KeyValue, decode, sealed, kw.get("staged"))
    assert out is None or all(type(kv) is KeyValue for kv in out)
    return out


def test_reads_one_keys_windows_in_range(cursor: Any) -> None:
    fill(
        cursor,
        {
            row(b"a", 5): b"before",
            row(b"ab", 10): b"other key after",
            row(b"b", 10): b"other key",
            **{row(b"ab", t): f"v{t}".encode() for t in (10, 20, 30)},
            row(b"ab", 20, 7): "dup \u00e9".encode(),
        },
    )
    got = fetch(cursor, b"ab", 10, 20)
    assert got == [(10, "v10"), (20, "v20"), (20, "dup \u00e9")]
    assert fetch(cursor, b"ab", 0, 2**63 - 1) == [*got, (30, "v30")]
    assert fetch(cursor, b"ab", 21, 29) == []
    assert fetch(cursor, b"zz", 0, 100) == []  # set_range past the last key
    assert fetch(cursor, b"ab", 10, 30, decode=bytes) == [
        (10, b"v10"),
        (20, b"v20"),
        (20, "dup \u00e9".encode()),
        (30, b"v30"),
    ]


def test_staged_rows_are_merged_in(cursor: Any) -> None:
    fill(cursor, {row(b"k", t): f"c{t}".encode() for t in (10, 20, 30)})
    staged = [
        (row(b"k", 5), b"s5"),  # before every committed row
        (row(b"k", 20), None),  # a delete of a committed row
        (row(b"k", 25), b"s25"),  # between two
        (row(b"k", 30), b"s30"),  # an overwrite
        (row(b"k", 40), b"s40"),  # after the last
    ]
    got = fetch(cursor, b"k", 0, 100, staged=staged)
    assert got == [(5, "s5"), (10, "c10"), (25, "s25"), (30, "s30"), (40, "s40")]
    as_bytes = fetch(cursor, b"k", 0, 100, staged=staged, decode=bytes)
    assert as_bytes is not None and as_bytes[-1] == (40, b"s40")
    assert fetch(cursor, b"k", 0, 100, staged=staged, limit=4) is None
    committed = fetch(cursor, b"k", 0, 100)  # another key's staged row: skipped
    assert fetch(cursor, b"k", 0, 100, staged=[(row(b"k\x00", 1), b"x")]) == committed
    assert fetch(cursor, b"q", 0, 100, staged=[(row(b"q", 7), b"only staged")]) == [
        (7, "only staged")
    ]


def test_unsealed_values_are_returned_whole(cursor: Any) -> None:
    fill(cursor, {row(b"k", 1): b"one", row(b"k", 2): b"two"}, sealed=False)
    assert fetch(cursor, b"k", 0, 9, sealed=False) == [(1, "one"), (2, "two")]


@pytest.mark.parametrize(
    ("rows", "kw"),
    [
        ({row(b"a", 1): b"x", row(b"a\x00", 0): b"o", row(b"a\x00", 0, 1): b"o"}, {"limit": 1}),
        ({row(b"a", t): b"x" for t in range(5)}, {"limit": 4}),  # more rows than the limit
        ({row(b"a", 1): b"\xc0 not utf-8"}, {}),  # the serde's error comes from the general path
    ],
    ids=["other-keys-over-limit", "over-limit", "not-utf8"],
)
def test_hands_over_to_the_general_path(cursor: Any, rows: dict[bytes, bytes], kw: Any) -> None:
    fill(cursor, rows)
    assert fetch(cursor, b"a", 0, 10, **kw) is None


def test_a_flipped_value_or_short_value_is_a_checksum_error(cursor: Any) -> None:
    k = row(b"k", 3)
    stored = bytearray(seal(k, b"value"))
    stored[1] ^= 0x01
    cursor.put(k, bytes(stored))
    with pytest.raises(ChecksumError) as err:
        fetch(cursor, b"k", 0, 9)
    assert err.value.args == (k, "checksum mismatch")
    cursor.put(k, b"abc")
    with pytest.raises(ChecksumError) as err:
        fetch(cursor, b"k", 0, 9)
    assert err.value.args == (k, "value shorter than its 4-byte checksum")


def test_decoder_errors_propagate(cursor: Any) -> None:
    fill(cursor, {row(b"k", 1): b"x"})

    def decode(raw: bytes) -> Any:
        raise SerializationError(f"cannot decode {raw!r}")

    with pytest.raises(SerializationError, match="cannot decode b'x'"):
        fetch(cursor, b"k", 0, 9, decode=decode)


def test_bad_arguments_are_type_errors(cursor: Any) -> None:
    with pytest.raises(TypeError, match="tuple subclass"):
        window_items(cursor, b"k", 0, 9, 64, dict, None, True, None)
    with pytest.raises(TypeError, match="callable"):
        window_items(cursor, b"k", 0, 9, 64, KeyValue, 3, True, None)
    with pytest.raises(TypeError, match="bytes"):
        window_items(cursor, "k", 0, 9, 64, KeyValue, None, True, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="too long"):
        window_items(cursor, b"k" * 2000, 0, 9, 64, KeyValue, None, True, None)
    with pytest.raises(TypeError, match="a list"):
        window_items(cursor, b"k", 0, 9, 64, KeyValue, None, True, ())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="9 arguments"):
        window_items(cursor, b"k", 0)  # type: ignore[call-arg]


# -- the writer's store --------------------------------------------------------------------

CASES = [
    ("string", Serdes.string(), "v", ValueFormat.PLAIN),
    ("long", Serdes.long(), 7, ValueFormat.PLAIN),
    ("timestamped", Serdes.string(), ValueAndTimestamp("v", 3), ValueFormat.TIMESTAMPED),
]


@pytest.mark.parametrize(("name", "serde", "value", "fmt"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("checksums", [True, False], ids=["checksums", "legacy"])
def test_steady_state_fetches_take_the_c_reader(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    serde: Any,
    value: Any,
    fmt: ValueFormat,
    checksums: bool,
) -> None:
    calls: list[bytes] = []
    real = window_items

    def counting(cur: Any, key: bytes, *rest: Any) -> Any:
        calls.append(key)
        return real(cur, key, *rest)

    monkeypatch.setattr(window_fetch, "window_items", counting)
    kw: dict[str, Any] = {"window_size": 10, "retention_period": 120_000, "format": fmt}
    with txstore.open(tmp_path / name, checksums=checksums) as db:
        w = db.window_store("w", Serdes.string(), serde, **kw)
        for t in (0, 100, 70_000):  # two segments (of 60 s)
            w.put("k", value, t)
            w.put("kk", value, t)
            w.put("k\x00", value, t)  # a longer key whose rows sort among k's
            w.put("z", value, t)
        w.commit(1)
        with w.bytes_store.fetch(b"k", None, 0, 10**6, single_key=True) as general:
            expect = [(QI.unpack(k[-12:])[0], v) for k, v in general]
        assert [t for t, _ in expect] == [0, 100, 70_000]
        for key in ("k", "kk", "k\x00"):
            with w.fetch(key, 0, 10**6) as it:  # opens the writer's cursors if not yet
                list(it)
        calls.clear()
        with w.fetch("k", 0, 10**6) as it:  # "k\x00"'s rows between the bounds: skipped in C
            first = list(it)
        assert len(calls) == 2  # one call per segment
        with w.fetch("kk", 0, 10**6) as it:
            assert list(it) == first
        assert len(calls) == 4
        assert [kv.key for kv in first] == [0, 100, 70_000]
        assert [kv.value for kv in first] == [value] * 3
        with w.fetch("kk", 50, 100) as it:  # one segment
            assert [kv.key for kv in it] == [100]
        assert len(calls) == 5
        w.put("kk", value, 200)  # staged: merged in by the C reader
        with w.fetch("kk", 0, 10**6) as it:
            staged = list(it)
        assert [kv.key for kv in staged] == [0, 100, 200, 70_000]
        assert [kv.value for kv in staged] == [value] * 4
        assert len(calls) == 7
        with w.fetch("z", 0, 10**6) as it:  # nothing staged for this key
            assert list(it) == first
        assert len(calls) == 9
        w.put("z", None, 100)  # a staged delete hides the committed window
        w.put("z", value, 0)  # a staged overwrite replaces it
        w.put("z\x00", value, 5)  # a staged row of a longer key between the bounds: skipped
        with w.fetch("z", 0, 10**6) as it:
            assert [kv.key for kv in it] == [0, 70_000]
        assert len(calls) == 11
        w.put("k", value, 7)  # on a store with a commit pending, the same through the merge
        with w.backward_fetch("k", 0, 10**6) as it:  # (reverse: the Python path)
            assert [kv.key for kv in it] == [70_000, 100, 7, 0]
        assert len(calls) == 11


def test_damage_found_by_the_c_reader_names_the_database(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"window_size": 10, "retention_period": 600_000}
    with txstore.open(tmp_path) as db:
        w = db.window_store("clicks", Serdes.string(), Serdes.string(), **kw)
        w.put("k", "Zq" * 12, 100)
        w.put("j", "fine", 100)
        w.commit(1)
    data = tmp_path / "data" / "data.mdb"
    raw = bytearray(data.read_bytes())
    raw[raw.find(b"Zq" * 12) + 5] ^= 0x01  # still UTF-8: only the checksum can tell
    data.write_bytes(bytes(raw))
    with txstore.open(tmp_path) as db:
        w = db.window_store("clicks", Serdes.string(), Serdes.string(), **kw)
        with w.fetch("j", 0, 200) as it:  # opens the writer's cursor
            assert [kv.value for kv in it] == ["fine"]
        with pytest.raises(DamagedFileError) as err:
            w.fetch("k", 0, 200)
        assert err.value.key == b"k" + QI.pack(100, 0)
        assert "clicks.0" in str(err.value) and "data.mdb" in str(err.value)
