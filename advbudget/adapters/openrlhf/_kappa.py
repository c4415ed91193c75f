"""κ_eff in OpenRLHF: one extra actor forward over each group's o+ and o- after the update.

OpenRLHF keeps two log-probs per sample: ``action_log_probs`` (the actor's, recomputed
before the update: π_old) and ``rollout_log_probs`` (vLLM's, the same policy up to engine
numerics, or an older one in async training). Nothing is computed after the update, so
π_new needs a forward pass. Every ``--advbudget.kappa_every`` steps, after ``ppo_train``
and before the weights go to vLLM, the trainer sends the rows of each group's o+ and o-
(2 of every ``n_samples_per_prompt`` samples, groups with an advantage gap only) through
the actor group's own ``forward`` (the method OpenRLHF's experience maker uses for
``action_log_probs``) and logs ``advbudget/kappa_eff/{mean,median,std,min,max,count}``
with OpenRLHF's training status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from advbudget.metrics import kappa_eff_of_pairs, kappa_metric_dict, sequence_logprobs

from .._features import defined, kappa_due
from ._estimators import KappaPairs
from ._hooks import actor_log_probs
from ._options import options_of

_logger = logging.getLogger("advbudget.adapters.openrlhf")

# forward(sequences, action_mask, attention_mask), lists of [b, T] tensors -> list of
# [b, W] action log-probs: the actor group's forward in training, a local model in tests.
Forward = Callable[[list[Any], list[Any], list[Any]], list[Any]]


def kappa_eff_status(pairs: KappaPairs, forward: Forward) -> dict[str, float]:
    """``advbudget/kappa_eff/*`` for one step's pairs, π_new from ``forward``."""
    import torch

    if len(pairs.pairs) == 0:
        return {"advbudget/kappa_eff/count": 0.0}
    sizes = torch.tensor([len(e.index) for e in pairs.experiences])
    starts = torch.cumsum(sizes, 0) - sizes
    wanted = pairs.pairs.rows()  # sorted positions of every o+ and o- (experience order)
    source = torch.searchsorted(starts, wanted, right=True) - 1  # the experience of each row

    rows_of: dict[int, list[int]] = {}  # experience -> its rows among the pairs, sorted
    for position, j in zip(wanted.tolist(), source.tolist(), strict=True):
        rows_of.setdefault(j, []).append(position - int(starts[j]))
    sequences, action_masks, attention_masks, old = [], [], [], []
    for j in sorted(rows_of):  # experiences in order, rows sorted: the order of ``wanted``
        rows = torch.tensor(rows_of[j])
        experience = pairs.experiences[j]
        sequences.append(experience.sequences[rows])
        action_masks.append(experience.action_mask[rows])
        attention_masks.append(experience.attention_mask[rows])
        old.append(sequence_logprobs(experience.action_log_probs[rows], action_masks[-1]))
    new = [
        sequence_logprobs(logp, mask)
        for logp, mask in zip(
            forward(sequences, action_masks, attention_masks), action_masks, strict=True
        )
    ]
    values = kappa_eff_of_pairs(
        pairs.pairs, torch.cat(old).double(), torch.cat(new).double(), rows=wanted
    )
    return kappa_metric_dict(values)


def actor_forward(trainer: Any) -> Forward:
    """The actor group's ``forward``, dispatched as OpenRLHF's experience maker does."""
    import ray

    args = trainer.args
    maker = trainer.experience_maker
    group = trainer.actor_model_group

    def forward(sequences: list[Any], action_mask: list[Any], attention_mask: list[Any]) -> Any:
        if args.ds.enable_sleep:  # the actor was offloaded after fit
            ray.get(group.async_run_method(method_name="reload_states"))
        logprobs = actor_log_probs(
            maker,
            group,
            sequences=sequences,
            action_mask=action_mask,
            attention_mask=attention_mask,
        )
        if args.ds.enable_sleep:
            ray.get(group.async_run_method(method_name="offload_states"))
        return logprobs

    return forward


def after_update(trainer: Any, global_steps: int) -> dict[str, float]:
    """The κ_eff status for this step when due: every ``kappa_every``-th update.

    ``global_steps`` is what OpenRLHF's ``train_step`` passes to ``ppo_train``: the count of
    updates before this one (``ppo_trainer.py:241``); the status is logged as step
    ``global_steps + 1`` (``:264``, ``:551``). So steps K, 2K, ... of the logs carry κ_eff,
    and a resumed run (its count restored from the checkpoint) keeps the schedule.
    A due pass that cannot run says why in one warning; the step goes on.
    """
    maker = trainer.experience_maker
    pairs = getattr(maker, "_advbudget_kappa_pairs", None)
    maker._advbudget_kappa_pairs = None  # never hold a step's batch longer
    step = global_steps + 1
    if not kappa_due(options_of(maker, trainer.args), step):
        return {}
    if pairs is None:
        _logger.warning(
            "advbudget: κ_eff skipped at step %d: no pairs were kept for this step (our "
            "compute_advantages_and_returns did not run in this process)",
            step,
        )
        return {}
    try:
        status = kappa_eff_status(pairs, actor_forward(trainer))
    except Exception as error:  # a metric is never worth the step (OOM, a dead actor, ...)
        _logger.warning(
            "advbudget: κ_eff skipped at step %d: %s: %s", step, type(error).__name__, error
        )
        return {}
    return defined(status)  # OpenRLHF would log NaN
