"""The bytes key-value store, persistent and in memory, transactional and not."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from txstore.bytestores.kv import BytesKeyValueStore, MemoryPartition
from txstore.engine.base import PartitionBase
from txstore.engine.partition import Partition
from txstore.errors import (
    ConfigConflictError,
    InvalidArgumentError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
    SnapshotInvalidatedError,
    StoreClosedError,
)

FLAVOURS = ["lmdb-tx", "lmdb-direct", "memory-tx", "memory-direct"]

# A leaked iterator or snapshot (ResourceWarning) fails the test, whatever the config.
pytestmark = pytest.mark.filterwarnings("error")


class Env:
    """One store flavour; ``reopen`` simulates a restart (persistent) or keeps the object."""

    def __init__(self, flavour: str, tmp_path: Path) -> None:
        self.persistent = flavour.startswith("lmdb")
        self.transactional = flavour.endswith("-tx")
        self.path = tmp_path / "p"
        self.partition: PartitionBase = self._partition()
        self.store = BytesKeyValueStore("kv", self.partition, transactional=self.transactional)

    def _partition(self) -> PartitionBase:
        return Partition(self.path, sync=False) if self.persistent else MemoryPartition()

    def reopen(self) -> BytesKeyValueStore:
        if self.persistent:
            self.partition.close()
            self.partition = self._partition()
            self.store = BytesKeyValueStore("kv", self.partition, transactional=self.transactional)
        return self.store

    def close(self) -> None:
        self.partition.close()


@pytest.fixture(params=FLAVOURS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(request.param, tmp_path)
    yield e
    e.close()


def committed(store: BytesKeyValueStore) -> list[tuple[bytes, bytes]]:
    return list(store.read_committed().all())


def test_crud(env: Env) -> None:
    s = env.store
    assert (s.name, s.persistent, s.transactional, s.is_open) == (
        "kv",
        env.persistent,
        env.transactional,
        True,
    )
    assert s.get(b"a") is None
    s.put(b"a", b"1")
    assert s.get(b"a") == b"1"
    assert s.put_if_absent(b"a", b"2") == b"1" and s.get(b"a") == b"1"
    assert s.put_if_absent(b"b", b"2") is None and s.get(b"b") == b"2"
    s.put_all([(b"c", b"3"), (b"d", b"4"), (b"c", b"33"), (b"a", None)])  # last write wins
    assert list(s.all()) == [(b"b", b"2"), (b"c", b"33"), (b"d", b"4")]
    assert s.delete(b"c") == b"33" and s.delete(b"c") is None
    s.put(b"d", None)  # None deletes
    s.put(b"e", b"")  # empty values are values
    assert list(s.all()) == [(b"b", b"2"), (b"e", b"")]
    assert s.approximate_num_entries() == 2
    s.commit(1)
    assert s.committed_offset == 1 and s.approximate_num_entries() == 2
    if env.persistent:
        s = env.reopen()
        assert list(s.all()) == [(b"b", b"2"), (b"e", b"")] and s.committed_offset == 1


def test_read_committed_versus_uncommitted(env: Env) -> None:
    s = env.store
    s.put(b"a", b"1")
    s.commit(1)
    s.put(b"a", b"2")
    s.put(b"b", b"2")
    view = s.read_committed()
    if env.transactional:
        assert view.get(b"a") == b"1" and view.get(b"b") is None
        assert committed(s) == [(b"a", b"1")]
        assert view.approximate_num_entries() == 1 and view.committed_offset == 1
        assert s.approximate_num_uncommitted_bytes() > 0
    else:  # write-through: everything written is committed data
        assert view.get(b"a") == b"2" and committed(s) == [(b"a", b"2"), (b"b", b"2")]
        assert s.approximate_num_uncommitted_bytes() == 0
    assert s.get(b"a") == b"2" and list(s.all()) == [(b"a", b"2"), (b"b", b"2")]
    s.commit(2)
    assert committed(s) == [(b"a", b"2"), (b"b", b"2")] and view.committed_offset == 2
    assert s.approximate_num_uncommitted_bytes() == 0


def test_recover(env: Env) -> None:
    s = env.store
    assert s.recover(0) is False  # never committed
    s.put(b"a", b"1")
    s.commit(10)
    s.put(b"a", b"2")
    s.put(b"b", b"2")
    assert s.recover(10) is True and s.recover(5) is True and s.recover(11) is False
    if env.transactional:
        assert list(s.all()) == [(b"a", b"1")]  # the overlay is gone
    else:
        assert list(s.all()) == [(b"a", b"2"), (b"b", b"2")]  # nothing to discard
    assert s.approximate_num_uncommitted_bytes() == 0 and s.committed_offset == 10
    with pytest.raises(InvalidTypeError):
        s.recover("10")  # type: ignore[arg-type]
    with pytest.raises(OffsetError):
        s.recover(-1)


def test_commit_offsets(env: Env) -> None:
    s = env.store
    s.put(b"a", b"1")
    s.commit(5)
    s.put(b"b", b"2")
    with pytest.raises(OffsetError, match="backwards"):
        s.commit(4)
    assert s.committed_offset == 5 and s.get(b"b") == b"2"  # nothing lost
    for bad, err in ((True, InvalidTypeError), (5.0, InvalidTypeError), (-3, OffsetError)):
        with pytest.raises(err):
            s.commit(bad)  # type: ignore[arg-type]
    s.commit(5)
    assert committed(s) == [(b"a", b"1"), (b"b", b"2")]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.put("a", b"1"), InvalidTypeError),  # str key
        (lambda s: s.put(bytearray(b"a"), b"1"), InvalidTypeError),
        (lambda s: s.put(None, b"1"), InvalidArgumentError),
        (lambda s: s.put(b"", b"1"), InvalidArgumentError),  # LMDB rejects empty keys
        (lambda s: s.put(b"x" * 512, b"1"), InvalidArgumentError),  # above 511 bytes
        (lambda s: s.put(b"a", "1"), InvalidTypeError),  # str value
        (lambda s: s.put(b"a", 1), InvalidTypeError),
        (lambda s: s.get("a"), InvalidTypeError),
        (lambda s: s.get(None), InvalidArgumentError),
        (lambda s: s.delete(b""), InvalidArgumentError),
        (lambda s: s.put_if_absent(b"a", memoryview(b"x")), InvalidTypeError),
        (lambda s: s.put_all([(b"ok", b"1"), (b"bad", "2")]), InvalidTypeError),
        (lambda s: s.put_all([(b"ok", b"1"), b"notapair"]), InvalidTypeError),
        (lambda s: s.range("a", None), InvalidTypeError),
        (lambda s: s.reverse_range(None, 3), InvalidTypeError),
        (lambda s: s.prefix_scan(None), InvalidArgumentError),
        (lambda s: s.prefix_scan("p"), InvalidTypeError),
        (lambda s: s.commit("1"), InvalidTypeError),
    ],
)
def test_bad_input_is_rejected_and_loses_nothing(env: Env, call: Any, error: type) -> None:
    s = env.store
    s.put_all([(b"a", b"1"), (b"b", b"2")])
    s.commit(1)
    s.put(b"c", b"3")
    with pytest.raises(error):
        call(s)
    assert list(s.all()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert s.get(b"ok") is None  # put_all validates everything before writing anything
    assert s.committed_offset == 1
    s.commit(2)
    if env.persistent:
        s = env.reopen()
    assert committed(s) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_max_size_key_is_accepted(env: Env) -> None:
    key = b"k" * 511
    env.store.put(key, b"v")
    env.store.commit(1)
    assert env.store.read_committed().get(key) == b"v"


def test_close(env: Env) -> None:
    s = env.store
    s.put(b"a", b"1")
    s.commit(1)
    s.put(b"b", b"uncommitted")
    it = s.all()
    view = s.read_committed()
    s.close()
    s.close()  # idempotent
    assert not s.is_open and it.closed
    for op in (
        lambda: s.get(b"a"),
        lambda: s.put(b"a", b"1"),
        lambda: s.all(),
        lambda: s.commit(2),
        lambda: s.recover(1),
        lambda: s.committed_offset,
        lambda: view.get(b"a"),
        lambda: view.all(),
        lambda: s.approximate_num_entries(),
    ):
        with pytest.raises(StoreClosedError, match="Store kv is currently closed"):
            op()
    if env.persistent and env.transactional:  # uncommitted writes were discarded by close
        s = env.reopen()
        assert list(s.all()) == [(b"a", b"1")]


def test_read_committed_view_is_read_only(env: Env) -> None:
    view = env.store.read_committed()
    for op in (
        lambda: view.put(b"a", b"1"),
        lambda: view.put_if_absent(b"a", b"1"),
        lambda: view.put_all([]),
        lambda: view.delete(b"a"),
        lambda: view.commit(1),
        lambda: view.recover(1),
    ):
        with pytest.raises(ReadOnlyError, match="read-only"):
            op()
    assert env.store.get(b"a") is None


def test_snapshot_view(env: Env) -> None:
    s = env.store
    s.put_all([(b"a", b"1"), (b"b", b"1")])
    s.commit(1)
    with s.read_committed().snapshot() as snap:
        s.put_all([(b"a", b"2"), (b"b", b"2"), (b"c", b"2")])
        s.commit(2)
        assert snap.committed_offset == 1 and snap.get(b"a") == b"1"
        assert list(snap.all()) == [(b"a", b"1"), (b"b", b"1")]
        assert snap.approximate_num_entries() == 2
    assert s.read_committed().committed_offset == 2


def test_meta_conflict_through_the_store(tmp_path: Path) -> None:
    with Partition(tmp_path / "p") as p:
        BytesKeyValueStore("kv", p, meta={"kind": "key_value", "format": "plain"}).close()
        with pytest.raises(ConfigConflictError, match="format: 'plain' on disk"):
            BytesKeyValueStore("kv", p, meta={"kind": "key_value", "format": "timestamped"})
        s = BytesKeyValueStore("kv", p)  # meta=None accepts what is recorded
        assert s.meta == {"kind": "key_value", "format": "plain"}


def test_read_committed_from_another_thread(tmp_path: Path) -> None:
    """A reader thread sees only whole commits while the writer thread commits."""
    with Partition(tmp_path / "p", sync=False, map_size=1 << 20) as p:
        s = BytesKeyValueStore("kv", p)
        pad = BytesKeyValueStore("pad", p)
        n_keys, commits = 50, 150
        s.put_all((b"k%02d" % i, b"%06d" % 0) for i in range(n_keys))
        s.commit(0)
        view = s.read_committed()
        errors: list[str] = []
        stop = threading.Event()

        invalidated = [0]
        reads = [0]

        def reader() -> None:
            last = -1
            while not stop.is_set():
                try:
                    with view.snapshot() as snap:
                        values = {v for _, v in snap.all()}
                        offset = snap.committed_offset
                except SnapshotInvalidatedError:
                    invalidated[0] += 1  # the writer grew the map: take a new snapshot
                    continue
                reads[0] += 1
                if len(values) != 1 or int(values.pop()) != offset:
                    errors.append(f"torn read at offset {offset}")
                assert offset is not None
                if offset < last:
                    errors.append(f"offset went back {last} -> {offset}")
                last = offset
                view.get(b"k00")

        t = threading.Thread(target=reader)
        t.start()
        try:
            for c in range(1, commits + 1):
                s.put_all((b"k%02d" % i, b"%06d" % c) for i in range(n_keys))
                pad.put(b"pad%06d" % c, os.urandom(8192))  # grows the map while reading
                p.commit_stores({"kv": c, "pad": c})
        finally:
            stop.set()
            t.join()
        assert errors == [] and reads[0] > 10
        assert p.info()["map_size"] > 1 << 20


def test_spill_a_million_uncommitted_puts(tmp_path: Path) -> None:
    """1M uncommitted puts under a 1 MiB budget: bounded memory, reads and commit correct."""
    n = 1_000_000
    with Partition(tmp_path / "p", sync=False, overlay_budget_bytes=1 << 20) as p:
        s = BytesKeyValueStore("kv", p)
        s.put(b"%08d" % 5, b"committed")
        s.commit(1)
        anon_before = _rss_anon_kib()
        for i in range(n):
            s.put(b"%08d" % i, b"v%07d" % i)
        grown_mib = (_rss_anon_kib() - anon_before) / 1024
        assert grown_mib < 32, f"anonymous RSS grew {grown_mib:.1f} MiB for spilled puts"
        assert (tmp_path / "p" / "spill").is_dir()
        assert s.approximate_num_uncommitted_bytes() > 100 * 2**20  # the whole, spilled state
        for i in range(0, n, 9973):
            assert s.get(b"%08d" % i) == b"v%07d" % i
        assert s.read_committed().get(b"%08d" % 5) == b"committed"
        s.delete(b"%08d" % 7)
        count = sum(1 for _ in s.all())
        assert count == n - 1
        with s.reverse_all() as it:
            assert next(it) == (b"%08d" % (n - 1), b"v%07d" % (n - 1))
        s.commit(2)
        assert not (tmp_path / "p" / "spill").exists()
        assert s.approximate_num_entries() == n - 1 and s.get(b"%08d" % 5) == b"v0000005"
        assert s.get(b"%08d" % 7) is None


def _rss_anon_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


class StoreModel(RuleBasedStateMachine):
    """put/delete/commit/crash/recover against a model of committed + uncommitted state."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = _stateful_dir()
        self.partition = Partition(self.tmp, sync=False, overlay_budget_bytes=2048)
        self.store = BytesKeyValueStore("kv", self.partition)
        self.committed: dict[bytes, bytes] = {}
        self.current: dict[bytes, bytes] = {}
        self.offset = 0

    keys = st.binary(min_size=1, max_size=3)

    @rule(key=keys, value=st.binary(max_size=40))
    def put(self, key: bytes, value: bytes) -> None:
        self.store.put(key, value)
        self.current[key] = value

    @rule(key=keys)
    def delete(self, key: bytes) -> None:
        assert self.store.delete(key) == self.current.pop(key, None)

    @rule()
    def commit(self) -> None:
        self.offset += 1
        self.store.commit(self.offset)
        self.committed = dict(self.current)

    @rule()
    def crash_and_recover(self) -> None:
        self.partition.close()  # uncommitted writes vanish, as in a crash
        self.partition = Partition(self.tmp, sync=False, overlay_budget_bytes=2048)
        self.store = BytesKeyValueStore("kv", self.partition)
        assert self.store.recover(self.offset) is (self.offset > 0)
        self.current = dict(self.committed)

    @precondition(lambda self: self.current)
    @rule(data=st.data())
    def read_range(self, data: st.DataObject) -> None:
        lo, hi = sorted(data.draw(st.lists(st.sampled_from(sorted(self.current)), min_size=2)))[:2]
        expect = sorted((k, v) for k, v in self.current.items() if lo <= k <= hi)
        assert list(self.store.range(lo, hi)) == expect
        assert list(self.store.reverse_range(lo, hi)) == expect[::-1]

    @invariant()
    def matches(self) -> None:
        assert list(self.store.all()) == sorted(self.current.items())
        assert list(self.store.read_committed().all()) == sorted(self.committed.items())

    def teardown(self) -> None:
        self.partition.close()


