"""verl v1 trainers that add advbudget's metrics to verl's own metrics dict.

Select one with ``trainer.v1.trainer_mode=advbudget_sync`` (or ``advbudget_colocate_async``,
``advbudget_separate_async``): each is verl's trainer of that mode (``sync``, ...) plus

- after the advantage step: :func:`~advbudget.adapters.verl.batch_metrics`
  (``advbudget/skipped_group_fraction``, ``advbudget/advantage_gap_mean``,
  ``advbudget/positive_advantage_fraction``, ...), every step, a few ms of CPU;
- after the actor update, every ``kappa_every`` steps (``+algorithm.advbudget.kappa_every``,
  default 10; 0 turns it off): κ_eff (``advbudget/kappa_eff/{mean,median,std,min,max,count}``)
  from one extra ``compute_log_prob`` pass of the updated actor over the step's batch. Cost:
  one forward pass over the batch (no backward, no rollout), about the cost of verl's own
  ``old_log_prob`` step, so ~1/3 of an update step when it runs; 3% at the default 1/10.

verl's base class branches on the literal mode name (``self.trainer_mode == "sync"``), so
these trainers hand verl the base mode's name (``sync``, ...) and are found under their own.

Import of verl's v1 trainer needs TransferQueue (``pip install "TransferQueue>=0.1.10" pyzmq
msgspec``); :func:`register_trainers` returns ``[]`` without it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ._estimators import _option
from ._metrics import batch_metrics, kappa_metrics, metrics_estimator

# Our mode name -> (module, class, verl's mode name) of the verl trainer it extends.
BASE_TRAINERS = {
    "advbudget_sync": ("verl.trainer.ppo.v1.trainer_sync", "PPOTrainerSync", "sync"),
    "advbudget_colocate_async": (
        "verl.trainer.ppo.v1.trainer_colocate_async",
        None,
        "colocate_async",
    ),
    "advbudget_separate_async": (
        "verl.trainer.ppo.v1.trainer_separate_async",
        None,
        "separate_async",
    ),
}

DEFAULT_KAPPA_EVERY = 10


def register_trainers() -> list[str]:
    """Register the metrics trainers with verl's v1 trainer registry; returns their names.

    Returns ``[]`` when TransferQueue (needed by verl's v1 trainer) is not installed.
    """
    if importlib.util.find_spec("transfer_queue") is None:
        return []
    from verl.trainer.ppo.v1 import trainer_base

    names = []
    for name, (module_name, _class_name, base_mode) in BASE_TRAINERS.items():
        base = trainer_base.TRAINER_REGISTRY.get(base_mode)
        if base is None:
            importlib.import_module(module_name)
            base = trainer_base.TRAINER_REGISTRY.get(base_mode)
        if base is None:
            continue
        existing = trainer_base.TRAINER_REGISTRY.get(name)
        if existing is not None and existing.__qualname__ == f"AdvbudgetMetrics_{base_mode}":
            trainer_base.TRAINER_REGISTRY.pop(name)  # ours, from an earlier import
        trainer_base.register_trainer(name)(_make_trainer(base, base_mode))
        names.append(name)
    return names


def _make_trainer(base: type, base_mode: str) -> type:
    class Trainer(base):  # type: ignore[misc]
        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            from omegaconf import open_dict

            with open_dict(config):
                config.trainer.v1.trainer_mode = base_mode
            super().__init__(config, *args, **kwargs)

        def _compute_advantage(self, batch: Any, metrics: dict[str, Any]) -> Any:
            batch = super()._compute_advantage(batch, metrics=metrics)
            # token_level_rewards reach TransferQueue only with a KL penalty in the reward;
            # otherwise they are the reward model's scores, as in verl's own method.
            kl_in_reward = bool(self.config.algorithm.get("use_kl_in_reward", False))
            field = "token_level_rewards" if kl_in_reward else "rm_scores"
            data = _fetch_dataproto(batch, ["uid", field])
            data.batch["token_level_rewards"] = data.batch[field]
            metrics.update(batch_metrics(data, self.config.algorithm))
            return batch

        def _update_actor(self, batch: Any, metrics: dict[str, Any]) -> Any:
            batch = super()._update_actor(batch, metrics=metrics)
            config = self.config.algorithm
            every = int(_option(config, "advbudget.kappa_every", DEFAULT_KAPPA_EVERY))
            if every > 0 and self.global_steps % every == 0:
                metrics.update(self._kappa_eff(batch))
            return batch

        def _kappa_eff(self, batch: Any) -> dict[str, float]:
            """One extra log-prob pass of the updated actor: κ_eff of this step's update."""
            name = metrics_estimator(self.config.algorithm)
            if name is None:
                return {}
            batch.extra_info.update(
                {
                    "calculate_entropy": False,
                    "compute_loss": False,
                    "temperature": self.config.actor_rollout_ref.rollout.temperature,
                }
            )
            self.actor_rollout_wg.compute_log_prob(batch)
            data = _fetch_dataproto(
                batch, ["uid", "old_log_probs", "log_probs", "advantages", "response_mask"]
            )
            mask = data.batch["response_mask"]
            advantages = (data.batch["advantages"] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            return kappa_metrics(
                data.batch["old_log_probs"],
                data.batch["log_probs"],
                mask,
                advantages,
                data.non_tensor_batch["uid"],
            )

    Trainer.__name__ = Trainer.__qualname__ = f"AdvbudgetMetrics_{base_mode}"
    Trainer.__doc__ = f"verl's ``{base_mode}`` trainer plus advbudget's metrics and κ_eff."
    return Trainer


def _fetch_dataproto(batch: Any, fields: list[str]) -> Any:
    """The batch's ``fields`` from TransferQueue as a padded ``DataProto`` (uid as numpy)."""
    import numpy as np
    import transfer_queue as tq
    from verl import DataProto

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    data = DataProto(batch=data.to_padded_tensor())
    if "uid" in data.batch.keys():  # noqa: SIM118 (TensorDict refuses `in`)
        data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
    # Rows verl added to make the batch divisible across workers are not responses.
    real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    if len(real) < len(data):
        data = data.select_idxs(real)
    return data
