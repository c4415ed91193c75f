"""Reading what a trainer's Ray workers logged, from the console of its run.

Ray forwards each worker's output to the driver a line at a time, prefixed "(Name pid=N)"
(``log_to_driver``), but its log monitor reads the worker's file with ``readline()``
(ray/_private/log_monitor.py:387): a line it meets half-written is forwarded as two, each
with the prefix. A long status line (OpenRLHF's "Global step N: {...}", ~3,000 characters) is
cut this way now and then on a loaded machine. The parser below joins a logged dict's
pieces back until the dict is whole, so a test reads every step whatever the timing.

The console is read as bytes and cut at "\\n" only: tqdm's "\\r" is not a line break there,
and a line Ray prefixed keeps its prefix.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HEADER_REACH = 200  # how much of a worker's previous line a cut header may have taken
NAN = re.compile(r"(?<!['\w])nan(?!['\w])")  # a bare nan (Python's repr), not the string 'nan'
# Ray's prefix of a line its worker printed, then one space (ray/_private/utils.py).
WORKER_LINE = re.compile(r"^\((\w+) pid=(\d+)\) ?(.*)$")


def console_text(output: bytes) -> str:
    """The console as text, without colour codes; "\\r" left as it was printed."""
    return ANSI.sub("", output.decode("utf-8", errors="replace"))


def logged_dicts(
    console: str, header: re.Pattern[str]
) -> Iterator[tuple[int, re.Match[str], dict[str, Any]]]:
    """(pid, the header's match, payload) for each dict literal a worker logged after
    ``header`` (see :func:`logged_reprs`); a bare ``nan`` reads as None."""
    for pid, found, text in logged_reprs(console, header):
        yield pid, found, ast.literal_eval(NAN.sub("None", text))


def logged_reprs(console: str, header: re.Pattern[str]) -> Iterator[tuple[int, re.Match[str], str]]:
    """(pid, the header's match, text) for each ``{...}`` a worker logged after ``header``:
    it starts after the header, on its line or the next, and runs over that worker's
    following lines (pformat's, or the pieces of a line Ray cut) until its braces close."""
    open_reprs: dict[int, tuple[re.Match[str], str]] = {}  # pid -> (header, the text so far)
    last_line: dict[int, str] = {}  # pid -> its last line, in case the header itself was cut
    for line in console.split("\n"):
        match = WORKER_LINE.match(line)
        if not match:
            continue
        pid, text = int(match[2]), match[3]
        joined = last_line.get(pid, "")[-HEADER_REACH:] + text
        last_line[pid] = text
        starts = len(joined) - len(text)
        found = next((m for m in header.finditer(joined) if m.end() > starts), None)
        if found:
            open_reprs[pid] = (found, "")
            text = joined[found.end() :]
        elif pid not in open_reprs:
            continue
        opened, so_far = open_reprs[pid]
        so_far += text  # pformat's lines start with a space; a cut piece joins as it was
        end = _closing_brace(so_far)
        if end is None:
            open_reprs[pid] = (opened, so_far)
            continue
        del open_reprs[pid]
        yield pid, opened, so_far[: end + 1]


def _closing_brace(text: str) -> int | None:
    """Where the ``{`` that ``text`` starts with (after blanks) closes, quoted braces aside;
    None while it is open."""
    depth, quote, escaped = 0, "", False
    for at, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return at
        elif depth == 0 and not char.isspace():
            return None  # not a dict: nothing to read
    return None
