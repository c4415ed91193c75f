"""Estimators with statistics over the whole batch, not only per group: adapters call the
core on the whole (gathered) batch for them."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

from ... import checks
from .._arrays import Array
from .._stats import GroupedRewards, batch_mean_var, batch_whiten
from ._rules import EPS, STD_CORRECTION, TOKEN_WEIGHTS, WHITEN_NOTE, WHITENING
from ._spec import EstimatorSpec, Rule, declare_into
from .group import group_normalized, rloo

SPECS: list[EstimatorSpec] = []
declare = declare_into(SPECS)


@declare(
    name="gpg",
    formula="α · (r − mean) / f_norm, α = N / (rollouts of the batch with r ≠ 0)",
    reference="GPG, arXiv 2504.02546 (verl's gpg)",
    rules={"f_norm": Rule(checks.positive_finite, "divides the advantage")},
    raw_singletons=True,
    batch_statistics=(
        "α = N / max(1, number of nonzero rewards), N the rollouts with a reward, over "
        "the whole batch"
    ),
    slope_of="dr",
)
def gpg(g: GroupedRewards, *, f_norm: float = 1.0) -> Array:
    """GPG: ``alpha * (r - mean) / f_norm``, alpha = N / (rewards != 0 in the batch)."""
    xp = g.xp
    centred = g.with_raw_singletons(g.deviation() * g.kept_rows())
    nonzero = xp.sum(g.only_present(xp.astype(g.rewards != 0, g.rewards.dtype)))
    alpha = xp.sum(g.count) / xp.maximum(nonzero, xp.ones_like(nonzero))
    return centred * (alpha / f_norm)


# verl's and OpenRLHF's REINFORCE++-baseline: one declaration, two sets of defaults.
_WHITENED_BASELINE: dict[str, Any] = {
    "formula": "whiten(r − mean): the group-centred reward whitened over the batch's tokens",
    "rules": WHITENING,
    "inputs": (TOKEN_WEIGHTS,),
    "skips": "never",
    "raw_singletons": True,
    "batch_statistics": WHITEN_NOTE,
    "slope_of": "dr",
}


@declare(
    name="reinforce_plus_plus_baseline",
    reference="REINFORCE++-baseline, arXiv 2501.03262 (verl's reinforce_plus_plus_baseline)",
    **_WHITENED_BASELINE,
)
def reinforce_plus_plus_baseline(
    g: GroupedRewards,
    *,
    std_correction: int = 1,
    var_eps: float = 1e-8,
    var_floor: float = 0.0,
    std_norm: bool = True,
    response_lengths: Array | None = None,
) -> Array:
    """REINFORCE++-baseline with verl's defaults: ``r - mean``, whitened over the tokens."""
    return batch_whiten(
        g,
        g.with_raw_singletons(g.deviation()),
        weights=response_lengths,
        correction=std_correction,
        var_eps=var_eps,
        var_floor=var_floor,
        std_norm=std_norm,
    )


@declare(
    name="reinforce_baseline",
    reference="REINFORCE++-baseline, arXiv 2501.03262 (OpenRLHF's reinforce_baseline)",
    **_WHITENED_BASELINE,
)
def reinforce_baseline(
    g: GroupedRewards,
    *,
    std_correction: int = 0,
    var_eps: float = 0.0,
    var_floor: float = 1e-8,
    std_norm: bool = True,
    response_lengths: Array | None = None,
) -> Array:
    """REINFORCE++-baseline with OpenRLHF's defaults: ``r - mean``, whitened over the tokens."""
    return reinforce_plus_plus_baseline(
        g,
        std_correction=std_correction,
        var_eps=var_eps,
        var_floor=var_floor,
        std_norm=std_norm,
        response_lengths=response_lengths,
    )


