"""Group statistics shared by every estimator: rewards laid out by group, their gaps to
the group minimum, counts, and which groups are skipped.

Centring on the minimum makes a constant group exactly zero on every backend (the naive
``r - mean`` is off by an ulp in float32) and lets the estimators share one gap array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ._arrays import Array, Namespace
from ._groups import Groups
from ._staleness import Staleness

Singletons = Literal["skip", "raw", "refuse"]
"""``singletons=``: how a group of one rollout is scored: ``"skip"`` (advantage 0, the
default), ``"raw"`` (against a baseline of 0, verl's convention, where the estimator
declares it) or ``"refuse"`` (raise, as the frameworks whose estimator raises)."""
# A group whose rewards differ by no more than this (np.isclose against its minimum) is a
# tie: no signal to rank its rollouts by.
DEFAULT_TIE_RTOL = 1e-6
DEFAULT_TIE_ATOL = 1e-6


@dataclass(frozen=True, eq=False)
class GroupedRewards:
    """Rewards of one batch, laid out by group, with the statistics every estimator needs.

    Attributes:
        xp: the array namespace.
        groups: the layout and its reductions (``sum``, ``min``, ``max``, ``expand``).
        rewards: the rewards as rows, in the compute dtype.
        present: bool rows, False for padding and for NaN rewards left out under
            ``nan_policy="omit"``; None when every row is a rollout with a reward.
        gap: ``reward - group minimum`` as rows, ``>= 0``, and 0 where not present.
        count: rollouts with a reward in each group (stats, compute dtype).
        skipped: stats, True for groups that get no update: no reward gap beyond the
            tie tolerance, which includes groups of one unless ``singletons="raw"``.
        raw_singletons: stats, True for groups of one that are scored against a baseline
            of 0 (``singletons="raw"``, verl's convention); None otherwise.
        components: for an estimator that takes reward components (its spec declares
            ``components=True``): one ``GroupedRewards`` per component, in column order, on
            the same groups, each with its own gaps, counts, NaN rows and skipped groups
            (ties); ``rewards`` is then the sum of a rollout's components. ``()`` otherwise.
        tie_rtol, tie_atol: the tie tolerance of the skip rule (and of :meth:`solved_share`).
        solved_reward: the reward a solved rollout reaches (:meth:`solved_share`).
        staleness: the rollouts' policy versions and the staleness rule
            (``policy_versions=``); None without versions.
        dropped: ``[N]`` (not rows), True for rollouts with a reward that the staleness
            rule left out of their group (``present`` is False there too); None when it
            leaves none out.
    """

    xp: Namespace
    groups: Groups
    rewards: Array
    present: Array | None
    gap: Array
    count: Array
    skipped: Array
    raw_singletons: Array | None
    components: tuple[GroupedRewards, ...] = ()
    tie_rtol: float = 0.0
    tie_atol: float = 0.0
    solved_reward: float = 1.0
    staleness: Staleness | None = None
    dropped: Array | None = None

    def sum(self, rows: Array) -> Array:
        """Per-group sum of ``rows`` (as stats)."""
        return self.groups.sum(rows)

    def expand(self, stats: Array) -> Array:
        """Per-group stats broadcast back against rows."""
        return self.groups.expand(stats)

    def only_present(self, rows: Array) -> Array:
        """``rows`` with 0 wherever there is no rollout or no reward."""
        return rows if self.present is None else self.xp.where(self.present, rows, 0)

    def kept(self) -> Array:
        """Stats, True for groups that get an update."""
        return ~self.skipped

    # -- the building blocks of estimators (built-ins and plugins alike) --------------

    def solved_share(self) -> Array:
        """Stats: each group's solved share p̂, the fraction of its rollouts with a reward
        that reach ``solved_reward`` (within the tie tolerance: ``reward >= solved_reward
        - (tie_atol + tie_rtol * |solved_reward|)``, the rule of the metrics); 0 for a
        group with no reward."""
        bar = self.solved_reward
        threshold = bar - (self.tie_atol + self.tie_rtol * abs(bar))
        solved = self.rewards >= threshold
        if self.present is not None:
            solved = solved & self.present
        return self.groups.count(solved, self.rewards.dtype) / self.safe(self.count > 0, self.count)

    def kept_rows(self) -> Array:
        """Rows: 1 in groups that get an update, 0 elsewhere (compute dtype); multiply an
        advantage by it to give skipped groups 0."""
        return self.expand(self.xp.astype(self.kept(), self.rewards.dtype))

    def safe(self, keep: Array, denominator: Array) -> Array:
        """``denominator`` with 1 where ``keep`` is False, so that a division in a skipped
        (or empty) group never divides by 0; mask the quotient with ``keep`` after."""
        return self.xp.where(keep, denominator, self.xp.ones_like(denominator))

    def mean(self) -> Array:
        """Stats: each group's mean reward (0 for a group with no reward)."""
        return self.sum(self.only_present(self.rewards)) / self.safe(self.count > 0, self.count)

    def deviation(self) -> Array:
        """Rows: ``reward - group mean`` (0 where not present). Computed from the gaps, so
        a constant group gives exactly 0 on every backend."""
        mean_gap = self.sum(self.gap) / self.safe(self.count > 0, self.count)
        return self.only_present(self.gap - self.expand(mean_gap))

    def std(self, correction: int = 1, *, deviation: Array | None = None) -> Array:
        """Stats: each group's reward std, unbiased with ``correction=1`` (0 where the
        group has ``correction`` rewards or fewer). ``deviation``: :meth:`deviation`'s
        rows when the caller has them (computed here otherwise)."""
        centred = self.deviation() if deviation is None else deviation
        dof = self.count - correction
        return self.xp.sqrt(self.sum(centred * centred) / self.safe(dof > 0, dof))

    def with_raw_singletons(self, advantages: Array, scale: float = 1.0) -> Array:
        """``advantages`` with each group of one scored against a baseline of 0, as
        ``reward / scale``, when the caller asked for ``singletons="raw"`` (verl's
        convention); unchanged otherwise. An estimator that calls it declares
        ``raw_singletons=True``."""
        if self.raw_singletons is None:
            return advantages
        # A NaN reward beside the lone scored one (nan_policy="omit") stays out: 0, not NaN.
        raw = self.xp.where(self.expand(self.raw_singletons), self.rewards / scale, advantages)
        return self.only_present(raw)


def group_rewards(
    rewards: Array,
    groups: Groups,
    *,
    present: Array | None,
    tie_rtol: float,
    tie_atol: float,
    singletons: Singletons,
    skip_ties: bool = True,
) -> GroupedRewards:
    """Lay ``rewards`` ([N], compute dtype) out by group and compute the shared stats.

    ``skip_ties=False`` is for estimators whose advantages are not zero on a group
    without a reward gap (batch whitening, a given baseline): only groups with no reward
    at all are skipped then.
    """
    xp = groups.xp
    rows = groups.rows(rewards)
    present_rows = groups.is_rollout
    if present is not None:
        present = groups.rows(present)
        present_rows = present if present_rows is None else present_rows & present
    # The group maximum only decides ties: without them, one reduction less.
    if present_rows is None:
        low, high = groups.min_max(rows) if skip_ties else (groups.min(rows), None)
        count = groups.sizes(rows.dtype)
        gap = rows - groups.expand(low)
    else:
        low = groups.min(xp.where(present_rows, rows, math.inf))
        if skip_ties:
            high = groups.max(xp.where(present_rows, rows, -math.inf))
        count = groups.count(present_rows, rows.dtype)
        gap = xp.where(present_rows, rows - groups.expand(low), 0)
    if skip_ties:
        # Budgeting is scale-invariant, so a rounding-noise gap (0.1 + 0.2 vs 0.3) would
        # hand one rollout the whole budget: such near-ties count as ties.
        spread = high - low
        scale = xp.maximum(xp.abs(high), xp.abs(low))
        tie = ~(spread > tie_atol + tie_rtol * scale)  # True with no reward (spread -inf)
    else:
        tie = ~(count > 0)
    raw_singletons = None
    if singletons == "raw":
        raw_singletons = count == 1
        tie = tie & ~raw_singletons
    return GroupedRewards(
        xp,
        groups,
        rows,
        present_rows,
        gap,
        count,
        tie,
        raw_singletons,
        tie_rtol=float(tie_rtol),
        tie_atol=float(tie_atol),
    )


def batch_mean_var(
    g: GroupedRewards, rows: Array, *, weights: Array | None = None, correction: int = 1
) -> tuple[Array, Array]:
    """Mean and variance of ``rows`` over every present rollout of the batch (not per
    group), each rollout weighted by ``weights`` (rows, e.g. its token count) when given.

    ``correction`` is subtracted from the total weight in the variance's denominator: 1
    with token weights is the unbiased variance over tokens (verl's and OpenRLHF's
    ``masked_whiten``). The variance is 0 (not NaN) when the total weight is at most
    ``correction`` (a batch of one rollout, or of one token). Returns 0-d arrays."""
    mean, _, variance = _batch_moments(g, rows, weights, correction)
    return mean, variance


def _batch_moments(
    g: GroupedRewards, rows: Array, weights: Array | None, correction: int
) -> tuple[Array, Array, Array]:
    """The batch mean, ``rows - mean`` (0 where not present) and the variance."""
    xp = g.xp
    rows = g.only_present(rows)  # NaN rewards left out (nan_policy="omit") must not leak
    if weights is None:  # each rollout with a reward weighs 1: no weight rows to multiply
        total = xp.sum(g.count)
        mean = xp.sum(rows) / xp.where(total > 0, total, xp.ones_like(total))
        centred = g.only_present(rows - mean)
        square = xp.sum(centred * centred)
    else:
        # Weights may be stats expanded against rows (broadcastable): make them full rows.
        w = g.only_present(weights * xp.ones_like(rows))
        total = xp.sum(w)
        mean = xp.sum(w * rows) / xp.where(total > 0, total, xp.ones_like(total))
        centred = g.only_present(rows - mean)
        square = xp.sum(w * centred * centred)
    dof = total - correction
    ok = dof > 0
    variance = xp.where(ok, square / xp.where(ok, dof, 1), 0)
    return mean, centred, variance


def batch_whiten(
    g: GroupedRewards,
    rows: Array,
    *,
    weights: Array | None = None,
    correction: int = 1,
    var_eps: float = 0.0,
    var_floor: float = 0.0,
    std_eps: float = 0.0,
    std_norm: bool = True,
) -> Array:
    """``(rows - mean) / (sqrt(max(var + var_eps, var_floor)) + std_eps)`` with the mean
    and variance of the whole batch (:func:`batch_mean_var`: token-weighted when
    ``weights`` are the response lengths); only the mean is subtracted when ``std_norm``
    is False. 0 where that denominator is 0."""
    xp = g.xp
    _, centred, variance = _batch_moments(g, rows, weights, correction)
    if not std_norm:
        return centred
    denominator = variance + var_eps
    scale = xp.sqrt(xp.where(denominator < var_floor, var_floor, denominator)) + std_eps
    positive = scale > 0
    inverse = xp.where(positive, 1 / xp.where(positive, scale, 1), 0)
    return centred * inverse
