"""Parity of every OpenRLHF mirror (the OpenRLHF row's ``own_names``) with OpenRLHF
0.11.2's own estimator, both through the experience maker's
``compute_advantages_and_returns`` on real ``Experience`` objects (ours: the adapter's
drop-in, as the patched maker calls it): advantages, returns, ``info["return"]`` and
``info["group_reward_std"]``; and through ``train_ppo_ray``'s argument checks, which
refuse one sample per prompt for the same estimators.

Batches: 1, 2, 5 and 16 samples per prompt, samples shuffled across micro-batches,
binary rewards with a constant group, graded ones off the dyadic grid, float32 and
float64. A mirror added to the row without a case here fails
``test_every_mirror_has_a_case`` (and its parity test).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openrlhf")

import torch

from advbudget import compute_advantages, token_advantages
from advbudget.adapters import get_convention
from advbudget.adapters.openrlhf.__main__ import main
from advbudget.adapters.openrlhf._estimators import compute_advantages_and_returns, needs_groups
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker
from advbudget.testing import rounding_tolerance

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS
OPENRLHF = get_convention("openrlhf")
GRADED = (-1.0, 0.0, 0.0, 0.3, 0.5, 1.0, 1.0, 2.7)

# Per mirror, the settings each case runs with: KL in the reward or not; OpenRLHF's
# whitened estimators with and without --algo.advantage.no_std_norm, with a reward clip
# that bites (before the whitening), and its reinforce at a gamma below 1 (OpenRLHF keeps
# it for reinforce only).
KL = ({"kl_coef": 0.0}, {"kl_coef": 0.05})
WHITENED = tuple({**kl, "no_std_norm": off} for kl in KL for off in (False, True))
CASES: dict[str, tuple[dict[str, Any], ...]] = {
    "grpo": KL,
    "dr": KL,
    "rloo": KL,
    "reinforce": (*WHITENED, {"kl_coef": 0.05, "gamma": 0.9}, {"clip_range": (-0.6, 0.6)}),
    "reinforce_baseline": (*WHITENED, {"kl_coef": 0.05, "clip_range": (-0.4, 0.4)}),
}


def test_every_mirror_has_a_case() -> None:
    assert sorted(CASES) == sorted(OPENRLHF.own_names)


def _experiences(n: int, seed: int, dtype: torch.dtype, graded: bool) -> list[Any]:
    experiences = make_experiences(
        int(np.random.default_rng(seed).integers(2, 3 + 32 // n)),  # up to ~48 samples
        n,
        seed=seed,
        micro_batch=3 + seed % 4,
        rewards=GRADED if graded else (0.0, 1.0),
        constant_groups=1,
        observation_spans=seed % 2 == 1,  # multi-turn responses
    )
    for e in experiences:
        e.rewards = e.rewards.to(dtype)
        if graded:  # break the dyadic grid: means and variances are not exact any more
            e.rewards = e.rewards + torch.tensor(e.index, dtype=dtype).remainder(3) * 0.1
    return experiences


def run(name: str, experiences: list[Any], n: int, *, ours: bool, **case: Any) -> Any:
    """The experiences after the maker's step (a deep copy), or the error it raised."""
    args = make_args(name, n, **{k: case[k] for k in ("clip_range",) if k in case})
    args.algo.advantage.no_std_norm = case.get("no_std_norm", False)
    args.algo.advantage.gamma = case.get("gamma", 1.0)
    maker = make_maker(args, case.get("kl_coef", 0.0))
    experiences = copy.deepcopy(experiences)
    try:
        if ours:
            return compute_advantages_and_returns(maker, experiences)
        return maker.compute_advantages_and_returns(experiences)
    except Exception as error:  # compared with the other side's below
        return error


