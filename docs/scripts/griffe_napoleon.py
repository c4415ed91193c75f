"""Griffe extension for the docs build: read the docstrings as Sphinx/Napoleon would.

The docstrings are Google style as Sphinx's Napoleon reads it; griffe (which
mkdocstrings uses) differs in a few places, and without this the API pages would show
raw roles, doctests as nested block quotes, and strict-mode warnings. Before the
docstrings are parsed, this rewrites, in memory only (the source files are not touched):

- Sphinx roles, ``:func:`compute_advantages``` or ``:class:`~advbudget.Groups```, into
  *optional* autorefs cross-references to the object the name means in the docstring's
  own scope (the module's imports, then its parents): a link where that object is on a
  page of the site, plain code otherwise, never a warning;
- ``Example:`` section titles into ``Examples:`` (griffe only knows the plural, and
  renders an unknown title's doctests as Markdown);
- an ``Args:`` entry that names several parameters, ``tie_rtol, tie_atol: ...``, into
  one entry per parameter with the same description;
- an ``Args:`` section written as prose (``As for dr_advantage.``) into a paragraph,
  so that its text is shown rather than dropped.

Loaded by mkdocs.yml (``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):`(?P<target>[^`]+)`")
PARAMETER_SECTIONS = ("Args:", "Arguments:", "Parameters:", "Params:")
# A parameter entry at the section's indentation: "name: ..." or "name (type): ...".
ENTRY = re.compile(r"^(?P<indent>\s+)\*{0,2}\w+(?:\s*\([^)]*\))?\s*:")
SEVERAL = re.compile(r"^(?P<indent>\s+)(?P<names>\w+(?:\s*,\s*\w+)+)\s*:(?P<rest>.*)$")


class NapoleonDocstrings(griffe.Extension):
    """Rewrite Sphinx/Napoleon conventions into what griffe and autorefs understand."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is None:
                continue
            text = _sections(docstring.value)
            docstring.value = ROLE.sub(lambda match, obj=obj: _link(obj, match), text)


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and every object defined inside it (aliases, i.e. imports, left out)."""
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _objects(member)  # type: ignore[arg-type]
    return found


def _sections(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "Example:":
            out.append(line.replace("Example:", "Examples:"))
            i += 1
            continue
        if line.strip() not in PARAMETER_SECTIONS:
            out.append(line)
            i += 1
            continue
        # A parameter section: its body is the indented block that follows.
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(line)):
            end += 1
        body = lines[i + 1 : end]
        first = next((entry for entry in body if entry.strip()), "")
        if not ENTRY.match(first) and not SEVERAL.match(first):
            prose = " ".join(entry.strip() for entry in body if entry.strip())
            out.extend([f"{line[: _indent(line)]}**Arguments:** {prose}", ""])
        else:
            out.append(line)
            out.extend(_split_entries(body, _indent(first)))
        i = end
    return "\n".join(out)


def _split_entries(body: list[str], indent: int) -> list[str]:
    """One entry per parameter where an entry names several (``a, b: text``)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        match = SEVERAL.match(body[i])
        if match is None or _indent(body[i]) != indent:
            out.append(body[i])
            i += 1
            continue
        end = i + 1
        while end < len(body) and body[end].strip() and _indent(body[end]) > indent:
            end += 1
        continuation = body[i + 1 : end]
        for name in re.split(r"\s*,\s*", match["names"]):
            out.append(f"{match['indent']}{name}:{match['rest']}")
            out.extend(continuation)
        i = end
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _link(obj: griffe.Object, match: re.Match[str]) -> str:
    target = match["target"].strip()
    short = target.startswith("~")
    target = target.lstrip("~.")
    title = target.rsplit(".", 1)[-1] if short else target
    return f'<autoref identifier="{_resolve(obj, target)}" optional>`{title}`</autoref>'


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as seen from ``obj`` (``target`` itself if unknown)."""
    head, _, rest = target.partition(".")
    if head == obj.package.name:
        return target
    try:
        path = obj.resolve(head)
    except griffe.NameResolutionError:
        return target
    return f"{path}.{rest}" if rest else path
