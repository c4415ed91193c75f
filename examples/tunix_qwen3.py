"""Reward budgeting in tunix (JAX): the paper's baselines on DAPO-Math-17K, then ``advbudget eval``.

The paper's protocol (arXiv 2611.05942; the table in examples/README.md, shared with the
verl, TRL and OpenRLHF examples): 8 rollouts per prompt, 32 prompts per update (one
optimizer step), 8192 response tokens, the chat template's default (Qwen3: thinking on),
DAPO's ±1 reward; each baseline keeps tunix's loss, clipping and KL, and the estimator
replaces only the advantages. The model is a Hugging Face Qwen3 checkpoint loaded with
tunix's own loader (``tunix.models.qwen3.params.create_model_from_safe_tensors``), trained
on every local accelerator (TPU or GPU: ``jax[tpu]`` or ``jax[cuda12]``), and written back
as a Hugging Face checkpoint for ``advbudget eval``.

Real run (a TPU slice or a GPU host; the weights come from the hub)::

    advbudget data prepare -o data/dapo --format tunix --val-size 512
    python examples/tunix_qwen3.py --data data/dapo/tunix --baseline grpo --estimator budget

Check a configuration without jax or a model (prints what tunix gets)::

    python examples/tunix_qwen3.py --dry-run --baseline dapo

Smoke run (CPU, in the tunix environment: a tiny random Qwen3 checkpoint and its
tokenizer built locally, the bundled 64-problem sample; the same code, tens of seconds
after compilation, no network)::

    python examples/tunix_qwen3.py --smoke --output-dir /tmp/tunix-smoke

Baselines (``--baseline``), as tunix offers them: ``grpo`` (``GRPOConfig``: per-sequence
mean, k3 KL 1e-3 in the loss, clip 0.2), ``dr_grpo`` (``DrGRPOConfig``: the constant
normaliser, no KL), ``gspo`` (``loss_algo="gspo-token"``, clip 3e-4/4e-4, no KL),
``dapo`` (``DAPOConfig``: token mean, clip 0.2/0.28, no KL, tunix's overlong reward
shaping over the last 4096 of 8192, counted in characters). tunix has no dynamic sampling
(``DAPOConfig.dynamic_sampling`` is a TODO in 0.1.7): for ``dapo`` the example drops the
dead groups from the loss (``skipped_groups="drop"``) instead of generating new ones.
DAPO + ClipCov and DAPO + KLCov are verl policy losses: use examples/verl_qwen3.sh.
``--estimator budget`` (default) is reward budgeting, ``--estimator baseline`` the
baseline's own advantages (our mirror of tunix's, which gives tunix's numbers and keeps
the advbudget metrics), any other catalogue name (``rloo``, ``opo`` needs lengths tunix
does not pass, ...) that estimator.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# The paper's protocol (examples/README.md, "One protocol").
MODELS = {"qwen3-8b": ("Qwen/Qwen3-8B", "avg@8")}  # preset -> (hub id, what is reported)
NOT_IN_TUNIX_MODELS = ("llama3.2-3b",)  # the example loads Qwen3 checkpoints only
GENERATIONS = 8
PROMPTS_PER_UPDATE = 32
MAX_RESPONSE = 8192
MAX_PROMPT = 1024
OVERLONG_BUFFER = 4096  # DAPO's overlong zone (the DAPO baseline)
LEARNING_RATE = 1e-6
TOTAL_STEPS = 500
VALIDATION_EVERY = 50  # with the checkpoints
TEMPERATURE = 1.0
EVAL_SAMPLES = 8
EVAL_TEMPERATURE = 0.7  # validation samples as the final evaluation (PAPER_TEMPERATURE)

# tunix's config class and fields for each baseline.
BASELINES: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": (
        "GRPOConfig",
        {
            "loss_agg_mode": "sequence-mean-token-mean",
            "beta": 1e-3,
            "kl_loss_mode": "low_var_kl",  # k3
            "epsilon": 0.2,
        },
    ),
    # DrGRPOConfig's loss_agg_mode "sequence-mean-token-scale": the constant max length
    "dr_grpo": ("DrGRPOConfig", {"beta": 0.0, "epsilon": 0.2}),
    # GRPOConfig has no epsilon_high field; tunix's loss reads the attribute if present
    "gspo": (
        "GRPOConfig",
        {"loss_algo": "gspo-token", "beta": 0.0, "epsilon": 3e-4, "epsilon_high": 4e-4},
    ),
    "dapo": (
        "DAPOConfig",
        {"loss_agg_mode": "token-mean", "epsilon": 0.2, "epsilon_high": 0.28, "beta": 0.0},
    ),
}
# --estimator baseline: our mirror of the baseline's own estimator (tunix's numbers)
OWN_ESTIMATOR = {"grpo": "grpo", "dr_grpo": "dr", "gspo": "grpo", "dapo": "grpo"}
NOT_IN_TUNIX = ("dapo_clipcov", "dapo_klcov")  # verl policy losses (clip_cov, kl_cov)

# The smoke run: the same code at toy scale.
SMOKE = {
    "num_generations": 4,
    "prompts_per_update": 2,
    "max_steps": 2,
    "max_response": 16,
    "max_prompt": 256,
    "learning_rate": 1e-3,
    "kappa_every": 1,
}
# A random model never solves a problem: DAPO's accuracy is -1 for every rollout and every
# group would be skipped. tunix's overlong shaping over the whole (character) length gives
# the rollouts of a group different rewards, as TRL's smoke does with its length penalty.
SMOKE_LENGTH_SHAPING = {
    "enable": True,
    "overlong_buffer_length": 64,
    "overlong_buffer_penalty": 1.0,
    "max_response_length": 64,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from advbudget.core import get_spec

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="tiny model + bundled sample, CPU")
    mode.add_argument("--dry-run", action="store_true", help="print the settings, no jax")
    parser.add_argument(
        "--model",
        default="qwen3-8b",
        help=f"a preset ({', '.join(MODELS)}), a hub id or a local Qwen3 checkpoint folder",
    )
    parser.add_argument("--data", type=Path, help="folder of train.jsonl (and val.jsonl)")
    parser.add_argument("--baseline", choices=(*BASELINES, *NOT_IN_TUNIX), default="grpo")
    parser.add_argument(
        "--estimator",
        default="budget",
        help="budget (reward budgeting), baseline (the baseline's own advantages) or any "
        "advbudget catalogue name",
    )
    parser.add_argument("--budget", type=float, default=1.0, help="the budget B")
    parser.add_argument("--output-dir", type=Path, help="default: runs/tunix/<model>_<...>")
    parser.add_argument("--kappa-every", type=int, default=10, help="κ_eff every N updates")
    parser.add_argument("--max-steps", type=int, default=TOTAL_STEPS)
    parser.add_argument(
        "--mesh", default="", help="FSDP,TP device counts (default: every device on FSDP)"
    )
    parser.add_argument("--micro-batch", type=int, default=1, help="prompts per train step")
    parser.add_argument("--rollout-batch", type=int, default=4, help="prompts per generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-eval", action="store_true", help="skip advbudget eval")
    args = parser.parse_args(argv)
    if args.baseline in NOT_IN_TUNIX:
        parser.error(
            f"--baseline: {args.baseline} needs verl's {args.baseline.split('_')[1]} policy "
            "loss, which tunix does not have; run it with examples/verl_qwen3.sh "
            f"(BASELINE={args.baseline}); tunix runs {', '.join(BASELINES)}"
        )
    if args.model in NOT_IN_TUNIX_MODELS:
        parser.error(
            f"--model: {args.model} is a Llama checkpoint; this example loads Qwen3 "
            "checkpoints (tunix.models.qwen3); run it with the verl, TRL or OpenRLHF example"
        )
    if args.estimator != "baseline":
        try:
            get_spec(args.estimator)
        except ValueError as error:
            parser.error(f"--estimator: budget, baseline or an advbudget {error}")
    if args.kappa_every < 0:
        parser.error(f"--kappa-every: expected an int >= 0, got {args.kappa_every}")
    args.model_path, args.report_metric = MODELS.get(args.model, (args.model, "avg@8"))
    args.estimator_name = (
        OWN_ESTIMATOR[args.baseline] if args.estimator == "baseline" else args.estimator
    )
    args.num_generations = GENERATIONS
    args.prompts_per_update = PROMPTS_PER_UPDATE
    args.max_response, args.max_prompt = MAX_RESPONSE, MAX_PROMPT
    args.learning_rate = LEARNING_RATE
    args.eval_n, args.eval_max_tokens = EVAL_SAMPLES, MAX_RESPONSE
    if args.smoke:
        given = {
            k for k in ("max_steps", "kappa_every") if getattr(args, k) != parser.get_default(k)
        }
        for key, value in SMOKE.items():  # what the command line left at its default
            if key not in given:
                setattr(args, key, value)
        args.micro_batch = args.rollout_batch = args.prompts_per_update
        args.eval_n, args.eval_max_tokens = 2, SMOKE["max_response"]
    elif args.data is None and not args.dry_run:
        parser.error("--data: required without --smoke (advbudget data prepare --format tunix)")
    if args.prompts_per_update % args.micro_batch or args.prompts_per_update % args.rollout_batch:
        parser.error(
            f"--micro-batch, --rollout-batch: expected divisors of the {args.prompts_per_update} "
            f"prompts per update, got {args.micro_batch} and {args.rollout_batch}"
        )
    if args.output_dir is None:
        args.output_dir = Path("runs", "tunix", run_name(args))
    return args


def run_name(args: argparse.Namespace) -> str:
    """``<model>_<baseline>_<estimator>``: every switch that changes the run, in the name."""
    model = args.model if args.model in MODELS else Path(args.model).name
    estimator = args.estimator_name
    if estimator == "budget" and args.budget != 1.0:
        estimator += f"{args.budget:g}"
    return f"{model}_{args.baseline}_{estimator}"


def tunix_estimator(args: argparse.Namespace) -> str:
    """The name tunix's registry knows our estimator by."""
    return (
        "reward_budget" if args.estimator_name == "budget" else f"advbudget_{args.estimator_name}"
    )


