"""The documentation site (``make docs``) and the docstrings its API reference is made of.

* ``mkdocs build --strict`` succeeds (no broken link, anchor or unknown page; mkdocstrings loads
  and renders every reference page), and every name ``txstore`` exports has an entry in the
  generated reference;
* every public name of ``txstore``, ``txstore.queries`` and ``txstore.stores`` (their
  ``__all__``) has a docstring, and so does every public method and property of those classes,
  inherited ones included (the reference shows them).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import txstore
import txstore.queries
import txstore.stores

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"
PUBLIC_MODULES: list[ModuleType] = [txstore, txstore.queries, txstore.stores]

#: Public names whose docstring is missing in modules this test's authors do not own: each
#: entry says which file must get it, and who should write it. Remove an entry when it is
#: written (the test fails on an entry that is no longer needed, so the list only shrinks).
ALLOWED_MISSING: dict[str, str] = {}


def _own_doc(obj: Any) -> str:
    """``obj``'s docstring, without the ones Python writes itself (a dataclass's or a named
    tuple's signature, ``Alias for field number 0``)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    doc = (doc or "").strip()
    if inspect.isclass(obj) and (
        re.fullmatch(rf"{re.escape(obj.__name__)}\(.*\)", doc, re.S) or doc == "An enumeration."
    ):
        return ""  # dataclasses.dataclass, typing.NamedTuple or enum.Enum made it up
    return doc


def _members(cls: type, package: str = "txstore") -> Iterator[tuple[str, Any]]:
    """The public methods and properties of ``cls`` defined in ``package`` (inherited too)."""
    names = sorted({name for base in cls.__mro__ for name in vars(base)})
    for name in names:
        if name.startswith("_"):
            continue
        owner = next(base for base in cls.__mro__ if name in vars(base))
        if not owner.__module__.startswith(package):
            continue  # object's, Exception's, Enum's, NamedTuple's...
        value = vars(owner)[name]
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property) or inspect.isfunction(value):
            yield name, value


def missing_docstrings() -> list[str]:
    """Every public name (and method, property) of the public modules without a docstring."""
    missing: set[str] = set()
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            qualified = f"{module.__name__}.{name}"
            if inspect.isclass(obj):
                if not _own_doc(obj):
                    missing.add(qualified)
                for member, value in _members(obj):
                    if not _own_doc(value):
                        missing.add(f"{qualified}.{member}")
            elif inspect.isfunction(obj) and not _own_doc(obj):
                missing.add(qualified)
    return sorted(missing)


def test_the_docstring_check_sees_what_python_writes_itself() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    class Documented:
        """A class with a docstring."""

        @property
        def size(self) -> int:
            return 0

    assert _own_doc(Point) == ""
    assert _own_doc(Documented) == "A class with a docstring."
    undocumented = [name for name, value in _members(Documented, "tests") if not _own_doc(value)]
    assert undocumented == ["size"]


def test_every_public_name_has_a_docstring() -> None:
    missing = missing_docstrings()
    unexpected = [name for name in missing if name not in ALLOWED_MISSING]
    assert not unexpected, (
        f"{len(unexpected)} public names have no docstring (say what each does, its cost, its "
        "errors; an example where it helps):\n  " + "\n  ".join(unexpected)
    )
    written = sorted(set(ALLOWED_MISSING) - set(missing))
    assert not written, f"documented now, remove from ALLOWED_MISSING: {written}"


def test_the_site_builds_strictly_with_every_exported_name(tmp_path: Path) -> None:
    assert MKDOCS.exists(), "mkdocs is not installed: pip install -e '.[docs]' (make test does)"
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    pages = sorted((site / "reference").rglob("*.html"))
    assert pages, "no API reference pages were generated"
    html = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    anchors = set(re.findall(r'\bid="([^"]+)"', html))
    absent = []
    for name in txstore.__all__:
        obj = getattr(txstore, name)
        paths = {f"txstore.{name}"}
        if inspect.isclass(obj) or inspect.isfunction(obj):
            paths.add(f"{obj.__module__}.{obj.__qualname__}")
        if not paths & anchors:
            absent.append(name)
    assert not absent, f"exported from txstore but not in the API reference: {absent}"
    # The reST roles of the docstrings were turned into links or code, not printed as such.
    leftover = sorted(set(re.findall(r":(?:class|meth|func|attr|mod|data):`", html)))
    assert not leftover, f"reST roles left in the reference: {leftover}"
    # Opened from disk, the site's links work: pages are files (use_directory_urls: false),
    # not folders a browser lists.
    assert (site / "reference" / "runtime.html").is_file()
    assert not (site / "reference" / "runtime").exists()
    # No page of the reference is one huge page (Stores and builders was 500 KB).
    sizes = {p.name: p.stat().st_size for p in pages}
    assert max(sizes.values()) < 450_000, sizes
    # What a Task's user needs is on the page, not in "the module docstring".
    runtime = (site / "reference" / "runtime.html").read_text(encoding="utf-8")
    task = runtime[
        runtime.index('id="txstore.Task"') : runtime.index('id="txstore.runtime.snapshot')
    ]
    assert "module docstring" not in re.sub(r"<[^>]+>", "", task)
    for attr in ("path", "db", "context", "changelog", "open_changelog"):
        assert f"txstore.Task.{attr}" in anchors, attr
    for field in ("unclean_shutdown", "discarded", "rolled_back", "restored"):
        assert f"txstore.runtime.task.RestoreReport.{field}" in anchors, field
    # A typed store is made by a builder: its internal constructor is not shown as public.
    kv = re.sub(r"<[^>]+>", "", (site / "reference" / "kv-stores.html").read_text())
    heading = kv[kv.index("txstore.KeyValueStore") :][:400]
    assert "key_serde" not in heading and "inner" not in heading, heading
