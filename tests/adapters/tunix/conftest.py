"""Shared pieces of the tunix adapter tests (real tunix 0.1.7, jax on CPU): the warning
filter, and a tiny GRPO cluster (a 2-layer tunix Qwen3 of tunix's own random initialiser,
a byte-level BPE tokenizer built locally) for the real training runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

# tunix and its stack (flax, orbax, grain) warn at import and on CPU about optional parts.
TUNIX_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)

#: Rollouts per prompt in the training runs.
G = 4


def every_third_all_equal(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
    """A tunix reward: prompt "q 0", "q 3", ...: every rollout 1.0 (an all-equal group);
    the others pay for an even-length completion (a reward gap almost surely)."""
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        number = int(str(prompt).split()[-1])
        out.append(1.0 if number % 3 == 0 else float(len(completion) % 2 == 0))
    return out


def prompt_batches(steps: int, per_step: int) -> list[dict[str, Any]]:
    """``steps`` batches of prompts "q 0", "q 1", ... as tunix reads them: a numpy array
    (tunix repeats each leaf G times; a list would be a pytree of strings)."""
    return [
        {"prompts": np.array([f"q {per_step * s + i}" for i in range(per_step)])}
        for s in range(steps)
    ]


def tiny_cluster(
    tmp_path: Path,
    *,
    max_steps: int,
    temperature: float = 1.0,
    own_rollout_mesh: bool = False,
    kv_cache_size: int = 64,
    max_tokens_to_generate: int = 16,
    **training: Any,
) -> Any:
    """A tunix ``RLCluster`` on the first CPU device with a tiny Qwen3 actor and
    reference (the same random weights), ``optax.adamw(1e-3)``, 16-token rollouts
    (``max_tokens_to_generate``).

    ``own_rollout_mesh``: the rollout gets a mesh of its own (the same device under a
    third axis name), so tunix copies the actor for rollout, syncs it after each global
    step and prepares the next micro-batch while one trains (async rollout).
    ``kv_cache_size``: the rollout's cache (prompt and completion tokens).
    ``max_tokens_to_generate``: the rollout's token budget (the agentic learner's
    ``max_response_length``: a whole multi-turn trajectory's).
    ``training``: further ``RLTrainingConfig`` fields (batch sizes, checkpoints).
    """
    import jax
    import optax
    from transformers import AutoTokenizer
    from tunix.models.dummy_model_creator import create_dummy_model
    from tunix.models.qwen3 import model as qwen3
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout

    from advbudget.lab.tiny import build_tiny_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_tokenizer(tmp_path / "tok"))
    config = qwen3.ModelConfig(
        num_layers=2, vocab_size=len(tokenizer), embed_dim=32, hidden_dim=64, num_heads=4,
        head_dim=8, num_kv_heads=2, rope_theta=1_000_000, norm_eps=1e-6,
        use_tied_embedding=True,
    )  # fmt: skip
    device = np.array(jax.devices()[:1])
    # jax.make_mesh makes Explicit axes in jax 0.10, which the Qwen3 embedder rejects.
    mesh = jax.sharding.Mesh(device.reshape(1, 1), ("fsdp", "tp"))
    role_to_mesh = {role: mesh for role in rl_cluster_lib.Role}
    if own_rollout_mesh:
        rollout_mesh = jax.sharding.Mesh(device.reshape(1, 1, 1), ("fsdp", "tp", "rollout"))
        role_to_mesh[rl_cluster_lib.Role.ROLLOUT] = rollout_mesh
    actor = create_dummy_model(qwen3.Qwen3, config, mesh=mesh, random_seed=0)
    reference = create_dummy_model(qwen3.Qwen3, config, mesh=mesh, random_seed=0)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh=role_to_mesh,
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.adamw(1e-3),
                eval_every_n_steps=1000,
                max_steps=max_steps,
                **training,
            ),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=max_tokens_to_generate,
                max_prompt_length=32,
                kv_cache_size=kv_cache_size,
                temperature=temperature,
                eos_tokens=[eos],
            ),
        ),
    )


def actor_params(cluster: Any) -> Any:
    """A host copy of the actor's parameters (a pytree of numpy arrays)."""
    import jax
    from flax import nnx

    return jax.tree.map(np.array, nnx.state(cluster.actor_trainer.model, nnx.Param))
