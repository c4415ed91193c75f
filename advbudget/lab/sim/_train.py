"""One training run: on-policy groups, the library's advantages, PPO-style minibatch updates."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from advbudget.checks import int_at_least, nonnegative_finite
from advbudget.core import EstimatorState, compute_advantages, get_spec
from advbudget.core._staleness import STALE_RULES, StaleRule
from advbudget.core._weights import split_weighted
from advbudget.metrics import advantage_metrics, kappa_eff, summarize

from ._policy import Minibatch, surrogate_loss
from ._task import Float, Int, Task, exact_metrics, log_policy, sample_rollouts

OPTIMIZERS = ("adam", "sgd")
# Where an entropy term goes: a bonus on the loss (``- c H(π)``, exact) or on each
# rollout's reward (``r + c (-log π_old(s|x))``, whose expectation is ``c H``).
ENTROPY_PLACES = ("loss", "reward")

# Evaluation metrics (exact, on the held-out prompts) are recorded after every step and
# for the initial policy (index 0); batch metrics describe the rollouts of step t (index
# t) and are NaN at index 0.
EVAL_KEYS = (
    "accuracy",
    "accuracy_routine",
    "accuracy_hard",
    "pass_at_8",
    "entropy",
    "kl_to_reference",
    "hard_types_discovered",
)
BATCH_KEYS = (
    "train_reward",
    "skipped_group_fraction",
    "advantage_gap_mean",
    "kappa_eff_mean",
    "kappa_eff_median",
    "clip_fraction",
)
HISTORY_KEYS = EVAL_KEYS + BATCH_KEYS


@dataclass(frozen=True)
class RunConfig:
    """One training run.

    Attributes:
        estimator: any name :func:`advbudget.compute_advantages` accepts, or
            ``<name>+<weight>`` with a difficulty weight (``"grpo+grpo_lead"``, ``"budget+dqw"``).
        steps: policy updates (each on a fresh on-policy batch).
        group_size: G, rollouts per prompt.
        prompts_per_step: B, prompts per batch.
        minibatches: the batch is split into this many minibatches of whole groups, each
            one optimiser step (one PPO epoch); the later ones are slightly off-policy.
        learning_rate: the optimiser's step size.
        clip: PPO ratio clip ε (the ratio is kept in ``[1 - ε, 1 + ε]``).
        beta: KL coefficient to the reference (initial) policy; κ = reward gap / β.
        entropy_coef: entropy bonus coefficient.
        entropy_in: ``"loss"`` (an exact entropy bonus in the loss) or ``"reward"`` (each
            rollout's reward gets ``entropy_coef * (-log π_old(s|x))`` before the
            advantages are computed, so the estimator sees the bonus).
        entropy_until: the bonus applies to steps ``1..entropy_until`` only (None: all).
        optimizer: ``"adam"`` (β₁ = 0.9, β₂ = 0.999, as LLM trainers use) or ``"sgd"``.
        seed: seeds the prompt order, the rollouts and the rewards.
        eval_every: evaluate the held-out metrics every this many steps (and at the
            last); the steps between hold NaN. 1 gives full curves.
        max_lag: async sampling: each rollout comes from the policy of a uniformly drawn
            0..``max_lag`` updates ago (fewer at the start), so a group mixes policy
            versions; its PPO ratio is against that sampling policy. 0: on-policy.
        max_staleness, stale_rollouts: what the advantages do with rollouts more than
            ``max_staleness`` updates old (:func:`advbudget.compute_advantages`'s
            ``stale_rollouts``: ``keep``, ``baseline_only``, ``drop``, ``drop_group``).
    """

    estimator: str = "budget"
    steps: int = 300
    group_size: int = 8
    prompts_per_step: int = 32
    minibatches: int = 4
    learning_rate: float = 0.01
    clip: float = 0.2
    beta: float = 0.001
    entropy_coef: float = 0.0
    entropy_in: str = "loss"
    entropy_until: int | None = None
    optimizer: str = "adam"
    seed: int = 0
    eval_every: int = 1
    max_lag: int = 0
    max_staleness: int | None = None
    stale_rollouts: StaleRule = "keep"

    def __post_init__(self) -> None:
        if not isinstance(self.estimator, str):
            raise TypeError(f"estimator: expected an estimator name, got {self.estimator!r}")
        base, _ = split_weighted(self.estimator)  # "grpo+grpo_lead": with a group weight
        spec = get_spec(base)  # raises "estimator: expected one of ..."
        needs = list(spec.required_inputs)
        if needs:
            raise ValueError(
                f"estimator: {spec.name} needs per-rollout inputs ({', '.join(needs)}) that "
                "the lab's bandit rollouts do not have"
            )
        if spec.components:
            raise ValueError(
                f"estimator: {spec.name} takes several rewards per rollout (reward "
                "components); the lab's bandit rollouts have one"
            )
        int_at_least("steps", self.steps, 0)
        int_at_least("group_size", self.group_size, 2)
        int_at_least("prompts_per_step", self.prompts_per_step, 1)
        int_at_least("minibatches", self.minibatches, 1)
        int_at_least("seed", self.seed, 0)
        int_at_least("eval_every", self.eval_every, 1)
        if self.entropy_in not in ENTROPY_PLACES:
            raise ValueError(
                f"entropy_in: expected one of {ENTROPY_PLACES}, got {self.entropy_in!r}"
            )
        if self.prompts_per_step % self.minibatches:
            raise ValueError(
                f"minibatches: expected a divisor of prompts_per_step={self.prompts_per_step} "
                f"(minibatches hold whole groups), got {self.minibatches}"
            )
        nonnegative_finite("learning_rate", self.learning_rate)
        nonnegative_finite("beta", self.beta)
        nonnegative_finite("entropy_coef", self.entropy_coef)
        nonnegative_finite("clip", self.clip)
        if self.clip <= 0:
            raise ValueError(f"clip: expected a number > 0, got {self.clip!r}")
        if self.entropy_until is not None:
            int_at_least("entropy_until", self.entropy_until, 0)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: expected one of {OPTIMIZERS}, got {self.optimizer!r}")
        int_at_least("max_lag", self.max_lag, 0)
        if self.max_staleness is not None:
            int_at_least("max_staleness", self.max_staleness, 0)
        if self.stale_rollouts not in STALE_RULES:
            raise ValueError(
                f"stale_rollouts: expected one of {STALE_RULES}, got {self.stale_rollouts!r}"
            )


class _Optimizer:
    """Adam (with bias correction) or plain SGD on one weight matrix."""

    def __init__(self, kind: str, learning_rate: float, shape: tuple[int, ...]) -> None:
        self.kind = kind
        self.learning_rate = learning_rate
        self.first = np.zeros(shape)
        self.second = np.zeros(shape)
        self.count = 0

    def step(self, weights: Float, gradient: Float) -> Float:
        if self.kind == "sgd":
            result: Float = weights - self.learning_rate * gradient
            return result
        self.count += 1
        self.first = 0.9 * self.first + 0.1 * gradient
        self.second = 0.999 * self.second + 0.001 * gradient**2
        first = self.first / (1 - 0.9**self.count)
        second = self.second / (1 - 0.999**self.count)
        result = weights - self.learning_rate * first / (np.sqrt(second) + 1e-8)
        return result


def _sample(
    past: deque[Float],
    features: Float,
    task: Task,
    prompts: Int,
    config: RunConfig,
    rng: np.random.Generator,
) -> tuple[Int, Float, Float, Int]:
    """One step's rollouts, ``[P, G]`` strategies, rewards, the sampling policy's
    log-probs of them and each one's lag (updates since its policy; ``past[0]`` is the
    current one). On-policy (``max_lag=0``): one draw, as always."""
    success, credit, size = (
        task.train.success[prompts],
        task.config.partial_credit,
        config.group_size,
    )
    if config.max_lag == 0:
        log_probs = log_policy(past[0], features)
        strategies, rewards = sample_rollouts(log_probs, success, size, rng, partial_credit=credit)
        old = np.take_along_axis(log_probs, strategies, axis=1)
        return strategies, rewards, old, np.zeros(strategies.shape, dtype=np.int64)
    lags = np.minimum(rng.integers(0, config.max_lag + 1, size=(len(prompts), size)), len(past) - 1)
    strategies = np.zeros(lags.shape, dtype=np.int64)
    rewards, old = np.zeros(lags.shape), np.zeros(lags.shape)
    for lag, weights in enumerate(past):
        log_probs = log_policy(weights, features)
        drawn, scored = sample_rollouts(log_probs, success, size, rng, partial_credit=credit)
        mine = lags == lag
        strategies[mine], rewards[mine] = drawn[mine], scored[mine]
        old[mine] = np.take_along_axis(log_probs, drawn, axis=1)[mine]
    return strategies, rewards, old, lags


def train(
    config: RunConfig,
    task: Task,
    *,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Float]:
    """Train the shared policy of ``task`` from its initial weights; return the curves.

    Each step samples ``prompts_per_step`` prompts from the training pool (reshuffled
    every epoch) and ``group_size`` rollouts each from the current policy (or, with
    ``max_lag``, each from a policy up to ``max_lag`` updates old), gets the
    advantages from :func:`advbudget.compute_advantages`, takes one PPO epoch over
    ``minibatches`` minibatches, then measures κ_eff on the step's rollouts with
    :func:`advbudget.metrics.kappa_eff` and evaluates the policy exactly on the held-out
    prompts.

    Returns:
        ``{metric: [steps + 1] array}`` for every name in ``HISTORY_KEYS``, index 0 being
        the initial policy, plus ``"weights"``: the final weights ``[K, D]``.

    Examples:
        >>> from advbudget.lab.sim import RunConfig, TaskConfig, make_task, train
        >>> task = make_task(TaskConfig(train_prompts=64, validation_prompts=64))
        >>> history = train(RunConfig(estimator="dr", steps=3, prompts_per_step=8), task)
        >>> history["accuracy"].shape
        (4,)
    """
    rng = np.random.default_rng(config.seed)
    weights = task.initial_weights.copy()
    optimizer = _Optimizer(config.optimizer, config.learning_rate, weights.shape)
    reference_train = log_policy(task.initial_weights, task.train.features)
    reference_validation = log_policy(task.initial_weights, task.validation.features)
    history = {key: np.full(config.steps + 1, math.nan) for key in HISTORY_KEYS}

    def evaluate(step: int) -> None:
        for key, value in exact_metrics(weights, task.validation, reference_validation).items():
            history[key][step] = value

    evaluate(0)
    base, weight = split_weighted(config.estimator)
    # An estimator with memory (spo, rae) keeps it across the run, keyed by prompt index.
    state = EstimatorState() if get_spec(base).tracker is not None else None
    order = rng.permutation(task.train.size)
    cursor = 0
    past: deque[Float] = deque(maxlen=config.max_lag + 1)  # the policies to sample from
    group_size, per_minibatch = config.group_size, config.prompts_per_step // config.minibatches
    for step in range(1, config.steps + 1):
        if cursor + config.prompts_per_step > order.size:
            order, cursor = rng.permutation(task.train.size), 0
        prompts = order[cursor : cursor + config.prompts_per_step]
        cursor += config.prompts_per_step
        features = task.train.features[prompts]
        past.appendleft(weights)
        strategies, rewards, old, lags = _sample(past, features, task, prompts, config, rng)
        versions = None if config.max_lag == 0 else (step - 1 - lags).reshape(-1)
        bonus_on = config.entropy_until is None or step <= config.entropy_until
        in_reward = bonus_on and config.entropy_in == "reward" and config.entropy_coef > 0
        shaped = rewards - config.entropy_coef * old if in_reward else rewards
        result = compute_advantages(
            shaped.reshape(-1),
            base,
            group_size=group_size,
            group_weight=weight,
            state=state,
            prompt_ids=None if state is None else prompts.repeat(group_size),
            policy_versions=versions,
            current_version=None if versions is None else step - 1,
            max_staleness=None if versions is None else config.max_staleness,
            stale_rollouts=config.stale_rollouts if versions is not None else "keep",
        )
        advantages = np.asarray(result.advantages, dtype=np.float64).reshape(rewards.shape)
        in_loss = bonus_on and config.entropy_in == "loss"
        clip_fractions = []
        for start in range(0, config.prompts_per_step, per_minibatch):
            part = slice(start, start + per_minibatch)
            batch = Minibatch(
                features=features[part],
                strategies=strategies[part],
                advantages=advantages[part],
                old_log_probs=old[part],
                reference_log_probs=reference_train[prompts[part]],
            )
            terms, gradient = surrogate_loss(
                weights,
                batch,
                clip=config.clip,
                beta=config.beta,
                entropy_coef=config.entropy_coef if in_loss else 0.0,
            )
            weights = optimizer.step(weights, gradient)
            clip_fractions.append(terms.clip_fraction)
        new = np.take_along_axis(log_policy(weights, features), strategies, axis=1)
        realised = summarize(
            kappa_eff(old.reshape(-1), new.reshape(-1), result.advantages, groups=result.groups)
        )
        batch_metrics = advantage_metrics(result)
        history["train_reward"][step] = rewards.mean()
        history["skipped_group_fraction"][step] = batch_metrics["skipped_group_fraction"]
        history["advantage_gap_mean"][step] = batch_metrics["advantage_gap_mean"]
        history["kappa_eff_mean"][step] = realised["mean"]
        history["kappa_eff_median"][step] = realised["median"]
        history["clip_fraction"][step] = float(np.mean(clip_fractions))
        if step % config.eval_every == 0 or step == config.steps:
            evaluate(step)
        if on_step is not None:
            on_step(step)
    history["weights"] = weights
    return history
