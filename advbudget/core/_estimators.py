"""The estimators: each is the maths alone, written once in group reductions.

An estimator receives the batch as :class:`~advbudget.core._stats.GroupedRewards` and its
options (already checked by the catalogue, ``_catalogue``) and returns advantages as rows.
"""

from __future__ import annotations

import math

from ._arrays import Array
from ._stats import (
    GroupedRewards,
    batch_mean_var,
    batch_whiten,
    deviation,
    safe,
    with_raw_singletons,
)


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


def _kept(g: GroupedRewards) -> Array:
    """Rows: 1 in groups that get an update, 0 elsewhere (compute dtype)."""
    return g.expand(g.xp.astype(g.kept(), g.rewards.dtype))


def dr(g: GroupedRewards) -> Array:
    """Dr. GRPO: ``r - mean`` per group, no std division."""
    return with_raw_singletons(g, deviation(g) * _kept(g))


def rloo(g: GroupedRewards) -> Array:
    """RLOO: ``r_i - mean of the others``, which is ``n / (n - 1) * (r_i - mean)``."""
    xp, keep = g.xp, g.kept()
    factor = xp.where(keep, g.count / safe(xp, g.count > 1, g.count - 1), 0)
    return with_raw_singletons(g, deviation(g) * g.expand(factor))


def opo(g: GroupedRewards, *, response_lengths: Array) -> Array:
    """OPO: ``r - sum(len * r) / sum(len)`` per group, the length-weighted group mean."""
    xp = g.xp
    lengths = g.only_present(response_lengths)
    total = g.sum(lengths)
    weighted = g.sum(lengths * g.gap) / safe(xp, total > 0, total)
    # A group whose responses are all empty has no length weights: its plain mean.
    plain = g.sum(g.gap) / safe(xp, g.count > 0, g.count)
    baseline = xp.where(total > 0, weighted, plain)
    centred = g.only_present(g.gap - g.expand(baseline))
    return with_raw_singletons(g, centred * _kept(g))


def grpo_passk(
    g: GroupedRewards,
    *,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
    std_correction: int = 1,
) -> Array:
    """Pass@k: a group's unique best rollout gets ``(r_max - r_second) / (std + eps)``."""
    xp, keep = g.xp, g.kept()
    dtype = g.rewards.dtype
    rewards = g.rewards if g.present is None else xp.where(g.present, g.rewards, -math.inf)
    top = g.groups.max(rewards)
    is_top = rewards == g.expand(top)
    unique = keep & (g.sum(xp.astype(is_top, dtype)) == 1)
    second = g.groups.max(xp.where(is_top, -math.inf, rewards))
    # 0 where the best is tied or the group skipped (top is -inf when every reward is NaN).
    top = xp.where(keep, top, 0)
    gain = top - xp.where(unique, second, top)
    if norm_adv_by_std:
        centred = deviation(g)
        dof = g.count - std_correction
        std = xp.sqrt(g.sum(centred * centred) / safe(xp, dof > 0, dof))
        gain = gain / safe(xp, unique, std + eps)
    return xp.where(is_top & g.expand(unique), g.expand(gain), 0)


def gpg(g: GroupedRewards, *, f_norm: float = 1.0) -> Array:
    """GPG: ``alpha * (r - mean) / f_norm``, alpha = N / (rewards != 0 in the batch)."""
    xp = g.xp
    dtype = g.rewards.dtype
    centred = with_raw_singletons(g, deviation(g) * _kept(g))
    nonzero = xp.sum(g.only_present(xp.astype(g.rewards != 0, dtype)))
    alpha = xp.sum(g.count) / xp.maximum(nonzero, xp.ones_like(nonzero))
    return centred * (alpha / f_norm)


def remax(g: GroupedRewards, *, reward_baselines: Array) -> Array:
    """ReMax: ``r - b``, b the reward of the prompt's greedy rollout."""
    return g.only_present(g.rewards - reward_baselines)


def reinforce_baseline(
    g: GroupedRewards,
    *,
    std_correction: int = 0,
    var_eps: float = 0.0,
    var_floor: float = 1e-8,
    std_norm: bool = True,
    response_lengths: Array | None = None,
) -> Array:
    """REINFORCE++-baseline: ``r - mean`` per group, then whitened over the batch's tokens."""
    return batch_whiten(
        g,
        with_raw_singletons(g, deviation(g)),
        weights=response_lengths,
        correction=std_correction,
        var_eps=var_eps,
        var_floor=var_floor,
        std_norm=std_norm,
    )


def reinforce(
    g: GroupedRewards,
    *,
    std_correction: int = 0,
    var_eps: float = 0.0,
    var_floor: float = 1e-8,
    std_norm: bool = True,
    response_lengths: Array | None = None,
) -> Array:
    """REINFORCE: the reward, whitened over the batch's tokens (no baseline)."""
    return batch_whiten(
        g,
        g.only_present(g.rewards),
        weights=response_lengths,
        correction=std_correction,
        var_eps=var_eps,
        var_floor=var_floor,
        std_norm=std_norm,
    )


def grpo_batch_std(g: GroupedRewards, *, eps: float = 1e-4, std_correction: int = 1) -> Array:
    """``(r - group mean) / (std of every reward in the batch + eps)``."""
    xp = g.xp
    _, variance = batch_mean_var(g, g.rewards, correction=std_correction)
    return deviation(g) * _kept(g) / (xp.sqrt(variance) + eps)


def rloo_normalized(g: GroupedRewards, *, eps: float = 1e-4, std_correction: int = 1) -> Array:
    """RLOO's advantages whitened over the batch: ``(A - mean(A)) / (std(A) + eps)``."""
    xp = g.xp
    advantages = rloo(g)
    # Groups of one have no leave-one-out baseline: TRL leaves them out of the statistics.
    weights = g.expand(xp.astype(g.count > 1, g.rewards.dtype))
    mean, variance = batch_mean_var(g, advantages, weights=weights, correction=std_correction)
    whitened = (advantages - mean) / (xp.sqrt(variance) + eps)
    return g.only_present(whitened * _kept(g))
