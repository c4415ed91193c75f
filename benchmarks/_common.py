"""Helpers shared by the benchmark scripts (run as scripts: this folder is on sys.path)."""

from __future__ import annotations

from pathlib import Path

from advbudget._io import atomic_write


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` so that an interrupted run never leaves half a result."""
    atomic_write(path, text)
