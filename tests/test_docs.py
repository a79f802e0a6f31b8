"""The documentation: every relative link resolves, and every Python example runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def page_id(p: Path) -> str:
    return str(p.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+://", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        assert (page.parent / path).exists(), f"{page_id(page)}: broken link {target}"


EXAMPLES = [page for page in PAGES if BLOCK.search(page.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", EXAMPLES, ids=page_id)
def test_python_examples_run(page: Path, tmp_path: Path) -> None:
    """A page's Python blocks run in order as one script (later blocks use what earlier ones
    made), in an empty working directory: examples use relative paths. Blocks starting with
    ``# not run:`` are skipped, with the reason in that comment."""
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    # A block that needs what this machine lacks (a Kafka broker) says so on its first line.
    code = "\n\n".join(b for b in blocks if not b.startswith("# not run:"))
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{page_id(page)} examples failed:\n{proc.stderr[-3000:]}"
