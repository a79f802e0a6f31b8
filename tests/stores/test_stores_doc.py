"""docs/stores.md lists every store: each ``Stores`` supplier and builder by name, and the
table "Every store, with its Kafka name" has one row per kind and format a store can have."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from txstore import Stores
from txstore.bytestores.adapters import UPGRADE_ORDER

DOC = Path(__file__).resolve().parents[2] / "docs" / "stores.md"


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_every_stores_factory_is_named_in_the_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    names = [n for n, _ in inspect.getmembers(Stores, inspect.isfunction) if not n.startswith("_")]
    assert len(names) > 30
    missing = [n for n in names if f"`{n}" not in text and f" {n}(" not in text]
    assert not missing, f"docs/stores.md does not name {missing}"


def test_the_kafka_name_table_has_a_row_per_kind_and_format() -> None:
    table = _section(DOC.read_text(encoding="utf-8"), "Every store, with its Kafka name")
    rows = re.findall(r"^\| (key-value|window|session) \| `(\w+)` \|(.*)\|$", table, re.M)
    got = sorted((kind, fmt) for kind, fmt, _ in rows)
    kinds = {"key_value": "key-value", "window": "window", "session": "session"}
    want = sorted((kinds[k], f.name) for k, order in UPGRADE_ORDER.items() for f in order)
    assert got == want
    for kind, fmt, rest in rows:
        cells = [c.strip() for c in rest.split("|")]
        supplier, builder, values, kafka = cells
        assert supplier.strip("`") in dir(Stores), (kind, fmt, supplier)
        assert builder.strip("`") in dir(Stores), (kind, fmt, builder)
        assert values and kafka, (kind, fmt)
