"""Starting a local Spark session that reads txstore, and the Python Spark's workers run.

:func:`local_session` is the one-call start for a laptop or a test: it checks Java first
(:class:`JavaNotFoundError` with what to install, instead of PySpark's ``JAVA_GATEWAY_EXITED``),
makes Spark's Python workers run *this* interpreter (``PYSPARK_PYTHON = sys.executable``: the
workers then import the txstore and pyarrow of this environment, also when it was never
activated), binds to the loopback interface, enables Python data source filter pushdown and
keeps a failed task's Java stack trace off the console (the error itself reaches the caller,
as a ``PythonException`` whose last line names the txstore error class).

Workers and registration in an existing session: see :func:`worker_python` and
:func:`txstore.spark.register`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from txstore.errors import TxStoreError

__all__ = ["JavaNotFoundError", "find_java", "local_session", "log_config_file", "worker_python"]

#: The oldest Java that Spark 4 runs on.
MIN_JAVA: Final = 17

#: Executor and task-set failures are logged without the Java stack trace of the exception
#: (a Python error carries its own short traceback to the caller); everything else as Spark's
#: default profile logs it.
_LOG4J2: Final = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.short.type = Console
appender.short.name = short
appender.short.target = SYSTEM_ERR
appender.short.layout.type = PatternLayout
appender.short.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex{0}
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.additivity = false
logger.executor.appenderRef.short.ref = short
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.additivity = false
logger.tasks.appenderRef.short.ref = short
logger.tasks.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


class JavaNotFoundError(TxStoreError, RuntimeError):
    """No Java, or a Java older than Spark needs, where Spark looks for it (``JAVA_HOME``,
    else ``java`` on ``PATH``)."""


def find_java(environ: Mapping[str, str] | None = None) -> str:
    """The ``java`` executable Spark would start, checked to be Java 17 or newer.

    Looks where ``spark-submit`` does: ``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``.
    Runs ``java -version`` once (about 0.1 s). Raises :class:`JavaNotFoundError`.
    """
    env = dict(os.environ if environ is None else environ)
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise JavaNotFoundError(
                f"JAVA_HOME is {home!r}, which has no bin/java: Spark needs Java {MIN_JAVA}+ "
                "(set JAVA_HOME to a JDK, or unset it to use the java on PATH)"
            )
    else:
        found = shutil.which("java", path=env.get("PATH", ""))
        if found is None:
            raise JavaNotFoundError(
                f"no java on PATH and JAVA_HOME is not set: Spark needs Java {MIN_JAVA}+ "
                "(for example apt install openjdk-17-jre-headless, or set JAVA_HOME)"
            )
        java = found
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, env=env, check=False
        )
    except OSError as exc:
        raise JavaNotFoundError(f"{java!r} does not run: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        raise JavaNotFoundError(f"{java} -version printed no version: {out.stderr.strip()!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise JavaNotFoundError(
            f"{java} is Java {major}: Spark needs Java {MIN_JAVA}+ (set JAVA_HOME to a newer JDK)"
        )
    return java


def worker_python(master: str) -> str | None:
    """The Python that Spark's workers should run for a session on ``master``: this
    interpreter for a local master (same machine, same files) unless ``PYSPARK_PYTHON`` says
    otherwise; None (Spark's choice, ``PYSPARK_PYTHON`` or ``python3``) on a cluster, whose
    executors may not have this path."""
    chosen = os.environ.get("PYSPARK_PYTHON")
    if chosen:
        return chosen
    return sys.executable if master.startswith("local") else None


def log_config_file() -> str:
    """A log4j2 properties file with Spark's default logging, except that a failed task is
    logged in one line, without its Java stack trace (written once to the temporary directory).

    :func:`local_session` uses it; for a session started another way, pass it to the driver's
    JVM: ``spark-submit --driver-java-options -Dlog4j2.configurationFile=<file>``.
    """
    path = Path(tempfile.gettempdir()) / f"txstore-spark-log4j2-{os.getuid()}.properties"
    if not path.is_file() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        os.replace(tmp, path)
    return str(path)


def local_session(
    master: str = "local[2]",
    *,
    app_name: str = "txstore",
    conf: Mapping[str, str] | None = None,
    quiet_task_errors: bool = True,
) -> Any:
    """Start (or get) a local ``SparkSession`` that reads txstore (see the module docstring).

    ``conf`` is applied last (it may override anything set here). With ``quiet_task_errors``,
    a failed task logs one line instead of its Java stack trace (this applies when this call
    starts the JVM). Raises :class:`JavaNotFoundError` before starting anything without Java.
    """
    find_java()
    python = worker_python(master)
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python  # read by SparkContext and by the JVM it starts
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
    )
    if quiet_task_errors:
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config_file()}"
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from txstore.spark import register

    register(spark)
    return spark