@declare(
    name="reinforce",
    formula="whiten(r): the reward, no baseline, whitened over the batch's tokens",
    reference="REINFORCE++, arXiv 2501.03262 (OpenRLHF's reinforce, γ = 1, no KL)",
    rules=WHITENING,
    inputs=(TOKEN_WEIGHTS,),
    skips="never",
    batch_statistics=WHITEN_NOTE,
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


@declare(
    name="grpo_batch_std",
    formula="(r − mean) / (std of every reward of the batch + eps)",
    reference=(
        'Lite PPO, arXiv 2508.08221 (TRL\'s GRPOTrainer scale_rewards="batch"; '
        '"group" is grpo, "none" is dr)'
    ),
    rules={"eps": EPS, "std_correction": STD_CORRECTION},
    batch_statistics="the std of the raw rewards of the whole batch (unbiased by default)",
    slope_of="dr",
)
def grpo_batch_std(g: GroupedRewards, *, eps: float = 1e-4, std_correction: int = 1) -> Array:
    """``(r - group mean) / (std of every reward in the batch + eps)``."""
    _, variance = batch_mean_var(g, g.rewards, correction=std_correction)
    return g.deviation() * g.kept_rows() / (g.xp.sqrt(variance) + eps)


@declare(
    name="rloo_normalized",
    formula="(A − mean A) / (std A + eps), A rloo's advantage, over the batch",
    reference="RLOO, arXiv 2402.14740 (TRL's RLOOTrainer normalize_advantages=True)",
    rules={"eps": EPS, "std_correction": STD_CORRECTION},
    batch_statistics=(
        "the mean and std of rloo's advantages over every rollout of the batch in a "
        "group of two or more (one per rollout, not token-weighted)"
    ),
    slope_of="rloo",
)
def rloo_normalized(g: GroupedRewards, *, eps: float = 1e-4, std_correction: int = 1) -> Array:
    """RLOO's advantages whitened over the batch: ``(A - mean(A)) / (std(A) + eps)``."""
    xp = g.xp
    advantages = rloo(g)
    # Groups of one have no leave-one-out baseline: TRL leaves them out of the statistics.
    weights = g.expand(xp.astype(g.count > 1, g.rewards.dtype))
    mean, variance = batch_mean_var(g, advantages, weights=weights, correction=std_correction)
    whitened = (advantages - mean) / (xp.sqrt(variance) + eps)
    return g.only_present(whitened * g.kept_rows())


def _weights(name: str, value: Any) -> tuple[float, ...] | None:
    """None, or one finite number per reward component (the count is checked per batch)."""
    if value is None:
        return None
    listlike = isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict))
    items = list(value) if listlike else []
    if not items or not all(
        isinstance(w, numbers.Real) and not isinstance(w, bool) and math.isfinite(w) for w in items
    ):
        raise ValueError(
            f"{name}: expected a list of finite numbers, one per reward component, or None "
            f"(equal weights), got {value!r}"
        )
    return tuple(float(w) for w in items)


@declare(
    name="gdpo",
    formula=(
        "whiten(Σ_k w_k · (r_k − mean_k) / (std_k + eps)): each reward component normalised "
        "in its group, then summed and whitened over the batch"
    ),
    reference=(
        "GDPO, arXiv 2601.05242 (verl's gdpo; TRL's GRPOTrainer "
        'multi_objective_aggregation="normalize_then_sum")'
    ),
    rules={
        "eps": Rule(checks.nonnegative_finite, "added to each component's group std"),
        "std_correction": Rule(
            STD_CORRECTION.check,
            "1: unbiased group std and batch variance, as verl and TRL; 0: biased",
        ),
        "weights": Rule(_weights, "w_k, one per component; None: all 1"),
        "var_eps": Rule(
            checks.nonnegative_finite, "added to the batch variance, as verl's masked_whiten"
        ),
        "std_eps": Rule(checks.nonnegative_finite, "added to the batch std; TRL's is 1e-4"),
    },
    inputs=(TOKEN_WEIGHTS,),
    components=True,
    skips="never",
    raw_singletons=True,
    batch_statistics=(
        "the mean and variance of the summed normalised components over every response "
        "token of the batch (each rollout weighted by response_lengths, or 1 without "
        "them: TRL's per-rollout statistics)"
    ),
)
def gdpo(
    g: GroupedRewards,
    *,
    eps: float = 1e-6,
    std_correction: int = 1,
    weights: tuple[float, ...] | None = None,
    var_eps: float = 1e-8,
    std_eps: float = 0.0,
    response_lengths: Array | None = None,
) -> Array:
    """GDPO with verl's defaults: ``Σ_k w_k · grpo(r_k)``, whitened over the batch's tokens.

    Each component is GRPO-normalised in its group on its own (a component tied in a
    group adds 0 there); the sum is then ``(A − mean) / (sqrt(var + var_eps) + std_eps)``
    over the batch. With one component it is grpo followed by that whitening.

    The frameworks differ in the constants and in what the batch statistics weigh:
    verl 0.9.1 (``compute_gdpo_outcome_advantage``): eps 1e-6, unbiased stds,
    ``masked_whiten`` over the response tokens (var + 1e-8), a group of one scored raw,
    exact ties. TRL 1.16 (``normalize_then_sum``): eps 1e-4, unbiased stds, per rollout
    (not per token) ``(A − mean) / (std + 1e-4)``, a NaN component left out of its group
    (``nan_policy="omit"``). NeMo-RL: a leave-one-out baseline per component by default,
    no division where a group's std is 0, and ``(A − mean) / std`` per rollout, not
    mirrored here.
    """
    if not g.components:
        raise ValueError(
            "rewards: the gdpo estimator needs reward components ([N, K]); call it through "
            "compute_advantages, which lays them out"
        )
    if weights is not None and len(weights) != len(g.components):
        raise ValueError(
            f"weights: expected one weight per reward component ({len(g.components)}), "
            f"got {len(weights)}: {list(weights)}"
        )
    total = None
    for w, component in zip(weights or [1.0] * len(g.components), g.components, strict=True):
        term = group_normalized(component, eps=eps, std_correction=std_correction)
        term = term if w == 1.0 else w * term
        total = term if total is None else total + term
    return batch_whiten(
        g,
        total,
        weights=response_lengths,
        correction=std_correction,
        var_eps=var_eps,
        std_eps=std_eps,
    )
