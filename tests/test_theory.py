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
