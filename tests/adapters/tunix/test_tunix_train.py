"""A real tunix GRPO run on CPU: a tiny tunix Qwen3, a locally built tokenizer, 3 steps,
our estimator by name, skipped_groups="drop", the advbudget metrics in tunix's logger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS

pytestmark = [pytest.mark.slow, TUNIX_WARNINGS]

G = 4
STEPS = 3


def _reward(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
    # prompt "q0", "q3", ...: every rollout 1.0 (an all-equal group); the others pay for
    # an even-length completion (a reward gap almost surely).
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        number = int(str(prompt).split()[-1])
        out.append(1.0 if number % 3 == 0 else float(len(completion) % 2 == 0))
    return out


def test_three_grpo_steps_with_reward_budget(tmp_path: Path) -> None:
    import jax
    import optax
    from flax import nnx
    from transformers import AutoTokenizer
    from tunix.models.dummy_model_creator import create_dummy_model
    from tunix.models.qwen3 import model as qwen3
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo.grpo_learner import GRPOConfig
    from tunix.rl.rollout import base_rollout

    import advbudget.adapters.tunix as adapter
    from advbudget.adapters.tunix import _estimators
    from advbudget.tiny import build_tiny_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_tokenizer(tmp_path / "tok"))
    config = qwen3.ModelConfig(
        num_layers=2, vocab_size=len(tokenizer), embed_dim=32, hidden_dim=64, num_heads=4,
        head_dim=8, num_kv_heads=2, rope_theta=1_000_000, norm_eps=1e-6,
        use_tied_embedding=True,
    )  # fmt: skip
    # jax.make_mesh makes Explicit axes in jax 0.10, which the Qwen3 embedder rejects.
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    actor = create_dummy_model(qwen3.Qwen3, config, mesh=mesh, random_seed=0)
    reference = create_dummy_model(qwen3.Qwen3, config, mesh=mesh, random_seed=0)
    before = jax.tree.map(np.array, nnx.state(actor, nnx.Param))

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    cluster = rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role: mesh for role in rl_cluster_lib.Role},
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.adamw(1e-3),
                eval_every_n_steps=1000,
                max_steps=STEPS,
            ),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=16,
                max_prompt_length=32,
                kv_cache_size=64,
                temperature=1.0,
                eos_tokens=[eos],
            ),
        ),
    )
    flushed: list[Any] = []
    cluster.with_external_metrics_logger(flushed.append)

    calls: list[tuple[np.ndarray, np.ndarray]] = []
    estimator = _estimators._FUNCTIONS["reward_budget"]

    def recording(rewards: Any, num_generations: int, **kwargs: Any) -> np.ndarray:
        out = estimator(rewards, num_generations)
        calls.append((np.array(rewards), np.array(out)))
        return out

    from tunix.rl import function_registry

    function_registry.register_advantage_estimator("test_recording_budget")(recording)
    _estimators._FUNCTIONS["test_recording_budget"] = recording
    learner = adapter.AdvBudgetGRPOLearner(
        rl_cluster=cluster,
        algo_config=GRPOConfig(num_generations=G, beta=0.04, advantage_estimator="reward_budget"),
        reward_fns=[_reward],
        skipped_groups="drop",
    )
    learner.algo_config.advantage_estimator = "test_recording_budget"  # to count calls
    # prompts as a numpy batch: tunix repeats each leaf G times (a list would be a pytree)
    data = [{"prompts": np.array([f"q {3 * s}", f"q {3 * s + 1}"])} for s in range(STEPS)]
    learner.train(data)

    assert cluster.global_steps == STEPS
    assert len(calls) == STEPS
    for rewards, advantages in calls:
        assert rewards.shape == advantages.shape == (2 * G,)
        groups, adv = rewards.reshape(-1, G), advantages.reshape(-1, G)
        for group, a in zip(groups, adv, strict=True):
            if np.ptp(group) == 0:
                assert np.all(a == 0.0)
            else:  # budget: the group's advantages sum to 0, the best gets the most
                assert abs(a.sum()) < 1e-6
                assert a[group.argmax()] == a.max() > 0
    # every step holds one all-equal group (q 0, q 3, q 6)
    # the buffers of rollout steps (tunix also flushes buffers holding only other metrics)
    steps = {b.global_steps: b.metrics for b in flushed if "rewards/score/mean" in b.metrics}
    assert len(steps) >= STEPS - 1  # tunix flushes a step's metrics when the next begins
    for metrics in steps.values():
        skipped = np.mean(metrics["advbudget/skipped_group_fraction"][0])
        assert "advbudget/unsolved_group_fraction" in metrics
        assert "advbudget/solved_group_fraction" in metrics
        assert skipped >= 0.5  # one all-equal group of two at least
    after = jax.tree.map(np.array, nnx.state(actor, nnx.Param))
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(a != b)), before, after))
    assert any(changed)
