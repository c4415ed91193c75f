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


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_spo_kl_rho_through_the_loop(tmp_path: Path, num_iterations: int) -> None:
    """rho="kl": step 1 meets its 2 prompts first (ρ 0.96); at steps 2 and 3 each prompt's
    last response is scored again by the policy and its drift sets ρ. The step's log-probs
    are tunix's old ones (num_iterations 2) or the adapter's forward (1, tunix computes
    none). Every step's advantages replay through the core with the measured ρ (and
    would not with spo's default 0.875)."""
    from advbudget.adapters.tunix import configure
    from advbudget.testing import assert_memory_replays

    configure(rho="kl")
    try:
        calls: list[dict[str, Any]] = []
        cluster = tiny_cluster(tmp_path, max_steps=3 * num_iterations)  # a step an update
        learner = _learner(cluster, "advbudget_spo", calls)
        learner.algo_config.num_iterations = num_iterations
        kept = learner.advbudget_memory.last_responses
        measured: list[Any] = []
        rho = kept.rho

        def recording(*args: Any, **kwargs: Any) -> Any:
            out = rho(*args, **kwargs)
            measured.append(out)
            return out

        kept.rho = recording  # type: ignore[method-assign]
        learner.train([{"prompts": np.array(["q 1", "q 2"])}] * 3)
    finally:
        configure()
    assert len(calls) == len(measured) == 3
    for step, ((values, metrics), call) in enumerate(zip(measured, calls, strict=True), 1):
        call["prompt_ids"], call["rho"] = call["prompts"], values.tolist()
        assert metrics["advbudget/spo_first_seen_fraction"] == (1.0 if step == 1 else 0.0)
        if step == 1:
            assert set(values.tolist()) == {0.96}
        else:
            # The policy moved (an update after every step), a little: adamw at 1e-3 moves
            # a token's log-prob by ~1e-3, which keeps ρ at its 0.96 ceiling; a response
            # compared with other tokens than its own would drift by nats.
            assert 0 < metrics["advbudget/spo_drift_mean"] < 0.1, metrics
            assert metrics["advbudget/spo_rho_mean"] == pytest.approx(values.mean())
            assert np.all((values >= 0.875) & (values <= 0.96)), values
    assert_memory_replays(calls, "spo")
    with pytest.raises(AssertionError, match="not the advantages of an uninterrupted run"):
        assert_memory_replays([{**call, "rho": [0.875] * G * 2} for call in calls], "spo")


def test_rho_kl_is_refused_by_the_agentic_learner_with_the_reason() -> None:
    from advbudget.adapters.tunix import AdvBudgetAgenticGRPOLearner, configure

    assert configure(rho="kl") == {"rho": "kl"}
    try:
        with pytest.raises(
            ValueError, match=r"^rho: 'kl' is not available here: tunix's agentic learner"
        ):
            AdvBudgetAgenticGRPOLearner(rl_cluster=None, algo_config=None)
    finally:
        configure()
    assert configure(rho=0.9) == {"rho": 0.9}
    configure()


@pytest.mark.parametrize(
    ("estimator", "message"),
    [
        ("advbudget_rae", r"^rho: 'kl' is spo's KL-adaptive forgetting; estimator 'rae' takes"),
        ("grpo", r"^rho: 'kl' is spo's KL-adaptive forgetting; tunix's own estimator takes"),
    ],
)
def test_rho_kl_needs_spo(tmp_path: Path, estimator: str, message: str) -> None:
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    from advbudget.adapters.tunix import AdvBudgetGRPOLearner, configure

    configure(rho="kl")
    try:
        with pytest.raises(ValueError, match=message):
            AdvBudgetGRPOLearner(
                rl_cluster=tiny_cluster(tmp_path, max_steps=1),
                algo_config=GRPOConfig(num_generations=G, advantage_estimator=estimator),
                reward_fns=[every_third_all_equal],
            )
    finally:
        configure()