def algo_settings(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """tunix's config class and its fields for this run."""
    config_class, fields = BASELINES[args.baseline]
    settings = {"num_generations": args.num_generations, "num_iterations": 1, **fields}
    if args.baseline == "dapo":
        settings["overlong_buffer"] = (
            dict(SMOKE_LENGTH_SHAPING)
            if args.smoke
            else {
                "enable": True,
                "overlong_buffer_length": OVERLONG_BUFFER,
                "overlong_buffer_penalty": 1.0,
                "max_response_length": args.max_response,
            }
        )
    return config_class, settings


def training_settings(args: argparse.Namespace) -> dict[str, Any]:
    """tunix's ``RLTrainingConfig`` fields, rollout configs and the learner's options."""
    return {
        "max_steps": args.max_steps,
        "mini_batch_size": args.prompts_per_update,  # one optimizer step per batch
        "train_micro_batch_size": args.micro_batch,
        "rollout_micro_batch_size": args.rollout_batch,
        "compute_logps_micro_batch_size": args.rollout_batch,
        "eval_every_n_steps": VALIDATION_EVERY,
        "checkpoint_every": VALIDATION_EVERY,
        "learning_rate": args.learning_rate,
        "max_grad_norm": 1.0,
        "rollout": {
            "max_tokens_to_generate": args.max_response,
            "max_prompt_length": args.max_prompt,
            "kv_cache_size": args.max_prompt + args.max_response,
            "temperature": TEMPERATURE,
        },
        "validation_rollout": {"n": GENERATIONS, "temperature": EVAL_TEMPERATURE},
        "learner": {
            "estimator": tunix_estimator(args),
            "budget": args.budget,
            "skipped_groups": "drop" if args.baseline == "dapo" else "keep",
            "kappa_every": args.kappa_every,
        },
    }


def eval_command(args: argparse.Namespace, checkpoint: Path) -> list[str]:
    """``advbudget eval`` on the exported model: the paper's benchmarks (or the sample)."""
    from advbudget.lab.eval import protocol_command

    return protocol_command(
        checkpoint,
        args.output_dir / "eval",
        n=args.eval_n,
        max_new_tokens=args.eval_max_tokens,
        smoke=args.smoke,
    )


def dry_run(args: argparse.Namespace) -> None:
    config_class, settings = algo_settings(args)
    summary = {
        "model": args.model_path,
        "report": args.report_metric,
        "config": {"class": config_class, **settings},
        "training": training_settings(args),
        "rewards": ["dapo_reward (±1)"],
        "output_dir": str(args.output_dir),
        "eval": eval_command(args, args.output_dir / "final")[3:],
    }
    print(json.dumps(summary, indent=2))


# -- data ------------------------------------------------------------------------------


def read_problems(path: Path, tokenizer: Any, max_prompt: int) -> list[tuple[str, str]]:
    """(prompt, answer) of each line of a tunix-format file (``advbudget data prepare
    --format tunix``): the chat templated with the model's default (Qwen3: thinking on),
    prompts longer than ``max_prompt`` tokens left out (as tunix's CLI does)."""
    problems = []
    with path.open(encoding="utf-8") as file:
        for line in file:
            row = json.loads(line)
            text = tokenizer.apply_chat_template(
                row["prompt"], tokenize=False, add_generation_prompt=True
            )
            if len(tokenizer(text)["input_ids"]) <= max_prompt:
                problems.append((text, str(row["answer"])))
    if not problems:
        raise ValueError(f"--data: no problem of {path} fits in {max_prompt} prompt tokens")
    return problems


def batches(
    problems: list[tuple[str, str]], size: int, seed: int, epochs: int | None = None
) -> Iterator[dict[str, Any]]:
    """Batches of ``size`` problems as tunix reads them (numpy arrays: tunix repeats each
    leaf G times), shuffled anew each epoch; ``epochs=None``: without end."""
    import numpy as np

    rng = np.random.default_rng(seed)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = rng.permutation(len(problems))
        for start in range(0, len(order) - size + 1, size):
            chosen = [problems[i] for i in order[start : start + size]]
            yield {
                "prompts": np.array([prompt for prompt, _ in chosen]),
                "answer": np.array([answer for _, answer in chosen]),
            }
        epoch += 1


def dapo_reward(prompts: Sequence[str], completions: Sequence[str], answer: Any, **_: Any) -> Any:
    """DAPO's rule, ±1 as in verl's math_dapo (advbudget's rule is 1/0)."""
    from advbudget.rewards.tunix import dapo_accuracy

    return [2.0 * s - 1.0 for s in dapo_accuracy(prompts, completions, list(answer))]


def smoke_length_shaping(prompts: Sequence[str], completions: Sequence[str], **kwargs: Any) -> Any:
    """tunix's DAPO overlong shaping with the smoke run's zone (see SMOKE_LENGTH_SHAPING)."""
    from tunix.rl.grpo.dapo_learner import reward_shaping

    kwargs["overlong_buffer"] = SMOKE_LENGTH_SHAPING
    return reward_shaping(prompts, completions, **kwargs)


# -- model -----------------------------------------------------------------------------


def model_files(args: argparse.Namespace) -> Path:
    """The checkpoint folder: a local folder as it is, a hub id downloaded (weights,
    configuration and tokenizer; ``HF_TOKEN`` if the repository needs one)."""
    local = Path(args.model_path)
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            args.model_path,
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"],
        )
    )


