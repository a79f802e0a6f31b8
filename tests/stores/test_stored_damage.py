"""Bytes damaged inside ``data.mdb`` are typed errors that say where they are (issue 15).

LMDB keeps no checksum of values: a flipped byte inside a stored value or its headers is read
back as it is and only the decoder notices. The decoder's
:class:`~txstore.errors.SerializationError` used to say what was wrong with the bytes
("bytes are not valid UTF-8", "cannot decode headers: negative length") but not which store,
file or key, so ``txstore crashtest --damage`` counted it as untyped. Each test writes a real
LMDB file, closes it, damages the bytes of one stored value in the file, reopens it and reads
through every path: the error must be a ``SerializationError`` whose message names the store,
the partition's ``data/data.mdb`` and the key. That is the guard of a partition written without
entry checksums (``checksums=False``, the legacy layout); with checksums (the default since
issue 24) the same flips are caught before any decoder, as a ``DamagedFileError`` naming the
store's database, the key (hex) and ``data.mdb``: each test runs both ways. A damaged *page*
(LMDB's own ``MDB_CORRUPTED``) must be a :class:`~txstore.errors.DamagedFileError` naming
``data.mdb``, not the partition directory (nor, in a snapshot, a ``SnapshotInvalidatedError``).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import (
    Headers,
    Serdes,
    SerializationError,
    SessionWindow,
    ValueFormat,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.errors import DamagedFileError

ROOT = str(Path(__file__).resolve().parents[2])
PAGE = 4096
MARK = "Zq" * 12  # a value found once in the file


def data_mdb(path: Path) -> Path:
    return path / "data" / "data.mdb"


def patch_file(path: Path, find: bytes, at: int, byte: int) -> None:
    """Overwrite the byte ``at`` positions after the only occurrence of ``find`` in ``path``."""
    raw = bytearray(path.read_bytes())
    i = raw.find(find)
    assert i >= 0 and raw.find(find, i + 1) < 0, "the marker must occur once"
    raw[i + at] = byte
    path.write_bytes(bytes(raw))


def drain(it: Any) -> list[Any]:
    """Every item of a store iterator, closed even when a read raises."""
    with it:
        return list(it)


#: Each damage test runs on a legacy partition (no entry checksums: the decoder finds the
#: damage) and on a checksummed one (the checksum finds it first).
BOTH = pytest.mark.parametrize("checksums", [False, True], ids=["legacy", "checksums"])


def assert_names_damage(
    read: Callable[[], Any],
    store: str,
    file: Path,
    key: str | tuple[str, ...],
    checksums: bool = False,
    raw: bytes = b"",
) -> Exception:
    """``read()`` raises a ``SerializationError`` naming ``store``, ``file`` and ``key`` (or
    one of several: a range read names the range or the stored key, as its rows are decoded
    at once or one by one). On a checksummed partition: a ``DamagedFileError`` naming
    ``file``, a database of ``store`` and a stored key starting with ``raw``, in hex."""
    if checksums:
        with pytest.raises(DamagedFileError) as damaged:
            read()
        err = damaged.value
        assert err.path == str(file) and "data.mdb" in str(err)
        assert err.database is not None and err.database.split(".")[0] == store
        assert err.key is not None and err.key.startswith(raw) and err.key.hex() in str(err)
        assert "checksum mismatch" in str(err)
        return err
    with pytest.raises(SerializationError) as info:
        read()
    message = str(info.value)
    assert f"store {store!r}" in message
    assert str(file) in message and "data.mdb" in message
    assert any(k in message for k in ((key,) if isinstance(key, str) else key)), message
    assert isinstance(info.value.__cause__, SerializationError)  # the decoder's own error
    return info.value


@BOTH
def test_a_flipped_value_byte_names_store_file_and_key(tmp_path: Path, checksums: bool) -> None:
    with txstore.open(tmp_path, checksums=checksums) as db:
        users = db.key_value_store("users", Serdes.string(), Serdes.string())
        users.put("ada", MARK)
        users.put("bob", "fine")
        users.commit(changelog_offset=1)
    patch_file(data_mdb(tmp_path), MARK.encode(), 0, 0xFF)  # not valid UTF-8 any more
    file = data_mdb(tmp_path)
    ck = (checksums, b"ada")
    with txstore.open(tmp_path) as db:
        users = db.key_value_store("users", Serdes.string(), Serdes.string())
        assert users.get("bob") == "fine"

        def scan(view: Any) -> list[Any]:
            return drain(view.all())

        err = assert_names_damage(lambda: users.get("ada"), "users", file, "'ada'", *ck)
        assert checksums or "not valid UTF-8" in str(err)
        assert_names_damage(lambda: scan(users), "users", file, "b'ada'", *ck)
        with users.read_committed() as view:  # every view and snapshot closed here
            assert_names_damage(lambda: view.get("ada"), "users", file, "'ada'", *ck)
        with users.snapshot() as snap:
            assert_names_damage(lambda: scan(snap), "users", file, "b'ada'", *ck)
        with users.read_committed() as view, view.snapshot() as view_snap:
            assert_names_damage(lambda: scan(view_snap), "users", file, "b'ada'", *ck)
        assert_names_damage(lambda: users.put_if_absent("ada", "x"), "users", file, "'ada'", *ck)
        assert_names_damage(lambda: users.delete("ada"), "users", file, "'ada'", *ck)


@BOTH
def test_damaged_headers_name_store_file_and_key(tmp_path: Path, checksums: bool) -> None:
    with txstore.open(tmp_path, checksums=checksums) as db:
        events = db.key_value_store(
            "events", Serdes.string(), Serdes.string(), format=ValueFormat.HEADERS
        )
        events.put("e1", ValueTimestampHeaders("v", 5, Headers([(MARK, b"h")])))
        events.commit(changelog_offset=1)
    # the varint before the header key is its length: 0x7f is -64 (zigzag)
    patch_file(data_mdb(tmp_path), MARK.encode(), -1, 0x7F)
    with txstore.open(tmp_path) as db:
        events = db.key_value_store(
            "events", Serdes.string(), Serdes.string(), format=ValueFormat.HEADERS
        )
        err = assert_names_damage(
            lambda: events.get("e1"), "events", data_mdb(tmp_path), "e1", checksums, b"e1"
        )
        assert checksums or "headers" in str(err)


@BOTH
def test_window_store_reads_name_the_damage(tmp_path: Path, checksums: bool) -> None:
    kw: dict[str, Any] = {"window_size": 10, "retention_period": 1_000_000}
    with txstore.open(tmp_path, checksums=checksums) as db:
        w = db.window_store("clicks", Serdes.string(), Serdes.string(), **kw)
        w.put("k", MARK, 100)
        w.put("other", "fine", 100)
        w.commit(changelog_offset=1)
    patch_file(data_mdb(tmp_path), MARK.encode(), 3, 0xC0)
    file = data_mdb(tmp_path)
    ck = (checksums, b"k")
    with txstore.open(tmp_path) as db:
        w = db.window_store("clicks", Serdes.string(), Serdes.string(), **kw)
        assert drain(w.fetch("other", 0, 200))[0].value == "fine"
        assert_names_damage(lambda: w.fetch("k", 100), "clicks", file, "'k'", *ck)
        assert_names_damage(lambda: drain(w.fetch("k", 0, 200)), "clicks", file, "'k'", *ck)
        assert_names_damage(
            lambda: drain(w.backward_fetch("k", 0, 200)), "clicks", file, "'k'", *ck
        )
        assert_names_damage(lambda: drain(w.all()), "clicks", file, "b'k", *ck)
        assert_names_damage(lambda: drain(w.fetch_all(0, 200)), "clicks", file, "b'k", *ck)
        with w.read_committed() as view:
            assert_names_damage(lambda: drain(view.fetch("k", 0, 200)), "clicks", file, "'k'", *ck)


@BOTH
def test_session_store_reads_name_the_damage(tmp_path: Path, checksums: bool) -> None:
    with txstore.open(tmp_path, checksums=checksums) as db:
        s = db.session_store("sessions", Serdes.string(), Serdes.string(), retention_period=10**6)
        s.put(Windowed("k", SessionWindow(10, 20)), MARK)
        s.commit(changelog_offset=1)
    patch_file(data_mdb(tmp_path), MARK.encode(), 5, 0xFE)
    file = data_mdb(tmp_path)
    ck = (checksums, b"k")
    with txstore.open(tmp_path) as db:
        s = db.session_store("sessions", Serdes.string(), Serdes.string(), retention_period=10**6)
        assert_names_damage(lambda: s.fetch_session("k", 10, 20), "sessions", file, "'k'", *ck)
        assert_names_damage(lambda: drain(s.fetch("k")), "sessions", file, "'k'", *ck)
        assert_names_damage(
            lambda: drain(s.find_sessions("k", 0, 100)), "sessions", file, "'k'", *ck
        )
        assert_names_damage(
            lambda: drain(s.find_sessions("a", "z", 0, 100)),
            "sessions",
            file,
            ("('a', 'z')", "b'k"),
            *ck,
        )


CHILD = r"""
import sys, txstore
from txstore import Serdes
from txstore.errors import DamagedFileError
with txstore.open(sys.argv[1]) as db:
    s = db.key_value_store("users", Serdes.string(), Serdes.string())
    for name, read in (("writer", lambda: s.get(sys.argv[2])),
                       ("snapshot", lambda: s.snapshot().get(sys.argv[2]))):
        try:
            read()
            print(name, "read")
        except DamagedFileError as exc:
            print(name, "DamagedFileError", exc.path)
        except Exception as exc:
            print(name, type(exc).__name__, exc)
"""


def test_a_zeroed_leaf_page_is_a_damaged_file_naming_data_mdb(tmp_path: Path) -> None:
    """LMDB's ``MDB_CORRUPTED`` named the partition directory (and in a snapshot was a
    ``SnapshotInvalidatedError``); a child process, as LMDB may also abort on such pages."""
    with txstore.open(tmp_path) as db:
        users = db.key_value_store("users", Serdes.string(), Serdes.string())
        users.put_all([(f"k{i:05d}", "v" * 50) for i in range(3000)])
        users.commit(changelog_offset=1)
    file = data_mdb(tmp_path)
    raw = bytearray(file.read_bytes())
    leaves = [
        n
        for n in range(2, len(raw) // PAGE)
        if struct.unpack_from("<H", raw, n * PAGE + 10)[0] == 0x02  # P_LEAF
        and b"k01500" in raw[n * PAGE : (n + 1) * PAGE]
    ]
    assert len(leaves) == 1
    raw[leaves[0] * PAGE : (leaves[0] + 1) * PAGE] = bytes(PAGE)
    file.write_bytes(bytes(raw))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), "k01500"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"writer DamagedFileError {file}",
        f"snapshot DamagedFileError {file}",
    ]
