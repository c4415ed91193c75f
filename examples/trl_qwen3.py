"""Reward budgeting in TRL: Qwen3-8B on DAPO-Math-17K, then ``advbudget eval``.

The paper's setting (arXiv 2611.05942): 8 rollouts per prompt, 32 prompts per update; the
budget estimator replaces only the advantages of TRL's GRPO / Dr.GRPO / DAPO losses.

Real run (8 GPUs, vLLM colocated with training)::

    advbudget data prepare --format trl --val-size 500 -o data
    accelerate launch --config_file examples/accelerate_trl.yaml examples/trl_qwen3.py \\
        --data data/trl --loss-type dapo --estimator budget --output-dir runs/qwen3-budget

Smoke run (CPU, a tiny random Qwen3 built locally and the bundled 64-problem sample;
seconds, no network)::

    python examples/trl_qwen3.py --smoke --max-steps 2 --output-dir /tmp/trl-smoke

Loss types (TRL's ``loss_type``): ``dapo`` (token-mean over the batch, clip 0.2/0.28, no
KL), ``grpo`` (per-sequence mean), ``dr_grpo`` (constant normaliser). ``--estimator grpo``
with ``--loss-type grpo`` is TRL's own GRPO; ``--estimator dr --loss-type dr_grpo`` is
Dr.GRPO. Budget advantages are smaller than GRPO's: a KL term (``--beta``) weighs
relatively more at the same coefficient.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

MODEL = "Qwen/Qwen3-8B"
GENERATIONS = 8
PROMPTS_PER_UPDATE = 32
ESTIMATORS = ("budget", "grpo", "dr", "rloo")
LOSS_TYPES = ("dapo", "grpo", "dr_grpo")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model + bundled sample, CPU")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--data", type=Path, help="folder of train.parquet (and val.parquet)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/trl-qwen3"))
    parser.add_argument("--estimator", choices=ESTIMATORS, default="budget")
    parser.add_argument("--budget", type=float, default=1.0, help="the budget B")
    parser.add_argument("--loss-type", choices=LOSS_TYPES, default="dapo")
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient")
    parser.add_argument("--skip-empty-groups", action="store_true")
    parser.add_argument("--kappa-every", type=int, default=0, help="log κ_eff every N batches")
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--num-generations", type=int, default=GENERATIONS)
    parser.add_argument("--prompts-per-update", type=int, default=PROMPTS_PER_UPDATE)
    parser.add_argument("--per-device-batch-size", type=int, default=8, help="completions")
    parser.add_argument("--max-completion-length", type=int, default=4096)
    parser.add_argument("--overlong-buffer", type=int, default=0, help="DAPO penalty zone")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-eval", action="store_true", help="skip advbudget eval")
    parser.add_argument("--eval-n", type=int, default=8, help="samples per eval problem")
    args = parser.parse_args(argv)
    if args.smoke:
        # The same script at toy scale; the overlong penalty gives a random model's rollouts
        # different rewards (accuracy alone would be 0 everywhere: every group skipped).
        args.max_steps = 2 if args.max_steps < 0 else args.max_steps
        args.num_generations = 4
        args.prompts_per_update = 2
        args.per_device_batch_size = 8
        args.max_completion_length = 16
        args.overlong_buffer = args.overlong_buffer or 8
        args.learning_rate = 1e-3
        args.eval_n = 2
    elif args.data is None:
        parser.error("--data: required without --smoke (advbudget data prepare --format trl)")
    return args


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def prepare_smoke(output_dir: Path) -> tuple[str, Path]:
    """Build the tiny model and write the bundled sample in TRL's format."""
    from advbudget.data import load_problems, sample_path, write_trl
    from advbudget.tiny import build_tiny_model

    model = build_tiny_model(output_dir / "tiny-qwen3")
    (train,) = write_trl({"train": load_problems(sample_path("dapo"))}, output_dir / "data")
    return str(model), train.parent


def build_trainer(args: argparse.Namespace, model: str, data: Path) -> Any:
    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    from advbudget.rewards.trl import dapo_accuracy, overlong_penalty_reward

    files = {"train": str(data / "train.parquet")}
    train = datasets.load_dataset("parquet", data_files=files, split="train")
    completions = args.prompts_per_update * args.num_generations
    per_step = args.per_device_batch_size * _world_size()
    if completions % per_step:
        raise ValueError(
            f"--prompts-per-update: {args.prompts_per_update} prompts x {args.num_generations} "
            f"generations must be a multiple of {per_step} (batch size x processes)"
        )
    settings: dict[str, Any] = {
        "output_dir": str(args.output_dir),
        "num_generations": args.num_generations,
        "per_device_train_batch_size": args.per_device_batch_size,
        "gradient_accumulation_steps": completions // per_step,
        "max_completion_length": args.max_completion_length,
        "learning_rate": args.learning_rate,
        "loss_type": args.loss_type,
        "beta": args.beta,
        "max_steps": args.max_steps,
        "seed": args.seed,
        "logging_steps": 1,
        "report_to": "none",
        "temperature": 1.0,
    }
    if args.loss_type == "dapo":
        settings["epsilon_high"] = 0.28  # DAPO's clip-higher
    if args.smoke:
        settings.update(
            use_cpu=True, bf16=False, activation_checkpointing=False, save_strategy="no"
        )
    else:
        settings.update(
            bf16=True,
            activation_checkpointing=True,
            use_vllm=True,
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=0.3,
            save_strategy="steps",
            save_steps=100,
            chat_template_kwargs={"enable_thinking": False},
        )
    reward_funcs: list[Any] = [dapo_accuracy]
    if args.overlong_buffer:
        reward_funcs.append(
            overlong_penalty_reward(args.max_completion_length, args.overlong_buffer)
        )
    return AdvBudgetGRPOTrainer(
        model=model,
        processing_class=AutoTokenizer.from_pretrained(model),
        reward_funcs=reward_funcs,
        args=GRPOConfig(**settings),
        train_dataset=train,
        advantage_estimator=args.estimator,
        advantage_options={"budget": args.budget} if args.estimator == "budget" else None,
        skip_empty_groups=args.skip_empty_groups,
        kappa_every=args.kappa_every,
    )


def evaluate(args: argparse.Namespace, checkpoint: Path) -> None:
    """``advbudget eval`` on the trained model (the paper's benchmarks, or the sample)."""
    command = [
        sys.executable, "-c", "from advbudget.cli import main; main()", "eval",
        "--model", str(checkpoint), "--n", str(args.eval_n),
        "--output-dir", str(args.output_dir / "eval"),
    ]  # fmt: skip
    if args.smoke:
        from advbudget.data import sample_path

        command += ["--benchmarks", str(sample_path("eval")), "--backend", "transformers",
                    "--max-new-tokens", "16", "--grader", "dapo"]  # fmt: skip
    subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        model, data = prepare_smoke(args.output_dir)
    else:
        model, data = args.model, args.data
    trainer = build_trainer(args, model, data)
    trainer.train()
    final = args.output_dir / "final"
    trainer.save_model(str(final))
    if trainer.accelerator.is_main_process:
        trainer.processing_class.save_pretrained(str(final))
        if not args.no_eval:
            evaluate(args, final)


if __name__ == "__main__":
    main()