def qwen3_config(folder: Path, dtype: Any) -> Any:
    """tunix's Qwen3 ``ModelConfig`` from the checkpoint's own ``config.json``."""
    from tunix.models.qwen3 import model as qwen3

    hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if hf.get("model_type") != "qwen3":
        raise ValueError(
            f"--model: expected a dense Qwen3 checkpoint (model_type qwen3), got "
            f"{hf.get('model_type')!r} in {folder}"
        )
    rope_theta = hf.get("rope_theta") or hf.get("rope_parameters", {}).get("rope_theta")
    return qwen3.ModelConfig(
        num_layers=hf["num_hidden_layers"],
        vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        num_kv_heads=hf["num_key_value_heads"],
        rope_theta=int(rope_theta),
        norm_eps=hf["rms_norm_eps"],
        use_tied_embedding=bool(hf.get("tie_word_embeddings", False)),
        dtype=dtype,
    )


def make_mesh(spec: str) -> Any:
    """A ('fsdp', 'tp') mesh over every local device. Not ``jax.make_mesh``: its Explicit
    axes (jax 0.10) make tunix's Qwen3 embedder fail."""
    import jax
    import numpy as np

    devices = jax.devices()
    fsdp, tp = (int(x) for x in spec.split(",")) if spec else (len(devices), 1)
    if fsdp * tp != len(devices):
        raise ValueError(f"--mesh: expected FSDP*TP = {len(devices)} devices, got {spec!r}")
    return jax.sharding.Mesh(np.array(devices).reshape(fsdp, tp), ("fsdp", "tp"))


