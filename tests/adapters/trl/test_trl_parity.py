"""Parity: with the "grpo" estimator our trainer feeds the loss TRL's own advantages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402

from .conftest import TRL_WARNINGS  # noqa: E402

pytestmark = TRL_WARNINGS


def sometimes_unscorable(
    completion_ids: Sequence[Sequence[int]], kind: Sequence[str], **kwargs: Any
) -> list[float | None]:
    """Graded rewards with ties, constant groups and None (NaN) inside and across groups."""
    rewards: list[float | None] = []
    for ids, k in zip(completion_ids, kind, strict=True):
        total = sum(ids)
        if k == "none":
            rewards.append(None)
        elif k == "const":
            rewards.append(0.5)
        else:
            rewards.append(None if total % 5 == 0 else float(total % 3) / 2)
    return rewards


def _losses_inputs(trainer: Any) -> list[dict[str, Any]]:
    """Record what ``_compute_loss`` receives (after TRL's shuffle and split)."""
    seen: list[dict[str, Any]] = []
    original = trainer._compute_loss

    def wrapped(model: Any, inputs: dict[str, Any]) -> Any:
        seen.append({k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        return original(model, inputs)

    trainer._compute_loss = wrapped
    return seen


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_grpo_estimator_matches_stock_trl(make_trainer: Any, loss_type: str) -> None:
    config = {
        "scale_rewards": "group",
        "loss_type": loss_type,
        "max_steps": 2,
        "per_device_train_batch_size": 16,
    }
    # Built and trained one after the other: each starts from the seed (set in __init__).
    stock = make_trainer(reward_funcs=sometimes_unscorable, config=config)
    stock_seen = _losses_inputs(stock)
    stock.train()
    ours = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=sometimes_unscorable,
        config=config,
        advantage_estimator="grpo",
        tie_rtol=0.0,
        tie_atol=0.0,
    )
    our_seen = _losses_inputs(ours)
    ours.train()
    assert len(stock_seen) == len(our_seen) == 2
    nonzero = 0
    for want, got in zip(stock_seen, our_seen, strict=True):
        assert torch.equal(want["completion_ids"], got["completion_ids"])  # same batch
        assert torch.equal(want["completion_mask"], got["completion_mask"])
        assert torch.equal(want["num_items_in_batch"], got["num_items_in_batch"])
        torch.testing.assert_close(got["advantages"], want["advantages"], rtol=1e-5, atol=1e-6)
        nonzero += int(torch.count_nonzero(want["advantages"]))
    assert nonzero > 0  # the comparison is not between zeros
    # And the same training losses.
    stock_loss = [e["loss"] for e in stock.state.log_history if "loss" in e]
    our_loss = [e["loss"] for e in ours.state.log_history if "loss" in e]
    assert our_loss == pytest.approx(stock_loss, rel=1e-4, abs=1e-6)
