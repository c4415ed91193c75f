"""Estimators of turns: advantages per row of multi-turn trajectories, from the
trajectory's outcome and from its steps (``trajectory_ids=``, ``group_ids=``; see
:class:`~.._trajectories.TurnRows`)."""

from __future__ import annotations

from typing import Any

from ... import checks
from .._arrays import Array
from .._stats import GroupedRewards
from .._trajectories import TurnRows
from ._rules import EPS
from ._spec import EstimatorSpec, Input, Rule, declare_into
from .group import dr, group_normalized

SPECS: list[EstimatorSpec] = []
declare = declare_into(SPECS)

GIGPO_MODES = ("mean_norm", "mean_std_norm")


def _discount(name: str, value: Any) -> float:
    number = checks.finite(name, value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1], got {value!r}")
    return number


def _mode(name: str, value: Any) -> str:
    return str(checks.choice(name, value, GIGPO_MODES))


@declare(
    name="gigpo",
    formula="(R − mean) + ω·(G − mean over the rows of one anchor state), /std when normed",
    reference=(
        "GiGPO, arXiv 2505.10978 (verl-agent's compute_gigpo_outcome_advantage: episode "
        "statistics across the group's rows; a prompt group of one row scores R under "
        "singletons='raw')"
    ),
    inputs=(
        Input("anchor_ids", "the anchor (environment) state each row acts from, a label"),
        Input("turn_rewards", "each row's own reward, discounted to the step returns G"),
    ),
    rules={
        "gamma": Rule(_discount, "the discount of the step returns G, in [0, 1]"),
        "omega": Rule(checks.nonnegative_finite, "the weight ω of the step part"),
        "mode": Rule(_mode, "mean_norm: subtract the mean; mean_std_norm: then / (std + eps)"),
        "eps": EPS,
    },
    skips="never",
    raw_singletons=True,
    turns=True,
)
def gigpo(
    turns: TurnRows,
    *,
    anchor_ids: Any,
    turn_rewards: Any,
    gamma: float = 1.0,
    omega: float = 1.0,
    mode: str = "mean_norm",
    eps: float = 1e-6,
) -> Array:
    """GiGPO: an episode part, the trajectory's reward against its prompt group, plus
    ``omega`` times a step part, each row's discounted return against the rows of its
    prompt group that act from the same anchor state (a step group of one: 0)."""
    normalised = mode == "mean_std_norm"
    episode = _across_rows(turns.trajectories, turns.row_counts(), normalised, eps)
    steps = turns.group(turns.returns(turn_rewards, gamma), turns.labels("anchor_ids", anchor_ids))
    step = group_normalized(steps, eps=eps) if normalised else dr(steps)
    return turns.on_rows(episode) + omega * steps.groups.flat(step)


def _across_rows(g: GroupedRewards, rows: Array, normalised: bool, eps: float) -> Array:
    """The episode part: each trajectory's reward against the mean (and unbiased std) of
    its group's rows, a trajectory weighing its row count (the reference writes the
    episode reward on every row). A group of one row: ``R`` (its mean taken as 0 and its
    std as 1) under ``singletons="raw"``, 0 otherwise."""
    xp = g.xp
    weight = g.only_present(rows)
    total = g.sum(weight)
    mean_gap = g.sum(weight * g.gap) / g.safe(total > 0, total)
    deviation = g.only_present(g.gap - g.expand(mean_gap))  # exactly 0 in a constant group
    if normalised:
        spread = g.sum(weight * deviation * deviation) / g.safe(total > 1, total - 1)
        deviation = deviation / g.expand(xp.sqrt(spread) + eps)
    alone = total == 1
    lone = g.only_present(g.rewards / (1 + eps if normalised else 1.0))
    if g.raw_singletons is None:
        lone = xp.zeros_like(lone)
    return xp.where(g.expand(alone), lone, deviation)
