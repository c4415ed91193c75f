"""Worker of test_trl_distributed.py, run by ``torchrun --nproc_per_node 2`` on CPU.

Usage: ``torchrun ... _two_process_worker.py MODEL_DIR DATA_FILE OUTPUT_DIR [resample]``.
Each rank trains one step with budget advantages, 6 completions per rank in groups of 4
(the second group spans both ranks), and writes what its loss received and the global
rewards to ``OUTPUT_DIR/rank<r>.json``. With ``resample``: two steps of
``skipped_groups="resample"``, 8 completions (2 whole groups) per rank, a reward that
ties every group of half the prompts; each rank records its rounds and, per group it
trained on, the advantage spread and the token count.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch


def parity_reward(completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
    return [float(sum(ids) % 3) for ids in completion_ids]


def half_dead_reward(
    prompts: list[Any], completion_ids: list[list[int]], **kwargs: Any
) -> list[float]:
    """1.0 for every completion of a prompt with an even text length (a tied group), else
    a parity that varies inside groups."""
    return [
        1.0 if len(str(prompt)) % 2 == 0 else float(sum(ids) % 2)
        for prompt, ids in zip(prompts, completion_ids, strict=True)
    ]


def main(model_dir: str, data_file: str, output_dir: str, mode: str = "spanning") -> None:
    resample = mode == "resample"
    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    from advbudget.adapters.trl.testing import grpo_config

    config = grpo_config(
        Path(output_dir) / "out",
        per_device_train_batch_size=8 if resample else 6,
        max_steps=2 if resample else 1,
    )
    trainer = AdvBudgetGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=half_dead_reward if resample else parity_reward,
        args=config,
        train_dataset=datasets.Dataset.from_parquet(data_file),
        advantage_estimator="budget",
        skipped_groups="resample" if resample else "keep",
    )
    record: dict[str, Any] = {}
    calculate, generate = trainer._calculate_rewards, trainer._generate_and_score_completions

    def calculate_rewards(*args: Any) -> Any:
        rewards = calculate(*args)
        record["global_rewards"] = rewards[:, 0].tolist()
        return rewards

    def generate_and_score(inputs: Any) -> Any:
        output = generate(inputs)
        record["local_advantages"] = output["advantages"].tolist()
        groups = record.setdefault("groups", [])
        for start in range(0, len(output["advantages"]), 4):
            advantages = output["advantages"][start : start + 4]
            tokens = int(output["completion_mask"][start : start + 4].sum())
            groups.append([float(advantages.max() - advantages.min()), tokens])
        return output

    trainer._calculate_rewards = calculate_rewards
    trainer._generate_and_score_completions = generate_and_score
    trainer.train()
    record["rank"] = trainer.accelerator.process_index
    record["world_size"] = trainer.accelerator.num_processes
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    record["rounds"] = [entry.get("advbudget/generation_batches") for entry in logs]
    path = Path(output_dir) / f"rank{record['rank']}.json"
    path.write_text(json.dumps(record))
    # Tear gloo down explicitly: left to interpreter exit, its threads can abort a rank
    # ("terminate called without an active exception") after the work is done.
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    # Then leave without the interpreter's teardown: "terminate called without an active
    # exception" is libstdc++ destroying a still-joinable std::thread, and the only C++
    # threads here are torch's (gloo's); skipping static destructors skips that abort.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:5])
