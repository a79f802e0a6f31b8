"""Paging of the HTTP query service's iterator answers: resume positions.

An iterator answer holds at most the server's ``max_results`` items (a bound per request that
protects the server, not a cap on what a query may return). When a query on **one partition**
has more, the answer says ``"truncated": true`` and carries ``"resume"``, the position of its
last item in the partition's iteration order; the client asks again with ``after=<resume>``
and the server continues just after that position, so the pages together are exactly the
answer a single iteration would give, in the same order.

A position is the sort key of an item in the store's own order: ``(segment, bytes)`` where
``bytes`` is the serialized key (key-value stores), ``key || L(window start)`` (window
stores; ``L(start)`` alone for a single key's windows), ``key || L(end) || L(start)``
(session stores); the segment is the window start (session end) divided by the store's segment
interval (0 for key-value stores), since segmented stores iterate segment by segment. It also
counts the items at exactly that position already returned (a window store that retains
duplicates holds several windows of one key and start).

A resumed page re-runs the query restricted where the API allows (a key-value range starts at
the position's key; a forward window range at the position's segment; a single key's windows
or sessions at its time) and skips the items up to the position. It is correct under
concurrent commits: an item committed before the position is not returned (as if the first
page had read later), one after it is, nothing is returned twice. Costs: O(log n) to resume a
key-value or single-key query; a windowed or session key-range page also re-reads the rows of
the position's segment that precede it (a backward session range re-reads the later segments).

The token is ``<segment>.<count>.<base64url bytes>``; clients pass it back unchanged.

>>> p = Position(3, b"ada", 1)
>>> p.token(), Position.parse(p.token()) == p
('3.1.YWRh', True)
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from txstore.queries.http.protocol import bad

__all__ = ["Order", "Position", "kv_order", "page", "session_order", "window_order"]

_Q = struct.Struct(">q")
_pack = _Q.pack

#: The sort key of an item: ``(segment, bytes)``.
Order = Callable[[Any], tuple[int, bytes]]


@dataclass(frozen=True)
class Position:
    """Where a truncated page ended: the last item's ``segment`` and ``raw`` sort bytes, and
    ``count``, how many items at exactly that position were returned."""

    segment: int
    raw: bytes
    count: int

    def token(self) -> str:
        """The ``resume`` text of an answer (what a client passes as ``after``)."""
        b64 = base64.urlsafe_b64encode(self.raw).decode("ascii").rstrip("=")
        return f"{self.segment}.{self.count}.{b64}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """The position of an ``after`` text; a malformed one is a 400 answer."""
        try:
            seg, count, b64 = text.split(".", 2)
            padded = (b64 + "=" * (-len(b64) % 4)).replace("-", "+").replace("_", "/")
            raw = base64.b64decode(padded, validate=True)
            pos = cls(int(seg, 10), raw, int(count, 10))
        except (ValueError, binascii.Error):
            raise bad(f"malformed after position {text[:60]!r}") from None
        if pos.count < 0:
            raise bad("malformed after position: negative count")
        return pos

    @property
    def time(self) -> int:
        """The timestamp a single key's window position ends with (``L(start)``); a position
        too short to hold one is a 400 answer."""
        if len(self.raw) < 8:
            raise bad("malformed after position: too short for a window position")
        t: int = _Q.unpack_from(self.raw, len(self.raw) - 8)[0]
        return t

    @property
    def session_end(self) -> int:
        """The session end of a session position (``key || L(end) || L(start)``); a position
        too short to hold one is a 400 answer."""
        if len(self.raw) < 16:
            raise bad("malformed after position: too short for a session position")
        t: int = _Q.unpack_from(self.raw, len(self.raw) - 16)[0]
        return t


def _ser(serialize: Callable[[Any], bytes | None]) -> Callable[[Any], bytes]:
    def ser(key: Any) -> bytes:
        return serialize(key) or b""

    return ser


def kv_order(serialize: Callable[[Any], bytes | None]) -> Order:
    """Key-value items: the serialized key."""
    ser = _ser(serialize)
    return lambda kv: (0, ser(kv.key))


def window_order(serialize: Callable[[Any], bytes | None], interval: int, keyed: bool) -> Order:
    """Window items: ``Windowed`` keys (``keyed``) or a single key's window starts."""
    if not keyed:
        return lambda kv: (kv.key // interval, _pack(kv.key))
    ser = _ser(serialize)

    def order(kv: Any) -> tuple[int, bytes]:
        start = kv.key.window.start
        return start // interval, ser(kv.key.key) + _pack(start)

    return order


def session_order(serialize: Callable[[Any], bytes | None], interval: int) -> Order:
    """Session items (``Windowed`` keys with session windows)."""
    ser = _ser(serialize)

    def order(kv: Any) -> tuple[int, bytes]:
        w = kv.key.window
        return w.end // interval, ser(kv.key.key) + _pack(w.end) + _pack(w.start)

    return order


def page(
    it: Any,
    limit: int,
    item: Callable[[Any], dict[str, Any]],
    order: Order | None,
    after: Position | None = None,
    reverse: bool = False,
    stop: Callable[[bytes], bool] | None = None,
) -> dict[str, Any]:
    """At most ``limit`` items of ``it`` (closed), as ``{"items", "truncated"}`` plus
    ``"resume"`` when truncated and ``order`` is given (a query on one partition).

    ``after``: skip the items up to that position (``reverse``: the iteration descends);
    ``stop(bytes)``: end the answer at the first item whose sort bytes it accepts (a prefix
    scan resumed over a range). Items out of the expected order (a store whose iteration order
    is not the one the positions assume) withhold the resume position: the client then raises
    rather than return a wrong answer.
    """
    out: list[dict[str, Any]] = []
    truncated = False
    with it:
        if order is None:
            for kv in it:
                if len(out) == limit:
                    truncated = True
                    break
                out.append(item(kv))
            return {"items": out, "truncated": truncated}
        prev: tuple[int, bytes] | None = None
        run = 0  # items at exactly ``prev`` returned so far (this page and earlier ones)
        skipping = after is not None
        ordered = True
        if after is not None:
            prev = (after.segment, after.raw)
        for kv in it:
            o = order(kv)
            if skipping:
                assert prev is not None and after is not None
                if (o < prev) if not reverse else (o > prev):
                    continue
                if o == prev and run < after.count:
                    run += 1
                    continue
                skipping = False
            if stop is not None and stop(o[1]):
                break
            if len(out) == limit:
                truncated = True
                break
            if o == prev:
                run += 1
            else:
                if prev is not None and ((o < prev) if not reverse else (o > prev)):
                    ordered = False
                prev, run = o, 1
            out.append(item(kv))
    doc: dict[str, Any] = {"items": out, "truncated": truncated}
    if truncated and ordered and prev is not None:
        doc["resume"] = Position(prev[0], prev[1], run).token()
    return doc
