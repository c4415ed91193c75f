"""gdpo: reward components in, hand values out; K = 1; named components; NaN per
component; the one-line errors of the reward matrix."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from advbudget import compute_advantages, make_groups
from advbudget.adapters import get_convention
from advbudget.testing import assert_close, to_numpy

# Two groups of two rollouts, two components: rows are rollouts, columns components.
REWARDS = np.array([[1.0, 2.0], [0.0, 0.0], [0.0, 1.0], [0.0, 3.0]])
EXACT = {"eps": 0.0, "var_eps": 0.0}


def test_hand_values() -> None:
    # Group 0: component 0 is [1, 0] -> ±1/√2, component 1 [2, 0] -> ±1/√2; with weights
    # (1, 2): ±3/√2. Group 1: component 0 is tied -> 0, component 1 [1, 3] -> ∓1/√2,
    # weighted ∓√2. The sum [3/√2, -3/√2, -√2, √2] has mean 0 and unbiased variance
    # 13/3 over the 4 rollouts.
    result = compute_advantages(REWARDS, "gdpo", group_size=2, weights=[1, 2], **EXACT)
    a, b = 3 * math.sqrt(3 / 26), math.sqrt(6 / 13)
    np.testing.assert_allclose(result.advantages, [a, -a, -b, b], rtol=1e-12)
    assert result.valid.tolist() == [True] * 4
    assert result.group_skipped.tolist() == [False, False]
    # The rollout's reward in the result (metrics: solved, outcomes) is the components' sum.
    np.testing.assert_array_equal(result.grouped.groups.flat(result.grouped.rewards), [3, 0, 1, 3])


def test_token_weights_hand_values() -> None:
    # Equal weights: the sum is [√2, -√2, -1/√2, 1/√2]. Response lengths [1, 1, 2, 0]
    # weigh the batch mean and variance by tokens: mean (√2 - √2 - √2)/4 = -√2/4.
    lengths = np.array([1.0, 1.0, 2.0, 0.0])
    result = compute_advantages(
        REWARDS, "gdpo", group_size=2, response_lengths=lengths, **EXACT
    ).advantages
    total = np.array([math.sqrt(2), -math.sqrt(2), -1 / math.sqrt(2), 1 / math.sqrt(2)])
    mean = float(np.sum(lengths * total) / 4)
    std = math.sqrt(float(np.sum(lengths * (total - mean) ** 2)) / 3)
    np.testing.assert_allclose(result, (total - mean) / std, rtol=1e-12)


def test_one_component_is_grpo_then_verls_batch_whitening() -> None:
    rng = np.random.default_rng(0)
    rewards = rng.choice([0.0, 0.5, 1.0], size=(24, 1))
    labels = rng.integers(0, 5, size=24)
    lengths = rng.integers(1, 30, size=24).astype(np.float64)
    gdpo = compute_advantages(rewards, "gdpo", group_ids=labels, response_lengths=lengths)
    grpo = compute_advantages(rewards[:, 0], "grpo", group_ids=labels).advantages
    # reinforce whitens its input over the batch's tokens: with verl's masked_whiten
    # constants (those of reinforce_plus_plus_baseline) it is gdpo's last step.
    whitened = compute_advantages(
        grpo, "reinforce", group_ids=labels, response_lengths=lengths,
        std_correction=1, var_eps=1e-8, var_floor=0.0,
    )  # fmt: skip
    np.testing.assert_allclose(gdpo.advantages, whitened.advantages, rtol=1e-12, atol=1e-12)


def test_named_components_equal_the_matrix(xp: Any) -> None:
    matrix = xp.asarray(REWARDS)
    named = {"format": xp.asarray(REWARDS[:, 0]), "accuracy": xp.asarray(REWARDS[:, 1])}
    by_name = compute_advantages(named, "gdpo", group_size=2, weights=(1.0, 2.0))
    by_column = compute_advantages(matrix, "gdpo", group_size=2, weights=(1.0, 2.0))
    assert_close(by_name.advantages, to_numpy(by_column.advantages), xp=xp, rtol=1e-12)
    # One grouping serves the matrix and its columns (make_groups takes [N, K] too).
    groups = make_groups(matrix, group_ids=[7, 7, 3, 3])
    again = compute_advantages(matrix, "gdpo", groups=groups, weights=(1.0, 2.0))
    assert_close(again.advantages, to_numpy(by_column.advantages), xp=xp, rtol=1e-12)


def test_nan_in_one_component() -> None:
    rewards = REWARDS.copy()
    rewards[3, 1] = math.nan  # rollout 3 keeps component 0; rollout 2 is alone in comp. 1
    with pytest.raises(
        ValueError,
        match=(
            r"^rewards\[:, 1\]: expected finite numbers, got 1 of 4 \(first at index 3\) NaN; "
            r"pass nan_policy='omit'"
        ),
    ):
        compute_advantages(rewards, "gdpo", group_size=2)
    with pytest.raises(ValueError, match=r"^rewards\['accuracy'\]: expected finite numbers"):
        compute_advantages(
            {"format": rewards[:, 0], "accuracy": rewards[:, 1]}, "gdpo", group_size=2
        )
    # "omit": the NaN leaves its component's group statistics only; group 1 of component 1
    # is then a group of one (skipped), component 0 is tied there: group 1 adds 0.
    omitted = compute_advantages(rewards, "gdpo", group_size=2, nan_policy="omit", **EXACT)
    total = np.array([math.sqrt(2), -math.sqrt(2), 0.0, 0.0])
    std = math.sqrt(float(np.sum(total**2)) / 3)
    np.testing.assert_allclose(omitted.advantages, total / std, rtol=1e-12)
    assert omitted.valid.tolist() == [True] * 4  # every rollout has a component
    # A rollout with no component at all is unscorable: advantage 0, not valid, and out
    # of the batch statistics.
    rewards[2] = math.nan
    unscorable = compute_advantages(rewards, "gdpo", group_size=2, nan_policy="omit", **EXACT)
    std = math.sqrt(float(np.sum(total**2)) / 2)
    np.testing.assert_allclose(unscorable.advantages, total / std, rtol=1e-12)
    assert unscorable.valid.tolist() == [True, True, False, True]


def test_raw_singletons_score_each_component_raw() -> None:
    # Rollout 0 is alone: under singletons="raw" (verl's) each component scores r - 0, so
    # 1 + 0.5; the other group's components cancel: [1, 0] -> ±1/√2, [0, 1] -> ∓1/√2.
    # The sum [1.5, 0, 0] has mean 0.5 and unbiased std √0.75.
    rewards = np.array([[1.0, 0.5], [1.0, 0.0], [0.0, 1.0]])
    raw = compute_advantages(rewards, "gdpo", group_ids=[0, 1, 1], singletons="raw")
    r3 = math.sqrt(3)
    np.testing.assert_allclose(raw.advantages, [2 / r3, -1 / r3, -1 / r3], rtol=1e-5)


BAD = {
    "a 1-D vector": (
        np.array([1.0, 0.0, 1.0, 0.0]),
        {"group_size": 2},
        r"^rewards: the gdpo estimator takes reward components, \[N, K\] \(one column per "
        r"component\) or a mapping name -> \[N\], got shape \(4,\)$",
    ),
    "ragged rows": (
        [[1.0, 0.0], [0.0], [1.0, 1.0], [0.0, 1.0]],
        {"group_size": 2},
        r"^rewards: expected the same number of reward components K for every rollout, "
        r"\[N, K\], got 2 components for rollout 0 and 1 component for rollout 1$",
    ),
    "mismatched N between components": (
        {"format": [1.0, 0.0, 1.0, 0.0], "accuracy": [1.0, 0.0, 1.0]},
        {"group_size": 2},
        r"^rewards\['accuracy'\]: expected one reward per rollout like rewards\['format'\], "
        r"shape \(4,\), got shape \(3,\)$",
    ),
    "mismatched N with the labels": (
        REWARDS,
        {"group_ids": [0, 0, 1]},
        r"^group_ids: expected one label per rollout, shape \(4,\), got shape \(3,\)$",
    ),
    "mismatched N with the lengths": (
        REWARDS,
        {"group_size": 2, "response_lengths": [1.0, 2.0]},
        r"^response_lengths: expected one value per rollout, shape \(4,\), got shape \(2,\)$",
    ),
    "weights for another K": (
        REWARDS,
        {"group_size": 2, "weights": [1.0, 2.0, 3.0]},
        r"^weights: expected one weight per reward component \(2\), got 3: \[1.0, 2.0, 3.0\]$",
    ),
    "weights not numbers": (
        REWARDS,
        {"group_size": 2, "weights": "1,2"},
        r"^weights: expected a list of finite numbers, one per reward component, or None "
        r"\(equal weights\), got '1,2'$",
    ),
    "no component": ({}, {"group_size": 2}, r"^rewards: the gdpo estimator expected at least one"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_reward_components_are_one_line_errors(case: str) -> None:
    rewards, grouping, message = BAD[case]
    with pytest.raises(ValueError, match=message) as error:
        compute_advantages(rewards, "gdpo", **grouping)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("rewards", "given"),
    [
        (REWARDS, r"shape \(4, 2\)"),
        ({"format": REWARDS[:, 0]}, "a mapping of 1 reward component"),
        (REWARDS.tolist(), r"a list of rows \(several rewards per rollout\)"),
    ],
)
def test_estimators_of_one_reward_refuse_components(rewards: Any, given: str) -> None:
    with pytest.raises(
        ValueError,
        match=(
            rf"^rewards: the grpo estimator takes one reward per rollout, \[N\], got {given} "
            r"\(reward components are for gdpo\)$"
        ),
    ):
        compute_advantages(rewards, "grpo", group_size=2)


def test_the_frameworks_constants() -> None:
    assert get_convention("verl").settings("gdpo") == {
        "tie_rtol": 0.0,
        "tie_atol": 0.0,
        "singletons": "raw",
        "eps": 1e-6,
        "std_correction": 1,
        "var_eps": 1e-8,
        "std_eps": 0.0,
    }
    trl = get_convention("trl").settings("gdpo")
    assert (trl["eps"], trl["var_eps"], trl["std_eps"], trl["singletons"]) == (
        1e-4,
        0.0,
        1e-4,
        "skip",
    )
    assert not get_convention("openrlhf").components
    assert not get_convention("tunix").components


def test_jax_jit_takes_the_matrix_and_checks_each_component_when_run() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    step = jax.jit(lambda m: compute_advantages(m, "gdpo", group_size=2, **EXACT).advantages)
    with jax.enable_x64(True):
        out = step(jnp.asarray(REWARDS))
        eager = compute_advantages(REWARDS, "gdpo", group_size=2, **EXACT).advantages
        np.testing.assert_allclose(np.asarray(out), eager, rtol=1e-12)
        broken = jnp.asarray(REWARDS).at[2, 1].set(jnp.nan)
        with pytest.raises(
            (ValueError, jax.errors.JaxRuntimeError),  # as JAX wraps a callback's error
            match=r"rewards\[:, 1\]: expected finite numbers, got 1 of 4 \(first at index 2\) NaN",
        ):
            step(broken).block_until_ready()
