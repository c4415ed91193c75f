"""From one advantage per rollout to one per response token."""

from __future__ import annotations

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
