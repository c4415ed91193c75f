"""What the verl adapter does with skipped rows: ``+algorithm.advbudget.skipped_groups``.

A skipped row is a response of a group the estimator skipped, or one whose NaN reward
``nan_policy=omit`` left out (the core's ``AdvantageResult.valid`` is False for it).

- ``keep`` (default): verl's own behaviour, advantage 0, the rows stay in every normaliser.
- ``drop``: the ``advbudget_*`` trainers zero the ``response_mask`` and ``loss_mask`` of the
  skipped rows for the actor update only (restored after it, so verl's response-length
  metrics still see them), so they leave the policy loss, the entropy bonus and the KL loss
  with their token counts (``token-mean``'s ``batch_num_tokens`` is the all-reduced sum of
  ``loss_mask``). verl divides the ``seq-mean-*`` modes by a constant ``global_batch_size``
  (``ppo_mini_batch_size * rollout.n`` rows, empty rows included): with ``drop`` the
  actor's ``train_batch`` replaces it by the mini-batch's rows with a non-empty mask,
  all-reduced over the data-parallel ranks (:func:`with_kept_row_count`).
- ``resample``: DAPO's dynamic sampling with the estimator's skip rule, through verl's V1
  sync replay buffer (:mod:`advbudget.adapters.verl._resample`).
"""

from __future__ import annotations

import functools
from typing import Any

from ._options import key_of, option, read_options

SKIPPED_GROUPS_OPTION = key_of("skipped_groups")

#: Why ``resample`` runs only with the sync trainer.
RESAMPLE_REFUSED = (
    "resample replaces verl 0.9.1's sync replay buffer (its DAPO filter, with the "
    "estimator's skip rule and a cap on rounds); the async ones refill in their own way: "
    "use trainer.v1.trainer_mode=advbudget_sync, or drop"
)

#: The non-tensor key of the actor-update batch that turns the kept-row count on.
DROP_FLAG = "advbudget_skipped_groups"

SEQ_MEAN_MODES = ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def skipped_groups(config: Any) -> str:
    """``+algorithm.advbudget.skipped_groups`` of verl's ``config.algorithm`` (default keep).

    Examples:
        >>> skipped_groups({"advbudget": {"skipped_groups": "Drop"}}), skipped_groups(None)
        ('drop', 'keep')
        >>> skipped_groups({"advbudget": {"skipped_groups": "skip"}})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: algorithm.advbudget.skipped_groups: expected one of keep, drop, ... got 'skip'
    """
    return read_options(config).skipped_groups


def check_options(config: Any, *, trainer_mode: str | None) -> str:
    """Validate the skipped-group options of verl's full ``config``; returns the choice.

    ``trainer_mode`` is the v1 trainer mode that will run (None: the legacy trainer).
    ``drop`` needs an ``advbudget_*`` trainer (it edits the actor-update batch) and a group
    estimator advbudget describes (the skip rule comes from it).
    """
    from ._metrics import metrics_estimator

    algorithm = option(config, "algorithm", None)
    choice = read_options(algorithm).skipped_groups
    if choice == "keep":
        return choice
    if not (trainer_mode or "").startswith("advbudget_"):
        modes = (
            ""
            if choice == "resample"
            else " (or advbudget_colocate_async, advbudget_separate_async)"
        )
        raise ValueError(
            f"{SKIPPED_GROUPS_OPTION}: {choice!r} needs trainer.use_v1=true and "
            f"trainer.v1.trainer_mode=advbudget_sync{modes}, got trainer mode {trainer_mode!r}"
        )
    if metrics_estimator(algorithm) is None:
        estimator = option(algorithm, "adv_estimator", None)
        raise ValueError(
            f"{SKIPPED_GROUPS_OPTION}: {choice!r} needs a group estimator advbudget describes "
            f"(reward_budget, advbudget_*, grpo, rloo, ...), got adv_estimator={estimator!r}"
        )
    if choice == "resample":
        _check_resample(config, trainer_mode)
    return choice


def _check_resample(config: Any, trainer_mode: str | None) -> None:
    """resample replaces verl's sync replay buffer: nothing else may claim it."""
    if trainer_mode != "advbudget_sync":
        raise ValueError(
            f"{SKIPPED_GROUPS_OPTION}: 'resample' is not available with trainer mode "
            f"{trainer_mode!r}: {RESAMPLE_REFUSED}"
        )
    sampler = option(config, "trainer.v1.sampler.custom_sampler", None)
    if option(sampler, "path", None) or option(sampler, "name", None):
        raise ValueError(
            f"{SKIPPED_GROUPS_OPTION}: 'resample' brings its own replay buffer, got "
            f"trainer.v1.sampler.custom_sampler.path={option(sampler, 'path', None)!r}: "
            "leave it unset"
        )
    if bool(option(config, "algorithm.filter_groups.enable", False)):
        raise ValueError(
            f"{SKIPPED_GROUPS_OPTION}: 'resample' is advbudget's DAPO filter, got verl's "
            "algorithm.filter_groups.enable=true as well: leave verl's off"
        )
    reward_model = option(config, "reward.reward_model", None)
    if bool(option(reward_model, "enable", False)) and not bool(
        option(reward_model, "enable_resource_pool", False)
    ):
        raise ValueError(
            f"{SKIPPED_GROUPS_OPTION}: 'resample' needs the rewards when groups finish, got a "
            "colocated reward model (reward.reward_model.enable_resource_pool=false), which "
            "scores after sampling: use a rule-based reward or enable_resource_pool=true"
        )


