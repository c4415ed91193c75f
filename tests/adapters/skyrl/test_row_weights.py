"""``row_weights`` with step-wise trajectories: each step's advantages times 1 / its
trajectory's steps, and what that does to SkyRL's policy losses, through SkyRL's own loss
functions (its registry, in float64).

SkyRL's loss takes no per-row weight; it applies its loss reduction by scaling the
advantages (``apply_loss_reduction_to_advantages_minibatch``) and sums the token losses. For
the losses of :data:`ROW_WEIGHTED_LOSSES` each token's term is linear in its advantage with a
factor set by the advantage's sign, so scaling a row's advantages by w > 0 weighs the row by
w exactly: a trajectory whose k steps each weigh 1/k counts as one step.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("skyrl")

import torch

from advbudget.adapters.skyrl._options import ROW_WEIGHTED_LOSSES
from advbudget.adapters.skyrl._trainer import step_row_weights

from .conftest import SKYRL_WARNINGS

pytestmark = SKYRL_WARNINGS
LENGTH = 5
LAST_STEP = [False, False, True, True, False, True]  # trajectories of 3, 1 and 2 steps


def _batch(rows: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Log-probs far enough from the old ones that every loss clips somewhere; advantages of
    both signs; ragged masks."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, LENGTH + 1, (rows,), generator=generator)
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).double()
    old = -torch.rand(rows, LENGTH, generator=generator, dtype=torch.float64) - 0.5
    shift = (torch.rand(rows, LENGTH, generator=generator, dtype=torch.float64) - 0.5) * 1.2
    return {
        "log_probs": old + shift,
        "old_log_probs": old,
        "rollout_logprobs": old + 0.1 * shift,
        "advantages": torch.randn(rows, 1, generator=generator, dtype=torch.float64) * mask,
        "loss_mask": mask,
    }


def _policy_loss(loss_type: str, batch: dict[str, torch.Tensor], advantages: Any) -> float:
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    from skyrl.train.config import AlgorithmConfig

    config = AlgorithmConfig(policy_loss_type=loss_type, max_seq_len=LENGTH)
    loss, _ = PolicyLossRegistry.get(loss_type)(
        batch["log_probs"],
        batch["old_log_probs"],
        advantages,
        config,
        batch["loss_mask"],
        batch["rollout_logprobs"],
    )
    return float(loss)


def test_each_step_weighs_one_over_its_trajectory_steps() -> None:
    weights = step_row_weights(LAST_STEP).tolist()
    assert weights == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0, 0.5, 0.5], rel=1e-15)


@pytest.mark.parametrize("loss_type", ROW_WEIGHTED_LOSSES)
def test_weighted_advantages_weigh_each_row_in_skyrls_loss(loss_type: str) -> None:
    """The loss of the batch with weighted advantages is the weighted sum of each row's
    loss alone."""
    batch = _batch(len(LAST_STEP))
    weights = step_row_weights(LAST_STEP).double()[:, None]
    whole = _policy_loss(loss_type, batch, batch["advantages"] * weights)
    by_row = sum(
        float(weights[row]) * _policy_loss(
            loss_type,
            {key: value[row : row + 1] for key, value in batch.items()},
            batch["advantages"][row : row + 1],
        )
        for row in range(len(LAST_STEP))
    )  # fmt: skip
    assert whole == pytest.approx(by_row, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("loss_type", ROW_WEIGHTED_LOSSES)
def test_a_trajectory_of_three_equal_steps_counts_as_one(loss_type: str) -> None:
    """Three copies of one step, weighted 1/3 each, add to the loss what the step adds once."""
    batch = _batch(2, seed=1)
    tripled = {key: value[[0, 0, 0, 1]] for key, value in batch.items()}
    weights = step_row_weights([False, False, True, True]).double()[:, None]
    weighted = _policy_loss(loss_type, tripled, tripled["advantages"] * weights)
    once = _policy_loss(loss_type, batch, batch["advantages"])
    assert weighted == pytest.approx(once, rel=1e-12, abs=1e-14)
    unweighted = _policy_loss(loss_type, tripled, tripled["advantages"])
    assert unweighted != pytest.approx(once, rel=1e-6)  # without the weights it counts thrice
