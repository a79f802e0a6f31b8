"""Window and session keys checked against their segments when a store opens on a partition
that was page-walked (an unclean shutdown, or ``verify="always"``): a flipped byte in a key's
timestamp that keeps LMDB's key order passes the page walk, and is refused here with
``DamagedFileError`` before the store serves a read (``txstore.bytestores.segment_check``).

Real LMDB files: a task writes every window and session format, then one key of one segment is
rewritten with py-lmdb (deleted and put back altered with the same value, as a disk flip leaves
it) and the ``closed-cleanly`` marker is removed, as a crash leaves the directory."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import lmdb
import pytest

import txstore
from tests.runtime.test_check_deep import SESSION_STORES, WINDOW_STORES, make_task_dir, open_task
from txstore.bytestores import segment_check
from txstore.engine.checksums import seal, unseal
from txstore.engine.writer_lock import CLEAN_CLOSE
from txstore.errors import DamagedFileError
from txstore.runtime import admin
from txstore.runtime.task import Task

_Q = struct.Struct(">q")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task directory with every window and session format, closed cleanly."""
    path = tmp_path_factory.mktemp("segcheck") / "0"
    make_task_dir(path, total=200)
    assert (path / CLEAN_CLOSE).is_file()
    return path


def copy(healthy: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "p"
    shutil.copytree(healthy, dest)
    return dest


def crash(path: Path) -> None:
    """What a killed writer leaves: no ``closed-cleanly`` marker."""
    (path / CLEAN_CLOSE).unlink()


def segment_rows(path: Path, store: str) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """The rows of every segment database ``<store>.<n>`` of ``store``."""
    env = lmdb.open(str(path / "data"), max_dbs=4096, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            names = [
                n
                for n in txn.cursor().iternext(values=False)
                if n.startswith(b"%s." % store.encode())
            ]
            return {n: list(txn.cursor(env.open_db(n, txn=txn, create=False))) for n in names}
    finally:
        env.close()


def rewrite_key(path: Path, db: bytes, key: bytes, new: bytes) -> None:
    """Replace ``key`` of database ``db`` by ``new`` with the same value (a flipped key byte),
    its checksum trailer computed again for ``new``: the entry checksum would catch the flip
    first (tests/engine/test_checksums.py); these tests are about the segment key check behind
    it, which also guards partitions written without checksums."""
    env = lmdb.open(str(path / "data"), max_dbs=4096)
    try:
        with env.begin(write=True) as txn:
            handle = env.open_db(db, txn=txn, create=False)
            value = txn.get(key, db=handle)
            assert value is not None and txn.delete(key, db=handle)
            value = seal(new, unseal(key, value) or b"")
            assert txn.put(new, value, db=handle, overwrite=False)
    finally:
        env.close()


def open_window(
    dbase: txstore.Database, name: str, fmt: txstore.ValueFormat = txstore.ValueFormat.PLAIN
) -> Any:
    """Store ``name`` of the task directory, as ``open_task`` configured it."""
    return dbase.window_store(
        name,
        txstore.Serdes.string(),
        txstore.Serdes.long(),
        window_size=60_000,
        retention_period=120_000,
        format=fmt,
    )


def open_session(
    dbase: txstore.Database, name: str, fmt: txstore.ValueFormat = txstore.ValueFormat.PLAIN
) -> Any:
    """Session store ``name`` of the task directory, as ``open_task`` configured it."""
    return dbase.session_store(
        name,
        txstore.Serdes.string(),
        txstore.Serdes.long(),
        retention_period=120_000,
        format=fmt,
    )


def flip(key: bytes, at: int, mask: int) -> bytes:
    """``key`` with byte ``at`` (negative: from the end) xor ``mask``."""
    b = bytearray(key)
    b[at] ^= mask
    return bytes(b)


def first_key(path: Path, store: str) -> tuple[bytes, bytes]:
    """(database, key) of the first row of the first non-empty segment of ``store``."""
    for db, rows in sorted(segment_rows(path, store).items()):
        if rows:
            return db, rows[0][0]
    raise AssertionError(f"store {store} has no rows")


def test_a_window_start_flipped_out_of_its_segment_is_refused_after_a_crash(
    healthy: Path, tmp_path: Path
) -> None:
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_plain")
    bad = flip(key, -12, 0x0F)  # the window start's top byte: 0x0f000000_xxxxxxxx
    rewrite_key(path, db, key, bad)
    crash(path)
    with Task(path, sync=False) as task, pytest.raises(DamagedFileError) as err:
        task.window_store(
            txstore.Stores.window_store_builder(
                txstore.Stores.persistent_window_store("win_plain", 120_000, 60_000, False),
                txstore.Serdes.string(),
                txstore.Serdes.long(),
            )
        )
    msg = str(err.value)
    assert err.value.path == str(path / "data" / "data.mdb")
    assert "'win_plain'" in msg and bad.hex() in msg and "window start" in msg
    assert f"segment {int(db.split(b'.')[-1]) // 60_000}" in msg


def test_a_clean_shutdown_checks_nothing_the_documented_limit(
    healthy: Path, tmp_path: Path
) -> None:
    """With the marker present nothing was walked, so nothing is checked: the same damaged
    key opens and is served. The check trusts a clean close (a flip on a disk at rest is left to
    ``txstore check --deep``)."""
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_plain")
    bad = flip(key, -12, 0x0F)
    rewrite_key(path, db, key, bad)
    with txstore.open(path) as dbase:
        part = dbase.partition
        assert part.page_walk is None
        store = open_window(dbase, "win_plain")
        starts = [kv.key.window.start for kv in store.all()]
    assert _Q.unpack(bad[-12:-4])[0] in starts  # served under a window never written


def test_verify_always_checks_after_a_clean_shutdown(healthy: Path, tmp_path: Path) -> None:
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_ts")
    bad = flip(key, -10, 0x40)
    rewrite_key(path, db, key, bad)
    with (
        txstore.open(path, verify="always") as dbase,
        pytest.raises(DamagedFileError, match=r"window store 'win_ts', segment \d+ .*" + bad.hex()),
    ):
        open_window(dbase, "win_ts", txstore.ValueFormat.TIMESTAMPED)


def test_a_read_only_open_that_walked_checks_too(healthy: Path, tmp_path: Path) -> None:
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_plain")
    bad = flip(key, -12, 0x0F)
    rewrite_key(path, db, key, bad)
    crash(path)
    with txstore.open(path, readonly=True) as dbase:
        assert dbase.partition.page_walk is not None
        with pytest.raises(DamagedFileError, match="'win_plain'"):
            open_window(dbase, "win_plain")


def test_a_session_end_flipped_out_of_its_segment_is_refused(healthy: Path, tmp_path: Path) -> None:
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "ses_plain")
    bad = flip(key, -16 + 2, 0xA6)  # the end's third byte: an end far in the future
    end, start = struct.unpack(">qq", bad[-16:])
    assert end > start
    rewrite_key(path, db, key, bad)
    crash(path)
    with (
        txstore.open(path) as dbase,
        pytest.raises(DamagedFileError, match=r"session store 'ses_plain'.*session end") as err,
    ):
        open_session(dbase, "ses_plain")
    assert bad.hex() in str(err.value) and "data.mdb" in str(err.value)


def test_a_session_starting_after_its_end_is_refused(healthy: Path, tmp_path: Path) -> None:
    """The end stays (same segment); one bit of the start moves it 1,048,576 ms later, past
    the end."""
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "ses_ph")
    bad = flip(key, -3, 0x10)
    end, start = struct.unpack(">qq", bad[-16:])
    assert start > end and end == struct.unpack(">q", key[-16:-8])[0]
    rewrite_key(path, db, key, bad)
    crash(path)
    with (
        txstore.open(path) as dbase,
        pytest.raises(DamagedFileError, match=r"'ses_ph'.*session \[\d+, \d+\] is not a window"),
    ):
        open_session(dbase, "ses_ph", txstore.ValueFormat.PLAIN_HEADERS)


