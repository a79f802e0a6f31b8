"""A plain-Python reference of the windowed stream-stream join (no stores, lists only).

It states the rules of docs/joins.md directly, record by record, so that txstore's join
(``txstore.joins``) can be compared with it on random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Buffered:
    side: int  # 0 left, 1 right
    key: Any
    value: Any
    ts: int
    headers: list[tuple[str, bytes | None]]
    arrival: int


@dataclass
class Reference:
    """``Reference(before, after, grace, kind)``; :meth:`feed` returns the outputs of one
    record as ``(key, left value, right value, left headers, right headers, timestamp)``."""

    before: int
    after: int
    grace: int
    kind: str  # inner, left, outer
    stream_time: int = -1
    dropped_null: int = 0
    dropped_late: int = 0
    buffers: tuple[list[Buffered], list[Buffered]] = field(default_factory=lambda: ([], []))
    waiting: list[Buffered] = field(default_factory=list)
    arrivals: int = 0

    def look(self, side: int) -> int:
        return self.after if side == 0 else self.before

    def tracked(self, side: int) -> bool:
        return self.kind == "outer" or (self.kind == "left" and side == 0)

    def is_open(self, rec: Buffered) -> bool:
        return rec.ts + self.look(rec.side) + self.grace >= self.stream_time

    def feed(self, side: int, key: Any, value: Any, ts: int, headers: Any) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        if key is None or value is None:
            self.dropped_null += 1
            return out
        if ts + self.look(side) + self.grace < self.stream_time:
            self.dropped_late += 1
            return out
        rec = Buffered(side, key, value, ts, list(headers or []), self.arrivals)
        self.arrivals += 1
        if ts > self.stream_time:
            self.stream_time = ts
            closed = [w for w in self.waiting if not self.is_open(w)]
            closed.sort(key=lambda w: (w.ts, w.side, w.key.encode(), w.arrival))
            for w in closed:
                self.waiting.remove(w)
                out.append(self.result(w, None) if w.side == 0 else self.result(None, w))
                out[-1] = (*out[-1][:-1], w.ts)
        if side == 0:
            lo, hi = max(0, ts - self.before), max(0, ts + self.after)
        else:
            lo, hi = max(0, ts - self.after), max(0, ts + self.before)
        others = [
            o
            for o in self.buffers[1 - side]
            if o.key == key and lo <= o.ts <= hi and self.is_open(o)
        ]
        others.sort(key=lambda o: (o.ts, o.arrival))
        for o in others:
            pair = self.result(rec, o) if side == 0 else self.result(o, rec)
            out.append((*pair[:-1], max(ts, o.ts)))
            if o in self.waiting:
                self.waiting.remove(o)
        if not others and self.tracked(side):
            self.waiting.append(rec)
        self.buffers[side].append(rec)
        return out

    @staticmethod
    def result(left: Buffered | None, right: Buffered | None) -> tuple[Any, ...]:
        key = (left or right).key  # type: ignore[union-attr]
        return (
            key,
            None if left is None else left.value,
            None if right is None else right.value,
            None if left is None else left.headers,
            None if right is None else right.headers,
            -1,
        )


def reference_self_join(
    before: int, after: int, grace: int, records: list[tuple[Any, Any, int, Any]]
) -> list[tuple[Any, ...]]:
    """A self-join: the inner join of the stream with itself, each record fed to the left
    and then to the right."""
    ref = Reference(before, after, grace, "inner")
    out: list[tuple[Any, ...]] = []
    for key, value, ts, headers in records:
        out += ref.feed(0, key, value, ts, headers)
        out += ref.feed(1, key, value, ts, headers)
    return out
