"""Reward budgeting in TRL: the paper's baselines on DAPO-Math-17K, then ``advbudget eval``.

The paper's protocol (arXiv 2611.05942; the table in examples/README.md, shared with
verl_qwen3.sh and openrlhf_qwen3.sh): 8 rollouts per prompt, 32 prompts per update, 8192
response tokens, the chat template's default (Qwen3: thinking on) in training and
evaluation, DAPO's ±1 reward; each baseline keeps its loss, clipping and KL, and the budget
estimator replaces only the advantages.

Real run (8 GPUs, vLLM colocated with training)::

    advbudget data prepare -o data/dapo --format trl --val-size 512
    accelerate launch --config_file examples/accelerate_trl.yaml examples/trl_qwen3.py \\
        --data data/dapo/trl --baseline dapo --estimator budget

Check a configuration on a CPU (builds TRL's GRPOConfig, prints it, loads no model)::

    python examples/trl_qwen3.py --dry-run --baseline gspo --model llama3.2-3b

Smoke run (CPU, a tiny random Qwen3 built locally and the bundled 64-problem sample;
about a minute, no network)::

    python examples/trl_qwen3.py --smoke --output-dir /tmp/trl-smoke

Baselines (``--baseline``): ``grpo`` (per-sequence mean, KL 1e-3, clip 0.2), ``dr_grpo``
(constant normaliser, no KL), ``gspo`` (sequence-level ratio, clip 3e-4/4e-4, no KL),
``dapo`` (token mean, clip 0.2/0.28, no KL, overlong penalty, dynamic sampling:
``skipped_groups="resample"``, which TRL itself does not have). DAPO + ClipCov and
DAPO + KLCov are verl policy losses that TRL does not have: use examples/verl_qwen3.sh.
``--estimator budget`` (default) is reward budgeting; ``--estimator baseline`` the
baseline's own advantages.
Budget advantages are smaller than GRPO's: the KL term weighs relatively more at the same
coefficient.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The paper's protocol (examples/README.md, "One protocol").
MODELS = {  # preset -> (hub id, what the paper reports)
    "qwen3-8b": ("Qwen/Qwen3-8B", "avg@8"),
    "llama3.2-3b": ("meta-llama/Llama-3.2-3B-Instruct", "pass@8"),
}
GENERATIONS = 8
PROMPTS_PER_UPDATE = 32
MAX_RESPONSE = 8192
OVERLONG_BUFFER = 4096  # DAPO's overlong penalty zone (the DAPO baseline)
LEARNING_RATE = 1e-6
TOTAL_STEPS = 500
VALIDATION_EVERY = 50  # with the checkpoints
EVAL_SAMPLES = 8

BASELINES: dict[str, dict[str, Any]] = {  # TRL's GRPOConfig fields for each baseline
    "grpo": {"loss_type": "grpo", "beta": 1e-3, "epsilon": 0.2},
    "dr_grpo": {"loss_type": "dr_grpo", "beta": 0.0, "epsilon": 0.2, "scale_rewards": "none"},
    "gspo": {
        "loss_type": "grpo",
        "importance_sampling_level": "sequence",
        "beta": 0.0,
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
    },
    "dapo": {"loss_type": "dapo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.28},
}
OWN_ESTIMATOR = {"grpo": "grpo", "dr_grpo": "dr", "gspo": "grpo", "dapo": "grpo"}
NOT_IN_TRL = ("dapo_clipcov", "dapo_klcov")  # verl policy losses (clip_cov, kl_cov)
ESTIMATORS = ("budget", "baseline", "grpo", "dr", "rloo")
REPORT_TO = ("auto", "tensorboard", "wandb", "none", "all")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="tiny model + bundled sample, CPU")
    mode.add_argument("--dry-run", action="store_true", help="print the GRPOConfig, no model")
    parser.add_argument(
        "--model", default="qwen3-8b", help=f"a preset ({', '.join(MODELS)}) or a path / hub id"
    )
    parser.add_argument("--data", type=Path, help="folder of train.parquet (and val.parquet)")
    parser.add_argument("--baseline", choices=(*BASELINES, *NOT_IN_TRL), default="grpo")
    # Earlier name: TRL's loss_type chose the baseline (dapo, grpo, dr_grpo).
    parser.add_argument(
        "--loss-type", dest="baseline", choices=("dapo", "grpo", "dr_grpo"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--estimator",
        choices=ESTIMATORS,
        default="budget",
        help="budget (reward budgeting) or baseline (the baseline's own advantages)",
    )
    parser.add_argument("--budget", type=float, default=1.0, help="the budget B")
    parser.add_argument(
        "--output-dir", type=Path, help="default: runs/trl/<model>_<baseline>_<est>"
    )
    parser.add_argument(
        "--report-to",
        choices=REPORT_TO,
        default="auto",
        help="TRL's report_to; auto: wandb when WANDB_API_KEY is set, else tensorboard",
    )
    parser.add_argument("--kappa-every", type=int, default=0, help="log κ_eff every N batches")
    parser.add_argument("--max-steps", type=int, default=TOTAL_STEPS)
    parser.add_argument("--per-device-batch-size", type=int, default=8, help="completions")
    parser.add_argument("--max-completion-length", type=int, default=MAX_RESPONSE)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-eval", action="store_true", help="skip advbudget eval")
    args = parser.parse_args(argv)
    if args.baseline in NOT_IN_TRL:
        parser.error(
            f"--baseline: {args.baseline} needs verl's {args.baseline.split('_')[1]} policy "
            "loss, which TRL does not have; run it with examples/verl_qwen3.sh "
            f"(BASELINE={args.baseline}); TRL runs {', '.join(BASELINES)}"
        )
    args.model_path, args.report_metric = MODELS.get(args.model, (args.model, "avg@8"))
    if args.estimator == "baseline":
        args.estimator = OWN_ESTIMATOR[args.baseline]
    args.num_generations = GENERATIONS
    args.prompts_per_update = PROMPTS_PER_UPDATE
    args.learning_rate = LEARNING_RATE
    args.overlong_buffer = OVERLONG_BUFFER if args.baseline == "dapo" else 0
    args.eval_n, args.eval_max_tokens = EVAL_SAMPLES, MAX_RESPONSE
    if args.smoke:
        # The same script at toy scale. A random model never stops on its own, so every
        # completion would hit the cap and tie; the EOS bias (generation_kwargs) makes
        # lengths differ, as a trained model's do, and the overlong penalty over the whole
        # length then gives the rollouts of a group different rewards unless all four have
        # one length (accuracy alone is -1 everywhere: every group would be skipped).
        args.max_steps = 2 if args.max_steps == TOTAL_STEPS else args.max_steps
        args.num_generations = 4
        args.prompts_per_update = 2
        args.per_device_batch_size = 8
        args.max_completion_length = 16
        args.overlong_buffer = args.max_completion_length
        args.learning_rate = 1e-3
        args.eval_n, args.eval_max_tokens = 2, 16
    elif args.data is None and not args.dry_run:
        parser.error("--data: required without --smoke (advbudget data prepare --format trl)")
    if args.output_dir is None:
        args.output_dir = Path("runs", "trl", run_name(args))
    return args


def run_name(args: argparse.Namespace) -> str:
    """``<model>_<baseline>_<estimator>``: every switch that changes the run, in the name."""
    model = args.model if args.model in MODELS else Path(args.model).name
    estimator = args.estimator
    if estimator == "budget" and args.budget != 1.0:
        estimator += f"{args.budget:g}"
    return f"{model}_{args.baseline}_{estimator}"


def report_to(choice: str) -> str:
    if choice == "auto":
        return "wandb" if os.environ.get("WANDB_API_KEY") else "tensorboard"
    return choice


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def config_settings(args: argparse.Namespace, has_validation: bool) -> dict[str, Any]:
    """TRL's ``GRPOConfig`` fields for this run."""
    completions = args.prompts_per_update * args.num_generations
    per_step = args.per_device_batch_size * _world_size()
    if completions % per_step:
        raise ValueError(
            f"--per-device-batch-size: {args.prompts_per_update} prompts x "
            f"{args.num_generations} generations must be a multiple of {per_step} (batch size "
            "x processes)"
        )
    settings: dict[str, Any] = {
        "output_dir": str(args.output_dir),
        "run_name": run_name(args),
        "report_to": report_to(args.report_to),
        "num_generations": args.num_generations,
        "per_device_train_batch_size": args.per_device_batch_size,
        "gradient_accumulation_steps": completions // per_step,  # one update per batch
        "max_completion_length": args.max_completion_length,
        "temperature": 1.0,
        "learning_rate": args.learning_rate,
        "max_steps": args.max_steps,
        "seed": args.seed,
        "logging_steps": 1,
        **BASELINES[args.baseline],
    }
    if has_validation:
        settings.update(
            eval_strategy="steps",
            eval_steps=VALIDATION_EVERY,
            num_generations_eval=GENERATIONS,
            per_device_eval_batch_size=args.per_device_batch_size,
        )
    if args.smoke:
        settings.update(
            use_cpu=True,
            bf16=False,
            activation_checkpointing=False,
            save_strategy="no",
            generation_kwargs={"sequence_bias": [[[args.eos_token_id], 4.0]]},
        )
    else:
        settings.update(
            bf16=True,
            activation_checkpointing=True,
            use_vllm=True,
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=0.3,
            save_strategy="steps",
            save_steps=50,
        )
        if args.dry_run:
            settings["use_cpu"] = True  # so that bf16 validates without a GPU
    return settings


