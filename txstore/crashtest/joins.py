"""The join workload: a windowed stream-stream join (:mod:`txstore.joins`) under ``SIGKILL``.

``txstore crashtest --workload join`` (or ``txstore.crashtest.joins:JoinWorkload``) runs one
:class:`~txstore.joins.StreamJoin` in the writer's task. Input record ``i`` of the seeded stream
becomes a join record: left or right, its key (1 in 50 null), its payload as value (null when
the record is a delete, 1 in 8), its event time moved back now and then by up to three windows
(out-of-order records, some of them late past the grace period). The writer hands each record
to :meth:`~txstore.joins.StreamJoin.process_batch` with input position ``i + 1``, so the join's
outputs land in its output store ``join-out`` under that position, committed with the buffers,
the waiting records, stream time and the input position in one task commit.

The check: ``join-out`` holds, key for key, what :class:`JoinModel` (a plain-Python join over
lists, sharing no code with :mod:`txstore.joins`) emits for records ``0 .. n-1``: an output
missing is **lost**, one the model does not have (a record joined twice, a replay emitted again)
is **leaked**. The join's other stores (buffers, waiting records, state) take part in every
commit and are checked for their offsets; their content shows in the outputs.

>>> w = JoinWorkload(seed=3, keys=4)
>>> [s.name for s in w.stores()], w.extra_stores()[:2]
(['join-out'], ['join-left', 'join-right'])
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from txstore.crashtest.specs import Rec, StoreModel, StoreSpec
from txstore.crashtest.workload import Workload, mix64
from txstore.errors import InvalidArgumentError
from txstore.joins import JoinRecord, JoinWindows, StreamJoin
from txstore.joins.join import decode_output, parse_output_key
from txstore.runtime.database import Database
from txstore.runtime.task import Task
from txstore.stores.serdes import Serdes

__all__ = ["JoinModel", "JoinOutputSpec", "JoinWorkload", "join_input"]

_NAME = "join"


def join_input(rec: Rec, window_ms: int) -> JoinRecord:
    """The join record of input record ``rec`` (a pure function of it)."""
    h = mix64(rec.i ^ 0x6A6F696E)
    side = "left" if h & 1 else "right"
    back = (h >> 8) % (3 * window_ms) if (h >> 4) % 8 == 0 else 0
    key = None if (h >> 20) % 50 == 0 else rec.key
    value = None if rec.delete else rec.payload[:24]
    return JoinRecord(side, key, value, max(0, rec.ts - back))


@dataclass
class _Held:
    side: int
    key: str
    value: str
    ts: int
    n: int  # arrival


@dataclass
class JoinModel:
    """The join's rules on lists: what every output position must hold (docs/joins.md)."""

    before: int
    after: int
    grace: int
    kind: str
    now: int = -1
    held: list[_Held] = field(default_factory=list)
    waiting: list[_Held] = field(default_factory=list)

    def feed(self, rec: JoinRecord) -> list[tuple[Any, Any, int]]:
        """The outputs of one record, as ``(key, [left value, right value], timestamp)``."""
        side = 0 if rec.side == "left" else 1
        ahead = (self.after, self.before)
        if rec.key is None or rec.value is None:
            return []
        if rec.timestamp + ahead[side] + self.grace < self.now:
            return []
        out: list[tuple[Any, Any, int]] = []
        x = _Held(side, rec.key, rec.value, rec.timestamp, len(self.held))
        if x.ts > self.now:
            self.now = x.ts
            gone = [w for w in self.waiting if w.ts + ahead[w.side] + self.grace < self.now]
            for w in sorted(gone, key=lambda w: (w.ts, w.side, w.key.encode(), w.n)):
                self.waiting.remove(w)
                pair = [w.value, None] if w.side == 0 else [None, w.value]
                out.append((w.key, pair, w.ts))
        if side == 0:
            lo, hi = max(0, x.ts - self.before), max(0, x.ts + self.after)
        else:
            lo, hi = max(0, x.ts - self.after), max(0, x.ts + self.before)
        hits = [
            o
            for o in self.held
            if o.side != side
            and o.key == x.key
            and lo <= o.ts <= hi
            and o.ts + ahead[o.side] + self.grace >= self.now
        ]
        for o in sorted(hits, key=lambda o: (o.ts, o.n)):
            pair = [x.value, o.value] if side == 0 else [o.value, x.value]
            out.append((x.key, pair, max(x.ts, o.ts)))
            if o in self.waiting:
                self.waiting.remove(o)
        if not hits and (self.kind == "outer" or (self.kind == "left" and side == 0)):
            self.waiting.append(x)
        self.held.append(x)
        horizon = self.now - max(self.before, self.after, 0) - self.grace - 1
        if len(self.held) > 4096:  # forget what can never join again
            self.held = [o for o in self.held if o.ts > horizon]
        return out