def load_model(folder: Path, config: Any, mesh: Any) -> Any:
    """tunix's own loader, float32 weights (the master copy the optimizer updates)."""
    import jax.numpy as jnp
    from tunix.models.qwen3 import params

    with mesh:
        return params.create_model_from_safe_tensors(
            str(folder), config, mesh=mesh, dtype=jnp.float32
        )


def export_hf(model: Any, config: Any, source: Path, output: Path) -> Path:
    """Write ``model`` as a Hugging Face checkpoint in ``output``: the inverse of tunix's
    load (its own key mapping), each tensor in the source checkpoint's name, shape and
    dtype; configuration and tokenizer files copied from ``source``."""
    import jax
    import numpy as np
    from flax import nnx
    from safetensors import safe_open
    from safetensors.flax import save_file
    from tunix.models import safetensors_loader
    from tunix.models.qwen3 import params

    mapping = params._get_key_and_transform_mapping(config)
    state = nnx.state(model, nnx.Param)
    trained = {
        ".".join(map(str, path)): variable.get_value()
        for path, variable in nnx.to_flat_state(state)
    }
    tensors = {}
    for file in sorted(source.glob("*.safetensors")):
        with safe_open(str(file), framework="flax") as reader:
            for name in reader.keys():  # noqa: SIM118 (safe_open is not a mapping)
                key, transform = safetensors_loader.torch_key_to_jax_key(mapping, name)
                value = trained[key]
                like = reader.get_slice(name)
                shape = tuple(like.get_shape())
                if transform is not None:
                    permute, reshape = transform
                    if reshape:
                        value = value.reshape(tuple(shape[i] for i in permute or range(len(shape))))
                    if permute:
                        value = value.transpose(np.argsort(permute))
                tensors[name] = jax.device_get(value).astype(
                    safetensors_loader.to_np_dtype(like.get_dtype())
                )
    output.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: jax.numpy.asarray(v) for k, v in tensors.items()}, str(output / "model.safetensors")
    )
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith((".safetensors", ".index.json")):
            shutil.copy(item, output / item.name)
    return output


