r"""TRL: reward functions for ``GRPOTrainer(reward_funcs=[...])``.

TRL calls each reward function with ``completions`` (strings, or chat messages
``[{"role": "assistant", "content": ...}]`` for conversational data) and every dataset
column as a keyword list; these read the ``solution`` column::

    from advbudget.adapters.trl.rewards import dapo_accuracy, overlong_penalty_reward
    trainer = GRPOTrainer(..., reward_funcs=[dapo_accuracy,
                                             overlong_penalty_reward(4096, 512)])

The accuracies are TRL-style: 1.0 right, 0.0 wrong, ``None`` (skipped by TRL) when the
sample's ground truth is missing or empty. Ground truths that are ints are graded as their
decimal string. The overlong penalty is a reward function of its own, on the
``completion_ids`` token counts TRL passes; TRL adds the rewards up.

Faults: a grader call that raises or does not return within ``ADVBUDGET_REWARD_TIMEOUT_S``
seconds (default 10; a thread join, so it works off the main thread) scores ``None``, a
NaN reward for TRL (``AdvBudgetGRPOTrainer``'s ``nan_policy`` applies; TRL's own trainer
leaves it out of the group statistics). Each call logs, through TRL's ``log_metric``,
``advbudget/reward_failures`` (samples that failed, timeouts included) and
``advbudget/reward_timeouts``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from advbudget.rewards._checks import as_ground_truth, describe
from advbudget.rewards._grade import grade
from advbudget.rewards._guard import guarded, reward_timeout
from advbudget.rewards._overlong import overlong_penalty

__all__ = [
    "REWARD_FAILURES",
    "REWARD_TIMEOUTS",
    "dapo_accuracy",
    "math_verify_accuracy",
    "overlong_penalty_reward",
]

REWARD_FAILURES = "advbudget/reward_failures"
REWARD_TIMEOUTS = "advbudget/reward_timeouts"


def dapo_accuracy(
    completions: Sequence[Any], solution: Sequence[Any], **kwargs: Any
) -> list[float | None]:
    r"""DAPO's rule as a TRL reward: 1.0 if the last ``Answer:`` line is right, else 0.0.

    Args:
        completions: one completion per sample: a str, or a list of chat messages (the
            last message's ``content`` is graded).
        solution: the dataset's ``solution`` column: one ground truth per sample.
        **kwargs: the other columns and trainer arguments TRL passes (not used).

    Returns:
        1.0, 0.0, or None where the ground truth is None or empty.

    Raises:
        ValueError: ``completions`` and ``solution`` differ in length.
        TypeError: a completion or ground truth has the wrong type.

    Examples:
        >>> from advbudget.adapters.trl.rewards import dapo_accuracy
        >>> completions = [[{"role": "assistant", "content": "...\nAnswer: 34"}],
        ...                [{"role": "assistant", "content": "...\nAnswer: 34."}]]
        >>> dapo_accuracy(completions, solution=["34", 34])
        [1.0, 0.0]
        >>> dapo_accuracy(["Answer: 34", "Answer: 34"], solution=["34", None])
        [1.0, None]
    """
    return _accuracies(completions, solution, "dapo", kwargs)


def math_verify_accuracy(
    completions: Sequence[Any], solution: Sequence[Any], **kwargs: Any
) -> list[float | None]:
    r"""math-verify as a TRL reward: 1.0 if the answer equals the ground truth, else 0.0.

    Args and returns as :func:`dapo_accuracy`; graded by
    :func:`advbudget.rewards.math_verify_reward` (a ground truth math-verify cannot parse
    scores 0.0).

    Examples:
        >>> from advbudget.adapters.trl.rewards import math_verify_accuracy
        >>> math_verify_accuracy(["Answer: 34.", "so it is 1/2", "Answer: 7"],
        ...                      solution=["34", r"\frac{1}{2}", ""])
        [1.0, 1.0, None]
    """
    return _accuracies(completions, solution, "math_verify", kwargs)


class _OverlongPenalty:
    # A class rather than a closure so that the reward function pickles (TRL can send
    # reward functions to a rollout worker process). TRL logs it under __name__.
    __name__ = "overlong_penalty"

    def __init__(self, max_length: int, buffer: int, factor: float) -> None:
        overlong_penalty(0, max_length, buffer, factor)  # check the settings now
        self.max_length = max_length
        self.buffer = buffer
        self.factor = factor

    def __call__(self, completion_ids: Sequence[Sequence[int]], **kwargs: Any) -> list[float]:
        return [
            overlong_penalty(len(ids), self.max_length, self.buffer, self.factor)
            for ids in completion_ids
        ]

    def __repr__(self) -> str:
        return (
            f"overlong_penalty_reward(max_length={self.max_length}, buffer={self.buffer}, "
            f"factor={self.factor})"
        )


def overlong_penalty_reward(max_length: int, buffer: int, factor: float = 1.0) -> _OverlongPenalty:
    """DAPO's overlong penalty as a TRL reward function, on the completions' token counts.

    Use TRL's ``max_completion_length`` as ``max_length``. The function reads the
    ``completion_ids`` TRL passes and returns
    :func:`advbudget.rewards.overlong_penalty` of each length.

    Args:
        max_length: the generation budget in tokens.
        buffer: the soft zone before it, ``0 < buffer <= max_length``.
        factor: the penalty at ``max_length``.

    Returns:
        A reward function ``(completion_ids, **kwargs) -> list[float]``.

    Raises:
        TypeError, ValueError: as :func:`advbudget.rewards.overlong_penalty`, at once.

    Examples:
        >>> from advbudget.adapters.trl.rewards import overlong_penalty_reward
        >>> penalty = overlong_penalty_reward(max_length=8, buffer=4)
        >>> penalty(completion_ids=[[1, 2, 3], [1] * 6, [1] * 8])
        [0.0, -0.5, -1.0]
    """
    return _OverlongPenalty(max_length, buffer, factor)


def _accuracies(
    completions: Sequence[Any], solution: Sequence[Any], method: str, kwargs: dict[str, Any]
) -> list[float | None]:
    if len(completions) != len(solution):
        raise ValueError(
            f"solution: expected one ground truth per completion ({len(completions)}), "
            f"got {len(solution)}"
        )
    rewards: list[float | None] = []
    timeout = reward_timeout()
    failures = timeouts = 0
    for i, (completion, truth) in enumerate(zip(completions, solution, strict=True)):
        truth = as_ground_truth(truth)
        if truth is None or (isinstance(truth, str) and not truth.strip()):
            rewards.append(None)
            continue
        if not isinstance(truth, str):
            raise TypeError(f"solution[{i}]: expected a str or an int, got {describe(truth)}")
        response = _completion_text(completion, f"completions[{i}]")
        # Faults: a grader that raises or overruns scores None (a NaN reward for TRL, so
        # the trainer's nan_policy applies) and is counted; the step goes on.
        outcome = guarded(
            functools.partial(grade, response, truth, method), timeout, f"trl {method} sample {i}"
        )
        if outcome.failure is not None:
            failures += 1
            timeouts += outcome.failure == "timeout"
            rewards.append(None)
            continue
        rewards.append(1.0 if outcome.value.correct else 0.0)
    log_metric = kwargs.get("log_metric")  # TRL >= 1.x: averaged into its logs
    if callable(log_metric):
        log_metric(REWARD_FAILURES, float(failures))
        log_metric(REWARD_TIMEOUTS, float(timeouts))
    return rewards


def _completion_text(completion: Any, name: str) -> str:
    """The text of a completion: a str, or the content of its last chat message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        if isinstance(content, str):
            return content
        if content is None:  # e.g. a message that only calls a tool
            return ""
        if isinstance(content, list):  # multimodal: [{"type": "text", "text": ...}, ...]
            texts = [part.get("text") for part in content if isinstance(part, dict)]
            return "".join(text for text in texts if isinstance(text, str))
    raise TypeError(
        f"{name}: expected a str or a list of chat messages with a 'content', "
        f"got {describe(completion)}"
    )
