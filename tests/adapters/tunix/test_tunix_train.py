"""A real tunix GRPO run on CPU: a tiny tunix Qwen3, a locally built tokenizer, 3 steps,
our estimator by name, skipped_groups="drop", the advbudget metrics and the per-prompt
ledger in tunix's logger, the ledger in tunix's checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS, G, actor_params, every_third_all_equal, tiny_cluster

pytestmark = [pytest.mark.slow, TUNIX_WARNINGS]

STEPS = 3


def test_three_grpo_steps_with_reward_budget(tmp_path: Path) -> None:
    import jax
    import orbax.checkpoint as ocp
    from tunix.rl import function_registry
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    import advbudget.adapters.tunix as adapter
    from advbudget.adapters.tunix import _estimators
    from advbudget.adapters.tunix._learner import MEMORY_METADATA

    checkpoints = {
        "checkpoint_root_directory": str(tmp_path / "checkpoints"),
        "checkpointing_options": ocp.CheckpointManagerOptions(save_interval_steps=1),
    }
    cluster = tiny_cluster(tmp_path, max_steps=STEPS, **checkpoints)
    before = actor_params(cluster)
    flushed: list[Any] = []
    cluster.with_external_metrics_logger(flushed.append)

    calls: list[tuple[np.ndarray, np.ndarray]] = []
    estimator = _estimators._FUNCTIONS["reward_budget"]

    def recording(rewards: Any, num_generations: int, **kwargs: Any) -> np.ndarray:
        out = estimator(rewards, num_generations)
        calls.append((np.array(rewards), np.array(out)))
        return out

    function_registry.register_advantage_estimator("test_recording_budget")(recording)
    _estimators._FUNCTIONS["test_recording_budget"] = recording
    learner = adapter.AdvBudgetGRPOLearner(
        rl_cluster=cluster,
        algo_config=GRPOConfig(num_generations=G, beta=0.04, advantage_estimator="reward_budget"),
        reward_fns=[every_third_all_equal],
        skipped_groups="drop",
    )
    learner.algo_config.advantage_estimator = "test_recording_budget"  # to count calls
    # every step holds one all-equal group (q 0, q 3); the last step repeats the first
    data = [{"prompts": np.array(prompts)} for prompts in (["q 0", "q 1"], ["q 3", "q 4"])]
    learner.train(data + data[:1])

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
    # the buffers of rollout steps (tunix also flushes buffers holding only other metrics)
    steps = {b.global_steps: b.metrics for b in flushed if "rewards/score/mean" in b.metrics}
    assert sorted(steps) == list(range(STEPS))  # the last one at close()
    for metrics in steps.values():
        skipped = np.mean(metrics["advbudget/skipped_group_fraction"][0])
        assert "advbudget/unsolved_group_fraction" in metrics
        assert "advbudget/solved_group_fraction" in metrics
        assert skipped >= 0.5  # one all-equal group of two at least
        assert not any("kappa_eff" in key for key in metrics)  # default: the 10th update
    # the ledger: nothing recurs before the last step, which repeats "q 0" (all 1.0: always
    # solved) and "q 1"
    assert steps[0]["advbudget/recurring_prompts"][0] == [0.0]
    assert "advbudget/never_solved_prompt_fraction" not in steps[0]  # NaN: left out
    last = {key: value[0][-1] for key, value in steps[STEPS - 1].items()}
    assert last["advbudget/recurring_prompts"] == 2.0
    assert last["advbudget/always_solved_prompt_fraction"] in (0.5, 1.0)
    assert last["advbudget/never_solved_prompt_fraction"] in (0.0, 0.5)
    assert learner.prompt_ledger is not None
    assert learner.prompt_ledger.metrics()["recurring_prompts"] == 2.0

    after = actor_params(cluster)
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(a != b)), before, after))
    assert any(changed)

    # A resumed run: tunix restores the last checkpoint and its metadata, the ledger with it
    resumed = tiny_cluster(tmp_path, max_steps=STEPS + 1, **checkpoints)
    assert resumed.actor_trainer.restored_global_step() == STEPS
    assert MEMORY_METADATA in resumed.actor_trainer._restored_custom_metadata
    again = adapter.AdvBudgetGRPOLearner(
        rl_cluster=resumed,
        algo_config=GRPOConfig(num_generations=G, beta=0.04, advantage_estimator="reward_budget"),
        reward_fns=[every_third_all_equal],
    )
    assert again.prompt_ledger is not None
    assert again.prompt_ledger.state_dict() == learner.prompt_ledger.state_dict()
