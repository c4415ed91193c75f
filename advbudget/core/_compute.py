"""From a batch of rewards to advantages: the one orchestration every caller goes through.

The flow is: rewards + grouping (``_groups``) -> checks (:mod:`advbudget.checks` and here) ->
``GroupedRewards`` (``_stats``: stats shared by all estimators) -> the estimator named in
the catalogue (``estimators/``: each function beside its spec) -> ``AdvantageResult``
(``_result``: advantages, the ``valid`` mask and per-group numbers).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from .. import checks
from ._arrays import Array, as_array, backend, compute_dtype, device_of, is_traced, to_host
from ._components import has_components, reward_columns
from ._finite import NanPolicy, check_finite
from ._groups import Contiguous, Groups
from ._labels import _factorize_host, build_groups
from ._result import AdvantageResult
from ._staleness import StaleRequest, StaleRule, stale_request
from ._state import EstimatorState, start_call
from ._stats import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL, GroupedRewards, Singletons, group_rewards
from ._trajectories import TurnRows, split_rows
from ._warnings import caller_stacklevel
from ._weights import parse_group_weight, weigh
from .estimators import Estimator, EstimatorSpec, as_spec, estimator_specs


def compute_advantages(
    rewards: Any,
    estimator: str | Estimator | EstimatorSpec = "budget",
    /,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
    singletons: Singletons = "skip",
    group_weight: Any = None,
    solved_reward: float = 1.0,
    state: EstimatorState | None = None,
    prompt_ids: Any = None,
    trajectory_ids: Any = None,
    policy_versions: Any = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    stale_rollouts: StaleRule = "keep",
    **options: Any,
) -> AdvantageResult:
    """Advantages of any registered estimator, with the valid mask and group statistics.

    Args:
        rewards: ``[N]`` one scalar reward per rollout; any Array API array or a list.
            An estimator that takes reward components (``"gdpo"``) takes ``[N, K]``
            instead, one column per component, or a mapping name -> ``[N]``
            (``{"format": ..., "accuracy": ...}``); each component is checked (NaN,
            ``nan_policy``) and grouped on its own.
        estimator: a name from the catalogue (``"budget"``, ``"grpo"``, ``"dr"``,
            ``"rloo"``, ... or an alias: ``"reward_budget"``, ``"group_norm"``,
            ``"dr_grpo"``; all listed by :func:`estimator_names` and in the docs'
            estimator page), a name added with :func:`register_estimator`, an
            :class:`EstimatorSpec`, or an estimator callable.
        group_size: contiguous groups of this size (rollouts ``0..G-1`` are one prompt's).
        group_ids: one label per rollout (ints or strings, any order, any group sizes).
        groups: a :class:`Groups` from an earlier result, instead of the two above.
        nan_policy: ``"raise"`` (default) or ``"omit"``: NaN rewards (unscorable
            rollouts) are left out of their group's statistics and get advantage 0 and
            ``valid`` False. Infinite rewards always raise. The same inside ``jax.jit``
            and ``torch.compile``: the errors are raised when the compiled function runs.
            With reward components, "omit" leaves a NaN component out of that
            component's group statistics only (the rollout keeps its other components);
            a rollout whose every component is NaN is unscorable, as above.
        tie_rtol, tie_atol: a group whose reward spread is at most
            ``tie_atol + tie_rtol * max(|max|, |min|)`` has no reward gap and is skipped
            (default 1e-6: float32 rounding noise is a tie). 0 and 0 skip only exact ties.
        singletons: ``"skip"`` (default) gives a group of one advantage 0; ``"raw"``
            scores it against a baseline of 0 and unit std, as verl does (not for budget);
            ``"refuse"`` raises ValueError on a group of one (a framework whose own
            estimator raises there: verl's grpo_passk).
        group_weight: a difficulty weight on the estimator's advantages, from each
            group's solved share p̂ (see ``solved_reward``): ``"grpo_lead"`` (GRPO-LEAD's
            sign-split logistic weight: ``w(p̂)`` on a positive advantage, ``w(1 - p̂)`` on a
            negative one), ``"dqw"`` (DGPO's question weights: a softmax of ``-p̂ / 2`` over
            the batch's kept groups, summing to their number), a mapping with ``"name"``
            and its options (``{"name": "dqw", "temperature": 1.0}``; ``grpo_lead``:
            ``floor=0.4``, ``ceiling=1.5``, ``midpoint=0.75``, ``steepness=10``), or a
            callable ``fn(p_hat)`` that gets ``[M]`` solved shares in group order and
            returns ``M`` finite weights. Skipped groups keep advantage 0 and ``valid``
            False. The weight of each rollout is ``result.weights``. None (default): none.
        solved_reward: the reward a solved rollout reaches, for p̂: ``reward >=
            solved_reward - (tie_atol + tie_rtol * |solved_reward|)`` (default 1.0: on 0/1
            and ±1 rewards, "reward > 0"). p̂ is the solved share of a group's rollouts
            with a reward, 0 for a group with none.
        state: for an estimator that remembers prompts across steps (``"spo"``,
            ``"rae"``): its :class:`EstimatorState`, the same object every step. Each
            rollout is scored against its prompt's memory as the call found it; the memory
            is then updated once per prompt, from its rollouts with a reward. Such an
            estimator skips only groups with no reward, so ``group_size=1`` is normal.
        prompt_ids: with ``state``: one stable identity per rollout (a list, or a 1-D
            array of ints or strings: dataset indices or prompt texts, keyed by
            :func:`advbudget.metrics.prompt_key`), not per-step uuids.
        trajectory_ids: multi-turn rows: one trajectory label per row (ints or strings,
            any order), with ``group_ids`` one prompt label per row. Each trajectory is
            one rollout: its reward is the one non-NaN value among its rows (repeats of
            it allowed; two different values raise), its prompt that of its rows; the
            estimator scores one reward per trajectory within each prompt's group, every
            other option (weights, state, inputs: ``response_lengths`` summed over the
            rows) at that level, and every row gets its trajectory's advantage.
            ``result.row_weights`` is ``1 / rows of the trajectory``, and
            ``result.trajectories`` holds the trajectory-level result (its metrics count
            each trajectory once). Not with ``group_size`` or ``groups``; not traced.
        policy_versions: async and off-policy training: one int per rollout, the version
            of the policy that sampled it (a list or a 1-D array of any namespace; traced
            under ``jax.jit``, its values are not checked), with ``current_version``, the
            trainer's. A rollout's staleness is ``current_version - policy_versions[i]``;
            it is stale when that exceeds ``max_staleness`` (an int >= 0; None, the
            default: no rollout is stale). The metrics report staleness whenever versions
            are given. Multi-turn rows: a trajectory's version is its oldest row's.
        stale_rollouts: what stale rollouts do: ``"keep"`` (default: nothing changes),
            ``"baseline_only"`` (they stay in their group's statistics, then get advantage
            0 and ``valid`` False), ``"drop"`` (they leave their group before any
            statistic, as if never sampled: a group left with one rollout follows
            ``singletons``, an empty one is skipped), ``"drop_group"`` (every group with a
            stale rollout is left out whole).
        **options: the estimator's own options (``budget=``; ``eps=``, ``std_correction=``)
            and extra inputs (``response_lengths=``: one value per rollout).

    Returns:
        An :class:`AdvantageResult`.

    Warns:
        UserWarning: when every group has one rollout (``group_size=1``, or labels all
            distinct) and the estimator compares within groups: every advantage is 0.

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> res = compute_advantages(np.array([1, 0, 0, 0, 1, 1]), "budget",
        ...                          group_ids=["a", "b", "a", "b", "a", "b"])
        >>> res.advantages.round(4)
        array([ 0.1667, -0.3333, -0.3333, -0.3333,  0.1667,  0.6667])
        >>> res.valid.tolist(), res.num_skipped
        ([True, True, True, True, True, True], 0)
    """
    spec = as_spec(estimator)
    staleness = stale_request(policy_versions, current_version, max_staleness, stale_rollouts)
    if spec.turns and trajectory_ids is None:
        raise ValueError(
            f"trajectory_ids: estimator {spec.name!r} scores the rows (turns) of multi-turn "
            "trajectories; pass trajectory_ids= and group_ids= (one label per row) and its "
            f"inputs ({', '.join(i.name for i in spec.inputs)}), got no trajectory_ids"
        )
    if trajectory_ids is not None:
        for name, value in (("group_size", group_size), ("groups", groups)):
            if value is not None:
                raise ValueError(
                    f"{name}: a multi-turn call (trajectory_ids) groups its trajectories by "
                    f"prompt from group_ids (one label per row); expected no {name}, got "
                    f"{value!r}"
                )
        if spec.turns:
            refused = {
                "group_weight": group_weight,
                "state": state,
                "prompt_ids": prompt_ids,
                "policy_versions": policy_versions,
            }
            for name, value in refused.items():
                if value is not None:
                    raise ValueError(
                        f"{name}: not with estimator {spec.name!r}, which scores turns "
                        f"(a {name} applies to one advantage per trajectory), got {value!r}"
                    )
            return _turns(
                spec,
                rewards,
                trajectory_ids,
                group_ids=group_ids,
                nan_policy=nan_policy,
                tie_rtol=tie_rtol,
                tie_atol=tie_atol,
                singletons=singletons,
                options=options,
            )
        input_names = {i.name for i in spec.inputs}
        rows = split_rows(
            rewards,
            trajectory_ids,
            group_ids=group_ids,
            nan_policy=nan_policy,
            prompt_ids=prompt_ids,
            inputs={k: v for k, v in options.items() if k in input_names},
            components=spec.components,
            policy_versions=policy_versions,
        )
        scored = compute_advantages(
            rows.rewards,
            spec,
            group_ids=rows.group_ids,
            nan_policy=nan_policy,
            tie_rtol=tie_rtol,
            tie_atol=tie_atol,
            singletons=singletons,
            group_weight=group_weight,
            solved_reward=solved_reward,
            state=state,
            prompt_ids=rows.prompt_ids,
            policy_versions=rows.policy_versions,
            current_version=current_version,
            max_staleness=max_staleness,
            stale_rollouts=stale_rollouts,
            **{k: v for k, v in options.items() if k not in input_names},
            **rows.inputs,
        )
        return rows.expand(scored)
    weight = parse_group_weight(group_weight)
    bar = checks.finite("solved_reward", solved_reward)
    columns: list[tuple[Array, Array | None]] = []
    if spec.components:
        rewards, columns = _components_checked(rewards, spec.name, nan_policy)
    elif has_components(rewards):
        raise ValueError(_one_reward_per_rollout(rewards, spec.name))
    given_inputs = {i.name: options.pop(i.name) for i in spec.inputs if i.name in options}
    resolved = spec.resolve_options(options)
    if singletons == "raw" and not spec.raw_singletons:
        raise ValueError(
            f"singletons: expected 'skip' for the {spec.name} estimator (it does not score "
            "a group of one against a baseline of 0: its spec does not declare "
            "raw_singletons=True), got 'raw'"
        )
    grouped = group_checked(
        rewards,
        group_size=group_size,
        group_ids=group_ids,
        groups=groups,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
        skip_ties=spec.skips == "ties",
        staleness=staleness,
    )
    given = "group_size" if group_size is not None else "group_ids" if groups is None else "groups"
    if singletons == "refuse":
        _refuse_groups_of_one(grouped.groups, given, group_ids, spec)
    elif spec.skips == "ties" and singletons == "skip":
        _warn_if_every_group_is_one_rollout(grouped.groups, given, spec)
    if columns:
        left_out = None if grouped.staleness is None else grouped.staleness.left_out(grouped.groups)
        if left_out is not None:  # the rollouts the staleness rule drops leave every column
            columns = [(c, ~left_out if p is None else p & ~left_out) for c, p in columns]
        components = tuple(
            group_rewards(
                column,
                grouped.groups,
                present=present,
                tie_rtol=tie_rtol,
                tie_atol=tie_atol,
                singletons=singletons,
            )
            for column, present in columns
        )
        grouped = dataclasses.replace(grouped, components=components)
    if bar != grouped.solved_reward:
        grouped = dataclasses.replace(grouped, solved_reward=bar)
    inputs = _input_rows(spec, given_inputs, grouped)
    call = None
    if spec.tracker is not None:
        call, inputs["tracked"] = start_call(
            spec.name, spec.tracker, state, prompt_ids, grouped, resolved
        )
    elif state is not None or prompt_ids is not None:
        raise ValueError(
            f"{'state' if state is not None else 'prompt_ids'}: estimator {spec.name!r} "
            "keeps no memory across steps (those that do: "
            f"{', '.join(s.name for s in estimator_specs() if s.tracker)})"
        )
    rows = spec.fn(grouped, **resolved, **inputs)
    weight_rows = None
    if weight is not None:
        rows, weight_rows = weigh(weight, grouped, rows)
    withheld = None
    if grouped.staleness is not None and grouped.staleness.rule == "baseline_only":
        withheld = grouped.groups.rows(grouped.staleness.stale)
        rows = grouped.xp.where(withheld, 0.0, rows)
    if call is not None:  # after every check passed: a failed call leaves the state as it was
        call.commit()
    return AdvantageResult(
        advantages=grouped.groups.flat(rows),
        estimator=spec.name,
        groups=grouped.groups,
        group_skipped=grouped.groups.per_group(grouped.skipped),
        grouped=grouped,
        advantage_rows=rows,
        tie_rtol=float(tie_rtol),
        tie_atol=float(tie_atol),
        options=MappingProxyType(resolved),
        weight_rows=weight_rows,
        group_weight=None if weight is None else weight.describe(),
        withheld=withheld,
    )


def _turns(
    spec: EstimatorSpec,
    rewards: Any,
    trajectory_ids: Any,
    *,
    group_ids: Any,
    nan_policy: NanPolicy,
    tie_rtol: float,
    tie_atol: float,
    singletons: Singletons,
    options: dict[str, Any],
) -> AdvantageResult:
    """A multi-turn call of an estimator of turns: the trajectories as rollouts (D1
    rules), grouped by prompt with no tie rule, and ``spec.fn`` scoring every row. The
    trajectory-level result holds each trajectory's mean row advantage (its weight in a
    loss with ``row_weights``), so the metrics count each trajectory once."""
    checks.choice("singletons", singletons, ("skip", "raw"))
    given = {i.name: options.pop(i.name) for i in spec.inputs if i.name in options}
    missing = [i for i in spec.inputs if i.required and i.name not in given]
    if missing:
        raise ValueError(
            f"{missing[0].name}: estimator {spec.name!r} needs one value per row "
            f"({missing[0].doc}), got none"
        )
    resolved = spec.resolve_options(options)
    rows = split_rows(
        rewards,
        trajectory_ids,
        group_ids=group_ids,
        nan_policy=nan_policy,
        prompt_ids=None,
        inputs={},
        components=False,
    )
    grouped = group_checked(
        rows.rewards,
        group_ids=rows.group_ids,
        nan_policy=nan_policy,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
        skip_ties=False,
    )
    present = grouped.present
    scored_trajectories = (
        np.ones(rows.counts.shape[0], dtype=bool)
        if present is None
        else np.asarray(to_host(grouped.groups.flat(present)), dtype=bool)
    )
    scored = scored_trajectories[rows.codes]
    prompt_of_row = rows.group_ids[rows.codes]
    prompt_codes, _, _ = _factorize_host(prompt_of_row)

    def by_prompt_and(values: Array, labels: np.ndarray) -> GroupedRewards:
        codes, count, _ = _factorize_host(labels)
        xp = grouped.xp
        left_out = xp.asarray(~scored, device=device_of(values))
        return group_checked(
            xp.where(left_out, xp.nan, values),
            group_ids=prompt_codes * count + codes,
            nan_policy="omit",
            tie_rtol=tie_rtol,
            tie_atol=tie_atol,
        )

    turns = TurnRows(grouped, rows, scored, by_prompt_and)
    advantages = spec.fn(turns, **resolved, **given)
    xp = grouped.xp
    host = to_host(advantages).astype(np.float64)
    mean = np.bincount(rows.codes, weights=host) / rows.counts
    per_trajectory = xp.asarray(mean, dtype=advantages.dtype, device=device_of(advantages))
    result = AdvantageResult(
        advantages=per_trajectory,
        estimator=spec.name,
        groups=grouped.groups,
        group_skipped=grouped.groups.per_group(grouped.skipped),
        grouped=grouped,
        advantage_rows=grouped.groups.rows(per_trajectory),
        tie_rtol=float(tie_rtol),
        tie_atol=float(tie_atol),
        options=MappingProxyType(resolved),
    )
    return dataclasses.replace(rows.expand(result), advantages=advantages)


def _refuse_groups_of_one(groups: Groups, given: str, labels: Any, spec: EstimatorSpec) -> None:
    """``singletons="refuse"``: raise, naming the group size, when a group has one rollout
    (a mirror of a framework estimator that raises there, as verl's grpo_passk does)."""
    xp = groups.xp
    if isinstance(groups, Contiguous):  # one static size (Permuted too)
        if groups.group_size != 1:
            return
        count, first = groups.num_groups, 0
    else:
        sizes = groups.per_group(groups.sizes(xp.int32))
        if is_traced(sizes):
            raise ValueError(
                f"singletons: 'refuse' reads the group sizes, which {given} leaves unknown "
                "while tracing; check them before the compiled call, or pass 'skip'"
            )
        alone = xp.astype(sizes == 1, xp.int32)
        count = int(xp.sum(alone))
        if count == 0:
            return
        group = int(xp.argmax(alone))
        first = int(xp.argmax(xp.astype(groups.group_index() == group, xp.int32)))
    label = ""
    if labels is not None and given == "group_ids":
        value = labels[first]
        label = f", label {getattr(value, 'item', lambda: value)()!r}"
    raise ValueError(
        f"{given}: {spec.name} expected at least 2 rollouts in every group (singletons="
        f"'refuse', as the framework's own {spec.name}), got {count} group(s) of 1 rollout, "
        f"the first at rollout {first}{label}"
    )


def _components_checked(
    rewards: Any, estimator: str, nan_policy: NanPolicy
) -> tuple[Array, list[tuple[Array, Array | None]]]:
    """The sum of each rollout's reward components (NaN where every one is NaN) and each
    component in the compute dtype with its mask of non-NaN values (None: all finite),
    checked like rewards, each under its own name."""
    checks.choice("nan_policy", nan_policy, ("raise", "omit"))
    values, names, xp = reward_columns(rewards, estimator)
    device = device_of(values[0])
    dtypes = [compute_dtype(xp, v.dtype, device, n) for v, n in zip(values, names, strict=True)]
    dtype = max(dtypes, key=lambda d: xp.finfo(d).bits)
    columns = []
    for value, name in zip(values, names, strict=True):
        value = xp.astype(value, dtype) if value.dtype != dtype else value
        columns.append(check_finite(xp, value, nan_policy, name))
    # NaN components count 0 in the sum (TRL's nansum); all NaN: the rollout has none.
    total = functools.reduce(
        lambda a, b: a + b, [v if p is None else xp.where(p, v, 0) for v, p in columns]
    )
    masks = [p for _, p in columns if p is not None]
    if len(masks) == len(columns):  # under "omit" (else NaN has raised): any present?
        total = xp.where(functools.reduce(lambda a, b: a | b, masks), total, xp.nan)
    return total, columns


def _one_reward_per_rollout(rewards: Any, estimator: str) -> str:
    takers = [s.name for s in estimator_specs() if s.components]
    if isinstance(rewards, Mapping):
        given = f"a mapping of {len(rewards)} reward component{'' if len(rewards) == 1 else 's'}"
    elif hasattr(rewards, "shape"):
        given = f"shape {tuple(rewards.shape)}"
    else:
        given = "a list of rows (several rewards per rollout)"
    return (
        f"rewards: the {estimator} estimator takes one reward per rollout, [N], got {given} "
        f"(reward components are for {', '.join(takers) or 'an estimator that takes them'})"
    )


def _warn_if_every_group_is_one_rollout(groups: Groups, given: str, spec: EstimatorSpec) -> None:
    """Warn when the grouping leaves nothing to compare: every advantage will be 0.

    A test on the layout's sizes (Python ints), so it costs nothing and works traced.
    """
    if groups.num_groups != groups.num_rollouts or groups.num_rollouts < 2:
        return  # a batch of one rollout is a caller's edge case, not a setup mistake
    if given == "group_size":
        given = "group_size=1"
    raw = ", pass singletons='raw' (verl's convention)" if spec.raw_singletons else ""
    warnings.warn(
        f"{given}: every one of the {groups.num_groups} groups has one rollout, so every "
        f"group is skipped and every {spec.name} advantage is 0 (a group needs two or more "
        f"rollouts of one prompt to compare); sample several rollouts per prompt "
        f"(group_size >= 2){raw}, or use an estimator that does not compare within groups "
        "(reinforce, remax)",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


def _input_rows(
    spec: EstimatorSpec, given: dict[str, Any], grouped: GroupedRewards
) -> dict[str, Array]:
    """The estimator's extra inputs, checked like the rewards and laid out as rows."""
    xp, groups = grouped.xp, grouped.groups
    out: dict[str, Array] = {}
    for declared in spec.inputs:
        value = given.get(declared.name)
        if value is None:
            if declared.required:
                raise ValueError(
                    f"{declared.name}: the {spec.name} estimator needs {declared.doc} "
                    f"(one value per rollout, [{groups.num_rollouts}]), got None"
                )
            continue
        array, array_xp = as_array(value, declared.name)
        if array_xp is not xp and not is_traced(array):
            raise TypeError(
                f"{declared.name}: expected a {backend(xp)} array like rewards, "
                f"got a {backend(array_xp)} one"
            )
        if tuple(array.shape) != (groups.num_rollouts,):
            raise ValueError(
                f"{declared.name}: expected one value per rollout, shape "
                f"({groups.num_rollouts},), got shape {tuple(array.shape)}"
            )
        if not is_traced(array) and device_of(array) != groups.device:
            raise ValueError(
                f"{declared.name}: expected an array on the device of rewards "
                f"({groups.device}), got one on {device_of(array)}"
            )
        dtype = grouped.rewards.dtype
        array = xp.astype(array, dtype) if array.dtype != dtype else array
        array = check_finite(xp, array, "raise", declared.name, omittable=False)[0]
        out[declared.name] = groups.rows(array)
    return out


def group_checked(
    rewards: Any,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    groups: Groups | None = None,
    nan_policy: NanPolicy = "raise",
    tie_rtol: float = DEFAULT_TIE_RTOL,
    tie_atol: float = DEFAULT_TIE_ATOL,
    singletons: Singletons = "skip",
    skip_ties: bool = True,
    staleness: StaleRequest | None = None,
) -> GroupedRewards:
    """Check the inputs and group the rewards: everything before the estimator.

    With ``staleness``, the rollouts its rule drops leave their groups here, before any
    statistic, as NaN rewards do under ``nan_policy="omit"``."""
    rewards, xp = as_array(rewards, "rewards")
    if rewards.ndim != 1:
        raise ValueError(
            "rewards: expected a 1-D array with one reward per rollout, "
            f"got shape {tuple(rewards.shape)}"
        )
    num_rollouts = int(rewards.shape[0])
    if num_rollouts == 0:
        raise ValueError("rewards: expected at least one rollout, got an empty array")
    checks.choice("nan_policy", nan_policy, ("raise", "omit"))
    checks.choice("singletons", singletons, ("skip", "raw", "refuse"))
    checks.nonnegative_finite("tie_rtol", tie_rtol)
    checks.nonnegative_finite("tie_atol", tie_atol)
    device = device_of(rewards)
    dtype = compute_dtype(xp, rewards.dtype, device, "rewards")
    if rewards.dtype != dtype:
        rewards = xp.astype(rewards, dtype)
    rewards, present = check_finite(xp, rewards, nan_policy, "rewards")

    if groups is None:
        groups = build_groups(
            num_rollouts,
            group_size=group_size,
            group_ids=group_ids,
            xp=xp,
            device=device,
            like=rewards,
        )
    else:
        _check_groups(groups, group_size, group_ids, rewards, xp, device)
    stale, dropped = None, None
    if staleness is not None:
        stale = staleness.resolve(rewards, xp, device)
        left_out = stale.left_out(groups)
        if left_out is not None:
            dropped = left_out if present is None else left_out & present
            present = ~left_out if present is None else present & ~left_out
    grouped = group_rewards(
        rewards,
        groups,
        present=present,
        tie_rtol=tie_rtol,
        tie_atol=tie_atol,
        singletons=singletons,
        skip_ties=skip_ties,
    )
    if stale is None:
        return grouped
    return dataclasses.replace(grouped, staleness=stale, dropped=dropped)


def _check_groups(
    groups: object,
    group_size: int | None,
    group_ids: Any,
    rewards: Array,
    xp: Any,
    device: Any,
) -> None:
    if group_size is not None or group_ids is not None:
        raise ValueError("groups: expected alone, got it together with group_size or group_ids")
    if not isinstance(groups, Groups):
        raise TypeError(f"groups: expected a Groups object, got {type(groups).__name__}")
    num_rollouts = int(rewards.shape[0])
    if groups.num_rollouts != num_rollouts:
        raise ValueError(
            f"groups: expected groups of the {num_rollouts} rewards, "
            f"got groups of {groups.num_rollouts} rollouts"
        )
    # Traced rewards may report no device (jax.jit): only the namespace can be compared.
    same_device = groups.device == device or is_traced(rewards)
    if groups.xp is not xp or not same_device:
        raise ValueError(
            f"groups: expected groups built for {backend(xp)} on {device}, "
            f"got groups for {backend(groups.xp)} on {groups.device}"
        )
