"""tunix's agentic GRPO learner, for real on CPU, through ``AdvBudgetAgenticGRPOLearner``:
each trajectory's policy version reaches our estimator with the learner's current one, the
staleness rule acts on them, stale rows leave the loss under ``skipped_groups="drop"``, and
the staleness metrics reach tunix's logger.

The run: a tiny tunix Qwen3 with a rollout model of its own (tunix syncs the weights after
each step and raises its policy version), rollouts one step ahead of training
(``off_policy_steps=1``), scored in tunix's consumer as it takes a micro-batch to train
(``compute_logps_micro_batch_size > 1``), so a batch generated before a weight sync is
scored after it. Each update waits until every trajectory tunix queued so far is finished:
step 2's batch is then sampled by version 0 and scored at version 1 whatever the machine's
speed.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS, G, tiny_cluster

pytestmark = [pytest.mark.slow, TUNIX_WARNINGS]

STEPS, PROMPTS = 3, 2  # prompts a step


def alternating(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
    """A reward that spreads every group (the tiny model's completions may be empty)."""
    return [float(i % 2) for i in range(len(completions))]


def agentic_learner(cluster: Any, **options: Any) -> Any:
    from tunix.rl.agentic import agentic_grpo_learner
    from tunix.rl.agentic.parser.chat_template_parser import parser

    from advbudget.adapters.tunix import AdvBudgetAgenticGRPOLearner

    config = agentic_grpo_learner.GRPOConfig(
        num_generations=G,
        beta=0.04,
        advantage_estimator=options.pop("advantage_estimator", "reward_budget"),
        max_response_length=16,  # the rollout's max_tokens_to_generate (tunix checks)
        use_rollout_logps=False,
        max_concurrency=4,
        off_policy_steps=1,
    )
    return AdvBudgetAgenticGRPOLearner(
        rl_cluster=cluster,
        algo_config=config,
        reward_fns=[alternating],
        chat_parser=parser.QwenChatTemplateParser(cluster.tokenizer),
        **options,
    )


def test_stale_trajectories_leave_the_loss_in_the_real_agentic_loop(tmp_path: Path) -> None:
    from advbudget import compute_advantages
    from advbudget.adapters.tunix import _estimators

    cluster = tiny_cluster(
        tmp_path,
        max_steps=STEPS,
        own_rollout_mesh=True,
        mini_batch_size=PROMPTS,
        train_micro_batch_size=PROMPTS,
        compute_logps_micro_batch_size=PROMPTS,
    )
    flushed: list[Any] = []
    cluster.with_external_metrics_logger(flushed.append)
    learner = agentic_learner(
        cluster, max_staleness=0, stale_rollouts="baseline_only", skipped_groups="drop"
    )

    data = [{"prompts": np.array([f"q {i}", f"q {i + 1}"])} for i in range(0, 8, 2)]
    # What our estimator is lent, and what tunix then trains on.
    calls: list[dict[str, Any]] = []
    result = _estimators.result

    def recording(name: str, rewards: Any, num_generations: int) -> Any:
        scored = result(name, rewards, num_generations)
        calls.append(
            {
                "lent": _estimators.lent_versions(np.size(rewards)),
                "rewards": np.array(rewards, dtype=np.float64),
                "advantages": np.asarray(scored.advantages),
                "valid": np.asarray(scored.valid),
            }
        )
        return scored

    # Each update waits until every trajectory tunix has queued so far is finished (its
    # rollout lock released): step 2's batch is then sampled before the first sync, and
    # no weight sync waits on a rollout in flight, where tunix 0.1.7 can deadlock (a new
    # rollout blocks its event loop in RolloutSyncLock.acquire_rollout, called inside a
    # coroutine, rollout_orchestrator.py:164, while the sync waits for the rollouts that
    # loop runs).
    trained: list[Any] = []
    finished = threading.Semaphore(0)
    lock = learner._rollout_sync_lock
    release, update_actor = lock.release_rollout, cluster.update_actor
    total = len(data) * PROMPTS * G

    def counted_release() -> None:
        release()
        finished.release()

    waited = [0]

    def gated_update(examples: Any, *args: Any, **kwargs: Any) -> Any:
        queued = min((len(trained) + 2) * PROMPTS * G, total)  # off_policy_steps + 1 ahead
        while waited[0] < queued:
            assert finished.acquire(timeout=300), "tunix did not finish its rollouts"
            waited[0] += 1
        trained.extend(examples)
        return update_actor(examples, *args, **kwargs)

    scored_groups: list[list[Any]] = []
    process = learner.tunix_process_results

    def keeping(trajectories: Any, *args: Any) -> Any:
        scored_groups.append(list(trajectories))
        return process(trajectories, *args)

    learner.tunix_process_results = keeping
    lock.release_rollout = counted_release
    cluster.update_actor = gated_update
    _estimators.result = recording
    try:
        learner.train(data)
    finally:
        _estimators.result = result

    assert cluster.global_steps == STEPS
    assert len(calls) == len(trained) == STEPS  # one call a micro-batch (consumer scoring)
    lags = []
    for call, example in zip(calls, trained, strict=True):
        lent = call["lent"]
        versions = np.asarray(lent["policy_versions"])
        assert versions.tolist() == np.asarray(example.policy_version).tolist()  # tunix's stamps
        assert (lent["max_staleness"], lent["stale_rollouts"]) == (0, "baseline_only")
        lag = lent["current_version"] - versions
        lags.append(lag)
        # the rule's advantages, float64 from the core on the lent versions
        want = compute_advantages(
            call["rewards"], "budget", group_size=G, **{k: lent[k] for k in lent}
        )
        np.testing.assert_allclose(call["advantages"], want.advantages, rtol=0, atol=1e-12)
        stale = lag > 0
        assert np.all(call["advantages"][stale] == 0)
        assert not np.any(call["valid"][stale])
        np.testing.assert_array_equal(
            np.asarray(example.advantages), call["advantages"].astype(np.float32)
        )
    assert lags[0].tolist() == [0] * PROMPTS * G  # step 1: the first weights
    assert lags[1].tolist() == [1] * PROMPTS * G  # step 2: sampled before the first sync
    # tunix's logger: the staleness of each step's trajectories
    logged = {b.global_steps: b.metrics for b in flushed if "advbudget/stale_fraction" in b.metrics}
    assert sorted(logged) == list(range(STEPS))
    for step, lag in enumerate(lags):
        metrics = logged[step]
        assert np.mean(metrics["advbudget/stale_fraction"][0]) == np.mean(lag > 0)
        assert np.mean(metrics["advbudget/staleness_max"][0]) == lag.max()
        assert np.mean(metrics["advbudget/valid_fraction"][0]) == np.mean(lag == 0)

    # The random model's completions never end before tunix's token budget, and tunix
    # keeps no such response (trajectory_collect_engine.py:535-536): the rows trained
    # above had no token. Step 1's trajectories again, each given three completion tokens
    # and its group's first rollout a newer version, through tunix's own scoring: the
    # stale rows lose their tokens, the fresh ones keep them.
    first = scored_groups[0]
    learner.policy_version = 1
    remade = [
        dataclasses.replace(
            item,
            traj={
                **item.traj,
                "conversation_tokens": np.array([5, 6, 7], dtype=np.int32),
                "conversation_masks": np.ones(3, dtype=np.int32),
                "policy_version": 1 if row % G == 0 else 0,
            },
        )
        for row, item in enumerate(first)
    ]
    (example,) = learner.process_results(remade, None, 0)
    tokens = np.asarray(example.completion_mask).sum(axis=1)
    fresh = np.arange(len(remade)) % G == 0
    assert tokens[fresh].tolist() == [3] * PROMPTS
    assert tokens[~fresh].tolist() == [0] * (len(remade) - PROMPTS)


def test_the_learners_check_the_staleness_options(tmp_path: Path) -> None:
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    from advbudget.adapters.tunix import AdvBudgetAgenticGRPOLearner, AdvBudgetGRPOLearner

    # read before tunix sees an argument: no cluster needed to refuse them
    with pytest.raises(ValueError, match=r"^stale_rollouts: 'drop' acts on stale rollouts"):
        AdvBudgetAgenticGRPOLearner(rl_cluster=None, algo_config=None, stale_rollouts="drop")
    with pytest.raises(ValueError, match=r"^max_staleness: expected an int >= 0"):
        AdvBudgetAgenticGRPOLearner(rl_cluster=None, algo_config=None, max_staleness=-1)
    with pytest.raises(
        ValueError, match=r"^max_staleness: not available here: tunix's GRPOLearner stamps no"
    ):
        AdvBudgetGRPOLearner(rl_cluster=None, algo_config=GRPOConfig(), max_staleness=1)
    # a rule needs our estimator to act
    cluster = tiny_cluster(tmp_path, max_steps=1, own_rollout_mesh=True)
    with pytest.raises(ValueError, match=r"^stale_rollouts: 'drop' needs an advbudget estimator"):
        agentic_learner(cluster, advantage_estimator="grpo", max_staleness=1, stale_rollouts="drop")
