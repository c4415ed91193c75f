"""The policy-class ceiling: the best held-out accuracy a linear-softmax policy reaches.

The oracle (the best strategy on every prompt) is out of reach of the policy class: the
features of two prompts of different types overlap, and the per-prompt noise blurs the
types. The ceiling is what the class itself can do, found by maximising the exact
expected accuracy ``mean_x Σ_s π(s|x) q(s, x)`` over ``W`` directly, with the true
success probabilities (no sampling, no advantage estimator), on the training pool (the
prompts RL learns from), and measured on the held-out prompts. "Gap to the ceiling"
measures what RL left on the table.

Maximising on the held-out prompts themselves gives a higher number (the *held-out
bound*: the weights then also fit those prompts' own feature noise). No policy can beat
the bound on those prompts; the lab uses it only to set the escape level.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ._task import Float, PromptSet, Task, TaskConfig, exact_metrics, log_policy, make_task

CEILING_ITERATIONS = 1000  # on the training pool: 4x more iterations move it < 0.1 points
BOUND_ITERATIONS = 2000
CEILING_LEARNING_RATE = 1.0


@dataclass(frozen=True, eq=False)
class Ceiling:
    """The best policy of the class found on the training pool, and its held-out metrics.

    Attributes:
        accuracy, accuracy_routine, accuracy_hard: exact held-out accuracies (fractions).
        hard_types_discovered: hard types whose specialist has probability > 0.5.
        weights: ``[K, D]`` the policy that reaches them.
        bound_accuracy, bound_accuracy_hard: the held-out bound (maximised on the
            held-out prompts themselves), overall and on hard types.
    """

    accuracy: float
    accuracy_routine: float
    accuracy_hard: float
    hard_types_discovered: int
    weights: Float
    bound_accuracy: float
    bound_accuracy_hard: float


def expected_accuracy(weights: Float, prompts: PromptSet) -> tuple[float, Float]:
    """Exact mean accuracy of ``softmax(W φ)`` on ``prompts`` and its gradient in ``W``.

    Examples:
        >>> import numpy as np
        >>> from advbudget.lab.sim import TaskConfig, make_task
        >>> from advbudget.lab.sim._ceiling import expected_accuracy
        >>> task = make_task(TaskConfig(train_prompts=8, validation_prompts=64))
        >>> value, gradient = expected_accuracy(task.initial_weights, task.validation)
        >>> gradient.shape == task.initial_weights.shape
        True
    """
    probs = np.exp(log_policy(weights, prompts.features))
    solved = (probs * prompts.success).sum(axis=1)
    # d solved_x / d logit_s = π_s (q_s - solved_x)
    grad_logits = probs * (prompts.success - solved[:, None]) / prompts.size
    gradient: Float = grad_logits.T @ prompts.features
    return float(solved.mean()), gradient


def policy_ceiling(
    task: Task,
    *,
    iterations: int = CEILING_ITERATIONS,
    bound_iterations: int = BOUND_ITERATIONS,
    learning_rate: float = CEILING_LEARNING_RATE,
) -> Ceiling:
    """Maximise the exact accuracy over the policy class (full-batch Adam): on the
    training pool from the initial policy for the ceiling, and on the held-out prompts
    for the held-out bound.

    The objective is not concave and its supremum may need unbounded weights, so both
    are lower bounds on the class's best; the bound takes the better of two starts (the
    initial policy, and a least-squares fit of logits that pick each prompt's best
    strategy).

    Examples:
        >>> from advbudget.lab.sim import TaskConfig, make_task, policy_ceiling
        >>> task = make_task(TaskConfig(train_prompts=512, validation_prompts=256))
        >>> ceiling = policy_ceiling(task, iterations=200, bound_iterations=200)
        >>> oracle = float(task.validation.success.max(axis=1).mean())
        >>> 0.7 < ceiling.accuracy < ceiling.bound_accuracy < oracle
        True
    """
    weights = _ascend(task.initial_weights.copy(), task.train, iterations, learning_rate)
    metrics = exact_metrics(weights, task.validation)
    bound = held_out_bound(task, iterations=bound_iterations, learning_rate=learning_rate)
    bound_metrics = exact_metrics(bound, task.validation)
    return Ceiling(
        accuracy=metrics["accuracy"],
        accuracy_routine=metrics["accuracy_routine"],
        accuracy_hard=metrics["accuracy_hard"],
        hard_types_discovered=int(metrics["hard_types_discovered"]),
        weights=weights,
        bound_accuracy=bound_metrics["accuracy"],
        bound_accuracy_hard=bound_metrics["accuracy_hard"],
    )


def held_out_bound(
    task: Task,
    *,
    iterations: int = BOUND_ITERATIONS,
    learning_rate: float = CEILING_LEARNING_RATE,
) -> Float:
    """The weights that maximise the exact accuracy on the held-out prompts themselves."""
    prompts = task.validation
    best = prompts.success.argmax(axis=1)
    num_strategies = task.initial_weights.shape[0]
    targets = 4.0 * (np.eye(num_strategies)[best] - 1 / num_strategies)
    fitted, *_ = np.linalg.lstsq(prompts.features, targets, rcond=None)
    results = [
        _ascend(start, prompts, iterations, learning_rate)
        for start in (task.initial_weights.copy(), fitted.T.copy())
    ]
    weights: Float = max(results, key=lambda w: expected_accuracy(w, prompts)[0])
    return weights


def _ascend(weights: Float, prompts: PromptSet, iterations: int, learning_rate: float) -> Float:
    first = np.zeros_like(weights)
    second = np.zeros_like(weights)
    for count in range(1, iterations + 1):
        _, gradient = expected_accuracy(weights, prompts)
        first = 0.9 * first + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        step = (first / (1 - 0.9**count)) / (np.sqrt(second / (1 - 0.999**count)) + 1e-12)
        weights = weights + learning_rate * step
    return weights


@functools.lru_cache(maxsize=64)
def task_ceiling(config: TaskConfig) -> Ceiling:
    """:func:`policy_ceiling` of ``make_task(config)``, cached per task configuration."""
    return policy_ceiling(make_task(config))