def trainer_options(args: argparse.Namespace) -> dict[str, Any]:
    """``AdvBudgetGRPOTrainer``'s own options for this run."""
    return {
        "advantage_estimator": args.estimator,
        "advantage_options": {"budget": args.budget} if args.estimator == "budget" else None,
        # DAPO's dynamic sampling: generate again until every group of the step has a
        # reward gap (TRL has none; the adapter does it).
        "skipped_groups": "resample" if args.baseline == "dapo" else "keep",
        "kappa_every": args.kappa_every,
    }


class DapoReward:
    """DAPO's rule, ±1 as in verl's math_dapo and the OpenRLHF reward file (TRL's is 1/0;
    the scale matters for Dr.GRPO's advantages). A class, so that it pickles."""

    __name__ = "dapo_reward"

    def __call__(
        self, completions: Sequence[Any], solution: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        from advbudget.rewards.trl import dapo_accuracy

        scores = dapo_accuracy(completions, solution, **kwargs)
        return [None if s is None else 2.0 * s - 1.0 for s in scores]


def prepare_smoke(output_dir: Path) -> tuple[str, Path]:
    """Build the tiny model and write the bundled sample in TRL's format."""
    from advbudget.lab.data import load_problems, sample_path, write_trl
    from advbudget.lab.tiny import build_tiny_model

    model = build_tiny_model(output_dir / "tiny-qwen3")
    (train,) = write_trl({"train": load_problems(sample_path("dapo"))}, output_dir / "data")
    return str(model), train.parent


def build_trainer(args: argparse.Namespace, model: str, data: Path) -> Any:
    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    from advbudget.rewards.trl import overlong_penalty_reward

    files = {"train": str(data / "train.parquet")}
    if (data / "val.parquet").exists() and not args.smoke:
        files["validation"] = str(data / "val.parquet")
    splits = datasets.load_dataset("parquet", data_files=files)
    tokenizer = AutoTokenizer.from_pretrained(model)
    args.eos_token_id = tokenizer.eos_token_id
    reward_funcs: list[Any] = [DapoReward()]
    if args.overlong_buffer:
        reward_funcs.append(
            overlong_penalty_reward(args.max_completion_length, args.overlong_buffer)
        )
    return AdvBudgetGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward_funcs,
        args=GRPOConfig(**config_settings(args, "validation" in splits)),
        train_dataset=splits["train"],
        eval_dataset=splits.get("validation"),
        **trainer_options(args),
    )


