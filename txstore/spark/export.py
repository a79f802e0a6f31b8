"""``txstore export``: one store, read through the Spark data source, written as files.

:func:`export_store` works with any Spark session; :func:`local_session` makes the small local
one the command line uses (loopback only, no UI, the workers on this Python; the JVM's stderr
optionally sent to a file). Progress (stage and task counts, from Spark's status tracker) goes
to callbacks while the write runs. The files are written into a temporary sibling of the
destination, renamed into place at the end and removed on failure: a failed export leaves
nothing half-written behind. :func:`java_problem` tells whether Spark can start at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from txstore.errors import InvalidArgumentError
from txstore.spark import SOURCE_NAME, register

__all__ = [
    "FORMATS",
    "JAVA_HINT",
    "MODES",
    "ExportResult",
    "export_store",
    "java_problem",
    "local_session",
    "temporary_sibling",
]

#: The save modes :func:`export_store` knows: fail if the destination exists, or replace it.
MODES: Final = ("errorifexists", "overwrite")

#: What to install when Java is missing (PySpark 4 runs on Java 17 or 21).
JAVA_HINT: Final = (
    "Java 17 is needed for Spark: apt-get install openjdk-17-jre-headless (or set JAVA_HOME)"
)

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


def java_problem() -> str | None:
    """Why Spark cannot start here (no Java, or one older than 17), as one line; None if a
    Java 17+ runs. Looks where PySpark looks: ``$JAVA_HOME/bin/java``, else ``java`` on
    ``PATH``. Costs one ``java -version`` (about 0.1 s)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home!r} has no bin/java" if home else "no java on PATH"
        return f"{JAVA_HINT} ({where})"
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{JAVA_HINT} ({java} -version failed: {exc})"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if proc.returncode != 0 or found is None:
        return f"{JAVA_HINT} ({java} -version failed)"
    major = int(found.group(1))
    if major == 1:  # "1.8.0_392": Java 8
        major = int(found.group(2) or 0)
    if major < 17:
        return f"{JAVA_HINT} ({java} is Java {major})"
    return None


@contextlib.contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """File descriptor 2 sent to ``path`` (appended) for the duration: a JVM started meanwhile
    keeps it as its stderr for good."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def local_session(
    master: str = "local[*]", app_name: str = "txstore-export", *, jvm_stderr: str | None = None
) -> Any:
    """A local Spark session for the command line: loopback, no UI, workers on this Python.

    The workers import the same txstore as this process (its directory goes first on their
    ``PYTHONPATH``). ``jvm_stderr``: a file (``os.devnull`` to drop it) that receives the
    stderr of a JVM this call starts (its log lines and stack traces) instead of this
    process's stderr; an existing session is returned as it is.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    package_root = _PACKAGE_ROOT
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([package_root, *paths])
    from pyspark.sql import SparkSession

    with _stderr_to(jvm_stderr):
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


def _watch(
    spark: Any,
    progress: Callable[[str], None] | None,
    tasks: Callable[[int, int], None] | None,
    stop: threading.Event,
) -> None:
    tracker = spark.sparkContext.statusTracker()
    last = ""
    while not stop.wait(0.5 if tasks is not None else 1.0):
        parts = []
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
                parts.append(
                    f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                    + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else "")
                )
        if tasks is not None and total:
            tasks(done, total)
        line = "; ".join(parts)
        if progress is not None and line and line != last:
            progress(line)
            last = line


def temporary_sibling(dest: str) -> str:
    """A new name next to ``dest`` (same directory, so a rename moves it into place)."""
    head, tail = os.path.split(os.path.abspath(dest))
    return os.path.join(head, f".{tail}.txstore-export-{uuid.uuid4().hex[:12]}")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


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
    tasks: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Read ``store`` from ``source`` with the ``txstore`` source and write it to ``dest``.

    ``options`` are more data source options (``partitions``, ``decode``, ``snapshot``...);
    ``mode``: ``errorifexists`` (default; :class:`InvalidArgumentError` if ``dest`` exists) or
    ``overwrite`` (``dest`` is replaced once the new files are complete). Spark writes into a
    temporary sibling of ``dest`` that is renamed to ``dest`` at the end, and removed if
    anything fails. ``progress`` hears a line per change of the running stages, ``tasks`` the
    completed and total tasks of the running stages. Cost: one Spark job over the store, plus
    a count of the written files (from their footers for Parquet/ORC).
    """
    if format not in FORMATS:
        raise InvalidArgumentError(
            f"export format must be one of {', '.join(FORMATS)}, got {format!r}"
        )
    if mode not in MODES:
        raise InvalidArgumentError(f"export mode must be one of {', '.join(MODES)}, got {mode!r}")
    final = os.path.abspath(dest)
    if os.path.lexists(final) and mode != "overwrite":
        raise InvalidArgumentError(f"export destination {final!r} exists (overwrite replaces it)")
    register(spark)
    reader = spark.read.format(SOURCE_NAME)
    if store is not None:
        reader = reader.option("store", store)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    t0 = time.perf_counter()
    df = reader.load(os.path.abspath(source))
    work = temporary_sibling(final)
    stop = threading.Event()
    watcher = None
    if progress is not None or tasks is not None:
        watcher = threading.Thread(target=_watch, args=(spark, progress, tasks, stop), daemon=True)
        watcher.start()
    try:
        try:
            df.write.mode("errorifexists").format(format).save(work)
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
        rows = int(spark.read.format(format).load(work).count())
        if os.path.lexists(final):  # overwrite: the old files go only once the new are whole
            if mode != "overwrite":
                raise InvalidArgumentError(f"export destination {final!r} appeared meanwhile")
            _remove(final)
        os.rename(work, final)
    except BaseException:
        _remove(work)
        raise
    return ExportResult(rows, final, format, time.perf_counter() - t0)