_STATEFUL_ROOT: list[Path] = []
_STATEFUL_RUNS = itertools.count()


def _stateful_dir() -> Path:
    return _STATEFUL_ROOT[0] / f"run{next(_STATEFUL_RUNS)}"


def test_stateful_model(tmp_path: Path) -> None:
    _STATEFUL_ROOT[:] = [tmp_path]
    runner = StoreModel.TestCase
    runner.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
    runner().runTest()


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_recover_discards_the_overlay_without_touching_committed_rows(
    tmp_path: Path, kind: str
) -> None:
    """recover() costs what the overlay holds, never the store's size: over 300,000 committed
    rows it writes no LMDB transaction and every committed row stays. (Timed in perf/.)"""
    p: PartitionBase = (
        Partition(tmp_path / "p", sync=False) if kind == "lmdb" else MemoryPartition()
    )
    with p:
        s = BytesKeyValueStore("kv", p)
        s.put_all((b"%08d" % i, b"v") for i in range(300_000))
        s.commit(1)
        for i in range(10):
            s.put(b"%08d" % i, b"uncommitted")
        before = p.info()["last_txnid"] if isinstance(p, Partition) else None
        assert s.recover(1) is True
        if isinstance(p, Partition):
            assert p.info()["last_txnid"] == before
        assert s.approximate_num_uncommitted_bytes() == 0
        assert s.get(b"%08d" % 3) == b"v"
        assert sum(1 for _ in s.all()) == 300_000


def test_memory_snapshots_copy_on_write_once() -> None:
    p = MemoryPartition()
    s = BytesKeyValueStore("kv", p, transactional=False)
    s.put_all([(b"a", b"1")])
    with s.read_committed().snapshot() as snap:
        table = p._data[b"kv"]
        s.put(b"b", b"2")
        copied = p._data[b"kv"]
        assert copied is not table  # the snapshot keeps the old table
        s.put(b"c", b"3")
        assert p._data[b"kv"] is copied  # copied once, not per write
        assert list(snap.all()) == [(b"a", b"1")]
    s.put(b"d", b"4")
    assert p._data[b"kv"] is copied and len(list(s.all())) == 4
    p.close()