class JoinOutputSpec(StoreSpec):
    """The join's output store, ``join-out``: ``(input position, n)`` -> ``(key, value,
    timestamp)``. Opening it opens the whole :class:`~txstore.joins.StreamJoin` in the task."""

    segmented = True  # the join's buffers are window stores: segments are created and dropped

    def __init__(self, windows: JoinWindows, kind: str) -> None:
        super().__init__(f"{_NAME}-out")
        self.windows = windows
        self.join_kind = kind

    def open(self, task: Task) -> Any:
        return StreamJoin(task, _NAME, self.windows, self.join_kind)  # type: ignore[arg-type]

    def open_readonly(self, db: Database) -> Any:
        return db.key_value_store(self.name, Serdes.bytes(), Serdes.bytes())

    def write(self, store: Any, rec: Rec) -> None:
        store.process_batch([join_input(rec, self.windows.before_ms)], rec.i + 1)

    def expect(self, model: StoreModel, rec: Rec) -> None:
        w = self.windows
        ref = model.aux.get("join")
        if ref is None:
            ref = model.aux["join"] = JoinModel(w.before_ms, w.after_ms, w.grace_ms, self.join_kind)
        for n, (key, value, ts) in enumerate(ref.feed(join_input(rec, w.before_ms))):
            model.put((rec.i + 1, n), (key, value, ts), rec.i)

    def order(self, value: Any) -> int:
        return -1  # outputs are never rewritten: any difference is a missing or extra output

    def read(self, view: Any) -> dict[Hashable, Any]:
        s, j = Serdes.string(), Serdes.json()
        with view.all() as it:
            return {parse_output_key(kv.key): tuple(decode_output(kv.value, s, j)) for kv in it}

    def describe(self, value: Any) -> str:
        key, pair, ts = value
        return f"output {key!r} {pair!r} at {ts}"

    def config(self) -> dict[str, Any]:
        w = self.windows
        return {
            "name": self.name,
            "kind": "join",
            "join": self.join_kind,
            "windows": [w.before_ms, w.after_ms, w.grace_ms],
        }


class JoinWorkload(Workload):
    """One outer (or ``kind``) join of two streams cut from the seeded input (see the module
    docstring). ``window_ms`` is the time difference of the join windows, ``grace_ms`` their
    grace; the defaults (1 s and 0.5 s, records 100 ms apart, 20 keys) give about one match
    per record and a steady flow of unmatched and late records."""

    def __init__(
        self,
        seed: int = 1,
        *,
        kind: str = "outer",
        window_ms: int = 1_000,
        grace_ms: int = 500,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("keys", 20)
        kwargs.setdefault("value_bytes", 24)
        super().__init__(seed, **kwargs)
        if kind not in ("inner", "left", "outer"):
            raise InvalidArgumentError(f"join kind must be inner, left or outer, got {kind!r}")
        self.kind = kind
        self.windows = JoinWindows.of_time_difference_and_grace(window_ms, grace_ms)

    def params(self) -> dict[str, Any]:
        return dict(
            super().params(),
            kind=self.kind,
            window_ms=self.windows.before_ms,
            grace_ms=self.windows.grace_ms,
        )

    def make_stores(self) -> list[StoreSpec]:
        return [JoinOutputSpec(self.windows, self.kind)]

    def extra_stores(self) -> list[str]:
        names = [f"{_NAME}-left", f"{_NAME}-right"]
        if self.kind != "inner":
            names.append(f"{_NAME}-outer")
        return [*names, f"{_NAME}-state"]