def drop_rule(loss_agg_mode: str, loss_scale_factor: Any = None) -> str:
    """One line: what ``drop`` does to verl's loss under ``loss_agg_mode``.

    Examples:
        >>> print(drop_rule("token-sum").split(": ", 2)[2])
        skipped rows leave the policy loss, the entropy bonus and the KL loss (a sum: no normaliser)
        >>> "the constant 4096 (actor" in drop_rule("seq-mean-token-sum-norm", 4096)
        True
    """
    head = f"advbudget: skipped_groups=drop, loss_agg_mode={loss_agg_mode}: skipped rows leave"
    terms = "the policy loss, the entropy bonus and the KL loss"
    if loss_agg_mode == "token-mean":
        return f"{head} {terms} and their token count (as a batch of the kept groups only)"
    if loss_agg_mode == "token-sum":
        return f"{head} {terms} (a sum: no normaliser)"
    if loss_agg_mode == "seq-mean-token-sum-norm":
        constant = (
            f"the constant {loss_scale_factor} (actor.loss_scale_factor)"
            if loss_scale_factor
            else "verl's padded response length of each micro-batch (skipped rows still "
            "pad it; set actor.loss_scale_factor for a true constant)"
        )
        return (
            f"{head} {terms} and their sequence count; the token normaliser, {constant}, "
            "stays as it is by design (Dr.GRPO)"
        )
    return f"{head} {terms} and their sequence count (as a batch of the kept groups only)"


def kept_row_count(loss_mask: Any) -> Any:
    """How many rows of ``loss_mask`` (``[B, L]``, or verl's jagged nested tensor) have a
    token in the loss: a 0-d int64 tensor (the normaliser of the ``seq-mean-*`` modes)."""
    import torch

    if loss_mask.is_nested:
        offsets = loss_mask.offsets()
        rows = torch.repeat_interleave(torch.arange(len(offsets) - 1), offsets.diff().cpu())
        sums = torch.zeros(len(offsets) - 1, dtype=torch.float64)
        sums.index_add_(0, rows, loss_mask.values().detach().to("cpu", torch.float64))
    else:
        sums = loss_mask.detach().to("cpu", torch.float64).sum(-1)
    return (sums > 0).sum()


_SAID: list[bool] = []


def with_kept_row_count(train_batch: Any) -> Any:
    """verl's ``TrainingWorker.train_batch`` wrapped so that a mini-batch carrying
    :data:`DROP_FLAG` = ``drop`` gets ``global_batch_size`` = its rows with a non-empty
    ``loss_mask``, summed over the data-parallel group, in place of the constant mini-batch
    size the trainer set; any other batch passes through untouched. Installed only in the
    workers of an ``advbudget_*`` trainer with drop (:func:`._hooks.install_requested`)."""

    @functools.wraps(train_batch)
    def wrapper(self: Any, data: Any) -> Any:
        from verl.utils import tensordict_utils as tu

        if tu.get_non_tensor_data(data=data, key=DROP_FLAG, default=None) == "drop":
            before = tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)
            kept = _global_kept_rows(self, data)
            tu.assign_non_tensor(data, global_batch_size=kept)
            if not _SAID and before is not None and kept < before:
                _SAID.append(True)  # once a process, the first time it matters
                print(
                    f"advbudget: skipped_groups=drop: the actor's seq-mean-* row count is the "
                    f"mini-batch's rows with a non-empty loss_mask: {kept} of {before}",
                    flush=True,
                )
        return train_batch(self, data)

    return wrapper


def _global_kept_rows(worker: Any, data: Any) -> int:
    """The kept rows of this mini-batch over every data-parallel rank (at least 1: a
    mini-batch with none has a zero loss either way)."""
    import torch

    count = kept_row_count(data["loss_mask"])
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from verl.utils.device import get_device_id

        from ._hooks import data_parallel_group

        count = count.to(get_device_id())
        group = data_parallel_group(worker)
        torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.SUM, group=group)
    return max(int(count.item()), 1)
