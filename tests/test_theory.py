"""The exact finite-G identity of SPEC section 3 and its worked numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from advbudget import budget_advantage, dr_advantage
from advbudget.theory import (
    binary_advantages,
    implied_slope,
    log_mean_objective,
    objective,
    objective_slope,
)

P = np.linspace(0.0, 1.0, 41)


@pytest.mark.parametrize("group_size", range(2, 17))
def test_budget_slope_equals_objective_slope(group_size):
    np.testing.assert_allclose(
        implied_slope("budget", group_size, P), objective_slope(P, group_size), rtol=1e-12
    )


def test_slope_by_direct_enumeration():
    """The closed form against the SPEC's sum with explicit 1/p and 1/(1-p)."""
    g = 8
    correct, wrong = binary_advantages("grpo", g)
    for p in (0.05, 0.3, 0.5, 0.95):
        total = 0.0
        for k in range(g + 1):
            weight = math.comb(g, k) * p**k * (1 - p) ** (g - k)
            up = k * correct[k] / p if k else 0.0
            down = (g - k) * wrong[k] / (1 - p) if k < g else 0.0
            total += weight * (up - down)
        assert implied_slope("grpo", g, p) == pytest.approx(total, rel=1e-12)


def test_worked_numbers_of_the_spec():
    np.testing.assert_allclose(
        objective_slope([0.05, 0.5, 0.95], 8), [6.0333, 1.9844, 1.0526], atol=5e-5
    )
    np.testing.assert_allclose(implied_slope("dr", 8, P), 7.0, rtol=1e-12)
    grpo = implied_slope("grpo", 8, [0.05, 0.5, 0.95])
    assert grpo[0] == pytest.approx(18.5, abs=0.05)
    assert grpo[2] == pytest.approx(18.5, abs=0.05)
    assert grpo[1] == pytest.approx(13.9, abs=0.05)
    assert objective(0.05, 8) - log_mean_objective(0.05, 8) == pytest.approx(0.73, abs=0.005)


def test_objective_is_integral_of_slope():
    g, x = 8, np.linspace(0, 1, 2001)
    slope = objective_slope(x, g)
    integral = np.concatenate([[0.0], np.cumsum((slope[1:] + slope[:-1]) / 2 * np.diff(x))])
    np.testing.assert_allclose(objective(x, g), integral, atol=1e-6)
    harmonic = sum(1 / m for m in range(1, g))
    assert objective(1.0, g) == pytest.approx(harmonic)


def test_callables_and_options():
    """Any advantage function works; options reach the estimator."""
    np.testing.assert_allclose(
        implied_slope(budget_advantage, 6, P), objective_slope(P, 6), rtol=1e-12
    )
    np.testing.assert_allclose(
        implied_slope("budget", 6, P, budget=2.0), 2 * objective_slope(P, 6), rtol=1e-12
    )
    np.testing.assert_allclose(implied_slope(dr_advantage, 6, P), 5.0, rtol=1e-12)
    correct, wrong = binary_advantages("budget", 8)
    assert np.isnan(correct[0])
    assert np.isnan(wrong[8])
    np.testing.assert_allclose(correct[1:], [1 / k - 1 / 8 for k in range(1, 9)])
    np.testing.assert_allclose(wrong[1:8], -1 / 8)


def test_bad_arguments():
    with pytest.raises(ValueError, match="group_size: expected an int >= 2, got 1"):
        objective(0.5, 1)
    with pytest.raises(TypeError, match="group_size: expected an int >= 2"):
        objective_slope(0.5, 2.5)
    with pytest.raises(ValueError, match=r"p: expected probabilities in \[0, 1\]"):
        implied_slope("budget", 8, 1.5)
    with pytest.raises(ValueError, match="estimator: expected one of"):
        implied_slope("nope", 8, 0.5)
    with pytest.raises(TypeError, match="estimator: expected a name or a callable"):
        binary_advantages(42, 8)


# -- the other estimators' slopes ----------------------------------------------------------

BINARY_P = [0.05, 0.3, 0.5, 0.95]  # for the slopes of the other estimators


def test_implied_slopes_for_binary_rewards():
    g = 8
    dr = implied_slope("dr", g, BINARY_P)
    np.testing.assert_allclose(dr, 7.0)
    # Constant response lengths make opo dr; gpg, grpo_batch_std and the whitened
    # REINFORCE baselines have dr's slope up to a positive batch factor (slope_of).
    np.testing.assert_allclose(implied_slope("opo", g, BINARY_P, response_lengths=5), dr)
    for name in ("gpg", "grpo_batch_std", "reinforce_baseline", "reinforce_plus_plus_baseline"):
        np.testing.assert_allclose(implied_slope(name, g, BINARY_P), dr)
    np.testing.assert_allclose(
        implied_slope("rloo_normalized", g, BINARY_P), implied_slope("rloo", g, BINARY_P)
    )
    # ReMax with any constant baseline: every rollout's reward counts, slope G.
    np.testing.assert_allclose(implied_slope("remax", g, BINARY_P, reward_baselines=0.3), 8.0)
    # Pass@k: only k = 1 moves anything, A = 1 / (std + eps), std = 1/sqrt(G) (unbiased):
    # slope = G (1-p)^(G-1) / (1/sqrt(G) + eps).
    p = np.array(BINARY_P)
    expected = g * (1 - p) ** (g - 1) / (1 / math.sqrt(g) + 1e-6)
    np.testing.assert_allclose(implied_slope("grpo_passk", g, BINARY_P), expected, rtol=1e-12)
    unnormalised = implied_slope("grpo_passk", g, BINARY_P, norm_adv_by_std=False)
    np.testing.assert_allclose(unnormalised, g * (1 - p) ** (g - 1), rtol=1e-12)


def test_binary_advantages_average_over_the_correct_rollouts():
    correct, wrong = binary_advantages("grpo_passk", 4, norm_adv_by_std=False)
    np.testing.assert_array_equal(correct, [np.nan, 1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(wrong, [0.0, 0.0, 0.0, 0.0, np.nan])

    # A hand-made estimator that gives only the first correct rollout of a group 1: the
    # mean over the k correct ones is 1/k, so k * correct[k] is the group's sum, 1.
    def first_only(rewards, group_size):
        table = np.asarray(rewards).reshape(-1, group_size)
        out = np.zeros_like(table)
        out[table[:, 0] == 1, 0] = 1.0
        return out.reshape(-1)

    correct, wrong = binary_advantages(first_only, 4)
    np.testing.assert_allclose(correct[1:], [1.0, 0.5, 1 / 3, 0.25])
    np.testing.assert_allclose(
        implied_slope(first_only, 4, BINARY_P), _first_only_slope(np.array(BINARY_P))
    )


def _first_only_slope(p):
    # The up-term only: sum_k C(4,k) k p^(k-1) (1-p)^(4-k) * (1/k).
    return sum(math.comb(4, k) * p ** (k - 1) * (1 - p) ** (4 - k) for k in range(1, 5))
