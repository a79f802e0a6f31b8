"""``check(deep=True)`` over real partition directories: a healthy task passes for every store
kind and format; a value changed, a row deleted or added, a broken value layout and flipped
bytes in LMDB's data file are each reported, while the plain check stays as it was."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import pytest

import txstore
from txstore import (
    AggregationWithHeaders,
    Headers,
    Serdes,
    SessionWindow,
    Stores,
    ValueAndHeaders,
    ValueAndTimestamp,
    ValueTimestampHeaders,
    Windowed,
)
from txstore.changelog.log import FileChangelog
from txstore.engine import checksums
from txstore.runtime import admin
from txstore.runtime.task import Task

ROOT = Path(__file__).resolve().parents[2]
RETENTION = 120_000
WINDOW = 60_000
KV_STORES = ("kv_plain", "kv_ts", "kv_headers")
WINDOW_STORES = ("win_plain", "win_dups", "win_ph", "win_ts", "win_th")
SESSION_STORES = ("ses_plain", "ses_ph")
ALL_STORES = KV_STORES + WINDOW_STORES + SESSION_STORES


def open_task(path: Path) -> Task:
    """A task with a store of every kind and format (small changelog segments)."""
    task = Task(path, sync=False, changelog_options={"segment_bytes": 4096})
    s, lg = Serdes.string(), Serdes.long()
    task.key_value_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("kv_plain"), s, lg)
    )
    task.key_value_store(
        Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("kv_ts"), s, lg
        )
    )
    task.key_value_store(
        Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store_with_headers("kv_headers"), s, s
        )
    )
    task.window_store(
        Stores.window_store_builder(
            Stores.persistent_window_store("win_plain", RETENTION, WINDOW, False), s, lg
        )
    )
    task.window_store(
        Stores.window_store_builder(
            Stores.persistent_window_store("win_dups", RETENTION, WINDOW, True), s, lg
        )
    )
    task.window_store(
        Stores.window_store_with_headers_builder(
            Stores.persistent_window_store_with_headers("win_ph", RETENTION, WINDOW, False), s, lg
        )
    )
    task.window_store(
        Stores.timestamped_window_store_builder(
            Stores.persistent_timestamped_window_store("win_ts", RETENTION, WINDOW, False), s, lg
        )
    )
    task.window_store(
        Stores.timestamped_window_store_with_headers_builder(
            Stores.persistent_timestamped_window_store_with_headers(
                "win_th", RETENTION, WINDOW, False
            ),
            s,
            lg,
        )
    )
    task.session_store(
        Stores.session_store_builder(Stores.persistent_session_store("ses_plain", RETENTION), s, lg)
    )
    task.session_store(
        Stores.session_store_with_headers_builder(
            Stores.persistent_session_store_with_headers("ses_ph", RETENTION), s, lg
        )
    )
    return task


def process(task: Task, i: int) -> None:
    """Input record ``i``: puts, overwrites and deletes in every store; stream time moves a
    second a record, so window and session segments are created and dropped."""
    ts = 1_000 * i
    task.context.timestamp = ts
    task.context.headers = txstore.codecs.encode_headers([("i", str(i).encode())])
    key = f"k{i % 7}"
    kv = task.store("kv_plain")
    kv.put(key, (kv.get(key) or 0) + 1)
    task.store("kv_ts").put(key, ValueAndTimestamp(i, ts))
    if i % 5 == 4:
        task.store("kv_headers").delete(key)
    else:
        task.store("kv_headers").put(
            key, ValueTimestampHeaders(f"v{i}", ts, Headers([("n", str(i).encode())]))
        )
    start = ts // WINDOW * WINDOW
    page = f"p{i % 5}"
    task.store("win_plain").put(page, i, start)
    if i % 11 == 3:
        task.store("win_plain").put(f"p{(i + 1) % 5}", None, start)
    dups = task.store("win_dups")
    dups.put(page, None if i % 13 == 6 else i, start)  # a null put: the seqnums part
    task.store("win_ph").put(page, ValueAndHeaders(i, Headers([("last", str(i).encode())])), start)
    task.store("win_ts").put(page, ValueAndTimestamp(i, ts), start)
    task.store("win_th").put(
        page, ValueTimestampHeaders(i, ts, Headers([("h", bytes([i % 256]))])), start
    )
    sid = i // 10
    window = SessionWindow(sid * 10_000, sid * 10_000 + 9_000)
    user = Windowed(f"u{sid % 3}", window)
    plain = task.store("ses_plain")
    plain.put(user, (plain.fetch_session(user.key, window.start, window.end) or 0) + 1)
    if i % 17 == 16:
        plain.remove(user)
    task.store("ses_ph").put(user, AggregationWithHeaders(i, Headers([("i", bytes([i % 256]))])))


def make_task_dir(
    path: Path, total: int = 400, commit_every: int = 25, split: int | None = None
) -> None:
    """A partition directory after processing ``total`` records in two task lifetimes (the
    second from record ``split``, by default the last window boundary before the middle), with
    the changelogs cleaned (compacted, expired) after each.

    The default split keeps the windows the two lifetimes write to apart;
    ``test_retain_duplicates_written_across_a_restart`` writes to one window in both (a
    retain_duplicates window store continues its sequence numbers after a restart)."""
    half = total // 2 // (WINDOW // 1_000) * (WINDOW // 1_000) if split is None else split
    for first, last in ((0, half), (half, total)):
        with open_task(path) as task:
            task.initialize()
            for i in range(first, last):
                process(task, i)
                if (i + 1) % commit_every == 0:
                    task.commit(i + 1)
            task.commit(last)
            task.clean_changelogs()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("deep") / "0"
    make_task_dir(path)
    return path


def fresh(tmp_path: Path) -> Path:
    path = tmp_path / "p"
    make_task_dir(path, total=200)
    return path


def test_a_healthy_task_passes_for_every_store_kind_and_format(healthy: Path) -> None:
    report = admin.check(healthy, deep=True)
    assert report.ok, report.problems
    assert report.stores == len(ALL_STORES)
    assert report.rows_read > 0 and report.rows_verified == report.rows_read
    assert report.rows_not_compared == 0
    stats = {r["store"]: r for r in admin.stat(healthy)}
    assert sorted(stats) == sorted(ALL_STORES)
    assert stats["win_ph"]["format"] == "PLAIN_HEADERS"
    assert stats["ses_ph"]["format"] == "PLAIN_HEADERS"
    plain = admin.check(healthy)
    assert plain.ok and plain.rows_read == report.rows_read and not plain.deep


# ---- damage -------------------------------------------------------------------------------


def lmdb_put(path: Path, db: bytes, key: bytes, value: bytes | None, seal: bool = True) -> None:
    """Write (None: delete) one row of the named database ``db`` of partition ``path``
    directly, as a stray writer or a bad restore would, bypassing txstore. Its entry checksum
    is computed as txstore's writes compute it (``seal``): the entry is well-formed and only
    the deep check can tell it is wrong (a flipped byte, which breaks the checksum, is found
    by the plain check: ``test_flipped_bytes_in_the_lmdb_file_are_found``)."""
    env = lmdb.open(str(path / "data"), max_dbs=4096, subdir=True)
    try:
        with env.begin(write=True) as txn:
            handle = env.open_db(db, txn=txn, create=True)
            if value is None:
                assert txn.delete(key, db=handle), f"no key {key!r} in {db!r}"
            else:
                txn.put(key, checksums.seal(key, value) if seal else value, db=handle)
    finally:
        env.close()


def lmdb_get(path: Path, db: bytes, key: bytes) -> bytes | None:
    """The value of ``key`` in ``db``, read directly (its checksum checked and stripped)."""
    env = lmdb.open(str(path / "data"), max_dbs=4096, subdir=True, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            value: bytes | None = txn.get(key, db=env.open_db(db, txn=txn, create=False))
            return checksums.unseal(key, value)
    finally:
        env.close()


def lmdb_rows(path: Path, db: bytes) -> list[tuple[bytes, bytes]]:
    """The rows of ``db``, read directly (checksums checked and stripped)."""
    env = lmdb.open(str(path / "data"), max_dbs=4096, subdir=True, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            rows = list(txn.cursor(db=env.open_db(db, txn=txn, create=False)))
            return checksums.unseal_rows(rows)
    finally:
        env.close()


def segments(path: Path, store: str) -> list[int]:
    """The live segment ids of a window or session store (its registry database)."""
    return [struct.unpack(">q", k)[0] for k, _ in lmdb_rows(path, store.encode())]


def segment_db(store: str, sid: int) -> bytes:
    return f"{store}.{sid * WINDOW}".encode()  # segment interval = max(retention / 2, 60 s)


def problems(report: admin.CheckReport) -> list[str]:
    return [f"{p.what}: {p.detail}" for p in report.problems]


def test_a_changed_value_is_reported_with_its_key_and_both_values(tmp_path: Path) -> None:
    path = fresh(tmp_path)
    key = b"k3"
    old = lmdb_get(path, b"kv_plain", key)
    assert old is not None
    lmdb_put(path, b"kv_plain", key, struct.pack(">q", 12345))
    sid = segments(path, "win_th")[-1]
    wkey, wold = lmdb_rows(path, segment_db("win_th", sid))[0]
    lmdb_put(path, segment_db("win_th", sid), wkey, wold[:-1] + bytes([wold[-1] ^ 1]))
    assert admin.check(path).ok  # the plain check cannot tell
    report = admin.check(path, deep=True)
    found = problems(report)
    assert len(found) == 2, found
    kv = next(p for p in report.problems if "kv_plain" in p.what)
    assert kv.what == "store 'kv_plain': value differs" and kv.key == key
    expected = struct.unpack(">q", old)[0]
    assert "key 6b33 ('k3')" in kv.detail
    assert f"expected {expected} ({old.hex()})" in kv.detail
    assert f"found 12345 ({struct.pack('>q', 12345).hex()})" in kv.detail
    win = next(p for p in report.problems if "win_th" in p.what)
    assert win.what == "store 'win_th': value differs" and win.key == wkey
    assert "Windowed(key='p" in win.detail


def test_a_deleted_row_is_reported_missing(tmp_path: Path) -> None:
    path = fresh(tmp_path)
    lmdb_put(path, b"kv_ts", b"k2", None)
    sid = segments(path, "ses_ph")[-1]
    skey, _ = lmdb_rows(path, segment_db("ses_ph", sid))[0]
    lmdb_put(path, segment_db("ses_ph", sid), skey, None)
    assert admin.check(path).ok
    report = admin.check(path, deep=True)
    assert {(p.what, p.key) for p in report.problems} == {
        ("store 'kv_ts': row missing", b"k2"),
        ("store 'ses_ph': row missing", skey),
    }
    kv = next(p for p in report.problems if p.key == b"k2")
    assert "expected ValueAndTimestamp(" in kv.detail and "found no row" in kv.detail


def test_an_added_row_is_reported_extra(tmp_path: Path) -> None:
    path = fresh(tmp_path)
    value = txstore.codecs.pack_value(txstore.ValueFormat.HEADERS, b"zz", 5, b"")
    lmdb_put(path, b"kv_headers", b"new-key", value)
    sid = segments(path, "win_plain")[-1]
    wkey = txstore.codecs.window_key(b"p-new", sid * WINDOW, 0)
    lmdb_put(path, segment_db("win_plain", sid), wkey, struct.pack(">q", 7))
    assert admin.check(path).ok
    report = admin.check(path, deep=True)
    assert {(p.what, p.key) for p in report.problems} == {
        ("store 'kv_headers': extra row", b"new-key"),
        ("store 'win_plain': extra row", wkey),
    }
    assert all("the changelog has no record of this key" in p.detail for p in report.problems)


def test_a_row_the_changelog_deleted_is_reported_extra(tmp_path: Path) -> None:
    path = fresh(tmp_path)
    deleted = [
        k for k in (f"k{i}".encode() for i in range(7)) if not lmdb_get(path, b"kv_headers", k)
    ]
    assert deleted, "the workload deletes some kv_headers keys"
    value = txstore.codecs.pack_value(txstore.ValueFormat.HEADERS, b"back", 5, b"")
    lmdb_put(path, b"kv_headers", deleted[0], value)
    report = admin.check(path, deep=True)
    assert [p.what for p in report.problems] == ["store 'kv_headers': extra row"]
    assert "its last changelog record before the store's offset deletes it" in (
        report.problems[0].detail
    )


def test_broken_layouts_and_keys_are_bad_rows(tmp_path: Path) -> None:
    path = fresh(tmp_path)
    lmdb_put(path, b"kv_headers", b"k1", b"\x7f")  # a 63-byte headers size in a 1-byte value
    lmdb_put(path, b"kv_ts", b"k1", b"\x00\x01")  # a timestamped value without its timestamp
    sid = segments(path, "win_ph")[-1]
    wkey, _ = lmdb_rows(path, segment_db("win_ph", sid))[0]
    lmdb_put(path, segment_db("win_ph", sid), wkey, b"\x04\x02\x02")  # headers cut short
    first = segments(path, "win_plain")[0]
    misplaced = txstore.codecs.window_key(b"p1", (first + 1) * WINDOW, 0)
    lmdb_put(path, segment_db("win_plain", first), misplaced, struct.pack(">q", 1))
    short = b"short"  # no [end][start] suffix
    lmdb_put(path, segment_db("ses_plain", segments(path, "ses_plain")[-1]), short, b"x")
    report = admin.check(path, deep=True)
    bad = {(p.what, p.key) for p in report.problems}
    assert bad == {
        ("store 'kv_headers': bad row", b"k1"),
        ("store 'kv_ts': bad row", b"k1"),
        ("store 'win_ph': bad row", wkey),
        ("store 'win_plain': bad row", misplaced),
        ("store 'ses_plain': bad row", short),
    }, problems(report)
    detail = next(p.detail for p in report.problems if p.key == misplaced)
    assert f"belongs to segment {first + 1}, not {first}" in detail


def test_a_changed_row_of_a_retain_duplicates_store_is_reported(tmp_path: Path) -> None:
    """The store numbers its duplicates apart from the changelog (which the healthy check
    forgives when the values line up); a changed value still shows."""
    path = fresh(tmp_path)
    sid = segments(path, "win_dups")[-1]
    rows = lmdb_rows(path, segment_db("win_dups", sid))
    key, _ = rows[len(rows) // 2]
    lmdb_put(path, segment_db("win_dups", sid), key, struct.pack(">q", -5))
    report = admin.check(path, deep=True)
    assert report.problems and all(p.what.startswith("store 'win_dups'") for p in report.problems)
    assert any(p.key == key for p in report.problems), problems(report)


def test_flipped_bytes_in_the_lmdb_file_are_found(tmp_path: Path) -> None:
    """Issue 15, item 4: LMDB has no checksums, so a flipped byte in a data page changed a
    stored value silently and the plain check read it fine; only the deep check found it.
    Issue 24: every entry carries a checksum, so the plain check finds it too, naming the
    database and key, and the deep check reports it rather than comparing a damaged value."""
    path = fresh(tmp_path)
    key, value = lmdb_rows(path, b"kv_headers")[0]
    assert value.endswith(b"v" + value.rpartition(b"v")[2])  # ends with the string "v<i>"
    data = bytearray((path / "data" / "data.mdb").read_bytes())
    at = data.find(value)
    flipped = 0
    while at >= 0:  # every copy (LMDB keeps old page versions): the live one among them
        data[at + len(value) - 1] ^= 0x01  # the last byte of the string value: a payload byte
        flipped += 1
        at = data.find(value, at + 1)
    assert flipped >= 1
    (path / "data" / "data.mdb").write_bytes(bytes(data))
    with pytest.raises(checksums.ChecksumError):
        lmdb_get(path, b"kv_headers", key)
    for report in (admin.check(path), admin.check(path, deep=True)):
        assert report.checksums_verified > 0
        found = [(p.what, p.key) for p in report.problems if p.key is not None]
        assert found == [("store database 'kv_headers'", key)], problems(report)
        assert "checksum mismatch at key " + key.hex() in report.problems[0].detail
        # the store's own read stops at the damaged entry too (a typed error, not its value)
        assert all("kv_headers" in p.what for p in report.problems), problems(report)


def test_rows_of_expired_segments_are_expected_absent(healthy: Path, tmp_path: Path) -> None:
    """The changelog still holds records of windows the store dropped: they are not missing.
    A row of such a window that is present anyway (a store reopened after a crash forgets its
    stream time and may take a late record) is a note when it is the changelog's, a
    difference when it is not."""
    live = segments(healthy, "win_plain")
    with (
        FileChangelog(healthy / "changelog" / "win_plain", readonly=True) as log,
        log.read_committed(0) as records,
    ):
        old = [
            r for r in records if txstore.codecs.extract_window_key(r.key)[1] // WINDOW < live[0]
        ]
    assert old, "the changelog keeps records of dropped segments"
    assert admin.check(healthy, deep=True).ok
    path = fresh(tmp_path)
    first = segments(path, "win_plain")[0]
    with (
        FileChangelog(path / "changelog" / "win_plain", readonly=True) as log,
        log.read_committed(0) as records,
    ):
        latest = {r.key: r for r in records}
    key, rec = next(
        (k, r)
        for k, r in latest.items()
        if r.value is not None and txstore.codecs.extract_window_key(k)[1] // WINDOW < first
    )
    sid = txstore.codecs.extract_window_key(key)[1] // WINDOW
    lmdb_put(path, b"win_plain", struct.pack(">q", sid), bytes([txstore.ValueFormat.PLAIN]))
    lmdb_put(path, segment_db("win_plain", sid), key, rec.value)
    report = admin.check(path, deep=True)
    assert report.ok, problems(report)
    assert any("still present in segments" in n.detail for n in report.notes)
    lmdb_put(path, segment_db("win_plain", sid), key, struct.pack(">q", 999))
    report = admin.check(path, deep=True)
    assert [(p.what, p.key) for p in report.problems] == [("store 'win_plain': value differs", key)]
    assert "in an expired segment" in report.problems[0].detail


def test_a_store_behind_its_changelog_is_compared_up_to_its_offset(tmp_path: Path) -> None:
    """A crash between the changelog commit and the store commit leaves the store behind:
    keys written past its offset are not compared (compaction may have removed the record the
    store's value came from), every other key is."""
    path = fresh(tmp_path)
    with FileChangelog(path / "changelog" / "kv_plain") as log:
        log.append(b"k1", struct.pack(">q", 77), 1, b"")
        log.append(b"brand-new", struct.pack(">q", 1), 1, b"")
        log.commit(10_000)
    report = admin.check(path, deep=True)
    assert report.ok, problems(report)
    assert report.rows_not_compared == 1
    assert any("rows not compared" in n.detail for n in report.notes)
    lmdb_put(path, b"kv_plain", b"k2", struct.pack(">q", 0))
    assert [p.key for p in admin.check(path, deep=True).problems] == [b"k2"]


def test_a_store_without_a_changelog_gets_the_format_checks(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        kv = db.key_value_store(
            "plain", Serdes.string(), Serdes.string(), format=txstore.ValueFormat.HEADERS
        )
        kv.put("a", ValueTimestampHeaders("x", 5, Headers([("h", b"1")])))
        win = db.window_store(
            "w", Serdes.string(), Serdes.long(), retention_period=1000, window_size=10
        )
        win.put("a", 1, 100)
        db.commit({"plain": 1, "w": 1})
    report = admin.check(tmp_path / "p", deep=True)
    assert report.ok and report.rows_read == 2 and report.rows_verified == 0
    assert sum("has no changelog" in n.detail for n in report.notes) == 2
    lmdb_put(tmp_path / "p", b"plain", b"b", b"\x02\x02\xff\x00" + bytes(8))  # headers cut short
    report = admin.check(tmp_path / "p", deep=True)
    assert [(p.what, p.key) for p in report.problems] == [("store 'plain': bad row", b"b")]


def test_stores_upgraded_to_a_later_format_pass(tmp_path: Path) -> None:
    """Rows kept in an older format (a key-value store's legacy tier, a window store's old
    segment) are compared in that format; rows an upgrade converted (timestamp -1) match the
    conversion of their changelog record, and are counted as such in a note."""
    path = tmp_path / "p"
    s, lg = Serdes.string(), Serdes.long()

    def run(upgraded: bool, first: int, last: int) -> None:
        with Task(path, sync=False) as task:
            if upgraded:
                kv = task.key_value_store(
                    Stores.timestamped_key_value_store_builder(
                        Stores.persistent_timestamped_key_value_store("kv"), s, lg
                    )
                )
                win = task.window_store(
                    Stores.timestamped_window_store_builder(
                        Stores.persistent_timestamped_window_store(
                            "win", 10 * WINDOW, WINDOW, False
                        ),
                        s,
                        lg,
                    )
                )
            else:
                kv = task.key_value_store(
                    Stores.key_value_store_builder(Stores.persistent_key_value_store("kv"), s, lg)
                )
                win = task.window_store(
                    Stores.window_store_builder(
                        Stores.persistent_window_store("win", 10 * WINDOW, WINDOW, False), s, lg
                    )
                )
            task.initialize()
            for i in range(first, last):
                task.context.timestamp = 1_000 * i
                key = f"k{i % 10}"
                if upgraded and i % 3 == 0:
                    kv.get(f"k{(i + 5) % 10}")  # moves a legacy row, converted (ts -1)
                value = ValueAndTimestamp(i, 1_000 * i) if upgraded else i
                kv.put(key, value)
                # segments of 5 windows: 0 and 1 before the upgrade; after it, segment 1 is
                # written to (converted in place) and segment 2 made in the new format
                start = (10 if i % 2 else 5) * WINDOW if upgraded else (i // 20) * 5 * WINDOW
                win.put(key, value, start)
            task.commit(last)

    run(False, 0, 40)
    run(True, 40, 47)
    meta = {r["store"]: r for r in admin.stat(path)}
    assert meta["kv"]["format"] == "TIMESTAMPED" and meta["kv"]["config"]["legacy"]
    formats = {v for _, v in lmdb_rows(path, b"win")}
    assert formats == {bytes([txstore.ValueFormat.PLAIN]), bytes([txstore.ValueFormat.TIMESTAMPED])}
    report = admin.check(path, deep=True)
    assert report.ok, problems(report)
    assert report.rows_verified == report.rows_read
    assert any("converted from an older format" in n.detail for n in report.notes)
    lmdb_put(path, b"kv", b"k9", struct.pack(">q", 1))  # a row of the legacy tier, changed
    assert [(p.what, p.key) for p in admin.check(path, deep=True).problems] == [
        ("store 'kv': value differs", b"k9")
    ]


def test_retain_duplicates_written_across_a_restart(tmp_path: Path) -> None:
    """Both lifetimes write window [0, 60 s) of a retain_duplicates store: the second
    continues the first's sequence numbers (store and changelog layer), so no duplicate is
    overwritten and the store equals a restore of its changelog."""
    path = tmp_path / "p"
    make_task_dir(path, total=80, split=40)  # both lifetimes write window [0, 60 s)
    report = admin.check(path, deep=True)
    assert report.ok, problems(report)


def test_a_damaged_changelog_is_named_and_the_rows_still_get_their_format_checks(
    tmp_path: Path,
) -> None:
    path = fresh(tmp_path)
    seg = sorted((path / "changelog" / "kv_headers").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[60] ^= 0xFF
    seg.write_bytes(bytes(data))
    lmdb_put(path, b"kv_headers", b"k1", b"\x7f")
    report = admin.check(path, deep=True)
    whats = [p.what for p in report.problems]
    assert "changelog 'kv_headers'" in whats and "store 'kv_headers': bad row" in whats
    assert admin.check(path).ok is False


def test_deep_check_next_to_a_committing_task_finds_nothing(tmp_path: Path) -> None:
    """A task process commits once per record (changelog, then stores; its changelogs are
    compacted every 100 commits) while the deep check runs again and again: the store's rows
    and offset come from one snapshot taken before the changelog is read, so a commit in
    between only adds records past the store's offset (not compared), never a difference."""
    path = tmp_path / "p"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = [sys.executable, str(ROOT / "tests" / "_task_child.py"), str(path)]
    subprocess.run([*child, "600", "20"], env=env, check=True, capture_output=True, timeout=120)
    proc = subprocess.Popen(
        [*child, "1000000", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        runs = 0
        found: list[admin.Problem] = []
        offsets: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (runs < 40 or len(offsets) < 20):
            report = admin.check(path, deep=True)
            runs += 1
            found += report.problems
            offsets.add(admin.offsets(path)[0]["store_offset"])
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert len(offsets) >= 5, "the task process did not commit while the checks ran"
    assert found == []
