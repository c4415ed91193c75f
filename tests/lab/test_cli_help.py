"""Every ``--help`` reads as paragraphs at 80 and 120 columns: no sentence is broken by
a hard line break before the terminal's width (rich wraps greedily, so a line that ends
early while the next word would have fitted was broken by the text, not by the wrap)."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.cli._help import reflow

BORDER = "│"


def _commands() -> list[list[str]]:
    paths: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        paths.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def _cells(line: str) -> tuple[int, int, str] | None:
    """(start, width, text) of a rendered line's last text column: inside a panel, the
    text right of the border; outside, the line after its one-space margin."""
    if line.startswith(BORDER) and line.rstrip().endswith(BORDER):
        inner = line.rstrip()[1:-1]
        return 1, len(inner) - 1, inner  # one space of padding before the right border
    if line.startswith(" ") and line.strip():
        return 1, -1, line
    return None


def hard_breaks(text: str, width: int) -> list[str]:
    """Pairs of lines where the first ends early although the next line's first word,
    a continuation of the same sentence, would have fitted on it."""
    found = []
    lines = text.splitlines()
    for upper, lower in itertools.pairwise(lines):
        a, b = _cells(upper), _cells(lower)
        if a is None or b is None:
            continue
        inner_lower = b[2]
        column = len(inner_lower) - len(inner_lower.lstrip())  # the continued column
        if column == 0 or not inner_lower.strip():
            continue
        upper_text = a[2][column:].rstrip() if len(a[2]) > column else ""
        if not upper_text or upper_text[0] == " ":  # not the continued column
            continue
        words = inner_lower.strip().split()
        if not re.match(r"[a-z(]", words[0]):  # a new item, a default, a sentence
            continue
        if upper_text.endswith((".", ":", ";")):
            continue
        available = (a[1] if a[1] > 0 else width - 1) - column
        if len(upper_text) + 1 + len(words[0]) <= available:
            found.append(f"{upper.rstrip()!r} / {lower.rstrip()!r}")
    return found


def test_the_detector_sees_a_hard_break_and_not_a_wrap() -> None:
    broken = " deltas against the\n first run, and the gains.\n"
    wrapped = " " + "word " * 15 + "\n more words.\n"
    assert hard_breaks(broken, 80)
    assert not hard_breaks(wrapped, 80)
    panel = "│ compare  deltas against the" + " " * 30 + "│\n│          first run." + " " * 43 + "│"
    assert hard_breaks(panel, 80)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", _commands(), ids=lambda path: " ".join(path) or "advbudget")
def test_help_reads_as_paragraphs(
    path: list[str], width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # typer reads TERMINAL_WIDTH once, at import: set the width it read.
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", width)
    result = CliRunner().invoke(app, [*path, "--help"], env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) == width
    assert not hard_breaks(result.output, width), hard_breaks(result.output, width)


def test_reflow_keeps_lists_and_joins_prose() -> None:
    text = "First\nline.\n\nProse that\ngoes on.\n\n- item one\n- item two\n\n    code\n    block"
    assert reflow(text) == (
        "First line.\n\nProse that goes on.\n\n- item one\n- item two\n\n    code\n    block"
    )