def _close(mine: torch.Tensor, theirs: torch.Tensor, tol: float) -> float:
    assert mine.shape == theirs.shape
    diff = float((mine.double() - theirs.double()).abs().max()) if mine.numel() else 0.0
    assert diff <= tol * max(1.0, float(theirs.double().abs().max())), f"max abs diff {diff}"
    return diff


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("n", [1, 2, 5, 16])
@pytest.mark.parametrize("core", sorted(OPENRLHF.own_names))
def test_mirror(core: str, n: int, graded: bool, seed: int, dtype: torch.dtype) -> None:
    theirs_name, ours_name = OPENRLHF.own_names[core], f"advbudget_{core}"
    experiences = _experiences(n, seed, dtype, graded)
    for case in CASES[core]:
        mine = run(ours_name, experiences, n, ours=True, **case)
        if n == 1 and needs_groups(ours_name):
            # OpenRLHF's launcher refuses this (test_one_sample_per_prompt_is_refused_...);
            # its maker would give NaN or 0; ours refuses here too.
            assert isinstance(mine, ValueError)
            assert "n_samples_per_prompt > 1, got 1" in str(mine)
            continue
        theirs = run(theirs_name, experiences, n, ours=False, **case)
        assert not isinstance(mine, Exception), mine
        assert not isinstance(theirs, Exception), theirs
        # The per-token rewards take the KL's dtype (float32) in OpenRLHF's compute_reward,
        # so both sides' outputs are float32 whatever the rewards' dtype: equal to float32
        # rounding; more with its float32 whitening (``.float()``) and the KL summed.
        rounded = core.startswith("reinforce") or case.get("kl_coef", 0.0) > 0
        tol = 2e-5 if rounded else 1e-5
        nonzero = 0
        for a, b in zip(mine, theirs, strict=True):
            inside = b.action_mask.bool()
            # OpenRLHF does not re-mask after whitening (its padding holds -mean/std, the
            # loss masks it): the action tokens are compared, our padding after the last
            # one is 0 (an observation span before it holds the reward-to-go, as theirs).
            _close(a.advantages[inside], b.advantages[inside], tol)
            padding = inside.flip(-1).cumsum(-1).flip(-1) == 0
            assert float(a.advantages[padding].abs().sum()) == 0.0
            _close(a.returns, b.returns, tol)
            _close(a.info["return"], b.info["return"], tol)
            assert ("group_reward_std" in a.info) == ("group_reward_std" in b.info) == (n > 1)
            if n > 1:
                _close(a.info["group_reward_std"], b.info["group_reward_std"], tol)
            nonzero += int(torch.count_nonzero(b.advantages[inside]))
        assert nonzero > 0  # not a comparison of zeros


@pytest.mark.parametrize("core", sorted(OPENRLHF.own_names))
def test_one_sample_per_prompt_is_refused_where_openrlhf_refuses(core: str) -> None:
    """``train_ppo_ray`` asserts ``n_samples_per_prompt > 1`` for its group estimators
    (AssertionError); ours refuses the same ones at the same point, before Ray, as every
    precondition of the entry point: a one-line SystemExit naming the flag."""
    flags = ["--advbudget.parse_only", "--actor.model_name_or_path", "Qwen/Qwen3-8B"]

    def refused(name: str) -> BaseException | None:
        try:
            main([*flags, "--algo.advantage.estimator", name])
        except (AssertionError, SystemExit) as error:
            return error
        return None

    theirs, ours = refused(OPENRLHF.own_names[core]), refused(f"advbudget_{core}")
    assert (theirs is not None) == (ours is not None) == (core in OPENRLHF.singletons_refused)
    if theirs is not None:
        assert isinstance(theirs, AssertionError)
        assert isinstance(ours, SystemExit)
        assert "needs --rollout.n_samples_per_prompt > 1 (got 1)" in str(ours)


def test_our_float64_is_exact_where_openrlhf_rounds_to_float32() -> None:
    """The core in float64 (before the adapter puts it on OpenRLHF's float32 per-token
    reward) equals a float64 re-computation of OpenRLHF's reinforce_baseline."""
    experiences = _experiences(4, 3, torch.float64, graded=True)
    masks = torch.cat([e.action_mask.flatten() for e in experiences]).double()
    index = torch.tensor([i for e in experiences for i in e.index])
    rewards = torch.empty(len(index), dtype=torch.float64)
    rewards[index] = torch.cat([e.rewards for e in experiences])
    lengths = torch.empty_like(rewards)
    lengths[index] = torch.cat([e.action_mask.sum(-1) for e in experiences]).double()
    core = compute_advantages(
        rewards,
        "reinforce_baseline",
        group_size=4,
        response_lengths=lengths,
        **OPENRLHF.settings("reinforce_baseline"),
    ).advantages
    mine = torch.cat(
        [
            token_advantages(core[torch.tensor(e.index)], e.action_mask).flatten()
            for e in experiences
        ]
    )
    centred = (rewards.reshape(-1, 4) - rewards.reshape(-1, 4).mean(-1, keepdim=True)).reshape(-1)
    per_token = torch.cat(
        [(centred[torch.tensor(e.index)][:, None] * e.action_mask).flatten() for e in experiences]
    )
    mean = (per_token * masks).sum() / masks.sum()
    var = ((per_token - mean) ** 2 * masks).sum() / masks.sum()
    expected = (per_token - mean) * var.clamp(min=1e-8).rsqrt() * masks
    # the batch moments sum over every token: their rounding, at the result's scale
    tolerance = rounding_tolerance(expected, terms=int(masks.sum()))
    torch.testing.assert_close(mine, expected, rtol=0, atol=tolerance)
