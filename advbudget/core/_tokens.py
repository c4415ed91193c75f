"""Per-token steps: from one advantage per rollout to one per response token, and the
estimators whose advantage differs along a response (reward-to-go, token whitening).

A response mask marks the tokens the policy produced; tokens outside it (padding, the
observation spans of a multi-turn trajectory) get 0 and carry no reward.
"""

from __future__ import annotations

import math
from typing import Any

from ._arrays import Array, as_array, check_same_device


def token_advantages(advantages: Any, response_mask: Any) -> Array:
    """Broadcast per-rollout advantages ``[B]`` over a response mask ``[B, T]``.

    Tokens outside the mask (padding, prompt) get 0. The result has the advantages'
    dtype and the mask's namespace and device.

    Examples:
        >>> import numpy as np
        >>> from advbudget import token_advantages
        >>> token_advantages(np.array([0.5, -0.5]), np.array([[1, 1, 0], [1, 0, 0]]))
        array([[ 0.5,  0.5,  0. ],
               [-0.5,  0. ,  0. ]])
    """
    advantages, xp = as_array(advantages, "advantages")
    response_mask, _ = as_array(response_mask, "response_mask")
    if advantages.ndim != 1:
        raise ValueError(
            f"advantages: expected a 1-D array [B], got shape {tuple(advantages.shape)}"
        )
    if response_mask.ndim != 2 or response_mask.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"response_mask: expected shape ({advantages.shape[0]}, T) to match "
            f"advantages, got {tuple(response_mask.shape)}"
        )
    check_same_device(advantages, response_mask, "advantages", "response_mask")
    inside = response_mask if xp.isdtype(response_mask.dtype, "bool") else response_mask != 0
    return xp.where(inside, advantages[:, None], xp.zeros_like(advantages)[:, None])


def _token_inputs(values: Any, response_mask: Any, name: str) -> tuple[Array, Array, Any]:
    """``values`` (``[B, T]`` real floating) and the mask as 0/1 of its dtype, checked."""
    values, xp = as_array(values, name)
    response_mask, _ = as_array(response_mask, "response_mask")
    if values.ndim != 2:
        raise ValueError(f"{name}: expected shape [B, T], got {tuple(values.shape)}")
    if not xp.isdtype(values.dtype, "real floating"):
        raise TypeError(f"{name}: expected a real floating dtype, got {values.dtype}")
    if tuple(response_mask.shape) != tuple(values.shape):
        raise ValueError(
            f"response_mask: expected shape {tuple(values.shape)} like {name}, "
            f"got {tuple(response_mask.shape)}"
        )
    check_same_device(values, response_mask, name, "response_mask")
    inside = response_mask if xp.isdtype(response_mask.dtype, "bool") else response_mask != 0
    return values, xp.astype(inside, values.dtype), xp


def reward_to_go(token_rewards: Any, response_mask: Any, *, gamma: float = 1.0) -> Array:
    """The discounted return of every response token: ``G_t = r_t + gamma * G_next``, where
    ``G_next`` is the return of the next token *inside* the mask.

    Tokens outside the mask are skipped, not discounted: they get 0, add no reward and
    count no step of the discount, so a reward reaches the earlier turns of a multi-turn
    trajectory across its observation spans (verl's ``reinforce_plus_plus``, 0.9.1, its
    #7278). ``gamma`` 1 is one reversed cumulative sum; any other ``gamma`` a scan over
    the tokens (linear in ``T``).

    Args:
        token_rewards: ``[B, T]`` real floating (the outcome reward on a response's last
            token, plus any dense terms: a KL penalty, process rewards).
        response_mask: ``[B, T]``, bool or 0/1.
        gamma: the discount, a finite number.

    Returns:
        ``[B, T]``, the dtype, namespace and device of ``token_rewards``.

    Examples:
        >>> import numpy as np
        >>> r = np.array([[0.0, 0.0, 0.0, 0.0, 2.0], [0.1, 0.0, 1.0, 0.0, 0.0]])
        >>> m = np.array([[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]])
        >>> reward_to_go(r, m)
        array([[2. , 2. , 0. , 0. , 2. ],
               [1.1, 1. , 1. , 0. , 0. ]])
        >>> reward_to_go(r, m, gamma=0.5)[0]
        array([0.5, 1. , 0. , 0. , 2. ])
    """
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma):
        raise ValueError(f"gamma: expected a finite number, got {gamma!r}")
    rewards, mask, xp = _token_inputs(token_rewards, response_mask, "token_rewards")
    if gamma == 1:
        inside = rewards * mask
        return xp.flip(xp.cumulative_sum(xp.flip(inside, axis=1), axis=1), axis=1) * mask
    running = xp.zeros_like(rewards[:, 0])
    columns = []
    for t in range(rewards.shape[1] - 1, -1, -1):
        new = rewards[:, t] + gamma * running
        columns.append(new * mask[:, t])
        running = xp.where(mask[:, t] != 0, new, running)
    return xp.stack(columns[::-1], axis=1)


def whiten_tokens(
    values: Any,
    response_mask: Any,
    *,
    std_correction: int = 1,
    var_eps: float = 1e-8,
    var_floor: float = 0.0,
    std_norm: bool = True,
) -> Array:
    """``(v - mean) / sqrt(max(var + var_eps, var_floor))`` over the tokens of the mask,
    one mean and variance for the whole batch (``std_correction`` 1: unbiased, as verl's
    ``masked_whiten``); 0 outside the mask. ``std_norm`` False only subtracts the mean.
    A mask of at most ``std_correction`` tokens has variance 0. The keywords are the
    options of the catalogue's whitened estimators (``reinforce``, ...), by the same names.

    Examples:
        >>> import numpy as np
        >>> whiten_tokens(np.array([[1.0, 1.0, 9.0], [0.0, 0.0, 0.0]]),
        ...               np.array([[1, 1, 0], [1, 1, 0]]), var_eps=0.0)
        array([[ 0.8660254,  0.8660254,  0.       ],
               [-0.8660254, -0.8660254,  0.       ]])
    """
    values, mask, xp = _token_inputs(values, response_mask, "values")
    total = xp.sum(mask)
    mean = xp.sum(values * mask) / xp.where(total > 0, total, xp.ones_like(total))
    centred = (values - mean) * mask
    if not std_norm:
        return centred
    dof = total - std_correction
    square = xp.sum(centred * centred)
    variance = xp.where(dof > 0, square / xp.where(dof > 0, dof, xp.ones_like(dof)), 0.0)
    denominator = variance + var_eps
    scale = xp.sqrt(xp.where(denominator < var_floor, var_floor, denominator))
    positive = scale > 0
    return centred * xp.where(positive, 1 / xp.where(positive, scale, 1.0), 0.0)
