"""``AdvBudgetGRPOLearner``: tunix's ``GRPOLearner`` with the advbudget metrics, κ_eff,
the per-prompt ledger and ``skipped_groups``; ``drgrpo_config``: Dr.GRPO's config with
another estimator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from tunix.rl import rl_cluster as rl_cluster_lib  # type: ignore[import-not-found, unused-ignore]
from tunix.rl.grpo import (  # type: ignore[import-not-found, unused-ignore]
    dapo_learner,
    drgrpo_learner,
)
from tunix.rl.grpo.grpo_learner import GRPOLearner  # type: ignore[import-not-found, unused-ignore]

from advbudget.metrics import PromptLedger

from .._features import (
    RunMemory,
    Step,
    check_memory,
    dropped_rows,
    forget_published,
    group_prompts,
    kappa_due,
    lend_memory,
    score_by_shape,
    step_metrics,
    take_published,
    update_ledger,
)
from ._convention import TUNIX
from ._estimators import metric_fn, registered_names
from ._hooks import LearnerHooks, grpo_step_tokens, restored_checkpoint_metadata
from ._kappa import KappaHooks, KappaTracker, kappa_batch
from ._options import STALENESS_REFUSED, key_of, options, read_options, staleness_given

#: The key of the run's memory (the prompt ledger, an estimator's state) in the custom
#: metadata of tunix's actor checkpoints; :data:`LEDGER_METADATA`: the ledger alone, in
#: older ones.
MEMORY_METADATA = "advbudget_memory"
LEDGER_METADATA = "advbudget_prompt_ledger"


def drop_skipped_rows(example: Any, valid: Any) -> Any:
    """``example`` (a tunix ``TrainExample``) with the completion mask of every rollout
    whose ``valid`` is False set to 0: tunix's loss, KL term and every ``loss_agg_mode``
    denominator count only rows and tokens with mask > 0, so those rollouts leave the
    update as if the batch held only the kept groups."""
    mask = example.completion_mask
    keep = jnp.asarray(np.asarray(valid, dtype=bool))
    if keep.shape != (mask.shape[0],):
        raise ValueError(
            f"valid: expected one flag per completion row ({mask.shape[0]}), "
            f"got shape {tuple(keep.shape)}"
        )
    return example.replace(completion_mask=jnp.where(keep[:, None], mask, jnp.zeros_like(mask)))


def drop_step_rows(example: Any, step: Step) -> Any:
    """``example`` with the completion rows ``drop`` leaves out of ``step`` masked
    (:func:`drop_skipped_rows`): a skipped group's, a NaN reward's, a withheld or dropped
    stale rollout's."""
    keep = np.ones(int(example.advantages.shape[0]), dtype=bool)
    keep[dropped_rows(step)] = False
    return drop_skipped_rows(example, keep)


def split_metric_fns(metrics: bool, metric_fns: Sequence[Any] | None) -> tuple[bool, list[Any]]:
    """Whether a learner logs our metrics, and tunix's ``metric_fns`` without
    :func:`metric_fn`: we log its keys ourselves, from the step's one published result,
    which a ``metric_fn`` in ``metric_fns`` would take first."""
    ours = metrics or metric_fn in (metric_fns or ())
    return ours, [fn for fn in metric_fns or () if fn is not metric_fn]


