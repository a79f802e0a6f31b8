"""A ``None`` put on a window store with retain_duplicates (kafka-formats.md section 4.4): a
no-op in the store, but logged by the change-logging layer as Kafka's
``ChangeLoggingWindowBytesStore`` logs it, under its own seqnum counter; restore of that
changelog gives the same fetch results (real LMDB files, real changelog files, real processes
for the restore)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import txstore
from txstore import Serdes, Stores, ValueAndTimestamp
from txstore.changelog.log import FileChangelog
from txstore.runtime.task import Task
from txstore.runtime.windowed_tables import windowed_table

RETENTION = 120_000
TS = 60_000


def ck(key: str, ts: int, seq: int) -> bytes:
    """WindowKeySchema.toStoreKeyBinary(key, ts, seq) with a string key."""
    return key.encode() + struct.pack(">qi", ts, seq)


def builder(timestamped: bool = False) -> Any:
    if timestamped:
        return Stores.timestamped_window_store_builder(
            Stores.persistent_timestamped_window_store("w", RETENTION, 1000, True),
            Serdes.string(),
            Serdes.string(),
        )
    return Stores.window_store_builder(
        Stores.persistent_window_store("w", RETENTION, 1000, True), Serdes.string(), Serdes.string()
    )


def fetched(w: Any) -> tuple[list[Any], list[Any]]:
    with w.fetch("k", 0, 10 * TS) as it, w.all() as everything:
        return [(kv.key, kv.value) for kv in it], [(kv.key, kv.value) for kv in everything]


def changelog(path: Path) -> list[tuple[bytes, bytes | None, int]]:
    with FileChangelog(path / "changelog" / "w", readonly=True) as log:
        return [(r.key, r.value, r.timestamp) for r in log.read_committed()]


def write(path: Path, timestamped: bool = False) -> tuple[list[Any], list[Any]]:
    with Task(path) as task:
        w = task.window_store(builder(timestamped))
        task.initialize()
        wrap = (lambda v, t: ValueAndTimestamp(v, t)) if timestamped else (lambda v, t: v)
        task.context.timestamp = 7
        w.put("k", wrap("x", 5), TS)
        w.put("k", None, TS)  # a no-op in the store; logged with the next changelog seqnum
        w.put("k", wrap("y", 6), TS)
        w.put("k", None, 2 * TS)
        w.put("k", wrap("z", 8), 2 * TS)
        task.commit(1)
        # the store's own numbering: no seqnum for the null puts
        rows = list(w.bytes_store.read_committed().all())
        assert [k for k, _ in rows] == [ck("k", TS, 1), ck("k", TS, 2), ck("k", 2 * TS, 3)]
        return fetched(w)


def test_null_put_is_logged_with_the_changelog_own_seqnum(tmp_path: Path) -> None:
    write(tmp_path)
    assert changelog(tmp_path) == [
        (ck("k", TS, 1), b"x", 7),
        (ck("k", TS, 2), None, 7),  # Kafka logs the null put: key [k][ts][2], value null
        (ck("k", TS, 3), b"y", 7),
        (ck("k", 2 * TS, 4), None, 7),
        (ck("k", 2 * TS, 5), b"z", 7),
    ]


def test_timestamped_changelog_strips_the_timestamp(tmp_path: Path) -> None:
    write(tmp_path, timestamped=True)
    assert changelog(tmp_path) == [
        (ck("k", TS, 1), b"x", 5),
        (ck("k", TS, 2), None, 7),
        (ck("k", TS, 3), b"y", 6),
        (ck("k", 2 * TS, 4), None, 7),
        (ck("k", 2 * TS, 5), b"z", 8),
    ]


RESTORE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from tests.changelog.test_window_changelog_duplicates import builder, fetched
    from txstore.runtime.task import Task
    with Task(sys.argv[1]) as task:
        w = task.window_store(builder(sys.argv[3] == "ts"))
        report = task.initialize()
        print(report.restored["w"], repr(fetched(w)))
    """
)


def test_restore_gives_the_same_fetch_results(tmp_path: Path) -> None:
    for kind in ("plain", "ts"):
        src, dst = tmp_path / f"{kind}-src", tmp_path / f"{kind}-dst"
        expected = write(src, kind == "ts")
        assert [v for _, v in expected[0]] == (
            ["x", "y", "z"]
            if kind == "plain"
            else [ValueAndTimestamp(v, t) for v, t in (("x", 5), ("y", 6), ("z", 8))]
        )
        (dst / "changelog").mkdir(parents=True)
        shutil.copytree(src / "changelog" / "w", dst / "changelog" / "w")
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                RESTORE,
                str(dst),
                str(Path(__file__).resolve().parents[2]),
                kind,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split(" ", 1)
        assert int(out[0]) == 5
        assert out[1].strip() == repr(expected)
        # restored keys follow the changelog's numbering, as in Kafka
        with txstore.open(dst, readonly=True) as db:
            w = builder(kind == "ts").build(db)
            keys = [k for k, _ in w.bytes_store.read_committed().all()]
        assert keys == [ck("k", TS, 1), ck("k", TS, 3), ck("k", 2 * TS, 5)]


def test_windowed_table_from_the_changelog_agrees(tmp_path: Path) -> None:
    expected = write(tmp_path / "src")
    with txstore.open(tmp_path / "dst") as db:
        w = windowed_table(tmp_path / "src" / "changelog" / "w", 1000, builder(), db=db)
        assert fetched(w) == expected
