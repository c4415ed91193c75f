"""Argument checks shared by the rewards: each error names the argument, what was
expected and what was given."""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

_REPR_CHARS = 60


def describe(value: Any) -> str:
    """``int 34``, ``NoneType None``: the type and a short repr, for error messages."""
    text = repr(value)
    if len(text) > _REPR_CHARS:
        text = text[: _REPR_CHARS - 3] + "..."
    return f"{type(value).__name__} {text}"


def check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {describe(value)}")
    return value


def check_answer(value: Any, name: str) -> str:
    """A ground truth: a str with something in it."""
    text = check_str(value, name)
    if not text.strip():
        raise ValueError(f"{name}: expected a non-empty answer, got {text!r}")
    return text


def check_real(value: Any, name: str) -> float:
    """A finite real number (bools are refused: ``True`` as a reward is a slip)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {describe(value)}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return result


def check_count(value: Any, name: str) -> int:
    """A token count: anything with ``__index__`` (int, numpy or 0-d torch ints), not a bool."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected an int (a token count), got {describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int (a token count), got {describe(value)}") from None


def as_ground_truth(value: Any) -> Any:
    """What the framework wrappers do to a ground truth: ints become their decimal string.

    DAPO's ground truths are integer strings, but datasets often store them as ints.
    Anything else is returned as it is, for the core functions to check.
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    return value
