"""Reward components: several rewards per rollout (GDPO's format, accuracy, ...), for the
estimators whose spec declares ``components=True``.

They come as ``[N, K]`` (one column per component; nested lists too) or as a mapping
name -> ``[N]``. :func:`reward_columns` checks the shape and returns the columns, with
the names the errors give them (``rewards['format']``, ``rewards[:, 1]``); the
orchestration (``_compute``) checks each for NaN and lays each out by group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._arrays import Array, Namespace, as_array, backend, device_of, is_traced


def reward_columns(rewards: Any, estimator: str) -> tuple[list[Array], list[str], Namespace]:
    """The ``K`` columns of ``rewards`` (each ``[N]``), their names and namespace; a
    one-line error for anything that is not ``[N, K]`` (K >= 1) or a mapping of ``[N]``."""
    if isinstance(rewards, Mapping):
        return _mapping_columns(rewards, estimator)
    if isinstance(rewards, (list, tuple)):
        _refuse_ragged(rewards)
    matrix, xp = as_array(rewards, "rewards")
    if matrix.ndim != 2 or 0 in tuple(matrix.shape):
        raise ValueError(
            f"rewards: the {estimator} estimator takes reward components, [N, K] (one column "
            f"per component) or a mapping name -> [N], got shape {tuple(matrix.shape)}"
        )
    n, count = (int(size) for size in matrix.shape)
    names = [f"rewards[:, {k}]" for k in range(count)]
    if backend(xp) == "numpy":
        # One copy, component-major: numpy's group reductions are ~15% slower on a
        # strided column. torch's are not (its transposing copy is slow), and XLA fuses
        # strided slices (its transpose costs ~3 grpo passes).
        flat = xp.reshape(xp.permute_dims(matrix, (1, 0)), (-1,))
        return [flat[k * n : (k + 1) * n] for k in range(count)], names, xp
    return [matrix[:, k] for k in range(count)], names, xp


def has_components(rewards: Any) -> bool:
    """Whether ``rewards`` holds several rewards per rollout (a mapping, ``[N, K]``, or a
    list of rows), which an estimator of one reward per rollout refuses."""
    if isinstance(rewards, Mapping):
        return True
    if isinstance(rewards, (list, tuple)):
        return any(isinstance(row, (list, tuple)) for row in rewards)
    return getattr(rewards, "ndim", 1) == 2


def _mapping_columns(
    rewards: Mapping[Any, Any], estimator: str
) -> tuple[list[Array], list[str], Namespace]:
    if not rewards:
        raise ValueError(
            f"rewards: the {estimator} estimator expected at least one reward component, "
            "got an empty mapping"
        )
    columns: list[Array] = []
    names: list[str] = []
    xp: Namespace = None
    for key, values in rewards.items():
        name = f"rewards[{key!r}]"
        column, column_xp = as_array(values, name)
        if column.ndim != 1:
            raise ValueError(
                f"{name}: expected one reward per rollout, shape (N,), got shape "
                f"{tuple(column.shape)}"
            )
        if columns:
            first, like = columns[0], names[0]
            traced = is_traced(column) or is_traced(first)
            if column_xp is not xp and not traced:
                raise TypeError(
                    f"{name}: expected a {backend(xp)} array like {like}, "
                    f"got a {backend(column_xp)} one"
                )
            if column.shape[0] != first.shape[0]:
                raise ValueError(
                    f"{name}: expected one reward per rollout like {like}, shape "
                    f"({first.shape[0]},), got shape ({column.shape[0]},)"
                )
            if not traced and device_of(column) != device_of(first):
                raise ValueError(
                    f"{name}: expected an array on the device of {like} "
                    f"({device_of(first)}), got one on {device_of(column)}"
                )
        else:
            xp = column_xp
        columns.append(column)
        names.append(name)
    return columns, names, xp


def _refuse_ragged(rows: list[Any] | tuple[Any, ...]) -> None:
    """Nested lists whose rows differ in length (or mix rows and numbers) have no K."""

    def size(row: Any) -> str:
        if isinstance(row, (list, tuple)):
            return f"{len(row)} component{'' if len(row) == 1 else 's'}"
        return "a single number"

    sizes = [size(row) for row in rows]
    other = next((i for i, s in enumerate(sizes) if s != sizes[0]), None)
    if other is not None:
        raise ValueError(
            "rewards: expected the same number of reward components K for every rollout, "
            f"[N, K], got {sizes[0]} for rollout 0 and {sizes[other]} for rollout {other}"
        )
