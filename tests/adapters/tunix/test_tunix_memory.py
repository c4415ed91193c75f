"""An estimator with memory (spo, rae) in tunix's real GRPO loop on CPU: the learner lends
each row's prompt to the estimator tunix calls, the state is updated by training steps,
kept in the custom metadata of tunix's checkpoints, and a resumed run scores its next step
against the memory an uninterrupted run would hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS, G, every_third_all_equal, tiny_cluster

pytestmark = [pytest.mark.slow, TUNIX_WARNINGS]


def _learner(cluster: Any, name: str, calls: list[dict[str, Any]]) -> Any:
    """Our learner with estimator ``name``, each call recorded (prompts, rewards,
    advantages) through a recording estimator registered with tunix."""
    from tunix.rl import function_registry
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    import advbudget.adapters.tunix as adapter
    from advbudget.adapters import _features
    from advbudget.adapters.tunix import _estimators

    estimator = _estimators.estimator_function(name)
    recorder = f"test_recording_{name}"

    def recording(rewards: Any, num_generations: int, **kwargs: Any) -> np.ndarray:
        out = estimator(rewards, num_generations)
        lent = _features.lent_prompts()
        assert lent is not None
        calls.append(
            {"prompts": list(lent), "rewards": np.array(rewards), "advantages": np.array(out)}
        )
        return out

    function_registry.register_advantage_estimator(recorder)(recording)
    learner = adapter.AdvBudgetGRPOLearner(
        rl_cluster=cluster,
        algo_config=GRPOConfig(num_generations=G, beta=0.04, advantage_estimator=name),
        reward_fns=[every_third_all_equal],
    )
    learner.algo_config.advantage_estimator = recorder
    return learner


@pytest.mark.parametrize("name", ["advbudget_spo", "advbudget_rae"])
def test_memory_through_the_loop_and_a_resume(tmp_path: Path, name: str) -> None:
    import orbax.checkpoint as ocp

    from advbudget import EstimatorState, compute_advantages
    from advbudget.adapters.tunix._learner import MEMORY_METADATA

    core = name.removeprefix("advbudget_")
    checkpoints = {
        "checkpoint_root_directory": str(tmp_path / "checkpoints"),
        "checkpointing_options": ocp.CheckpointManagerOptions(save_interval_steps=1),
    }
    # The same two prompts every step: each step reads what the last one remembered.
    data = [{"prompts": np.array(["q 1", "q 2"])}] * 3
    calls: list[dict[str, Any]] = []
    learner = _learner(tiny_cluster(tmp_path, max_steps=2, **checkpoints), name, calls)
    learner.train(data[:2])
    assert len(calls) == 2
    assert calls[0]["prompts"] == ["q 1"] * G + ["q 2"] * G

    resumed_cluster = tiny_cluster(tmp_path, max_steps=3, **checkpoints)
    assert MEMORY_METADATA in resumed_cluster.actor_trainer._restored_custom_metadata
    resumed = _learner(resumed_cluster, name, calls)
    assert resumed.advbudget_memory.estimator_state.state_dict() == (
        learner.advbudget_memory.estimator_state.state_dict()
    )
    resumed.train(data)
    assert len(calls) == 3

    state = EstimatorState()  # an uninterrupted run's memory, fed the same steps
    for call in calls:
        fresh = compute_advantages(
            call["rewards"], core, group_size=G, prompt_ids=call["prompts"], state=EstimatorState()
        ).advantages
        expected = compute_advantages(
            call["rewards"], core, group_size=G, prompt_ids=call["prompts"], state=state
        ).advantages
        np.testing.assert_allclose(call["advantages"], expected, rtol=1e-6, atol=1e-6)
    # Without the memory the last step would have been scored against the prior.
    assert not np.allclose(calls[-1]["advantages"], fresh, atol=1e-4)
    assert resumed.advbudget_memory.estimator_state.state_dict() == state.state_dict()


def test_rho_kl_is_refused_in_tunix_with_the_reason() -> None:
    from advbudget.adapters.tunix import configure

    with pytest.raises(ValueError, match=r"^rho: 'kl' is not available here: the adapter"):
        configure(rho="kl")
    assert configure(rho=0.9) == {"rho": 0.9}
    configure()
