"""The demo's stream-stream join: ad impressions left-joined with clicks within 10 minutes.

In the demo's page views, a view of :data:`IMPRESSION_PAGE` stands for an ad impression shown
to the user and a view of :data:`CLICK_PAGE` for a click on it. A left
:class:`~txstore.joins.StreamJoin` keyed by user (its buffers are plain window stores with
headers, the store the WindowStoreWithHeaders proposal designs for this) pairs each impression
with every click of the same user at most :data:`JOIN_WINDOW_MS` before or after it, and
reports an impression that no click joined once stream time passes its window's end plus
:data:`GRACE_MS`. Every result is counted in the key-value store ``ad-results`` (key
``user|impression time|click time`` or ``...|-`` for an unmatched impression), in the same
task commit as the join's state, so a result counted twice after a crash shows as a 2.

:func:`expected_results` computes the same results straight from the events (they arrive in
time order, so the rules reduce to: a click within the window joins; an impression no click
joined is reported once a later impression or click of its partition is past its window and
grace).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from txstore import Serdes, Stores, Task
from txstore.joins import JoinRecord, JoinWindows, StreamJoin
from txstore.joins.stores import join_store_builders
from txstore.types import ValueAndHeaders

__all__ = [
    "CLICK_PAGE",
    "IMPRESSION_PAGE",
    "RESULTS",
    "builders",
    "expected_results",
    "feed",
    "results",
]

IMPRESSION_PAGE = "/docs/page-00"
CLICK_PAGE = "/docs/page-01"
JOIN = "ad-clicks"
RESULTS = "ad-results"
JOIN_WINDOW_MS = 10 * 60_000
GRACE_MS = 60_000
WINDOWS = JoinWindows.of_time_difference_and_grace(JOIN_WINDOW_MS, GRACE_MS)

_joins: weakref.WeakKeyDictionary[Task, StreamJoin[Any, Any]] = weakref.WeakKeyDictionary()


def builders() -> list[Any]:
    """The join's stores (buffers, waiting impressions, state, outputs) and ``ad-results``."""
    return [
        *join_store_builders(JOIN, WINDOWS, "left").values(),
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store(RESULTS), Serdes.string(), Serdes.long()
        ),
    ]


def _times(
    key: Any, impression: ValueAndHeaders[Any] | None, click: ValueAndHeaders[Any] | None
) -> tuple[int, int | None]:
    assert impression is not None  # a left join reports impressions only
    return impression.value, None if click is None else click.value


def _join(task: Task) -> StreamJoin[Any, Any]:
    join = _joins.get(task)
    if join is None:
        join = _joins[task] = StreamJoin(
            task, JOIN, WINDOWS, "left", joiner=_times, open_stores=False
        )
    return join


def feed(task: Task, user: str, page: str, ts: int) -> None:
    """Feed one page view to the join (impressions and clicks only) and count its results."""
    if page == IMPRESSION_PAGE:
        side = "left"
    elif page == CLICK_PAGE:
        side = "right"
    else:
        return
    store = task.store(RESULTS)
    for out in _join(task).process([JoinRecord(side, user, ts, ts)]):
        impression, click = out.value
        key = f"{out.key}|{impression}|{'-' if click is None else click}"
        store.put(key, (store.get(key) or 0) + 1)


def results(task: Task) -> dict[str, int]:
    """What ``ad-results`` holds: result key -> times counted (1 when exactly once)."""
    with task.store(RESULTS).all() as it:
        return {kv.key: kv.value for kv in it}


def expected_results(views: Iterable[tuple[str, str, int]]) -> dict[str, int]:
    """The join's results from one partition's ``(user, page, ts)`` views, in time order."""
    impressions: list[tuple[str, int]] = []
    clicks: dict[str, list[int]] = {}
    last = -1
    for user, page, ts in views:
        if page == IMPRESSION_PAGE:
            impressions.append((user, ts))
        elif page == CLICK_PAGE:
            clicks.setdefault(user, []).append(ts)
        else:
            continue
        last = max(last, ts)  # the join's stream time: what it was fed
    out: dict[str, int] = {}
    for user, t in impressions:
        matched = [c for c in clicks.get(user, []) if abs(c - t) <= JOIN_WINDOW_MS]
        for c in matched:
            out[f"{user}|{t}|{c}"] = 1
        if not matched and last > t + JOIN_WINDOW_MS + GRACE_MS:
            out[f"{user}|{t}|-"] = 1
    return out
