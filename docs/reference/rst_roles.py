"""A Griffe extension for the API reference: txstore's docstrings are reST-flavoured prose, and
mkdocstrings renders Markdown. When the ``txstore`` package is loaded, each docstring is rewritten
(in memory only; the source is not touched):

* ``:class:`~txstore.x.Name``` (and ``:meth:``, ``:func:``, ``:attr:``, ``:data:``, ``:mod:``,
  ``:exc:``, ``:obj:``) becomes a cross-reference to the object's entry, resolved from the
  docstring's scope as Sphinx would (``Task.commit`` inside ``txstore.runtime``...). The reference
  is *optional*: a target the reference does not render (a private layer, a builtin) shows as
  code instead of failing the strict build;
* ``>>>`` examples become ``pycon`` code blocks (Markdown would read ``>`` as a quote);
* ``text::`` followed by an indented block becomes ``text:`` and a code block.

Loaded by ``mkdocs.yml`` (``extensions:`` of the python handler); mkdocs does not copy this file
into the site (``exclude_docs``).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|data|mod|exc|obj|const):`([^`]+)`")
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$")


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as named in ``obj``'s docstring (itself if not found)."""
    if target.startswith("txstore"):
        return target
    head, _, rest = target.partition(".")
    scope: Any = obj
    while scope is not None:
        try:
            full = scope.resolve(head)
        except Exception:  # griffe's NameResolutionError, or an alias it cannot follow
            scope = scope.parent
            continue
        return f"{full}.{rest}" if rest else full
    return target


def _role(obj: griffe.Object, m: re.Match[str]) -> str:
    text = m.group(2).strip()
    titled = TITLED.match(text)
    if titled:
        title, target = titled["title"], titled["target"].lstrip("~")
    else:
        target = text.lstrip("~").lstrip(".")
        title = target.rsplit(".", 1)[-1] if text.startswith("~") else target
    identifier = _resolve(obj, target)
    code = f"<code>{html.escape(title)}</code>"
    return f'<autoref identifier="{html.escape(identifier)}" optional>{code}</autoref>'


def _blocks(text: str) -> str:
    """Fence doctest paragraphs and ``::`` literal blocks."""
    lines = text.split("\n")
    out: list[str] = []
    fenced = False  # inside a Markdown code fence the docstring already has
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("```"):
            fenced = not fenced
        if fenced or stripped.startswith("```"):
            out.append(line)
            i += 1
            continue
        if stripped.startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
                i += 1
            out += ["", f"{indent}```pycon", *(indent + b for b in block), f"{indent}```", ""]
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            body_indent = None
            if j < len(lines):
                nxt = lines[j]
                n = len(nxt) - len(nxt.lstrip())
                if n > len(indent):
                    body_indent = n
            if body_indent is not None:
                head = line[:-2].rstrip()
                out.append(head + ":" if head.strip() else "")
                k = j
                body: list[str] = []
                while k < len(lines) and (
                    not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) >= body_indent
                ):
                    body.append(lines[k][body_indent:])
                    k += 1
                while body and not body[-1].strip():
                    body.pop()
                out += ["", f"{indent}```text", *(indent + b for b in body), f"{indent}```", ""]
                i = k
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def rewrite(obj: griffe.Object, text: str) -> str:
    """``text`` (a docstring of ``obj``) in Markdown."""
    return ROLE.sub(lambda m: _role(obj, m), _blocks(text))


class RstRoles(griffe.Extension):
    """Rewrite every docstring of the loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()

        def walk(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)  # type: ignore[arg-type]

        walk(pkg)
