"""Per-token returns without OpenRLHF's Python loop over the response length (at gamma 1).

OpenRLHF 0.11.2 (``RemoteExperienceMaker.get_cumulative_returns``,
``openrlhf/trainer/ppo_utils/experience_maker.py`` lines 389-421) computes, for the group
estimators (gamma forced to 1)::

    rewards = action_mask * rewards
    for t in reversed(range(L)):
        cumulative = rewards[:, t] + gamma * cumulative
        returns[:, t] = cumulative

that is ``returns[:, t] = sum_{s >= t} rewards[:, s]``: a reversed cumulative sum, one
kernel call instead of L Python iterations.

Numerics: with KL off (the common GRPO/DAPO setting) each row has one non-zero reward
(on its last action token) and the result is bit-identical to the loop. With KL terms in
the reward the sums are the same but the rounding differs: the loop rounds to the reward
dtype (float32) after every token, ``torch.cumsum`` on CPU accumulates float32 in double,
so the vectorised result is at least as accurate; the difference is within float32
rounding of the row's absolute sum (tests: ``tests/adapters/openrlhf/test_returns.py``).
"""

from __future__ import annotations

from typing import Any


def cumulative_returns(rewards: Any, action_mask: Any = None, gamma: float = 1.0) -> Any:
    """``returns[:, t] = sum_{s >= t} gamma**(s - t) * (action_mask * rewards)[:, s]``.

    ``gamma`` 1 (OpenRLHF's for every group estimator) is one reversed cumulative sum; any
    other (OpenRLHF keeps it for ``reinforce``) OpenRLHF's scan over the tokens, whose
    discount counts every position, masked ones too (unlike verl's, which skips them).

    Args:
        rewards: ``[B, L]`` torch tensor (the shaped reward: the sequence reward on the last
            action token, minus the KL terms).
        action_mask: ``[B, L]`` bool or 0/1 tensor, or None (no masking), as OpenRLHF.
        gamma: the discount.

    Returns:
        ``[B, L]`` tensor of ``rewards``'s dtype.

    Examples:
        >>> import torch
        >>> r = torch.tensor([[0.0, 0.5, 1.0, 7.0], [2.0, 0.0, 0.0, 0.0]])
        >>> m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
        >>> cumulative_returns(r, m)
        tensor([[1.5000, 1.5000, 1.0000, 0.0000],
                [2.0000, 0.0000, 0.0000, 0.0000]])
    """
    import torch

    if rewards.ndim != 2:
        raise ValueError(f"rewards: expected shape [B, L], got {tuple(rewards.shape)}")
    dtype = rewards.dtype  # OpenRLHF's returns are zeros_like(rewards) before masking
    if action_mask is not None:
        if tuple(action_mask.shape) != tuple(rewards.shape):
            raise ValueError(
                f"action_mask: expected shape {tuple(rewards.shape)}, "
                f"got {tuple(action_mask.shape)}"
            )
        rewards = action_mask * rewards  # as OpenRLHF: bool * float -> float
    # The loop accumulates in at least float32 (its accumulator starts as float32 zeros).
    work = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    if gamma == 1.0:
        return work.flip(-1).cumsum(-1).flip(-1).to(dtype)
    returns = torch.zeros_like(work)
    cumulative = torch.zeros_like(work[:, 0])
    for t in range(work.shape[1] - 1, -1, -1):
        cumulative = work[:, t] + gamma * cumulative
        returns[:, t] = cumulative
    return returns.to(dtype)
