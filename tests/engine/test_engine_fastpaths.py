"""Fast paths of the engine: the writer's own read transaction, the typed stores' identity
conversions, and the single-key window fetch's C-level iterator. Each must behave exactly as
the general path it shortcuts."""

from __future__ import annotations

import gc
import os
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import txstore
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.changelog.layer import ChangeLoggingKeyValueBytesStore, RecordContext
from txstore.codecs import ValueFormat
from txstore.engine.partition import Partition
from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    SerializationError,
    StoreClosedError,
)
from txstore.stores.formats import value_codec
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import BytesSerde, Serdes, StringSerde

pytestmark = pytest.mark.filterwarnings("error")


def active_readers(p: Partition) -> int:
    """Reader slots of this environment holding a snapshot (``env.readers()``)."""
    assert p._sh is not None
    lines = p._sh.env.readers().splitlines()[1:]
    return sum(1 for line in lines if line.split()[-1] != "-")


# -- the writer's read transaction --------------------------------------------------------------


def test_writer_reads_see_every_commit_and_write_through(tmp_path: Path) -> None:
    with Partition(tmp_path / "p") as p:
        tx = BytesKeyValueStore("tx", p)
        nontx = BytesKeyValueStore("nontx", p, transactional=False)
        for i in range(5):
            tx.put(b"k", b"%d" % i)
            tx.commit(i + 1)
            assert tx.get(b"k") == b"%d" % i
            assert tx.read_committed().get(b"k") == b"%d" % i
            nontx.put(b"k", b"%d" % i)  # its own write transaction
            assert nontx.get(b"k") == b"%d" % i
            with nontx.range(None, None) as it:
                assert list(it) == [(b"k", b"%d" % i)]
        assert active_readers(p) == 1  # the writer's one read transaction, nothing pinned
        assert p.info()["num_readers"] >= 1


def test_writer_reads_a_database_opened_after_its_transaction_began(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path) as p:
        for name in ("a", "b"):
            s = BytesKeyValueStore(name, p)
            s.put(b"k", name.encode())
            s.commit(1)
    with Partition(path) as p:  # a fresh process-level handle table
        a = BytesKeyValueStore("a", p, meta=None)
        assert a.get(b"k") == b"a"  # begins the writer's read transaction
        assert b"b" not in p.writer_handles
        # "b"'s handle is opened now, after that transaction began: LMDB would refuse it
        # in that transaction, so the writer begins a new one
        assert p.get(b"b", b"k") == b"b"
        assert p.count(b"b") == 1 and p.read_range(b"b", b"a", b"z") == ([(b"k", b"b")], False)
        assert p.get(b"missing", b"k") is None and p.count(b"missing") == 0


def test_writer_read_transaction_ends_at_close(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path) as writer:
        s = BytesKeyValueStore("kv", writer)
        s.put(b"k", b"v")
        s.commit(1)
        ro = Partition(path, readonly=True)  # shares the environment
        assert s.get(b"k") == b"v" and active_readers(writer) == 1
    assert writer.writer_txn is None
    assert active_readers(ro) == 0
    ro.close()


def test_window_segment_drop_and_recreate_through_writer_reads(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=1000, window_size=10
        )
        for t in range(0, 5000, 100):  # later segments expire and drop earlier ones
            w.put("k", f"v{t}", t)
            w.commit(t + 1)
            assert w.fetch("k", t) == f"v{t}"
            with w.fetch("k", 0, 10_000) as it:
                assert [kv.key for kv in it][-1] == t


