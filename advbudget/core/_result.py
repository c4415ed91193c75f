"""What comes back from an estimator: the advantages, with what trainers and metrics
need beside them (the ``valid`` mask, per-group skips and advantage gaps)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ._arrays import Array
from ._groups import Groups
from ._stats import GroupedRewards

if TYPE_CHECKING:
    from ._trajectories import Trajectories


@dataclass(frozen=True, eq=False)
class AdvantageResult:
    """Advantages of one batch, with what trainers and metrics need beside them.

    Attributes:
        advantages: one advantage per rollout, ``[N]``, namespace and device of the
            rewards, compute dtype (float32 at least).
        estimator: the estimator's name.
        groups: the grouping used; pass it as ``groups=`` to reuse it.
        group_skipped: ``[M]`` bool, True for groups that got no update (no reward gap,
            a group of one, or no reward at all).
        tie_rtol, tie_atol: the tie tolerance the advantages were computed with (the
            metrics' ``solved_reward`` rule uses it too).
        options: the estimator's own options the advantages were computed with, each
            resolved (its default where not given) and checked: what an adapter's
            per-token step reads (the whitening of ``reinforce``'s returns).
        group_weight: the weight's name with the options that differ from its defaults
            (``"grpo_lead"``, ``"dqw(temperature=1)"``, a callable's ``__name__``); None.
        trajectories: a multi-turn call's rows and trajectories (``trajectory_ids=``):
            ``advantages``, ``valid``, ``weights``, ``group_index`` and ``row_weights``
            are per row; the groups, skips and metrics are those of the trajectory-level
            result it holds. None for a call of one row per rollout.
        withheld: rows, True for stale rollouts whose advantages ``stale_rollouts=
            "baseline_only"`` set to 0 after the statistics (``valid`` False); None.
    """

    advantages: Array
    estimator: str
    groups: Groups
    group_skipped: Array
    grouped: GroupedRewards = field(repr=False)
    advantage_rows: Array = field(repr=False)
    tie_rtol: float = field(default=0.0, repr=False)
    tie_atol: float = field(default=0.0, repr=False)
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    group_weight: str | None = field(default=None, repr=False)
    weight_rows: Callable[[], Array] | None = field(default=None, repr=False)
    trajectories: Trajectories | None = field(default=None, repr=False)
    withheld: Array | None = field(default=None, repr=False)

    @cached_property
    def weights(self) -> Array | None:
        """``[N]`` the difficulty weight each rollout's advantage was multiplied by
        (``group_weight=``; 1 where a sign-split weight met an advantage of 0); None
        without a weight. Built when first read."""
        if self.trajectories is not None:
            return self._on_rows(self.trajectories.result.weights)
        if self.weight_rows is None:
            return None
        return self.groups.flat(self.weight_rows())

    @cached_property
    def valid(self) -> Array:
        """``[N]`` bool: the rollout takes part in the update (its group was not skipped
        and its reward was not NaN). Trainers drop the others from loss normalisation."""
        if self.trajectories is not None:
            return self._on_rows(self.trajectories.result.valid)
        g = self.grouped
        keep = g.xp.broadcast_to(g.expand(g.kept()), self.advantage_rows.shape)
        if g.present is not None:
            keep = keep & g.present
        if self.withheld is not None:
            keep = keep & ~self.withheld
        return self.groups.flat(keep)

    @cached_property
    def group_index(self) -> Array:
        """``[N]`` int: the group of each rollout, ``0..M-1`` (order of ``group_skipped``)."""
        if self.trajectories is not None:
            return self._on_rows(self.trajectories.result.group_index)
        return self.groups.group_index()

    @cached_property
    def row_weights(self) -> Array:
        """``[N]``: ``1 / (rows of the row's trajectory)`` for a multi-turn call
        (``trajectory_ids=``), so that a loss summing its rows' terms with these weights
        counts each trajectory once; all ones otherwise."""
        if self.trajectories is not None:
            return self.trajectories.row_weights
        return self.grouped.xp.ones_like(self.advantages)

    def _on_rows(self, values: Any) -> Any:
        """A per-trajectory array on the rows of a multi-turn call."""
        if values is None or self.trajectories is None:
            return values
        return self.grouped.xp.take(values, self.trajectories.index, axis=0)

    @cached_property
    def group_advantage_gap(self) -> Array:
        """``[M]``: largest minus smallest advantage in each group (0 for skipped)."""
        g, rows = self.grouped, self.advantage_rows
        high = rows if g.present is None else g.xp.where(g.present, rows, -math.inf)
        low = rows if g.present is None else g.xp.where(g.present, rows, math.inf)
        gap = self.groups.per_group(self.groups.max(high) - self.groups.min(low))
        return g.xp.where(self.group_skipped, g.xp.zeros_like(gap), gap)

    @property
    def num_groups(self) -> int:
        return self.groups.num_groups

    @property
    def num_skipped(self) -> int:
        """How many groups got no update (reads the value back from the device)."""
        return int(self.grouped.xp.count_nonzero(self.group_skipped))
