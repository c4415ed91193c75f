"""One RL run: the warm start trained by ``AdvBudgetGRPOTrainer`` with one estimator and seed."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from advbudget.core._weights import split_weighted

from ._config import LMConfig
from ._model import evaluate, task_splits
from ._task import mixture

# Per-step keys of a run's history: TRL's own metrics, the adapter's, and the held-out
# evaluation this module adds (prefixed "lm/" in TRL's logs).
TRL_KEYS = {
    "reward": "reward",
    "train_entropy": "entropy",
    "skipped_group_fraction": "advbudget/skipped_group_fraction",
    "unsolved_group_fraction": "advbudget/unsolved_group_fraction",
    "solved_group_fraction": "advbudget/solved_group_fraction",
    "never_solved_prompt_fraction": "advbudget/never_solved_prompt_fraction",
    "always_solved_prompt_fraction": "advbudget/always_solved_prompt_fraction",
    "kappa_eff": "advbudget/kappa_eff/mean",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "completion_length": "completions/mean_length",
    "loss": "loss",
}
EVAL_PREFIX = "lm/"


def rl_prompts(config: LMConfig, seed: int) -> list[Any]:
    """The prompts of every step, in order: the same for every estimator of a seed."""
    splits = task_splits(config)
    return mixture(
        splits.train,
        config.steps * config.prompts_per_step,
        config.hard_fraction,
        seed=10_000 + seed,
    )


def run_rl(
    config: LMConfig,
    warm_start: Path,
    estimator: str,
    seed: int,
    *,
    on_step: Callable[[int], None] | None = None,
    output_dir: Path | None = None,
) -> dict[str, Any]:
    """Train the warm start with ``estimator`` for ``config.steps`` steps; return its record.

    The record holds ``history`` (per step: TRL's logged metrics, and every
    ``eval_every`` steps the held-out scores), ``test`` (the final scores on the test
    split), ``weights_changed``, ``seconds`` and TRL's ``log_history``.
    """
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.utils import logging as transformers_logging
    from trl import GRPOConfig

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    from advbudget.adapters.trl._hooks import metrics_store
    from advbudget.rewards.trl import dapo_accuracy

    transformers_logging.disable_progress_bar()
    started = time.perf_counter()
    splits = task_splits(config)
    problems = rl_prompts(config, seed)
    dataset = datasets.Dataset.from_dict(
        {
            "prompt": [p.prompt for p in problems],
            "solution": [p.answer for p in problems],
            "tier": [p.tier for p in problems],
        }
    )
    tokenizer = AutoTokenizer.from_pretrained(warm_start)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(warm_start)
    reference = AutoModelForCausalLM.from_pretrained(warm_start).to(config.device).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    def score(network: Any, problems: Any, eval_seed: int, kl_to: Any = None) -> dict[str, float]:
        """The held-out metrics, sampled as in training (validation and test alike)."""
        return evaluate(
            network,
            tokenizer,
            problems,
            samples=config.eval_samples,
            max_new_tokens=config.max_completion_length,
            temperature=config.temperature,
            seed=eval_seed,
            reference=kl_to,
        )

    def held_out(network: Any) -> dict[str, float]:
        return score(network, splits.validation, 20_000 + seed, kl_to=reference)

    evaluations: dict[int, dict[str, float]] = {}

    class HeldOut(TrainerCallback):  # type: ignore[misc]
        """Scores the policy on the validation split every ``eval_every`` steps and puts
        the numbers in TRL's metrics, so they are logged with the step's own."""

        def __init__(self) -> None:
            self.trainer: Any = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            step = state.global_step
            if step % config.eval_every == 0 or step == config.steps:
                scores = held_out(self.trainer.model)
                evaluations[step] = scores
                for key, value in scores.items():
                    metrics_store(self.trainer)["train"][EVAL_PREFIX + key].append(value)
            if on_step is not None:
                on_step(step)
            return control

    with tempfile.TemporaryDirectory(prefix="advbudget-lm-") as scratch:
        args = GRPOConfig(
            output_dir=str(output_dir or Path(scratch) / "trl"),
            use_cpu=config.device == "cpu",
            bf16=False,
            activation_checkpointing=False,
            full_determinism=True,  # torch's deterministic algorithms, as the warm start
            report_to="none",
            num_generations=config.group_size,
            per_device_train_batch_size=config.prompts_per_step * config.group_size,
            max_completion_length=config.max_completion_length,
            temperature=config.temperature,
            top_k=0,
            top_p=1.0,
            learning_rate=config.learning_rate,
            lr_scheduler_type="constant",
            warmup_steps=0,
            loss_type=config.loss_type,
            beta=config.beta,
            max_steps=config.steps,
            logging_steps=1,
            save_strategy="no",
            seed=seed,
            data_seed=seed,
            shuffle_dataset=False,  # the prompts come in rl_prompts' order
            disable_tqdm=True,
            log_completions=False,
        )
        evaluations[0] = held_out(model.to(config.device))
        callback = HeldOut()
        base, weight = split_weighted(estimator)  # "grpo+grpo_lead": with a group weight
        trainer = AdvBudgetGRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=dapo_accuracy,
            args=args,
            train_dataset=dataset,
            advantage_estimator=base,
            group_weight=weight,
            kappa_every=1,
            callbacks=[callback],
        )
        callback.trainer = trainer
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        trainer.train()
        log_history = list(trainer.state.log_history)
        policy = trainer.model
        changed = any(
            not torch.equal(p.detach().cpu(), before[n].cpu()) for n, p in policy.named_parameters()
        )
        test = score(policy, splits.test, 30_000 + seed, kl_to=reference)
        test_start = score(reference, splits.test, 30_000 + seed)
        del trainer
    return {
        "estimator": estimator,
        "seed": seed,
        "history": _history(log_history, evaluations, config.steps),
        "test": test,
        "test_warm_start": test_start,
        "weights_changed": changed,
        "seconds": time.perf_counter() - started,
        "log_history": log_history,
    }


def _history(
    log_history: list[dict[str, Any]], evaluations: dict[int, dict[str, float]], steps: int
) -> dict[str, list[float | None]]:
    """Per step 0..steps: each metric's value (None where the step has none: step 0 for
    the training metrics, steps between evaluations for the held-out ones)."""
    by_step = {int(entry["step"]): entry for entry in log_history if "loss" in entry}
    history: dict[str, list[float | None]] = {"step": [float(s) for s in range(steps + 1)]}
    for name, key in TRL_KEYS.items():
        history[name] = [_number(by_step.get(s, {}).get(key)) for s in range(steps + 1)]
    eval_keys = sorted({k for scores in evaluations.values() for k in scores})
    for key in eval_keys:
        history[key] = [_number(evaluations.get(s, {}).get(key)) for s in range(steps + 1)]
    return history


def _number(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value
