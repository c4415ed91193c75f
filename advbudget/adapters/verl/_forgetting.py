"""spo's ``rho="kl"`` in verl's V1 trainer modes: SPO's KL-adaptive forgetting, measured
with verl's own actor (:class:`~advbudget.adapters._features.LastResponses` does the rest).

Before the advantage step (after verl's ``old_log_prob`` pass, before the actor update),
each prompt of the step keeps its last response with its ``old_log_probs``: the whole
sample as TransferQueue held it, since verl clears a step's rows when the step ends
(``trainer_base.py:511``). When the prompt comes back, its kept sample is put again under
a key of its own in a partition of its own (an async trainer's sampler reads ``train``),
padded with copies to what the actor's ``compute_log_prob`` accepts
(:func:`._hooks.log_prob_rows`), scored by the actor as it is now, read back and cleared.
verl's own rows are not touched.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core import spo_rho
from .._features import LastResponses
from ._hooks import (
    data_parallel_size,
    log_prob_micro_batch_size,
    log_prob_rows,
    response_log_probs,
)
from ._metrics import METRIC_PREFIX

#: The TransferQueue partition kept responses are scored again in.
RESCORE_PARTITION = "advbudget_spo_rescore"


@dataclass(frozen=True)
class KeptSample:
    """One response of an earlier step: its fields and tag, as TransferQueue held them."""

    fields: dict[str, Any]
    tag: dict[str, Any]


def forgetting(
    trainer: Any, batch: Any, kept: LastResponses, row_prompts: list[Any]
) -> tuple[np.ndarray, dict[str, float]]:
    """spo's ρ for each row of ``batch`` (a ``KVBatchMeta``; ``row_prompts`` its rows'
    prompts, None for verl's padding rows) and the metrics of :meth:`LastResponses.rho`.
    A padding row keeps no response and takes SPO's ceiling (spo leaves it out)."""
    import transfer_queue as tq

    real = [i for i, prompt in enumerate(row_prompts) if prompt is not None]
    prompts = [row_prompts[i] for i in real]

    def now(rows: list[int]) -> tuple[list[KeptSample], list[np.ndarray]]:
        if not rows:
            return [], []
        keys = [batch.keys[real[r]] for r in rows]
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id)
        samples = [
            KeptSample(_sample(data[j]), copy.deepcopy(batch.tags[real[r]]))
            for j, r in enumerate(rows)
        ]
        old, mask = data["old_log_probs"], data["response_mask"]
        return samples, [_response_values(old[j], mask[j]) for j in range(len(rows))]

    rho, metrics = kept.rho(
        prompts, now, lambda samples: rescore(trainer, samples), prefix=METRIC_PREFIX
    )
    by_prompt = dict(zip(prompts, rho.tolist(), strict=True))
    ceiling = float(spo_rho(np.zeros(1))[0])
    return np.array([by_prompt.get(prompt, ceiling) for prompt in row_prompts]), metrics


def rescore(trainer: Any, samples: list[KeptSample]) -> list[np.ndarray]:
    """The actor's log-probs now of each kept response's tokens (its ``response_mask``):
    one ``compute_log_prob`` over the samples, put back under keys of their own and
    padded with copies of the first to a multiple of what the actor accepts."""
    if not samples:
        return []
    import transfer_queue as tq
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    config = trainer.config.actor_rollout_ref
    size = log_prob_rows(
        len(samples),
        dp_size=data_parallel_size(trainer.actor_rollout_wg),
        micro_batch_size=log_prob_micro_batch_size(config),
    )
    padded = samples + [samples[0]] * (size - len(samples))
    run = uuid.uuid4().hex
    keys = [f"advbudget{run}_{i}_0" for i in range(size)]
    forwarded = tq.kv_batch_put(
        keys=keys,
        partition_id=RESCORE_PARTITION,
        fields=list_of_dict_to_tensordict([s.fields for s in padded]),
        tags=[s.tag for s in padded],
    )
    try:
        forwarded.extra_info.update(
            {
                "calculate_entropy": False,
                "compute_loss": False,
                "temperature": config.rollout.temperature,
            }
        )
        trainer.actor_rollout_wg.compute_log_prob(forwarded)
        data = tq.kv_batch_get(
            keys=keys[: len(samples)],
            partition_id=RESCORE_PARTITION,
            select_fields=["log_probs", "response_mask"],
        )
    finally:
        tq.kv_clear(keys=keys, partition_id=RESCORE_PARTITION)
    mask = data["response_mask"]
    log_probs = data["log_probs"]
    if log_probs.is_nested:  # prompt + response: the response part, as verl slices it
        log_probs = response_log_probs(log_probs, mask)
    return [_response_values(log_probs[j], mask[j]) for j in range(len(samples))]


def _sample(row: Any) -> dict[str, Any]:
    """A row of a TransferQueue batch as its own copies (a view would keep the step's
    whole batch alive), as verl's padding copies one (``padding_utils.py:88``)."""
    import torch

    return {
        key: row[key].clone() if isinstance(row[key], torch.Tensor) else copy.deepcopy(row[key])
        for key in row.keys()  # noqa: SIM118 (a TensorDict)
    }


def _response_values(values: Any, mask: Any) -> np.ndarray:
    """One response's token values where its ``response_mask`` is 1, as float64."""
    return np.asarray(values[mask.bool()].double().cpu().numpy())
