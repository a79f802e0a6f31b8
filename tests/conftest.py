"""Fixtures and options shared by every test package.

``--run-slow`` runs the tests marked ``slow`` (long stress runs, declared in pyproject.toml);
without it they are reported as skipped, with the reason. ``db`` is a writable partition in the
test's temporary directory, closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import txstore

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[txstore.Database]:
    """A writable partition directory at ``tmp_path / "p0"``."""
    with txstore.open(tmp_path / "p0") as database:
        yield database


@pytest.fixture
def repo_root() -> Path:
    """The repository's root directory (docs/, perf/, csrc/ beside tests/)."""
    return ROOT
