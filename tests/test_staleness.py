"""Rollouts of older policies: ``compute_advantages(..., policy_versions=, current_version=,
max_staleness=, stale_rollouts=)`` and the metrics beside them (staleness, the spread of
difficulty across groups, near ties). Hand cases for each rule, the float64 reference on
the rollouts a rule keeps, invariants (hypothesis: no versions and a loose bound change
nothing, bit for bit), every backend, ``jax.jit`` with versions as arrays, multi-turn rows,
and one error per bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages, estimator_names, get_spec
from advbudget.metrics import advantage_metrics
from advbudget.testing import assert_close, to_numpy

from .references import reference

NAN = math.nan
RULES = ("keep", "baseline_only", "drop", "drop_group")
# Two groups of 4; rollout 3 (group 0) was sampled 2 versions ago, the rest now.
REWARDS = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
VERSIONS = [5, 5, 5, 3, 5, 5, 5, 5]
STALE = dict(policy_versions=VERSIONS, current_version=5, max_staleness=1)


def call(rule: str, estimator: str = "grpo", rewards: Any = REWARDS, **extra: Any) -> Any:
    return compute_advantages(
        rewards, estimator, group_size=4, **{**STALE, **extra}, stale_rollouts=rule
    )


@pytest.mark.parametrize("estimator", ["grpo", "budget", "rloo"])
def test_one_stale_rollout_under_each_rule(estimator: str) -> None:
    plain = compute_advantages(REWARDS, estimator, group_size=4).advantages
    keep = call("keep", estimator)
    np.testing.assert_array_equal(keep.advantages, plain)
    assert keep.valid.all()
    # baseline_only: the stale rollout shaped its group's statistics, then gets nothing.
    withheld = call("baseline_only", estimator)
    np.testing.assert_array_equal(withheld.advantages, np.where(np.arange(8) == 3, 0.0, plain))
    assert withheld.valid.tolist() == [True] * 3 + [False] + [True] * 4
    # drop: group 0 is its three fresh rollouts alone.
    dropped = call("drop", estimator)
    alone = compute_advantages(REWARDS[:3], estimator, group_size=3).advantages
    np.testing.assert_allclose(dropped.advantages[:3], alone, rtol=1e-12)
    assert dropped.advantages[3] == 0.0
    np.testing.assert_array_equal(dropped.advantages[4:], plain[4:])
    assert dropped.valid.tolist() == withheld.valid.tolist()
    # drop_group: group 0 is left out whole.
    whole = call("drop_group", estimator)
    np.testing.assert_array_equal(whole.advantages, np.r_[np.zeros(4), plain[4:]])
    assert whole.valid.tolist() == [False] * 4 + [True] * 4
    assert whole.group_skipped.tolist() == [True, False]


def test_grpo_by_hand_under_drop() -> None:
    # Group 0 without rollout 3: rewards 1, 0, 0, mean 1/3, unbiased std sqrt(1/3).
    std = math.sqrt(1 / 3)
    want = [(2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6), 0.0]
    np.testing.assert_allclose(call("drop").advantages[:4], want, rtol=1e-12)


def test_every_rollout_stale_and_none_stale() -> None:
    old = [0] * 8
    for rule in ("drop", "drop_group", "baseline_only"):
        result = call(rule, policy_versions=old)
        assert (result.advantages == 0).all(), rule
        assert not result.valid.any(), rule
    assert call("drop", policy_versions=old).num_skipped == 2
    fresh = compute_advantages(REWARDS, "grpo", group_size=4).advantages
    for rule in RULES:
        np.testing.assert_array_equal(call(rule, policy_versions=[5] * 8).advantages, fresh)


def test_a_group_left_with_one_rollout_follows_singletons() -> None:
    rewards, versions = np.array([0.7, 0.2]), [4, 1]
    kw = dict(group_size=2, policy_versions=versions, current_version=4, max_staleness=0)
    skip = compute_advantages(rewards, "grpo", stale_rollouts="drop", **kw)
    assert skip.advantages.tolist() == [0.0, 0.0]
    assert skip.num_skipped == 1
    raw = compute_advantages(rewards, "grpo", stale_rollouts="drop", singletons="raw", **kw)
    np.testing.assert_allclose(raw.advantages, [0.7 / (1 + 1e-6), 0.0])
    assert raw.valid.tolist() == [True, False]


def test_nan_rewards_still_follow_nan_policy() -> None:
    rewards = np.array([1.0, NAN, 0.0, 1.0])
    drop_the_last = {"policy_versions": [2, 2, 2, 0], "current_version": 2, "max_staleness": 0}
    with pytest.raises(ValueError, match=r"^rewards: "):
        compute_advantages(rewards, "grpo", group_size=4, stale_rollouts="drop", **drop_the_last)
    result = compute_advantages(
        rewards, "grpo", group_size=4, stale_rollouts="drop", nan_policy="omit", **drop_the_last
    )
    alone = compute_advantages(np.array([1.0, 0.0]), "grpo", group_size=2).advantages
    np.testing.assert_allclose(result.advantages[[0, 2]], alone)
    metrics = advantage_metrics(result)
    assert metrics["nan_reward_fraction"] == 0.25  # the NaN, not the dropped stale one
    assert metrics["stale_fraction"] == 0.25


def group_rewards(draw: Any) -> tuple[np.ndarray, list[int], list[int]]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    labels = [g for g, size in enumerate(sizes) for _ in range(size)]
    n = len(labels)
    rewards = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=n, max_size=n))
    versions = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    return np.array(rewards), labels, versions


BATCHES = st.composite(group_rewards)()
PLAIN = [
    n
    for n in estimator_names()
    if not (get_spec(n).turns or get_spec(n).tracker or get_spec(n).components)
    and not any(i.required for i in get_spec(n).inputs)
    and n not in ("passk", "maxrl")  # binary / nonnegative rewards: tested on their own
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=BATCHES, estimator=st.sampled_from(PLAIN), bound=st.integers(0, 3))
def test_drop_is_the_reference_on_the_fresh_rollouts(
    batch: tuple[np.ndarray, list[int], list[int]], estimator: str, bound: int
) -> None:
    rewards, labels, versions = batch
    result = compute_advantages(
        rewards,
        estimator,
        group_ids=labels,
        policy_versions=versions,
        current_version=4,
        max_staleness=bound,
        stale_rollouts="drop",
    )
    fresh = np.array([4 - v <= bound for v in versions])
    want = np.zeros(len(rewards))
    if fresh.any():
        labels_kept = [label for label, f in zip(labels, fresh, strict=True) if f]
        want[fresh] = reference(estimator, rewards[fresh], labels_kept)
    np.testing.assert_allclose(result.advantages, want, rtol=1e-9, atol=1e-9)
    assert not to_numpy(result.valid)[~fresh].any()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=BATCHES,
    estimator=st.sampled_from(["budget", "grpo", "rloo", "dr"]),
    rule=st.sampled_from(RULES),
)
def test_no_versions_or_a_loose_bound_change_nothing(
    batch: tuple[np.ndarray, list[int], list[int]], estimator: str, rule: str
) -> None:
    rewards, labels, versions = batch
    plain = compute_advantages(rewards, estimator, group_ids=labels)
    loose = compute_advantages(
        rewards,
        estimator,
        group_ids=labels,
        policy_versions=versions,
        current_version=4,
        max_staleness=4,
        stale_rollouts=rule,
    )
    unbounded = compute_advantages(
        rewards, estimator, group_ids=labels, policy_versions=versions, current_version=4
    )
    for result in (loose, unbounded):
        np.testing.assert_array_equal(result.advantages, plain.advantages)
        np.testing.assert_array_equal(result.valid, plain.valid)
    assert "staleness_mean" not in advantage_metrics(plain)
    assert advantage_metrics(unbounded)["stale_fraction"] == 0.0


@pytest.mark.parametrize("rule", RULES)
def test_every_backend_and_layout(xp: Any, rule: str) -> None:
    labels = [0, 1, 0, 2, 1, 0, 2, 2, 1, 0]
    rewards = [1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    versions = [3, 3, 1, 3, 2, 3, 3, 0, 3, 3]
    want = compute_advantages(
        np.array(rewards),
        "grpo",
        group_ids=labels,
        policy_versions=versions,
        current_version=3,
        max_staleness=1,
        stale_rollouts=rule,
    )
    from advbudget import make_groups

    for method in ("padded", None):
        for dtype, tol in ((xp.float64, 1e-12), (xp.float32, 1e-5)):
            r = xp.asarray(rewards, dtype=dtype)
            grouping = (
                {"groups": make_groups(r, group_ids=labels, method=method)}
                if method
                else {"group_ids": labels}
            )
            if method is None and xp.__name__.startswith("array_api_strict"):
                continue  # labels need segment operations there: padded covers it
            got = compute_advantages(
                r,
                "grpo",
                **grouping,
                policy_versions=versions,
                current_version=3,
                max_staleness=1,
                stale_rollouts=rule,
            )
            assert_close(got.advantages, want.advantages, xp=xp, dtype=dtype, rtol=tol, atol=tol)
            assert to_numpy(got.valid).tolist() == want.valid.tolist()
            assert advantage_metrics(got) == pytest.approx(
                advantage_metrics(want), abs=tol, nan_ok=True
            )


def test_jax_jit_with_versions_as_arrays() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    for rule in RULES:

        @jax.jit
        def step(rewards: Any, versions: Any, rule: str = rule) -> Any:
            result = compute_advantages(
                rewards,
                "grpo",
                group_size=4,
                policy_versions=versions,
                current_version=5,
                max_staleness=1,
                stale_rollouts=rule,
            )
            return result.advantages, result.valid

        advantages, valid = step(jnp.asarray(REWARDS, dtype=jnp.float32), jnp.asarray(VERSIONS))
        eager = call(rule)
        np.testing.assert_allclose(np.asarray(advantages), eager.advantages, atol=1e-5)
        assert np.asarray(valid).tolist() == eager.valid.tolist()


def test_a_trajectory_is_as_old_as_its_oldest_row() -> None:
    # Trajectory b's first turn came from version 1, its second from 3: b is stale.
    result = compute_advantages(
        np.array([1.0, NAN, 0.0, 0.0]),
        "grpo",
        group_ids=["p"] * 4,
        trajectory_ids=["a", "b", "b", "c"],
        policy_versions=[3, 1, 3, 3],
        current_version=3,
        max_staleness=1,
        stale_rollouts="drop",
    )
    alone = compute_advantages(np.array([1.0, 0.0]), "grpo", group_size=2).advantages
    np.testing.assert_allclose(result.advantages, [alone[0], 0.0, 0.0, alone[1]])
    assert result.valid.tolist() == [True, False, False, True]
    metrics = advantage_metrics(result)
    assert metrics["stale_fraction"] == pytest.approx(1 / 3)  # of 3 trajectories
    assert metrics["staleness_max"] == 2.0
    with pytest.raises(ValueError, match=r"^policy_versions: not with estimator 'gigpo'"):
        compute_advantages(
            np.array([1.0, 0.0]),
            "gigpo",
            group_ids=["p", "p"],
            trajectory_ids=[0, 1],
            anchor_ids=[0, 0],
            turn_rewards=[0.0, 0.0],
            policy_versions=[0, 0],
            current_version=0,
        )


def test_staleness_metrics_by_hand() -> None:
    metrics = advantage_metrics(call("keep"))
    assert metrics["staleness_mean"] == 0.25  # one rollout 2 versions old, of 8
    assert metrics["staleness_max"] == 2.0
    assert metrics["stale_fraction"] == 0.125
    assert metrics["mixed_version_group_fraction"] == 0.5  # group 0 only
    unbounded = advantage_metrics(call("keep", max_staleness=None))
    assert unbounded["stale_fraction"] == 0.0
    assert unbounded["mixed_version_group_fraction"] == 0.5


def test_group_mean_percentiles_by_hand() -> None:
    # Group means .25, .5, 0, 1 (the rules' example): p10 .075, p50 .375, p90 .85.
    rewards = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    result = compute_advantages(rewards, "budget", group_ids=[0, 0, 0, 0, 1, 1, 2, 2, 3, 3])
    metrics = advantage_metrics(result)
    assert metrics["group_mean_p10"] == pytest.approx(0.075)
    assert metrics["group_mean_p50"] == pytest.approx(0.375)
    assert metrics["group_mean_p90"] == pytest.approx(0.85)
    # NaN rewards left out of their group's mean; a group with none left out entirely.
    omitted = compute_advantages(
        np.array([1.0, NAN, NAN, NAN]), "budget", group_size=2, nan_policy="omit"
    )
    only = advantage_metrics(omitted)
    assert only["group_mean_p10"] == only["group_mean_p90"] == 1.0
    none = advantage_metrics(
        compute_advantages(np.array([NAN, NAN]), "budget", group_size=2, nan_policy="omit")
    )
    assert math.isnan(none["group_mean_p50"])


def test_near_tie_groups() -> None:
    # Spreads: 0 (a tie), 1e-3 (near), 0.5 (a real gap), 2e-7 (within the tie tolerance).
    rewards = np.array([0.3, 0.3, 0.3, 0.301, 0.0, 0.5, 1.0, 1.0 + 2e-7])
    result = compute_advantages(rewards, "budget", group_size=2)
    assert advantage_metrics(result, reward_resolution=0.01)["near_tie_group_fraction"] == 0.25
    assert advantage_metrics(result, reward_resolution=1.0)["near_tie_group_fraction"] == 0.5
    assert "near_tie_group_fraction" not in advantage_metrics(result)
    for bad in (0.0, -1.0, math.inf, "0.1"):
        with pytest.raises(ValueError, match=r"^reward_resolution: expected a positive finite"):
            advantage_metrics(result, reward_resolution=bad)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"policy_versions": [5] * 7}, r"^policy_versions: expected one version per rollout \(8\)"),
        ({"policy_versions": [5] * 7 + [6]}, r"^policy_versions: version 6 at rollout 7 is newer"),
        ({"policy_versions": [5.5] * 8}, r"^policy_versions: expected integers, got 5.5"),
        ({"policy_versions": ["a"] * 8}, r"^policy_versions: expected integers"),
        ({"stale_rollouts": "withhold"}, r"^stale_rollouts: expected one of \('keep', "),
        ({"max_staleness": -1}, r"^max_staleness: expected an int >= 0 or None, got -1"),
        ({"max_staleness": 1.5}, r"^max_staleness: expected an int, got 1.5"),
        ({"current_version": None}, r"^current_version: policy_versions need"),
        ({"current_version": "5"}, r"^current_version: expected an int, got '5'"),
        ({"policy_versions": None}, r"^policy_versions: current_version=5 needs one policy"),
        (
            {"policy_versions": None, "current_version": None, "max_staleness": None},
            r"^policy_versions: stale_rollouts='drop' needs one policy version",
        ),
    ],
)
def test_one_clear_error_per_bad_input(overrides: dict[str, Any], message: str) -> None:
    given = {**STALE, "stale_rollouts": "drop", **overrides}
    with pytest.raises(ValueError, match=message):
        compute_advantages(REWARDS, "grpo", group_size=4, **given)


# -- shaped rewards beside their outcome (verl-recipe#125) ----------------------------------

# Four groups of 4: all failed with a length term's spread (trained on shaping alone), mixed,
# all solved, and a group whose outcomes differ but whose shaped rewards tie (skipped).
OUTCOME = np.array([0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0], dtype=np.float64)
SHAPED = OUTCOME + np.array([0.1, 0.2, 0.1, 0.3, *[0.0] * 8, -1.0, 0, 0, 0])


def test_outcome_disagreement_by_hand() -> None:
    result = compute_advantages(SHAPED, "grpo", group_size=4)
    assert to_numpy(result.group_skipped).tolist() == [False, False, True, True]
    metrics = advantage_metrics(result, outcome_rewards=OUTCOME)
    # group 0: trained, outcomes tied; group 3: skipped, outcomes differ.
    assert metrics["outcome_disagreement_group_fraction"] == 0.5
    assert "outcome_disagreement_group_fraction" not in advantage_metrics(result)
    same = advantage_metrics(result, outcome_rewards=SHAPED)
    assert same["outcome_disagreement_group_fraction"] == 0.0


def test_outcome_disagreement_leaves_out_what_has_no_outcome_or_no_reward() -> None:
    rewards = SHAPED.copy()
    rewards[4:8] = NAN  # group 1: no reward (omitted): not counted
    outcome = OUTCOME.copy()
    outcome[12:16] = NAN  # group 3: no outcome: not counted
    outcome[0] = NAN  # one rollout without an outcome: group 0 judged on the other three
    result = compute_advantages(rewards, "grpo", group_size=4, nan_policy="omit")
    metrics = advantage_metrics(result, outcome_rewards=outcome)
    assert metrics["outcome_disagreement_group_fraction"] == 0.5  # groups 0 (yes), 2 (no)
    none = np.full(16, NAN)
    assert math.isnan(
        advantage_metrics(result, outcome_rewards=none)["outcome_disagreement_group_fraction"]
    )


def test_outcome_disagreement_on_every_backend(xp: Any) -> None:
    want = advantage_metrics(compute_advantages(SHAPED, "budget", group_size=4),
                             outcome_rewards=OUTCOME)  # fmt: skip
    for dtype in (xp.float64, xp.float32):
        got = compute_advantages(xp.asarray(SHAPED, dtype=dtype), "budget", group_size=4)
        metrics = advantage_metrics(got, outcome_rewards=xp.asarray(OUTCOME, dtype=dtype))
        assert metrics["outcome_disagreement_group_fraction"] == 0.5
        assert metrics == pytest.approx(want, rel=1e-6, abs=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=8, max_size=8 * 6).filter(
        lambda r: len(r) % 4 == 0
    ),
    st.sampled_from(["grpo", "budget", "rloo", "maxrl"]),
)
def test_outcomes_equal_to_the_rewards_never_disagree(rewards: list[float], name: str) -> None:
    result = compute_advantages(np.array(rewards), name, group_size=4)
    metrics = advantage_metrics(result, outcome_rewards=rewards)
    assert metrics["outcome_disagreement_group_fraction"] == 0.0


def test_bad_outcomes_are_refused() -> None:
    result = compute_advantages(SHAPED, "grpo", group_size=4)
    with pytest.raises(ValueError, match=r"^outcome_rewards: expected shape \(16,\), one per"):
        advantage_metrics(result, outcome_rewards=OUTCOME[:8])
    with pytest.raises(ValueError, match=r"^outcome_rewards: expected one number per rollout"):
        advantage_metrics(result, outcome_rewards=["a"] * 16)
    turns = compute_advantages(
        np.array([1.0, NAN, 0.0, 0.0]), "grpo", group_ids=[0, 0, 0, 0],
        trajectory_ids=[0, 0, 1, 2],
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"^outcome_rewards: not supported on a multi-turn"):
        advantage_metrics(turns, outcome_rewards=[1.0, 1.0, 0.0, 0.0])
