"""The demo's analytics: Spark reads a snapshot of the state directory through the txstore data
source and computes the top pages and the distribution of session lengths; a PNG chart shows
both. The same numbers are computed from the snapshot with plain Python (txstore's catalog) so
the demo can check Spark's answer."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from txstore.runtime import admin
from txstore.spark import register
from txstore.spark.export import local_session

#: Session-length buckets (minutes, upper bounds) for the distribution.
BUCKETS = (1, 5, 15, 30, 60, 120)


def bucket(minutes: float) -> str:
    for b in BUCKETS:
        if minutes < b:
            return f"< {b} min"
    return f">= {BUCKETS[-1]} min"


def bucket_order(label: str) -> int:
    for i, b in enumerate(BUCKETS):
        if label == f"< {b} min":
            return i
    return len(BUCKETS)


def spark_analytics(snapshot_dir: Path, top: int = 10) -> dict[str, Any]:
    """Top pages by views and session-length buckets, computed by Spark over the snapshot."""
    from pyspark.sql import functions as F

    spark = local_session("local[2]", "txstore-demo")
    try:
        register(spark)
        views = spark.read.format("txstore").option("store", "page-views").load(str(snapshot_dir))
        top_pages = (
            views.groupBy("key")
            .agg(F.sum("value").alias("views"), F.countDistinct("window").alias("minutes"))
            .orderBy(F.desc("views"), "key")
            .limit(top)
            .collect()
        )
        sessions = spark.read.format("txstore").option("store", "sessions").load(str(snapshot_dir))
        lengths = sessions.select(
            (
                (
                    F.unix_millis(F.col("session_window.end"))
                    - F.unix_millis(F.col("session_window.start"))
                )
                / 60000.0
            ).alias("minutes"),
            F.col("value").alias("views"),
        ).collect()
        metadata = spark.read.format("txstore-metadata").load(str(snapshot_dir)).collect()
    finally:
        spark.stop()
    dist = Counter(bucket(r["minutes"]) for r in lengths)
    return {
        "top_pages": [(r["key"], int(r["views"]), int(r["minutes"])) for r in top_pages],
        "session_buckets": sorted(dist.items(), key=lambda kv: bucket_order(kv[0])),
        "sessions": len(lengths),
        "stores": sorted({r["store"] for r in metadata}),
    }


def python_analytics(snapshot_dir: Path, top: int = 10) -> dict[str, Any]:
    """The same answers computed without Spark, from the snapshot's committed records."""
    per_page: Counter[str] = Counter()
    minutes: dict[str, set[int]] = {}
    for rec in admin.dump(snapshot_dir, "page-views"):
        page = rec["key"].key
        per_page[page] += rec["value"].value
        minutes.setdefault(page, set()).add(rec["key"].window.start)
    ranked = sorted(per_page.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    dist: Counter[str] = Counter()
    sessions = 0
    for rec in admin.dump(snapshot_dir, "sessions"):
        w = rec["key"].window
        dist[bucket((w.end - w.start) / 60000.0)] += 1
        sessions += 1
    return {
        "top_pages": [(p, n, len(minutes[p])) for p, n in ranked],
        "session_buckets": sorted(dist.items(), key=lambda kv: bucket_order(kv[0])),
        "sessions": sessions,
    }


def chart(result: dict[str, Any], path: Path) -> Path:
    """A PNG with two panels: top pages by views, and sessions per length bucket."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    pages = [p for p, _, _ in result["top_pages"]][::-1]
    views = [n for _, n, _ in result["top_pages"]][::-1]
    left.barh(pages, views, color="#3b7dd8")
    left.set_title("Top pages (views, from the page-views window store)")
    left.set_xlabel("views")
    labels = [b for b, _ in result["session_buckets"]]
    counts = [n for _, n in result["session_buckets"]]
    right.bar(labels, counts, color="#e0803a")
    right.set_title("Session lengths (from the session store)")
    right.set_ylabel("sessions")
    right.tick_params(axis="x", rotation=30)
    fig.suptitle("txstore demo: Spark over a committed snapshot")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