def test_a_sequence_number_in_a_store_without_duplicates_is_refused(
    healthy: Path, tmp_path: Path
) -> None:
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_th")
    bad = flip(key, -1, 0x02)
    rewrite_key(path, db, key, bad)
    crash(path)
    with (
        txstore.open(path) as dbase,
        pytest.raises(DamagedFileError, match=r"'win_th'.*sequence number 2"),
    ):
        open_window(dbase, "win_th", txstore.ValueFormat.HEADERS)


def test_a_key_shorter_than_the_suffix_is_refused(healthy: Path, tmp_path: Path) -> None:
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_ph")
    rewrite_key(path, db, key, key[-11:])
    crash(path)
    with (
        txstore.open(path) as dbase,
        pytest.raises(DamagedFileError, match=r"'win_ph'.*11 bytes, shorter than the 12-byte"),
    ):
        open_window(dbase, "win_ph", txstore.ValueFormat.PLAIN_HEADERS)


def test_healthy_stores_of_every_window_and_session_format_reopen_after_a_crash(
    healthy: Path, tmp_path: Path
) -> None:
    """Every window format, retain_duplicates and both session formats: each store's keys are
    checked (it is recorded as checked on the walked partition) and it serves its rows."""
    path = copy(healthy, tmp_path)
    crash(path)
    with open_task(path) as task:
        part = task.db.partition
        assert part.page_walk is not None
        assert segment_check._checked[part] == set(WINDOW_STORES + SESSION_STORES)
        task.initialize()
        for name in WINDOW_STORES:
            assert list(task.store(name).all()), name
        for name in SESSION_STORES:
            assert list(task.store(name).fetch(None, None)), name
    with txstore.open(path, verify="always") as dbase:
        open_window(dbase, "win_ts", txstore.ValueFormat.TIMESTAMPED)
        assert segment_check._checked[dbase.partition] == {"win_ts"}


