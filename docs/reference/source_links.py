"""An MkDocs hook: a link from a page to a file of the repository outside ``docs/`` (such as
``../txstore/runtime/statedir.py``) works when the Markdown is read in the repository, and
points to the same file on the repository's site (``repo_url``) when the page is built.

Loaded by ``mkdocs.yml`` (``hooks:``); mkdocs does not copy this file into the site
(``exclude_docs``).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

LINK = re.compile(r"(\]\()(?P<target>\.\./[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    """Rewrite the page's links that leave ``docs_dir`` for a file of the repository."""
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    repo = (config.get("repo_url") or "").rstrip("/")
    page_dir = posixpath.dirname(page.file.src_uri)

    def fix(m: re.Match[str]) -> str:
        target = (docs / page_dir / m["target"]).resolve()
        if docs in target.parents or not target.exists() or root not in target.parents:
            return m.group(0)
        rel = target.relative_to(root).as_posix()
        kind = "tree" if target.is_dir() else "blob"
        return f"{m[1]}{repo}/{kind}/main/{rel}{m['anchor'] or ''})"

    return LINK.sub(fix, markdown) if repo else markdown
