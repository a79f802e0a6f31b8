"""The documentation: every relative link resolves, every Python example runs, and every
``print(...)  # -> output`` line in an example prints exactly that output."""

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

#: ``print(args)  # -> expected``: a documented output, checked when the example runs. A plain
#: ``# comment`` after a print stays prose (for outputs that vary, such as timings).
CHECKED = re.compile(
    r"^(?P<indent>[ \t]*)print\((?P<args>.*)\)[ \t]*# -> (?P<out>.*?)[ \t]*$", re.M
)
EXPECT = """
def _expect_print(source, expected, *args):
    got = " ".join(map(str, args))
    print(got)
    if got != expected:
        raise AssertionError(f"print({source}): documented {expected!r}, printed {got!r}")
"""


def checked(block: str) -> str:
    """``block`` with each ``print(args)  # -> out`` line turned into a check of its output."""

    def check(m: re.Match[str]) -> str:
        return f"{m['indent']}_expect_print({m['args']!r}, {m['out']!r}, {m['args']})"

    return CHECKED.sub(check, block)


def run_blocks(blocks: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the blocks in order as one script in ``tmp_path``."""
    script = tmp_path / "example.py"
    script.write_text(EXPECT + "\n\n".join(checked(b) for b in blocks), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_documented_output_that_differs_fails_the_example(tmp_path: Path) -> None:
    ok = run_blocks(["x = [1, 2]\nprint(len(x), x)  # -> 2 [1, 2]\n"], tmp_path)
    assert ok.returncode == 0 and ok.stdout == "2 [1, 2]\n"
    bad = run_blocks(["for i in (3, 4):\n    print(i)  # -> 3\n"], tmp_path)
    assert bad.returncode == 1
    assert "print(i): documented '3', printed '4'" in bad.stderr


@pytest.mark.parametrize("page", EXAMPLES, ids=page_id)
def test_python_examples_run(page: Path, tmp_path: Path) -> None:
    """A page's Python blocks run in order as one script (later blocks use what earlier ones
    made), in an empty working directory: examples use relative paths. Blocks starting with
    ``# not run:`` are skipped, with the reason in that comment."""
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    # A block that needs what this machine lacks (a Kafka broker) says so on its first line.
    proc = run_blocks([b for b in blocks if not b.startswith("# not run:")], tmp_path)
    assert proc.returncode == 0, f"{page_id(page)} examples failed:\n{proc.stderr[-3000:]}"
