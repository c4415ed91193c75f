"""Worker of test_trl_distributed.py, run by ``torchrun --nproc_per_node 2`` on CPU.

Usage: ``torchrun ... _two_process_worker.py MODEL_DIR DATA_FILE OUTPUT_DIR``. Each rank
trains one step with budget advantages, 6 completions per rank in groups of 4 (the
second group spans both ranks), and writes what its loss received and the global rewards
to ``OUTPUT_DIR/rank<r>.json``.
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


def main(model_dir: str, data_file: str, output_dir: str) -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer

    config = GRPOConfig(
        output_dir=str(Path(output_dir) / "out"),
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        report_to="none",
        max_completion_length=16,
        num_generations=4,
        per_device_train_batch_size=6,
        learning_rate=1e-3,
        logging_steps=1,
        max_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = AdvBudgetGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=parity_reward,
        args=config,
        train_dataset=datasets.Dataset.from_parquet(data_file),
        advantage_estimator="budget",
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
        return output

    trainer._calculate_rewards = calculate_rewards
    trainer._generate_and_score_completions = generate_and_score
    trainer.train()
    record["rank"] = trainer.accelerator.process_index
    record["world_size"] = trainer.accelerator.num_processes
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
    main(*sys.argv[1:4])
