"""How every ``advbudget`` command fails: one line on stderr, an exit code, no partial output.

:func:`cli_errors` wraps a command: an :class:`OSError` (a bad path, a read-only or full
disk) becomes ``error: <path>: <what went wrong>`` and exit code 1, a
:class:`KeyboardInterrupt` (Ctrl-C) ``error: interrupted`` and exit code 130 (as shells
report SIGINT), a missing optional package (an :class:`ImportError`) the extra that
brings it, the Hugging Face Hub out of reach what is not cached and how to fix it, and a
:class:`CommandError` its own message and code. No traceback.

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
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import typer

from .._io import WRITE_ERRORS, atomic_path

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


# The extra of pyproject.toml that brings each optional module (advbudget is installed
# from a checkout: `pip install -e ".[data]"` and so on, in it).
EXTRAS = {
    "datasets": "data",
    "pandas": "data",
    "pyarrow": "data",
    "math_verify": "rewards",
    "transformers": "eval",
    "accelerate": "eval",
    "torch": "torch",
    "matplotlib": "plot",
}
PACKAGES = {"math_verify": "math-verify"}  # where the import and the package names differ


def missing_dependency(error: ImportError, needed_for: str = "") -> str:
    """One line for a missing optional module: what to install, as an extra of the checkout
    (``pip install -e ".[eval]"``); for math-verify also the grader that needs nothing."""
    module = (error.name or "").split(".")[0]
    if not module or module == "advbudget":  # a message of its own, or not a missing package
        return str(error)
    package = PACKAGES.get(module, module)
    what = f"{needed_for} needs" if needed_for else "needs"
    extra = EXTRAS.get(module)
    if extra is None:
        return f"{what} {package}, which is not installed: pip install {package}"
    message = (
        f"{what} {package}, which is not installed: in the advbudget checkout run "
        f'pip install -e ".[{extra}]"'
    )
    if module == "math_verify":
        message += " (or pass --grader dapo, which needs nothing more)"
    return message


_HUB_ERRORS = {
    "OfflineModeIsEnabled",
    "LocalEntryNotFoundError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionError",
    "ReadTimeout",
}
_HUB_PHRASES = ("couldn't connect to 'https://huggingface.co'", "couldn't reach '")


def hub_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the Hugging Face Hub could not be
    reached for files that are not in the local cache (offline mode, no network)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        text = str(current).lower()
        if names & _HUB_ERRORS or any(phrase in text for phrase in _HUB_PHRASES):
            return True
        current = current.__cause__ or current.__context__
    return False


def not_cached(kind: str, repo_id: str | None, local: str = "a local path") -> str:
    """One line for a hub id (``kind`` "model" or "dataset") that is not in the local cache
    while the Hub cannot be reached, with how to fix it."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
    name = f"{kind} {repo_id}" if repo_id else kind
    if kind == "model" and repo_id:
        fetch = f"download it where the Hub can be reached (hf download {repo_id}), "
    else:  # datasets keeps its own copy once a load has worked
        fetch = "run this command once where the Hub can be reached, "
    return (
        f"{name} is not in the local Hugging Face cache and the Hub cannot be reached"
        + (" (HF_HUB_OFFLINE is set: unset it if this machine has network)" if offline else "")
        + f": {fetch}or pass {local}"
    )


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of what could not
    be written does not print a second error."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def check_output_dir(path: Path, label: str) -> None:
    """Fail now, before any long work, if ``path`` cannot become a writable folder.

    Creates nothing that stays: it probes with a temporary file in the nearest existing
    folder of ``path``.
    """
    existing = Path(path)
    while not existing.exists():
        if existing.is_symlink():  # a dangling link: writing through it would fail
            raise CommandError(f"{label} {path}: {existing} is a broken link")
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == Path(path) else f"{existing} is a file"
        raise CommandError(f"{label} {path}: {what}, not a folder")
    try:
        handle, probe = tempfile.mkstemp(prefix=".advbudget-probe-", dir=existing)
    except OSError as error:
        reason = error.strerror or str(error)
        raise CommandError(f"{label} {path}: cannot write in {existing}: {reason}") from None
    os.close(handle)
    os.unlink(probe)


def check_input_file(path: Path, label: str) -> None:
    """Fail with one line if ``path`` is not an existing, readable file."""
    path = Path(path)
    if not path.exists():
        raise CommandError(f"{label} {path}: no such file")
    if path.is_dir():
        raise CommandError(f"{label} {path}: is a folder, expected a file")
    if not os.access(path, os.R_OK):
        raise CommandError(f"{label} {path}: not readable (permission denied)")


def check_output_file(path: Path, label: str) -> None:
    """Fail now if ``path`` cannot be written as a file (a folder there, or no writable
    parent)."""
    path = Path(path)
    if path.is_dir():
        raise CommandError(f"{label} {path}: is a folder, expected a file name")
    check_output_dir(path.parent, label)


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
