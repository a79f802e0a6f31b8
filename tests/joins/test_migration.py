"""Join buffers that already hold data in an older format keep working and upgrade lazily
(the WindowStoreWithHeaders proposal's test plan), on real files:

* a buffer written as a timestamped window store with headers (``[headers][timestamp][value]``,
  what Kafka's join used before the proposal), used through the adapter, then reopened as a
  plain window store with headers: old segments stay as they are, new ones are written in the
  new format, and a restore from the changelog rebuilds it in the new format;
* a buffer written as a plain window store (``[value]``, no headers): the same, old records
  read with empty headers.

In every case the buffered records still join, with their headers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lmdb

from txstore import Serdes, Stores, Task, ValueFormat
from txstore.joins import JoinWindows, StreamJoin, left, right
from txstore.runtime import admin

WINDOWS = JoinWindows.of_time_difference_and_grace(100_000, 0)
# The buffers' retention is their window size, 200 s, so their segments are 100 s long.


def segment_formats(path: Path, store: str) -> dict[int, ValueFormat]:
    """Segment id -> the value format its registry entry records (read with lmdb)."""
    env = lmdb.open(str(path / "data"), readonly=True, max_dbs=4096, lock=True)
    try:
        with env.begin() as txn:
            db = env.open_db(store.encode(), txn=txn, create=False)
            return {
                int.from_bytes(k, "big", signed=True): ValueFormat(v[0]) for k, v in txn.cursor(db)
            }
    finally:
        env.close()


def joiner(key: Any, lv: Any, rv: Any) -> list[Any]:
    return [lv.value, [list(h) for h in lv.headers], rv.value]


def run(path: Path, records: list[Any], position: int, **options: Any) -> list[Any]:
    with Task(path, sync=False) as task:
        join: StreamJoin[Any, Any] = StreamJoin(task, "j", WINDOWS, joiner=joiner, **options)
        task.initialize()
        out = join.process(records)
        task.commit(position)
    return [(r.key, r.value, r.timestamp) for r in out]


def test_a_timestamped_buffer_with_headers_works_through_the_adapter_and_upgrades(
    tmp_path: Path,
) -> None:
    old = [left("a", "old", 1_000, [("h", b"1")]), left("b", "old-b", 2_000)]
    assert run(tmp_path, old, 1, buffer_format=ValueFormat.HEADERS) == []
    assert set(segment_formats(tmp_path, "j-left").values()) == {ValueFormat.HEADERS}
    # through the adapter: the HEADERS buffer joins
    out = run(tmp_path, [right("b", "r0", 2_500)], 2, buffer_format=ValueFormat.HEADERS)
    assert out == [("b", ["old-b", [], "r0"], 2_500)]
    # reopened as a plain window store with headers: the metadata moves on, old data stays
    new = [left("a", "new", 100_000, [("h", b"2")]), right("a", "r", 100_500)]
    out = run(tmp_path, new, 3)
    assert out == [
        ("a", ["old", [["h", b"1"]], "r"], 100_500),
        ("a", ["new", [["h", b"2"]], "r"], 100_500),
    ]
    meta = {r["store"]: r for r in admin.stat(tmp_path)}
    assert meta["j-left"]["format"] == "PLAIN_HEADERS"
    formats = segment_formats(tmp_path, "j-left")
    assert formats == {0: ValueFormat.HEADERS, 1: ValueFormat.PLAIN_HEADERS}
    assert admin.check(tmp_path, deep=True).ok
    # restored from the changelog alone (the LMDB files gone): every segment in the new format
    shutil.rmtree(tmp_path / "data")
    out = run(tmp_path, [right("a", "r2", 101_000)], 4)
    assert [v[1][0] for v in out] == ["old", "new"]
    assert set(segment_formats(tmp_path, "j-left").values()) == {ValueFormat.PLAIN_HEADERS}


def test_a_plain_buffer_upgrades_lazily_and_its_records_join_with_empty_headers(
    tmp_path: Path,
) -> None:
    """The left buffer was written as a plain window store (the same name, configuration and
    serdes, format PLAIN), as state restored from such a changelog would be."""
    retention, size = WINDOWS.retention(), WINDOWS.buffer_window_size()
    with Task(tmp_path, sync=False) as task:
        plain = task.window_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("j-left", retention, size, True),
                Serdes.string(),
                Serdes.json(),
            )
        )
        task.initialize()
        for v, t in (("p1", 1_000), ("p2", 1_000)):  # duplicates of one window
            task.context.timestamp = t
            plain.put("a", v, t)
        task.commit(1)
    assert set(segment_formats(tmp_path, "j-left").values()) == {ValueFormat.PLAIN}
    out = run(tmp_path, [left("a", "n", 100_000, [("h", b"x")]), right("a", "r", 100_500)], 2)
    assert out == [
        ("a", ["p1", [], "r"], 100_500),
        ("a", ["p2", [], "r"], 100_500),
        ("a", ["n", [["h", b"x"]], "r"], 100_500),
    ]
    formats = segment_formats(tmp_path, "j-left")
    assert formats == {0: ValueFormat.PLAIN, 1: ValueFormat.PLAIN_HEADERS}
    assert admin.check(tmp_path, deep=True).ok
