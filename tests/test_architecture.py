"""The house rules of ``txstore/``, checked on the source (docs/architecture.md states them).

* imports point down the layers only (a layer may import the layers below it, never one above
  or beside it), and there is no import circle, counting every import: module level, inside
  functions and under ``TYPE_CHECKING``;
* no function-level import of a txstore module hides a dependency, except in the command
  line (``txstore/cli/``, for start-up time) and of ``txstore.spark`` (an optional extra);
* no module is much past 600 lines (650 is the limit);
* every package's ``__init__`` says what it owns and what it may import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "txstore"

#: Layers, bottom first. A module belongs to the longest prefix that names it.
LAYERS: list[tuple[str, ...]] = [
    (
        "txstore.errors",
        "txstore.types",
        "txstore.faults",
        "txstore.version",
        "txstore.codecs",
        "txstore._codecs",
        "txstore._checksums",
        "txstore._fastpaths",
    ),
    ("txstore.engine",),
    ("txstore.bytestores",),
    ("txstore.changelog",),
    ("txstore.stores",),
    ("txstore.runtime",),
    ("txstore",),  # the public API: re-exports of the layers up to the runtime
    ("txstore.joins",),
    ("txstore.queries", "txstore.spark", "txstore.crashtest"),
    ("txstore.queries.http",),
    ("txstore.demo",),
    ("txstore.cli",),
    ("txstore.__main__",),
]
#: Packages of one layer that must not import each other.
SIBLINGS = {"txstore.queries", "txstore.spark", "txstore.crashtest"}
LAZY_ALLOWED_IN = ("txstore.cli",)
LAZY_ALLOWED_TARGETS = ("txstore.spark",)
MAX_LINES = 650


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
#: Compiled modules (the cffi extension) count as modules of their layer.
COMPILED = ("txstore._codecs", "txstore._checksums", "txstore._fastpaths")


def owner(module: str) -> tuple[int, str]:
    """(layer index, the prefix that placed ``module`` there)."""
    best: tuple[int, str] = (-1, "")
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best[1]):
                best = (index, prefix)
    assert best[0] >= 0, f"{module} belongs to no layer: add it to LAYERS"
    return best


def resolve(name: str) -> str | None:
    """The txstore module an imported name refers to (a module, or a name in one)."""
    while name and name not in MODULES and name not in COMPILED:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name or None


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, lazy) for every import of a txstore module in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            line = getattr(child, "lineno", 0)
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                names = [f"{base}.{a.name}" for a in child.names] + [base]
            for name in names:
                target = resolve(name)
                if target is not None and target != module:
                    found.append((target, line, lazy))
                    break
            visit(child, inner)

    visit(tree, False)
    return found


def graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module in MODULES:
        # A package's __init__ re-exporting its own children is not a dependency of design.
        out[module] = {
            t for t, _, _ in imports(module) if not t.startswith(module + ".") and t not in COMPILED
        }
    return out


def test_every_import_points_down_the_layers() -> None:
    wrong = []
    for module in MODULES:
        layer, prefix = owner(module)
        for target, line, _ in imports(module):
            if target.startswith(module + ".") or target in COMPILED:
                continue
            t_layer, t_prefix = owner(target)
            beside = t_layer == layer and t_prefix != prefix and {prefix, t_prefix} <= SIBLINGS
            if t_layer > layer or beside:
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "imports that climb or cross the layers:\n" + "\n".join(wrong)


def test_no_import_circle() -> None:
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in g:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_no_lazy_import_of_txstore_modules() -> None:
    lazy = [
        f"{MODULES[m].relative_to(ROOT)}:{line} imports {target} inside a function"
        for m in MODULES
        if not m.startswith(LAZY_ALLOWED_IN)
        for target, line, is_lazy in imports(m)
        if is_lazy and not target.startswith(LAZY_ALLOWED_TARGETS)
    ]
    assert not lazy, "\n".join(lazy)


def test_no_module_far_past_600_lines() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for p in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines (split them by job): {big}"


@pytest.mark.parametrize(
    "package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py" and m != "txstore")
)
def test_each_package_says_what_it_owns_and_may_import(package: str) -> None:
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text()))
    assert doc, f"{package} has no docstring"
    assert "import" in doc, f"{package}'s docstring does not say what it may import"


def test_the_rules_catch_a_climbing_import() -> None:
    """The checks above are not vacuous: an engine module importing the runtime is caught."""
    layer, _ = owner("txstore.engine.partition")
    assert owner("txstore.runtime.task")[0] > layer
    assert owner("txstore.queries.http.server")[0] > owner("txstore.queries.local")[0]
    assert resolve("txstore.runtime.task.Task") == "txstore.runtime.task"


def test_the_architecture_page_names_only_modules_that_exist() -> None:
    """docs/architecture.md must match the code: every module path it names exists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(
        re.findall(r"\b((?:engine|bytestores|changelog|stores|runtime|queries|cli)/\w+\.py)", text)
    )
    missing = sorted(p for p in named if not (PACKAGE / p).is_file())
    assert named and not missing, f"docs/architecture.md names modules that do not exist: {missing}"
    dotted = set(re.findall(r"`(txstore(?:\.\w+)+)`", text))
    unknown = sorted(d for d in dotted if resolve(d) not in (d, d.rsplit(".", 1)[0]))
    assert not unknown, f"docs/architecture.md names unknown modules: {unknown}"
