"""The pass@k estimators (advbudget/core/estimators/passk.py): verl's ``grpo_passk`` (only
each group's best rollout moves) and the analytical pass@k advantage ``passk``. Hand
values, the binomial formula, the objective each optimises, groups of one, invariants,
errors. (Their float64 references on every layout and backend: tests/test_conformance.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget.testing import assert_close
from advbudget.theory import implied_slope, passk_objective

from ._shared import (
    advantages_of,
    assert_shift_invariant,
    backend_settings,
    batches,
    check_hand_values,
)

# -- grpo_passk ------------------------------------------------------------------------------

HAND = {
    # Group 1's unique best gets (1 - 0) / (unbiased std 0.5 + 1e-6); group 2's best (1.0)
    # gets (1 - 0.5) / (sqrt(0.5 / 3) + 1e-6).
    (): [1 / (0.5 + 1e-6), 0, 0, 0, 0, 0, 0.5 / (math.sqrt(1 / 6) + 1e-6), 0],
    (("norm_adv_by_std", False),): [1, 0, 0, 0, 0, 0, 0.5, 0],
}


@pytest.mark.parametrize("options", list(HAND), ids=str)
def test_grpo_passk_hand_values(xp, options):
    check_hand_values(xp, "grpo_passk", options, HAND[options])


def test_grpo_passk_leaves_a_group_of_one_out(xp):
    rewards = xp.asarray([2.0, 1.0, 0.0], dtype=xp.float64)
    result = compute_advantages(rewards, "grpo_passk", group_ids=["a", "b", "b"])
    assert_close(result.advantages, [0.0, 1 / (math.sqrt(0.5) + 1e-6), 0.0], like=rewards)
    with pytest.raises(ValueError, match="singletons: expected 'skip' for the grpo_passk"):
        compute_advantages(rewards, "grpo_passk", group_ids=["a", "b", "b"], singletons="raw")


@backend_settings
@given(batch=batches(min_size=2))
def test_grpo_passk_updates_at_most_the_best_rollout_of_each_group(xp, batch):
    rewards, labels, _ = batch
    out = advantages_of(xp, "grpo_passk", *batch)
    assert np.all(out >= 0)
    for label in set(labels):
        idx = [i for i, x in enumerate(labels) if x == label]
        nonzero = [i for i in idx if out[i] != 0]
        assert len(nonzero) <= 1
        if nonzero:
            assert rewards[nonzero[0]] == max(rewards[idx])


@backend_settings
@given(batch=batches(min_size=2), shift=st.sampled_from([-3.0, 0.5, 7.0]))
def test_grpo_passk_ignores_a_constant_added_to_every_reward(xp, batch, shift):
    assert_shift_invariant(xp, "grpo_passk", batch, shift)


# -- the analytical pass@k advantage -------------------------------------------------------


def _comb_advantages(n: int, c: int, k: int) -> tuple[float, float]:
    rho = 1 - math.comb(n - c, k) / math.comb(n, k)
    sigma = math.sqrt(rho * (1 - rho)) + 1e-6
    return (1 - rho) / sigma, (
        1 - rho - math.comb(n - c - 1, k - 1) / math.comb(n - 1, k - 1)
    ) / sigma


def test_passk_hand_values(xp):
    # n = 8, 1 correct, k = 4: rho = 1 - C(7,4)/C(8,4) = 1/2, sigma = 1/2; a correct rollout
    # gets (1 - 1/2) / (1/2 + eps), a wrong one (1 - 1/2 - C(6,3)/C(7,3)) / (1/2 + eps)
    # = (1/2 - 4/7) / (1/2 + eps).
    e = 1e-6
    rewards = xp.asarray([1.0] + [0.0] * 7, dtype=xp.float64)
    result = compute_advantages(rewards, "passk", group_size=8, k=4)
    assert_close(
        result.advantages, [0.5 / (0.5 + e)] + [(0.5 - 4 / 7) / (0.5 + e)] * 7, like=rewards
    )
    # n = 8, 6 correct, k = 4: 2 wrong < k, so every draw of 4 succeeds: rho = 1, all 0.
    many = compute_advantages(xp.asarray([1.0] * 6 + [0.0] * 2), "passk", group_size=8, k=4)
    assert_close(many.advantages, [0.0] * 8, xp=xp)
    # ±1 rewards are the same binary outcome.
    pm = compute_advantages(2 * rewards - 1, "passk", group_size=8, k=4)
    assert_close(pm.advantages, result.advantages, xp=xp)


@pytest.mark.parametrize(("n", "c", "k"), [(8, 1, 2), (8, 3, 4), (16, 5, 8), (5, 2, 1), (8, 4, 7)])
def test_passk_matches_the_binomial_formula(n, c, k):
    positive, negative = _comb_advantages(n, c, k)
    rewards = np.array([1.0] * c + [0.0] * (n - c))
    expected = [positive] * c + [negative] * (n - c)
    got = compute_advantages(rewards, "passk", group_size=n, k=k).advantages
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_passk_with_k_1_is_grpo_with_the_biased_std():
    rewards = np.array([1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0], dtype=np.float64)
    np.testing.assert_allclose(
        compute_advantages(rewards, "passk", group_size=6, k=1).advantages,
        compute_advantages(rewards, "grpo", group_size=6, std_correction=0).advantages,
        rtol=1e-12,
    )


@pytest.mark.parametrize(("group_size", "k"), [(8, 1), (8, 2), (8, 4), (16, 4), (8, 8)])
def test_passk_optimises_pass_at_k(group_size, k):
    # Unnormalised, its expected update is (G - k) / k times d/dp pass@k: exactly.
    p = np.array([0.02, 0.2, 0.5, 0.8, 0.98])
    slope = implied_slope("passk", group_size, p, k=k, norm_by_std=False)
    np.testing.assert_allclose(slope, (group_size - k) * (1 - p) ** (k - 1), rtol=1e-10, atol=1e-12)
    h = 1e-6
    derivative = (passk_objective(p + h, k) - passk_objective(p - h, k)) / (2 * h)
    np.testing.assert_allclose(slope, (group_size - k) / k * derivative, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "rewards", "message"),
    [
        ({"k": 0}, [1.0, 0.0], r"k: expected an int >= 1, got 0"),
        ({"k": 3}, [1.0, 0.0], r"k: expected at most the group size \(2, .*\), got 3"),
        ({"k": 2.0}, [1.0, 0.0], r"k: expected an int >= 1, got 2.0"),
        ({"k": 2}, [1.0, 0.5, 0.0, 0.0], r"rewards: passk expects binary rewards"),
    ],
)
def test_passk_errors(kwargs, rewards, message):
    with pytest.raises(ValueError, match=message):
        compute_advantages(np.array(rewards), "passk", group_size=len(rewards), **kwargs)


def test_passk_objective_checks_k():
    with pytest.raises(ValueError, match="k: expected an int >= 1, got 0"):
        passk_objective(0.5, 0)
