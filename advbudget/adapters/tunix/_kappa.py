"""κ_eff in tunix: each kept group's o+ and o-, scored by the actor just before and just
after the update that trained them.

tunix computes no log-probs after an update, and before it only with ``num_iterations >
1`` (then from the rollout model at temperature 1, not the loss's temperature). So on a
due step the learner keeps, for every batch it scores (its
``generate_and_compute_advantage``, on tunix's data thread), the rows of each group's o+
and o- (:class:`KappaBatch`), and:

- *before*: a training hook scores the pending batches at the start of each micro-batch's
  train step, on the training thread. tunix 0.1.7 trains a mini-batch as its micro-batches
  arrive (at once when rollout and actor have their own meshes: the next one is generated
  while this one trains), but its optimizer (``optax.MultiSteps`` over the
  ``mini_batch_size // train_micro_batch_size`` micro-batches) moves the weights only at
  the last one, which is queued after every batch of the mini-batch was scored. So every
  batch is scored with the weights the mini-batch step started from; the optimizer's step
  count (``actor_trainer.train_steps``) is kept with the scores and checked;
- *after*: once the mini-batch step is over (all its micro-batches and
  ``num_iterations`` trained), the same rows again.

Both passes run the loss's own function (``tunix.rl.common.compute_per_token_logps`` at
the rollout temperature) on 2 rows per group, padded to a fixed count so each compiles
once: about 4/G of a forward pass over the batch, on due steps only.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx  # type: ignore[import-not-found, unused-ignore]
from tunix.rl import common  # type: ignore[import-not-found, unused-ignore]
from tunix.sft import hooks  # type: ignore[import-not-found, unused-ignore]

from advbudget.core import AdvantageResult
from advbudget.metrics import (
    KappaPairs,
    kappa_eff_of_pairs,
    kappa_metric_dict,
    kappa_pairs,
    sequence_logprobs,
)

from .._features import defined
from ._hooks import on_actor_mesh

#: How tunix aggregates each κ_eff key over its buffer (one value a step: a no-op).
_AGGREGATE = {
    "mean": np.mean,
    "median": np.median,
    "std": np.mean,
    "min": np.min,
    "max": np.max,
    "count": np.sum,
}


@dataclass
class KappaBatch:
    """One scored batch's pair rows, and their sequence log-probs once measured.

    Attributes:
        pairs: the batch's o+ / o- (indices into the batch's rows).
        rows: how many of the padded rows are pair rows (``pairs.rows()``, in order).
        prompt_ids, completion_ids, completion_mask: those rows, padded with copies of the
            first to ``2 * groups`` rows (one shape a run: one compilation).
        before: ``[rows]`` sequence log-probs before the update.
        train_steps: the actor's optimizer steps when ``before`` was measured.
    """

    pairs: KappaPairs
    rows: int
    prompt_ids: Any
    completion_ids: Any
    completion_mask: np.ndarray
    before: np.ndarray | None = None
    train_steps: int = -1


def kappa_batch(example: Any, scored: AdvantageResult | None, group_size: int) -> KappaBatch | None:
    """The pair rows of tunix ``TrainExample`` ``example``: from ``scored`` (our
    estimator's result: skipped groups and NaN rewards are never picked) or, for tunix's
    own estimators, from the example's advantages. None when no group has a gap."""
    if scored is not None:
        pairs = kappa_pairs(scored)
    else:
        pairs = kappa_pairs(np.asarray(example.advantages), group_size=group_size)
    rows = np.asarray(pairs.rows(), dtype=np.int64)
    if rows.size == 0:
        return None
    groups = int(example.advantages.shape[0]) // group_size
    padded = np.concatenate([rows, np.full(2 * groups - rows.size, rows[0])])
    take = jnp.asarray(padded)
    return KappaBatch(
        pairs=pairs,
        rows=int(rows.size),
        prompt_ids=example.prompt_ids[take],
        completion_ids=example.completion_ids[take],
        completion_mask=np.asarray(example.completion_mask)[padded],
    )


def actor_sequence_logps(
    cluster: Any, temperature: float, batch: KappaBatch, *, outside_training: bool
) -> np.ndarray:
    """``[rows]`` sequence log-probs of ``batch``'s pair rows under the actor's weights
    now, as tunix's GRPO loss computes them (float64 sums). ``outside_training``: not
    within ``RLCluster.update_actor``, so enter the actor's mesh and load its weights to
    the device if tunix offloads them, as ``update_actor`` does."""
    with on_actor_mesh(cluster, load=outside_training) as model:
        graphdef, state = nnx.split(model)
        per_token = common.compute_per_token_logps(
            graphdef,
            state,
            prompt_tokens=batch.prompt_ids,
            completion_tokens=batch.completion_ids,
            pad_id=cluster.rollout.pad_id(),
            eos_id=cluster.rollout.eos_id(),
            stop_gradient=True,
            return_logits=False,
            temperature=temperature,
        )
    per_token = np.asarray(per_token, dtype=np.float64)
    sums = np.asarray(sequence_logprobs(per_token, batch.completion_mask))
    return sums[: batch.rows]


class KappaTracker:
    """The learner's κ_eff bookkeeping: batches pending for the current mini-batch step,
    and the κ_eff values of the current global step."""

    def __init__(self, cluster: Any, temperature: float) -> None:
        self.cluster = cluster
        self.temperature = temperature
        self._lock = threading.Lock()
        self._pending: list[KappaBatch] = []
        self.values: list[np.ndarray] = []
        self.failures: list[str] = []

    def add(self, batch: KappaBatch) -> None:
        """A batch scored on a due step (any thread)."""
        with self._lock:
            self._pending.append(batch)

    def measure_before(self) -> None:
        """Score the pending batches not scored yet, with the weights now (the training
        thread, before a micro-batch is trained)."""
        with self._lock:
            waiting = [batch for batch in self._pending if batch.before is None]
        steps = self.cluster.actor_trainer.train_steps
        for batch in waiting:
            try:
                batch.before = actor_sequence_logps(
                    self.cluster, self.temperature, batch, outside_training=False
                )
                batch.train_steps = steps
            except Exception as error:  # a metric: never worth the step
                self._fail("before the update", error)
                with self._lock:
                    self._pending.remove(batch)

    def measure_after(self, start_steps: int) -> None:
        """κ_eff of every batch of the mini-batch step that began at optimizer step
        ``start_steps`` and has just ended."""
        with self._lock:
            batches, self._pending = self._pending, []
        if not batches or self.cluster.actor_trainer.train_steps == start_steps:
            return  # nothing scored, or no update happened
        for batch in batches:
            if batch.before is None:  # our hook did not run (the actor's hooks replaced?)
                self.failures.append("a batch was not scored before its update")
                continue
            if batch.train_steps != start_steps:
                self.failures.append(
                    "a batch was not scored with the weights its update started from "
                    f"(optimizer step {batch.train_steps}, expected {start_steps})"
                )
                continue
            try:
                after = actor_sequence_logps(
                    self.cluster, self.temperature, batch, outside_training=True
                )
            except Exception as error:  # a metric: never worth the step
                self._fail("after the update", error)
                continue
            rows = np.asarray(batch.pairs.rows())
            values = kappa_eff_of_pairs(batch.pairs, batch.before, after, rows=rows)
            self.values.append(np.asarray(values))

    def _fail(self, when: str, error: Exception) -> None:
        self.failures.append(f"the pass {when} failed ({type(error).__name__}: {error})")

    def flush(self, step: int) -> dict[str, tuple[float, Any]]:
        """The global step's ``advbudget/kappa_eff/*`` for tunix's ``buffer_metrics``
        (NaN left out: count 0 only when no group had a gap), warning once for the
        batches left out; resets."""
        values, self.values = self.values, []
        failures, self.failures = self.failures, []
        if failures:
            warnings.warn(
                f"AdvBudgetGRPOLearner: κ_eff at step {step} leaves out {len(failures)} "
                f"batch(es): {failures[0]}; training goes on",
                RuntimeWarning,
                stacklevel=3,
            )
            if not values:
                return {}
        merged = np.concatenate(values) if values else np.zeros(0)
        stats = defined(kappa_metric_dict(merged))
        return {key: (value, _AGGREGATE[key.rsplit("/", 1)[1]]) for key, value in stats.items()}


class KappaHooks(hooks.TrainingHooks):  # type: ignore[misc, unused-ignore]
    """The actor trainer's training hooks: κ_eff's "before" pass at each train step's
    start, then whatever hooks were there before (``previous``)."""

    def __init__(self, tracker: KappaTracker, previous: Any = None) -> None:
        self.tracker = tracker
        self.previous = previous

    def on_train_step_start(self, train_ctx: Any) -> None:
        self.tracker.measure_before()
        if self.previous is not None:
            self.previous.on_train_step_start(train_ctx)

    def on_train_start(self, train_ctx: Any) -> None:
        if self.previous is not None:
            self.previous.on_train_start(train_ctx)

    def on_train_end(self, train_ctx: Any) -> None:
        if self.previous is not None:
            self.previous.on_train_end(train_ctx)

    def on_train_step_end(self, train_ctx: Any, train_step: int, train_loss: float) -> None:
        if self.previous is not None:
            self.previous.on_train_step_end(train_ctx, train_step, train_loss)

    def on_eval_step_start(self, train_ctx: Any) -> None:
        if self.previous is not None:
            self.previous.on_eval_step_start(train_ctx)

    def on_eval_step_end(self, train_ctx: Any, eval_loss: float) -> None:
        if self.previous is not None:
            self.previous.on_eval_step_end(train_ctx, eval_loss)
