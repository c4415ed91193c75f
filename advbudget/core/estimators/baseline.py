"""Estimators with a baseline given from outside the group (no group statistics)."""

from __future__ import annotations

from .._arrays import Array
from .._stats import GroupedRewards
from ._spec import EstimatorSpec, Input, declare_into

SPECS: list[EstimatorSpec] = []
declare = declare_into(SPECS)


@declare(
    name="remax",
    formula="r − b, b the reward of the prompt's greedy rollout",
    reference="ReMax, arXiv 2310.10505 (verl's remax)",
    inputs=(
        Input(
            "reward_baselines",
            "the reward of each rollout's greedy (baseline) response (verl's reward_baselines)",
        ),
    ),
    skips="never",
)
def remax(g: GroupedRewards, *, reward_baselines: Array) -> Array:
    """ReMax: ``r - b``, b the reward of the prompt's greedy rollout."""
    return g.only_present(g.rewards - reward_baselines)
