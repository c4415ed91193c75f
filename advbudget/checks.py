"""Checks of scalar arguments, written once for the whole library and public for plugin
authors: each error is one line naming the argument, what was expected and what was given
(``budget: expected a positive finite number, got -1``).

Each check returns the value converted to its Python type, so option tables can use them
as converters too (an estimator's ``Option(..., check)``).

Examples:
    >>> from advbudget.checks import int_at_least, positive_finite
    >>> positive_finite("scale", 2), int_at_least("workers", 3, 1)
    (2.0, 3)
    >>> int_at_least("workers", True, 1)
    Traceback (most recent call last):
    ...
    ValueError: workers: expected an int >= 1, got True
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_finite(name: str, value: Any) -> float:
    """``value`` as a float > 0, finite."""
    if not (_is_number(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    return float(value)


def nonnegative_finite(name: str, value: Any) -> float:
    """``value`` as a float >= 0, finite."""
    if not (_is_number(value) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return float(value)


def finite(name: str, value: Any) -> float:
    """``value`` as a finite float."""
    if not (_is_number(value) and math.isfinite(value)):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


__all__ = ["boolean", "choice", "finite", "int_at_least", "nonnegative_finite", "positive_finite"]


def int_at_least(name: str, value: Any, least: int) -> int:
    """``value`` as an int >= ``least`` (numpy integers too; bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name}: expected an int >= {least}, got {value!r}")
    return int(value)


def choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices):
        raise ValueError(f"{name}: expected one of {tuple(choices)}, got {value!r}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {tuple(choices)}, got {value!r}")
    return value


def boolean(name: str, value: Any) -> bool:
    """``value`` if it is a bool."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value
