"""The task: prompts of varied difficulty, solution strategies, and a shared linear policy.

Each prompt ``x`` has a type (its topic) and a hidden hardness. Strategy ``s`` solves it
with probability ``q(s, x) = sigmoid(skill[s, type(x)] - hardness(x))``. There are three
kinds of strategy: one *sound* generic strategy (good on routine types, poor on hard
ones), a few *flawed* generic ones (plausible, mostly wrong) and one *specialist* per
hard type (excellent on its own type, useless elsewhere, and unlikely under the initial
policy). The policy is a softmax over strategies with logits ``W φ(x)``; ``W`` is shared
by every prompt, so what an update does on routine prompts also moves the hard ones.
Everything the metrics need is an exact sum over the strategies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from advbudget.checks import int_at_least

Float = NDArray[np.float64]
Int = NDArray[np.int64]
Bool = NDArray[np.bool_]


@dataclass(frozen=True)
class TaskConfig:
    """The prompt population and the strategies (defaults: docs/simulation.md explains them).

    Skills are logits of the success probability, before the prompt's hidden hardness
    (``N(0, hardness_std²)``) is subtracted.

    Attributes:
        routine_types: prompt types that the sound generic strategy handles.
        hard_types: prompt types that only their own specialist strategy handles well.
        flawed_strategies: generic strategies that look plausible but rarely work.
        sound_skill: the sound strategy's skill on routine types.
        flawed_skill: a flawed strategy's skill on routine types.
        hard_type_penalty: what a generic strategy loses on a hard type.
        specialist_skill: a specialist's skill on its own hard type.
        specialist_off_type_skill: a specialist's skill on every other type.
        hardness_std: spread of the hidden per-prompt hardness.
        specialist_prior_logit: initial logit of each specialist (generic ones start at 0).
        type_separation: length of the type part of the features (the shared bias has 1):
            two prompts of different types have feature cosine ``1 / (1 + a²)``.
        feature_noise: per-prompt noise on the type part of the features.
        train_prompts, validation_prompts: sizes of the training pool and the held-out set.
        hard_share: the fraction of prompts that are of a hard type, split equally among
            the hard types (the rest equally among the routine types); None: every type
            equally frequent, i.e. ``hard_types / (routine_types + hard_types)``.
        partial_credit: if > 0, a failed rollout earns this graded reward with the
            strategy's success probability (a near miss); 0 gives binary rewards.
        task_seed: draws the prompts and the feature rotation (the same task for every
            training seed).
    """

    routine_types: int = 4
    hard_types: int = 4
    flawed_strategies: int = 3
    sound_skill: float = 2.0
    flawed_skill: float = -1.0
    hard_type_penalty: float = -5.0
    specialist_skill: float = 2.0
    specialist_off_type_skill: float = -4.0
    hardness_std: float = 1.0
    specialist_prior_logit: float = -3.0
    type_separation: float = 1.0
    feature_noise: float = 0.3
    train_prompts: int = 4096
    validation_prompts: int = 1024
    hard_share: float | None = None
    partial_credit: float = 0.0
    task_seed: int = 0

    def __post_init__(self) -> None:
        counts = {
            "routine_types": (self.routine_types, 0),
            "hard_types": (self.hard_types, 0),
            "flawed_strategies": (self.flawed_strategies, 0),
            "train_prompts": (self.train_prompts, 1),
            "validation_prompts": (self.validation_prompts, 1),
        }
        for name, (value, least) in counts.items():
            int_at_least(name, value, least)
        if self.routine_types + self.hard_types < 1:
            raise ValueError(
                "routine_types, hard_types: expected at least one prompt type, got 0 and 0"
            )
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{field.name}: expected a finite number, got {value!r}")
        for name in ("hardness_std", "type_separation", "feature_noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected a number >= 0, got {getattr(self, name)!r}")
        if self.hard_share is not None:
            _check_hard_share(self.hard_share, self.routine_types, self.hard_types)
        if not 0 <= self.partial_credit < 1:
            raise ValueError(
                f"partial_credit: expected a number in [0, 1), got {self.partial_credit!r}"
            )

    @property
    def num_types(self) -> int:
        return self.routine_types + self.hard_types

    @property
    def type_frequencies(self) -> Float:
        """``[T]`` the probability of each prompt type (routine types first)."""
        if self.hard_share is None:
            return np.full(self.num_types, 1 / self.num_types)
        routine = (1 - self.hard_share) / self.routine_types if self.routine_types else 0.0
        hard = self.hard_share / self.hard_types if self.hard_types else 0.0
        return np.array([routine] * self.routine_types + [hard] * self.hard_types)

    @property
    def num_strategies(self) -> int:
        return 1 + self.flawed_strategies + self.hard_types

    @property
    def num_features(self) -> int:
        return 1 + self.num_types


def _check_hard_share(share: object, routine_types: int, hard_types: int) -> None:
    ok = isinstance(share, (int, float)) and not isinstance(share, bool)
    if not (ok and 0 <= share <= 1):  # type: ignore[operator]
        raise ValueError(f"hard_share: expected a number in [0, 1], got {share!r}")
    # A share given to types that do not exist would leave the frequencies summing to < 1.
    if (hard_types == 0 and share != 0) or (routine_types == 0 and share != 1):
        raise ValueError(
            f"hard_share: expected {0 if hard_types == 0 else 1} with {routine_types} routine "
            f"and {hard_types} hard types, got {share!r}"
        )


@dataclass(frozen=True, eq=False)
class PromptSet:
    """A set of prompts: features ``[N, D]``, types ``[N]``, success probabilities ``[N, K]``.

    Types ``0..routine_types - 1`` are routine, the next ``hard_types`` are hard.
    """

    features: Float
    types: Int
    success: Float
    hard: Bool
    routine_types: int = 0
    hard_types: int = 0

    @property
    def size(self) -> int:
        return int(self.types.shape[0])


@dataclass(frozen=True, eq=False)
class Task:
    """A drawn task: the training pool, the held-out prompts and the initial policy.

    Attributes:
        config: what it was drawn from.
        strategy_names: ``[K]`` sound, flawed1.., special1.. (rows of the weights).
        skill: ``[K, T]`` success logit of each strategy on each type, before hardness.
        rotation: ``[T, T]`` the orthogonal map of type one-hots to features.
        initial_weights: ``[K, D]`` the reference policy: generic strategies at logit 0,
            specialists at ``specialist_prior_logit``, on every prompt.
        train, validation: the training pool and the held-out prompts.
    """

    config: TaskConfig
    strategy_names: tuple[str, ...]
    skill: Float
    rotation: Float
    initial_weights: Float
    train: PromptSet
    validation: PromptSet


def make_task(config: TaskConfig | None = None) -> Task:
    """Draw the prompts of a task (deterministic in ``config.task_seed``).

    Examples:
        >>> from advbudget.lab.sim import TaskConfig, make_task
        >>> task = make_task(TaskConfig(train_prompts=64, validation_prompts=32))
        >>> task.strategy_names
        ('sound', 'flawed1', 'flawed2', 'flawed3', 'special1', 'special2', 'special3', 'special4')
        >>> task.train.features.shape, task.validation.success.shape
        ((64, 9), (32, 8))
    """
    config = TaskConfig() if config is None else config
    rng = np.random.default_rng(config.task_seed)
    skill = _skill_table(config)
    # A random rotation spreads each type over every coordinate of the type part, as in a
    # dense network: no parameter belongs to one type alone (Adam is not rotation-invariant).
    rotation, _ = np.linalg.qr(rng.standard_normal((config.num_types, config.num_types)))
    train = _draw_prompts(config, skill, rotation, config.train_prompts, rng)
    validation = _draw_prompts(config, skill, rotation, config.validation_prompts, rng)
    initial = np.zeros((config.num_strategies, config.num_features))
    initial[1 + config.flawed_strategies :, 0] = config.specialist_prior_logit  # bias column
    names = (
        "sound",
        *(f"flawed{i + 1}" for i in range(config.flawed_strategies)),
        *(f"special{i + 1}" for i in range(config.hard_types)),
    )
    return Task(config, names, skill, rotation, initial, train, validation)


def _skill_table(config: TaskConfig) -> Float:
    """``skill[s, t]``: strategies in rows (sound, flawed..., specialists...), types in columns."""
    hard = np.arange(config.num_types) >= config.routine_types
    generic = np.array([config.sound_skill] + [config.flawed_skill] * config.flawed_strategies)
    generic_rows = generic[:, None] + np.where(hard, config.hard_type_penalty, 0.0)[None, :]
    special_rows = np.full((config.hard_types, config.num_types), config.specialist_off_type_skill)
    for i in range(config.hard_types):
        special_rows[i, config.routine_types + i] = config.specialist_skill
    return np.concatenate([generic_rows, special_rows])


def _draw_prompts(
    config: TaskConfig, skill: Float, rotation: Float, size: int, rng: np.random.Generator
) -> PromptSet:
    if config.hard_share is None:
        types = rng.integers(0, config.num_types, size=size)
    else:
        types = rng.choice(config.num_types, size=size, p=config.type_frequencies)
    hardness = config.hardness_std * rng.standard_normal(size)
    type_part = config.type_separation * np.eye(config.num_types)[types]
    type_part += config.feature_noise * rng.standard_normal((size, config.num_types))
    features = np.concatenate([np.ones((size, 1)), type_part @ rotation.T], axis=1)
    success = 1 / (1 + np.exp(hardness[:, None] - skill[:, types].T))
    hard = types >= config.routine_types
    return PromptSet(
        features, types.astype(np.int64), success, hard, config.routine_types, config.hard_types
    )


def log_policy(weights: Float, features: Float) -> Float:
    """Log-probabilities ``[N, K]`` of the linear-softmax policy ``softmax(W φ(x))``.

    Examples:
        >>> import numpy as np
        >>> from advbudget.lab.sim import log_policy
        >>> np.exp(log_policy(np.zeros((4, 3)), np.ones((2, 3))))
        array([[0.25, 0.25, 0.25, 0.25],
               [0.25, 0.25, 0.25, 0.25]])
    """
    logits = features @ weights.T
    logits = logits - logits.max(axis=1, keepdims=True)
    result: Float = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return result


def exact_metrics(
    weights: Float, prompts: PromptSet, reference_log_probs: Float | None = None
) -> dict[str, float]:
    """Exact expectations over the strategies, averaged over ``prompts``.

    Keys: ``accuracy`` (mean success probability, avg@n in the limit), ``accuracy_routine``
    and ``accuracy_hard`` (the same on routine and hard types; NaN if there are none),
    ``pass_at_8`` (``1 - (1 - p)^8``), ``entropy`` (nats), ``hard_types_discovered``
    (the hard types whose specialist has mean probability > 0.5 on their held-out
    prompts; a type without held-out prompts does not count) and, with
    ``reference_log_probs``, ``kl_to_reference`` (``KL(π ‖ π_ref)``).

    Examples:
        >>> from advbudget.lab.sim import TaskConfig, make_task, exact_metrics
        >>> task = make_task(TaskConfig(train_prompts=8, validation_prompts=256))
        >>> metrics = exact_metrics(task.initial_weights, task.validation)
        >>> round(metrics["accuracy"], 3), round(metrics["entropy"], 3)
        (0.206, 1.577)
    """
    log_probs = log_policy(weights, prompts.features)
    probs = np.exp(log_probs)
    solved = (probs * prompts.success).sum(axis=1)
    metrics = {
        "accuracy": float(solved.mean()),
        "accuracy_routine": _mean_or_nan(solved[~prompts.hard]),
        "accuracy_hard": _mean_or_nan(solved[prompts.hard]),
        "pass_at_8": float((1 - (1 - solved) ** 8).mean()),
        "entropy": float(-(probs * log_probs).sum(axis=1).mean()),
        "hard_types_discovered": float(hard_types_discovered(probs, prompts)),
    }
    if reference_log_probs is not None:
        kl = (probs * (log_probs - reference_log_probs)).sum(axis=1)
        metrics["kl_to_reference"] = float(kl.mean())
    return metrics


def hard_types_discovered(probs: Float, prompts: PromptSet) -> int:
    """How many hard types have their specialist at mean probability > 0.5 on their prompts.

    ``probs`` is ``[N, K]`` on ``prompts``; the specialists are the last
    ``prompts.hard_types`` strategies, in the order of the hard types.

    Examples:
        >>> import numpy as np
        >>> from advbudget.lab.sim import TaskConfig, make_task
        >>> from advbudget.lab.sim._task import hard_types_discovered
        >>> task = make_task(TaskConfig(train_prompts=8, validation_prompts=64))
        >>> hard_types_discovered(np.full((64, 8), 1 / 8), task.validation)
        0
        >>> probs = np.zeros((64, 8)); probs[:, 4:] = 1  # every specialist on every prompt
        >>> hard_types_discovered(probs, task.validation)
        4
    """
    count = 0
    first_specialist = probs.shape[1] - prompts.hard_types
    for j in range(prompts.hard_types):
        mine = prompts.types == prompts.routine_types + j
        if mine.any() and probs[mine, first_specialist + j].mean() > 0.5:
            count += 1
    return count


def _mean_or_nan(values: Float) -> float:
    return float(values.mean()) if values.size else math.nan


def sample_rollouts(
    log_probs: Float,
    success: Float,
    group_size: int,
    rng: np.random.Generator,
    *,
    partial_credit: float = 0.0,
) -> tuple[Int, Float]:
    """Sample ``group_size`` strategies per prompt on-policy and their rewards.

    Returns ``strategies [P, G]`` and ``rewards [P, G]``: 1 if solved; else
    ``partial_credit`` with the strategy's success probability (a near miss), else 0.

    Examples:
        >>> import numpy as np
        >>> from advbudget.lab.sim import sample_rollouts
        >>> log_probs = np.array([[-np.inf, 0.0]])  # always strategy 1
        >>> strategies, rewards = sample_rollouts(
        ...     log_probs, np.array([[0.0, 1.0]]), 4, np.random.default_rng(0))
        >>> strategies, rewards
        (array([[1, 1, 1, 1]]), array([[1., 1., 1., 1.]]))
    """
    probs = np.exp(log_probs)
    cumulative = np.cumsum(probs, axis=1)
    draws = rng.random((probs.shape[0], group_size)) * cumulative[:, -1:]
    # Inverse-CDF sampling: count the cumulative probabilities each uniform draw passed.
    passed = (draws[:, :, None] >= cumulative[:, None, :]).sum(axis=2)
    strategies = np.minimum(passed, probs.shape[1] - 1).astype(np.int64)
    chance = np.take_along_axis(success, strategies, axis=1)
    rewards = (rng.random(strategies.shape) < chance).astype(np.float64)
    if partial_credit > 0:
        near_miss = (rewards == 0) & (rng.random(strategies.shape) < chance)
        rewards[near_miss] = partial_credit
    return strategies, rewards
