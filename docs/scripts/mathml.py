"""mkdocs hook: typeset the pages' LaTeX as MathML when the site is built.

pymdownx.arithmatex (generic mode) leaves ``\\(...\\)`` in ``<span class="arithmatex">`` and
``\\[...\\]`` in ``<div class="arithmatex">``; this hook replaces each with the MathML that
latex2mathml makes of it. Browsers draw MathML themselves, so the built site shows its math
with no script and no network (``mkdocs serve`` on a cluster node included). A formula that
does not convert cleanly (an unknown command would show as raw ``\\name``) fails the build
and names the page and the formula.
"""

from __future__ import annotations

import html
import re
from typing import Any

from latex2mathml.converter import convert
from mkdocs.exceptions import PluginError

ARITHMATEX = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*'
    r"(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\])\s*</(?P=tag)>",
    re.S,
)
# MathML text nodes of a clean conversion hold no TeX command.
TEX_COMMAND_LEFT = re.compile(r">[^<]*\\[A-Za-z]+[^<]*<")


def typeset(tex: str, *, display: bool) -> str:
    """The MathML of one formula (raises ValueError when it does not convert cleanly)."""
    try:
        mathml = convert(tex, display="block" if display else "inline")
    except Exception as error:
        raise ValueError(f"latex2mathml cannot read {tex!r}: {error}") from error
    if TEX_COMMAND_LEFT.search(mathml):
        raise ValueError(f"unsupported command left as text in {tex!r}")
    kind = "arithmatex arithmatex-display" if display else "arithmatex"
    return (
        f'<{"div" if display else "span"} class="{kind}">{mathml}</{"div" if display else "span"}>'
    )


def on_page_content(page_html: str, page: Any, **_: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        display = match.group("display") is not None
        tex = html.unescape(match.group("display") if display else match.group("inline"))
        try:
            return typeset(tex.strip(), display=display)
        except ValueError as error:
            raise PluginError(f"{page.file.src_path}: {error}") from error

    return ARITHMATEX.sub(replace, page_html)
