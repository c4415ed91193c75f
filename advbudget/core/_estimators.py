"""The estimators, each written once in terms of group reductions (see ``_groups``).

Every estimator receives the rewards already grouped and centred on their group
minimum (``GroupedRewards``) and returns advantages as rows. Centring on the minimum
makes a constant group exactly zero on every backend (the naive ``r - mean`` is off by
an ulp in float32) and lets budget, GRPO, Dr and RLOO share one gap array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ._arrays import Array, Namespace
from ._groups import Groups

Singletons = Literal["skip", "raw"]


@dataclass(frozen=True, eq=False)
class GroupedRewards:
    """Rewards of one batch, laid out by group, with the statistics every estimator needs.

    Attributes:
        xp: the array namespace.
        groups: the layout and its reductions (``sum``, ``min``, ``max``, ``expand``).
        rewards: the rewards as rows, in the compute dtype.
        present: bool rows, False for padding and for NaN rewards left out under
            ``nan_policy="omit"``; None when every row is a rollout with a reward.
        gap: ``reward - group minimum`` as rows, ``>= 0``, and 0 where not present.
        count: rollouts with a reward in each group (stats, compute dtype).
        skipped: stats, True for groups that get no update: no reward gap beyond the
            tie tolerance, which includes groups of one unless ``singletons="raw"``.
        raw_singletons: stats, True for groups of one that are scored against a baseline
            of 0 (``singletons="raw"``, verl's convention); None otherwise.
    """

    xp: Namespace
    groups: Groups
    rewards: Array
    present: Array | None
    gap: Array
    count: Array
    skipped: Array
    raw_singletons: Array | None

    def sum(self, rows: Array) -> Array:
        """Per-group sum of ``rows`` (as stats)."""
        return self.groups.sum(rows)

    def expand(self, stats: Array) -> Array:
        """Per-group stats broadcast back against rows."""
        return self.groups.expand(stats)

    def only_present(self, rows: Array) -> Array:
        """``rows`` with 0 wherever there is no rollout or no reward."""
        return rows if self.present is None else self.xp.where(self.present, rows, 0)

    def kept(self) -> Array:
        """Stats, True for groups that get an update."""
        return ~self.skipped


def group_rewards(
    rewards: Array,
    groups: Groups,
    *,
    present: Array | None,
    tie_rtol: float,
    tie_atol: float,
    singletons: Singletons,
) -> GroupedRewards:
    """Lay ``rewards`` ([N], compute dtype) out by group and compute the shared stats."""
    xp = groups.xp
    rows = groups.rows(rewards)
    present_rows = groups.is_rollout
    if present is not None:
        present = groups.rows(present)
        present_rows = present if present_rows is None else present_rows & present
    if present_rows is None:
        low, high = groups.min_max(rows)
        count = groups.sizes(rows.dtype)
        gap = rows - groups.expand(low)
    else:
        low = groups.min(xp.where(present_rows, rows, math.inf))
        high = groups.max(xp.where(present_rows, rows, -math.inf))
        count = groups.sum(xp.astype(present_rows, rows.dtype))
        gap = xp.where(present_rows, rows - groups.expand(low), 0)
    # Budgeting is scale-invariant, so a rounding-noise gap (0.1 + 0.2 vs 0.3) would
    # hand one rollout the whole budget: such near-ties count as ties.
    spread = high - low
    scale = xp.maximum(xp.abs(high), xp.abs(low))
    tie = ~(spread > tie_atol + tie_rtol * scale)  # also True with no reward (spread -inf)
    raw_singletons = None
    if singletons == "raw":
        raw_singletons = count == 1
        tie = tie & ~raw_singletons
    return GroupedRewards(xp, groups, rows, present_rows, gap, count, tie, raw_singletons)


def _safe(xp: Namespace, keep: Array, denominator: Array) -> Array:
    """``denominator`` with 1 where ``keep`` is False, so skipped groups never divide by 0."""
    return xp.where(keep, denominator, xp.ones_like(denominator))


def _deviation(g: GroupedRewards) -> Array:
    """``reward - group mean`` as rows (0 where not present)."""
    mean = g.sum(g.gap) / _safe(g.xp, g.count > 0, g.count)
    return g.only_present(g.gap - g.expand(mean))


def _with_raw_singletons(g: GroupedRewards, advantages: Array, scale: float = 1.0) -> Array:
    """Score groups of one against a baseline of 0 (verl's convention), when asked."""
    if g.raw_singletons is None:
        return advantages
    return g.xp.where(g.expand(g.raw_singletons), g.rewards / scale, advantages)


def budget(g: GroupedRewards, *, budget: float = 1.0) -> Array:
    """Reward budgeting: the group's budget B split in proportion to the reward gaps."""
    if (
        isinstance(budget, bool)
        or not isinstance(budget, (int, float))
        or not (math.isfinite(budget) and budget > 0)
    ):
        raise ValueError(f"budget: expected a positive finite number, got {budget!r}")
    if g.raw_singletons is not None:
        raise ValueError(
            "singletons: expected 'skip' for the budget estimator (a group of one has no "
            "reward gap to share out), got 'raw'"
        )
    xp, keep = g.xp, g.kept()
    total_gap = g.sum(g.gap)
    share = xp.where(keep, budget / _safe(xp, keep, total_gap), 0)
    baseline = xp.where(keep, budget / _safe(xp, keep, g.count), 0)
    return g.only_present(g.gap * g.expand(share) - g.expand(baseline))


def group_normalized(g: GroupedRewards, *, eps: float = 1e-6, std_correction: int = 1) -> Array:
    """GRPO: ``(r - mean) / (std + eps)`` per group (unbiased std by default)."""
    number = isinstance(eps, (int, float)) and not isinstance(eps, bool)
    if not (number and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps: expected a finite number >= 0, got {eps!r}")
    if isinstance(std_correction, bool) or std_correction not in (0, 1):
        raise ValueError(
            f"std_correction: expected 0 (biased std) or 1 (unbiased), got {std_correction!r}"
        )
    xp, keep = g.xp, g.kept()
    deviation = _deviation(g)
    dof = g.count - std_correction
    std = xp.sqrt(g.sum(deviation * deviation) / _safe(xp, dof > 0, dof))
    inverse_std = xp.where(keep, 1 / _safe(xp, keep, std + eps), 0)
    return _with_raw_singletons(g, deviation * g.expand(inverse_std), scale=1 + eps)


def dr(g: GroupedRewards) -> Array:
    """Dr. GRPO: ``r - mean`` per group, no std division."""
    keep = g.xp.astype(g.kept(), g.rewards.dtype)
    return _with_raw_singletons(g, _deviation(g) * g.expand(keep))


def rloo(g: GroupedRewards) -> Array:
    """RLOO: ``r_i - mean of the others``, which is ``n / (n - 1) * (r_i - mean)``."""
    xp, keep = g.xp, g.kept()
    factor = xp.where(keep, g.count / _safe(xp, g.count > 1, g.count - 1), 0)
    return _with_raw_singletons(g, _deviation(g) * g.expand(factor))
