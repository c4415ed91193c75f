"""How every ``advbudget`` command fails: one line on stderr, an exit code, no partial output.

:func:`cli_errors` wraps a command: an :class:`OSError` (a bad path, a read-only or full
disk) becomes ``error: <path>: <what went wrong>`` and exit code 1, a
:class:`KeyboardInterrupt` (Ctrl-C) ``error: interrupted`` and exit code 130 (as shells
report SIGINT), a missing optional package (an :class:`ImportError`) the extra that
brings it, the Hugging Face Hub out of reach what is not cached and how to fix it (both
worded by :mod:`advbudget.lab._hints`), and a :class:`CommandError` its own message and
code. No traceback.

:func:`atomic_output` writes a file or a folder beside its destination and renames it
into place only when everything has been written; on any failure the temporary (and any
parent folder it had to create) is removed, so a failed run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import typer

from advbudget._io import WRITE_ERRORS, atomic_path

from .._hints import hub_unreachable, missing_dependency, not_cached

F = TypeVar("F", bound=Callable[..., Any])

INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class CommandError(Exception):
    """A failure the command explains in one line (``message``) and exits with ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.message, self.code = message, code


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: <message>`` as one line on stderr; return the :class:`typer.Exit`."""
    line = " ".join(f"error: {message}".split())  # one line, whatever the message holds
    with contextlib.suppress(OSError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    return typer.Exit(code)


def describe(error: OSError, label: str | None = None) -> str:
    """``<label or path>: <reason>`` of an OSError, without the ``[Errno n]`` noise."""
    reason = error.strerror or str(error) or type(error).__name__
    where = label if label is not None else error.filename
    if where is None:
        return reason
    if label is not None and error.filename is not None and str(error.filename) != label:
        return f"{label}: {error.filename}: {reason}"
    return f"{where}: {reason}"


def cli_errors(command: F) -> F:
    """Decorate a typer command so that it fails as this module describes."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = command(*args, **kwargs)
            sys.stdout.flush()  # a full disk behind `> file` shows up here
            return result
        except CommandError as error:
            raise fail(error.message, error.code) from None
        except KeyboardInterrupt:
            raise fail("interrupted (Ctrl-C); nothing was written", INTERRUPTED) from None
        except ImportError as error:
            if (error.name or "").split(".")[0] == "advbudget":
                raise  # not a missing package: a bug, with its traceback
            raise fail(missing_dependency(error)) from None
        except OSError as error:
            if hub_unreachable(error):
                raise fail(not_cached("a file", None)) from None
            label = None
            if error.filename is None and error.errno in WRITE_ERRORS | {errno.EPIPE}:
                # Files are written through atomic_output, which names them: a write
                # error without a name comes from a stream (`> file` on a full disk).
                label = "standard output"
                _silence_stdout()
            raise fail(describe(error, label)) from None

    return wrapper  # type: ignore[return-value]


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of what could not
    be written does not print a second error."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def atomic_output(
    path: Path, *, directory: bool = False, label: str | None = None
) -> Iterator[Path]:
    """:func:`advbudget._io.atomic_path` for a command's output: a folder where a file is
    expected, or a file where a folder is, is a :class:`CommandError` naming ``label``."""
    path = Path(path)
    label = label or str(path)
    try:
        with atomic_path(path, directory=directory) as temporary:
            yield temporary
    except (IsADirectoryError, NotADirectoryError) as error:
        raise CommandError(f"{label} {error.filename}: {error.strerror}") from None
