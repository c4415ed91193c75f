"""tunix's agentic GRPO learner on multi-turn trajectories, for real on CPU, through
``AdvBudgetAgenticGRPOLearner`` with ``reward_budget``: tunix keeps one row per trajectory
(its turns concatenated, the environment's tokens out of the completion mask), a prompt's
group is its G trajectories whatever their number of turns, and what tunix trains on is the
core's advantage of each trajectory's final reward, grouped by prompt, on the model's
tokens of every turn; the ``advbudget/*`` metrics count each trajectory once.

The run: a tiny tunix Qwen3 on one mesh (the rollout shares the actor's weights, so tunix
syncs no weights, agentic_rl_learner.py:201-206 and :1022, and none of the sync deadlock
``test_tunix_agentic.py`` works around can occur; its policy version stays 0), two steps
of two prompts, G = 4, each step scored in tunix's consumer
(``compute_logps_micro_batch_size`` = the prompts of a step): one estimator call and one
set of ``advbudget/*`` metrics a step. The environment answers "go on" for up to three
turns and ends earlier when a response's CRC-32 is divisible by 3; its final reward is the
parity of the CRC-32 of the whole conversation (the model's turns), 0 on the turns before.

Two test-side changes make turns possible with a random model:

- tunix hands each model call the rest of the trajectory's token budget
  (``max_response_length`` minus the tokens so far, trajectory_collect_engine.py:499-503),
  which a random model fills at its first turn: the trajectory then ends as
  ``MAX_CONTEXT_LIMIT_REACHED`` without that turn (:534-537, :473-484). The learner here
  caps each call at ``TURN_TOKENS`` (its ``_model_call``, agentic_rl_learner.py:428), so
  three turns and two replies of the environment fit in the budget;
- tunix's vanilla sampler draws with ``PRNGKey(0)`` on every call when the rollout config
  has no seed (generate/sampler.py:835-836; vanilla_rollout.py:62), so the G trajectories
  of a prompt would be one text. Each call here samples with a seed of its own (a CRC-32 of
  its group, its place in the group and its turn).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS, G, tiny_cluster

pytestmark = [pytest.mark.slow, TUNIX_WARNINGS]

STEPS, PROMPTS = 2, 2  # prompts a step
MAX_TURNS = 3
TURN_TOKENS = 4  # the most tokens one model call generates here
RESPONSE_TOKENS = 64  # a trajectory's budget: 3 turns of 4 tokens and 2 replies of 21


def crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def final_reward(responses: list[str]) -> float:
    """The environment's reward of a whole conversation: the parity of its CRC-32."""
    return float(crc("\n".join(responses)) % 2)


def ends_early(response: str) -> bool:
    return crc(response) % 3 == 0


class _Seed(threading.local):
    value: int | None = None


# each model call's sampling seed, read by the rollout it runs (in the call's thread)
_SEED = _Seed()


def go_on_environment() -> type:
    from tunix.rl.agentic.agents.agent_types import Action
    from tunix.rl.agentic.environments.base_environment import BaseTaskEnv, EnvStepResult

    class GoOn(BaseTaskEnv):
        """Up to ``MAX_TURNS`` turns: "go on" after each response until one ends early;
        the final reward at the end (tunix adds ``final_reward_fn`` to the last turn's)."""

        def __init__(self, single_example: dict[str, Any], **kwargs: Any) -> None:
            super().__init__(task=single_example, max_steps=MAX_TURNS, **kwargs)
            self.responses: list[str] = []

        def _initial_observation(self) -> dict[str, Any]:
            return self.task

        def _step_impl(self, action: Any) -> Any:
            response = action.action if isinstance(action, Action) else action
            self.responses.append(response)
            done = ends_early(response) or self.step_count >= MAX_TURNS
            return EnvStepResult(None if done else "go on", 0.0, done, {})

        def final_reward_fn(self) -> float:
            return final_reward(self.responses)

    return GoOn


