"""The group-centred estimators (advbudget/core/estimators/group.py): budget, grpo, dr and
rloo (their functions and ``compute_advantages``), maxrl and opo. Hand values, their
binary formulas and theory, groups of one, invariants, the warnings. (dgpo, a weighted
group estimator: test_weights.py; every estimator's float64 reference on every layout and
backend: tests/test_conformance.py.)"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advbudget import (
    budget_advantage,
    compute_advantages,
    dr_advantage,
    group_normalized_advantage,
    rloo_advantage,
)
from advbudget.testing import assert_close, to_numpy
from advbudget.theory import implied_slope, objective_slope

from ._shared import (
    FUNCTIONS,
    advantages_of,
    assert_shift_invariant,
    backend_settings,
    batches,
    check_hand_values,
    group_sums,
)

# -- budget, grpo, dr, rloo: hand values ------------------------------------------------------

# (rewards, group size, {estimator: expected}), worked by hand.
THIRD, SIXTH = 1 / 3, 1 / 6


HAND_CASES = {
    "binary one of four": (
        [1, 0, 0, 0],
        4,
        {
            "budget": [0.75, -0.25, -0.25, -0.25],
            # mean 1/4, unbiased std sqrt(3/4 / 3) = 1/2
            "grpo": [
                0.75 / (0.5 + 1e-6),
                -0.25 / (0.5 + 1e-6),
                -0.25 / (0.5 + 1e-6),
                -0.25 / (0.5 + 1e-6),
            ],
            "dr": [0.75, -0.25, -0.25, -0.25],
            "rloo": [1.0, -THIRD, -THIRD, -THIRD],
        },
    ),
    "binary three of four": (
        [1, 1, 0, 1],
        4,
        {
            "budget": [1 / 12, 1 / 12, -0.25, 1 / 12],  # 1/3 - 1/4 for the correct ones
            "grpo": [0.25 / (0.5 + 1e-6)] * 2 + [-0.75 / (0.5 + 1e-6), 0.25 / (0.5 + 1e-6)],
            "dr": [0.25, 0.25, -0.75, 0.25],
            "rloo": [THIRD, THIRD, -1.0, THIRD],
        },
    ),
    "plus minus one": (
        [1, -1, -1, 1],
        4,
        {
            "budget": [0.25, -0.25, -0.25, 0.25],  # gaps 2,0,0,2 -> shares 1/2
            "grpo": [1 / (2 / math.sqrt(3) + 1e-6) * s for s in (1, -1, -1, 1)],
            "dr": [1.0, -1.0, -1.0, 1.0],
            "rloo": [4 / 3, -4 / 3, -4 / 3, 4 / 3],
        },
    ),
    "graded and negative": (
        [-2.0, 0.0, 1.0],
        3,
        {
            # gaps 0, 2, 3 over 5; minus 1/3
            "budget": [-THIRD, 2 / 5 - THIRD, 3 / 5 - THIRD],
            # mean -1/3; deviations -5/3, 1/3, 4/3; var (25+1+16)/9/2 = 7/3
            "grpo": [d / (math.sqrt(7 / 3) + 1e-6) for d in (-5 / 3, 1 / 3, 4 / 3)],
            "dr": [-5 / 3, 1 / 3, 4 / 3],
            "rloo": [-2.5, 0.5, 2.0],
        },
    ),
    "all tied": ([0.5, 0.5, 0.5, 0.5], 4, {name: [0.0] * 4 for name in FUNCTIONS}),
    "two groups, one skipped": (
        [1, 0, 1, 1],
        2,
        {
            "budget": [0.5, -0.5, 0.0, 0.0],
            "grpo": [0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6), 0.0, 0.0],
            "dr": [0.5, -0.5, 0.0, 0.0],
            "rloo": [1.0, -1.0, 0.0, 0.0],
        },
    ),
    "singletons": ([3.0, -1.0], 1, {name: [0.0, 0.0] for name in FUNCTIONS}),
}


@pytest.mark.parametrize("estimator", FUNCTIONS)
@pytest.mark.parametrize("case", HAND_CASES)
def test_hand_computed_values(xp, device, case, estimator):
    rewards, group_size, expected = HAND_CASES[case]
    r = xp.asarray(rewards, dtype=xp.float64, device=device)
    adv = FUNCTIONS[estimator](r, group_size=group_size)
    assert_close(adv, expected[estimator], like=r)


@pytest.mark.parametrize("estimator", FUNCTIONS)
def test_budget_binary_formula_for_every_k(estimator):
    """k of G correct: budget gives B(1/k - 1/G) and -B/G; Dr gives budget * k."""
    group_size, budget = 8, 2.5
    for k in range(1, group_size):
        rewards = np.array([1.0] * k + [0.0] * (group_size - k))
        adv = budget_advantage(rewards, group_size=group_size, budget=budget)
        np.testing.assert_allclose(adv[0], budget * (1 / k - 1 / group_size), rtol=1e-12)
        np.testing.assert_allclose(adv[-1], -budget / group_size, rtol=1e-12)
        dr = dr_advantage(rewards, group_size=group_size)
        np.testing.assert_allclose(budget * dr / k, adv, rtol=1e-12, atol=1e-15)


def test_budget_scale():
    rewards = np.array([1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(
        budget_advantage(rewards, group_size=4, budget=4.0), [3.0, -1.0, -1.0, -1.0]
    )


def test_singletons_raw_is_verls_convention():
    rewards = np.array([3.0, 1.0, 0.0, -2.0])
    labels = ["solo", "pair", "pair", "neg"]
    eps = 1e-6
    grpo = group_normalized_advantage(rewards, group_ids=labels, singletons="raw", eps=eps)
    pair = 0.5 / (math.sqrt(0.5) + eps)
    np.testing.assert_allclose(grpo, [3.0 / (1 + eps), pair, -pair, -2.0 / (1 + eps)])
    np.testing.assert_allclose(
        dr_advantage(rewards, group_ids=labels, singletons="raw"), [3.0, 0.5, -0.5, -2.0]
    )
    np.testing.assert_allclose(
        rloo_advantage(rewards, group_ids=labels, singletons="raw"), [3.0, 1.0, -1.0, -2.0]
    )
    res = compute_advantages(rewards, "grpo", group_ids=labels, singletons="raw")
    assert res.valid.tolist() == [True, True, True, True]
    skip = compute_advantages(rewards, "grpo", group_ids=labels)
    assert skip.valid.tolist() == [False, True, True, False]


def test_biased_std_and_eps():
    rewards = np.array([1.0, 0.0])
    np.testing.assert_allclose(
        group_normalized_advantage(rewards, group_size=2, std_correction=0, eps=0.0), [1.0, -1.0]
    )
    np.testing.assert_allclose(
        group_normalized_advantage(rewards, group_size=2, eps=1e-4),
        [0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)],
    )


def test_constant_float32_group_is_exactly_zero(xp):
    rewards = xp.asarray([0.1, 0.1, 0.1, 0.7, 0.7, 0.7], dtype=xp.float32)
    for fn in FUNCTIONS.values():
        out = fn(rewards, group_size=3, tie_rtol=0, tie_atol=0)
        assert np.all(to_numpy(out) == 0.0)


# -- maxrl ------------------------------------------------------------------------------------


def test_maxrl_hand_values(xp):
    # [1, 0, 0, 0]: mean 1/4, (1 - 1/4) / (1/4 + eps) and (0 - 1/4) / (1/4 + eps);
    # [2, 1]: mean 1.5, ±0.5 / 1.5; [3, 3]: no gap.
    rewards = xp.asarray([1.0, 0.0, 0.0, 0.0, 2.0, 1.0, 3.0, 3.0], dtype=xp.float64)
    labels = [0, 0, 0, 0, 1, 1, 2, 2]
    e = 1e-6
    expected = [0.75 / (0.25 + e), *[-0.25 / (0.25 + e)] * 3, 0.5 / (1.5 + e), -0.5 / (1.5 + e)]
    result = compute_advantages(rewards, "maxrl", group_ids=labels)
    assert_close(result.advantages, [*expected, 0.0, 0.0], like=rewards)
    # SkyRL scores a group of one as r - 0: singletons="raw".
    lone = compute_advantages(xp.asarray([0.7, 1.0, 0.0]), "maxrl", group_ids=[0, 1, 1],
                              singletons="raw")  # fmt: skip
    assert_close(lone.advantages, [0.7, 0.5 / (0.5 + e), -0.5 / (0.5 + e)], xp=xp, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    group_size=st.integers(2, 16),
    successes=st.lists(st.integers(0, 16), min_size=1, max_size=6),
)
def test_maxrl_is_group_size_times_budget_on_binary_rewards(group_size, successes):
    rewards = np.concatenate(
        [(np.arange(group_size) < min(k, group_size)).astype(np.float64) for k in successes]
    )
    maxrl = compute_advantages(rewards, "maxrl", group_size=group_size, eps=0.0).advantages
    budget = compute_advantages(rewards, "budget", group_size=group_size).advantages
    np.testing.assert_allclose(maxrl, group_size * budget, rtol=1e-12, atol=1e-12)


def test_maxrl_slope_is_group_size_times_budgets():
    p = [0.05, 0.3, 0.5, 0.9]
    np.testing.assert_allclose(
        implied_slope("maxrl", 8, p, eps=0.0), 8 * objective_slope(p, 8), rtol=1e-12
    )


def test_maxrl_warns_on_a_group_mean_at_or_below_zero():
    # DAPO's ±1 reward, 1 correct of 8: mean -0.75, and the correct rollout gets a
    # negative advantage; budgeting (shift by the minimum) gives it +7/8.
    rewards = np.array([1.0] + [-1.0] * 7 + [1.0] * 6 + [-1.0] * 2)
    with pytest.warns(UserWarning, match=r"maxrl .* 1 group\(s\) .* group 0 .* mean -0\.75"):
        advantages = compute_advantages(rewards, "maxrl", group_size=8).advantages
    assert advantages[0] < 0 < compute_advantages(rewards, "budget", group_size=8).advantages[0]
    # A group of mean 0 is divided by eps: named too (the count, the first one).
    even = np.array([1.0] * 4 + [-1.0] * 4)
    with pytest.warns(UserWarning, match=r"2 group\(s\) .* group 1 .* mean 0:"):
        compute_advantages(np.concatenate([rewards[8:], even, rewards]), "maxrl", group_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compute_advantages((rewards + 1) / 2, "maxrl", group_size=8)  # 0/1: no warning


# -- opo: the length-weighted baseline -----------------------------------------------------


def test_opo_hand_values(xp):
    # Group 1's baseline is 4 * 1 / 8 = 0.5; group 2's (0.5 + 1.5 + 2 + 0) / 8 = 0.5.
    check_hand_values(xp, "opo", (), [0.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.5, -0.5], lengths=True)


def test_opo_groups_of_one(xp):
    # Rewards [2 | 1, 0]: under "raw" the lone rollout keeps its reward (verl's baseline 0).
    rewards = xp.asarray([2.0, 1.0, 0.0], dtype=xp.float64)
    labels = ["a", "b", "b"]
    lengths = xp.asarray([3.0, 1.0, 1.0], dtype=xp.float64)
    opo = compute_advantages(rewards, "opo", group_ids=labels, response_lengths=lengths)
    assert_close(opo.advantages, [0.0, 0.5, -0.5], like=rewards)
    assert to_numpy(opo.valid).tolist() == [False, True, True]
    raw = compute_advantages(
        rewards, "opo", group_ids=labels, response_lengths=lengths, singletons="raw"
    )
    assert_close(raw.advantages, [2.0, 0.5, -0.5], like=rewards)


@backend_settings
@given(batch=batches())
def test_opo_sums_to_zero_per_group_weighted_by_length(xp, batch):
    _, labels, lengths = batch
    assert np.all(np.abs(group_sums(advantages_of(xp, "opo", *batch), labels, lengths)) < 1e-9)


@backend_settings
@given(batch=batches(min_size=2), shift=st.sampled_from([-3.0, 0.5, 7.0]))
def test_opo_ignores_a_constant_added_to_every_reward(xp, batch, shift):
    assert_shift_invariant(xp, "opo", batch, shift)