class AdvBudgetGRPOLearner(LearnerHooks, GRPOLearner):  # type: ignore[misc, unused-ignore]
    """tunix's ``GRPOLearner`` (also with ``DAPOConfig`` or :func:`drgrpo_config`) plus:

    - the ``advbudget/*`` metrics in tunix's metrics logger (``metrics=False``: off);
    - ``skipped_groups``: ``"keep"`` (tunix's behaviour: skipped groups stay in the loss
      with advantage 0, and in its denominator and KL term) or ``"drop"`` (their completion
      rows are masked out: see :func:`drop_skipped_rows`). ``"resample"`` is refused:
      tunix has no dynamic sampling. ``drop`` needs an advbudget estimator.
    - ``kappa_every``: κ_eff (``advbudget/kappa_eff/{mean,median,std,min,max,count}``) of
      the K-th, 2K-th, ... update (tunix's logged steps K-1, 2K-1, ...; default 10, 0: off):
      each group's o+ and o- (largest and smallest advantage) scored by the actor just
      before and just after the update that trained them, also when tunix generates the
      next micro-batch while one trains (``_kappa``). Any estimator; with ours, skipped
      groups and NaN rewards are never picked.
    - ``prompt_ledger``: ``advbudget/never_solved_prompt_fraction``,
      ``advbudget/always_solved_prompt_fraction`` and ``advbudget/recurring_prompts``
      over the prompts seen at least twice (identity: the prompt text), with our
      estimators while ``solved_reward`` (see ``configure``) is not None; kept in the
      custom metadata of tunix's actor checkpoints and restored with them.
    - an estimator with memory (``advbudget_spo``, ``advbudget_rae``): each row's prompt
      text is its identity; the state is updated by training steps only (an evaluation
      reads it) and kept in the checkpoints' custom metadata with the ledger;
    - ``max_staleness`` and ``stale_rollouts`` are refused with the reason: tunix's
      ``GRPOLearner`` stamps no policy version on its rollouts
      (:class:`~advbudget.adapters.tunix.AdvBudgetAgenticGRPOLearner` reads the agentic
      learner's).

    The options are read once, when it is built: ``configure``'s (or the environment's) with
    these, into ``advbudget_options``. Every other argument is ``GRPOLearner``'s.
    """

    def __init__(
        self,
        *args: Any,
        skipped_groups: str = "keep",
        metrics: bool = True,
        metric_fns: Sequence[Any] | None = None,
        kappa_every: int = TUNIX.kappa_every,
        prompt_ledger: bool = True,
        max_staleness: int | None = None,
        stale_rollouts: str = "keep",
        **kwargs: Any,
    ) -> None:
        # Read once, here: the configured options (configure(), the environment) and ours.
        self.advbudget_options = read_options(
            {
                **options(),
                "skipped_groups": skipped_groups,
                "kappa_every": kappa_every,
                **staleness_given(max_staleness, stale_rollouts),
            },
            staleness_refused=STALENESS_REFUSED,
        )
        if not isinstance(prompt_ledger, bool):
            raise TypeError(f"prompt_ledger: expected a bool, got {prompt_ledger!r}")
        self._advbudget_metrics, fns = split_metric_fns(metrics, metric_fns)
        super().__init__(*args, metric_fns=fns, **kwargs)
        name = self.algo_config.advantage_estimator
        if self.advbudget_options.skipped_groups == "drop" and name not in TUNIX.names():
            raise ValueError(
                f"skipped_groups: 'drop' needs an advbudget estimator (advbudget_<name> or "
                f"reward_budget) as advantage_estimator, got {name!r}"
            )
        check_memory(TUNIX.spec_of(name), self.advbudget_options, key_of)
        trainer = self.rl_cluster.actor_trainer
        self._kappa: KappaTracker | None = None
        if self.advbudget_options.kappa_every:
            self._kappa = KappaTracker(self.rl_cluster, self.algo_config.temperature)
            trainer.with_training_hooks(KappaHooks(self._kappa, trainer.training_hooks))
        self.advbudget_memory = RunMemory().with_ledger(prompt_ledger)
        self._keep_memory_in_checkpoints(trainer)

    @property
    def prompt_ledger(self) -> PromptLedger | None:
        """The run's per-prompt ledger (None when off)."""
        return self.advbudget_memory.ledger

    def _keep_memory_in_checkpoints(self, trainer: Any) -> None:
        # tunix saves the trainer's custom metadata (the global step) with each checkpoint
        # and restores it when the trainer is built: the run's memory rides along.
        restored = restored_checkpoint_metadata(trainer)
        saved = restored.get(MEMORY_METADATA, restored.get(LEDGER_METADATA))
        if saved is not None:
            ledger = self.advbudget_memory.ledger is not None
            self.advbudget_memory = RunMemory.from_state_dict(saved).with_ledger(ledger)
        tunix_metadata = trainer.custom_checkpoint_metadata_fn

        def metadata() -> dict[str, Any]:
            if not self.advbudget_memory:
                return tunix_metadata()  # type: ignore[no-any-return]
            return {**tunix_metadata(), MEMORY_METADATA: self.advbudget_memory.state_dict()}

        trainer.custom_checkpoint_metadata_fn = metadata

    def generate_and_compute_advantage(self, training_input: Any, mode: Any = None) -> Any:
        """tunix's rollout, rewards and advantages of one micro-batch (its
        ``TrainExample``), then: ``drop``'s mask, and, in training, the ledger and the
        batch κ_eff scores."""
        forget_published()  # a result left in this thread is not this step's
        training = mode is None or mode == rl_cluster_lib.Mode.TRAIN
        # tunix's batch repeats each prompt for its rollouts: one identity per row.
        prompts = training_input["prompts"]
        forgetting: dict[str, float] = {}
        measure = self._forgetting(prompts, forgetting) if training else None
        with lend_memory(self.advbudget_memory, prompts, remember=training, rho=measure):
            example = self.tunix_generate_and_compute_advantage(training_input, mode)
        rows = int(example.advantages.shape[0])
        scored = take_published(rows)
        step = None if scored is None else Step(scored, self.advbudget_options, TUNIX.metric_prefix)
        if self.advbudget_options.skipped_groups == "drop":
            if step is None:  # e.g. an estimator replaced after construction
                raise RuntimeError(
                    "skipped_groups: 'drop' found no advbudget estimator call in this step "
                    f"(advantage_estimator={self.algo_config.advantage_estimator!r})"
                )
            example = drop_step_rows(example, step)
        if step is not None:
            metrics = step_metrics(step) if self._advbudget_metrics else {}
            metrics.update(forgetting)
            if training and self.prompt_ledger is not None:
                prompts = group_prompts(step, training_input["prompts"])
                metrics.update(update_ledger(self.prompt_ledger, step, prompts))
            if metrics:
                self.rl_cluster.buffer_metrics(
                    {key: (value, np.mean) for key, value in metrics.items()},
                    mode=rl_cluster_lib.Mode.TRAIN if mode is None else mode,
                )
        if training and self._kappa is not None and self._kappa_due():
            batch = kappa_batch(example, scored, self.algo_config.num_generations)
            if batch is not None:
                self._kappa.add(batch)
        return example

    def _forgetting(
        self, prompts: Sequence[Any], metrics: dict[str, float]
    ) -> Callable[[], np.ndarray] | None:
        """With ``rho="kl"``: what measures spo's ρ of each row when tunix calls the
        estimator (:class:`~advbudget.adapters._features.LastResponses`), its metrics into
        ``metrics``. The step's tokens and the policy's log-probs are read from tunix's
        step (:func:`._hooks.grpo_step_tokens`); a kept response is scored again by the
        policy through ``RLCluster.get_old_per_token_logps``, as tunix scores old
        log-probs."""
        if not self.advbudget_options.kl_rho:
            return None

        def measure() -> np.ndarray:
            tokens = grpo_step_tokens()
            prompt_ids = np.asarray(tokens["prompt_ids"])
            completions = np.asarray(tokens["jax_completion_ids"])
            masks = np.asarray(tokens["completion_mask"], dtype=bool)
            old = tokens["old_per_token_logps"]

            def now(rows: list[int]) -> tuple[list[Any], list[np.ndarray]]:
                handles = [
                    _Response(prompt_ids[row].copy(), completions[row].copy(), masks[row].copy())
                    for row in rows
                ]
                if old is None:  # tunix computed none (num_iterations == 1)
                    return handles, self._token_logps(handles)
                values = np.asarray(old, dtype=np.float64)
                return handles, [values[row][masks[row]] for row in rows]

            rho, measured = self.advbudget_memory.last_responses.rho(
                prompts, now, self._token_logps, prefix=TUNIX.metric_prefix
            )
            metrics.update(measured)
            return rho

        return measure

    def _token_logps(self, handles: list[_Response]) -> list[np.ndarray]:
        """The policy's log-probs of the completion tokens of ``handles`` now, one call of
        tunix's ``get_old_per_token_logps`` per shape (their steps' padded widths)."""

        def score(same: list[_Response]) -> list[np.ndarray]:
            logps = self.rl_cluster.get_old_per_token_logps(
                prompt_tokens=jnp.asarray(np.stack([h.prompt for h in same])),
                completion_tokens=jnp.asarray(np.stack([h.completion for h in same])),
            )
            values = np.asarray(logps, dtype=np.float64)
            return [row[h.mask] for row, h in zip(values, same, strict=True)]

        return score_by_shape(handles, lambda h: (h.prompt.shape[0], h.completion.shape[0]), score)

    def _kappa_due(self) -> bool:
        # tunix counts steps from 0 while they run: the K-th update is step K - 1
        return kappa_due(self.advbudget_options, self.rl_cluster.global_steps + 1)

    def run_mini_batch_step(self, *args: Any, **kwargs: Any) -> None:
        """tunix's mini-batch step, then κ_eff's pass after its update."""
        start = self.rl_cluster.actor_trainer.train_steps
        self.tunix_run_mini_batch_step(*args, **kwargs)
        if self._kappa is not None:
            self._kappa.measure_after(start)

    def run_global_step(self, *args: Any, **kwargs: Any) -> None:
        """tunix's global step, then its κ_eff metrics into tunix's buffer."""
        self.tunix_run_global_step(*args, **kwargs)
        if self._kappa is not None and self._kappa_due():  # before tunix counts the step
            step = self.rl_cluster.global_steps
            metrics = self._kappa.flush(step)
            if metrics:
                self.rl_cluster.buffer_metrics(metrics, mode=rl_cluster_lib.Mode.TRAIN)


