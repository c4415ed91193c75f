"""Group-relative estimators: each rollout against the other rollouts of its prompt."""

from __future__ import annotations

import warnings

from ... import checks
from .._arrays import Array, is_traced
from .._stats import GroupedRewards
from .._warnings import caller_stacklevel
from .._weights import dqw_weights
from ._rules import EPS, RESPONSE_LENGTHS, STD_CORRECTION
from ._spec import EstimatorSpec, Rule, declare_into

SPECS: list[EstimatorSpec] = []
declare = declare_into(SPECS)


@declare(
    name="budget",
    formula="B·(r−min)/Σ(r−min) − B/G",
    reference="Reward budgeting, arXiv 2611.05942",
    aliases=("reward_budget",),
    rules={"budget": Rule(checks.positive_finite, "the total budget B")},
)
def budget(g: GroupedRewards, *, budget: float = 1.0) -> Array:
    """Reward budgeting: the group's budget B split in proportion to the reward gaps."""
    xp, keep = g.xp, g.kept()
    share = xp.where(keep, budget / g.safe(keep, g.sum(g.gap)), 0)
    baseline = xp.where(keep, budget / g.safe(keep, g.count), 0)
    return g.only_present(g.gap * g.expand(share) - g.expand(baseline))


@declare(
    name="grpo",
    formula="(r − mean) / (std + eps)",
    reference="GRPO, arXiv 2402.03300",
    aliases=("group_norm",),
    rules={"eps": EPS, "std_correction": STD_CORRECTION},
    raw_singletons=True,
)
def group_normalized(g: GroupedRewards, *, eps: float = 1e-6, std_correction: int = 1) -> Array:
    """GRPO: ``(r - mean) / (std + eps)`` per group (unbiased std by default)."""
    xp, keep, deviation = g.xp, g.kept(), g.deviation()
    std = g.std(std_correction, deviation=deviation)
    inverse_std = xp.where(keep, 1 / g.safe(keep, std + eps), 0)
    return g.with_raw_singletons(deviation * g.expand(inverse_std), scale=1 + eps)


@declare(
    name="dr",
    formula="r − mean",
    reference="Dr. GRPO, arXiv 2503.20783",
    aliases=("dr_grpo",),
    raw_singletons=True,
)
def dr(g: GroupedRewards) -> Array:
    """Dr. GRPO: ``r - mean`` per group, no std division."""
    return g.with_raw_singletons(g.deviation() * g.kept_rows())


@declare(
    name="rloo",
    formula="r − mean of the others",
    reference="RLOO, arXiv 2402.14740",
    raw_singletons=True,
)
def rloo(g: GroupedRewards) -> Array:
    """RLOO: ``r_i - mean of the others``, which is ``n / (n - 1) * (r_i - mean)``."""
    xp, keep = g.xp, g.kept()
    factor = xp.where(keep, g.count / g.safe(g.count > 1, g.count - 1), 0)
    return g.with_raw_singletons(g.deviation() * g.expand(factor))


@declare(
    name="maxrl",
    formula="(r − mean) / (mean + eps)",
    reference=(
        "MaxRL, arXiv 2602.02710 (SkyRL's maxrl, prime-rl's max_rl; "
        "a group of one scores r − 0 under singletons='raw')"
    ),
    rules={"eps": Rule(checks.nonnegative_finite, "added to the group mean")},
    raw_singletons=True,
)
def maxrl(g: GroupedRewards, *, eps: float = 1e-6) -> Array:
    """MaxRL: ``(r - mean) / (mean + eps)`` per group, the group mean as the scale.

    On 0/1 rewards it is G times budget's advantage with B = 1 (up to eps). A group whose
    mean is <= 0 (DAPO's ±1 reward with few correct) flips or explodes the scale, so it
    warns: budgeting's shift by the group minimum has no such case.
    """
    xp, keep = g.xp, g.kept()
    mean = g.mean()
    if not is_traced(mean):
        _warn_if_mean_not_positive(g, mean)
    scale = xp.where(keep, 1 / g.safe(keep, mean + eps), 0)
    return g.with_raw_singletons(g.deviation() * g.expand(scale))


def _warn_if_mean_not_positive(g: GroupedRewards, mean: Array) -> None:

    xp = g.xp
    bad = g.kept() & (mean <= 0)
    if not bool(xp.any(bad)):
        return
    flat = g.groups.per_group(bad)
    count = int(xp.sum(xp.astype(flat, xp.int32)))
    first = int(xp.argmax(xp.astype(flat, xp.int32)))
    first_mean = float(g.groups.per_group(mean)[first])
    warnings.warn(
        f"rewards: maxrl expects a positive group mean (it divides by it), got {count} "
        f"group(s) with a reward gap and mean <= 0, the first group {first} (in order of "
        f"appearance) with mean {first_mean:.4g}: a negative mean flips the sign of every "
        "advantage in the group, a zero mean divides by eps; shift the rewards to be >= 0 "
        "(0/1 instead of ±1) or use budget",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


@declare(
    name="dgpo",
    formula="G·(r − mean) / (Σ|r − mean| + eps), × DQW",
    reference=(
        "DGPO, arXiv 2601.20614 (MathForge: DGAE, mean-absolute-deviation scaled, times the "
        "question weights of group_weight='dqw')"
    ),
    rules={
        "eps": Rule(checks.nonnegative_finite, "added to the sum of absolute deviations"),
        "temperature": Rule(checks.positive_finite, "DQW's softmax temperature"),
        "dqw": Rule(checks.boolean, "False: DGAE alone (MathForge's enable_dgpo_dqw=False)"),
    },
    batch_statistics=(
        "DQW's softmax over the kept groups of the whole batch (none with dqw=False)"
    ),
)
def dgpo(
    g: GroupedRewards, *, eps: float = 1e-4, temperature: float = 2.0, dqw: bool = True
) -> Array:
    """DGPO: DGAE ``n (r - mean) / (sum |r - mean| + eps)`` per group (n rollouts with a
    reward), times DGPO's question weights over the batch's kept groups
    (:func:`~advbudget.core._weights.dqw_weights`, from each group's solved share)."""
    xp, keep = g.xp, g.kept()
    centred = g.deviation()
    scale = xp.where(keep, g.count / (g.sum(xp.abs(centred)) + eps), 0)
    rows = centred * g.expand(scale)
    if dqw:
        rows = rows * g.expand(dqw_weights(g, g.solved_share(), temperature=temperature))
    return rows


@declare(
    name="opo",
    formula="r − Σ len·r / Σ len (the length-weighted group mean)",
    reference="OPO, arXiv 2505.23585 (verl's opo)",
    inputs=(RESPONSE_LENGTHS,),
    raw_singletons=True,
)
def opo(g: GroupedRewards, *, response_lengths: Array) -> Array:
    """OPO: ``r - sum(len * r) / sum(len)`` per group, the length-weighted group mean."""
    xp = g.xp
    lengths = g.only_present(response_lengths)
    total = g.sum(lengths)
    weighted = g.sum(lengths * g.gap) / g.safe(total > 0, total)
    # A group whose responses are all empty has no length weights: its plain mean.
    plain = g.sum(g.gap) / g.safe(g.count > 0, g.count)
    baseline = xp.where(total > 0, weighted, plain)
    centred = g.only_present(g.gap - g.expand(baseline))
    return g.with_raw_singletons(centred * g.kept_rows())
