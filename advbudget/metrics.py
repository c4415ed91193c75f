"""What to log beside the advantages: κ, κ_eff and advantage statistics.

The definitions are in the docs (Method and theory, "Sharpness: κ and κ_eff").

``kappa`` is the sharpness a KL-regularised objective asks for, ``(r+ - r-) / beta``;
``kappa_eff`` is what one policy update actually did to the log-odds of the best and
worst rollout of each group. All functions take arrays of any namespace; the summaries
return Python floats ready for a logger.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from ._ledger import LEDGER_KEYS, PromptLedger, prompt_key
from .core import AdvantageResult, Groups
from .core._arrays import Array, as_array, check_same_device, device_of, to_host
from .core._kappa import (
    KappaPairs,
    kappa_eff_of_pairs,
    kappa_pairs,
    sequence_advantages,
    sequence_logprobs,
)

__all__ = [
    "DEFAULT_SOLVED_REWARD",
    "LEDGER_KEYS",
    "SUMMARY_KEYS",
    "GroupOutcomes",
    "KappaPairs",
    "PromptLedger",
    "advantage_metric_dict",
    "advantage_metrics",
    "check_solved_reward",
    "group_outcomes",
    "kappa",
    "kappa_eff",
    "kappa_eff_of_pairs",
    "kappa_metric_dict",
    "kappa_pairs",
    "oscillation",
    "prompt_key",
    "sequence_advantages",
    "sequence_logprobs",
    "summarize",
]

SUMMARY_KEYS = ("mean", "median", "std", "min", "max", "count")

#: A rollout is solved when its reward reaches this: the success value of 0/1 verifiers
#: and of DAPO's +-1.
DEFAULT_SOLVED_REWARD = 1.0


def kappa(reward_gap: Any, beta: float) -> Any:
    """The sharpness factor ``κ = reward_gap / β`` of KL-regularised RL.

    The optimum ``π* ∝ π_ref · exp(R / β)`` separates the log-odds of two responses whose
    rewards differ by ``reward_gap`` by exactly κ more than the reference does.

    Examples:
        >>> from advbudget.metrics import kappa
        >>> kappa(1.0, beta=0.001)
        1000.0
    """
    if (
        isinstance(beta, bool)
        or not isinstance(beta, (int, float))
        or not (math.isfinite(beta) and beta > 0)
    ):
        raise ValueError(f"beta: expected a positive finite KL coefficient, got {beta!r}")
    return reward_gap / beta


def kappa_eff(
    logp_old: Any,
    logp_new: Any,
    advantages: Any,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    response_mask: Any = None,
    length_normalized: bool = False,
) -> Array:
    """The realised sharpness of one update, per group with an advantage gap.

    For each group, ``o+`` is the rollout with the largest advantage and ``o-`` the one
    with the smallest (the first in batch order on ties), and
    ``κ_eff = [log π_new(o+) - log π_new(o-)] - [log π_old(o+) - log π_old(o-)]``.

    Args:
        logp_old, logp_new: log-probabilities of each rollout before and after the
            update: sequence log-probs ``[N]``, or per-token ``[N, T]`` with
            ``response_mask``.
        advantages: ``[N]`` the advantages the update used.
        group_size, group_ids, groups: the grouping, as for the estimators.
        response_mask: ``[N, T]``, needed with per-token log-probs.
        length_normalized: divide each sequence log-prob by its token count (needs
            per-token log-probs and ``response_mask``).

    Returns:
        ``[M']`` κ_eff of the groups whose advantages differ (group order), in the
        namespace of the inputs. Summarise it with :func:`summarize`.

    Examples:
        >>> import numpy as np
        >>> from advbudget.metrics import kappa_eff
        >>> old = np.array([-5.0, -4.0, -3.0, -6.0, -2.0, -2.0])
        >>> new = np.array([-4.0, -4.5, -3.0, -5.0, -2.0, -2.0])
        >>> adv = np.array([0.5, -0.5, -0.5, 0.5, 0.0, 0.0])
        >>> kappa_eff(old, new, adv, group_size=2)  # the third group has no gap
        array([1.5, 1. ])
    """
    advantages, xp = as_array(advantages, "advantages")
    if advantages.ndim != 1:
        raise ValueError(f"advantages: expected shape [N], got {tuple(advantages.shape)}")
    n = int(advantages.shape[0])
    old = _sequence(logp_old, "logp_old", n, response_mask, length_normalized)
    new = _sequence(logp_new, "logp_new", n, response_mask, length_normalized)
    for name, values in (("logp_old", old), ("logp_new", new)):
        check_same_device(advantages, values, "advantages", name)
    if groups is None:
        pairs = kappa_pairs(advantages, group_size=group_size, group_ids=group_ids)
    else:
        pairs = kappa_pairs(advantages, groups=groups)
    if xp.isdtype(advantages.dtype, "real floating"):  # as before: in the advantages' dtype
        old, new = xp.astype(old, advantages.dtype), xp.astype(new, advantages.dtype)
    return kappa_eff_of_pairs(pairs, old, new)


def _sequence(logp: Any, name: str, n: int, response_mask: Any, length_normalized: bool) -> Array:
    logp, _ = as_array(logp, name)
    if logp.ndim == 2:
        if response_mask is None:
            raise ValueError(f"response_mask: expected [N, T] with per-token {name}, got None")
        logp = sequence_logprobs(logp, response_mask, length_normalized=length_normalized)
    elif logp.ndim != 1:
        raise ValueError(f"{name}: expected [N] or [N, T] log-probs, got {tuple(logp.shape)}")
    elif length_normalized:
        raise ValueError(
            f"{name}: length_normalized needs per-token log-probs [N, T] and a "
            "response_mask, got sequence log-probs [N]"
        )
    if int(logp.shape[0]) != n:
        raise ValueError(f"{name}: expected {n} rollouts like advantages, got {logp.shape[0]}")
    return logp


def kappa_metric_dict(values: Any, prefix: str = "advbudget/") -> dict[str, float]:
    """:func:`summarize` of κ_eff values keyed for a logger:
    ``{prefix}kappa_eff/{mean,median,std,min,max,count}``.

    Examples:
        >>> import numpy as np
        >>> from advbudget.metrics import kappa_metric_dict
        >>> kappa_metric_dict(np.array([1.0, 2.0]))["advbudget/kappa_eff/mean"]
        1.5
    """
    return {f"{prefix}kappa_eff/{key}": value for key, value in summarize(values).items()}


def advantage_metric_dict(
    result: AdvantageResult,
    prefix: str = "advbudget/",
    *,
    solved_reward: float | None = DEFAULT_SOLVED_REWARD,
    outcome_rewards: Any = None,
) -> dict[str, float]:
    """:func:`advantage_metrics` keyed for a logger: ``{prefix}skipped_group_fraction``, ...

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> from advbudget.metrics import advantage_metric_dict
        >>> result = compute_advantages(np.array([1.0, 0.0, 1.0, 1.0]), "budget", group_size=2)
        >>> advantage_metric_dict(result)["advbudget/skipped_group_fraction"]
        0.5
        >>> advantage_metric_dict(result)["advbudget/solved_group_fraction"]
        0.5
    """
    metrics = advantage_metrics(
        result, solved_reward=solved_reward, outcome_rewards=outcome_rewards
    )
    return {prefix + key: value for key, value in metrics.items()}


def summarize(values: Any) -> dict[str, float]:
    """Mean, median, std (spread), min, max and count of a 1-D array, as Python floats.

    An empty array gives count 0 and NaN for the rest (nothing to summarise).

    Examples:
        >>> import numpy as np
        >>> from advbudget.metrics import summarize
        >>> summarize(np.array([1.0, 2.0, 6.0]))
        {'mean': 3.0, 'median': 2.0, 'std': 2.1602..., 'min': 1.0, 'max': 6.0, 'count': 3.0}
    """
    values, xp = as_array(values, "values")
    if values.ndim != 1:
        raise ValueError(f"values: expected a 1-D array, got shape {tuple(values.shape)}")
    count = int(values.shape[0])
    if count == 0:
        return {key: (0.0 if key == "count" else math.nan) for key in SUMMARY_KEYS}
    if not xp.isdtype(values.dtype, "real floating"):
        values = xp.astype(values, xp.float32)
    ordered = xp.sort(values)
    middle = count // 2
    median = ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {
        "mean": float(xp.mean(values)),
        "median": float(median),
        "std": float(xp.std(values)),
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
        "count": float(count),
    }


def advantage_metrics(
    result: AdvantageResult,
    *,
    solved_reward: float | None = DEFAULT_SOLVED_REWARD,
    reward_resolution: float | None = None,
    outcome_rewards: Any = None,
) -> dict[str, float]:
    """Advantage statistics of one batch, as Python floats for a logger.

    Keys: ``skipped_group_fraction`` (groups with no reward gap),
    ``unsolved_group_fraction`` and ``solved_group_fraction`` (groups where no rollout,
    or every rollout, reached ``solved_reward``: see :func:`group_outcomes`; left out when
    ``solved_reward`` is None, NaN when no group has a reward), ``advantage_gap_mean``
    (mean over the other groups of max - min advantage; NaN when every group was
    skipped), ``positive_advantage_fraction`` (rollouts with A > 0),
    ``valid_fraction`` (rollouts that take part in the update), the ``mean``,
    ``std``, ``min`` and ``max`` of the advantages, and ``nan_reward_fraction`` (rollouts
    whose reward was NaN, left out under ``nan_policy="omit"``). With a difficulty weight
    (``compute_advantages(..., group_weight=...)``): ``group_weight_mean``, ``_min`` and
    ``_max``, over the rollouts that take part in the update (NaN when none does).

    The spread of difficulty across the batch, on every call: ``group_mean_p10``,
    ``group_mean_p50`` and ``group_mean_p90``, percentiles (linear interpolation) over the
    groups with a reward of the mean of the rewards that entered each group's statistics
    (NaN when no group has one). With ``reward_resolution=eps``:
    ``near_tie_group_fraction``, the share of those groups whose reward spread is above
    the tie tolerance but at most ``eps`` (below the reward's resolution: a gap that may
    be noise; NaN with no group). With policy versions (``compute_advantages(...,
    policy_versions=...)``): ``staleness_mean`` and ``staleness_max`` over every rollout,
    ``stale_fraction`` (beyond ``max_staleness``; 0 without it) and
    ``mixed_version_group_fraction`` (groups whose rollouts come from more than one
    policy version). With ``outcome_rewards`` (the outcome of each rollout, where the
    rewards the estimator got are shaped: format or length terms on top of a verifier's
    0/1): ``outcome_disagreement_group_fraction``, the share of groups whose skip decision
    on the shaped rewards is not the one their outcomes give (a group all failed or all
    solved but trained on the shaping's spread, verl-recipe#125's "phantom gradients", or
    one skipped though its outcomes differ).

    The solved/unsolved split separates what ``skipped_group_fraction`` mixes (all wrong,
    all right). A large and flat ``unsolved_group_fraction`` over a run is the persistent
    regime in which reward budgeting helps; one that falls to zero is the transient one.

    Args:
        result: the batch's :class:`~advbudget.AdvantageResult`.
        solved_reward: the reward at which a rollout counts as solved (default 1.0, the
            success value of 0/1 verifiers and DAPO's +-1); None leaves the two keys out.
        reward_resolution: the smallest reward difference that means something (a
            positive number): adds ``near_tie_group_fraction``; None (default) leaves it out.
        outcome_rewards: one outcome per rollout, in the rewards' order (any namespace; NaN:
            no outcome): adds ``outcome_disagreement_group_fraction``, over the groups
            with a reward and an outcome (NaN with none); outcomes are tied within the
            call's tie tolerance. Not for multi-turn results.

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> from advbudget.metrics import advantage_metrics
        >>> result = compute_advantages(np.array([1.0, 0.0, 1.0, 1.0]), "budget", group_size=2)
        >>> advantage_metrics(result)["skipped_group_fraction"]
        0.5
        >>> metrics = advantage_metrics(result)
        >>> metrics["unsolved_group_fraction"], metrics["solved_group_fraction"]
        (0.0, 0.5)
    """
    solved_reward = check_solved_reward(solved_reward)
    if reward_resolution is not None:
        reward_resolution = _positive("reward_resolution", reward_resolution)
    outcome = None if outcome_rewards is None else _outcomes(result, outcome_rewards)
    if result.trajectories is not None:  # multi-turn rows: each trajectory counts once
        result = result.trajectories.result
    xp = result.grouped.xp
    advantages = result.advantages
    num_groups = result.num_groups
    kept = ~result.group_skipped
    num_kept = int(xp.count_nonzero(kept))
    gaps = xp.where(kept, result.group_advantage_gap, xp.zeros_like(result.group_advantage_gap))
    gap_mean = float(xp.sum(gaps)) / num_kept if num_kept else math.nan
    n = int(advantages.shape[0])
    metrics = {"skipped_group_fraction": (num_groups - num_kept) / num_groups}
    if solved_reward is not None:
        outcomes = group_outcomes(result, solved_reward)
        scored = int(xp.count_nonzero(outcomes.scored))
        for key, groups in (("unsolved", outcomes.unsolved), ("solved", outcomes.solved)):
            count = int(xp.count_nonzero(groups))
            metrics[f"{key}_group_fraction"] = count / scored if scored else math.nan
    if result.weights is not None:
        metrics.update(_weight_metrics(xp, result.weights, result.valid))
    metrics.update(_difficulty_spread(result, reward_resolution))
    if result.grouped.staleness is not None:
        metrics.update(_staleness_metrics(result))
    if outcome is not None:
        metrics["outcome_disagreement_group_fraction"] = _disagreement(result, outcome)
    dropped = result.grouped.dropped
    with_reward = float(xp.sum(result.grouped.count))
    if dropped is not None:  # left out as stale, not for a NaN reward
        with_reward += int(xp.count_nonzero(dropped))
    return {
        **metrics,
        "advantage_gap_mean": gap_mean,
        "positive_advantage_fraction": int(xp.count_nonzero(advantages > 0)) / n,
        "valid_fraction": int(xp.count_nonzero(result.valid)) / n,
        "advantage_mean": float(xp.mean(advantages)),
        "advantage_std": float(xp.std(advantages)),
        "advantage_min": float(xp.min(advantages)),
        "advantage_max": float(xp.max(advantages)),
        # rollouts left out for a NaN reward (nan_policy="omit"): the rest have a reward
        "nan_reward_fraction": 1 - with_reward / n,
    }


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    return float(value)


def _difficulty_spread(result: AdvantageResult, resolution: float | None) -> dict[str, float]:
    """Percentiles of the groups' mean rewards and, with ``resolution``, the share of
    near-tie groups, over the groups with a reward (host floats)."""
    g = result.grouped
    groups = g.groups
    scored = np.asarray(to_host(groups.per_group(g.count > 0)), dtype=bool)
    means = np.asarray(to_host(groups.per_group(g.mean())), dtype=np.float64)[scored]
    levels = (10, 50, 90)
    values = np.percentile(means, levels) if means.size else [math.nan] * 3
    out = {f"group_mean_p{q}": float(v) for q, v in zip(levels, values, strict=True)}
    if resolution is not None:
        # present (when given) already leaves out the padding slots of a padded layout
        high, low = _extremes(groups, g.rewards, g.present)
        high, low = np.asarray(to_host(high), np.float64), np.asarray(to_host(low), np.float64)
        high, low = high[scored], low[scored]
        spread = high - low
        near = (spread > _tie_tolerance(result, high, low)) & (spread <= resolution)
        out["near_tie_group_fraction"] = float(near.mean()) if near.size else math.nan
    return out


def _outcomes(result: AdvantageResult, values: Any) -> np.ndarray:
    """``outcome_rewards`` on the host as float64, one per rollout, checked."""
    if result.trajectories is not None:
        raise ValueError(
            "outcome_rewards: not supported on a multi-turn result (trajectory_ids=); "
            "give the trajectory-level call's result"
        )
    n = int(result.advantages.shape[0])
    try:
        outcome = np.asarray(to_host(values), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"outcome_rewards: expected one number per rollout, got {type(values).__name__}"
        ) from None
    if outcome.shape != (n,):
        raise ValueError(
            f"outcome_rewards: expected shape ({n},), one per rollout, got {outcome.shape}"
        )
    return outcome


def _disagreement(result: AdvantageResult, outcome: np.ndarray) -> float:
    """The share of groups (with a reward and an outcome) whose skip decision differs from
    the outcomes' tie, over the rollouts that entered the group's statistics."""
    g = result.grouped
    groups, xp = g.groups, g.xp
    rows = groups.rows(xp.asarray(outcome, dtype=g.rewards.dtype, device=device_of(g.rewards)))
    known = ~xp.isnan(rows)
    mask = known if g.present is None else (g.present & known)
    if groups.is_rollout is not None:
        mask = mask & groups.is_rollout
    high, low = _extremes(groups, rows, mask)
    high, low = np.asarray(to_host(high), np.float64), np.asarray(to_host(low), np.float64)
    with_reward = np.asarray(to_host(groups.per_group(g.count > 0)), dtype=bool)
    counted = with_reward & np.isfinite(high)  # not a group with no outcome
    tied = (high - low) <= _tie_tolerance(result, high, low)
    skipped = np.asarray(to_host(result.group_skipped), dtype=bool)
    disagree = (tied != skipped)[counted]
    return float(disagree.mean()) if disagree.size else math.nan


def _tie_tolerance(result: AdvantageResult, high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The call's tie tolerance of groups whose largest and smallest values are ``high``
    and ``low`` (host float64): a spread at most this is a tie."""
    g = result.grouped
    tolerance: np.ndarray = g.tie_atol + g.tie_rtol * np.maximum(np.abs(high), np.abs(low))
    return tolerance


def _extremes(groups: Groups, rows: Array, mask: Array | None) -> tuple[Array, Array]:
    """``[M]`` largest and smallest of ``rows`` in each group, over the rollouts of
    ``mask`` (None: every rollout; a padded layout's padding slots never count)."""
    xp = groups.xp
    mask = groups.is_rollout if mask is None else mask
    high = rows if mask is None else xp.where(mask, rows, -math.inf)
    low = rows if mask is None else xp.where(mask, rows, math.inf)
    return groups.per_group(groups.max(high)), groups.per_group(groups.min(low))


def _staleness_metrics(result: AdvantageResult) -> dict[str, float]:
    """Staleness over every rollout, and the share of groups of mixed versions."""
    g = result.grouped
    assert g.staleness is not None
    xp, groups = g.xp, g.groups
    age = np.asarray(to_host(g.staleness.staleness), dtype=np.float64)
    stale = np.asarray(to_host(g.staleness.stale), dtype=bool)
    high, low = _extremes(groups, groups.rows(g.staleness.versions), None)
    mixed = high > low
    return {
        "staleness_mean": float(age.mean()),
        "staleness_max": float(age.max()),
        "stale_fraction": float(stale.mean()),
        "mixed_version_group_fraction": int(xp.count_nonzero(mixed)) / groups.num_groups,
    }


def _weight_metrics(xp: Any, weights: Any, valid: Any) -> dict[str, float]:
    """Mean, min and max of the weights the updating rollouts got."""
    count = int(xp.count_nonzero(valid))
    if not count:
        return dict.fromkeys(
            ("group_weight_mean", "group_weight_min", "group_weight_max"), math.nan
        )
    zero = xp.zeros_like(weights)
    return {
        "group_weight_mean": float(xp.sum(xp.where(valid, weights, zero))) / count,
        "group_weight_min": float(xp.min(xp.where(valid, weights, zero + math.inf))),
        "group_weight_max": float(xp.max(xp.where(valid, weights, zero - math.inf))),
    }


class GroupOutcomes(NamedTuple):
    """Per group, ``[M]`` bools in group order (that of ``AdvantageResult.group_skipped``)."""

    solved: Array
    """Every rollout with a reward reached ``solved_reward``."""
    unsolved: Array
    """No rollout reached ``solved_reward``."""
    scored: Array
    """The group has at least one rollout with a reward (not NaN): the denominator."""


def group_outcomes(
    result: AdvantageResult, solved_reward: float = DEFAULT_SOLVED_REWARD
) -> GroupOutcomes:
    """Which groups were solved by every rollout, which by none.

    The rule: a rollout is *solved* when its reward is at least ``solved_reward`` less the
    tie tolerance the advantages were computed with,
    ``reward >= solved_reward - (tie_atol + tie_rtol * |solved_reward|)``: a reward the
    estimator would call tied with ``solved_reward`` counts as reaching it (with the
    default 1e-6, rounding noise such as ``0.1 + 0.2 + 0.7`` does; exact-tie conventions,
    ``tie_rtol = tie_atol = 0``, compare exactly). The same rule serves 0/1, +-1 and graded
    rewards; a reward above ``solved_reward`` is solved too.

    Only rollouts with a reward count: a NaN reward left out under ``nan_policy="omit"`` is
    not a rollout of its group here, and a group with no reward at all is neither solved
    nor unsolved (``scored`` False). A group of one is solved or unsolved, never both.
    Among the scored groups, solved + unsolved + mixed (some rollouts solved, some not)
    is every group; the fractions of :func:`advantage_metrics` are over the scored groups.

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> from advbudget.metrics import group_outcomes
        >>> rewards = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, np.nan, np.nan])
        >>> result = compute_advantages(rewards, "budget", group_size=2, nan_policy="omit")
        >>> outcome = group_outcomes(result)
        >>> outcome.solved.tolist(), outcome.unsolved.tolist(), outcome.scored.tolist()
        ([True, False, False, False], [False, True, False, False], [True, True, True, False])
    """
    bar = check_solved_reward(solved_reward)
    if bar is None:
        raise ValueError("solved_reward: expected a finite number, got None")
    g = result.grouped
    xp, groups = g.xp, result.groups
    threshold = bar - (result.tie_atol + result.tie_rtol * abs(bar))
    rows = g.rewards
    if g.present is None:
        low, high = groups.min_max(rows)
    else:  # NaN and padding slots never decide: +inf for the min, -inf for the max
        low = groups.min(xp.where(g.present, rows, math.inf))
        high = groups.max(xp.where(g.present, rows, -math.inf))
    scored = groups.per_group(g.count > 0)
    solved = groups.per_group(low >= threshold) & scored
    unsolved = groups.per_group(high < threshold) & scored
    return GroupOutcomes(solved=solved, unsolved=unsolved, scored=scored)


def check_solved_reward(value: Any, name: str = "solved_reward") -> float | None:
    """``value`` as a float, or None (the split off); anything else (a bool, a string, a
    non-finite number) raises a one-line ValueError naming ``name``.

    Examples:
        >>> from advbudget.metrics import check_solved_reward
        >>> check_solved_reward(1), check_solved_reward(None)
        (1.0, None)
        >>> check_solved_reward(True)
        Traceback (most recent call last):
        ...
        ValueError: solved_reward: expected a finite number or None, got True
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number or None, got {value!r}")
    return float(value)


def oscillation(batch_means: Any) -> float:
    """κ_eff's oscillation over training: the spread (std) of its per-step batch means.

    Examples:
        >>> from advbudget.metrics import oscillation
        >>> oscillation([2.0, 4.0, 2.0, 4.0])
        1.0
    """
    return summarize(as_array(batch_means, "batch_means")[0])["std"]
