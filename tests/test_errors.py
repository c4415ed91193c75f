"""Bad input gets an error naming the argument, what was expected and what was given."""

from __future__ import annotations

import numpy as np
import pytest

from advbudget import (
    budget_advantage,
    compute_advantages,
    group_normalized_advantage,
    make_groups,
    token_advantages,
)
from advbudget.testing import assert_close, to_numpy
from advbudget.theory import implied_slope


def test_nan_and_inf_rewards(xp):
    nan = xp.asarray([1.0, float("nan"), 0.0, 1.0])
    with pytest.raises(
        ValueError, match=r"rewards: expected finite numbers, got 1 of 4 .*index 1.* NaN"
    ):
        budget_advantage(nan, group_size=2)
    inf = xp.asarray([1.0, 0.0, float("inf"), 1.0])
    with pytest.raises(ValueError, match=r"rewards: .* 1 of 4 \(first at index 2\) infinite"):
        budget_advantage(inf, group_size=2)
    with pytest.raises(ValueError, match="infinite"):
        budget_advantage(inf, group_size=2, nan_policy="omit")


@pytest.mark.parametrize(
    ("rewards", "message"),
    [
        (
            [[1.0, 0.0], [0.0, 1.0]],
            r"rewards: the budget estimator takes one reward per rollout, \[N\], got shape "
            r"\(2, 2\) \(reward components are for gdpo\)",
        ),
        ([], r"rewards: expected at least one rollout, got an empty array"),
    ],
)
def test_reward_shape(xp, rewards, message):
    with pytest.raises(ValueError, match=message):
        budget_advantage(xp.asarray(rewards, dtype=xp.float32), group_size=1)


def test_scalar_and_complex_rewards():
    with pytest.raises(ValueError, match=r"rewards: expected a 1-D array .* got shape \(\)"):
        budget_advantage(1.0, group_size=1)
    with pytest.raises(TypeError, match=r"rewards: expected real numbers .* complex"):
        budget_advantage(np.array([1j, 0j]), group_size=2)
    with pytest.raises(ValueError, match=r"budget estimator .* a mapping of 1 reward component"):
        budget_advantage({"a": 1}, group_size=1)