def test_fork_leaves_the_parents_read_transaction_intact(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with Partition(path) as p:
        s = BytesKeyValueStore("kv", p)
        s.put(b"a", b"1")
        s.commit(1)
        typed = KeyValueStore(s, Serdes.bytes(), value_codec(ValueFormat.PLAIN, Serdes.bytes()))
        assert typed._lmdb is p and typed.get(b"a") == b"1"
        assert s.get(b"a") == b"1" and p.writer_txn is not None
        snap = p.snapshot()
        assert snap.get(b"kv", b"a") == b"1" and active_readers(p) == 2
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code, never return into pytest
            code = 0
            try:
                code = 1 if p.writer_txn is not None else 0
                for get in (s.get, typed.get):
                    try:
                        get(b"a")
                        code = code or 2
                    except InvalidStateStoreError:
                        pass
                gc.collect()
            except BaseException:
                (tmp_path / "err.txt").write_text(traceback.format_exc())
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        err = tmp_path / "err.txt"
        assert os.WEXITSTATUS(status) == 0, err.read_text() if err.exists() else status
        assert active_readers(p) == 2  # the parent's slots still hold their snapshots
        for i in range(2, 30):
            s.put(b"a", b"%d" % i)
            s.commit(i)
            assert s.get(b"a") == b"%d" % i
        assert snap.get(b"kv", b"a") == b"1"
        snap.close()


# -- typed identity conversions -----------------------------------------------------------------


class SubclassedBytesSerde(BytesSerde):
    """A bytes serde that is not exactly ``BytesSerde``: the typed store takes its general
    path, which the fast path must match."""


@pytest.fixture(params=["fast", "general"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    serde = Serdes.bytes() if request.param == "fast" else SubclassedBytesSerde()
    with txstore.open(tmp_path / "p") as db:
        store = db.key_value_store("kv", serde, serde)
        assert store._raw_keys == (request.param == "fast")
        yield store


class Bytes2(bytes):
    pass


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (None, b"v", InvalidArgumentError),
        (b"", b"v", InvalidArgumentError),
        (b"k" * 512, b"v", InvalidArgumentError),
        ("str", b"v", InvalidTypeError),
        (Bytes2(b"k"), b"v", InvalidTypeError),
        (b"k", "str", InvalidTypeError),
        (b"k", Bytes2(b"v"), InvalidTypeError),
    ],
)
def test_typed_bytes_store_refuses_what_the_serdes_refuse(
    kv: Any, key: object, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        kv.put(key, value)
    assert kv.approximate_num_uncommitted_bytes() == 0


def test_typed_bytes_store_conversions(kv: Any) -> None:
    kv.put(bytearray(b"ba"), memoryview(b"mv"))
    kv.put(b"k" * 511, b"longest key")
    kv.put(b"n", b"1")
    kv.put(b"n", None)
    assert kv.get(bytearray(b"ba")) == b"mv" and type(kv.get(b"ba")) is bytes
    assert kv.get(b"k" * 511) == b"longest key" and kv.get(b"n") is None
    with pytest.raises(InvalidArgumentError):
        kv.get(None)
    with pytest.raises(InvalidArgumentError):
        kv.get(b"")
    kv.commit(1)
    assert kv.get(b"ba") == b"mv"
    kv.close()
    with pytest.raises(StoreClosedError):
        kv.put(b"k", b"v")
    with pytest.raises(StoreClosedError):
        kv.get(b"k")


def test_typed_fast_put_is_not_taken_past_change_logging(tmp_path: Path) -> None:
    """Only a plain bytes store is written straight to the overlay."""

    class Log:
        def __init__(self) -> None:
            self.records: list[tuple[Any, ...]] = []

        def append(self, *record: Any) -> None:
            self.records.append(record)

    with txstore.open(tmp_path / "p") as db:
        store = db.key_value_store("kv", Serdes.bytes(), Serdes.bytes())
        assert store._ov is not None
        log = Log()
        changelog: Any = log
        logged = ChangeLoggingKeyValueBytesStore(
            store._inner, changelog, ValueFormat.PLAIN, RecordContext()
        )
        typed = KeyValueStore(logged, Serdes.bytes(), store.codec)
        assert typed._ov is None
        typed.put(b"k", b"v")
        assert store.get(b"k") == b"v" and [r[:2] for r in log.records] == [(b"k", b"v")]


# -- the single-key window fetch ----------------------------------------------------------------


@pytest.fixture
def windows(tmp_path: Path) -> Iterator[Any]:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=1000, window_size=10
        )
        for t in (0, 10, 20, 30):
            w.put("k", f"v{t}", t)
        yield w


def test_decoded_iterator_protocol(windows: Any) -> None:
    it = windows.fetch("k", 0, 100)
    assert iter(it) is it and it.has_next() and it.peek_next_key() == 0
    assert next(it) == (0, "v0")
    assert it.peek_next_key() == 10
    assert [kv.key for kv in it] == [10, 20, 30]  # a for loop continues where next() stopped
    assert not it.has_next() and it.peek_next_key() is None
    with pytest.raises(StopIteration):
        next(it)
    with windows.backward_fetch("k", 0, 100) as it:
        assert [kv.key for kv in it] == [30, 20, 10, 0]


def test_decoded_iterator_close_and_store_close_stop_a_loop(windows: Any) -> None:
    seen = []
    with windows.fetch("k", 0, 100) as it:
        for kv in it:
            seen.append(kv.key)
            if kv.key == 10:
                it.close()
        assert not it.has_next() and it.peek_next_key() is None
    assert seen == [0, 10]
    seen = []
    it = windows.fetch("k", 0, 100)
    for kv in it:
        seen.append(kv.key)
        windows.close()
    assert seen == [0] and not it.has_next() and list(it) == []


def test_fetch_fast_path_errors_match_the_serde(windows: Any, tmp_path: Path) -> None:
    for bad, error in [
        (None, InvalidArgumentError),
        (3, InvalidTypeError),
        ("\ud800", InvalidArgumentError),  # not encodable as UTF-8
        ("x" * 500, InvalidArgumentError),  # too long with its 12-byte suffix
    ]:
        with pytest.raises(error):
            windows.fetch(bad, 0, 100)
    with pytest.raises(InvalidTypeError):
        windows.fetch("k", 0, "100")
    raw = windows._inner
    raw.put_at(b"bad" + (5).to_bytes(8, "big") + bytes(4), 5, b"\xff\xfe")
    with pytest.raises(SerializationError, match="UTF-8"):
        windows.fetch("bad", 0, 100)
    assert type(windows.key_serde) is StringSerde


def test_fetch_fast_path_with_datetimes_and_reverse(windows: Any) -> None:
    import datetime as dt

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    with windows.fetch("k", epoch, epoch + dt.timedelta(milliseconds=20)) as it:
        assert [kv.key for kv in it] == [0, 10, 20]
    with windows.fetch("k", 25, 5) as it:
        assert list(it) == []


def test_committed_view_rereads_the_segment_registry_after_each_commit(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "p") as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=1000, window_size=10
        )
        view = w.read_committed()
        raw_view = w._inner.read_committed()
        assert raw_view._segment_ids() == []
        w.put("k", "a", 0)
        assert raw_view._segment_ids() == []  # staged only
        w.commit(1)
        assert raw_view._segment_ids() == [0]
        with view.fetch("k", 0, 100) as it:
            assert list(it) == [(0, "a")]
        w.put("k", "b", 120_000)  # a new segment; the expired one is dropped
        w.commit(2)
        assert raw_view._segment_ids() == [2]
        with view.fetch("k", 0, 200_000) as it:
            assert list(it) == [(120_000, "b")]
        with raw_view.snapshot() as snap:
            assert snap._segment_ids() == [2]
            w.put("k", "c", 180_000)  # a new segment, nothing dropped (that would end snap)
            w.commit(3)
            assert snap._segment_ids() == [2] and raw_view._segment_ids() == [2, 3]
        view.close()
        raw_view.close()


