"""Hypothesis stateful test of a transactional key-value store against a model.

Rules: put, delete, put_all, commit, close-and-reopen, recover, and a real crash: a child
process opens the same partition, writes uncommitted data (enough to spill past the small
overlay budget), and is killed with SIGKILL. After every step the read-uncommitted view must
equal the model's pending state and the read-committed view the model's committed state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import txstore
from txstore import OffsetError, Serdes

KEYS = st.text(alphabet="abcdef", min_size=1, max_size=3)
VALUES = st.integers(min_value=-(2**40), max_value=2**40)

CHILD = r"""
import sys, txstore
path, n = sys.argv[1], int(sys.argv[2])
db = txstore.open(path, overlay_budget_bytes=4096)
s = db.key_value_store("s", txstore.Serdes.string(), txstore.Serdes.long())
for i in range(n):
    s.put("crash-%d" % i, i)
    s.put("a", -1)
s.delete("b")
print("ready", s.approximate_num_uncommitted_bytes(), flush=True)
sys.stdin.read()  # hold the uncommitted writes until killed
"""


def crash_child_with_uncommitted_writes(path: str, n: int) -> None:
    """Run a writer process that holds ``n`` uncommitted puts, then SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, path, str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), (line, proc.stderr.read() if proc.stderr else "")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


class KVMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "p")
        self.committed: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self.offset: int | None = None
        self._open()

    def _open(self) -> None:
        self.db = txstore.open(self.path, overlay_budget_bytes=2048)
        self.store = self.db.key_value_store("s", Serdes.string(), Serdes.long())

    @rule(key=KEYS, value=VALUES)
    def put(self, key: str, value: int) -> None:
        self.store.put(key, value)
        self.pending[key] = value

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        assert self.store.delete(key) == self.pending.get(key)
        self.pending.pop(key, None)

    @rule(entries=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=30))
    def put_all(self, entries: list[tuple[str, int | None]]) -> None:
        self.store.put_all(entries)
        for k, v in entries:
            if v is None:
                self.pending.pop(k, None)
            else:
                self.pending[k] = v

    @rule(step=st.integers(min_value=0, max_value=3))
    def commit(self, step: int) -> None:
        offset = (self.offset or 0) + step
        self.store.commit(offset)
        self.offset = offset
        self.committed = dict(self.pending)

    @precondition(lambda self: self.offset is not None and self.offset > 0)
    @rule()
    def commit_backwards_is_rejected(self) -> None:
        assert self.offset is not None
        try:
            self.store.commit(self.offset - 1)
        except OffsetError:
            pass
        else:
            raise AssertionError("a lower offset was accepted")

    @rule()
    def close_and_reopen(self) -> None:
        self.db.close()
        self._open()
        self.pending = dict(self.committed)

    @rule(offset=st.integers(min_value=0, max_value=20))
    def recover(self, offset: int) -> None:
        caught_up = self.store.recover(offset)
        assert caught_up == (self.offset is not None and self.offset >= offset)
        self.pending = dict(self.committed)

    @rule(n=st.sampled_from([5, 400]))
    def crash(self, n: int) -> None:
        self.db.close()
        crash_child_with_uncommitted_writes(self.path, n)
        self._open()
        assert self.store.recover(self.offset or 0) == (self.offset is not None)
        self.pending = dict(self.committed)
        assert not os.path.exists(os.path.join(self.path, "spill")) or not any(
            os.scandir(os.path.join(self.path, "spill"))
        ), "recover left spilled data on disk"

    @invariant()
    def views_match_model(self) -> None:
        with self.store.all() as it:
            assert {kv.key: kv.value for kv in it} == self.pending
        view = self.store.read_committed()
        with view.all() as it:
            assert {kv.key: kv.value for kv in it} == self.committed
        for key in ("a", "b", "crash-1"):
            assert self.store.get(key) == self.pending.get(key)
            assert view.get(key) == self.committed.get(key)
        assert self.store.committed_offset == self.offset

    def teardown(self) -> None:
        self.db.close()
        self.dir.cleanup()


KVMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("TXSTORE_STATEFUL_EXAMPLES", "30")),
    stateful_step_count=25,
    deadline=None,
)
test_kv_state_machine = KVMachine.TestCase


def test_crash_helper_really_kills(tmp_path: Any) -> None:
    """The crash rule is only meaningful if the child really held uncommitted writes."""
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.string(), Serdes.long())
        s.put("a", 1)
        s.commit(0)
    crash_child_with_uncommitted_writes(str(tmp_path / "p"), 400)
    with txstore.open(tmp_path / "p") as db:
        s = db.key_value_store("s", Serdes.string(), Serdes.long())
        assert s.recover(0)
        assert s.get("a") == 1
        assert s.get("crash-1") is None