def test_grouping_arguments(xp):
    r = xp.asarray([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    with pytest.raises(
        ValueError, match=r"group_size / group_ids: expected exactly one .* got neither"
    ):
        budget_advantage(r)
    with pytest.raises(ValueError, match="got both"):
        budget_advantage(r, group_size=2, group_ids=[0] * 6)
    with pytest.raises(
        ValueError, match=r"group_size: expected a divisor of the number of rollouts \(6\), got 4"
    ):
        budget_advantage(r, group_size=4)
    with pytest.raises(ValueError, match="group_size: expected a positive int, got 0"):
        budget_advantage(r, group_size=0)
    with pytest.raises(TypeError, match=r"group_size: expected a positive int, got float 2.0"):
        budget_advantage(r, group_size=2.0)
    with pytest.raises(TypeError, match="group_size: expected a positive int, got bool"):
        budget_advantage(r, group_size=True)
    with pytest.raises(
        ValueError,
        match=r"group_ids: expected one label per rollout, shape \(6,\), got shape \(5,\)",
    ):
        budget_advantage(r, group_ids=["a"] * 5)
    with pytest.raises(ValueError, match=r"group_ids: .* got shape \(7,\)"):
        budget_advantage(r, group_ids=xp.asarray([0, 0, 0, 1, 1, 1, 1]))
    with pytest.raises(
        TypeError, match="group_ids: expected integer or string labels, got dtype float64"
    ):
        budget_advantage(r, group_ids=np.array([0.5] * 6))
    with pytest.raises(TypeError, match=r"group_ids: expected integer .*labels.* got dtype"):
        budget_advantage(r, group_ids=xp.asarray([0.5] * 6))


def test_num_groups_codes(xp):
    r = xp.asarray([1.0, 0.0, 1.0, 0.0])
    groups = make_groups(r, group_ids=xp.asarray([1, 0, 1, 0]), num_groups=2)
    assert groups.num_groups == 2
    # A code that no rollout uses is an empty group: skipped, not an error.
    sparse = make_groups(r, group_ids=xp.asarray([1, 0, 0, 1]), num_groups=3)
    res = compute_advantages(r, "budget", groups=sparse)
    assert to_numpy(res.group_skipped).tolist() == [False, False, True]
    assert_close(res.advantages, [0.5, -0.5, 0.5, -0.5], xp=xp)
    with pytest.raises(
        ValueError,
        match=r"group_ids: with num_groups=2, expected codes in 0..1, got values from 0 to 2",
    ):
        make_groups(r, group_ids=xp.asarray([0, 1, 2, 1]), num_groups=2)
    with pytest.raises(ValueError, match="num_groups: expected a positive int, got 0"):
        make_groups(r, group_ids=[0, 0, 0, 0], num_groups=0)
    with pytest.raises(TypeError, match="group_ids: with num_groups, expected integer codes"):
        make_groups(r, group_ids=["a", "b", "a", "b"], num_groups=2)


def test_reused_groups_must_match(xp):
    r = xp.asarray([1.0, 0.0, 1.0, 0.0])
    groups = make_groups(r, group_size=2)
    with pytest.raises(
        ValueError, match="groups: expected groups of the 6 rewards, got groups of 4"
    ):
        budget_advantage(xp.asarray([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]), groups=groups)
    with pytest.raises(ValueError, match="groups: expected alone"):
        budget_advantage(r, groups=groups, group_size=2)
    with pytest.raises(TypeError, match="groups: expected a Groups object, got list"):
        budget_advantage(r, groups=[0, 0, 1, 1])
    other = make_groups(np.asarray([1.0, 0.0, 1.0, 0.0]), group_size=2)
    if other.xp is not groups.xp:
        with pytest.raises(ValueError, match="groups: expected groups built for"):
            budget_advantage(r, groups=other)


@pytest.mark.parametrize("budget", [-1.0, 0.0, float("inf"), float("nan"), "1", True])
def test_bad_budget(budget):
    with pytest.raises(ValueError, match="budget: expected a positive finite number"):
        budget_advantage(np.array([1.0, 0.0]), group_size=2, budget=budget)


def test_bad_options():
    r = np.array([1.0, 0.0])
    with pytest.raises(ValueError, match=r"estimator: expected one of 'budget', .* got 'grpoo'"):
        compute_advantages(r, "grpoo", group_size=2)
    with pytest.raises(
        TypeError, match="estimator: expected a name, an EstimatorSpec or a callable, got int"
    ):
        compute_advantages(r, 3, group_size=2)
    with pytest.raises(
        ValueError, match=r"nan_policy: expected one of \('raise', 'omit'\), got 'drop'"
    ):
        budget_advantage(r, group_size=2, nan_policy="drop")
    with pytest.raises(ValueError, match="tie_rtol: expected a finite number >= 0, got -1"):
        budget_advantage(r, group_size=2, tie_rtol=-1)
    with pytest.raises(ValueError, match="eps: expected a finite number >= 0"):
        group_normalized_advantage(r, group_size=2, eps=-1e-6)
    with pytest.raises(ValueError, match=r"std_correction: expected 0 .* or 1 .* got 2"):
        group_normalized_advantage(r, group_size=2, std_correction=2)
    with pytest.raises(ValueError, match="singletons: expected 'skip' for the budget estimator"):
        compute_advantages(r, "budget", group_size=2, singletons="raw")
    with pytest.raises(
        TypeError, match=r"budget: not an option of estimator 'grpo' \(it takes eps, std_corr"
    ):
        compute_advantages(r, "grpo", group_size=2, budget=2.0)


def test_mixed_devices():
    torch = pytest.importorskip("torch")
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    on_meta = torch.tensor([0, 0, 1, 1], device="meta")
    with pytest.raises(
        ValueError,
        match=r"group_ids: expected an array on the same device as rewards \(cpu\), got .* meta",
    ):
        budget_advantage(rewards, group_ids=on_meta)
    with pytest.raises(
        ValueError, match="response_mask: expected an array on the same device as advantages"
    ):
        token_advantages(rewards, torch.ones(4, 3, device="meta"))


def test_mixed_namespaces_and_meta_tensors_say_what_they_are():
    from advbudget.metrics import kappa_eff

    torch = pytest.importorskip("torch")
    rewards = np.array([1.0, 0.0, 1.0, 0.0])
    with pytest.raises(
        ValueError, match=r"group_ids: expected a numpy array like rewards, got a torch one"
    ):
        budget_advantage(rewards, group_ids=torch.tensor([0, 0, 1, 1]))
    torch_groups = make_groups(torch.tensor(rewards), group_size=2)
    with pytest.raises(ValueError, match="groups built for numpy on cpu, got groups for torch"):
        budget_advantage(rewards, groups=torch_groups)
    with pytest.raises(ValueError, match=r"logp_old: expected a torch array like advantages"):
        kappa_eff(np.zeros(4), torch.zeros(4), torch.zeros(4), group_size=2)
    with pytest.raises(ValueError, match="rewards: expected a tensor with values, got one on"):
        budget_advantage(torch.ones(4, device="meta"), group_size=2)


def test_token_advantages_shapes():
    with pytest.raises(ValueError, match=r"response_mask: expected shape \(2, T\) .* got \(3, 4\)"):
        token_advantages(np.zeros(2), np.ones((3, 4)))
    with pytest.raises(
        ValueError, match=r"advantages: expected a 1-D array \[B\], got shape \(2, 1\)"
    ):
        token_advantages(np.zeros((2, 1)), np.ones((2, 4)))


def test_one_rollout_per_group_warns_once_per_call_at_the_caller():
    import warnings

    rewards = np.array([1.0, 0.0, 1.0])
    with pytest.warns(UserWarning, match="group_size=1") as record:
        advantages = budget_advantage(rewards, group_size=1)
    np.testing.assert_array_equal(advantages, np.zeros(3))  # what the warning explains
    (warning,) = record  # once, not once per group
    message = str(warning.message)
    assert message.startswith("group_size=1: every one of the 3 groups has one rollout")
    assert "every budget advantage is 0" in message
    assert "group_size >= 2" in message
    assert warning.filename == __file__  # points at the caller, not at advbudget

    with pytest.warns(UserWarning, match=r"^group_ids: every one of the 3 groups .*'raw'"):
        compute_advantages(rewards, "grpo", group_ids=["a", "b", "c"])
    with pytest.warns(UserWarning, match=r"^groups: every one of the 3 groups"):
        compute_advantages(rewards, "dr", groups=make_groups(rewards, group_size=1))
    # No warning where the update is not all zeros: estimators that do not compare within
    # groups, verl's raw singletons, a batch of one rollout, and groups of two.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compute_advantages(rewards, "reinforce", group_size=1)
        compute_advantages(rewards, "grpo", group_size=1, singletons="raw")
        budget_advantage(np.array([1.0]), group_size=1)
        budget_advantage(np.array([1.0, 0.0]), group_size=2)


def test_singletons_refuse_names_the_group_of_one(xp):
    """``singletons="refuse"`` (a framework whose own estimator raises on a group of one,
    verl's grpo_passk): one line naming the layout argument, the count and the first."""
    rewards = xp.asarray([1.0, 0.0, 1.0, 0.5, 0.0])
    ids = ["a", "a", "lone", "b", "b"]
    with pytest.raises(ValueError, match=r"^group_ids: grpo_passk expected at least 2") as raised:
        compute_advantages(rewards, "grpo_passk", group_ids=ids, singletons="refuse")
    assert "got 1 group(s) of 1 rollout, the first at rollout 2, label 'lone'" in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match=r"^group_size: dr expected .* got 5 group\(s\) of 1"):
        compute_advantages(rewards, "dr", group_size=1, singletons="refuse")
    groups = make_groups(rewards, group_ids=[0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match=r"^groups: grpo expected .* the first at rollout 0$"):
        compute_advantages(rewards, "grpo", groups=groups, singletons="refuse")
    # Groups of two or more: the numbers of "skip".
    ids = ["a", "a", "b", "b", "b"]
    refused = compute_advantages(rewards, "grpo_passk", group_ids=ids, singletons="refuse")
    skipped = compute_advantages(rewards, "grpo_passk", group_ids=ids)
    np.testing.assert_array_equal(to_numpy(refused.advantages), to_numpy(skipped.advantages))
    with pytest.raises(ValueError, match=r"singletons: expected one of .*'refuse'.* got 'keep'"):
        compute_advantages(rewards, "dr", group_ids=ids, singletons="keep")


def test_missing_inputs_and_bad_options_are_named():
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="response_lengths: the opo estimator needs the token"):
        compute_advantages(rewards, "opo", group_size=2)
    with pytest.raises(ValueError, match=r"response_lengths: expected one value per rollout"):
        compute_advantages(rewards, "opo", group_size=2, response_lengths=[1.0, 2.0])
    with pytest.raises(ValueError, match="norm_adv_by_std: expected True or False, got 'yes'"):
        compute_advantages(rewards, "grpo_passk", group_size=2, norm_adv_by_std="yes")
    with pytest.raises(ValueError, match="f_norm: expected a positive finite number, got 0"):
        compute_advantages(rewards, "gpg", group_size=2, f_norm=0)
    with pytest.raises(ValueError, match="var_eps: expected a finite number >= 0, got -1"):
        compute_advantages(rewards, "reinforce", group_size=2, var_eps=-1)
    with pytest.raises(ValueError, match=r"std_correction: expected 0 .* got 2"):
        compute_advantages(rewards, "reinforce_baseline", group_size=2, std_correction=2)
    with pytest.raises(TypeError, match="eps: not an option of estimator 'gpg'"):
        compute_advantages(rewards, "gpg", group_size=2, eps=1e-6)
    with pytest.raises(ValueError, match="singletons: expected 'skip' for the grpo_passk"):
        compute_advantages(rewards, "grpo_passk", group_size=2, singletons="raw")
    with pytest.raises(ValueError, match=r"response_lengths: the opo estimator needs .* constant"):
        implied_slope("opo", 4, 0.5)


def test_an_input_that_is_not_finite_is_named_with_its_first_position(xp):
    """An estimator's inputs are checked like the rewards, without the rewards' hint (a NaN
    length cannot be omitted)."""
    from advbudget import turn_returns

    rewards = xp.asarray([1.0, 0.0, 1.0, 0.0], dtype=xp.float64)
    lengths = xp.asarray([1.0, 2.0, float("nan"), float("inf")], dtype=xp.float64)
    with pytest.raises(
        ValueError, match=r"^response_lengths: expected finite numbers, got 1 of 4 \(first at "
        r"index 3\) infinite$",
    ):  # fmt: skip
        compute_advantages(rewards, "opo", group_size=2, response_lengths=lengths)
    with_nan = xp.asarray([1.0, 2.0, float("nan"), 4.0], dtype=xp.float64)
    with pytest.raises(
        ValueError, match=r"^response_lengths: expected finite numbers, got 1 of 4 \(first at "
        r"index 2\) NaN$",
    ):  # fmt: skip
        compute_advantages(rewards, "opo", group_size=2, response_lengths=with_nan)
    with pytest.raises(
        ValueError, match=r"^turn_rewards: expected finite numbers, got 1 of 3 \(first at index "
        r"1\) NaN$",
    ):  # fmt: skip
        turn_returns(np.array([0.0, np.nan, 1.0]), ["a", "a", "b"])
