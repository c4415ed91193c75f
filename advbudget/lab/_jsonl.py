"""One reader of JSON-lines files, with one error format for every caller (the data
loader, the evaluation's benchmarks and generations journal)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["json_lines"]


def json_lines(
    path: str | Path, text: str | None = None, *, error: type[ValueError] = ValueError
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path`` (streamed; or of
    ``text``, its content already read). A line that is not a JSON object raises ``error``
    naming the file and line: ``data.jsonl, line 3: not valid JSON (Expecting value at
    column 1); expected one JSON object a line, got '{oops'``.

    Examples:
        >>> list(json_lines("d.jsonl", '{"a": 1}\\n\\n{"b": 2}\\n'))
        [(1, {'a': 1}), (3, {'b': 2})]
        >>> list(json_lines("d.jsonl", '[1, 2]'))
        Traceback (most recent call last):
        ...
        ValueError: d.jsonl, line 1: expected a JSON object, got list
    """
    if text is not None:
        yield from _parse(path, text.splitlines(), error)
        return
    with Path(path).open(encoding="utf-8-sig") as file:  # a BOM from Windows editors
        yield from _parse(path, file, error)


def _parse(
    path: str | Path, lines: Iterable[str], error: type[ValueError]
) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as decode:
            raise error(
                f"{where}: not valid JSON ({decode.msg} at column {decode.colno}); expected "
                f"one JSON object a line, got {_clip(line)!r}"
            ) from None
        if not isinstance(row, dict):
            raise error(f"{where}: expected a JSON object, got {type(row).__name__}")
        yield number, row


def _clip(text: str, limit: int = 80) -> str:
    text = text.rstrip("\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
