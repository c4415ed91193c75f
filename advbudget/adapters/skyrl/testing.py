"""Helpers for testing with SkyRL: its advantage dispatch called as its trainer calls it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def dispatch(
    name: str,
    token_rewards: Any,
    response_mask: Any,
    index: Sequence[str],
    algorithm: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """SkyRL's ``ppo_utils.compute_advantages_and_returns``: the estimator ``name`` from
    SkyRL's registry, called with what SkyRL's trainer passes (the ``grpo_norm_by_std``
    switch, ``gamma``, ``lambd`` and the config of ``algorithm``, SkyRL's
    ``AlgorithmConfig()`` by default). ``token_rewards`` is cloned first: SkyRL's own
    estimators write into it."""
    from skyrl.backends.skyrl_train.utils import ppo_utils
    from skyrl.train.config import AlgorithmConfig

    import advbudget.adapters.skyrl  # noqa: F401  (registers ours)

    algorithm = AlgorithmConfig() if algorithm is None else algorithm
    advantages, returns = ppo_utils.compute_advantages_and_returns(
        token_level_rewards=token_rewards.clone(),
        response_mask=response_mask,
        index=index,
        adv_estimator=name,
        config=algorithm,
        values=None,
        grpo_norm_by_std=algorithm.grpo_norm_by_std,
        gamma=algorithm.gamma,
        lambd=algorithm.lambd,
        **kwargs,
    )
    return advantages, returns
