"""What each estimator optimises, for binary rewards.

The derivation is in the docs (Method and theory, "What each estimator optimises").

With independent on-policy rollouts and the unclipped, centred score-function update
``sum_i A_i grad log pi(o_i)``, the expected update along a prompt's success probability
``p`` is a slope ``dJ/dp``. Budgeting's slope is exactly ``f_{G-1}'(p)``, the derivative
of the concave objective ``f_{G-1}(p) = sum_{m=1}^{G-1} (1 - (1-p)^m) / m``; Dr's is
flat; GRPO's is U-shaped (it pushes easy prompts as hard as hard ones).
:func:`implied_slope` computes it exactly for any estimator, by enumeration over
``k ~ Binomial(G, p)`` correct rollouts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .core import compute_advantages, get_spec

Float = NDArray[np.float64]


def _check_group_size(group_size: int) -> None:
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(f"group_size: expected an int >= 2, got {group_size!r}")
    if group_size < 2:
        raise ValueError(f"group_size: expected an int >= 2, got {group_size}")


def _probabilities(x: ArrayLike, name: str) -> Float:
    values = np.asarray(x, dtype=np.float64)
    if not np.all((values >= 0) & (values <= 1)):
        raise ValueError(f"{name}: expected probabilities in [0, 1], got {x!r}")
    return values


def objective(x: ArrayLike, group_size: int) -> Float:
    """Budgeting's finite-G objective per prompt, ``f_{G-1}(x)``, x the success probability.

    Examples:
        >>> from advbudget.theory import objective
        >>> float(objective(1.0, 8))  # H_7, the harmonic number
        2.592857...
    """
    _check_group_size(group_size)
    x = _probabilities(x, "x")
    m = np.arange(1, group_size, dtype=np.float64)
    result: Float = np.sum((1 - (1 - x[..., None]) ** m) / m, axis=-1)
    return result


def objective_slope(x: ArrayLike, group_size: int) -> Float:
    """``f_{G-1}'(x) = sum_{m=1}^{G-1} (1 - x)^(m-1)``: budgeting's expected update slope.

    Examples:
        >>> from advbudget.theory import objective_slope
        >>> objective_slope([0.05, 0.5, 0.95], 8).round(4)
        array([6.0333, 1.9844, 1.0526])
    """
    _check_group_size(group_size)
    x = _probabilities(x, "x")
    m = np.arange(1, group_size, dtype=np.float64)
    result: Float = np.sum((1 - x[..., None]) ** (m - 1), axis=-1)
    return result


def log_mean_objective(x: ArrayLike, group_size: int) -> Float:
    """The large-G limit of :func:`objective`: ``log x + H_{G-1}`` (only valid for large G).

    Examples:
        >>> from advbudget.theory import log_mean_objective, objective
        >>> round(float(objective(0.05, 8) - log_mean_objective(0.05, 8)), 2)
        0.73
    """
    _check_group_size(group_size)
    x = _probabilities(x, "x")
    harmonic = sum(1 / m for m in range(1, group_size))
    with np.errstate(divide="ignore"):
        result: Float = np.log(x) + harmonic
    return result


def passk_objective(x: ArrayLike, k: int) -> Float:
    """pass@k, ``1 - (1 - x)^k``: the chance that one of k rollouts succeeds.

    The analytical pass@k advantage (``passk`` with ``norm_by_std=False``) implies the
    slope ``(G - k) (1 - x)^(k - 1)``, which is ``(G - k) / k`` times this objective's
    derivative: it optimises pass@k exactly (and nothing at k = G).

    Examples:
        >>> from advbudget.theory import passk_objective
        >>> passk_objective([0.1, 0.5], 4).round(4)
        array([0.3439, 0.9375])
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k: expected an int >= 1, got {k!r}")
    x = _probabilities(x, "x")
    result: Float = 1 - (1 - x) ** k
    return result


AdvantageFunction = Callable[..., Any]


