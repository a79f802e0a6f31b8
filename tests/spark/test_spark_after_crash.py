"""The Spark reader after a crash serves what was committed (docs/recovery.md, "What a reader
sees"): a real task child SIGKILLed between its changelog and store commits leaves stores one
commit behind; Spark reads the rows a restarted task serves, and no file changes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests._children import run_child
from tests._task_child import model, open_task, state
from tests.runtime.test_committed_readers import files_of


def test_spark_reads_the_commit_the_stores_lack(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "p0"
    assert run_child("_task_child.py", path, 100, 10, "task.after_changelog_commit=3") < 0
    shutil.copytree(path, tmp_path / "copy")
    with open_task(str(tmp_path / "copy")) as task:
        task.initialize()
        expected, position = state(task)["counts"], task.input_position
    assert position == 30 and expected == model(30)["counts"]
    before = files_of(path)
    rows = spark.read.format("txstore").option("store", "counts").load(str(path)).collect()
    assert {r["key"]: r["value"] for r in rows} == expected
    assert files_of(path) == before
