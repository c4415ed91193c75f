"""Estimators that train for pass@k: credit to the rollouts that make a group succeed."""

from __future__ import annotations

import math
from typing import Any

from ... import checks
from .._arrays import Array, is_traced
from .._stats import GroupedRewards
from ._rules import EPS, STD_CORRECTION
from ._spec import EstimatorSpec, Rule, declare_into

SPECS: list[EstimatorSpec] = []
declare = declare_into(SPECS)


@declare(
    name="grpo_passk",
    formula=(
        "(r_max − r_second) / (std + eps) for a group's best rollout if it is the only "
        "best, 0 for every other rollout"
    ),
    reference="Pass@k training, arXiv 2503.19595 (verl's grpo_passk)",
    rules={
        "norm_adv_by_std": Rule(
            checks.boolean,
            "False: r_max − r_second, not divided by the std (verl's norm_adv_by_std_in_grpo)",
        ),
        "eps": EPS,
        "std_correction": STD_CORRECTION,
    },
)
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
        gain = gain / g.safe(unique, g.std(std_correction) + eps)
    return xp.where(is_top & g.expand(unique), g.expand(gain), 0)


def _k(name: str, value: Any) -> int:
    return checks.int_at_least(name, value, 1)


@declare(
    name="passk",
    formula=(
        "correct: (1 − ρ) / (σ + eps); wrong: (1 − ρ − C(n−c−1, k−1)/C(n−1, k−1)) / (σ + eps), "
        "ρ = 1 − C(n−c, k)/C(n, k), σ = √(ρ(1 − ρ))"
    ),
    reference="Pass@k training (analytical advantage), arXiv 2508.10751 (RUCAIBox/Passk_Training)",
    rules={
        "k": Rule(_k, "the k of pass@k, 1 <= k <= the group size"),
        "eps": EPS,
        "norm_by_std": Rule(checks.boolean, "False: not divided by σ + eps"),
    },
)
def passk(g: GroupedRewards, *, k: int = 4, eps: float = 1e-6, norm_by_std: bool = True) -> Array:
    """Analytical pass@k: each rollout's mean pass@k reward over the k-subsets it is in,
    minus the group's (an unbiased pass@k estimate), over its std.

    Binary rewards: a rollout succeeds when it has its group's higher reward (0/1 and ±1
    alike); a group with more than two reward values is an error.
    """
    xp, keep = g.xp, g.kept()
    if not is_traced(g.rewards):
        _check_binary_groups(g, k)
    n = g.count
    successes = g.sum(xp.astype(g.gap > 0, g.rewards.dtype))  # the higher reward
    failures = n - successes
    zero = xp.zeros_like(n)
    all_fail = xp.ones_like(n)  # C(n - c, k) / C(n, k): no success among k drawn
    fail_given_one = xp.ones_like(n)  # C(n - c - 1, k - 1) / C(n - 1, k - 1)
    for i in range(k):
        all_fail = all_fail * xp.maximum(failures - i, zero) / g.safe(n > i, n - i)
        if i < k - 1:
            fail_given_one = (
                fail_given_one * xp.maximum(failures - 1 - i, zero) / g.safe(n > i + 1, n - 1 - i)
            )
    rho = 1 - all_fail
    correct = 1 - rho
    wrong = 1 - rho - fail_given_one
    if norm_by_std:
        sigma = xp.sqrt(rho * (1 - rho))
        correct, wrong = correct / (sigma + eps), wrong / (sigma + eps)
    correct, wrong = xp.where(keep, correct, 0), xp.where(keep, wrong, 0)
    return g.only_present(xp.where(g.gap > 0, g.expand(correct), g.expand(wrong)))


def _check_binary_groups(g: GroupedRewards, k: int) -> None:
    xp = g.xp
    top = g.groups.max(g.gap)
    middle = g.only_present(xp.astype((g.gap > 0) & (g.gap < g.expand(top)), g.gap.dtype))
    if bool(xp.any(g.sum(middle) > 0)):
        raise ValueError(
            "rewards: passk expects binary rewards (at most two values in a group), got a "
            "group with three or more; use budget or grpo for graded rewards"
        )
    too_small = g.kept() & (g.count < k)
    if bool(xp.any(too_small)):
        smallest = int(xp.min(xp.where(too_small, g.count, math.inf)))
        raise ValueError(
            f"k: expected at most the group size ({smallest}, the smallest group with a "
            f"reward gap), got {k}"
        )