def test_only_the_writer_partition_counts_its_writes(tmp_path: Path) -> None:
    """A read-only partition cannot know when its writer commits: its views never cache."""
    with txstore.open(tmp_path / "p") as db:
        p = db.partition
        assert isinstance(p, Partition) and p.path is not None
        before = p.write_generation
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=1000, window_size=10
        )
        w.put("k", "a", 0)
        w.commit(1)
        assert p.write_generation is not None and before is not None
        assert p.write_generation > before
        with Partition(p.path, readonly=True) as ro:
            assert ro.write_generation is None


@pytest.mark.parametrize("serde", [Serdes.bytes(), SubclassedBytesSerde()], ids=["fast", "general"])
def test_typed_bytes_store_reads_spilled_and_committed_rows(tmp_path: Path, serde: Any) -> None:
    with txstore.open(tmp_path / "p", overlay_budget_bytes=2048) as db:
        kv = db.key_value_store("kv", serde, serde)
        kv.put_all((b"c%03d" % i, b"committed") for i in range(50))
        kv.commit(1)
        for i in range(0, 200, 2):
            kv.put(b"c%03d" % i, None if i % 4 == 0 else b"spilled")
        assert db.partition.overlay is not None
        assert all(ov.spilled for ov in db.partition.overlay.dbs("kv"))
        for i in range(200):
            expected = None if i % 4 == 0 else b"spilled" if i % 2 == 0 else None
            if i < 50 and i % 2:
                expected = b"committed"
            assert kv.get(b"c%03d" % i) == expected, i
        kv.commit(2)
        assert kv.get(b"c002") == b"spilled" and kv.get(b"c004") is None
