"""The vectorised returns equal OpenRLHF's ``get_cumulative_returns`` loop."""

from __future__ import annotations

import pytest

pytest.importorskip("openrlhf")

import torch

from advbudget.adapters.openrlhf._returns import cumulative_returns

from .conftest import OPENRLHF_WARNINGS, import_openrlhf

pytestmark = OPENRLHF_WARNINGS


def openrlhf_loop(
    rewards: torch.Tensor, mask: torch.Tensor | None, gamma: float = 1.0
) -> torch.Tensor:
    module = import_openrlhf()
    # ``self`` is unused by the method: call it unbound.
    return module.RemoteExperienceMaker.get_cumulative_returns(None, rewards, mask, gamma)


def random_case(seed: int, rows: int, length: int, dtype: torch.dtype, kl: bool):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, length + 1, (rows,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    last = (lengths - 1).clamp(min=0)
    rewards = torch.zeros(rows, length, dtype=dtype)
    rewards[torch.arange(rows), last] = torch.randn(rows, generator=g).to(dtype)
    if kl:
        rewards = rewards - 0.01 * torch.randn(rows, length, generator=g).to(dtype)
    return rewards, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("length", [1, 7, 16, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sparse_rewards_bit_identical(seed: int, length: int, dtype: torch.dtype) -> None:
    """KL off: one non-zero reward per row, the loop and the cumsum agree bit for bit."""
    rewards, mask = random_case(seed, 64, length, dtype, kl=False)
    expected = openrlhf_loop(rewards, mask)
    got = cumulative_returns(rewards, mask)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("length", [1, 7, 16, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("masked", [True, False])
def test_dense_rewards_equal_to_rounding(
    seed: int, length: int, dtype: torch.dtype, masked: bool
) -> None:
    """KL on: every token has a reward; equal up to the loop's per-token rounding."""
    rewards, mask = random_case(seed, 64, length, dtype, kl=True)
    mask_arg = mask if masked else None
    expected = openrlhf_loop(rewards, mask_arg)
    got = cumulative_returns(rewards, mask_arg)
    assert got.dtype == expected.dtype
    eps = torch.finfo(dtype).eps
    scale = (rewards.abs() * (mask if masked else 1)).sum(-1, keepdim=True)
    assert torch.all((got - expected).abs() <= length * eps * scale + eps)
    if masked:  # positions after the last action token: exactly 0 in both
        assert torch.equal(got[~mask], expected[~mask])


def test_float_mask_and_bf16_dtype() -> None:
    rewards, mask = random_case(0, 8, 9, torch.bfloat16, kl=True)
    expected = openrlhf_loop(rewards, mask.float())
    got = cumulative_returns(rewards, mask.float())
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("gamma", [0.9, 0.5, 0.0])
def test_other_gamma_is_openrlhfs_scan(gamma: float) -> None:
    """OpenRLHF keeps gamma for its reinforce: the same scan (masked positions counted in
    the discount, as OpenRLHF's), bit for bit."""
    for seed, masked in ((0, True), (1, False)):
        rewards, mask = random_case(seed, 32, 11, torch.float32, kl=True)
        mask[::3, 2:4] = False  # observation spans inside responses
        mask_arg = mask if masked else None
        expected = openrlhf_loop(rewards, mask_arg, gamma)
        got = cumulative_returns(rewards, mask_arg, gamma)
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected)


def test_rejects_bad_shapes() -> None:
    rewards = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="shape"):
        cumulative_returns(torch.zeros(3), None)
    with pytest.raises(ValueError, match="action_mask"):
        cumulative_returns(rewards, torch.ones(2, 4, dtype=torch.bool))
