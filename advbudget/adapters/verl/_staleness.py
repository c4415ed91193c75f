"""The staleness rule in verl (``+algorithm.advbudget.max_staleness`` and
``stale_rollouts``): which policy version sampled each rollout, in verl's async trainers.

verl's experimental async trainers (``verl.experimental.fully_async_policy.fully_async_main``
and ``verl.experimental.one_step_off_policy.main_ppo``) share one advantage step, which
calls verl's ``compute_advantage`` and so our registered estimator. Nothing is patched: our
estimator finds that step's trainer and batch on the call stack
(:func:`._hooks.async_advantage_step`), reads each rollout's weights label
(``non_tensor_batch["max_global_steps"]``, which verl's agent loop copies from the rollout
server: the label of the newest weights that generated the rollout's tokens) and the
trainer's own label, and turns both into policy versions (updates of the weights):

- fully_async: a label is ``current_param_version``, the trainer's count of weight syncs
  (one each ``async_training.trigger_parameter_sync_step`` updates), and the trainer's
  current version is its ``current_param_version`` (raised after the advantage step): the
  version unit is one sync. A partial rollout (``partial_rollout``) resumed across a sync is
  labelled with its newest weights: its staleness is a lower bound (verl's own
  ``fully_async/count/stale_trajectory_processed`` counts the same way).
- one_step_off: the weights are labelled with ``global_steps`` when they are sent, at the
  start of a step and before its update, and the first ones twice (0 at start-up, 1 at step
  1, the same weights): a label L holds ``max(L - 1, 0)`` updates, the actor at step k holds
  ``k - 1``. Exact; every step after the first has staleness 1.

Everywhere else (verl's v1 and legacy trainers, which score each step's own rollouts) no
versions exist, and ``max_staleness`` is refused: at start-up in the ``advbudget_*`` trainer
modes, at the first advantage step in the others.
"""

from __future__ import annotations

from typing import Any

from .._features import Step, step_metrics
from .._options import AdapterOptions
from ._convention import VERL
from ._hooks import (
    async_advantage_step,
    async_trainer_kind,
    step_metrics_dict,
    trainer_label,
    weights_labels,
)
from ._options import key_of

#: Why ``max_staleness`` is refused outside verl's async trainers.
SYNC_STALENESS_REFUSED = (
    "the adapter reads each rollout's policy version in verl's experimental async trainers "
    "only (verl.experimental.fully_async_policy.fully_async_main, "
    "verl.experimental.one_step_off_policy.main_ppo); the v1 and legacy trainers hand the "
    "estimator none (the v1 sync trainer scores each step's own rollouts, none stale)"
)


def policy_versions(trainer: Any, batch: Any) -> tuple[list[int], int] | None:
    """Each rollout's policy version and the trainer's current one, in updates of the
    weights (see the module docstring); None for a trainer or a batch without labels.

    Raises a one-line ValueError when some rollouts carry a label and others none.
    """
    kind = async_trainer_kind(trainer)
    labels = weights_labels(batch)
    if kind is None or labels is None:
        return None
    missing = [row for row, label in enumerate(labels) if label is None]
    if len(missing) == len(labels):
        return None
    if missing:
        raise ValueError(
            f"non_tensor_batch['max_global_steps']: expected each rollout's weights label "
            f"(verl's agent loop sets it), got None at row {missing[0]} of {len(labels)}"
        )
    current = trainer_label(trainer, kind)
    if kind == "fully_async":
        return [int(label) for label in labels], current
    return [max(int(label) - 1, 0) for label in labels], current - 1  # one_step_off


def staleness_keywords(options: AdapterOptions, rows: int) -> dict[str, Any]:
    """The :func:`~advbudget.compute_advantages` staleness keywords of this estimator call:
    the versions of verl's async advantage step it runs under (the rule ``keep`` still
    measures them), {} elsewhere; ``max_staleness`` without versions is a one-line
    ValueError naming it."""
    step = async_advantage_step()
    found = None if step is None else policy_versions(*step)
    if found is None:
        if options.max_staleness is not None:
            where = "" if step is None else f" ({type(step[0]).__name__}: no weights labels)"
            raise ValueError(
                f"{key_of('max_staleness')}: not available here{where}: {SYNC_STALENESS_REFUSED}"
            )
        return {}
    versions, current = found
    if len(versions) != rows:
        raise ValueError(
            f"policy_versions: expected one weights label per rollout of the estimator call "
            f"({rows}), got {len(versions)} in verl's batch"
        )
    return options.staleness_keywords(versions, current)


def log_async_metrics(result: Any, options: AdapterOptions) -> bool:
    """Add the step's ``advbudget/*`` metrics (staleness included) to verl's async
    trainer's metrics of the running step (it has no trainer mode of ours to log them);
    False outside its advantage step."""
    step = async_advantage_step()
    if step is None or async_trainer_kind(step[0]) is None:
        return False
    metrics = step_metrics(Step(result, options, VERL.metric_prefix))
    step_metrics_dict(step[0]).update(metrics)
    return True
