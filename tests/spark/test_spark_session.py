"""Starting Spark for txstore: Java checks, the worker Python, automatic registration, and how a
failed read reaches the user (real processes, each starting its own local Spark)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import txstore
from txstore import Serdes
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.engine.partition import Partition

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from txstore.spark.session import (
    JavaNotFoundError,
    find_java,
    log_config_file,
    worker_python,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.filterwarnings("error")


def test_find_java_names_what_is_missing(tmp_path: Path) -> None:
    assert os.path.basename(find_java()) == "java"  # this machine has Java 17+
    with pytest.raises(JavaNotFoundError, match="no java on PATH and JAVA_HOME is not set"):
        find_java({"PATH": str(tmp_path)})
    with pytest.raises(JavaNotFoundError, match="which has no bin/java"):
        find_java({"PATH": "", "JAVA_HOME": str(tmp_path / "nope")})
    old = tmp_path / "old" / "bin" / "java"
    old.parent.mkdir(parents=True)
    old.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    old.chmod(old.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(JavaNotFoundError, match="is Java 11: Spark needs Java 17"):
        find_java({"PATH": "", "JAVA_HOME": str(old.parent.parent)})
    eight = tmp_path / "bin8" / "java"
    eight.parent.mkdir()
    eight.write_text("#!/bin/sh\necho 'java version \"1.8.0_392\"' >&2\n")
    eight.chmod(old.stat().st_mode)
    with pytest.raises(JavaNotFoundError, match="is Java 8"):
        find_java({"PATH": str(eight.parent)})


def test_worker_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python("local[2]") == sys.executable
    assert worker_python("spark://host:7077") is None  # a cluster's executors: Spark's choice
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert worker_python("local[*]") == "/opt/py/bin/python"


def test_log_config_file_logs_failed_tasks_without_stack_traces() -> None:
    path = Path(log_config_file())
    text = path.read_text()
    assert "logger.executor.name = org.apache.spark.executor.Executor" in text
    assert "%m%n%ex{0}" in text and "rootLogger.level = warn" in text
    assert log_config_file() == str(path) and path.read_text() == text  # written once


def _state(root: Path) -> Path:
    for p in range(2):
        with txstore.open(root / str(p)) as db:
            db.key_value_store("users", Serdes.string(), Serdes.long()).put_all(
                (f"u{p}-{i}", i) for i in range(5)
            )
            db.commit({"users": 1})
    with Partition(root / "0") as part:  # stored bytes the long serde cannot read
        meta = {
            "kind": "key_value",
            "format": "PLAIN",
            "key_serde": "string",
            "value_serde": "long",
            "format_version": 1,
        }
        BytesKeyValueStore("bad", part, meta=meta).put(b"k", b"short")
        part.commit_stores({"bad": 1})
    return root


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON"))
    }
    env.update(PATH="/usr/bin:/bin", PYTHONPATH=str(ROOT))
    env["JAVA_HOME"] = os.environ.get("JAVA_HOME", "")
    if not env["JAVA_HOME"]:
        env["JAVA_HOME"] = str(Path(os.path.realpath(find_java())).parent.parent)
    env.update(extra)
    return env


_AUTO = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
n = spark.read.format("txstore").option("store", "users").load(sys.argv[1]).count()
print("ROWS", n, "txstore" in sys.modules)
# A session whose workers would run Spark's default python3 (PYSPARK_PYTHON unset), which
# cannot import txstore's dependencies: register() runs the sources' workers on this Python.
spark.sparkContext.pythonExec = "python3"
import txstore.spark
txstore.spark.register(spark)
meta = spark.read.format("txstore-metadata").load(sys.argv[1]).collect()  # register()'s only
print("META", [r.store for r in meta], spark.sparkContext.pythonExec)
spark.stop()
"""


def test_format_txstore_works_with_no_import_and_register_sets_the_workers(tmp_path: Path) -> None:
    """The ``pyspark_txstore`` package: Spark finds the source itself; the driver never
    imports txstore. Then ``register`` in a session whose ``pythonExec`` is ``python3``."""
    root = _state(tmp_path / "state")
    done = _run(_AUTO.replace("sys.argv[1]", repr(str(root))), _env(PYSPARK_PYTHON=sys.executable))
    assert "ROWS 10 False" in done.stdout, done.stderr[-3000:]
    assert "META ['bad', 'users'] python3" in done.stdout, done.stderr[-3000:]


_HELPER = """
import txstore.spark
spark = txstore.spark.local_session("local[1]")
df = spark.read.format("txstore").option("store", "users").load(ROOT)
print("ROWS", df.where("key = 'u1-3'").collect())
try:
    spark.read.format("txstore").option("store", "bad").load(ROOT).collect()
except Exception as exc:
    lines = str(exc).strip().splitlines()
    print("ERROR", type(exc).__name__, lines[-1])
    print("LINES", len(lines))
spark.stop()
"""


def test_local_session_runs_workers_on_this_python_and_fails_reads_briefly(
    tmp_path: Path,
) -> None:
    """Started by the venv's python by path with ``python3`` on PATH lacking txstore's
    dependencies: the workers still import txstore; a read that fails in a task raises one
    short ``PythonException`` naming the txstore error, and stderr carries no Java stack
    trace."""
    root = _state(tmp_path / "state")
    probe = subprocess.run(["python3", "-c", "import lmdb"], env=_env(), capture_output=True)
    assert probe.returncode != 0, "python3 on PATH should not be this environment"
    done = _run(_HELPER.replace("ROOT", repr(str(root))), _env())
    assert "ROWS [Row(key='u1-3', value=3, partition_id=1)]" in done.stdout, done.stderr[-3000:]
    error = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert error == [
        "ERROR PythonException txstore.errors.SerializationError: value b'short' of store "
        "'bad', partition 0 has 5 bytes; the Long serde writes 8: read it with decode=false"
    ], done.stdout
    assert "LINES 5" in done.stdout, done.stdout  # a header, the traceback's 1 frame, the error
    java_frames = [line for line in done.stderr.splitlines() if line.startswith("\tat ")]
    assert java_frames == [], done.stderr[-3000:]
