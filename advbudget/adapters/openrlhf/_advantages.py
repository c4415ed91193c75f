"""OpenRLHF's ``compute_advantages_and_returns`` with group advantages from the core.

A drop-in for ``RemoteExperienceMaker.compute_advantages_and_returns(self, experiences)``
(openrlhf 0.11.2, ``openrlhf/trainer/ppo_utils/experience_maker.py`` lines 238-341) for the
estimators in :data:`ESTIMATORS`. OpenRLHF's steps, in its order:

1. rewards promoted to at least float32; length penalties (DAPO overlong, ProRL
   stop-properly) by OpenRLHF's own ``apply_length_penalties``, when configured;
2. regrouping by ``experience.index`` into ``[num_prompts, n_samples_per_prompt]`` (each
   prompt's samples contiguous), ``info["group_reward_std"]`` (unbiased, as OpenRLHF);
3. CHANGED: the group shaping is :func:`advbudget.compute_advantages` (OpenRLHF's is an
   ``if/elif`` on the estimator name);
4. OpenRLHF's ``compute_reward`` (clip to ``--reward.clip_range``, the scalar on the last
   action token, minus ``kl_coef * kl``), called once on all experiences stacked (right-padded
   to the widest action mask) instead of once per experience;
5. CHANGED: returns by :func:`cumulative_returns` (one reversed cumsum) instead of the loop
   over the response length; advantages = returns; gamma forced to 1 (with OpenRLHF's warning);
6. ``info["return"]``, ``experience.kl = None``; no batch whitening (OpenRLHF whitens only
   gae/reinforce/reinforce_baseline).

ADDED: ``info["advbudget/..."]``, the advantage metrics of the verl adapter as per-sample
lists whose sample means OpenRLHF logs (:func:`sample_metrics`); and, when
``--advbudget.kappa_every`` is set, each group's o+ / o- kept on the maker for the κ_eff
pass after the update (:mod:`._kappa`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import Any

from advbudget.core import compute_advantages
from advbudget.core._compute import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL
from advbudget.metrics import advantage_metrics

from ._returns import cumulative_returns

_logger = logging.getLogger("advbudget.adapters.openrlhf")
METRIC_PREFIX = "advbudget/"

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
    The tensors written to the experiences are views of batch tensors only when Ray ships a
    view's own elements (its zero-copy tensor serialisation, on in OpenRLHF's runtime env);
    otherwise each owns its storage.
    """
    import torch
    from openrlhf.models.utils import compute_reward
    from openrlhf.trainer.ppo_utils.length_penalty import (
        apply_length_penalties,
    )

    args = maker.strategy.args
    name = estimator or args.algo.advantage.estimator
    core, options = core_estimator(name, args)
    n = int(args.rollout.n_samples_per_prompt)
    if n < 2:
        raise ValueError(f"{name} requires --rollout.n_samples_per_prompt > 1, got {n}")
    if not experiences:
        raise ValueError("experiences: expected at least one Experience, got an empty list")

    for experience in experiences:
        dtype = torch.promote_types(experience.rewards.dtype, torch.float32)
        if experience.rewards.dtype != dtype:
            experience.rewards = experience.rewards.to(dtype)
    if _length_penalty_configured(args):
        apply_length_penalties(experiences, args)

    sizes = [len(experience.index) for experience in experiences]
    # order[k]: the prompt-major position of the k-th sample in experience order.
    order = torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))
    raw_rewards = torch.cat([experience.rewards for experience in experiences])
    if raw_rewards.numel() % n:
        raise ValueError(
            f"experiences: {raw_rewards.numel()} samples are not a whole number of groups of "
            f"n_samples_per_prompt={n}"
        )
    rewards = torch.empty_like(raw_rewards)
    rewards[order] = raw_rewards  # prompt-major: each group's samples contiguous

    result = compute_advantages(rewards, core, group_size=n, **options)
    shaped = result.advantages.to(rewards.dtype)[order]  # back to experience order

    if args.algo.advantage.gamma != 1.0:
        _logger.warning("gamma is set to 1.0 for %s", name)
        args.algo.advantage.gamma = 1.0

    # One compute_reward and one reversed cumsum over every experience at once (per
    # experience, the Python work dominates): rows right-padded to the widest action mask.
    widths = [int(experience.action_mask.shape[1]) for experience in experiences]
    layout = _Layout(sizes, widths)
    mask = layout.stack([e.action_mask for e in experiences])
    kl = layout.stack([e.kl for e in experiences])
    reward = compute_reward(
        shaped, maker.kl_ctl.value, kl, action_mask=mask, reward_clip_range=args.reward.clip_range
    )
    returns = cumulative_returns(reward, mask)

    # OpenRLHF's own per-sample info, as tensors.
    info = {
        "group_reward_std": rewards.reshape(-1, n).std(-1).repeat_interleave(n)[order],
        "return": reward.sum(-1),
    }
    metrics = sample_metrics(result, order)
    starts = list(itertools.accumulate([0, *sizes[:-1]]))  # each experience's first sample

    # Each experience gets views of batch tensors when Ray ships a view's own elements,
    # else copies: a view pickled by default carries its whole storage through Ray.
    copy = not _ray_ships_views_compactly()
    returns_flat = layout.flatten(returns)
    parts = zip(
        experiences,
        starts,
        layout.blocks(returns_flat),
        layout.blocks(returns_flat.clone()),
        *(values.split(sizes) for values in info.values()),
        strict=True,
    )
    for experience, start, returns_block, advantages_block, *info_values in parts:
        if copy:
            returns_block, advantages_block = returns_block.clone(), advantages_block.clone()
            info_values = [values.clone() for values in info_values]
        experience.returns = returns_block
        experience.advantages = advantages_block
        experience.info.update(zip(info, info_values, strict=True))
        end = start + len(experience.index)
        experience.info.update((key, values[start:end]) for key, values in metrics.items())
        experience.kl = None
    _remember_for_kappa(maker, experiences, result, order)
    return experiences


