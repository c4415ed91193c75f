"""Parity of the catalogue's OpenRLHF estimators (reinforce, reinforce_baseline) with
OpenRLHF 0.11.2's own ``compute_advantages_and_returns`` on real ``Experience`` objects
(no KL: the return of every action token is the sequence's reward, gamma 1).

Ours: the core on the whole batch with OpenRLHF's conventions (``OPENRLHF.settings``) and
each rollout weighted by its action-token count, broadcast over the action mask.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openrlhf")

import torch

from advbudget import compute_advantages, token_advantages
from advbudget.core import get_convention
from advbudget.testing.openrlhf import make_args, make_experiences, make_maker

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS
OPENRLHF = get_convention("openrlhf")
GRADED = (-1.0, 0.0, 0.0, 0.3, 0.5, 1.0, 1.0, 2.7)


def _experiences(n: int, seed: int, dtype: torch.dtype, graded: bool) -> list[Any]:
    experiences = make_experiences(
        int(np.random.default_rng(seed).integers(1, 9)),
        n,
        seed=seed,
        micro_batch=3 + seed % 4,
        rewards=GRADED if graded else (0.0, 1.0),
        constant_groups=1,
    )
    for e in experiences:
        e.rewards = e.rewards.to(dtype)
        if graded:  # break the dyadic grid: means and variances are not exact any more
            e.rewards = e.rewards + torch.tensor(e.index, dtype=dtype).remainder(3) * 0.1
    return experiences


def ours(name: str, experiences: list[Any], n: int, **overrides: Any) -> list[torch.Tensor]:
    index = torch.tensor([i for e in experiences for i in e.index])
    rewards = torch.cat([e.rewards for e in experiences])
    lengths = torch.cat([e.action_mask.sum(-1) for e in experiences]).to(rewards.dtype)
    full = torch.empty_like(rewards)
    full[index] = rewards  # prompt-major order: rollouts i*n .. i*n+n-1 are prompt i's
    full_lengths = torch.empty_like(lengths)
    full_lengths[index] = lengths
    settings = OPENRLHF.settings(name, overrides)
    res = compute_advantages(
        full, name, group_size=n, response_lengths=full_lengths, **settings
    ).advantages
    return [token_advantages(res[torch.tensor(e.index)], e.action_mask) for e in experiences]


def theirs(name: str, experiences: list[Any], n: int, no_std_norm: bool = False) -> list[Any]:
    args = make_args(name, n)
    args.algo.advantage.no_std_norm = no_std_norm
    return [e.advantages for e in make_maker(args, 0.0).compute_advantages_and_returns(experiences)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("n", [1, 2, 5, 16])
@pytest.mark.parametrize("name", ["reinforce", "reinforce_baseline"])
@pytest.mark.parametrize("no_std_norm", [False, True])
def test_parity(
    name: str, n: int, graded: bool, seed: int, dtype: torch.dtype, no_std_norm: bool
) -> None:
    experiences = _experiences(n, seed, dtype, graded)
    expected = theirs(name, copy.deepcopy(experiences), n, no_std_norm)
    mine = ours(name, experiences, n, **({"std_norm": False} if no_std_norm else {}))
    # OpenRLHF whitens in float32 (``.float()``) whatever the rewards' dtype: float64
    # agrees to float32 rounding of the batch mean and std only.
    # OpenRLHF does not re-mask after whitening: its padding tokens hold -mean/std (the
    # loss masks them); we compare the action tokens and check our padding is 0.
    worst = 0.0
    for a, b, e in zip(mine, expected, experiences, strict=True):
        assert a.shape == b.shape
        inside = e.action_mask.bool()
        worst = max(worst, float((a[inside].double() - b[inside].double()).abs().max()))
        assert float(a[~inside].abs().sum()) == 0.0
    assert worst <= 2e-5, f"max abs difference {worst}"


def test_our_float64_is_exact_where_openrlhf_rounds_to_float32() -> None:
    """Our float64 result equals a float64 re-computation of OpenRLHF's formula."""
    experiences = _experiences(4, 3, torch.float64, graded=True)
    mine = torch.cat([a.flatten() for a in ours("reinforce_baseline", experiences, 4)])
    masks = torch.cat([e.action_mask.flatten() for e in experiences]).double()
    index = torch.tensor([i for e in experiences for i in e.index])
    rewards = torch.empty(len(index), dtype=torch.float64)
    rewards[index] = torch.cat([e.rewards for e in experiences])
    centred = (rewards.reshape(-1, 4) - rewards.reshape(-1, 4).mean(-1, keepdim=True)).reshape(-1)
    per_token = torch.cat(
        [(centred[torch.tensor(e.index)][:, None] * e.action_mask).flatten() for e in experiences]
    )
    mean = (per_token * masks).sum() / masks.sum()
    var = ((per_token - mean) ** 2 * masks).sum() / masks.sum()
    expected = (per_token - mean) * var.clamp(min=1e-8).rsqrt() * masks
    torch.testing.assert_close(mine, expected, rtol=1e-12, atol=1e-12)
