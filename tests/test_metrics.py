"""κ, κ_eff and the advantage statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget.metrics import (
    advantage_metric_dict,
    advantage_metrics,
    group_outcomes,
    kappa,
    kappa_eff,
    oscillation,
    sequence_logprobs,
    summarize,
)
from advbudget.testing import assert_close, to_numpy


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


# -- the solved / unsolved split -------------------------------------------------------


def split(result, **kwargs):
    metrics = advantage_metrics(result, **kwargs)
    return metrics["unsolved_group_fraction"], metrics["solved_group_fraction"]


def outcomes(result, solved_reward=1.0):
    o = group_outcomes(result, solved_reward)
    return [to_numpy(x).tolist() for x in (o.solved, o.unsolved, o.scored)]


def test_solved_split_zero_one(xp):
    # all right, all wrong, mixed, all wrong: half unsolved, a quarter solved
    rewards = xp.asarray([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0], dtype=xp.float32)
    result = compute_advantages(rewards, "budget", group_size=4)
    assert split(result) == (0.5, 0.25)
    assert advantage_metrics(result)["skipped_group_fraction"] == 0.75
    assert outcomes(result) == [
        [True, False, False, False],
        [False, True, False, True],
        [True, True, True, True],
    ]
    # beside skipped_group_fraction, in the logger's keys too
    keys = list(advantage_metric_dict(result))
    assert keys[:3] == [
        "advbudget/skipped_group_fraction",
        "advbudget/unsolved_group_fraction",
        "advbudget/solved_group_fraction",
    ]


def test_solved_split_plus_minus_one_with_shuffled_labels(xp):
    # DAPO's +-1: a = all +1, b = all -1, c = one +1 of three; labels shuffled
    labels = ["c", "a", "b", "a", "c", "b", "b", "a", "c"]
    by_label = {"a": [1, 1, 1], "b": [-1, -1, -1], "c": [-1, 1, -1]}
    rewards = [by_label[label].pop() for label in labels]
    for estimator in ("budget", "grpo", "rloo"):
        result = compute_advantages(
            xp.asarray(rewards, dtype=xp.float64), estimator, group_ids=labels
        )
        assert split(result) == pytest.approx((1 / 3, 1 / 3)), estimator
    # solved_reward is the success value: with 0 as the bar, -1 is still a failure
    assert split(result, solved_reward=0.0) == pytest.approx((1 / 3, 1 / 3))
    assert split(result, solved_reward=-1.0) == (0.0, 1.0)  # every rollout reaches -1


def test_solved_split_graded_rewards_and_the_tie_tolerance(xp):
    # solved_reward 0.8: a = [0.9, 0.8, 1.0] solved (0.8 reaches it, above counts),
    # b = [0.5, 0.79, 0.1] unsolved, c = [0.8 - 5e-7, 0.8, 0.8 - 5e-7] within the tie
    # tolerance of 0.8: solved by default, mixed when ties are exact.
    rewards = xp.asarray(
        [0.9, 0.8, 1.0, 0.5, 0.79, 0.1, 0.8 - 5e-7, 0.8, 0.8 - 5e-7], dtype=xp.float64
    )
    default = compute_advantages(rewards, "budget", group_size=3)
    assert split(default, solved_reward=0.8) == pytest.approx((1 / 3, 2 / 3))
    exact = compute_advantages(rewards, "budget", group_size=3, tie_rtol=0, tie_atol=0)
    assert split(exact, solved_reward=0.8) == pytest.approx((1 / 3, 1 / 3))
    # the default bar, 1.0: only a's 1.0 reaches it, so a is mixed and b, c unsolved
    assert split(default) == pytest.approx((2 / 3, 0.0))
    # rounding noise is a tie: 0.1 + 0.2 + 0.7 = 0.9999999999999999 is solved
    noisy = compute_advantages(xp.asarray([0.1 + 0.2 + 0.7, 1.0], dtype=xp.float64), "dr",
                               group_size=2)  # fmt: skip
    assert split(noisy) == (0.0, 1.0)


def test_solved_split_nan_rows_are_not_rollouts(xp):
    # Under nan_policy="omit" a NaN reward is no rollout of its group: a = [nan, 1, 1]
    # solved, b = [nan, nan, nan] has none (neither, and not in the denominator),
    # c = [0, nan, 0] unsolved, d = [1, 0, nan] mixed.
    nan = math.nan
    rewards = xp.asarray(
        [nan, 1.0, 1.0, nan, nan, nan, 0.0, nan, 0.0, 1.0, 0.0, nan], dtype=xp.float64
    )
    result = compute_advantages(rewards, "budget", group_size=3, nan_policy="omit")
    assert split(result) == pytest.approx((1 / 3, 1 / 3))
    assert outcomes(result) == [
        [True, False, False, False],
        [False, False, True, False],
        [True, False, True, True],
    ]
    # no reward at all: no value (NaN), as the advantage gap
    empty = compute_advantages(
        xp.asarray([nan, nan], dtype=xp.float64), "budget", group_size=2, nan_policy="omit"
    )
    assert all(math.isnan(v) for v in split(empty))


def test_solved_split_singleton_groups(xp):
    # a group of one is solved or unsolved, never mixed: a = [1], b = [0, 1], c = [0]
    labels = [7, 3, 3, 5]
    rewards = xp.asarray([1.0, 0.0, 1.0, 0.0], dtype=xp.float64)
    result = compute_advantages(rewards, "budget", group_ids=labels)
    assert split(result) == pytest.approx((1 / 3, 1 / 3))
    raw = compute_advantages(rewards, "grpo", group_ids=labels, singletons="raw")
    assert split(raw) == pytest.approx((1 / 3, 1 / 3))


def test_solved_split_off_and_bad_values(xp):
    result = compute_advantages(xp.asarray([1.0, 0.0]), "budget", group_size=2)
    off = advantage_metrics(result, solved_reward=None)
    assert "unsolved_group_fraction" not in off
    assert "solved_group_fraction" not in off
    assert "advbudget/solved_group_fraction" not in advantage_metric_dict(
        result, solved_reward=None
    )
    for bad in (True, math.nan, math.inf, "1.0", [1.0]):
        with pytest.raises(
            ValueError, match=r"^solved_reward: expected a finite number or None, got "
        ):
            advantage_metrics(result, solved_reward=bad)
    assert split(result, solved_reward=1) == (0.0, 0.0)  # an int is a number


REWARD_GRID = [-1.0, 0.0, 0.5, 1.0, 2.0, math.nan]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    data=st.data(),
    solved_reward=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
)
def test_solved_split_partitions_the_scored_groups_and_ignores_order(sizes, data, solved_reward):
    """solved + unsolved + mixed == 1 over the groups with a reward, against a reference
    in plain Python; the same numbers whatever the order of the rows."""
    labels = [g for g, size in enumerate(sizes) for _ in range(size)]
    rewards = data.draw(
        st.lists(st.sampled_from(REWARD_GRID), min_size=len(labels), max_size=len(labels))
    )
    result = compute_advantages(np.array(rewards), "budget", group_ids=labels, nan_policy="omit")
    metrics = advantage_metrics(result, solved_reward=solved_reward)
    scored = solved = unsolved = 0
    for g in range(len(sizes)):
        mine = [r for r, label in zip(rewards, labels, strict=True) if label == g]
        mine = [r for r in mine if not math.isnan(r)]
        if mine:
            scored += 1
            solved += all(r >= solved_reward for r in mine)
            unsolved += not any(r >= solved_reward for r in mine)
    if not scored:
        assert math.isnan(metrics["solved_group_fraction"])
        assert math.isnan(metrics["unsolved_group_fraction"])
        return
    assert metrics["solved_group_fraction"] == solved / scored
    assert metrics["unsolved_group_fraction"] == unsolved / scored
    mixed_fraction = (scored - solved - unsolved) / scored
    assert mixed_fraction >= 0
    total = metrics["solved_group_fraction"] + metrics["unsolved_group_fraction"] + mixed_fraction
    assert total == pytest.approx(1.0)
    o = group_outcomes(result, solved_reward)
    mixed = o.scored & ~o.solved & ~o.unsolved
    assert not np.any(o.solved & o.unsolved)
    assert int(o.solved.sum() + o.unsolved.sum() + mixed.sum()) == int(o.scored.sum())
    order = data.draw(st.permutations(range(len(labels))))
    shuffled = compute_advantages(
        np.array([rewards[i] for i in order]),
        "budget",
        group_ids=[labels[i] for i in order],
        nan_policy="omit",
    )
    again = advantage_metrics(shuffled, solved_reward=solved_reward)
    for key in ("solved_group_fraction", "unsolved_group_fraction"):
        assert again[key] == metrics[key]
