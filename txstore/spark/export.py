"""``txstore export``: one store, read through the Spark data source, written as files.

:func:`export_store` works with any Spark session; :func:`local_session` makes the small local
one the command line uses (loopback only, no UI, the workers on this Python). Progress (stage
and task counts, from Spark's status tracker) goes to a callback while the write runs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from txstore.errors import InvalidArgumentError
from txstore.spark import SOURCE_NAME, register

__all__ = ["FORMATS", "ExportResult", "export_store", "local_session"]

#: Output formats: Spark's own file formats that hold every column type of a store.
FORMATS: Final = ("parquet", "orc", "json")

#: The directory holding the ``txstore`` package (``txstore/spark/export.py``, three levels
#: up), which the Spark workers need on their ``PYTHONPATH``.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_store` wrote."""

    rows: int
    dest: str
    format: str
    seconds: float


def local_session(master: str = "local[*]", app_name: str = "txstore-export") -> Any:
    """A local Spark session for the command line: loopback, no UI, workers on this Python.

    The workers import the same txstore as this process (its directory goes first on their
    ``PYTHONPATH``).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    package_root = _PACKAGE_ROOT
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([package_root, *paths])
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _watch(spark: Any, progress: Callable[[str], None], stop: threading.Event) -> None:
    tracker = spark.sparkContext.statusTracker()
    last = ""
    while not stop.wait(1.0):
        parts = []
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(
                    f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                    + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else "")
                )
        line = "; ".join(parts)
        if line and line != last:
            progress(line)
            last = line


def export_store(
    spark: Any,
    source: str,
    dest: str,
    *,
    store: str | None,
    format: str = "parquet",
    mode: str = "errorifexists",
    options: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExportResult:
    """Read ``store`` from ``source`` with the ``txstore`` source and write it to ``dest``.

    ``options`` are more data source options (``partitions``, ``decode``, ``snapshot``...);
    ``mode`` is Spark's save mode (``errorifexists``, ``overwrite``...). Cost: one Spark job
    over the store, plus a count of the written files (from their footers for Parquet/ORC).
    """
    if format not in FORMATS:
        raise InvalidArgumentError(
            f"export format must be one of {', '.join(FORMATS)}, got {format!r}"
        )
    register(spark)
    reader = spark.read.format(SOURCE_NAME)
    if store is not None:
        reader = reader.option("store", store)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    t0 = time.perf_counter()
    df = reader.load(os.path.abspath(source))
    stop = threading.Event()
    watcher = None
    if progress is not None:
        watcher = threading.Thread(target=_watch, args=(spark, progress, stop), daemon=True)
        watcher.start()
    try:
        df.write.mode(mode).format(format).save(os.path.abspath(dest))
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    rows = int(spark.read.format(format).load(os.path.abspath(dest)).count())
    return ExportResult(rows, os.path.abspath(dest), format, time.perf_counter() - t0)
