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

    def advantages(
        rewards: Any, group_size: int, row_prompts: Any = None, mode: str = "train", rho: Any = None
    ):
        result = original(rewards, group_size, row_prompts, mode, rho)
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
    with pytest.raises(ValueError, match="rho: 'kl' is spo's KL-adaptive forgetting"):
        make_trainer(AdvBudgetGRPOTrainer, advantage_estimator="rae", advantage_options={
            "rho": "kl"})  # fmt: skip
    with pytest.raises(ValueError, match=r"rho: 'kl' is spo's .*a callable estimator takes no rho"):
        make_trainer(AdvBudgetGRPOTrainer, advantage_estimator=lambda rewards, **_: rewards,
                     advantage_options={"rho": "kl"})  # fmt: skip
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

    def counted(
        rewards: Any, group_size: int, row_prompts: Any = None, mode: str = "train", rho: Any = None
    ):
        evaluated.append(mode)
        return original(rewards, group_size, row_prompts, mode, rho)

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


def _completion_logps(model: Any, prompt: Any, completion: Any) -> Any:
    """log π(completion | prompt) per token, one unpadded sequence through plain
    transformers (not TRL's forward)."""
    ids = torch.cat([prompt, completion])[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, prompt.shape[0] - 1 : -1].double()
    return torch.log_softmax(logits, -1).gather(-1, completion[:, None])[:, 0]


def test_kl_adaptive_rho_is_the_drift_of_each_prompts_last_response(
    make_trainer: Any, train_dataset: Any, tiny_model: Any
) -> None:
    """rho="kl": each step's ρ of a prompt is clip(2^(-D/0.06), 0.875, 0.96), D the mean
    |Δ log-prob| of the prompt's last response from its previous step, between the weights
    of that step and this one's: recomputed here from snapshots of the weights with plain
    transformers. A prompt's first step has D = 0 (ρ = 0.96)."""
    import copy

    from transformers import AutoModelForCausalLM

    from advbudget.core import spo_rho

    trainer = make_trainer(
        AdvBudgetGRPOTrainer, advantage_estimator="spo", advantage_options={"rho": "kl"},
        train_dataset=train_dataset.select([1, 2, 4]),
        config={"max_steps": 4, "learning_rate": 1e-4},
    )  # fmt: skip
    steps: list[dict[str, Any]] = []
    original_scored, original_forgetting = trainer._scored, trainer._forgetting

    def forgetting(inputs: Any, output: Any, start: int, mode: str) -> Any:
        steps.append({"weights": copy.deepcopy(trainer.model.state_dict()), "output": {
            k: output[k].clone() for k in
            ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}})  # fmt: skip
        return original_forgetting(inputs, output, start, mode)

    def scored(inputs: Any, rewards: Any, group_size: int, mode: str, rho: Any = None) -> Any:
        steps[-1].update(keys=[prompt_key(x["prompt"]) for x in inputs], rho=rho)
        return original_scored(inputs, rewards, group_size, mode, rho)

    trainer._forgetting, trainer._scored = forgetting, scored
    trainer.train()
    assert len(steps) == 4
    logged = [e["advbudget/spo_drift_mean"] for e in trainer.state.log_history
              if "advbudget/spo_drift_mean" in e]  # fmt: skip
    assert len(logged) == 4

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    last: dict[Any, tuple[int, int]] = {}  # prompt -> (step, row) of its last response
    drifts_seen = []
    for t, step in enumerate(steps):
        drift = {}
        for key in dict.fromkeys(step["keys"]):
            if key not in last:
                drift[key] = 0.0
                continue
            then, row = last[key]
            out = steps[then]["output"]
            prompt = out["prompt_ids"][row][out["prompt_mask"][row].bool()]
            mask = out["completion_mask"][row].bool()
            completion = out["completion_ids"][row][mask]  # the tiny model's never stop early
            logps = []
            for weights in (steps[then]["weights"], step["weights"]):
                model.load_state_dict(weights)
                logps.append(_completion_logps(model, prompt, completion))
            drift[key] = float((logps[1] - logps[0]).abs().mean())
        want = spo_rho(np.array([drift[k] for k in step["keys"]]))
        np.testing.assert_allclose(step["rho"], want, rtol=0, atol=1e-5)
        assert logged[t] == pytest.approx(np.mean(list(drift.values())), rel=1e-3, abs=1e-6)
        drifts_seen += [d for k, d in drift.items() if k in last]
        for row, key in enumerate(step["keys"]):
            last[key] = (t, row)
    # The check means something: prompts came back, the policy moved on them, and some
    # ρ fell between the bounds (where it depends on D continuously).
    assert len(drifts_seen) >= 3
    assert min(drifts_seen) > 0
    inside = [r for s in steps for r in s["rho"] if 0.875 < r < 0.96]
    assert inside, [s["rho"] for s in steps]