def eval_command(args: argparse.Namespace, checkpoint: Path) -> list[str]:
    """``advbudget eval`` on the trained model: the paper's benchmarks (or the sample)."""
    from advbudget.lab.eval import protocol_command

    return protocol_command(
        checkpoint,
        args.output_dir / "eval",
        n=args.eval_n,
        max_new_tokens=args.eval_max_tokens,
        smoke=args.smoke,
    )


def dry_run(args: argparse.Namespace) -> None:
    """Build TRL's ``GRPOConfig`` (its own validation) and print what the run would use."""
    from trl import GRPOConfig

    args.eos_token_id = None
    settings = config_settings(args, has_validation=True)
    GRPOConfig(**settings)
    rewards = ["dapo_reward (±1)"]
    if args.overlong_buffer:
        rewards.append(f"overlong_penalty({args.max_completion_length}, {args.overlong_buffer})")
    summary = {
        "model": args.model_path,
        "report": args.report_metric,
        "config": settings,
        "trainer": trainer_options(args),
        "rewards": rewards,
        "eval": eval_command(args, args.output_dir / "final")[3:],
    }
    print(json.dumps(summary, indent=2))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        model, data = prepare_smoke(args.output_dir)
    else:
        model, data = args.model_path, args.data
    trainer = build_trainer(args, model, data)
    trainer.train()
    final = args.output_dir / "final"
    trainer.save_model(str(final))
    main_process = trainer.accelerator.is_main_process
    if main_process:
        trainer.processing_class.save_pretrained(str(final))
    del trainer  # the evaluation's vLLM needs the GPU memory the trainer holds
    gc.collect()
    if main_process and not args.no_eval:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        subprocess.run(eval_command(args, final), check=True)
        scores = args.output_dir / "eval" / "scores.json"
        print(f"Scores in {scores} (the paper reports {args.report_metric}); compare runs with")
        print(f"  advbudget compare {args.output_dir} OTHER_RUN ...")


if __name__ == "__main__":
    main()
