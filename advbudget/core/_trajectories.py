"""Multi-turn rows: a trajectory stored as several rows (turns, segments) is one rollout.

A trainer may keep an agent's trajectory as one row per turn (SkyRL's step-wise
trajectories, verl's split episodes). Grouping those rows as rollouts is the field's
recurring bug: per-row ids give groups of one, a trajectory of N rows counts N times in
the group's statistics and in the loss. Here the rows go back to one rollout per
trajectory before the estimator sees them (:class:`Rows`), and its advantages come back to
every row of their trajectory, with a row weight ``1 / rows of the trajectory`` for a loss
that should count a trajectory once.

The bookkeeping is on the host (labels are host data); the rewards and advantages keep
their namespace and device: a trajectory's reward is gathered from one of its rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import checks
from ._arrays import Array, Namespace, as_array, compute_dtype, device_of, is_traced, to_host
from ._finite import check_finite
from ._labels import _factorize_host, _slot_order
from ._stats import GroupedRewards

if TYPE_CHECKING:
    from ._result import AdvantageResult


@dataclass(frozen=True, eq=False)
class Trajectories:
    """How a call's rows map to the trajectories its estimator scored.

    Attributes:
        index: ``[N]`` int, the trajectory of each row: its rollout in ``result``
            (trajectories in order of their first row).
        rows: ``[T]`` rows of each trajectory; ``row_weights`` (``[N]``, built when
            read) is ``1 / rows`` on each row: a loss that sums its rows' terms with these
            weights counts each trajectory once.
        result: the trajectory-level result (one rollout per trajectory): its groups,
            skips, metrics and κ pairs are those of the call.
    """

    index: Array
    rows: Array  # [T] rows per trajectory
    result: AdvantageResult

    @cached_property
    def row_weights(self) -> Array:
        """``[N]``: ``1 / (rows of the row's trajectory)``."""
        xp = self.result.grouped.xp
        per_trajectory = 1.0 / xp.astype(self.rows, self.result.advantages.dtype)
        return xp.take(per_trajectory, self.index, axis=0)


@dataclass(frozen=True)
class Rows:
    """A call's rows split into trajectories (host bookkeeping) and what the estimator is
    called with: one reward, prompt label and input value per trajectory."""

    codes: np.ndarray  # [N] the trajectory of each row, 0..T-1 in order of first row
    counts: np.ndarray  # [T] rows per trajectory
    rewards: Any  # [T] (or [T, K] / a mapping of [T]: reward components)
    group_ids: np.ndarray  # [T] prompt label of each trajectory
    prompt_ids: Any  # [T] or None
    inputs: dict[str, Any]  # per-rollout inputs, one value per trajectory
    policy_versions: np.ndarray | None  # [T] the oldest version of each one's rows
    xp: Namespace
    device: Any

    def expand(self, result: AdvantageResult) -> AdvantageResult:
        """The trajectory-level ``result`` on the rows: every row its trajectory's
        advantage; ``result.trajectories`` keeps the rest."""
        xp = self.xp
        index = xp.asarray(self.codes, device=self.device)
        advantages = xp.take(result.advantages, index, axis=0)
        rows = xp.asarray(self.counts, device=self.device)
        return dataclasses.replace(
            result, advantages=advantages, trajectories=Trajectories(index, rows, result)
        )


@dataclass(frozen=True, eq=False)
class TurnRows:
    """What an estimator of turns (its spec declares ``turns=True``: ``"gigpo"``) gets:
    its trajectories' rewards grouped by prompt, and the rows they came from.

    Attributes:
        trajectories: one rollout per trajectory (its reward, by the D1 rules), grouped
            by prompt; only groups without any reward are skipped (no tie rule).
        rows: the host bookkeeping of the split (each row's trajectory, rows per one).
        scored: ``[N]`` host bool: the row's trajectory has a reward (under
            ``nan_policy="omit"`` the others are left out of every statistic).
        group: ``group(values, labels)`` lays ``[N]`` row values out by (prompt, label)
            with the call's tie rule, rows of unscored trajectories left out: what a
            step-level statistic is computed over.
    """

    trajectories: GroupedRewards
    rows: Rows
    scored: np.ndarray
    group: Callable[[Array, np.ndarray], GroupedRewards]

    @property
    def num_rows(self) -> int:
        return int(self.rows.codes.shape[0])

    def row_counts(self) -> Array:
        """Rows of each trajectory, laid out like ``trajectories`` (compute dtype)."""
        g = self.trajectories
        counts = g.xp.asarray(self.rows.counts, dtype=g.rewards.dtype, device=g.groups.device)
        return g.groups.rows(counts)

    def on_rows(self, trajectory_rows: Array) -> Array:
        """``[N]``: each row its trajectory's value (``trajectory_rows`` laid out like
        ``trajectories``)."""
        g = self.trajectories
        index = g.xp.asarray(self.rows.codes, device=g.groups.device)
        return g.xp.take(g.groups.flat(trajectory_rows), index, axis=0)

    def labels(self, name: str, values: Any) -> np.ndarray:
        """A per-row label input (ints or strings) on the host, checked, naming ``name``."""
        return _labels(name, values, self.num_rows)

    def returns(self, turn_rewards: Any, gamma: float) -> Array:
        """:func:`turn_returns` of ``turn_rewards`` (``[N]``, finite on the rows of scored
        trajectories; the others count 0), in the namespace, device and dtype of the
        rewards."""
        values, _ = as_array(turn_rewards, "turn_rewards")
        if tuple(values.shape) != (self.num_rows,):
            raise ValueError(
                f"turn_rewards: expected one reward per row, shape ({self.num_rows},), got "
                f"shape {tuple(values.shape)}"
            )
        host = to_host(values).astype(np.float64)
        bad = self.scored & ~np.isfinite(host)
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(
                f"turn_rewards: expected finite numbers on the rows of trajectories with a "
                f"reward, got {host[row]} at row {row}"
            )
        returns = to_host(turn_returns(np.where(self.scored, host, 0.0), self.rows.codes, gamma))
        g = self.trajectories
        return g.xp.asarray(returns, dtype=g.rewards.dtype, device=g.groups.device)


def split_rows(
    rewards: Any,
    trajectory_ids: Any,
    *,
    group_ids: Any,
    nan_policy: str,
    prompt_ids: Any,
    inputs: Mapping[str, Any],
    components: bool,
    policy_versions: Any = None,
) -> Rows:
    """One rollout per trajectory from rows: the checks and rules of a multi-turn call.

    - A trajectory's reward is the one non-NaN value among its rows (repeated on several
      rows or not: exact equality); two different values raise, naming the trajectory. A
      trajectory with no reward at all is NaN: ``nan_policy`` then applies to it.
    - Its prompt label is that of its rows (two labels raise); ``prompt_ids`` likewise.
    - ``response_lengths`` are summed over its rows; any other per-rollout input must be
      equal on them.
    - Its policy version is the oldest of its rows' (lag = consumer version - oldest).
    """
    if isinstance(rewards, Mapping):
        first = next(iter(rewards.values()), None)
        probe, xp = as_array(first if first is not None else [], "rewards")
    else:
        probe, xp = as_array(rewards, "rewards")
    if is_traced(probe):
        raise ValueError(
            "trajectory_ids: a multi-turn call reads its rows' labels and rewards on the "
            "host, which a traced call (jax.jit, torch.compile) cannot; call it outside"
        )
    n = int(probe.shape[0]) if probe.ndim else 0
    if n == 0:
        raise ValueError(f"rewards: expected one reward per row, got shape {tuple(probe.shape)}")
    labels = _labels("trajectory_ids", trajectory_ids, n)
    codes, counts, first = _trajectories(labels)
    if group_ids is None:
        raise ValueError(
            "group_ids: a multi-turn call (trajectory_ids) groups trajectories by prompt "
            "and needs one prompt label per row, got None"
        )
    prompts = _labels("group_ids", group_ids, n)
    _same_on_rows("trajectory_ids", prompts, codes, first, labels, "prompt labels (group_ids)")
    device = device_of(probe)

    def collapse(name: str, values: Any) -> Any:
        array, array_xp = as_array(values, name)
        rows = _representatives(name, to_host(array), codes, first, labels)
        return array_xp.take(array, array_xp.asarray(rows, device=device_of(array)), axis=0)

    if isinstance(rewards, Mapping):
        merged: Any = {name: collapse("rewards", values) for name, values in rewards.items()}
    elif components and probe.ndim == 2:
        columns = [collapse("rewards", probe[:, k]) for k in range(int(probe.shape[1]))]
        merged = xp.stack(columns, axis=1)
    elif probe.ndim != 1:
        raise ValueError(
            f"rewards: expected one reward per row, [N], got shape {tuple(probe.shape)}"
        )
    else:
        merged = collapse("rewards", probe)
        if nan_policy == "raise":
            missing = np.isnan(to_host(merged).astype(np.float64))
            if missing.any():
                at = int(np.argmax(missing))
                label = _plain(labels[first[at]])
                raise ValueError(
                    f"rewards: trajectory {label!r} has no reward on any of its "
                    f"{int(counts[at])} rows (pass nan_policy='omit' to leave it out)"
                )
    per_trajectory: dict[str, Any] = {}
    for name, values in inputs.items():
        array, array_xp = as_array(values, name)
        if tuple(array.shape) != (n,):
            raise ValueError(
                f"{name}: expected one value per row, shape ({n},), got shape {tuple(array.shape)}"
            )
        if name == "response_lengths":  # a trajectory's tokens are its rows' tokens
            sums = np.bincount(codes, weights=to_host(array).astype(np.float64))
            per_trajectory[name] = array_xp.asarray(sums, device=device_of(array))
        else:
            host = to_host(array)
            _same_on_rows(name, host, codes, first, labels, "values")
            per_trajectory[name] = array_xp.take(
                array, array_xp.asarray(first, device=device_of(array)), axis=0
            )
    prompt_rows = None
    if prompt_ids is not None:
        ids = _labels("prompt_ids", prompt_ids, n)
        _same_on_rows("prompt_ids", ids, codes, first, labels, "identities")
        prompt_rows = ids[first].tolist()
    versions = None
    if policy_versions is not None:
        host = to_host(policy_versions) if hasattr(policy_versions, "shape") else policy_versions
        per_row = np.asarray(host)
        if per_row.dtype.kind not in "iuf":
            raise ValueError(f"policy_versions: expected integers, got {per_row.dtype} values")
        if per_row.shape != (n,):
            raise ValueError(
                f"policy_versions: expected one version per row ({n}), got shape {per_row.shape}"
            )
        versions = np.full(counts.shape[0], np.inf) if per_row.dtype.kind == "f" else None
        if versions is None:  # integers stay integers (their check comes with the call)
            versions = np.full(counts.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(versions, codes, per_row.astype(versions.dtype))
    return Rows(
        codes=codes,
        counts=counts,
        rewards=merged,
        group_ids=prompts[first],
        prompt_ids=prompt_rows,
        inputs=per_trajectory,
        policy_versions=versions,
        xp=xp,
        device=device,
    )


def _labels(name: str, values: Any, n: int) -> np.ndarray:
    """One label per row on the host, a 1-D numpy array (ints or strings)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name}: expected one label per row (a list or a 1-D array), got a string")
    host = to_host(values) if hasattr(values, "shape") else np.asarray(list(values), dtype=object)
    if host.ndim != 1 or host.shape[0] != n:
        raise ValueError(f"{name}: expected one label per row ({n}), got shape {host.shape}")
    if host.dtype == object and all(isinstance(v, (int, np.integer)) for v in host.tolist()):
        host = host.astype(np.int64)
    if host.dtype.kind == "f":
        raise TypeError(f"{name}: expected int or string labels, got float values")
    return host


def _trajectories(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes 0..T-1 in order of each trajectory's first row, rows per trajectory, and each
    trajectory's first row: O(N), no sort of the rows."""
    codes, count, sizes = _factorize_host(labels)
    n = labels.shape[0]
    first = np.full(count, n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
    opens = np.zeros(n, dtype=bool)
    opens[first] = True  # the rows that open a trajectory, read in row order
    rank = np.empty(count, dtype=np.int64)
    rank[codes[opens]] = np.arange(count, dtype=np.int64)
    ordered_first = np.flatnonzero(opens)
    return rank[codes], _reorder(sizes, rank), ordered_first


def _reorder(values: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """``values`` per factor code, put in the order ``rank`` gives each code."""
    out = np.empty_like(values)
    out[rank] = values
    return out


def _same_on_rows(
    name: str,
    values: np.ndarray,
    codes: np.ndarray,
    first: np.ndarray,
    labels: np.ndarray,
    what: str,
) -> None:
    """Raise, naming ``name`` and the trajectory, where a trajectory's rows carry different
    ``values`` (``what`` they are)."""
    differ = values != values[first][codes]
    if differ.any():
        row = int(np.argmax(differ))
        one, other = _plain(values[first[codes[row]]]), _plain(values[row])
        raise ValueError(
            f"{name}: the rows of trajectory {_plain(labels[row])!r} carry different {what} "
            f"({one!r} and {other!r}); expected one per trajectory"
        )


def _representatives(
    name: str, values: np.ndarray, codes: np.ndarray, first: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """Per trajectory, a row holding its one non-NaN value (its first row when it has
    none); two different non-NaN values on its rows raise, naming the trajectory."""
    values = values.astype(np.float64, copy=False)
    if np.isinf(values).any():
        raise ValueError(f"{name}: expected finite numbers or NaN, got inf")
    n = values.shape[0]
    held = np.flatnonzero(~np.isnan(values))  # the rows with a value, often one a trajectory
    held_codes = codes[held]
    chosen = np.full(first.shape[0], n, dtype=np.int64)
    np.minimum.at(chosen, held_codes, held)
    none = chosen == n
    chosen[none] = first[none]
    differ = values[held] != values[chosen[held_codes]]
    if differ.any():
        row = int(held[np.argmax(differ)])
        one, other = _plain(values[chosen[codes[row]]]), _plain(values[row])
        raise ValueError(
            f"{name}: trajectory {_plain(labels[row])!r} has two different rewards on its rows "
            f"({one!r} and {other!r}); a trajectory has one reward (repeat it or leave the "
            "other rows NaN)"
        )
    return chosen


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value a message shows (``3``, not ``np.int64(3)``)."""
    return value.item() if isinstance(value, np.generic) else value


def turn_returns(turn_rewards: Any, trajectory_ids: Any, gamma: float = 1.0) -> Array:
    """Per row, the discounted reward-to-go within its trajectory: ``R_t = r_t + γ R_{t+1}``
    over the trajectory's rows in the order given, its last row ``R = r`` (GiGPO's Eq. 5,
    verl-agent's ``compute_step_discounted_returns``).

    Args:
        turn_rewards: ``[N]`` one reward per row (turn), finite.
        trajectory_ids: ``[N]`` the trajectory of each row (ints or strings, any order;
            a trajectory's rows need not be adjacent).
        gamma: the discount, in [0, 1].

    Returns:
        ``[N]`` returns, the namespace and device of ``turn_rewards``, compute dtype
        (float32 at least). One sort of the rows by trajectory, then O(N): a suffix sum
        (γ = 1) or one vectorised step per position from a trajectory's end.

    Examples:
        >>> import numpy as np
        >>> turn_returns(np.array([0.0, 0, 1, 0, 0]), ["a", "a", "a", "b", "b"], gamma=0.9)
        array([0.81, 0.9 , 1.  , 0.  , 0.  ])

    A group's steps normalised together (verifiers#1554) are then
    ``compute_advantages(turn_returns(r, trajs, gamma=γ), "grpo", group_ids=prompts)``.
    """
    discount = checks.finite("gamma", gamma)
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"gamma: expected a number in [0, 1], got {gamma!r}")
    rewards, xp = as_array(turn_rewards, "turn_rewards")
    if rewards.ndim != 1 or rewards.shape[0] == 0:
        raise ValueError(
            f"turn_rewards: expected a non-empty 1-D array, one reward per row, got shape "
            f"{tuple(rewards.shape)}"
        )
    if is_traced(rewards):
        raise ValueError("turn_rewards: turn_returns reads the rows on the host; not traced")
    device = device_of(rewards)
    dtype = compute_dtype(xp, rewards.dtype, device, "turn_rewards")
    values = to_host(rewards).astype(np.float64)
    check_finite(np, values, "raise", "turn_rewards", omittable=False)
    n = values.shape[0]
    codes, count, _ = _factorize_host(_labels("trajectory_ids", trajectory_ids, n))
    order = _slot_order(codes, count)  # each trajectory's rows together, in row order
    ordered = values[order]
    sorted_codes = codes[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = sorted_codes[1:] != sorted_codes[:-1]
    ends = np.flatnonzero(last)
    end_of_row = np.repeat(ends, np.diff(ends, prepend=-1))  # its trajectory's last row
    if discount == 1.0:  # suffix sums within each trajectory
        suffix = np.cumsum(ordered[::-1])[::-1]
        beyond = np.append(suffix, 0.0)[end_of_row + 1]  # what follows the trajectory
        returns = suffix - beyond
    else:
        # One vectorised step per position from the end: the rows 1 before their
        # trajectory's end, then 2, ...; O(N) element work in all.
        returns = ordered.copy()
        from_end = end_of_row - np.arange(n)
        small = from_end.astype(np.uint16) if from_end.max() < 2**16 else from_end
        by_position = np.argsort(small, kind="stable")  # a radix sort on 16-bit keys
        bounds = np.searchsorted(from_end[by_position], np.arange(1, int(from_end.max()) + 2))
        for j in range(len(bounds) - 1):
            rows = by_position[bounds[j] : bounds[j + 1]]
            returns[rows] += discount * returns[rows + 1]
    out = np.empty(n)
    out[order] = returns
    return xp.asarray(out.astype(np.float64), dtype=dtype, device=device)
