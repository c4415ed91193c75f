"""Invariants of the estimators, checked with hypothesis on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages, make_groups
from advbudget.testing import assert_close, to_numpy

from .references import reference

ESTIMATORS = ("budget", "grpo", "dr", "rloo")
# Rewards on a grid: spreads are either 0 or >= 0.25, so no case sits on the tie tolerance.
REWARD_VALUES = [-2.0, -1.0, 0.0, 0.25, 0.5, 1.0, 3.0]

backend_settings = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@st.composite
def labelled_batches(draw, max_groups=6, max_size=8):
    """Rewards with labels: variable group sizes, shuffled order, string or int labels."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    labels = [f"prompt-{g}" for g, size in enumerate(sizes) for _ in range(size)]
    rewards = draw(
        st.lists(st.sampled_from(REWARD_VALUES), min_size=len(labels), max_size=len(labels))
    )
    order = draw(st.permutations(range(len(labels))))
    labels = [labels[i] for i in order]
    if draw(st.booleans()):
        labels = [int(label.split("-")[1]) * 7 - 3 for label in labels]
    return np.array(rewards), labels


@st.composite
def contiguous_batches(draw):
    group_size = draw(st.integers(1, 8))
    num_groups = draw(st.integers(1, 6))
    rewards = draw(
        st.lists(
            st.sampled_from(REWARD_VALUES),
            min_size=group_size * num_groups,
            max_size=group_size * num_groups,
        )
    )
    return np.array(rewards), group_size


def group_sums(advantages, labels):
    sums = {}
    for a, label in zip(advantages, labels, strict=True):
        sums[label] = sums.get(label, 0.0) + a
    return np.array(list(sums.values()))


@pytest.mark.parametrize("estimator", ESTIMATORS)
@backend_settings
@given(batch=labelled_batches())
def test_matches_float64_reference_on_every_backend(xp, estimator, batch):
    rewards, labels = batch
    expected = reference(estimator, rewards, labels)
    for dtype in (xp.float32, xp.float64):
        res = compute_advantages(xp.asarray(rewards, dtype=dtype), estimator, group_ids=labels)
        assert_close(res.advantages, expected, xp=xp, dtype=dtype, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(group_sums(to_numpy(res.advantages), labels)) < 1e-9)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@backend_settings
@given(batch=contiguous_batches())
def test_contiguous_equals_shuffled_labels(xp, estimator, batch):
    rewards, group_size = batch
    labels = np.arange(rewards.shape[0]) // group_size
    permutation = np.random.default_rng(len(rewards)).permutation(rewards.shape[0])
    r = xp.asarray(rewards, dtype=xp.float64)
    contiguous = compute_advantages(r, estimator, group_size=group_size).advantages
    shuffled = compute_advantages(
        xp.asarray(rewards[permutation], dtype=xp.float64),
        estimator,
        group_ids=labels[permutation],
    ).advantages
    padded = compute_advantages(
        xp.asarray(rewards[permutation], dtype=xp.float64),
        estimator,
        groups=make_groups(
            xp.asarray(rewards[permutation]), group_ids=labels[permutation], method="padded"
        ),
    ).advantages
    assert_close(shuffled, to_numpy(contiguous)[permutation], xp=xp)
    assert_close(padded, to_numpy(contiguous)[permutation], xp=xp)


@given(batch=labelled_batches(), budget=st.sampled_from([0.5, 1.0, 4.0]))
def test_budget_bounds_and_zero_sum(batch, budget):
    rewards, labels = batch
    res = compute_advantages(rewards, "budget", group_ids=labels, budget=budget)
    sizes = {label: labels.count(label) for label in labels}
    size = np.array([sizes[label] for label in labels], dtype=float)
    adv = res.advantages
    assert np.all(adv >= -budget / size - 1e-12)
    assert np.all(adv <= budget - budget / size + 1e-12)
    assert np.all(np.abs(group_sums(adv, labels)) < 1e-12)
    # Skipped groups are exactly zero; the others have a positive advantage gap.
    valid = res.valid
    assert np.all(adv[~valid] == 0.0)
    skipped = res.group_skipped
    assert np.all(res.group_advantage_gap[~skipped] > 0)


@given(
    batch=labelled_batches(),
    shift=st.sampled_from([-3.0, 0.0, 0.5, 10.0]),
    scale=st.sampled_from([0.25, 1.0, 2.0, 8.0]),
)
def test_budget_shift_and_scale_invariance(batch, shift, scale):
    rewards, labels = batch
    base = compute_advantages(rewards, "budget", group_ids=labels).advantages
    moved = compute_advantages(rewards * scale + shift, "budget", group_ids=labels).advantages
    np.testing.assert_allclose(moved, base, rtol=1e-12, atol=1e-12)
    # Dr and RLOO are shift-invariant and scale with the rewards; GRPO is shift-invariant.
    for estimator, power in (("dr", 1), ("rloo", 1), ("grpo", None)):
        plain = compute_advantages(rewards, estimator, group_ids=labels).advantages
        shifted = compute_advantages(rewards + shift, estimator, group_ids=labels).advantages
        np.testing.assert_allclose(shifted, plain, rtol=1e-9, atol=1e-9)
        if power:
            scaled = compute_advantages(rewards * scale, estimator, group_ids=labels).advantages
            np.testing.assert_allclose(scaled, plain * scale, rtol=1e-12, atol=1e-12)


@given(batch=labelled_batches(), seed=st.integers(0, 2**16))
def test_permutation_equivariance(batch, seed):
    rewards, labels = batch
    permutation = np.random.default_rng(seed).permutation(len(labels))
    for estimator in ESTIMATORS:
        base = compute_advantages(rewards, estimator, group_ids=labels).advantages
        permuted = compute_advantages(
            rewards[permutation], estimator, group_ids=[labels[i] for i in permutation]
        ).advantages
        np.testing.assert_allclose(permuted, base[permutation], rtol=1e-12, atol=1e-12)


@given(batch=labelled_batches(max_size=8))
def test_binary_budget_is_dr_over_k(batch):
    rewards, labels = batch
    binary = (rewards > 0.3).astype(float)
    budget = compute_advantages(binary, "budget", group_ids=labels).advantages
    dr = compute_advantages(binary, "dr", group_ids=labels).advantages
    correct = {label: 0 for label in labels}
    for r, label in zip(binary, labels, strict=True):
        correct[label] += int(r)
    k = np.array([max(correct[label], 1) for label in labels])
    np.testing.assert_allclose(budget, dr / k, rtol=1e-12, atol=1e-12)
    assert np.all(np.abs(budget) <= np.abs(dr) + 1e-12)
