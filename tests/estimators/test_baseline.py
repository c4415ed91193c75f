"""The estimators against a baseline given from outside the group
(advbudget/core/estimators/baseline.py): ReMax, whose baseline is the reward of a greedy
rollout of the same prompt. (Its float64 reference on every layout and backend:
tests/test_conformance.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget.testing import to_numpy

from ._shared import R, backend_settings, batches, check_hand_values


def test_remax_hand_values(xp):
    check_hand_values(xp, "remax", (), np.array(R) - 0.5)  # baselines 0.5: r - 0.5


@backend_settings
@given(batch=batches(), shift=st.sampled_from([-3.0, 0.5]))
def test_remax_moves_with_its_baseline(xp, batch, shift):
    rewards, labels, lengths = batch
    kw = {"reward_baselines": xp.asarray(lengths / 10 + shift, dtype=xp.float64)}
    r = xp.asarray(rewards + shift, dtype=xp.float64)
    out = to_numpy(compute_advantages(r, "remax", group_ids=labels, **kw).advantages)
    np.testing.assert_allclose(out, rewards - lengths / 10, atol=1e-12)


def test_remax_needs_its_baselines():
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="reward_baselines: the remax estimator needs"):
        compute_advantages(rewards, "remax", group_size=2)
