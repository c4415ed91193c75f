"""The per-token steps of the core: the reward-to-go across observation spans and the
whitening over a batch's tokens (verl's reinforce_plus_plus and remax mirrors use them)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from advbudget.core import reward_to_go, whiten_tokens
from advbudget.testing import rounding_tolerance


def _reference(rewards: np.ndarray, mask: np.ndarray, gamma: float) -> np.ndarray:
    """Term by term: each token's return sums the rewards of the mask's later tokens,
    discounted by the number of mask tokens between them."""
    out = np.zeros_like(rewards)
    for b, t in zip(*np.nonzero(mask), strict=True):
        later = [s for s in range(t, rewards.shape[1]) if mask[b, s]]
        out[b, t] = sum(gamma**k * rewards[b, s] for k, s in enumerate(later))
    return out


def test_hand_values() -> None:
    """A reward after an observation span reaches the earlier turn, undiscounted by the
    span; padding gets 0; a reward inside a span is not the policy's."""
    rewards = np.array([[0.0, 0.0, 5.0, 0.0, 2.0, 0.0]])
    mask = np.array([[1, 1, 0, 0, 1, 0]])
    np.testing.assert_array_equal(reward_to_go(rewards, mask), [[2, 2, 0, 0, 2, 0]])
    np.testing.assert_array_equal(reward_to_go(rewards, mask, gamma=0.5), [[0.5, 1, 0, 0, 2, 0]])
    np.testing.assert_array_equal(reward_to_go(rewards, mask, gamma=0.0), [[0, 0, 0, 0, 2, 0]])


masks = hnp.arrays(np.bool_, st.tuples(st.integers(1, 5), st.integers(1, 9)))


@settings(max_examples=60, deadline=None)
@given(mask=masks, gamma=st.sampled_from([1.0, 0.99, 0.5, 0.0, 1.5]), seed=st.integers(0, 99))
def test_reward_to_go_is_the_discounted_sum_over_mask_tokens(
    mask: np.ndarray, gamma: float, seed: int
) -> None:
    rewards = np.random.default_rng(seed).normal(size=mask.shape)
    expected = _reference(rewards, mask, gamma)
    got = reward_to_go(rewards, mask.astype(np.int64), gamma=gamma)
    tolerance = rounding_tolerance(expected, terms=mask.shape[1], dtype=np.float64)
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance + 1e-300)
    assert np.all(got[~mask] == 0)


@settings(max_examples=40, deadline=None)
@given(mask=masks, seed=st.integers(0, 99))
def test_whitened_tokens_have_mean_0_and_variance_1(mask: np.ndarray, seed: int) -> None:
    values = np.random.default_rng(seed).normal(size=mask.shape) * 3 + 1
    out = whiten_tokens(values, mask, var_eps=0.0)
    assert np.all(out[~mask] == 0)
    inside = out[mask]
    if inside.size >= 2:
        np.testing.assert_allclose(inside.mean(), 0.0, atol=1e-12)
        np.testing.assert_allclose(inside.var(ddof=1), 1.0, rtol=1e-10)
    centred = whiten_tokens(values, mask, std_norm=False)
    if inside.size:
        np.testing.assert_allclose(centred[mask], values[mask] - values[mask].mean(), atol=1e-12)
    if inside.size == 1:  # one token: no variance, nothing to divide by
        assert np.all(out == 0)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_backends_agree_with_numpy(backend: str) -> None:
    rng = np.random.default_rng(0)
    mask = rng.random((6, 7)) < 0.7
    rewards = rng.normal(size=(6, 7))
    if backend == "torch":
        torch = pytest.importorskip("torch")
        to = torch.as_tensor
    else:
        jnp = pytest.importorskip("jax.numpy")
        rewards, to = rewards.astype(np.float32), jnp.asarray
    for gamma in (1.0, 0.9):
        expected = reward_to_go(rewards, mask, gamma=gamma)
        got = np.asarray(reward_to_go(to(rewards), to(mask), gamma=gamma))
        tolerance = rounding_tolerance(expected, terms=7, dtype=rewards.dtype)
        np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)
    expected = whiten_tokens(rewards, mask)
    got = np.asarray(whiten_tokens(to(rewards), to(mask)))
    tolerance = rounding_tolerance(expected, terms=rewards.size, dtype=rewards.dtype)
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)


def test_bad_inputs_name_the_argument() -> None:
    with pytest.raises(ValueError, match="gamma: expected a finite number, got nan"):
        reward_to_go(np.zeros((2, 3)), np.ones((2, 3)), gamma=float("nan"))
    with pytest.raises(ValueError, match=r"response_mask: expected shape \(2, 3\)"):
        reward_to_go(np.zeros((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"values: expected shape \[B, T\]"):
        whiten_tokens(np.zeros(3), np.ones(3))
    with pytest.raises(TypeError, match="token_rewards: expected a real floating dtype"):
        reward_to_go(np.zeros((2, 3), dtype=np.int64), np.ones((2, 3)))