# -- training --------------------------------------------------------------------------


def prepare_smoke(output_dir: Path) -> tuple[Path, Path]:
    """The tiny random Qwen3 checkpoint (numpy-written safetensors, its tokenizer) and the
    bundled sample in tunix's format."""
    from advbudget.lab.data import load_problems, sample_path, write_tunix
    from advbudget.lab.tiny import build_tiny_checkpoint

    model = build_tiny_checkpoint(output_dir / "tiny-qwen3")
    (train,) = write_tunix({"train": load_problems(sample_path("dapo"))}, output_dir / "data")
    return model, train.parent


def tunix_algorithm(args: argparse.Namespace) -> tuple[Any, type, list[Any]]:
    """tunix's algorithm config (with our estimator), the learner class and the reward
    functions of this run; the estimator's options set (``configure``)."""
    from tunix.rl.grpo import dapo_learner, grpo_learner

    import advbudget.adapters.tunix as adapter

    estimator = tunix_estimator(args)
    adapter.configure(**({"budget": args.budget} if args.estimator_name == "budget" else {}))
    config_class, fields = algo_settings(args)
    fields = dict(fields)
    reward_fns: list[Any] = [dapo_reward]
    if config_class == "DAPOConfig":
        fields["beta"] = None  # DAPOConfig refuses any other value
        config = dapo_learner.DAPOConfig(**fields, advantage_estimator=estimator)
        config.beta = 0.0  # tunix computes reference log-probs for any beta but 0.0
        return config, adapter.AdvBudgetDAPOLearner, reward_fns
    epsilon_high = fields.pop("epsilon_high", None)
    if config_class == "DrGRPOConfig":
        config = adapter.drgrpo_config(advantage_estimator=estimator, **fields)
    else:
        config = grpo_learner.GRPOConfig(**fields, advantage_estimator=estimator)
    if epsilon_high is not None:  # not a GRPOConfig field; tunix's loss reads it if set
        config.epsilon_high = epsilon_high
    if args.smoke:  # the length shaping of the note on SMOKE_LENGTH_SHAPING
        reward_fns.append(smoke_length_shaping)
    return config, adapter.AdvBudgetGRPOLearner, reward_fns


