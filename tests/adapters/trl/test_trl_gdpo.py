"""gdpo in a real TRL GRPO step: our trainer's advantages equal TRL 1.16's own
``multi_objective_aggregation="normalize_then_sum"`` (GDPO) with several reward functions,
``reward_weights``, ties, and rewards a function could not score (None)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402

from .conftest import TRL_WARNINGS, length_parity_reward, mixed_reward  # noqa: E402
from .test_trl_parity import _losses_inputs  # noqa: E402

pytestmark = TRL_WARNINGS


def graded_reward(
    completion_ids: Sequence[Sequence[int]], kind: Sequence[str], **kwargs: Any
) -> list[float | None]:
    """Graded with ties; None where ``kind`` is "none" and for some others."""
    rewards: list[float | None] = []
    for ids, k in zip(completion_ids, kind, strict=True):
        total = sum(ids)
        rewards.append(None if k == "none" or total % 7 == 0 else float(total % 4) / 4)
    return rewards


REWARD_FUNCS = [length_parity_reward, mixed_reward, graded_reward]
CONFIG = {
    "multi_objective_aggregation": "normalize_then_sum",
    "reward_weights": [1.0, 2.0, 0.5],
    "max_steps": 2,
    "per_device_train_batch_size": 16,
}


def test_gdpo_matches_trls_normalize_then_sum(make_trainer: Any) -> None:
    # Built and trained one after the other: each starts from the seed (set in __init__).
    stock = make_trainer(reward_funcs=REWARD_FUNCS, config=CONFIG)
    stock_seen = _losses_inputs(stock)
    stock.train()
    ours = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=REWARD_FUNCS,
        config=CONFIG,
        advantage_estimator="gdpo",
    )
    assert ours.advantage_settings["weights"] == [1.0, 2.0, 0.5]  # TRL's reward_weights
    our_seen = _losses_inputs(ours)
    ours.train()
    assert len(stock_seen) == len(our_seen) == 2
    nonzero = 0
    for want, got in zip(stock_seen, our_seen, strict=True):
        assert torch.equal(want["completion_ids"], got["completion_ids"])  # same batch
        torch.testing.assert_close(got["advantages"], want["advantages"], rtol=1e-5, atol=1e-5)
        nonzero += int(torch.count_nonzero(want["advantages"]))
    assert nonzero > 0
    # Every reward function reached the estimator as its own component.
    result = ours.last_advantage_result
    assert result is not None
    assert len(result.grouped.components) == len(REWARD_FUNCS)
    stock_loss = [e["loss"] for e in stock.state.log_history if "loss" in e]
    our_loss = [e["loss"] for e in ours.state.log_history if "loss" in e]
    assert our_loss == pytest.approx(stock_loss, rel=1e-4, abs=1e-6)


def test_components_from_the_per_function_rewards(make_trainer: Any) -> None:
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=REWARD_FUNCS,
        config={"max_steps": 1},
        advantage_estimator="gdpo",
        advantage_options={"weights": [1.0, 1.0, 1.0]},  # ours win over reward_weights
    )
    nan = float("nan")
    per_func = torch.tensor(
        [
            *([1.0, 0.0, nan], [0.0, 0.0, 0.5], [1.0, 1.0, 0.25], [0.0, 1.0, nan]),
            *([nan, nan, nan], [1.0, nan, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
        ]
    )
    result = trainer.compute_group_advantages(per_func, group_size=4)
    assert result.valid.tolist() == [True] * 4 + [False, True, True, True]
    assert result.advantages[4] == 0  # every function returned None: unscorable
    # The same numbers as the core on the matrix (TRL's constants: the trl row).
    from advbudget import compute_advantages
    from advbudget.adapters import get_convention

    settings = get_convention("trl").settings("gdpo", {"weights": [1.0, 1.0, 1.0]})
    core = compute_advantages(per_func, "gdpo", group_size=4, nan_policy="omit", **settings)
    torch.testing.assert_close(result.advantages, core.advantages)


def test_other_estimators_still_refuse_normalize_then_sum(make_trainer: Any) -> None:
    with pytest.raises(ValueError, match=r"multi_objective_aggregation: .*'sum_then_normalize'"):
        make_trainer(
            AdvBudgetGRPOTrainer,
            reward_funcs=REWARD_FUNCS,
            config=CONFIG,
            advantage_estimator="grpo",
        )
