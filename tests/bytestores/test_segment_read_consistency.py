"""A read-committed view reads a segment's format (the segment registry) and its data in one
LMDB read transaction.

A store reopened in a newer format converts an old segment in place the first time it writes
to it (lazy upgrade): one commit rewrites the segment's rows and its registry entry. A view that
read the registry in one transaction and the rows in another could decode converted rows with
the old format when that commit came in between. These tests put the converting commit exactly
there, deterministically: a hook on the partition runs it just before the view's read of the
segment (after the view listed the segments, which reads the registry).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore import Serdes, ValueAndHeaders, ValueFormat
from txstore.engine.partition import Partition

pytestmark = pytest.mark.filterwarnings("error")

PLAIN, PH = ValueFormat.PLAIN, ValueFormat.PLAIN_HEADERS
KEYS = 300  # more than one chunk (128 rows) of segment 0
SEG0 = b"w.0"


def _window(db: txstore.Database, fmt: ValueFormat) -> Any:
    return db.window_store(
        "w", Serdes.string(), Serdes.string(), retention_period=600_000, window_size=1, format=fmt
    )


def _hook(part: Partition, fire_at: int, action: Callable[[], None]) -> list[int]:
    """Run ``action`` (once) just before the ``fire_at``-th shared read of segment 0 (a read
    of the committed view, through any of the partition's shared read methods)."""
    calls = [0]

    def before(db: bytes) -> None:
        if db == SEG0:
            calls[0] += 1
            if calls[0] == fire_at:
                action()

    get, read_range, source = part.get, part.read_range, part.source
    read_atomic = part.read_atomic

    def hooked_get(db: bytes, key: bytes, *, shared: bool = False) -> Any:
        if shared:
            before(db)
        return get(db, key, shared=shared)

    def hooked_read_range(db: bytes, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("shared"):
            before(db)
        return read_range(db, *args, **kwargs)

    def hooked_source(db: bytes, *, shared: bool = False) -> Any:
        src = source(db, shared=shared)
        if not shared:
            return src

        class Hooked:
            def read_chunk(self, *args: Any) -> Any:
                before(db)
                return src.read_chunk(*args)

        return Hooked()

    def hooked_read_atomic(dbs: Any, fn: Any) -> Any:
        for db in dbs:
            before(db)
        return read_atomic(dbs, fn)

    part.get = hooked_get  # type: ignore[method-assign]
    part.read_range = hooked_read_range  # type: ignore[method-assign]
    part.source = hooked_source  # type: ignore[method-assign]
    part.read_atomic = hooked_read_atomic  # type: ignore[method-assign]
    return calls


@pytest.fixture
def upgraded(tmp_path: Path) -> Any:
    """A store reopened in PLAIN_HEADERS over segment 0 written in PLAIN; and the write that
    converts segment 0 (a put into it, then a commit)."""
    path = tmp_path / "p"
    with txstore.open(path, sync=False) as db:
        w = _window(db, PLAIN)
        for i in range(KEYS):
            w.put(f"k{i:03d}", f"v{i}", 0)
        w.commit(1)
    with txstore.open(path, sync=False) as db:
        w = _window(db, PH)
        assert w.bytes_store.segment_format(0) == PLAIN

        def convert() -> None:
            w.put("zzz", ValueAndHeaders("new"), 1)  # into segment 0: converted in place
            w.commit(2)
            assert w.bytes_store.segment_format(0) == PH

        yield db, w, convert


def test_get_between_registry_and_data(upgraded: Any) -> None:
    db, w, convert = upgraded
    view = w.read_committed()
    calls = _hook(db.partition, 1, convert)
    assert view.fetch("k007", 0) == ValueAndHeaders("v7")
    assert calls[0] >= 1  # the hook ran
    assert view.fetch("zzz", 1) == ValueAndHeaders("new")


def test_single_key_fetch_between_registry_and_data(upgraded: Any) -> None:
    db, w, convert = upgraded
    view = w.read_committed()
    with view.fetch("k000", 0, 1000) as it:  # lists (and caches) the registry first
        assert [(kv.key, kv.value) for kv in it] == [(0, ValueAndHeaders("v0"))]
    calls = _hook(db.partition, 1, convert)
    with view.fetch("k001", 0, 1000) as it:
        assert [(kv.key, kv.value) for kv in it] == [(0, ValueAndHeaders("v1"))]
    assert calls[0] >= 1


def test_chunked_scan_across_a_converting_commit(upgraded: Any) -> None:
    """The first chunk is read in the old format, the rest after the conversion committed."""
    db, w, convert = upgraded
    view = w.read_committed()
    calls = _hook(db.partition, 2, convert)
    with view.fetch_all(0, 1000) as it:
        rows = [(kv.key.key, kv.value) for kv in it]
    assert calls[0] >= 2
    expected = [(f"k{i:03d}", ValueAndHeaders(f"v{i}")) for i in range(KEYS)]
    assert rows[:KEYS] == expected
    assert rows[KEYS:] in ([], [("zzz", ValueAndHeaders("new"))])
