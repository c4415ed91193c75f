"""What each estimator optimises, for binary rewards (SPEC section 3).

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

from .core import compute_advantages

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


AdvantageFunction = Callable[..., Any]


def binary_advantages(
    estimator: str | AdvantageFunction, group_size: int, **options: Any
) -> tuple[Float, Float]:
    """Advantages of a correct and of a wrong rollout when k of G are correct.

    Args:
        estimator: a registered estimator name (``"budget"``, ``"grpo"``, ...) or an
            advantage function called as ``fn(rewards, group_size=G, **options)``, such
            as :func:`advbudget.budget_advantage` or your own.
        group_size: G.
        **options: passed to the estimator (``budget=``, ``eps=``, ...).

    Returns:
        ``(correct, wrong)``, each ``[G + 1]`` indexed by k = 0..G; NaN where no such
        rollout exists (no correct one at k = 0, no wrong one at k = G).

    Examples:
        >>> from advbudget.theory import binary_advantages
        >>> correct, wrong = binary_advantages("budget", 4)
        >>> correct.round(4)
        array([   nan, 0.75  , 0.25  , 0.0833, 0.    ])
        >>> wrong.round(4)
        array([ 0.  , -0.25, -0.25, -0.25,   nan])
    """
    _check_group_size(group_size)
    k = np.arange(group_size + 1)
    # Row k: k correct rollouts (reward 1) first, then G - k wrong ones (reward 0).
    rewards = (np.arange(group_size)[None, :] < k[:, None]).astype(np.float64).reshape(-1)
    if isinstance(estimator, str):
        advantages = compute_advantages(
            rewards, estimator, group_size=group_size, **options
        ).advantages
    elif callable(estimator):
        advantages = estimator(rewards, group_size=group_size, **options)
    else:
        raise TypeError(f"estimator: expected a name or a callable, got {estimator!r}")
    table = np.asarray(advantages, dtype=np.float64).reshape(group_size + 1, group_size)
    correct = np.where(k >= 1, table[:, 0], np.nan)
    wrong = np.where(k <= group_size - 1, table[:, -1], np.nan)
    return correct, wrong


def implied_slope(
    estimator: str | AdvantageFunction, group_size: int, p: ArrayLike, **options: Any
) -> Float:
    """The exact expected update slope ``dJ/dp`` that an estimator implies (binary rewards).

    Enumerates ``k ~ Binomial(G, p)``:
    ``sum_k C(G,k) p^k (1-p)^(G-k) [k A+(k) / p - (G-k) A-(k) / (1-p)]``,
    written without dividing by ``p`` or ``1 - p`` so that it holds at 0 and 1 too.
    For budgeting it equals :func:`objective_slope` to rounding.

    Examples:
        >>> from advbudget.theory import implied_slope
        >>> implied_slope("budget", 8, [0.05, 0.5, 0.95]).round(4)
        array([6.0333, 1.9844, 1.0526])
        >>> implied_slope("dr", 8, [0.05, 0.5, 0.95]).round(4)
        array([7., 7., 7.])
    """
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
