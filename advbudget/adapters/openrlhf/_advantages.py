"""OpenRLHF's ``compute_advantages_and_returns`` with group advantages from the core.

A drop-in for ``RemoteExperienceMaker.compute_advantages_and_returns(self, experiences)``
(openrlhf 0.11.2, ``openrlhf/trainer/ppo_utils/experience_maker.py`` lines 238-341) for the
estimators in :data:`ESTIMATORS`. It keeps every OpenRLHF step and changes only two:

1. length penalties (``apply_length_penalties``: DAPO overlong, ProRL stop-properly), in place
   on ``experience.rewards`` promoted to at least float32 - OpenRLHF's own function;
2. regrouping by ``experience.index`` into ``[num_prompts, n_samples_per_prompt]`` (each
   prompt's samples contiguous in the original order) and ``info["group_reward_std"]``;
3. CHANGED: the group shaping is :func:`advbudget.compute_advantages` (OpenRLHF's is an
   ``if/elif`` on the estimator name, lines 270-281);
4. ``compute_reward`` (clip to ``--reward.clip_range``, scalar on the last action token,
   minus ``kl_coef * kl``) - OpenRLHF's own function, called ONCE on all experiences
   concatenated (right-padded to the widest action mask), not once per experience;
5. CHANGED: the returns are :func:`cumulative_returns` (a reversed cumsum) instead of the
   Python loop ``get_cumulative_returns``; advantages = returns, gamma forced to 1;
6. ``info["return"]``, ``experience.kl = None``; no batch whitening (OpenRLHF whitens only
   gae/reinforce/reinforce_baseline);
7. ADDED: per-sample ``info["advbudget_skipped"]`` (1.0 where the sample's group got no
   update) and ``info["advbudget_advantage_gap"]`` (its group's max minus min advantage),
   logged by OpenRLHF as ``train/advbudget_*`` (means over samples).

Still to do (see STATUS.md): the patch that routes our estimator names here, the
kappa_eff metric.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from advbudget.core import compute_advantages
from advbudget.core._compute import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL

from ._returns import cumulative_returns

_logger = logging.getLogger("advbudget.adapters.openrlhf")

# Our estimator names -> (core estimator, options). The mirrors of OpenRLHF's own keep its
# conventions: eps 1e-9 and unbiased std for group_norm, exact ties only.
ESTIMATORS: dict[str, tuple[str, dict[str, Any]]] = {
    "reward_budget": ("budget", {"tie_rtol": DEFAULT_TIE_RTOL, "tie_atol": DEFAULT_TIE_ATOL}),
    "advbudget_group_norm": (
        "grpo",
        {"eps": 1e-9, "std_correction": 1, "tie_rtol": 0.0, "tie_atol": 0.0},
    ),
    "advbudget_dr_grpo": ("dr", {"tie_rtol": 0.0, "tie_atol": 0.0}),
    "advbudget_rloo": ("rloo", {"tie_rtol": 0.0, "tie_atol": 0.0}),
}


def core_estimator(name: str, args: Any = None) -> tuple[str, dict[str, Any]]:
    """The core estimator and its options for our OpenRLHF estimator ``name``.

    ``reward_budget`` reads its budget from ``args.advbudget.budget`` when present
    (default 1.0; set by the entry point's ``--advbudget.budget``).
    """
    if name not in ESTIMATORS:
        raise ValueError(f"estimator: expected one of {sorted(ESTIMATORS)}, got {name!r}")
    core, options = ESTIMATORS[name]
    options = dict(options)
    if core == "budget":
        budget = getattr(getattr(args, "advbudget", None), "budget", None)
        options["budget"] = 1.0 if budget is None else float(budget)
    return core, options


def compute_advantages_and_returns(
    maker: Any, experiences: list[Any], estimator: str | None = None
) -> list[Any]:
    """OpenRLHF's step, for our estimators (``estimator`` defaults to the configured one).

    ``maker`` is the ``RemoteExperienceMaker`` (``maker.strategy.args``, ``maker.kl_ctl``).
    """
    import torch

    # pyproject's mypy overrides do not list openrlhf yet (see STATUS.md).
    from openrlhf.models.utils import (  # type: ignore[import-not-found, unused-ignore]
        compute_reward,
    )
    from openrlhf.trainer.ppo_utils.length_penalty import (  # type: ignore[import-not-found, unused-ignore]
        apply_length_penalties,
    )

    args = maker.strategy.args
    name = estimator or args.algo.advantage.estimator
    core, options = core_estimator(name, args)
    n = int(args.rollout.n_samples_per_prompt)
    if n < 2:
        raise ValueError(f"{name} requires --rollout.n_samples_per_prompt > 1, got {n}")

    for experience in experiences:
        experience.rewards = experience.rewards.to(
            torch.promote_types(experience.rewards.dtype, torch.float32)
        )
    apply_length_penalties(experiences, args)

    exp_len = [len(experience.index) for experience in experiences]
    indices = torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))
    raw_rewards = torch.cat([experience.rewards for experience in experiences], dim=0)
    rewards = torch.empty_like(raw_rewards)
    rewards[indices] = raw_rewards  # the original prompt order: groups contiguous
    if rewards.numel() % n:
        raise ValueError(
            f"{rewards.numel()} samples are not a whole number of groups of "
            f"n_samples_per_prompt={n}"
        )

    stds = rewards.reshape(-1, n).std(-1, keepdim=True).expand(-1, n).reshape(-1)
    for experience, std in zip(experiences, torch.split(stds[indices], exp_len), strict=True):
        experience.info["group_reward_std"] = std

    result = compute_advantages(rewards, core, group_size=n, **options)
    # Per-sample metrics (OpenRLHF averages 1-D tensors of length B in ``info`` into its logs).
    group_index = result.group_index
    metrics = {
        "advbudget_skipped": result.group_skipped[group_index].to(rewards.dtype),
        "advbudget_advantage_gap": result.group_advantage_gap[group_index].to(rewards.dtype),
    }
    for key, values in metrics.items():
        for experience, part in zip(
            experiences, torch.split(values[indices], exp_len), strict=True
        ):
            experience.info[key] = part

    shaped = result.advantages.to(rewards.dtype)[indices]  # experience order, concatenated

    if args.algo.advantage.gamma != 1.0:
        _logger.warning("gamma is set to 1.0 for %s", name)
        args.algo.advantage.gamma = 1.0

    # One compute_reward and one cumsum for the whole batch (the per-experience Python work
    # dominated at short lengths): right-pad every experience to the widest, then split.
    widths = [int(e.action_mask.shape[1]) for e in experiences]
    width = max(widths)

    def padded(tensor: Any) -> Any:
        return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))

    mask = torch.cat([padded(e.action_mask) for e in experiences], dim=0)
    kl = torch.cat([padded(e.kl) for e in experiences], dim=0)
    reward = compute_reward(
        shaped,
        maker.kl_ctl.value,
        kl,
        action_mask=mask,
        reward_clip_range=args.reward.clip_range,
    )
    returns = cumulative_returns(reward, mask)
    totals = reward.sum(dim=-1)
    parts = zip(
        experiences,
        widths,
        torch.split(returns, exp_len),
        torch.split(totals, exp_len),
        strict=True,
    )
    for experience, w, rows, total in parts:
        experience.returns = rows[:, :w].contiguous()
        experience.advantages = experience.returns.clone()
        experience.info["return"] = total
        experience.kl = None
    return experiences