def multi_turn_learner(cluster: Any, generated: dict[tuple[int, int], list[Any]]) -> Any:
    """``AdvBudgetAgenticGRPOLearner`` on the "go on" environment, rewarded by it alone
    (no reward function), each model call capped at ``TURN_TOKENS`` and seeded on its own;
    ``generated``: the tokens of each call, by (group id, place in the group)."""
    from tunix.rl.agentic import agentic_grpo_learner
    from tunix.rl.agentic.parser.chat_template_parser import parser

    from advbudget.adapters.tunix import AdvBudgetAgenticGRPOLearner

    class ShortTurns(AdvBudgetAgenticGRPOLearner):
        def _model_call(
            self, chat_lists: Any, env: Any = None, max_generation_steps: Any = None
        ) -> Any:
            key = (env.extra_kwargs["group_id"], env.extra_kwargs["pair_index"])
            _SEED.value = crc(f"{key[0]} {key[1]} {env.step_count}")
            cap = min(max_generation_steps or TURN_TOKENS, TURN_TOKENS)
            output = super()._model_call(chat_lists, env, cap)
            generated[key].append(np.asarray(output.tokens[0]))
            return output

    config = agentic_grpo_learner.GRPOConfig(
        num_generations=G,
        beta=0.04,
        advantage_estimator="reward_budget",
        max_response_length=RESPONSE_TOKENS,  # the rollout's max_tokens_to_generate
        use_rollout_logps=False,
        max_concurrency=4,
    )
    return ShortTurns(
        rl_cluster=cluster,
        algo_config=config,
        chat_parser=parser.QwenChatTemplateParser(cluster.tokenizer),
        env_class=go_on_environment(),
    )


