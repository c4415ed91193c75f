"""κ_eff in two halves: which rollouts are each group's o+ / o-, and κ_eff of those pairs.

``kappa_pairs`` reads an :class:`AdvantageResult` (or bare advantages and a grouping) and
picks, for each kept group with an advantage gap, the first rollout in batch order with
the group's largest advantage (o+) and the first with its smallest (o-). A trainer then
forwards only ``pairs.rows()`` through the updated policy and calls
``kappa_eff_of_pairs`` on their sequence log-probs before and after the update:

    κ_eff = [log π_new(o+) - log π_old(o+)] - [log π_new(o-) - log π_old(o-)].

Also here: the one masked reduction from per-token values to per-sequence values
(:func:`sequence_logprobs`, :func:`sequence_advantages`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._arrays import Array, Namespace, as_array, check_same_device, compute_dtype, device_of
from ._groups import Groups
from ._labels import build_groups
from ._result import AdvantageResult


@dataclass(frozen=True, eq=False)
class KappaPairs:
    """Each group's o+ and o-, one pair per kept group with an advantage gap.

    Attributes:
        top: ``[M']`` integer rollout indices (into the batch) of each pair's o+.
        bottom: ``[M']`` rollout indices of each pair's o-.
        group: ``[M']`` the group (``0..M-1``, order of ``group_skipped``) of each pair;
            pairs are in group order.
        num_rollouts: N, the size of the batch the indices point into.

    All arrays are in the namespace and on the device of the advantages.
    """

    top: Array
    bottom: Array
    group: Array
    num_rollouts: int

    @property
    def xp(self) -> Namespace:
        return as_array(self.top, "top")[1]

    def __len__(self) -> int:
        return int(self.top.shape[0])

    def rows(self) -> Array:
        """The sorted unique rollout indices of every o+ and o-: the rows to forward."""
        xp = self.xp
        both = xp.concat([self.top, self.bottom])
        if int(both.shape[0]) == 0:
            return both
        return xp.sort(xp.unique_values(both))

    def take(self, values: Any, *, rows: Any = None) -> tuple[Array, Array]:
        """``values`` at each pair's o+ and o-: two ``[M']`` arrays.

        ``values`` has one entry per rollout (``[N, ...]``) when ``rows`` is None, else
        one per entry of ``rows`` (``[R, ...]``): sorted rollout indices that contain
        every pair row, such as :meth:`rows`.
        """
        values, xp = as_array(values, "values")
        top, bottom = self.top, self.bottom
        expected = self.num_rollouts
        if rows is not None:
            top, bottom = self._slots(rows)
            expected = int(rows.shape[0])
        if values.ndim < 1 or int(values.shape[0]) != expected:
            what = "rollouts" if rows is None else "rows"
            raise ValueError(
                f"values: expected one entry per {what} ({expected}), got shape "
                f"{tuple(values.shape)}"
            )
        check_same_device(values, top, "values", "pairs")
        return xp.take(values, top, axis=0), xp.take(values, bottom, axis=0)

    def _slots(self, rows: Any) -> tuple[Array, Array]:
        rows, _ = as_array(rows, "rows")
        xp = self.xp
        if rows.ndim != 1:
            raise ValueError(f"rows: expected sorted rollout indices [R], got {tuple(rows.shape)}")
        check_same_device(self.top, rows, "pairs", "rows")
        rows = xp.astype(rows, self.top.dtype)
        count = int(rows.shape[0])
        if len(self) == 0:
            return self.top, self.bottom
        slots = []
        for wanted in (self.top, self.bottom):
            slot = xp.searchsorted(rows, wanted) if count else xp.zeros_like(wanted)
            clipped = xp.clip(slot, 0, max(count - 1, 0))
            if count == 0 or not bool(xp.all(xp.take(rows, clipped) == wanted)):
                raise ValueError(
                    "rows: expected sorted rollout indices that contain every pair row "
                    "(see KappaPairs.rows())"
                )
            slots.append(clipped)
        return slots[0], slots[1]

    def reindexed(self, position: Any) -> KappaPairs:
        """The same pairs with rollout ``i`` renamed ``position[i]`` (a permutation ``[N]``):
        e.g. from the order the advantages were computed in to the trainer's order."""
        position, _ = as_array(position, "position")
        xp = self.xp
        if position.ndim != 1 or int(position.shape[0]) != self.num_rollouts:
            raise ValueError(
                f"position: expected one index per rollout ({self.num_rollouts},), got shape "
                f"{tuple(position.shape)}"
            )
        check_same_device(self.top, position, "pairs", "position")
        position = xp.astype(position, self.top.dtype)
        return KappaPairs(
            top=xp.take(position, self.top),
            bottom=xp.take(position, self.bottom),
            group=self.group,
            num_rollouts=self.num_rollouts,
        )


def kappa_pairs(
    result: AdvantageResult | Any,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
) -> KappaPairs:
    """Each kept group's o+ and o-: its first largest and first smallest advantage.

    "First" is in batch order (ties go to the lowest rollout index); for a layout built
    with explicit ``positions`` (OpenRLHF's prompt-major slots) it is the slot order.
    Groups that were skipped (``result.group_skipped``) or whose advantage gap
    (``result.group_advantage_gap``) is not > 0 give no pair; rollouts without a reward
    (``nan_policy="omit"``) are never picked. Works on every layout and namespace; the
    final compaction to the groups with a gap has a data-dependent size.

    Args:
        result: an :class:`AdvantageResult`, or bare advantages ``[N]`` with one of
            ``group_size`` / ``group_ids`` / ``groups`` (every group counts as kept).

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> from advbudget.metrics import kappa_pairs
        >>> pairs = kappa_pairs(compute_advantages(np.array([0, 1, 1, 1, 1, 0]), group_size=3))
        >>> pairs.top.tolist(), pairs.bottom.tolist(), pairs.rows().tolist()
        ([1, 3], [0, 5], [0, 1, 3, 5])
    """
    if isinstance(result, AdvantageResult):
        if group_size is not None or group_ids is not None or groups is not None:
            raise ValueError(
                "groups: an AdvantageResult carries its grouping; expected no group_size, "
                "group_ids or groups with it"
            )
        if result.trajectories is not None:
            raise ValueError(
                "result: a multi-turn result (trajectory_ids) pairs trajectories, not rows: "
                "pass result.trajectories.result (its rollouts are the trajectories; "
                "result.trajectories.index maps each row to one)"
            )
        g = result.grouped
        return _select(
            result.groups, result.advantage_rows, g.present, result.group_advantage_gap > 0
        )
    advantages, xp = as_array(result, "advantages")
    if advantages.ndim != 1:
        raise ValueError(f"advantages: expected shape [N], got {tuple(advantages.shape)}")
    n = int(advantages.shape[0])
    if groups is None:
        groups = build_groups(
            n,
            group_size=group_size,
            group_ids=group_ids,
            xp=xp,
            device=device_of(advantages),
            like=advantages,
        )
    elif group_size is not None or group_ids is not None:
        raise ValueError("groups: expected groups= alone, without group_size or group_ids")
    elif groups.num_rollouts != n:
        raise ValueError(f"groups: expected groups of {n} rollouts, got {groups.num_rollouts}")
    rows = groups.rows(advantages)
    return _select(groups, rows, groups.is_rollout, None)


def _select(
    groups: Groups, rows: Array, present: Array | None, has_gap: Array | None
) -> KappaPairs:
    xp = groups.xp
    n = groups.num_rollouts
    if present is None:
        high, low = rows, rows
    else:
        high = xp.where(present, rows, -math.inf)
        low = xp.where(present, rows, math.inf)
    top, bottom = groups.max(high), groups.min(low)
    position = groups.rows(groups.tie_order())
    at_top = high == groups.expand(top)
    at_bottom = low == groups.expand(bottom)
    if present is not None:  # never a padding slot or a rollout without a reward
        at_top, at_bottom = at_top & present, at_bottom & present
    first_top = groups.per_group(groups.min(xp.where(at_top, position, n)))
    first_bottom = groups.per_group(groups.min(xp.where(at_bottom, position, n)))
    if has_gap is None:
        has_gap = groups.per_group(top - bottom) > 0
    # The one data-dependent step: keep the groups with a gap.
    (chosen,) = xp.nonzero(has_gap)
    return KappaPairs(
        top=groups.rollout_in_tie_order(xp.take(first_top, chosen)),
        bottom=groups.rollout_in_tie_order(xp.take(first_bottom, chosen)),
        group=chosen,
        num_rollouts=n,
    )


def kappa_eff_of_pairs(
    pairs: KappaPairs, logp_old: Any, logp_new: Any, *, rows: Any = None
) -> Array:
    """κ_eff of each pair: ``[new(o+) - old(o+)] - [new(o-) - old(o-)]``, ``[M']``.

    Args:
        pairs: from :func:`kappa_pairs`.
        logp_old, logp_new: sequence log-probs before and after the update (see
            :func:`sequence_logprobs`). With ``rows=None``: one per rollout, ``[N]``.
            With ``rows``: one per entry of ``rows``, ``[R]``.
        rows: the sorted rollout indices the log-probs belong to; any superset of
            ``pairs.rows()``, usually ``pairs.rows()`` itself (what a trainer forwards).

    Returns:
        ``[M']`` in the log-probs' namespace, float32 at least, in the order of the pairs.

    Examples:
        >>> import numpy as np
        >>> from advbudget.metrics import kappa_eff_of_pairs, kappa_pairs
        >>> pairs = kappa_pairs(np.array([0.5, -0.5, -0.5, 0.5]), group_size=2)
        >>> old, new = np.array([-5.0, -4.0, -3.0, -6.0]), np.array([-4.0, -4.5, -3.0, -5.0])
        >>> kappa_eff_of_pairs(pairs, old, new)
        array([1.5, 1. ])
        >>> kappa_eff_of_pairs(pairs, old[pairs.rows()], new[pairs.rows()], rows=pairs.rows())
        array([1.5, 1. ])
    """
    old, xp = as_array(logp_old, "logp_old")
    new, _ = as_array(logp_new, "logp_new")
    for name, value in (("logp_old", old), ("logp_new", new)):
        if value.ndim != 1:
            raise ValueError(
                f"{name}: expected sequence log-probs [N] or [R], got {tuple(value.shape)}"
            )
    if tuple(old.shape) != tuple(new.shape):
        raise ValueError(
            f"logp_new: expected the shape of logp_old {tuple(old.shape)}, got {tuple(new.shape)}"
        )
    check_same_device(old, new, "logp_old", "logp_new")
    dtype = compute_dtype(xp, xp.result_type(old.dtype, new.dtype), device_of(old), "logp_old")
    change = xp.astype(new, dtype) - xp.astype(old, dtype)
    top, bottom = pairs.take(change, rows=rows)
    return top - bottom


def _inside(mask: Array, xp: Namespace) -> Array:
    return mask if xp.isdtype(mask.dtype, "bool") else mask != 0


def _checked(values: Any, mask: Any, name: str) -> tuple[Array, Array, Namespace]:
    values, xp = as_array(values, name)
    mask, _ = as_array(mask, "mask")
    if values.ndim != 2 or tuple(mask.shape) != tuple(values.shape):
        raise ValueError(
            f"response_mask: expected the shape of {name} {tuple(values.shape)} ([N, T]), "
            f"got {tuple(mask.shape)}"
        )
    check_same_device(values, mask, name, "response_mask")
    dtype = compute_dtype(xp, values.dtype, device_of(values), name)
    return xp.astype(values, dtype), _inside(mask, xp), xp


def sequence_logprobs(token_logprobs: Any, mask: Any, *, length_normalized: bool = False) -> Array:
    """Per-token log-probs ``[N, T]`` summed over the mask: sequence log-probs ``[N]``.

    Tokens outside the mask never count (even if they hold -inf or NaN). The sum is in
    float32 at least (bf16 / fp16 inputs are upcast). ``length_normalized`` divides each
    sum by its token count (1 for an empty row).

    Examples:
        >>> import numpy as np
        >>> from advbudget.metrics import sequence_logprobs
        >>> sequence_logprobs(np.array([[-1.0, -2.0, -9.0]]), np.array([[1, 1, 0]]))
        array([-3.])
        >>> sequence_logprobs(np.array([[-1.0, -2.0, -9.0]]), np.array([[1, 1, 0]]),
        ...                   length_normalized=True)
        array([-1.5])
    """
    values, inside, xp = _checked(token_logprobs, mask, "token_logprobs")
    total = xp.sum(xp.where(inside, values, xp.zeros_like(values)), axis=1)
    if not length_normalized:
        return total
    lengths = xp.sum(xp.astype(inside, total.dtype), axis=1)
    return total / xp.maximum(lengths, xp.ones_like(lengths))


def sequence_advantages(token_advantages: Any, mask: Any) -> Array:
    """The inverse of :func:`~advbudget.token_advantages`: one advantage per sequence ``[N]``.

    A row whose masked tokens all hold one value gets exactly that value (so ties between
    rollouts survive, whatever their lengths); a row with varying token advantages gets
    their mean; an empty row gets 0.

    Examples:
        >>> import numpy as np
        >>> from advbudget.metrics import sequence_advantages
        >>> sequence_advantages(np.array([[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0]]),
        ...                     np.array([[1, 1, 0], [1, 0, 0]]))
        array([ 0.5, -0.5])
    """
    values, inside, xp = _checked(token_advantages, mask, "token_advantages")
    high = xp.max(xp.where(inside, values, -math.inf), axis=1)
    low = xp.min(xp.where(inside, values, math.inf), axis=1)
    mean = sequence_logprobs(values, inside, length_normalized=True)
    return xp.where(high == low, high, mean)
