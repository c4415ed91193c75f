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


#: What an adapter does with the rollouts that take no part in the update (a skipped
#: group's, or a NaN reward's under ``nan_policy="omit"``): ``keep`` them with advantage 0
#: (the framework's own behaviour), ``drop`` them from the loss and its normaliser, or
#: ``resample``: generate again until the step holds enough kept groups (DAPO's dynamic
#: sampling).
SKIPPED_GROUPS = ("keep", "drop", "resample")


def parse_skipped_groups(value: Any, name: str, *, resample_refused: str | None = None) -> str:
    """A ``skipped_groups`` option: one of :data:`SKIPPED_GROUPS`, case and spaces aside.
    ``resample_refused`` is the reason a framework cannot resample (then ``resample`` is
    refused with it). Errors are one line naming the option ``name``.

    Examples:
        >>> parse_skipped_groups(" Drop", "--advbudget.skipped_groups")
        'drop'
        >>> parse_skipped_groups("skip", "skipped_groups")
        Traceback (most recent call last):
        ...
        ValueError: skipped_groups: expected one of keep, drop, resample, got 'skip'
    """
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in SKIPPED_GROUPS:
        raise ValueError(f"{name}: expected one of {', '.join(SKIPPED_GROUPS)}, got {value!r}")
    if text == "resample" and resample_refused is not None:
        raise ValueError(f"{name}: 'resample' is not available here: {resample_refused}")
    return text


def parse_max_generation_batches(value: Any, name: str) -> int:
    """How many generation rounds ``resample`` may take per step: an int >= 1 (a command
    line's or hydra's numeric string too).

    Examples:
        >>> parse_max_generation_batches("4", "--advbudget.max_generation_batches")
        4
        >>> parse_max_generation_batches(0, "max_generation_batches")
        Traceback (most recent call last):
        ...
        ValueError: max_generation_batches: expected an int >= 1, got 0
    """
    number = value
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return number
