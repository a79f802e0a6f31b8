"""A task's key-value put: the change-logging layer's short path keeps every semantic.

``ChangeLoggingKeyValueBytesStore.put`` stages a plain value (or a delete) in the overlay and
appends its changelog record itself when the arguments allow it, instead of going through
``_record`` and the bytes store's ``put``. These tests hold it to what the long path does:
the record carries the key, the value, and the timestamp and headers of ``task.context``; the
overlay holds the write before the commit; every bad input gets its typed error with nothing
written, to the store or the changelog; and the stores the short path does not serve (other
formats, non-transactional) log the same records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from txstore import Serdes, Stores, ValueAndTimestamp, codecs
from txstore.changelog.api import MAX_FIELD_BYTES
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    StoreClosedError,
)
from txstore.runtime.task import Task

pytestmark = pytest.mark.filterwarnings("error")

HEADERS = codecs.encode_headers([("trace", b"t1")])
HEADERS2 = codecs.encode_headers([("trace", b"t2"), ("n", b"2")])


def open_task(path: Path) -> tuple[Task, dict[str, Any]]:
    task = Task(path)
    stores = {
        "raw": task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("raw"), Serdes.bytes(), Serdes.bytes()
            )
        ),
        "typed": task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("typed"), Serdes.string(), Serdes.long()
            )
        ),
        "ts": task.key_value_store(
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store("ts"),
                Serdes.string(),
                Serdes.long(),
            )
        ),
        "direct": task.key_value_store(  # not transactional: the long path, write-through
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("direct", transactional=False),
                Serdes.bytes(),
                Serdes.bytes(),
            )
        ),
    }
    return task, stores


def records(task: Task, name: str) -> list[tuple[bytes, bytes | None, int, bytes]]:
    return [(r.key, r.value, r.timestamp, r.headers) for r in task.changelog(name).read_committed()]


def test_the_record_carries_the_context_and_the_overlay_holds_the_write(tmp_path: Path) -> None:
    task, s = open_task(tmp_path)
    with task:
        task.initialize()
        task.context.timestamp, task.context.headers = 1_700, HEADERS
        s["raw"].put(b"k1", b"v1")
        s["typed"].put("k1", 7)
        s["ts"].put("k1", ValueAndTimestamp(8, 99))
        s["direct"].put(b"k1", b"d1")
        s["typed"].put("k2", 8)  # a store's first put takes the long path, the next ones not
        task.context.timestamp, task.context.headers = 2_000, HEADERS2
        s["raw"].put(b"k2", b"v2")
        s["raw"].put(b"k1", None)  # a delete: a tombstone with the context's timestamp
        # staged, before the commit: the overlay answers
        assert (s["raw"].get(b"k2"), s["raw"].get(b"k1"), s["typed"].get("k1")) == (b"v2", None, 7)
        assert s["raw"].approximate_num_uncommitted_bytes() > 0
        task.commit(1)
        assert records(task, "raw") == [
            (b"k1", b"v1", 1_700, HEADERS),
            (b"k2", b"v2", 2_000, HEADERS2),
            (b"k1", None, 2_000, HEADERS2),
        ]
        assert records(task, "typed") == [
            (b"k1", (7).to_bytes(8, "big"), 1_700, HEADERS),
            (b"k2", (8).to_bytes(8, "big"), 1_700, HEADERS),
        ]
        # a timestamped store: the record's timestamp is the value's, the long path's rule
        assert records(task, "ts") == [(b"k1", (8).to_bytes(8, "big"), 99, HEADERS)]
        assert records(task, "direct") == [(b"k1", b"d1", 1_700, HEADERS)]
    for f in (tmp_path / "data").iterdir():
        f.unlink()  # every store rebuilt from its changelog alone
    task, s = open_task(tmp_path)
    with task:
        task.initialize()
        assert (s["raw"].get(b"k1"), s["raw"].get(b"k2"), s["typed"].get("k1")) == (None, b"v2", 7)
        assert (s["ts"].get("k1"), s["direct"].get(b"k1")) == (ValueAndTimestamp(8, 99), b"d1")


BAD: list[tuple[str, dict[str, Any], tuple[Any, Any], type[Exception], str]] = [
    ("timestamp below -1", {"timestamp": -5}, (b"k", b"v"), InvalidArgumentError, "timestamp -5"),
    ("timestamp a str", {"timestamp": "0"}, (b"k", b"v"), InvalidTypeError, "timestamp"),
    ("headers a str", {"headers": "h"}, (b"k", b"v"), InvalidTypeError, "headers"),
    ("empty key", {}, (b"", b"v"), InvalidArgumentError, "key"),
    ("key above 511 bytes", {}, (b"k" * 512, b"v"), InvalidArgumentError, "key"),
    ("value a str", {}, (b"k", "v"), InvalidTypeError, "bytes"),
    ("key a str", {}, ("k", b"v"), InvalidTypeError, "bytes"),
]


@pytest.mark.parametrize(
    ("context", "args", "error", "match"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_gets_its_typed_error_and_writes_nothing(
    tmp_path: Path,
    context: dict[str, Any],
    args: tuple[Any, Any],
    error: type[Exception],
    match: str,
) -> None:
    task, s = open_task(tmp_path)
    with task:
        task.initialize()
        s["raw"].put(b"kept", b"1")
        task.commit(1)
        log = task.changelog("raw")
        end = log.end_offset
        for name, value in context.items():
            setattr(task.context, name, value)
        with pytest.raises(error, match=match):
            s["raw"].put(*args)
        assert log.end_offset == end and s["raw"].approximate_num_uncommitted_bytes() == 0
        task.context.timestamp, task.context.headers = 0, b""
        task.commit(2)
        assert [r.key for r in log.read_committed()] == [b"kept"]
        assert s["raw"].get(b"kept") == b"1"


def test_puts_before_initialize_and_after_close_are_refused(tmp_path: Path) -> None:
    task, s = open_task(tmp_path)
    with task:
        with pytest.raises(InvalidStateStoreError, match=r"before task\.initialize"):
            s["raw"].put(b"k", b"v")
        task.initialize()
        s["raw"].put(b"k", b"v")  # the first accepted put opens the short path
        task.commit(1)
    with pytest.raises(StoreClosedError):
        s["raw"].put(b"k", b"w")
    task, s = open_task(tmp_path)
    with task:
        task.initialize()
        assert s["raw"].get(b"k") == b"v" and task.changelog("raw").committed_end_offset == 1


HUGE: list[tuple[str, int, int]] = [  # (what, value bytes, headers bytes): key + both > 2 GiB - 1
    ("a value above the changelog's limit", MAX_FIELD_BYTES, 0),
    ("a value and headers above it together", 2**30, 2**30),
]


@pytest.mark.parametrize(
    ("value_size", "headers_size"), [h[1:] for h in HUGE], ids=[h[0] for h in HUGE]
)
def test_a_record_the_changelog_would_refuse_is_refused_before_the_store_stages_it(
    tmp_path: Path, value_size: int, headers_size: int
) -> None:
    """Before, the store staged the write and then the changelog refused its record: the
    next task commit committed a value its changelog never held. Both the short path (a
    key-value store) and ``_record`` (a window store) refuse it first. The values are
    ``bytes(n)``: calloc'd, never touched, so they cost no memory."""
    task = Task(tmp_path)
    with task:
        kv = task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("kv"), Serdes.bytes(), Serdes.bytes()
            )
        )
        w = task.window_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("w", 3_600_000, 60_000, False),
                Serdes.bytes(),
                Serdes.bytes(),
            )
        )
        task.initialize()
        task.context.headers = bytes(headers_size)
        big = bytes(value_size)
        with pytest.raises(InvalidArgumentError, match="above the limit"):
            kv.put(b"k", big)
        with pytest.raises(InvalidArgumentError, match="above the limit"):
            w.put(b"k", big, 0)
        del big
        task.context.headers = b""
        assert kv.approximate_num_uncommitted_bytes() == 0 and kv.get(b"k") is None
        assert w.fetch(b"k", 0) is None
        assert task.changelog("kv").end_offset == 0 and task.changelog("w").end_offset == 0
        kv.put(b"k", b"small")  # the store and its changelog go on
        task.commit(1)
        assert [r.value for r in task.changelog("kv").read_committed()] == [b"small"]
