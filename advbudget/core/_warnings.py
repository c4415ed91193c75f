"""Warnings that point at the user's line: the first frame outside the core."""

from __future__ import annotations

import sys


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside the core (the
    caller of ``compute_advantages`` or of an estimator function)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith(__package__):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
