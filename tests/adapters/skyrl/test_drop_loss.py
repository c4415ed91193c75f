"""What ``skipped_groups=drop`` does to SkyRL's policy loss, for each of its loss reductions,
through SkyRL's own functions (``apply_loss_reduction_to_advantages_minibatch``, the
``regular`` PPO loss of its registry), in float64: the loss of a mini-batch whose dropped
rows have their loss mask zeroed (what the adapter does), against the loss of the mini-batch
holding only the kept rows.

- ``token_mean``: equal: the reduction divides by the mask's token count;
- ``sequence_mean`` (rows), ``prompt_mean`` (prompts) and ``seq_mean_token_sum_norm`` (rows,
  by design a constant): the dropped rows add 0, and the count keeps them: the loss is the
  kept rows' loss times kept / all (the guide says so).
"""

from __future__ import annotations

import pytest

pytest.importorskip("skyrl")

import torch

from .conftest import SKYRL_WARNINGS

pytestmark = SKYRL_WARNINGS
G, LENGTH = 4, 6
DROPPED = [1]  # the second prompt's group is skipped: dropped


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    rows = 3 * G
    lengths = torch.randint(1, LENGTH + 1, (rows,), generator=generator)
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).double()
    return {
        "log_probs": -torch.rand(rows, LENGTH, generator=generator, dtype=torch.float64),
        "old_log_probs": -torch.rand(rows, LENGTH, generator=generator, dtype=torch.float64),
        "advantages": torch.randn(rows, 1, generator=generator, dtype=torch.float64) * mask,
        "loss_mask": mask,
    }


def _loss(batch: dict[str, torch.Tensor], reduction: str, prompts: int) -> float:
    from skyrl.backends.skyrl_train.utils.ppo_utils import (
        PolicyLossRegistry,
        apply_loss_reduction_to_advantages_minibatch,
    )
    from skyrl.train.config import AlgorithmConfig

    config = AlgorithmConfig(loss_reduction=reduction, max_seq_len=LENGTH)
    advantages = apply_loss_reduction_to_advantages_minibatch(
        advantages=batch["advantages"],
        loss_mask=batch["loss_mask"],
        loss_reduction=reduction,
        micro_batch_size=1,
        max_seq_len=LENGTH,
        prompt_boundaries=[(p * G, (p + 1) * G) for p in range(prompts)],
    )
    loss, _ = PolicyLossRegistry.get("regular")(
        batch["log_probs"], batch["old_log_probs"], advantages, config, batch["loss_mask"]
    )
    return float(loss)


@pytest.mark.parametrize(
    ("reduction", "kept_share"),
    [
        ("token_mean", 1.0),
        ("sequence_mean", 2 / 3),  # 8 kept rows of 12
        ("prompt_mean", 2 / 3),  # 2 kept prompts of 3
        ("seq_mean_token_sum_norm", 2 / 3),
    ],
)
def test_drop_against_the_kept_rows_alone(reduction: str, kept_share: float) -> None:
    batch = _batch()
    dropped_rows = [row for group in DROPPED for row in range(group * G, (group + 1) * G)]
    masked = {**batch, "loss_mask": batch["loss_mask"].clone()}
    masked["loss_mask"][dropped_rows] = 0  # what the adapter's drop does
    kept_rows = [row for row in range(3 * G) if row not in dropped_rows]
    alone = {key: value[kept_rows] for key, value in batch.items()}
    with_drop = _loss(masked, reduction, prompts=3)
    kept = _loss(alone, reduction, prompts=2)
    assert abs(kept) > 1e-3  # not a comparison of zeros
    assert with_drop == pytest.approx(kept * kept_share, rel=1e-12)
    keep = _loss(batch, reduction, prompts=3)  # keep: the dropped rows' terms count
    assert keep != pytest.approx(with_drop, rel=1e-6)