def binary_advantages(
    estimator: str | AdvantageFunction, group_size: int, **options: Any
) -> tuple[Float, Float]:
    """Mean advantage of the correct and of the wrong rollouts when k of G are correct.

    Where every correct rollout gets the same advantage (budget, grpo, dr, rloo, ...)
    the mean is that advantage; where they do not (``grpo_passk`` gives only the best
    rollout an update), ``k * correct[k]`` is still the sum over the correct rollouts,
    which is what :func:`implied_slope` needs.

    The G + 1 groups (k = 0..G) are computed as one batch, so an estimator with batch
    statistics (whitening, gpg's α) sees that batch's. An extra input of the estimator
    (``response_lengths=``, ``reward_baselines=``) may be passed as one constant for
    every rollout: constant response lengths make ``opo`` equal ``dr``.

    Args:
        estimator: a registered estimator name (``"budget"``, ``"grpo"``, ...) or an
            advantage function called as ``fn(rewards, group_size=G, **options)``, such
            as :func:`advbudget.budget_advantage` or your own.
        group_size: G.
        **options: passed to the estimator (``budget=``, ``eps=``, ...; inputs as
            constants).

    Returns:
        ``(correct, wrong)``, each ``[G + 1]`` indexed by k = 0..G; NaN where no such
        rollout exists (no correct one at k = 0, no wrong one at k = G).

    Raises:
        ValueError: the estimator needs an extra input that was not given.

    Examples:
        >>> from advbudget.theory import binary_advantages
        >>> correct, wrong = binary_advantages("budget", 4)
        >>> correct.round(4)
        array([   nan, 0.75  , 0.25  , 0.0833, 0.    ])
        >>> wrong.round(4)
        array([ 0.  , -0.25, -0.25, -0.25,   nan])
        >>> correct, _ = binary_advantages("grpo_passk", 4)  # only k = 1 has a unique best
        >>> correct.round(4).tolist()
        [nan, 2.0, 0.0, 0.0, 0.0]
    """
    _check_group_size(group_size)
    k = np.arange(group_size + 1)
    # Row k: k correct rollouts (reward 1) first, then G - k wrong ones (reward 0).
    is_correct = np.arange(group_size)[None, :] < k[:, None]
    rewards = is_correct.astype(np.float64).reshape(-1)
    if isinstance(estimator, str):
        options = _constant_inputs(estimator, rewards.shape[0], options)
        advantages = compute_advantages(
            rewards, estimator, group_size=group_size, **options
        ).advantages
    elif callable(estimator):
        advantages = estimator(rewards, group_size=group_size, **options)
    else:
        raise TypeError(f"estimator: expected a name or a callable, got {estimator!r}")
    table = np.asarray(advantages, dtype=np.float64).reshape(group_size + 1, group_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        correct = np.sum(np.where(is_correct, table, 0), axis=1) / k
        wrong = np.sum(np.where(is_correct, 0, table), axis=1) / (group_size - k)
    correct = np.where(k >= 1, correct, np.nan)
    wrong = np.where(k <= group_size - 1, wrong, np.nan)
    return correct, wrong


def _constant_inputs(estimator: str, num_rollouts: int, options: dict[str, Any]) -> dict[str, Any]:
    """The estimator's extra inputs given as constants, as one value per rollout."""
    spec = get_spec(estimator)
    out = dict(options)
    for declared in spec.inputs:
        value = out.get(declared.name)
        if value is None:
            if declared.required:
                raise ValueError(
                    f"{declared.name}: the {spec.name} estimator needs {declared.doc}; "
                    f"for binary_advantages and implied_slope pass one constant for every "
                    f"rollout ({declared.name}=...), got None"
                )
            continue
        if np.ndim(value) == 0:
            out[declared.name] = np.full(num_rollouts, float(value))
    return out


def implied_slope(
    estimator: str | AdvantageFunction, group_size: int, p: ArrayLike, **options: Any
) -> Float:
    """The exact expected update slope ``dJ/dp`` that an estimator implies (binary rewards).

    Enumerates ``k ~ Binomial(G, p)``:
    ``sum_k C(G,k) p^k (1-p)^(G-k) [k A+(k) / p - (G-k) A-(k) / (1-p)]``,
    written without dividing by ``p`` or ``1 - p`` so that it holds at 0 and 1 too.
    For budgeting it equals :func:`objective_slope` to rounding.

    An estimator with batch statistics (batch whitening, a batch std, gpg's α) has the
    slope of the estimator its spec names in ``slope_of`` (``reinforce_baseline`` and
    ``reinforce_plus_plus_baseline``: ``dr``; ``rloo_normalized``: ``rloo``; ``gpg``,
    ``grpo_batch_std``: ``dr``) up to a positive factor set by the batch (``1 / std``
    of the batch, α), and that slope is returned: the options the ``slope_of`` estimator
    does not take are dropped. Subtracting a batch mean adds nothing in expectation,
    so the shape over ``p`` is the ``slope_of`` estimator's. An estimator without
    ``slope_of`` is computed on the G + 1 groups as one batch (``reinforce``: ``G``
    over that batch's std).

    Examples:
        >>> from advbudget.theory import implied_slope
        >>> implied_slope("budget", 8, [0.05, 0.5, 0.95]).round(4)
        array([6.0333, 1.9844, 1.0526])
        >>> implied_slope("dr", 8, [0.05, 0.5, 0.95]).round(4)
        array([7., 7., 7.])
    """
    if isinstance(estimator, str):
        spec = get_spec(estimator)
        if spec.slope_of is not None:
            target = get_spec(spec.slope_of)
            takes = {o.name for o in target.options} | {i.name for i in target.inputs}
            takes |= {"group_weight", "solved_reward"}  # compute_advantages' own
            estimator = target.name
            options = {name: value for name, value in options.items() if name in takes}
    correct, wrong = binary_advantages(estimator, group_size, **options)
    correct, wrong = np.nan_to_num(correct), np.nan_to_num(wrong)
    p = _probabilities(p, "p")[..., None]
    g = group_size
    k = np.arange(g + 1)
    binomial = np.array([math.comb(g, int(i)) for i in k], dtype=np.float64)
    # d/dp of P(k) split by rollout: k correct ones pull p up, G - k wrong ones down.
    up = k * p ** np.maximum(k - 1, 0) * (1 - p) ** (g - k) * correct
    down = (g - k) * p**k * (1 - p) ** np.maximum(g - k - 1, 0) * wrong
    result: Float = np.sum(binomial * (up - down), axis=-1)
    return result
