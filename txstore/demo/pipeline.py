"""The demo's stream processor: page views in, three stores out, one task per partition.

Input: page-view events ``{"user", "page", "ts", "source"}``, partitioned by user with Kafka's
default partitioner and written as one JSON-lines "input topic" file per partition; an event's
input position is its line number. Each worker process owns one partition (a
:class:`~txstore.runtime.task.Task`) and keeps:

* ``user-totals`` - timestamped key-value store with headers: views per user, with the time
  and source of the last view (``ValueTimestampHeaders``);
* ``page-views`` - plain window store with headers: views per page per minute
  (``ValueAndHeaders``, the WindowStoreWithHeaders format);
* ``sessions`` - session store: views per user session, a session closing after
  :data:`INACTIVITY_GAP_MS` without views (Kafka's session windows: a view merges every
  session within the gap);
* a stream-stream join of ad impressions and clicks (:mod:`txstore.demo.adjoin`): a left join
  within 10 minutes whose results are counted in ``ad-results``.

:func:`expected` computes the same aggregates directly from the events, independently of any
store, so the demo can check that the stores are exactly right after a crash.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txstore.codecs import partition_for_key
from txstore.demo import adjoin
from txstore.runtime.statedir import partition_path
from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes
from txstore.types import (
    Headers,
    SessionWindow,
    ValueAndHeaders,
    ValueTimestampHeaders,
    Windowed,
)

WINDOW_MS = 60_000
RETENTION_MS = 24 * 3600 * 1000
INACTIVITY_GAP_MS = 5 * 60_000
COMMIT_EVERY = 2_000
START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z


@dataclass(frozen=True)
class Event:
    user: str
    page: str
    ts: int
    source: str


def partition_of(user: str, partitions: int) -> int:
    """The input partition of a user's events: Kafka's default partitioner on the key."""
    return partition_for_key(user.encode(), partitions)


def events(n: int, seed: int = 7) -> list[Event]:
    """``n`` page views by 300 users over 60 pages (a few pages and users much more active),
    in event-time order (every timestamp distinct)."""
    rng = random.Random(seed)
    users = [f"user-{i:03d}" for i in range(300)]
    pages = [f"/docs/page-{i:02d}" for i in range(60)]
    user_weights = [1.0 / (1 + i) ** 0.8 for i in range(len(users))]
    page_weights = [1.0 / (1 + i) ** 1.1 for i in range(len(pages))]
    out: list[Event] = []
    ts = START_MS
    for _ in range(n):
        ts += rng.choice((50, 200, 500, 1_000, 3_000))
        user = rng.choices(users, user_weights)[0]
        out.append(Event(user, rng.choices(pages, page_weights)[0], ts, rng.choice(("web", "app"))))
    return out


def by_partition(all_events: list[Event], partitions: int) -> list[list[Event]]:
    """The events of each partition (Kafka's default partitioner on the user), in order."""
    split: list[list[Event]] = [[] for _ in range(partitions)]
    for e in all_events:
        split[partition_of(e.user, partitions)].append(e)
    return split


def generate(n: int, partitions: int, out_dir: Path, seed: int = 7) -> list[list[Event]]:
    """:func:`events` split into per-partition input files ``<out_dir>/input-<p>.jsonl``."""
    split = by_partition(events(n, seed), partitions)
    out_dir.mkdir(parents=True, exist_ok=True)
    for p, part in enumerate(split):
        with open(out_dir / f"input-{p}.jsonl", "w", encoding="utf-8") as f:
            for e in part:
                f.write(json.dumps(e.__dict__) + "\n")
    return split


def read_input(path: Path) -> list[Event]:
    with open(path, encoding="utf-8") as f:
        return [Event(**json.loads(line)) for line in f]


def builders() -> list[Any]:
    """The builders of the demo's stores: its three aggregates, then the join's."""
    return [*aggregate_builders(), *adjoin.builders()]


def aggregate_builders() -> list[Any]:
    """The builders of the demo's three aggregates."""
    return [
        Stores.timestamped_key_value_store_with_headers_builder(
            Stores.persistent_timestamped_key_value_store_with_headers("user-totals"),
            Serdes.string(),
            Serdes.long(),
        ),
        Stores.window_store_with_headers_builder(
            Stores.persistent_window_store_with_headers(
                "page-views", RETENTION_MS, WINDOW_MS, False
            ),
            Serdes.string(),
            Serdes.long(),
        ),
        Stores.session_store_builder(
            Stores.persistent_session_store("sessions", RETENTION_MS),
            Serdes.string(),
            Serdes.long(),
        ),
    ]


def open_task(state_dir: Path, partition: int) -> Task:
    """The task of ``partition`` with the demo's stores."""
    task = Task(partition_path(state_dir, partition), overlay_budget_bytes=8 * 2**20)
    for builder in builders():
        builder.build(task.db)
    return task


def process(task: Task, e: Event) -> None:
    """Apply one page view to the three stores (read-modify-write, as a DSL aggregation)."""
    headers = Headers([("source", e.source.encode())])
    task.context.timestamp = e.ts
    totals = task.store("user-totals")
    old = totals.get(e.user)
    totals.put(e.user, ValueTimestampHeaders((old.value if old else 0) + 1, e.ts, headers))
    start = e.ts // WINDOW_MS * WINDOW_MS
    views = task.store("page-views")
    cur = views.fetch(e.page, start)
    views.put(e.page, ValueAndHeaders((cur.value if cur else 0) + 1, headers), start)
    sessions = task.store("sessions")
    lo, hi, count = e.ts, e.ts, 1
    with sessions.find_sessions(e.user, e.ts - INACTIVITY_GAP_MS, e.ts + INACTIVITY_GAP_MS) as it:
        merged = list(it)
    for kv in merged:
        lo, hi = min(lo, kv.key.window.start), max(hi, kv.key.window.end)
        count += kv.value
        sessions.remove(kv.key)
    sessions.put(Windowed(e.user, SessionWindow(lo, hi)), count)
    adjoin.feed(task, e.user, e.page, e.ts)


def run_worker(
    state_dir: Path,
    partition: int,
    input_dir: Path,
    pace_ms: float = 0.0,
    every: int = COMMIT_EVERY,
) -> None:
    """Process partition ``partition`` from its committed input position to the end of its
    input, committing every ``every`` events (``pace_ms`` sleeps per batch, so a
    demo can kill a worker mid-stream)."""
    events = read_input(input_dir / f"input-{partition}.jsonl")
    with open_task(state_dir, partition) as task:
        report = task.initialize()
        print(
            json.dumps(
                {
                    "event": "initialized",
                    "seconds": report.seconds,
                    "restored": report.restored,
                    "rolled_back": report.rolled_back,
                    "position": task.input_position or 0,
                }
            ),
            flush=True,
        )
        pos = task.input_position or 0
        while pos < len(events):
            end = min(len(events), pos + every)
            for e in events[pos:end]:
                process(task, e)
            task.commit(end)
            pos = end
            print(json.dumps({"event": "committed", "position": pos}), flush=True)
            if pace_ms:
                time.sleep(pace_ms / 1000)


def sessionize(times: list[int]) -> list[tuple[int, int, int]]:
    """Sessions ``(start, end, views)`` of one user's view times (sorted), gap-merged."""
    out: list[tuple[int, int, int]] = []
    for t in times:
        if out and t - out[-1][1] <= INACTIVITY_GAP_MS:
            s, _, n = out[-1]
            out[-1] = (s, t, n + 1)
        else:
            out.append((t, t, 1))
    return out


def expected(events: list[Event]) -> dict[str, Any]:
    """The three stores' contents computed straight from the events of one partition."""
    totals: dict[str, tuple[int, int, str]] = {}
    views: dict[tuple[str, int], tuple[int, str]] = {}
    times: dict[str, list[int]] = defaultdict(list)
    for e in events:
        n = totals.get(e.user, (0, 0, ""))[0]
        totals[e.user] = (n + 1, e.ts, e.source)
        key = (e.page, e.ts // WINDOW_MS * WINDOW_MS)
        views[key] = (views.get(key, (0, ""))[0] + 1, e.source)
        times[e.user].append(e.ts)
    sessions = {(u, s, end): n for u, ts in times.items() for s, end, n in sessionize(sorted(ts))}
    ads = adjoin.expected_results((e.user, e.page, e.ts) for e in events)
    return {"user-totals": totals, "page-views": views, "sessions": sessions, "ad-results": ads}


def actual(task: Task) -> dict[str, Any]:
    """The same shape as :func:`expected`, read from a task's stores."""
    totals = {}
    with task.store("user-totals").all() as it:
        for kv in it:
            v = kv.value
            totals[kv.key] = (
                v.value,
                v.timestamp,
                (v.headers.last_header("source") or b"").decode(),
            )
    views = {}
    with task.store("page-views").all() as it:
        for kv in it:
            source = (kv.value.headers.last_header("source") or b"").decode()
            views[(kv.key.key, kv.key.window.start)] = (kv.value.value, source)
    sessions = {}
    with task.store("sessions").fetch(None, None) as it:
        for kv in it:
            sessions[(kv.key.key, kv.key.window.start, kv.key.window.end)] = kv.value
    ads = adjoin.results(task)
    return {"user-totals": totals, "page-views": views, "sessions": sessions, "ad-results": ads}
