"""The estimators: each is the maths alone, written once in group reductions.

An estimator receives the batch as :class:`~advbudget.core._stats.GroupedRewards` and its
options (already checked by the catalogue, ``_catalogue``) and returns advantages as rows.
"""

from __future__ import annotations

from ._arrays import Array
from ._stats import GroupedRewards, deviation, safe, with_raw_singletons


def budget(g: GroupedRewards, *, budget: float = 1.0) -> Array:
    """Reward budgeting: the group's budget B split in proportion to the reward gaps."""
    xp, keep = g.xp, g.kept()
    total_gap = g.sum(g.gap)
    share = xp.where(keep, budget / safe(xp, keep, total_gap), 0)
    baseline = xp.where(keep, budget / safe(xp, keep, g.count), 0)
    return g.only_present(g.gap * g.expand(share) - g.expand(baseline))


def group_normalized(g: GroupedRewards, *, eps: float = 1e-6, std_correction: int = 1) -> Array:
    """GRPO: ``(r - mean) / (std + eps)`` per group (unbiased std by default)."""
    xp, keep = g.xp, g.kept()
    centred = deviation(g)
    dof = g.count - std_correction
    std = xp.sqrt(g.sum(centred * centred) / safe(xp, dof > 0, dof))
    inverse_std = xp.where(keep, 1 / safe(xp, keep, std + eps), 0)
    return with_raw_singletons(g, centred * g.expand(inverse_std), scale=1 + eps)


def dr(g: GroupedRewards) -> Array:
    """Dr. GRPO: ``r - mean`` per group, no std division."""
    keep = g.xp.astype(g.kept(), g.rewards.dtype)
    return with_raw_singletons(g, deviation(g) * g.expand(keep))


def rloo(g: GroupedRewards) -> Array:
    """RLOO: ``r_i - mean of the others``, which is ``n / (n - 1) * (r_i - mean)``."""
    xp, keep = g.xp, g.kept()
    factor = xp.where(keep, g.count / safe(xp, g.count > 1, g.count - 1), 0)
    return with_raw_singletons(g, deviation(g) * g.expand(factor))