def runs(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(value, start, stop) of each run of equal values in a 1-D mask."""
    edges = [0, *(np.flatnonzero(np.diff(mask)) + 1).tolist(), len(mask)]
    return [(int(mask[a]), a, b) for a, b in itertools.pairwise(edges)]


def test_multi_turn_trajectories_train_as_one_row_with_the_core_advantage(
    tmp_path: Path,
) -> None:
    from advbudget import compute_advantages
    from advbudget.adapters.tunix import _estimators
    from advbudget.metrics import advantage_metric_dict

    cluster = tiny_cluster(
        tmp_path,
        max_steps=STEPS,
        kv_cache_size=256,  # a third turn's prompt pads to 64 tokens
        max_tokens_to_generate=RESPONSE_TOKENS,
        mini_batch_size=PROMPTS,
        train_micro_batch_size=PROMPTS,
        compute_logps_micro_batch_size=PROMPTS,
    )
    flushed: list[Any] = []
    cluster.with_external_metrics_logger(flushed.append)
    generated: dict[tuple[int, int], list[Any]] = defaultdict(list)
    learner = multi_turn_learner(cluster, generated)
    tokenizer = cluster.tokenizer

    rollout = cluster.rollout
    generate = rollout.generate

    def seeded(prompts: Any, config: Any, **kwargs: Any) -> Any:
        return generate(prompts, dataclasses.replace(config, seed=_SEED.value), **kwargs)

    # What tunix scores (the trajectories), what our estimator is handed, what it trains.
    scored: list[list[Any]] = []
    process = learner.tunix_process_results

    def keeping(trajectories: Any, *args: Any) -> Any:
        scored.append(list(trajectories))
        return process(trajectories, *args)

    calls: list[tuple[np.ndarray, int]] = []
    result = _estimators.result

    def recording(name: str, rewards: Any, num_generations: int) -> Any:
        calls.append((np.array(rewards, dtype=np.float64), num_generations))
        return result(name, rewards, num_generations)

    trained: list[Any] = []
    update_actor = cluster.update_actor

    def training(examples: Any, *args: Any, **kwargs: Any) -> Any:
        trained.extend(examples)
        return update_actor(examples, *args, **kwargs)

    rollout.generate = seeded
    learner.tunix_process_results = keeping
    cluster.update_actor = training
    _estimators.result = recording
    data = [{"prompts": np.array([f"q {i}", f"q {i + 1}"])} for i in range(0, 2 * STEPS, 2)]
    try:
        learner.train(data)
    finally:
        _estimators.result = result

    assert cluster.global_steps == STEPS
    # one scoring, one estimator call and one trained example (a single chunk) a step
    assert len(scored) == len(calls) == len(trained) == STEPS
    logged = {b.global_steps: b.metrics for b in flushed if "advbudget/valid_fraction" in b.metrics}
    assert sorted(logged) == list(range(STEPS))

    turns_by_group: dict[int, list[int]] = defaultdict(list)
    for step, (trajectories, (rewards, num_generations), example) in enumerate(
        zip(scored, calls, trained, strict=True)
    ):
        rows = PROMPTS * G
        # one row per trajectory; a group is one prompt's G trajectories, adjacent, in the
        # order tunix's orchestrator finished them (not the prompts' order)
        assert len(trajectories) == rows
        groups = [t.traj["group_id"] for t in trajectories]
        assert groups == [g for g in groups[::G] for _ in range(G)]
        # tunix numbers the prompts of a run
        assert sorted(groups[::G]) == list(range(step * PROMPTS, (step + 1) * PROMPTS))
        assert num_generations == G
        mask = np.asarray(example.completion_mask)
        ids = np.asarray(example.completion_ids)
        advantages = np.asarray(example.advantages)
        assert mask.shape == ids.shape == (rows, RESPONSE_TOKENS)
        assert advantages.shape == (rows,)  # one value a row, over its tokens (algo_core :433)

        turn_rewards, turn_groups, turn_trajectories = [], [], []
        unmatched = {key for key in generated if key[0] in groups}
        for row, item in enumerate(trajectories):
            traj = item.traj
            assert traj["status"] == "SUCCEEDED"
            responses = [
                m["content"] for m in traj["conversation_text"] if m["role"] == "assistant"
            ]
            turns = len(responses)
            turns_by_group[groups[row]].append(turns)
            # the environment's own rule ended it, and its reward is the one tunix scored
            assert not any(ends_early(r) for r in responses[:-1])
            assert ends_early(responses[-1]) or turns == MAX_TURNS
            reward = final_reward(responses)
            assert traj["trajectory_reward"] == reward == rewards[row]
            # the model's tokens of every turn, in order, are the row's mask-1 tokens: the
            # tokens its calls generated (matched to the call sequence of one rollout)
            model_tokens = ids[row][mask[row] == 1]
            (key,) = [
                k
                for k in unmatched
                if k[0] == groups[row]
                and np.array_equal(np.concatenate(generated[k]), model_tokens)
            ]
            unmatched.remove(key)
            assert len(generated[key]) == turns  # one model call a turn
            pieces = runs(mask[row])
            ones = [b - a for value, a, b in pieces if value == 1]
            assert ones == [len(tokens) for tokens in generated[key]]
            # between turns: the environment's reply, out of the mask; padding after
            assert pieces[0][0] == 1
            last = max(i for i, (value, _, _) in enumerate(pieces) if value == 1)
            between = [(a, b) for value, a, b in pieces[:last] if value == 0]
            assert len(between) == turns - 1
            for a, b in between:
                assert "go on" in tokenizer.decode(ids[row][a:b].tolist())
            turn_rewards += [math.nan] * (turns - 1) + [reward]
            turn_groups += [groups[row]] * turns
            turn_trajectories += [row] * turns
        assert not unmatched  # every rollout of these groups trained, once

        # the core on one row per turn, the reward on the last: each trajectory counted once
        versions = np.asarray(example.policy_version)
        want = compute_advantages(
            np.array(turn_rewards),
            "budget",
            group_ids=turn_groups,
            trajectory_ids=turn_trajectories,
            policy_versions=versions[turn_trajectories],
            current_version=learner.policy_version,
        )
        per_turn = np.asarray(want.advantages)
        rows_of = np.array(turn_trajectories)
        want_rows = np.array([per_turn[rows_of == row][0] for row in range(rows)])
        assert np.array_equal(per_turn, want_rows[rows_of])  # a trajectory's turns: one value
        np.testing.assert_allclose(advantages, want_rows.astype(np.float32), rtol=1e-6, atol=0)
        # what the loss multiplies each token's term by: the trajectory's advantage on the
        # model's tokens, 0 on the environment's and the padding
        np.testing.assert_allclose(
            advantages[:, None] * mask,
            np.where(mask == 1, want_rows[:, None], 0.0),
            rtol=1e-6,
            atol=0,
        )
        # the metrics tunix logged for the step: the core's, every trajectory once
        metrics = {
            key: value
            for key, value in advantage_metric_dict(want).items()
            if not math.isnan(value)
        }
        ours = {
            key: np.mean(v[0]) for key, v in logged[step].items() if key.startswith("advbudget/")
        }
        assert set(ours) == set(metrics)
        for key, value in metrics.items():
            assert ours[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key

    # multi-turn for real: one turn for some trajectories, up to three for others, and
    # groups that mix them (a group is G trajectories, not G turns)
    turns_seen = [turns for group in turns_by_group.values() for turns in group]
    assert min(turns_seen) == 1
    assert max(turns_seen) == MAX_TURNS
    assert any(len(set(group)) > 1 for group in turns_by_group.values())