def sample_metrics(result: Any, order: Any) -> dict[str, list[float]]:
    """:func:`advbudget.metrics.advantage_metrics` as per-sample lists in experience order
    (``order``: prompt-major positions), keyed ``advbudget/...`` as in the verl adapter.

    OpenRLHF logs the sample mean of each ``info`` entry, so the fractions and the mean
    advantage are per-sample values whose mean is the batch's; the advantage gap (a mean
    over kept groups), std, min and max are the batch's value for every sample. Python lists
    (which OpenRLHF's info accepts) cost no tensor per experience.
    """
    import torch

    num = len(order)
    per_sample = torch.stack(
        [
            result.group_skipped[result.group_index],  # skipped_group_fraction: equal groups
            result.advantages > 0,
            result.valid,
            result.advantages,
        ]
    ).double()[:, order]
    batch = advantage_metrics(result)
    names = (
        "skipped_group_fraction",
        "positive_advantage_fraction",
        "valid_fraction",
        "advantage_mean",
    )
    metrics = dict(zip(names, per_sample.tolist(), strict=True))
    for name in ("advantage_gap_mean", "advantage_std", "advantage_min", "advantage_max"):
        metrics[name] = [batch[name]] * num
    return {METRIC_PREFIX + name: values for name, values in metrics.items()}


def _ray_ships_views_compactly() -> bool:
    """Whether Ray serialises a tensor view as its own elements: with its zero-copy tensor
    serialisation (``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1``, set by OpenRLHF's ``train`` and
    by our entry point). Ray's default pickling sends a view's whole storage."""
    try:
        from ray._private import ray_constants
    except ImportError:
        return False
    return bool(getattr(ray_constants, "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", False))


def _length_penalty_configured(args: Any) -> bool:
    """Whether OpenRLHF's ``apply_length_penalties`` would change anything."""
    reward = args.reward
    return (
        getattr(reward, "overlong_buffer_len", None) is not None
        or getattr(reward, "stop_properly_penalty_coef", None) is not None
    )


class _Layout:
    """Experiences of ``[B_i, W_i]`` tensors as one ``[sum B_i, max W_i]`` batch (rows
    right-padded with zeros) and back, with a few whole-batch operations instead of a few
    per experience: ``keep`` marks the real columns of each row, and the kept elements in
    row-major order are the experiences' blocks one after the other."""

    def __init__(self, sizes: list[int], widths: list[int]) -> None:
        import torch

        self.sizes = sizes
        self.widths = widths
        self.block_sizes = [size * width for size, width in zip(sizes, widths, strict=True)]
        row_widths = torch.tensor(widths).repeat_interleave(torch.tensor(sizes))
        self.keep = torch.arange(max(widths)) < row_widths[:, None]

    def stack(self, tensors: list[Any]) -> Any:
        """The batch ``[sum B_i, max W_i]`` of the experiences' ``[B_i, W_i]`` tensors."""
        import torch

        out = tensors[0].new_zeros(self.keep.shape)
        # masked_scatter_/masked_select: several times faster than boolean indexing
        return out.masked_scatter_(self.keep, torch.cat([t.reshape(-1) for t in tensors]))

    def flatten(self, batch: Any) -> Any:
        """The real elements of a batch: every experience's block, row-major, in order."""
        import torch

        return torch.masked_select(batch, self.keep)

    def blocks(self, flat: Any) -> list[Any]:
        """Views ``[B_i, W_i]`` of a :meth:`flatten` result, one per experience."""
        return [
            block.view(size, width)
            for block, size, width in zip(
                flat.split(self.block_sizes), self.sizes, self.widths, strict=True
            )
        ]


def kappa_every(args: Any) -> int:
    """``--advbudget.kappa_every`` (0, the default without our entry point: never)."""
    return int(getattr(getattr(args, "advbudget", None), "kappa_every", 0) or 0)


def _remember_for_kappa(maker: Any, experiences: list[Any], result: Any, order: Any) -> None:
    """Keep each group's o+ and o- (first largest and smallest advantage, groups with a gap
    only) for the κ_eff pass after the update; nothing is kept when κ_eff is off."""
    import torch

    if not kappa_every(maker.strategy.args):
        return
    n = int(maker.strategy.args.rollout.n_samples_per_prompt)
    grouped = result.advantages.reshape(-1, n)
    with_gap = result.group_advantage_gap > 0
    base = torch.arange(grouped.shape[0]) * n
    position = torch.empty_like(order)  # prompt-major position -> experience order
    position[order] = torch.arange(len(order))
    maker._advbudget_kappa_pairs = KappaPairs(
        experiences=experiences,
        top=position[(base + grouped.argmax(-1))[with_gap]],
        bottom=position[(base + grouped.argmin(-1))[with_gap]],
    )


@dataclasses.dataclass
class KappaPairs:
    """One step's κ_eff pairs: ``top``/``bottom`` are positions in the concatenated
    experiences (experience order), one pair per group with an advantage gap."""

    experiences: list[Any]
    top: Any
    bottom: Any
