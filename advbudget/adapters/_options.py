"""Adapter options read from a framework's own config or command line."""

from __future__ import annotations

import contextlib
from typing import Any

from advbudget.metrics import check_solved_reward

# How a command line or a hydra string turns the solved/unsolved split off.
OFF_WORDS = ("none", "null", "off")


def parse_solved_reward(value: Any, name: str, off: str) -> float | None:
    """A ``solved_reward`` option as a framework hands it over: a number, a numeric
    string, or one of :data:`OFF_WORDS` (None: the split off). Anything else raises a
    one-line ValueError naming the option ``name`` and the framework's word ``off``.

    Examples:
        >>> parse_solved_reward("0.5", "--x", "none"), parse_solved_reward("null", "--x", "none")
        (0.5, None)
        >>> parse_solved_reward("high", "algorithm.x", "null")
        Traceback (most recent call last):
        ...
        ValueError: algorithm.x: expected a finite number or null (off), got 'high'
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in OFF_WORDS:
            return None
        with contextlib.suppress(ValueError):  # not a number: refused below
            value = float(text)
    try:
        return check_solved_reward(value, name)
    except ValueError:
        raise ValueError(
            f"{name}: expected a finite number or {off} (off), got {value!r}"
        ) from None
