"""The public estimator functions: rewards in, one advantage per rollout out.

Each is :func:`compute_advantages` with its estimator fixed, and the same keyword names
across all of them. References: arXiv 2611.05942 (reward budgeting), arXiv 2402.03300
(GRPO), arXiv 2503.20783 (Dr. GRPO), arXiv 2402.14740 (RLOO).
"""

from __future__ import annotations

from typing import Any

from ._arrays import Array
from ._compute import compute_advantages
from ._finite import NanPolicy
from ._groups import Groups
from ._stats import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL, Singletons


def budget_advantage(
    rewards: Any,
    /,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    budget: float = 1.0,
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
) -> Array:
    """Reward-budgeted advantages: each prompt group shares out a fixed budget.

    Per group with rewards ``r`` and ``G`` rollouts: gaps ``g_i = r_i - min(r)``, shares
    ``R_i = budget * g_i / sum(g)``, advantage ``A_i = R_i - budget / G``. Groups with no
    reward gap (all equal, or a single rollout) are skipped: advantage 0. With binary
    rewards and k of G correct, a correct rollout gets ``budget * (1/k - 1/G)`` and a
    wrong one ``-budget / G``: hard prompts get strong updates, easy ones weak.

    Args:
        rewards: ``[N]`` one reward per rollout (numpy, torch, jax or any Array API
            array, or a list); ints and bools are fine.
        group_size: contiguous groups of ``G`` rollouts.
        group_ids: one group label per rollout (ints or strings, any order and sizes).
        groups: a :class:`Groups` reused from an earlier result.
        budget: the total reward budget ``B > 0`` of each group.
        nan_policy: ``"raise"`` or ``"omit"`` (see :func:`compute_advantages`).
        tie_rtol, tie_atol: reward spreads within this tolerance count as ties.

    Returns:
        ``[N]`` advantages: same namespace, device and shape as ``rewards``; float dtype,
        at least float32 (float64 stays float64).

    References:
        Reward Budgeting Reduces Premature Convergence in Reinforcement Learning for
        LLM Reasoning, arXiv 2611.05942.

    Examples:
        >>> import numpy as np
        >>> from advbudget import budget_advantage
        >>> rewards = np.array([1, 0, 0, 0, 1, 1, 1, 0])  # 1 of 4 correct, then 3 of 4
        >>> budget_advantage(rewards, group_size=4).round(4)
        array([ 0.75  , -0.25  , -0.25  , -0.25  ,  0.0833,  0.0833,  0.0833,
               -0.25  ])
    """
    return compute_advantages(
        rewards,
        "budget",
        group_size=group_size,
        group_ids=group_ids,
        groups=groups,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        budget=budget,
    ).advantages


def group_normalized_advantage(
    rewards: Any,
    /,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    eps: float = 1e-6,
    std_correction: int = 1,
    singletons: Singletons = "skip",
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
) -> Array:
    """GRPO's group-normalised advantages: ``(r - mean) / (std + eps)`` per group.

    ``std_correction=1`` is the unbiased std that verl, TRL and OpenRLHF all use (their
    eps: verl 1e-6, TRL 1e-4, OpenRLHF 1e-9). Groups without a reward gap get 0.

    Args:
        rewards, group_size, group_ids, groups, nan_policy, tie_rtol, tie_atol: as for
            :func:`budget_advantage`.
        eps: added to the std before dividing.
        std_correction: 1 for the unbiased std (N - 1), 0 for the biased one (N).
        singletons: ``"skip"`` gives a group of one 0; ``"raw"`` gives it
            ``r / (1 + eps)`` (mean 0, std 1: verl's convention).

    References:
        DeepSeekMath, arXiv 2402.03300.

    Examples:
        >>> import numpy as np
        >>> from advbudget import group_normalized_advantage
        >>> group_normalized_advantage(np.array([1.0, 0.0, 0.0, 0.0]), group_size=4, eps=0.0)
        array([ 1.5, -0.5, -0.5, -0.5])
    """
    return compute_advantages(
        rewards,
        "grpo",
        group_size=group_size,
        group_ids=group_ids,
        groups=groups,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
        eps=eps,
        std_correction=std_correction,
    ).advantages


def dr_advantage(
    rewards: Any,
    /,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    singletons: Singletons = "skip",
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
) -> Array:
    """Dr. GRPO's advantages: ``r - mean`` per group, without the std division.

    (Dr. GRPO also sums the token losses with a constant normaliser; that is the
    trainer's loss setting, which the adapters switch on.)

    Args:
        As for :func:`group_normalized_advantage`, without ``eps``/``std_correction``;
        ``singletons="raw"`` gives a group of one its raw reward.

    References:
        Understanding R1-Zero-Like Training: A Critical Perspective, arXiv 2503.20783.

    Examples:
        >>> import numpy as np
        >>> from advbudget import dr_advantage
        >>> dr_advantage(np.array([1.0, 0.0, 0.0, 0.0]), group_size=4)
        array([ 0.75, -0.25, -0.25, -0.25])
    """
    return compute_advantages(
        rewards,
        "dr",
        group_size=group_size,
        group_ids=group_ids,
        groups=groups,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
    ).advantages


def rloo_advantage(
    rewards: Any,
    /,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    singletons: Singletons = "skip",
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
) -> Array:
    """RLOO's leave-one-out advantages: ``r_i - mean of the other rewards in the group``.

    Args:
        As for :func:`dr_advantage`.

    References:
        Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
        Feedback in LLMs, arXiv 2402.14740.

    Examples:
        >>> import numpy as np
        >>> from advbudget import rloo_advantage
        >>> rloo_advantage(np.array([1.0, 0.0, 0.0, 0.0]), group_size=4).round(4)
        array([ 1.    , -0.3333, -0.3333, -0.3333])
    """
    return compute_advantages(
        rewards,
        "rloo",
        group_size=group_size,
        group_ids=group_ids,
        groups=groups,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
    ).advantages
