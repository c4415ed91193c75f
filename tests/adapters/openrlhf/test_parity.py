"""Parity with OpenRLHF's own ``compute_advantages_and_returns`` on real ``Experience``
objects: group_norm, dr_grpo and rloo vs our mirrors through the core, with KL terms,
reward clipping and length penalties on."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("openrlhf")

import torch

from advbudget import compute_advantages
from advbudget.adapters.openrlhf._estimators import (
    compute_advantages_and_returns,
    core_estimator,
)
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

OURS = {
    "group_norm": "advbudget_group_norm",
    "dr_grpo": "advbudget_dr_grpo",
    "rloo": "advbudget_rloo",
}

SETTINGS = {
    "plain": {},
    "kl": {"kl_coef": 0.05},
    "kl+overlong": {"kl_coef": 0.05, "overlong_buffer_len": 4.0, "overlong_penalty_factor": 1.0},
    "kl+stop_properly": {"kl_coef": 0.05, "stop_properly_penalty_coef": 0.5},
    "clip": {"kl_coef": 0.05, "clip_range": (-0.75, 0.75)},
    "kl+multiturn": {"kl_coef": 0.05, "observation_spans": True},
}


def run_both(estimator: str, n: int, setting: dict, seed: int = 0):  # type: ignore[no-untyped-def]
    setting = dict(setting)
    kl_coef = setting.pop("kl_coef", 0.0)
    spans = setting.pop("observation_spans", False)
    experiences = make_experiences(6, n, seed=seed, observation_spans=spans)
    theirs_exp = copy.deepcopy(experiences)
    ours_exp = copy.deepcopy(experiences)
    theirs_maker = make_maker(make_args(estimator, n, **setting), kl_coef)
    theirs = theirs_maker.compute_advantages_and_returns(theirs_exp)
    ours_maker = make_maker(make_args(OURS[estimator], n, **setting), kl_coef)
    ours = compute_advantages_and_returns(ours_maker, ours_exp)
    return theirs, ours


@pytest.mark.parametrize("estimator", sorted(OURS))
@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("n", [2, 8])
def test_same_advantages_and_returns(estimator: str, setting: str, n: int) -> None:
    theirs, ours = run_both(estimator, n, SETTINGS[setting])
    assert len(theirs) == len(ours)
    for a, b in zip(theirs, ours, strict=True):
        torch.testing.assert_close(b.advantages, a.advantages, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b.returns, a.returns, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b.rewards, a.rewards)  # length penalties applied alike
        torch.testing.assert_close(b.info["return"], a.info["return"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b.info["group_reward_std"], a.info["group_reward_std"])
        assert a.kl is None
        assert b.kl is None


def test_group_norm_matches_core_with_openrlhf_conventions() -> None:
    """OpenRLHF's group_norm shaping, ``(r - mean) / (std + 1e-9)`` with the unbiased std on
    ``reshape(-1, n)``, equals the core's grpo with eps=1e-9, std_correction=1 and exact
    ties, on exactly representable rewards (constant groups included)."""
    g = torch.Generator().manual_seed(1)
    n = 8
    rewards = torch.tensor([-1.0, 0.0, 0.5, 1.0])[torch.randint(4, (40 * n,), generator=g)]
    rewards[:n] = 1.0
    rewards[n : 2 * n] = 0.5
    grouped = rewards.reshape(-1, n)
    theirs = (
        (grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + 1e-9)
    ).reshape(-1)
    ours = compute_advantages(
        rewards, "group_norm", group_size=n, eps=1e-9, std_correction=1, tie_rtol=0, tie_atol=0
    ).advantages
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert torch.all(ours[: 2 * n] == 0)


def test_group_norm_divergence_on_inexact_ties_is_openrlhf_rounding() -> None:
    """Documented difference: a constant group whose mean is not exactly representable
    (e.g. eight rewards 0.1 after a fractional penalty) has ``r - mean`` of float32 rounding
    size and std of the same size, so OpenRLHF's ``/ (std + 1e-9)`` blows rounding noise up;
    the core sees the exact tie and gives 0."""
    rewards = torch.full((8,), 0.1)
    grouped = rewards.reshape(-1, 8)
    theirs = (grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + 1e-9)
    ours = compute_advantages(
        rewards, "group_norm", group_size=8, eps=1e-9, tie_rtol=0, tie_atol=0
    ).advantages
    assert torch.all(ours == 0)
    # OpenRLHF 0.11.2 on CPU, float32: every sample of the group gets about -0.83, one sign
    # for the whole group (r - mean = -7.45e-9 for all eight, std = 7.96e-9).
    assert torch.all(theirs < -0.5)


@pytest.mark.parametrize("name", ["reward_budget", "advbudget_group_norm"])
def test_metrics_survive_openrlhf_batching_and_average_to_the_batch_values(name: str) -> None:
    """The ``advbudget/*`` info goes through OpenRLHF's replay buffer (split per sample,
    merged into training micro-batches) and the sample mean the actor logs equals
    :func:`advbudget.metrics.advantage_metrics` of the whole batch."""
    from openrlhf.trainer.ppo_utils.experience import (
        make_experience_batch,
        split_experience_batch,
    )

    from advbudget.metrics import advantage_metrics

    n = 8
    experiences = make_experiences(6, n, constant_groups=2)
    rewards = torch.empty(6 * n)
    for e in experiences:
        rewards[e.index] = e.rewards
    out = compute_advantages_and_returns(make_maker(make_args(name, n), 0.05), experiences)
    for e in out:
        e.sequences = torch.zeros(len(e.index), 1)  # the replay buffer counts samples by it
    items = [item for e in out for item in split_experience_batch(e)]
    merged = make_experience_batch(items[::-1])  # any order: the buffer shuffles
    core, options = core_estimator(name)
    expected = advantage_metrics(compute_advantages(rewards, core, group_size=n, **options))
    assert expected["skipped_group_fraction"] == pytest.approx(2 / 6)
    for key, value in expected.items():
        logged = merged.info[f"advbudget/{key}"]
        assert logged.shape == (6 * n,)
        assert logged.float().mean().item() == pytest.approx(value, rel=1e-5, abs=1e-6), key


def _openrlhf_logged_means(experiences: list[Any]) -> dict[str, float]:
    """What the actor logs for each ``advbudget/*`` info key: the replay buffer splits the
    experiences per sample and merges them into micro-batches; each key's sample mean."""
    from openrlhf.trainer.ppo_utils.experience import (
        make_experience_batch,
        split_experience_batch,
    )

    for e in experiences:
        e.sequences = torch.zeros(len(e.index), 1)  # the replay buffer counts samples by it
    items = [item for e in experiences for item in split_experience_batch(e)]
    merged = make_experience_batch(items[::-1])
    return {
        key: torch.as_tensor(values).float().mean().item()
        for key, values in merged.info.items()
        if key.startswith("advbudget/")
    }


def test_solved_split_in_openrlhf_info_with_nan_groups_and_graded_rewards() -> None:
    """``--advbudget.solved_reward 0.5`` on graded rewards with NaN ones omitted: the
    sample means OpenRLHF logs are the fractions of the groups with a reward, by hand.

    Groups of 4 (prompt-major): 0 = [1, 0.5, 0.5, nan] solved, 1 = all nan (no reward:
    in neither, not in the denominator), 2 = [0, -1, 0, nan] unsolved, 3 = [0.5, 0, 1, 0]
    mixed, 4 = [nan, 0.5, 1, 1] solved."""
    from types import SimpleNamespace

    nan = float("nan")
    by_slot = [1, 0.5, 0.5, nan, nan, nan, nan, nan, 0, -1, 0, nan, 0.5, 0, 1, 0, nan, 0.5, 1, 1]

    def run(**options: object) -> list[Any]:
        experiences = make_experiences(5, 4, micro_batch=3, seed=4)
        for e in experiences:
            e.rewards = torch.tensor([by_slot[i] for i in e.index])
        args = make_args("reward_budget", 4)
        args.advbudget = SimpleNamespace(nan_policy="omit", **options)
        return compute_advantages_and_returns(make_maker(args), experiences)

    logged = _openrlhf_logged_means(run(solved_reward="0.5"))
    assert logged["advbudget/solved_group_fraction"] == pytest.approx(2 / 4, rel=1e-6)
    assert logged["advbudget/unsolved_group_fraction"] == pytest.approx(1 / 4, rel=1e-6)
    assert logged["advbudget/skipped_group_fraction"] == pytest.approx(1 / 5, rel=1e-6)
    # the default bar, 1.0: groups 0, 3 and 4 are mixed now, 2 still unsolved
    logged = _openrlhf_logged_means(run())
    assert logged["advbudget/solved_group_fraction"] == 0.0
    assert logged["advbudget/unsolved_group_fraction"] == pytest.approx(1 / 4, rel=1e-6)
    # none: the split is off, the keys absent
    out = run(solved_reward="none")
    assert not any("solved_group_fraction" in key for e in out for key in e.info)
    # a bad value set in the args (not through our parser): one line naming the flag
    with pytest.raises(ValueError, match=r"^--advbudget\.solved_reward: expected a finite number"):
        run(solved_reward=True)


@settings(max_examples=40, deadline=None)
@given(
    estimator=st.sampled_from(sorted(OURS)),
    n=st.integers(2, 8),
    prompts=st.integers(1, 6),
    micro_batch=st.integers(1, 7),
    length=st.integers(1, 24),
    kl_coef=st.sampled_from([0.0, 0.01, 0.2]),
    seed=st.integers(0, 2**16),
)
def test_any_layout_matches_openrlhf(
    estimator: str, n: int, prompts: int, micro_batch: int, length: int, kl_coef: float, seed: int
) -> None:
    """Whatever the group size, micro-batching, widths and KL: OpenRLHF's numbers."""
    experiences = make_experiences(
        prompts, n, length=length, micro_batch=micro_batch, seed=seed, constant_groups=0
    )
    theirs = make_maker(make_args(estimator, n), kl_coef).compute_advantages_and_returns(
        copy.deepcopy(experiences)
    )
    ours = compute_advantages_and_returns(
        make_maker(make_args(OURS[estimator], n), kl_coef), copy.deepcopy(experiences)
    )
    for a, b in zip(theirs, ours, strict=True):
        assert b.advantages.shape == a.advantages.shape
        torch.testing.assert_close(b.advantages, a.advantages, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b.info["return"], a.info["return"], rtol=1e-5, atol=1e-6)