class AdvBudgetDAPOLearner(AdvBudgetGRPOLearner, dapo_learner.DAPOLearner):  # type: ignore[misc, unused-ignore]
    """tunix's ``DAPOLearner`` (with a ``DAPOConfig``: DAPO's clipping, token-mean loss and,
    when ``overlong_buffer`` is enabled, its overlong reward shaping, which tunix 0.1.7
    measures in characters) plus everything :class:`AdvBudgetGRPOLearner` adds. tunix has
    no dynamic sampling; ``skipped_groups="drop"`` takes dead groups out of the loss."""


@dataclass(frozen=True)
class _Response:
    """A response kept for ``rho="kl"``: its step's left-padded prompt tokens, its padded
    completion tokens and the completion's mask (tunix's: not padding)."""

    prompt: np.ndarray
    completion: np.ndarray
    mask: np.ndarray


def drgrpo_config(*, advantage_estimator: str = "reward_budget", **kwargs: Any) -> Any:
    """tunix's ``DrGRPOConfig(**kwargs)`` (Dr.GRPO's loss aggregation) with our estimator:
    ``DrGRPOConfig`` fixes ``advantage_estimator="drgrpo"`` (``init=False``), so it is set
    after construction. ``advantage_estimator`` must be registered with tunix."""
    if advantage_estimator not in registered_names():
        raise ValueError(
            f"advantage_estimator: expected a tunix-registered estimator (advbudget_<name>, "
            f"reward_budget, or tunix's own), got {advantage_estimator!r}"
        )
    config = drgrpo_learner.DrGRPOConfig(**kwargs)
    config.advantage_estimator = advantage_estimator
    return config
