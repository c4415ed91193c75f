"""An estimator with memory (spo, rae) in TRL's real training loop: its state is keyed by
each completion's prompt, updated by training steps only, saved with every checkpoint, and
a run resumed from one computes the advantages an uninterrupted run computes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget import EstimatorState, compute_advantages  # noqa: E402
from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402
from advbudget.metrics import prompt_key  # noqa: E402

from .conftest import TRL_WARNINGS  # noqa: E402

pytestmark = TRL_WARNINGS


def _recorded(trainer: Any) -> list[tuple[list[int], list[float], list[float]]]:
    """Per training step: the prompt key and reward of each completion, and its advantage."""
    steps: list[tuple[list[int], list[float], list[float]]] = []
    original = trainer._advantages

    def advantages(rewards: Any, group_size: int, row_prompts: Any = None, mode: str = "train"):
        result = original(rewards, group_size, row_prompts, mode)
        if mode == "train":
            steps.append((list(row_prompts), rewards.tolist(), result.advantages.tolist()))
        return result

    trainer._advantages = advantages
    return steps


@pytest.mark.parametrize("estimator", ["spo", "rae"])
def test_memory_follows_the_prompts_and_survives_a_resume(
    make_trainer: Any, tmp_path: Path, estimator: str
) -> None:
    config = {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    whole = make_trainer(AdvBudgetGRPOTrainer, advantage_estimator=estimator, config={
        **config, "output_dir": str(tmp_path / "whole")})  # fmt: skip
    whole_steps = _recorded(whole)
    whole.train()
    assert len(whole_steps) == 4
    # The trainer's advantages are the core's on one state fed the same steps.
    state = EstimatorState()
    for keys, rewards, advantages in whole_steps:
        expected = compute_advantages(
            np.array(rewards), estimator, group_size=whole.num_generations,
            prompt_ids=keys, state=state,
        ).advantages  # fmt: skip
        np.testing.assert_allclose(advantages, expected, rtol=1e-6, atol=1e-6)
    keys = {key for step in whole_steps for key in step[0]}
    dataset = whole.train_dataset
    assert keys <= {prompt_key(row["prompt"]) for row in dataset}
    assert len(whole.advbudget_memory.estimator_state) == len(keys)

    out = tmp_path / "parts"
    first = make_trainer(AdvBudgetGRPOTrainer, advantage_estimator=estimator, config={
        **config, "output_dir": str(out), "max_steps": 2})  # fmt: skip
    first.train()
    saved = json.loads((out / "checkpoint-2" / "advbudget_state.json").read_text())
    assert saved["memory"]["estimator_state"]["estimator"] == estimator
    second = make_trainer(AdvBudgetGRPOTrainer, advantage_estimator=estimator, config={
        **config, "output_dir": str(out)})  # fmt: skip
    resumed_steps = _recorded(second)
    second.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert len(resumed_steps) == 2
    for (keys_a, rewards_a, adv_a), (keys_b, rewards_b, adv_b) in zip(
        whole_steps[2:], resumed_steps, strict=True
    ):
        assert keys_a == keys_b
        assert rewards_a == rewards_b
        np.testing.assert_allclose(adv_b, adv_a, rtol=1e-12, atol=1e-12)
    assert (
        second.advbudget_memory.estimator_state.state_dict()
        == whole.advbudget_memory.estimator_state.state_dict()
    )


def test_memory_refuses_resample_and_needs_prompts(make_trainer: Any) -> None:
    with pytest.raises(ValueError, match="skipped_groups: estimator 'spo' remembers"):
        make_trainer(AdvBudgetGRPOTrainer, advantage_estimator="spo", skipped_groups="resample")
    trainer = make_trainer(AdvBudgetGRPOTrainer, advantage_estimator="rae")
    rewards = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    with pytest.raises(ValueError, match="prompt_ids: estimator 'rae' remembers"):
        trainer.compute_group_advantages(rewards, 2)
    result = trainer.compute_group_advantages(rewards, 2, prompts=["a", "a", "b", "b"])
    assert result.advantages.tolist() == [1.0, 0.0, 1.0, 1.0]
    assert trainer.advbudget_memory.estimator_state.values("b") == {"baseline": pytest.approx(0.05)}


def test_an_evaluation_reads_the_memory_and_leaves_it(
    make_trainer: Any, train_dataset: Any
) -> None:
    config = {
        "max_steps": 2,
        "eval_strategy": "steps",
        "eval_steps": 1,
        "per_device_eval_batch_size": 8,
        "num_generations_eval": 2,
    }
    trainer = make_trainer(
        AdvBudgetGRPOTrainer, advantage_estimator="spo", config=config, eval_dataset=train_dataset
    )
    steps = _recorded(trainer)
    evaluated: list[str] = []
    original = trainer._advantages

    def counted(rewards: Any, group_size: int, row_prompts: Any = None, mode: str = "train"):
        evaluated.append(mode)
        return original(rewards, group_size, row_prompts, mode)

    trainer._advantages = counted
    trainer.train()
    assert evaluated.count("eval") >= 2
    state = EstimatorState()
    for keys, rewards, advantages in steps:  # as if no evaluation had run
        expected = compute_advantages(
            np.array(rewards), "spo", group_size=trainer.num_generations,
            prompt_ids=keys, state=state,
        ).advantages  # fmt: skip
        np.testing.assert_allclose(advantages, expected, rtol=1e-6, atol=1e-6)
    assert trainer.advbudget_memory.estimator_state.state_dict() == state.state_dict()