def build_learner(args: argparse.Namespace, folder: Path, mesh: Any) -> tuple[Any, Any, Any]:
    """The cluster, the learner and the model config."""
    import jax
    import jax.numpy as jnp
    import optax
    import orbax.checkpoint as ocp
    from transformers import AutoTokenizer
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout
    from tunix.sft import metrics_logger

    compute = jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    config = qwen3_config(folder, compute)
    actor = load_model(folder, config, mesh)
    _, algo = algo_settings(args)
    reference = load_model(folder, config, mesh) if algo["beta"] else None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    train = training_settings(args)
    rollout = train["rollout"]
    eos = [tokenizer.eos_token_id]
    train_rollout = base_rollout.RolloutConfig(**rollout, eos_tokens=eos)
    eval_rollout = base_rollout.RolloutConfig(
        **{**rollout, "temperature": train["validation_rollout"]["temperature"]}, eos_tokens=eos
    )
    if not os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "disabled")  # TensorBoard only
    cluster = rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role: mesh for role in rl_cluster_lib.Role},
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.chain(
                    optax.clip_by_global_norm(train["max_grad_norm"]),
                    optax.adamw(train["learning_rate"]),
                ),
                eval_every_n_steps=train["eval_every_n_steps"],
                max_steps=train["max_steps"],
                mini_batch_size=train["mini_batch_size"],
                train_micro_batch_size=train["train_micro_batch_size"],
                rollout_micro_batch_size=train["rollout_micro_batch_size"],
                compute_logps_micro_batch_size=train["compute_logps_micro_batch_size"],
                metrics_logging_options=metrics_logger.MetricsLoggerOptions(
                    log_dir=str(args.output_dir / "tensorboard"),
                    project_name="advbudget",
                    run_name=run_name(args),
                    flush_every_n_steps=1,
                ),
                checkpoint_root_directory=str((args.output_dir / "checkpoints").resolve()),
                checkpointing_options=ocp.CheckpointManagerOptions(
                    save_interval_steps=train["checkpoint_every"], max_to_keep=2
                ),
            ),
            rollout_config={
                rl_cluster_lib.Mode.TRAIN: train_rollout,
                rl_cluster_lib.Mode.EVAL: eval_rollout,
            },
        ),
    )
    options = train["learner"]
    algo_config, learner_class, reward_fns = tunix_algorithm(args)
    learner = learner_class(
        rl_cluster=cluster,
        algo_config=algo_config,
        reward_fns=reward_fns,
        skipped_groups=options["skipped_groups"],
        kappa_every=options["kappa_every"],
    )
    return cluster, learner, config


class MetricsFile:
    """tunix's external metrics logger: each flushed step's advbudget and reward metrics
    (means) as one JSON line of ``<run>/metrics.jsonl``, beside TensorBoard."""

    KEEP = re.compile(r"^(advbudget|rewards)/")

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")

    def __call__(self, buffer: Any) -> None:
        import numpy as np

        row: dict[str, Any] = {"step": buffer.global_steps, "mode": buffer.mode}
        for key, (values, _) in buffer.metrics.items():
            if self.KEEP.match(key):
                row[key] = float(np.mean(np.asarray(values, dtype=np.float64)))
        if len(row) > 2:
            with self.path.open("a", encoding="utf-8") as file:
                file.write(json.dumps(row) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        folder, data = prepare_smoke(args.output_dir)
    else:
        folder, data = model_files(args), args.data
    mesh = make_mesh(args.mesh)
    cluster, learner, config = build_learner(args, folder, mesh)
    cluster.with_external_metrics_logger(MetricsFile(args.output_dir / "metrics.jsonl"))
    tokenizer = cluster.tokenizer.tokenizer  # tunix's adapter around the HF tokenizer
    train = read_problems(data / "train.jsonl", tokenizer, args.max_prompt)
    val_file = data / "val.jsonl"
    val = None
    if val_file.exists() and not args.smoke:
        val = list(batches(read_problems(val_file, tokenizer, args.max_prompt),
                           args.prompts_per_update, args.seed, epochs=1))  # fmt: skip
    learner.train(batches(train, args.prompts_per_update, args.seed), val)
    final = export_hf(cluster.actor_trainer.model, config, folder, args.output_dir / "final")
    print(f"Trained {cluster.global_steps} steps; the model is in {final}")
    command = eval_command(args, final)
    if args.no_eval or args.smoke or not _has("vllm"):
        # tunix's environment has no torch: evaluate where advbudget[eval] and vLLM are
        print("Evaluate it with (advbudget[eval], vLLM):")
        print("  " + " ".join(["advbudget", *command[3:]]))
        return
    subprocess.run(command, check=True)
    print(f"Scores in {args.output_dir / 'eval' / 'scores.json'} (report {args.report_metric})")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
