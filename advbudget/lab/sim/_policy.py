"""The PPO-style surrogate of the linear-softmax policy, with its analytic gradient.

One response here is one strategy choice, so a sequence has one "token": the token-mean,
sequence-mean and constant-normaliser aggregations all coincide (the loss is a mean over
the minibatch's rollouts, as in Dr. GRPO). The KL to the reference and the entropy are
exact sums over the strategies, not sampled estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._task import Float, Int, log_policy


@dataclass(frozen=True, eq=False)
class Minibatch:
    """Rollouts of ``P`` prompts, ``G`` each, as the update sees them.

    Attributes:
        features: ``[P, D]`` prompt features.
        strategies: ``[P, G]`` the sampled strategy of each rollout.
        advantages: ``[P, G]`` from the estimator.
        old_log_probs: ``[P, G]`` log-probability of each rollout under the sampling policy.
        reference_log_probs: ``[P, K]`` the reference (initial) policy, for the KL term.
    """

    features: Float
    strategies: Int
    advantages: Float
    old_log_probs: Float
    reference_log_probs: Float


@dataclass(frozen=True)
class LossTerms:
    """The value of each part of the surrogate and the share of clipped rollouts."""

    total: float
    policy: float
    kl: float
    entropy: float
    clip_fraction: float


def surrogate_loss(
    weights: Float,
    batch: Minibatch,
    *,
    clip: float = 0.2,
    beta: float = 0.0,
    entropy_coef: float = 0.0,
) -> tuple[LossTerms, Float]:
    """The clipped surrogate loss to minimise and its exact gradient in ``weights``.

    ``loss = -mean_i min(ρ_i A_i, clip(ρ_i, 1 - clip, 1 + clip) A_i)
    + beta * mean_x KL(π(·|x) ‖ π_ref(·|x)) - entropy_coef * mean_x H(π(·|x))``
    with ``ρ_i = π(s_i|x_i) / π_old(s_i|x_i)``.

    Returns:
        ``(terms, gradient)``, the gradient ``[K, D]`` like ``weights``.

    Examples:
        >>> import numpy as np
        >>> from advbudget.lab.sim import Minibatch, surrogate_loss
        >>> weights = np.zeros((2, 1))  # two strategies, one constant feature
        >>> batch = Minibatch(features=np.ones((1, 1)), strategies=np.array([[0, 1]]),
        ...                   advantages=np.array([[0.5, -0.5]]),
        ...                   old_log_probs=np.log(np.full((1, 2), 0.5)),
        ...                   reference_log_probs=np.log(np.full((1, 2), 0.5)))
        >>> terms, gradient = surrogate_loss(weights, batch)
        >>> terms.total, gradient.ravel()  # descending the gradient raises strategy 0
        (0.0, array([-0.25,  0.25]))
    """
    log_probs = log_policy(weights, batch.features)
    probs = np.exp(log_probs)
    num_prompts, group_size = batch.strategies.shape
    chosen = np.take_along_axis(log_probs, batch.strategies, axis=1)
    ratio = np.exp(chosen - batch.old_log_probs)
    advantages = batch.advantages
    clipped_ratio = np.clip(ratio, 1 - clip, 1 + clip)
    policy_loss = -np.minimum(ratio * advantages, clipped_ratio * advantages).mean()
    # The min takes the clipped (constant) branch exactly when the ratio left the trust
    # region in the direction the advantage pushes it: no gradient flows there.
    cut = ((advantages > 0) & (ratio > 1 + clip)) | ((advantages < 0) & (ratio < 1 - clip))
    # dL / d log π(s_i|x_i), then through d log π(s|x) / d logits = onehot(s) - π(·|x).
    per_rollout = np.where(cut, 0.0, -advantages * ratio) / (num_prompts * group_size)
    grad_logits = -per_rollout.sum(axis=1, keepdims=True) * probs
    rows = np.repeat(np.arange(num_prompts), group_size)
    np.add.at(grad_logits, (rows, batch.strategies.ravel()), per_rollout.ravel())

    log_ratio_ref = log_probs - batch.reference_log_probs
    kl = (probs * log_ratio_ref).sum(axis=1)
    entropy = -(probs * log_probs).sum(axis=1)
    if beta:
        grad_logits += beta / num_prompts * probs * (log_ratio_ref - kl[:, None])
    if entropy_coef:
        grad_logits += entropy_coef / num_prompts * probs * (log_probs + entropy[:, None])
    total = policy_loss + beta * kl.mean() - entropy_coef * entropy.mean()
    terms = LossTerms(
        total=float(total),
        policy=float(policy_loss),
        kl=float(kl.mean()),
        entropy=float(entropy.mean()),
        clip_fraction=float(cut.mean()),
    )
    gradient: Float = grad_logits.T @ batch.features
    return terms, gradient
