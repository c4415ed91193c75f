"""The estimators with batch statistics (advbudget/core/estimators/batch.py): GPG, TRL's
grpo_batch_std and rloo_normalized, OpenRLHF's reinforce and reinforce_baseline, verl's
reinforce_plus_plus_baseline. Hand values, groups of one, invariants (hypothesis), the
whitening's scale. (gdpo, of reward components: test_components.py; every estimator's
float64 reference on every layout and backend: tests/test_conformance.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from advbudget import compute_advantages, get_spec
from advbudget.testing import assert_close

from ._shared import (
    DR,
    RLOO,
    R,
    advantages_of,
    assert_shift_invariant,
    backend_settings,
    batches,
    check_hand_values,
    group_sums,
)

WHITENED = ("reinforce_plus_plus_baseline", "reinforce_baseline", "reinforce")
CENTRED = ("gpg", "grpo_batch_std", "rloo_normalized")  # each group's sum is zero

# -- hand-computed values on the shared batch (tests/estimators/_shared.py) ------------------

HAND = {
    # GPG: 4 nonzero rewards of N = 8, alpha = 2; f_norm divides.
    ("gpg", ()): 2 * DR,
    ("gpg", (("f_norm", 4.0),)): DR / 2,
    # Batch std of the 8 rewards: mean 3/8, sum of squares 1.375, unbiased 1.375 / 7.
    ("grpo_batch_std", ()): DR / (math.sqrt(1.375 / 7) + 1e-4),
    # RLOO's advantages have batch mean 0 and unbiased variance (1 + 3/9 + 8/9) / 7 = 20/63.
    ("rloo_normalized", ()): RLOO / (math.sqrt(20 / 63) + 1e-4),
    # OpenRLHF's reinforce: r whitened, mean 3/8, biased variance 1.375 / 8.
    ("reinforce", ()): (np.array(R) - 0.375) / math.sqrt(1.375 / 8),
    # OpenRLHF's reinforce_baseline without lengths: DR has mean 0, biased var 1.25 / 8.
    ("reinforce_baseline", ()): DR / math.sqrt(1.25 / 8),
    ("reinforce_baseline", (("std_norm", False),)): DR,
    # verl's: weighted by the lengths (total 16): mean (3 - 1) / 16 = 1/8; the weighted sum
    # of squares about it is 3.25, unbiased over tokens / 15, plus 1e-8 under the root.
    ("reinforce_plus_plus_baseline", ()): (DR - 0.125) / math.sqrt(3.25 / 15 + 1e-8),
}


@pytest.mark.parametrize(("name", "options"), list(HAND), ids=str)
def test_hand_computed_values(xp, name, options):
    lengths = name == "reinforce_plus_plus_baseline"
    check_hand_values(xp, name, options, HAND[(name, options)], lengths=lengths)


def test_groups_of_one(xp):
    rewards = xp.asarray([2.0, 1.0, 0.0], dtype=xp.float64)  # [2 | 1, 0]
    labels = ["a", "b", "b"]
    # GPG: 2 nonzero rewards of 3, alpha 3/2 (the lone rollout counts in alpha either way).
    gpg = compute_advantages(rewards, "gpg", group_ids=labels, singletons="raw")
    assert_close(gpg.advantages, [3.0, 0.75, -0.75], like=rewards)
    skipped = compute_advantages(rewards, "gpg", group_ids=labels)
    assert_close(skipped.advantages, [0, 0.75, -0.75], like=rewards)
    # verl's REINFORCE++-baseline: [2, 0.5, -0.5], mean 2/3, unbiased variance 19/12.
    rpp = compute_advantages(rewards, "reinforce_plus_plus_baseline", group_ids=labels,
                             singletons="raw")  # fmt: skip
    expected = (np.array([2.0, 0.5, -0.5]) - 2 / 3) / math.sqrt(19 / 12 + 1e-8)
    assert_close(rpp.advantages, expected, like=rewards)
    # RLOO normalized: the lone rollout is left out of the statistics (TRL: NaN baseline).
    rn = compute_advantages(rewards, "rloo_normalized", group_ids=labels)
    s = math.sqrt(2) + 1e-4
    assert_close(rn.advantages, [0.0, 1 / s, -1 / s], like=rewards)


# -- invariants ----------------------------------------------------------------------------


@backend_settings
@given(batch=batches())
def test_group_centred_ones_sum_to_zero_per_group(xp, batch):
    labels = batch[1]
    for name in CENTRED:
        assert np.all(np.abs(group_sums(advantages_of(xp, name, *batch), labels)) < 1e-9), name


@pytest.mark.parametrize("name", ["grpo_batch_std", "rloo_normalized", *WHITENED])
@backend_settings
@given(batch=batches(min_size=2), shift=st.sampled_from([-3.0, 0.5, 7.0]))
def test_adding_a_constant_to_every_reward_changes_nothing(xp, name, batch, shift):
    # (GPG's alpha counts the nonzero rewards: a shift changes it, on purpose.)
    assert_shift_invariant(xp, name, batch, shift)


@pytest.mark.parametrize("name", WHITENED)
@backend_settings
@given(batch=batches())
def test_whitened_advantages_have_token_weighted_mean_0_and_std_1(xp, name, batch):
    rewards, labels, lengths = batch
    # Without the variance regularisers: with them (verl's var_eps 1e-8, the 1e-8 floor)
    # the std is sqrt(var / (var + eps)), 1e-6 below 1 already at var 1e-2 (hypothesis
    # found such a batch): the defaults' scale is checked below.
    exact = advantages_of(xp, name, rewards, labels, lengths, var_eps=0.0, var_floor=0.0)
    correction = get_spec(name).option("std_correction").default
    mean = np.sum(lengths * exact) / np.sum(lengths)
    assert abs(mean) < 1e-9
    out = advantages_of(xp, name, rewards, labels, lengths)
    if np.max(np.abs(exact)) == 0:  # a batch whose (centred) rewards are all equal
        assert np.all(out == 0)
        return
    var = np.sum(lengths * (exact - mean) ** 2) / (np.sum(lengths) - correction)
    assert var == pytest.approx(1.0, rel=1e-6)
    # The defaults only shrink the same advantages, by at most the regulariser's share.
    scale = np.sum(out * exact) / np.sum(exact * exact)
    np.testing.assert_allclose(out, scale * exact, rtol=1e-9, atol=1e-12)
    assert 0 < scale <= 1 + 1e-12
