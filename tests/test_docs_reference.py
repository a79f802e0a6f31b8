"""What ``help()`` and the docstrings tell a new user (issue 26): readable signatures, who
sets a RecordContext, every RestoreReport field described."""

from __future__ import annotations

import ast
import inspect
import pydoc
from pathlib import Path

import txstore
from txstore.runtime.task import RecordContext, RestoreReport, Task

ROOT = Path(__file__).resolve().parent.parent


def test_help_of_window_fetch_shows_no_placeholders() -> None:
    """help() showed fetch(a: Any = _NO, b, c, d, /, *more)."""
    text = pydoc.render_doc(txstore.WindowStore.fetch, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    assert "_NO" not in text and "fetch(self, /, *args)" in text
    assert "fetch(key, time_from, time_to)" in " ".join(text.split())
    assert str(inspect.signature(txstore.ReadOnlyWindowStore.fetch)) == "(self, /, *args)"


def test_record_context_says_the_user_sets_it() -> None:
    doc = RecordContext.__doc__ or ""
    assert "you" in doc and "task sets it" not in doc


def attribute_docstrings(path: Path, cls: str) -> dict[str, str]:
    """The attribute docstrings (a string right after an annotated field) of class ``cls``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    docs: dict[str, str] = {}
    for field, after in zip(node.body, node.body[1:], strict=False):
        named = isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
        if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            assert isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
            docs[field.target.id] = str(after.value.value)
    return docs


def test_every_restore_report_field_is_described() -> None:
    fields = {f for f in RestoreReport.__dataclass_fields__}
    docs = attribute_docstrings(ROOT / "txstore" / "runtime" / "task_support.py", "RestoreReport")
    assert set(docs) == fields and all(len(d) > 20 for d in docs.values())


def test_the_task_docstrings_do_not_send_the_reader_elsewhere() -> None:
    for name, member in [("Task", Task), *inspect.getmembers(Task)]:
        doc = (getattr(member, "__doc__", "") or "").lower()
        assert "see the module docstring" not in doc, name
