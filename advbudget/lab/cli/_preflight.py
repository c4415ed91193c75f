"""Checks a command runs before any long work, so that a bad path fails in a second, with
one line naming the option, instead of after the run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ._errors import CommandError


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
