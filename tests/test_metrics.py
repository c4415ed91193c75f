"""κ, κ_eff and the advantage statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from advbudget import compute_advantages
from advbudget.metrics import (
    advantage_metrics,
    kappa,
    kappa_eff,
    oscillation,
    sequence_logprobs,
    summarize,
)

from .conftest import assert_close


def test_kappa(xp):
    assert kappa(1.0, beta=0.001) == pytest.approx(1000.0)
    assert_close(kappa(xp.asarray([0.5, 2.0]), 0.5), [1.0, 4.0], xp=xp)
    for beta in (0.0, -1.0, float("nan"), "0.1"):
        with pytest.raises(ValueError, match="beta: expected a positive finite KL coefficient"):
            kappa(1.0, beta)


def test_kappa_eff_by_hand(xp):
    # Group 0: o+ = 0, o- = 1; group 1: o+ = 3, o- = 2; group 2: no gap, left out.
    old = xp.asarray([-5.0, -4.0, -3.0, -6.0, -2.0, -2.0], dtype=xp.float64)
    new = xp.asarray([-4.0, -4.5, -3.5, -5.0, -1.0, -3.0], dtype=xp.float64)
    adv = xp.asarray([0.5, -0.5, -0.5, 0.5, 0.0, 0.0], dtype=xp.float64)
    expected = [(1.0 - (-0.5)), (1.0 - (-0.5))]
    assert_close(kappa_eff(old, new, adv, group_size=2), expected, xp=xp)
    # The same with shuffled labels and the groups of an advantage result.
    labels = ["x", "x", "y", "y", "z", "z"]
    assert_close(kappa_eff(old, new, adv, group_ids=labels), expected, xp=xp)


def test_kappa_eff_ties_take_the_first_and_per_token_inputs(xp):
    # k = 2 of 4 correct: rollouts 0 and 2 tie for the max; rollouts 1 and 3 for the min.
    rewards = xp.asarray([1.0, 0.0, 1.0, 0.0], dtype=xp.float64)
    result = compute_advantages(rewards, "budget", group_ids=[4, 4, 4, 4])
    token_old = xp.asarray(
        [[-1.0, -1.0, 0.0], [-2.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [-3.0, -3.0, -3.0]]
    )
    token_new = xp.asarray([[-0.5, -0.5, 9.0], [-3.0, 0.0, 0.0], [-9.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = xp.asarray([[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 1]])
    # Sequence change: o+ = 0 (+1.0), o- = 1 (-1.0) -> 2.0
    value = kappa_eff(
        token_old, token_new, result.advantages, groups=result.groups, response_mask=mask
    )
    assert_close(value, [2.0], xp=xp)
    # Length-normalised: o+ changes +1.0 / 2 tokens, o- -1.0 / 1 token -> 1.5
    normed = kappa_eff(
        token_old,
        token_new,
        result.advantages,
        groups=result.groups,
        response_mask=mask,
        length_normalized=True,
    )
    assert_close(normed, [1.5], xp=xp)


def test_kappa_eff_errors():
    adv = np.array([0.5, -0.5])
    with pytest.raises(
        ValueError, match=r"response_mask: expected .* with per-token logp_old, got None"
    ):
        kappa_eff(np.zeros((2, 3)), np.zeros((2, 3)), adv, group_size=2)
    with pytest.raises(ValueError, match="logp_old: length_normalized needs per-token"):
        kappa_eff(np.zeros(2), np.zeros(2), adv, group_size=2, length_normalized=True)
    with pytest.raises(ValueError, match="logp_new: expected 2 rollouts like advantages, got 3"):
        kappa_eff(np.zeros(2), np.zeros(3), adv, group_size=2)
    with pytest.raises(
        ValueError, match=r"response_mask: expected the shape of token_logprobs \(2, 3\)"
    ):
        sequence_logprobs(np.zeros((2, 3)), np.ones((2, 4)))


def test_summarize_and_oscillation(xp):
    summary = summarize(xp.asarray([4.0, 1.0, 2.0, 9.0]))
    assert summary == pytest.approx(
        {"mean": 4.0, "median": 3.0, "std": math.sqrt(9.5), "min": 1.0, "max": 9.0, "count": 4.0}
    )
    empty = summarize(xp.asarray([], dtype=xp.float32))
    assert empty["count"] == 0.0
    assert math.isnan(empty["mean"])
    assert oscillation([1.0, 3.0]) == pytest.approx(1.0)


def test_advantage_metrics(xp):
    rewards = xp.asarray([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.5], dtype=xp.float64)
    result = compute_advantages(rewards, "budget", group_size=4)
    metrics = advantage_metrics(result)
    # Group 0: 0.75 / -0.25 (gap 1.0); group 1: 1/3-1/4 and 1/12 ... [1, 1, .5, .5]
    #   gaps .5 .5 0 0 -> 1/2 - 1/4 = 1/4 and -1/4 (gap 0.5)
    assert metrics["skipped_group_fraction"] == 0.0
    assert metrics["advantage_gap_mean"] == pytest.approx(0.75)
    assert metrics["positive_advantage_fraction"] == pytest.approx(3 / 8)
    assert metrics["valid_fraction"] == 1.0
    assert metrics["advantage_mean"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["advantage_max"] == pytest.approx(0.75)
    skipped = advantage_metrics(
        compute_advantages(xp.asarray([1.0, 1.0, 0.0, 0.0]), "dr", group_size=2)
    )
    assert skipped["skipped_group_fraction"] == 1.0
    assert math.isnan(skipped["advantage_gap_mean"])
    assert skipped["valid_fraction"] == 0.0
