"""Terminal tables that fit the terminal: split by columns instead of squeezed.

rich shrinks the columns of a table wider than the terminal until numbers wrap inside
their cells; :func:`fit_width` instead builds as many tables as it takes, each with as
many of the optional column groups (one estimator, one pass@k) as the width allows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

T = TypeVar("T")


def fit_width(
    console: Console, items: Sequence[T], build: Callable[[list[T]], Table]
) -> list[Table]:
    """``build(chunk)`` for consecutive chunks of ``items``, each chunk as long as its table
    fits ``console.width`` (one item at least, so a single wide item is still shown)."""
    natural = console.options.update_width(1 << 16)  # measure without the terminal's limit
    tables: list[Table] = []
    chunk: list[T] = []
    for item in items:
        if (
            chunk
            and Measurement.get(console, natural, build([*chunk, item])).maximum > console.width
        ):
            tables.append(build(chunk))
            chunk = []
        chunk.append(item)
    return [*tables, build(chunk)]
