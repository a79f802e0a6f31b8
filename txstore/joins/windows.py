"""``JoinWindows``: how far apart in time two records of a stream-stream join may be.

Kafka's ``JoinWindows`` in snake_case. A left record at time ``t`` joins the right records in
``[t - before, t + after]`` (a right record at ``t`` the left ones in ``[t - after, t +
before]``); ``grace`` is how long, in stream time, a window stays open after its end for
out-of-order records. ``before`` or ``after`` may be negative as long as ``before + after >= 0``.

>>> w = JoinWindows.of_time_difference_and_grace(10, 5)
>>> (w.before_ms, w.after_ms, w.grace_ms, w.size())
(10, 10, 5, 20)
>>> w.after(0).before_ms, w.after(0).after_ms
(10, 0)
>>> JoinWindows.of_time_difference_without_grace(3).grace_period_ms()
0
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace

from txstore.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["JoinWindows"]


def _ms(name: str, value: object) -> int:
    """Milliseconds of ``value``: an ``int`` or a ``timedelta`` (Java's ``Duration``)."""
    if isinstance(value, _dt.timedelta):
        return value // _dt.timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int (ms) or a timedelta, got {value!r}")
    return value


@dataclass(frozen=True)
class JoinWindows:
    """The time bounds of a windowed stream-stream join (see the module docstring).

    Make one with :meth:`of_time_difference_and_grace` or
    :meth:`of_time_difference_without_grace`, then adjust it with :meth:`before` and
    :meth:`after`. Bad bounds raise :class:`~txstore.errors.InvalidArgumentError`, a bound of
    another type than ``int`` or ``timedelta`` :class:`~txstore.errors.InvalidTypeError`."""

    before_ms: int
    after_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        for name in ("before_ms", "after_ms", "grace_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be an int, got {value!r}")
        if self.before_ms + self.after_ms < 0:
            raise InvalidArgumentError(
                "Window interval (ie, beforeMs+afterMs) must not be negative, got "
                f"before={self.before_ms} after={self.after_ms}"
            )
        if self.grace_ms < 0:
            raise InvalidArgumentError(f"Grace period must not be negative, got {self.grace_ms}")

    @classmethod
    def of_time_difference_and_grace(
        cls, time_difference: int | _dt.timedelta, after_window_end: int | _dt.timedelta
    ) -> JoinWindows:
        """Records at most ``time_difference`` apart join; a window accepts out-of-order
        records until stream time passes its end by ``after_window_end`` (the grace)."""
        diff = _ms("time_difference", time_difference)
        if diff < 0:
            raise InvalidArgumentError(f"time_difference must not be negative, got {diff}")
        return cls(diff, diff, _ms("after_window_end", after_window_end))

    @classmethod
    def of_time_difference_without_grace(cls, time_difference: int | _dt.timedelta) -> JoinWindows:
        """:meth:`of_time_difference_and_grace` with no grace period."""
        return cls.of_time_difference_and_grace(time_difference, 0)

    def before(self, time_difference: int | _dt.timedelta) -> JoinWindows:
        """These windows with the left record's window starting ``time_difference`` before
        it."""
        return replace(self, before_ms=_ms("time_difference", time_difference))

    def after(self, time_difference: int | _dt.timedelta) -> JoinWindows:
        """These windows with the left record's window ending ``time_difference`` after it."""
        return replace(self, after_ms=_ms("time_difference", time_difference))

    def grace(self, after_window_end: int | _dt.timedelta) -> JoinWindows:
        """These windows with another grace period."""
        return replace(self, grace_ms=_ms("after_window_end", after_window_end))

    def size(self) -> int:
        """``before + after``: the window size of the join buffers (Kafka's ``size()``)."""
        return self.before_ms + self.after_ms

    def grace_period_ms(self) -> int:
        """The grace period in milliseconds."""
        return self.grace_ms

    def lookahead(self, left: bool) -> int:
        """How far after a record of that side its window ends: ``after`` for a left record,
        ``before`` for a right one. Its window closes once stream time passes ``t +
        lookahead + grace``."""
        return self.after_ms if left else self.before_ms

    def bounds(self, t: int, left: bool) -> tuple[int, int]:
        """The times of the other side's records a record of that side at ``t`` joins with
        (inclusive; clamped at 0 as Kafka's)."""
        if left:
            return max(0, t - self.before_ms), max(0, t + self.after_ms)
        return max(0, t - self.after_ms), max(0, t + self.before_ms)

    def retention(self) -> int:
        """Retention of the join buffers: long enough for every record whose window is still
        open (``max(before, after) + grace + 1``, at least the buffers' window size)."""
        return max(
            self.buffer_window_size(), max(self.before_ms, self.after_ms, 0) + self.grace_ms + 1
        )

    def buffer_window_size(self) -> int:
        """The window size recorded for the buffers: ``size()``, at least 1."""
        return max(1, self.size())
