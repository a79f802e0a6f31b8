"""The pages a newcomer reads first (issue 26): the README does not send a plain store into a
Task nor cite issue numbers; a "coming from" page states the first differences; the names are
listed once; the CLI page documents both JSON forms."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_the_readme_cites_no_issue_numbers_and_keeps_plain_stores_out_of_tasks() -> None:
    readme = read("README.md")
    status = readme[readme.index("## Status") : readme.index("## Layout")]
    assert not re.search(r"issue \d+", status)
    assert "directory of its own" in readme and "refuses to take it over" in readme


def test_a_coming_from_page_states_the_first_differences() -> None:
    page = read("docs/coming-from.md")
    for heading in ("## From sqlite3", "## From py-lmdb", "## From Kafka Streams"):
        assert heading in page
    for difference in ("commit(offset)", "closing discards", "stores live in a partition"):
        assert difference in page, difference
    nav = read("mkdocs.yml").split("\nnav:", 1)[1].split("\n\n", 1)[0]
    assert ": coming-from.md" in nav
    assert "(coming-from.md)" in read("docs/index.md")
    assert "(docs/coming-from.md)" in read("README.md")


def test_one_name_for_each_thing_is_listed_in_concepts() -> None:
    section = read("docs/concepts.md").split("## One thing, one name", 1)[1]
    names = ["`partition_id`", "lowercase hex", '{"key": str, "value": hex or null}']
    names += ["`--json-lines`", "`task.changelog(name)`", "`StoreStack.unlogged_store`"]
    for name in names:
        assert name in section, name


def test_the_cli_page_documents_both_json_forms_and_reading_unwritable_state() -> None:
    cli = read("docs/cli.md")
    assert "`--json-lines`" in cli and "python -m json.tool" in cli
    assert "## Reading state you cannot write" in cli
