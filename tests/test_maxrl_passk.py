"""MaxRL and the analytical pass@k advantage: hand values, their theory, their errors.

(Their float64 references on every layout and backend are in tests/references.py and
tests/test_conformance.py.)"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget.testing import assert_close
from advbudget.theory import implied_slope, objective_slope, passk_objective

# -- MaxRL ---------------------------------------------------------------------------------


def test_maxrl_hand_values(xp):
    # [1, 0, 0, 0]: mean 1/4, (1 - 1/4) / (1/4 + eps) and (0 - 1/4) / (1/4 + eps);
    # [2, 1]: mean 1.5, ±0.5 / 1.5; [3, 3]: no gap.
    rewards = xp.asarray([1.0, 0.0, 0.0, 0.0, 2.0, 1.0, 3.0, 3.0], dtype=xp.float64)
    labels = [0, 0, 0, 0, 1, 1, 2, 2]
    e = 1e-6
    expected = [0.75 / (0.25 + e), *[-0.25 / (0.25 + e)] * 3, 0.5 / (1.5 + e), -0.5 / (1.5 + e)]
    result = compute_advantages(rewards, "maxrl", group_ids=labels)
    assert_close(result.advantages, [*expected, 0.0, 0.0], xp=xp)
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
    assert_close(result.advantages, [0.5 / (0.5 + e)] + [(0.5 - 4 / 7) / (0.5 + e)] * 7, xp=xp)
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


def test_explain_shows_them_beside_budget_with_their_theory():
    from typer.testing import CliRunner

    from advbudget.lab.cli import app

    result = CliRunner().invoke(
        app, ["explain", "-G", "8", "--estimators", "budget,maxrl,passk"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "maxrl is exactly 8 x budget on 0/1 rewards" in text
    assert "passk optimises pass@k" in text
    # k = 1 of 8 correct: budget +0.8750, maxrl +6.9999 (8 x, up to eps), passk +1.0000.
    for cells in ("+0.8750 -0.1250", "+6.9999 -1.0000", "+1.0000 -0.1429"):
        assert cells in text
    plain = CliRunner().invoke(app, ["explain", "-G", "8", "--estimators", "budget,grpo"])
    assert "maxrl" not in plain.output
