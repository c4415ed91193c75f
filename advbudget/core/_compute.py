"""From a batch of rewards to advantages: input checks, the estimator registry, results.

The flow is: rewards + grouping -> ``GroupedRewards`` (stats shared by all estimators)
-> estimator -> advantages, plus the ``valid`` mask and the per-group numbers that the
metrics need (``AdvantageResult``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from . import _estimators
from ._arrays import Array, as_array, compute_dtype, device_of, is_traced
from ._estimators import GroupedRewards, Singletons, group_rewards
from ._groups import GroupMethod, Groups, build_groups

NanPolicy = Literal["raise", "omit"]

Estimator = Callable[..., Array]
"""``estimator(grouped: GroupedRewards, **options) -> advantages as rows``."""

_ESTIMATORS: dict[str, Estimator] = {
    "budget": _estimators.budget,
    "grpo": _estimators.group_normalized,
    "dr": _estimators.dr,
    "rloo": _estimators.rloo,
}
# The names the frameworks and the paper use for the same estimators.
_ALIASES = {"reward_budget": "budget", "group_norm": "grpo", "dr_grpo": "dr"}

DEFAULT_TIE_RTOL = 1e-6
DEFAULT_TIE_ATOL = 1e-6


def register_estimator(
    name: str, estimator: Estimator | None = None, *, replace: bool = False
) -> Any:
    """Register ``estimator`` under ``name`` for :func:`compute_advantages` and the adapters.

    An estimator receives the batch as :class:`GroupedRewards` (rewards by group, their
    gaps to the group minimum, counts, the skipped groups and group reductions) and the
    options given to :func:`compute_advantages`, and returns advantages as rows. Use it
    directly or as a decorator.

    Examples:
        >>> import numpy as np
        >>> from advbudget import register_estimator, compute_advantages
        >>> @register_estimator("doubled_dr", replace=True)
        ... def doubled_dr(grouped):
        ...     mean = grouped.sum(grouped.gap) / grouped.count
        ...     keep = grouped.xp.astype(grouped.kept(), grouped.gap.dtype)
        ...     return 2 * (grouped.gap - grouped.expand(mean)) * grouped.expand(keep)
        >>> rewards = np.array([1.0, 0.0, 1.0, 1.0])
        >>> compute_advantages(rewards, "doubled_dr", group_size=2).advantages
        array([ 1., -1.,  0.,  0.])
    """
    if estimator is None:
        return lambda fn: register_estimator(name, fn, replace=replace)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name: expected a non-empty string, got {name!r}")
    if not callable(estimator):
        raise TypeError(f"estimator: expected a callable, got {type(estimator).__name__}")
    taken = name in _ESTIMATORS or name in _ALIASES
    if taken and not replace and _ESTIMATORS.get(name) is not estimator:
        raise ValueError(f"name: {name!r} is already registered; pass replace=True to replace it")
    _ESTIMATORS[name] = estimator
    return estimator


def estimator_names() -> list[str]:
    """The registered estimator names (aliases not included)."""
    return list(_ESTIMATORS)


def get_estimator(name: str) -> Estimator:
    """The estimator registered under ``name`` (or one of its aliases)."""
    resolved = _ALIASES.get(name, name)
    if resolved not in _ESTIMATORS:
        known = ", ".join(repr(n) for n in [*_ESTIMATORS, *_ALIASES])
        raise ValueError(f"estimator: expected one of {known} or a callable, got {name!r}")
    return _ESTIMATORS[resolved]


@dataclass(frozen=True, eq=False)
class AdvantageResult:
    """Advantages of one batch, with what trainers and metrics need beside them.

    Attributes:
        advantages: one advantage per rollout, ``[N]``, namespace and device of the
            rewards, compute dtype (float32 at least).
        estimator: the estimator's name.
        groups: the grouping used; pass it as ``groups=`` to reuse it.
        group_skipped: ``[M]`` bool, True for groups that got no update (no reward gap,
            a group of one, or no reward at all).
    """

    advantages: Array
    estimator: str
    groups: Groups
    group_skipped: Array
    grouped: GroupedRewards = field(repr=False)
    advantage_rows: Array = field(repr=False)

    @cached_property
    def valid(self) -> Array:
        """``[N]`` bool: the rollout takes part in the update (its group was not skipped
        and its reward was not NaN). Trainers drop the others from loss normalisation."""
        g = self.grouped
        keep = g.xp.broadcast_to(g.expand(g.kept()), self.advantage_rows.shape)
        if g.present is not None:
            keep = keep & g.present
        return self.groups.flat(keep)

    @cached_property
    def group_index(self) -> Array:
        """``[N]`` int: the group of each rollout, ``0..M-1`` (order of ``group_skipped``)."""
        return self.groups.group_index()

    @cached_property
    def group_advantage_gap(self) -> Array:
        """``[M]``: largest minus smallest advantage in each group (0 for skipped)."""
        g, rows = self.grouped, self.advantage_rows
        high = rows if g.present is None else g.xp.where(g.present, rows, -math.inf)
        low = rows if g.present is None else g.xp.where(g.present, rows, math.inf)
        gap = self.groups.per_group(self.groups.max(high) - self.groups.min(low))
        return g.xp.where(self.group_skipped, g.xp.zeros_like(gap), gap)

    @property
    def num_groups(self) -> int:
        return self.groups.num_groups

    @property
    def num_skipped(self) -> int:
        """How many groups got no update (reads the value back from the device)."""
        return int(self.grouped.xp.count_nonzero(self.group_skipped))


def compute_advantages(
    rewards: Any,
    estimator: str | Estimator = "budget",
    /,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
    singletons: Singletons = "skip",
    **options: Any,
) -> AdvantageResult:
    """Advantages of any registered estimator, with the valid mask and group statistics.

    Args:
        rewards: ``[N]`` one scalar reward per rollout; any Array API array or a list.
        estimator: ``"budget"``, ``"grpo"``, ``"dr"``, ``"rloo"`` (or an alias:
            ``"reward_budget"``, ``"group_norm"``, ``"dr_grpo"``), a name added with
            :func:`register_estimator`, or an estimator callable.
        group_size: contiguous groups of this size (rollouts ``0..G-1`` are one prompt's).
        group_ids: one label per rollout (ints or strings, any order, any group sizes).
        groups: a :class:`Groups` from an earlier result, instead of the two above.
        nan_policy: ``"raise"`` (default) or ``"omit"``: NaN rewards (unscorable
            rollouts) are left out of their group's statistics and get advantage 0 and
            ``valid`` False. Infinite rewards always raise.
        tie_rtol, tie_atol: a group whose reward spread is at most
            ``tie_atol + tie_rtol * max(|max|, |min|)`` has no reward gap and is skipped
            (default 1e-6: float32 rounding noise is a tie). 0 and 0 skip only exact ties.
        singletons: ``"skip"`` (default) gives a group of one advantage 0; ``"raw"``
            scores it against a baseline of 0 and unit std, as verl does (not for budget).
        **options: the estimator's own options (``budget=``; ``eps=``, ``std_correction=``).

    Returns:
        An :class:`AdvantageResult`.

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> res = compute_advantages(np.array([1, 0, 0, 0, 1, 1]), "budget",
        ...                          group_ids=["a", "b", "a", "b", "a", "b"])
        >>> res.advantages.round(4)
        array([ 0.1667, -0.3333, -0.3333, -0.3333,  0.1667,  0.6667])
        >>> res.valid.tolist(), res.num_skipped
        ([True, True, True, True, True, True], 0)
    """
    if callable(estimator):
        fn, name = estimator, getattr(estimator, "__name__", "custom")
    elif isinstance(estimator, str):
        fn, name = get_estimator(estimator), _ALIASES.get(estimator, estimator)
    else:
        raise TypeError(f"estimator: expected a name or a callable, got {type(estimator).__name__}")
    grouped = prepare(
        rewards,
        group_size=group_size,
        group_ids=group_ids,
        groups=groups,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
    )
    rows = fn(grouped, **options)
    return AdvantageResult(
        advantages=grouped.groups.flat(rows),
        estimator=name,
        groups=grouped.groups,
        group_skipped=grouped.groups.per_group(grouped.skipped),
        grouped=grouped,
        advantage_rows=rows,
    )


def make_groups(
    rewards: Any,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    num_groups: int | None = None,
    method: GroupMethod = "auto",
) -> Groups:
    """Group the rollouts of ``rewards`` once, to reuse across estimators and metrics.

    Grouping by labels costs time (per million rollouts on one CPU core: ~30 ms for
    string uids laid out as verl does, each prompt's rollouts adjacent, ~0.5 s for
    shuffled strings, which are hashed one by one); pass the result as ``groups=`` to
    every later call on the same batch. With ``num_groups=M`` the labels
    are taken as codes ``0..M-1`` as they are (no factorisation): this works inside
    ``jax.jit`` with a static M. ``method`` forces a layout for labels: ``"segment"``
    (the backend's scatter ops) or ``"padded"`` (pure Array API).

    Examples:
        >>> import numpy as np
        >>> from advbudget import make_groups, budget_advantage, dr_advantage
        >>> rewards = np.array([0.0, 1.0, 1.0, 1.0])
        >>> groups = make_groups(rewards, group_ids=["q1", "q2", "q1", "q2"])
        >>> groups
        Segmented(num_rollouts=4, num_groups=2)
        >>> budget_advantage(rewards, groups=groups), dr_advantage(rewards, groups=groups)
        (array([-0.5,  0. ,  0.5,  0. ]), array([-0.5,  0. ,  0.5,  0. ]))
    """
    rewards, xp = as_array(rewards, "rewards")
    if rewards.ndim != 1 or rewards.shape[0] == 0:
        raise ValueError(
            "rewards: expected a non-empty 1-D array with one reward per rollout, "
            f"got shape {tuple(rewards.shape)}"
        )
    return build_groups(
        int(rewards.shape[0]),
        group_size=group_size,
        group_ids=group_ids,
        xp=xp,
        device=device_of(rewards),
        like=rewards,
        method=method,
        num_groups=num_groups,
    )


def prepare(
    rewards: Any,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
    singletons: Singletons = "skip",
    method: GroupMethod = "auto",
) -> GroupedRewards:
    """Check the inputs and group the rewards: everything before the estimator."""
    rewards, xp = as_array(rewards, "rewards")
    if rewards.ndim != 1:
        raise ValueError(
            "rewards: expected a 1-D array with one reward per rollout, "
            f"got shape {tuple(rewards.shape)}"
        )
    num_rollouts = int(rewards.shape[0])
    if num_rollouts == 0:
        raise ValueError("rewards: expected at least one rollout, got an empty array")
    _check_choice("nan_policy", nan_policy, ("raise", "omit"))
    _check_choice("singletons", singletons, ("skip", "raw"))
    _check_tolerance("tie_rtol", tie_rtol)
    _check_tolerance("tie_atol", tie_atol)
    device = device_of(rewards)
    dtype = compute_dtype(xp, rewards.dtype, device, "rewards")
    if rewards.dtype != dtype:
        rewards = xp.astype(rewards, dtype)
    present = _check_finite(xp, rewards, nan_policy)

    if groups is None:
        groups = build_groups(
            num_rollouts,
            group_size=group_size,
            group_ids=group_ids,
            xp=xp,
            device=device,
            like=rewards,
            method=method,
        )
    else:
        _check_groups(groups, group_size, group_ids, rewards, xp, device)
    return group_rewards(
        rewards,
        groups,
        present=present,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
    )


def _check_finite(xp: Any, rewards: Array, nan_policy: NanPolicy) -> Array | None:
    """None if all rewards are finite; the mask of non-NaN ones under ``"omit"``."""
    if is_traced(rewards):
        return None  # values are unknown while tracing (jax.jit, torch.compile)
    # One reduction and one sync in the common case: a finite sum means every reward is
    # finite (a NaN or inf anywhere makes the sum NaN or inf; overflow only sends us to
    # the exact check below).
    if bool(xp.isfinite(xp.sum(rewards))):
        return None
    finite = xp.isfinite(rewards)
    if bool(xp.all(finite)):
        return None
    nan = xp.isnan(rewards)
    infinite = ~finite & ~nan
    if bool(xp.any(infinite)):
        raise ValueError(
            f"rewards: expected finite numbers, got {_where_true(xp, infinite)} infinite"
        )
    if nan_policy == "raise":
        raise ValueError(
            f"rewards: expected finite numbers, got {_where_true(xp, nan)} NaN; "
            "pass nan_policy='omit' to leave unscored rollouts out of their group"
        )
    return ~nan


def _where_true(xp: Any, mask: Array) -> str:
    positions = xp.nonzero(mask)[0]
    count = int(positions.shape[0])
    return f"{count} of {mask.shape[0]} (first at index {int(positions[0])})"


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


def _check_tolerance(name: str, value: object) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and value >= 0):  # type: ignore[arg-type,operator]
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")


def _check_groups(
    groups: object,
    group_size: int | None,
    group_ids: Any,
    rewards: Array,
    xp: Any,
    device: Any,
) -> None:
    if group_size is not None or group_ids is not None:
        raise ValueError("groups: expected alone, got it together with group_size or group_ids")
    if not isinstance(groups, Groups):
        raise TypeError(f"groups: expected a Groups object, got {type(groups).__name__}")
    num_rollouts = int(rewards.shape[0])
    if groups.num_rollouts != num_rollouts:
        raise ValueError(
            f"groups: expected groups of the {num_rollouts} rewards, "
            f"got groups of {groups.num_rollouts} rollouts"
        )
    # Traced rewards may report no device (jax.jit): only the namespace can be compared.
    same_device = groups.device == device or is_traced(rewards)
    if groups.xp is not xp or not same_device:
        raise ValueError(
            f"groups: expected groups built for {xp.__name__} on {device}, "
            f"got groups for {groups.xp.__name__} on {groups.device}"
        )
