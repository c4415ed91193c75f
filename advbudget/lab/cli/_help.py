"""Help text that reads as paragraphs at any terminal width.

Typer joins the lines of a command's first help paragraph but keeps the hard line breaks
of the others (and of the first one in the command list), so a docstring wrapped at 88
columns reads "which / the warm start rarely does" in an 80-column terminal. Each
command's help is reflowed once, when the app is built: prose paragraphs become one line
each, for the terminal to wrap; a paragraph with indented, bulleted or table lines keeps
its breaks.
"""

from __future__ import annotations

import inspect

import typer

__all__ = ["reflow", "reflow_help"]

_KEEP_BREAKS = ("- ", "* ", "|", "\b")


def reflow(text: str) -> str:
    """``text`` with each prose paragraph on one line.

    Examples:
        >>> reflow("One\\ntwo.\\n\\nThree\\nfour.\\n\\n- a\\n- b")
        'One two.\\n\\nThree four.\\n\\n- a\\n- b'
    """
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(_reflow_paragraph(p) for p in paragraphs)


def _reflow_paragraph(paragraph: str) -> str:
    lines = paragraph.splitlines()
    if any(line[:1].isspace() or line.startswith(_KEEP_BREAKS) for line in lines):
        return paragraph
    return " ".join(line.strip() for line in lines)


def reflow_help(app: typer.Typer) -> None:
    """Reflow the help of every command, group and callback of ``app``, recursively."""
    for command in app.registered_commands:
        text = command.help or inspect.getdoc(command.callback) or ""
        command.help = reflow(text) or None
    callback = app.registered_callback
    if callback is not None and (callback.help or callback.callback):
        callback.help = reflow(callback.help or inspect.getdoc(callback.callback) or "") or None
    for group in app.registered_groups:
        if group.help:
            group.help = reflow(group.help)
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)
