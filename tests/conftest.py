"""Fixtures and options shared by every test package.

``--run-slow`` runs the tests marked ``slow`` (long stress runs, declared in pyproject.toml);
without it they are reported as skipped, with the reason. ``db`` is a writable partition in the
test's temporary directory, closed after the test. Closing with uncommitted writes is not
an error in the tests (see ``discarding_at_close_is_expected``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import txstore
from txstore.errors import UncommittedWritesWarning

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


@pytest.fixture(autouse=True)
def discarding_at_close_is_expected() -> None:
    """Closing with uncommitted writes discards them (Kafka's semantics) with an
    UncommittedWritesWarning; many tests close so on purpose (a reopen keeps committed state
    only), and some modules mark every warning an error. Tests of the warning itself use
    ``pytest.warns``, which sees it regardless (tests/runtime/test_database_close.py)."""
    warnings.filterwarnings("ignore", category=UncommittedWritesWarning)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[txstore.Database]:
    """A writable partition directory at ``tmp_path / "p0"``."""
    with txstore.open(tmp_path / "p0") as database:
        yield database


@pytest.fixture
def repo_root() -> Path:
    """The repository's root directory (docs/, perf/, csrc/ beside tests/)."""
    return ROOT