def test_a_clean_open_checks_nothing(healthy: Path, tmp_path: Path) -> None:
    path = copy(healthy, tmp_path)
    with open_task(path) as task:
        assert task.db.partition.page_walk is None
        assert task.db.partition not in segment_check._checked


def test_txstore_dump_of_a_walked_partition_checks_the_keys(healthy: Path, tmp_path: Path) -> None:
    """``dump`` (and the Spark reader, through the same catalog view) opens the partition
    read-only: after a crash, with no writer alive, it walks and the store checks its keys."""
    path = tmp_path / "app" / "0"
    shutil.copytree(healthy, path)
    db, key = first_key(path, "ses_plain")
    bad = flip(key, -16 + 2, 0xA6)
    rewrite_key(path, db, key, bad)
    assert list(admin.dump(tmp_path / "app", "ses_plain"))  # a clean close: not checked
    crash(path)
    with pytest.raises(DamagedFileError, match=r"'ses_plain'.*" + bad.hex()):
        list(admin.dump(tmp_path / "app", "ses_plain"))


def test_a_session_start_flipped_negative_is_refused(healthy: Path, tmp_path: Path) -> None:
    """The start's sign bit: still at most the end, same segment, but no SessionWindow."""
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "ses_plain")
    bad = flip(key, -8, 0x80)
    end, start = struct.unpack(">qq", bad[-16:])
    assert start < 0 <= end
    rewrite_key(path, db, key, bad)
    crash(path)
    with (
        txstore.open(path) as dbase,
        pytest.raises(DamagedFileError, match=r"'ses_plain'.*session \[-\d+, \d+\] is not a"),
    ):
        open_session(dbase, "ses_plain")


def test_skip_key_check_lets_a_caller_that_checks_rows_itself_open_the_store(
    healthy: Path, tmp_path: Path
) -> None:
    """``check --deep`` reports each bad key as a row: it opens the stores unchecked."""
    path = copy(healthy, tmp_path)
    db, key = first_key(path, "win_plain")
    bad = flip(key, -12, 0x0F)
    rewrite_key(path, db, key, bad)
    crash(path)
    with txstore.open(path, readonly=True) as dbase:
        assert dbase.partition.page_walk is not None
        segment_check.skip_key_check(dbase.partition)
        starts = [kv.key.window.start for kv in open_window(dbase, "win_plain").all()]
    assert _Q.unpack(bad[-12:-4])[0] in starts
