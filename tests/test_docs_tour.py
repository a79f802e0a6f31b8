"""The tour runs twice in a row, from any directory, with the venv's python not activated: it
writes only into a new temporary directory of its own (it used relative paths, and its second
run failed with OffsetError). Its Spark step runs in tests/test_docs.py; here the steps before
it (and after it: writing, the change feed), which need no Spark session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_docs import BLOCK, EXPECT, ROOT, checked


def test_the_tour_runs_twice_from_any_directory_without_activation(tmp_path: Path) -> None:
    blocks = BLOCK.findall((ROOT / "docs" / "tour.md").read_text(encoding="utf-8"))
    first_spark = next(i for i, b in enumerate(blocks) if "pyspark" in b)
    local = blocks[:first_spark]  # the steps before Spark's (the later ones use its session)
    assert len(local) == 4 and not any("spark" in b for b in local)
    script = tmp_path / "tour.py"
    script.write_text(EXPECT + "\n\n".join(checked(b) for b in local), encoding="utf-8")
    venv_bin = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON")}
    env.update(PATH=path, PYTHONPATH=str(ROOT))
    for run in ("first", "second"):
        cwd = tmp_path / run
        cwd.mkdir()
        proc = subprocess.run(
            [sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, f"{run} run:\n{proc.stderr[-3000:]}"
        assert "[('/home', 3)]" in proc.stdout and "3 0" in proc.stdout
        assert list(cwd.iterdir()) == []  # nothing written where it ran
