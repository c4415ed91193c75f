"""verl v1 trainers that add advbudget's metrics to verl's own metrics dict.

Select one with ``trainer.v1.trainer_mode=advbudget_sync`` (or ``advbudget_colocate_async``,
``advbudget_separate_async``): each is verl's trainer of that mode (``sync``, ...) plus

- after the advantage step: :func:`~advbudget.adapters.verl.batch_metrics`
  (``advbudget/skipped_group_fraction``, ``advbudget/unsolved_group_fraction``,
  ``advbudget/solved_group_fraction`` (``+algorithm.advbudget.solved_reward``, default 1.0;
  ``null``: off), ``advbudget/advantage_gap_mean``,
  ``advbudget/positive_advantage_fraction``, ...), every step, a few ms of CPU;
- after the actor update, every ``kappa_every`` steps (``+algorithm.advbudget.kappa_every``,
  default 10; 0 turns it off): κ_eff (``advbudget/kappa_eff/{mean,median,std,min,max,count}``)
  from one extra ``compute_log_prob`` pass of the updated actor over each group's o+ and o-
  only (a ``select_keys`` sub-batch: 2 rows per group, padded with other rows of the batch
  to what the actor's workers accept: see :func:`._hooks.log_prob_rows`). Cost: about 2/G of verl's
  own ``old_log_prob`` step (no backward, no rollout) when it runs.

- the per-prompt ledger (``advbudget/never_solved_prompt_fraction``,
  ``always_solved_prompt_fraction``, ``recurring_prompts``) and, for an estimator with
  memory (``advbudget_spo``, ``advbudget_rae``), its state: lent to the estimator verl
  calls with each row's prompt (verl's dataset ``index``, else its prompt tokens), kept in
  ``MEMORY_FILE`` beside each checkpoint and read back on resume; spo's ``rho=kl``
  (``+algorithm.advbudget.rho=kl``) measures each prompt's drift with one extra
  ``compute_log_prob`` pass over one kept response a returning prompt (:mod:`._forgetting`).

With ``+algorithm.advbudget.skipped_groups=drop`` the skipped rows leave verl's actor
update and its normalisers (:mod:`advbudget.adapters.verl._skipped`).

With a multi-output agent loop (several rows a rollout: :mod:`._sessions`) the metrics
count each session once, as our estimators score it (and as verl's ``grpo`` does; verl's
other estimators score each row, and so do the metrics that describe them), and κ_eff's
pairs are sessions, each measured on its final output.

verl's base class branches on the literal mode name (``self.trainer_mode == "sync"``), so
these trainers hand verl the base mode's name (``sync``, ...) and are found under their own.

Import of verl's v1 trainer needs TransferQueue (``pip install "TransferQueue>=0.1.10" pyzmq
msgspec``); :func:`register_trainers` returns ``[]`` without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from advbudget.core import EstimatorSpec, get_spec
from advbudget.metrics import PromptLedger

from .._features import (
    RunMemory,
    Step,
    check_memory,
    defined,
    group_prompts,
    kappa_due,
    lend_memory,
    step_metrics,
    take_published,
    update_ledger,
)
from .._options import AdapterOptions
from ._convention import VERL
from ._forgetting import forgetting
from ._hooks import (
    KEPT_ROWS_ENV,
    TrainerHooks,
    data_parallel_size,
    log_prob_micro_batch_size,
    log_prob_rows,
    response_log_probs,
    trainer_registry,
)
from ._metrics import METRIC_PREFIX, batch_result, metrics_estimator
from ._options import key_of, option, read_options
from ._sessions import counts_sessions, read_keys, split_sessions, trajectory_values
from ._skipped import DROP_FLAG, check_options, drop_rule
from ._staleness import SYNC_STALENESS_REFUSED

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


def register_trainers() -> list[str]:
    """Register the metrics trainers with verl's v1 trainer registry; returns their names.

    Returns ``[]`` when TransferQueue (needed by verl's v1 trainer) is not installed.
    """
    if importlib.util.find_spec("transfer_queue") is None:
        return []
    from verl.trainer.ppo.v1 import trainer_base

    registry = trainer_registry()
    names = []
    for name, (module_name, _class_name, base_mode) in BASE_TRAINERS.items():
        base = registry.get(base_mode)
        if base is None:
            importlib.import_module(module_name)
            base = registry.get(base_mode)
        if base is None:
            continue
        existing = registry.get(name)
        if existing is not None and existing.__qualname__ == f"AdvbudgetMetrics_{base_mode}":
            registry.pop(name)  # ours, from an earlier import
        trainer_base.register_trainer(name)(_make_trainer(base, base_mode))
        names.append(name)
    return names


def _make_trainer(base: type, base_mode: str) -> type:
    class Trainer(TrainerHooks, base):  # type: ignore[misc]
        # +algorithm.advbudget.skipped_groups, and the rows drop leaves out of this step's
        # actor update (keys of the batch); set per instance in __init__.
        _advbudget_skipped_groups = "keep"
        _advbudget_dropped: list[Any] = []  # noqa: RUF012 (replaced, never mutated)
        _advbudget_memory: RunMemory | None = None

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            from omegaconf import open_dict

            # Read once (the cached property's value); bad options fail here, before any
            # model loads.
            self.__dict__["advbudget_options"] = read_options(option(config, "algorithm", None))
            if self.advbudget_options.max_staleness is not None:  # no versions reach us here
                raise ValueError(
                    f"{key_of('max_staleness')}: not available here: {SYNC_STALENESS_REFUSED}"
                )
            mode = str(option(config, "trainer.v1.trainer_mode", ""))
            self._advbudget_skipped_groups = check_options(config, trainer_mode=mode)
            spec = _described_spec(option(config, "algorithm", None))
            check_memory(spec, self.advbudget_options, key_of)  # None: one we do not describe
            self._advbudget_dropped = []
            if self._advbudget_skipped_groups == "drop":
                actor = config.actor_rollout_ref.actor
                print(drop_rule(actor.loss_agg_mode, actor.get("loss_scale_factor")), flush=True)
            with open_dict(config):
                config.trainer.v1.trainer_mode = base_mode
                if self._advbudget_skipped_groups == "resample":
                    print(_use_resample_sampler(config, self.advbudget_options), flush=True)
            super().__init__(config, *args, **kwargs)

        @functools.cached_property
        def advbudget_options(self) -> AdapterOptions:
            """``+algorithm.advbudget.*``, read once (in ``__init__``)."""
            return read_options(option(self.config, "algorithm", None))

        def worker_environment(self) -> dict[str, str]:
            """What the actor's worker processes are started with: drop's kept-row count
            (:func:`._hooks.install_requested`) when drop is on."""
            return {KEPT_ROWS_ENV: "1"} if self._advbudget_skipped_groups == "drop" else {}

        def after_advantage(self, batch: Any, metrics: dict[str, Any]) -> Any:
            """After verl's advantage step: our metrics, the ledger, drop's rows."""
            result = self._step_result(batch)
            infos = _reward_extra_info(batch)
            if result is not None:
                outcome = _outcomes(infos, int(result.advantages.shape[0]))
                step = Step(result, self.advbudget_options, METRIC_PREFIX, outcome=outcome)
                metrics.update(step_metrics(_per_trajectory(step, batch)))
                metrics.update(self._update_ledger(batch, step))
            if self._advbudget_skipped_groups == "drop" and result is not None:
                real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
                skipped = [i for i, kept in enumerate(result.valid.tolist()) if not kept]
                self._advbudget_dropped = [batch.keys[real[i]] for i in skipped]
            metrics.update(_reward_fault_counts(infos))
            return batch

        @contextlib.contextmanager
        def advantage_context(self, batch: Any, metrics: dict[str, Any]) -> Iterator[None]:
            """Around verl's advantage step: an estimator with memory gets the run's memory
            and each row's prompt (:func:`~advbudget.adapters._features.lend_memory`), and
            spo with ``rho=kl`` each row's ρ (:mod:`._forgetting`; its drift and ρ into
            ``metrics``); nothing for the others."""
            if not _remembers(self.config.algorithm):
                yield
                return
            identities = _row_identities(batch) or []
            rho = None
            if self.advbudget_options.kl_rho and identities:
                kept = self._memory().last_responses
                rho, measured = forgetting(self, batch, kept, identities)
                metrics.update(measured)
            with lend_memory(self._memory(), identities, rho=rho):
                yield

        def _memory(self) -> RunMemory:
            """The run's memory (the ledger, an estimator's state), made on first use."""
            if self._advbudget_memory is None:
                self._advbudget_memory = RunMemory()
            return self._advbudget_memory

        def _step_result(self, batch: Any) -> Any:
            """The step's result over the real rows: the one our estimator just computed
            (:func:`~advbudget.adapters._features.publish`), or, for verl's own estimators and
            batches with verl's padding rows (which took part in its call), computed here
            from the batch as the estimator saw it. None for an estimator we do not describe."""
            published = take_published(len(batch.keys))
            if metrics_estimator(self.config.algorithm) is None:
                return None
            if published is not None and not any(t.get("is_padding", False) for t in batch.tags):
                return published
            if _remembers(self.config.algorithm):
                # Scoring again would update the memory again: the call's own result
                # (verl's padding rows included) describes the step.
                return published
            # token_level_rewards reach TransferQueue only with a KL penalty in the reward;
            # otherwise they are the reward model's scores, as in verl's own method.
            kl_in_reward = bool(self.config.algorithm.get("use_kl_in_reward", False))
            field = "token_level_rewards" if kl_in_reward else "rm_scores"
            data = _fetch_dataproto(batch, ["uid", field, "response_mask"])
            data.batch["token_level_rewards"] = data.batch[field]
            # Multi-output sessions count once where verl's step counted them once.
            counted = counts_sessions(self.config.algorithm.adv_estimator)
            uids = data.non_tensor_batch["uid"]
            sessions = split_sessions(_real_keys(batch), uids) if counted else None
            return batch_result(data, self.config.algorithm, sessions=sessions)

        def _update_ledger(self, batch: Any, step: Step) -> dict[str, float]:
            """The per-prompt ledger (never/always-solved recurring prompts) after this
            batch; kept with verl's checkpoints (:data:`MEMORY_FILE`)."""
            if not step.options.prompt_ledger:
                return {}
            identities = _row_identities(batch, real_only=True)
            if identities is None:
                return {}
            memory = self._memory()
            if memory.ledger is None:
                memory.ledger = PromptLedger()
            return update_ledger(memory.ledger, step, group_prompts(step, identities))

        def after_save(self) -> None:
            """The run's memory (ledger, estimator state) beside the checkpoint verl just
            wrote."""
            if self._advbudget_memory:
                folder = _step_folder(self.config.trainer.default_local_dir, self.global_steps)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, MEMORY_FILE), "w", encoding="utf-8") as file:
                    json.dump(self._advbudget_memory.state_dict(), file)

        def after_load(self) -> None:
            """The memory of the checkpoint verl just resumed from (a checkpoint of an
            earlier version holds the ledger alone, in :data:`LEDGER_FILE`)."""
            trainer = self.config.trainer
            if self.global_steps > 0:  # resumed
                folder = (
                    _step_folder(trainer.resume_from_path, None)
                    if trainer.get("resume_mode") == "resume_path"
                    else _step_folder(trainer.default_local_dir, self.global_steps)
                )
                for name in (MEMORY_FILE, LEDGER_FILE):
                    path = os.path.join(folder, name)
                    if os.path.exists(path):
                        with open(path, encoding="utf-8") as file:
                            self._advbudget_memory = RunMemory.from_state_dict(json.load(file))
                        break

        def update_actor(self, batch: Any, metrics: dict[str, Any]) -> Any:
            """verl's actor update (without drop's rows), then κ_eff every kappa_every."""
            if self._advbudget_skipped_groups == "drop":
                batch = _update_without(self, batch, metrics)
            else:
                batch = self.verl_update_actor(batch, metrics)
            if kappa_due(self.advbudget_options, self.global_steps):
                metrics.update(self._kappa_eff(batch))
            return batch

        def _kappa_eff(self, batch: Any) -> dict[str, float]:
            """One extra log-prob pass of the updated actor over each group's o+ and o-
            (2 rows per group with an advantage gap, plus a few fillers: see
            :func:`._hooks.log_prob_rows`): κ_eff of this step's update."""
            name = metrics_estimator(self.config.algorithm)
            if name is None:
                return {}
            try:
                return defined(_kappa_eff_of_batch(self, batch))
            except Exception as error:  # a metric is never worth the step (OOM, a worker, ...)
                warnings.warn(
                    f"advbudget: κ_eff skipped at step {self.global_steps}: "
                    f"{type(error).__name__}: {error}",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return {}

    def _update_without(trainer: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        """verl's actor update with the dropped rows' masks zeroed and :data:`DROP_FLAG`
        set (the kept-row count of :func:`._skipped.with_kept_row_count`); the masks are put back
        after it, for verl's metrics and κ_eff. A step whose every response is dropped
        has nothing to train on: verl's update is not run (its optimizer would still move
        the weights with Adam's momentum on a zero gradient, or skip a NaN one)."""
        dropped, trainer._advbudget_dropped = trainer._advbudget_dropped, []
        real = sum(not tag.get("is_padding", False) for tag in batch.tags)
        metrics[f"{METRIC_PREFIX}actor_update_skipped"] = float(
            bool(dropped) and len(dropped) == real
        )
        if metrics[f"{METRIC_PREFIX}actor_update_skipped"]:
            return batch
        saved = _zero_masks(batch, dropped)
        batch.extra_info[DROP_FLAG] = "drop"
        try:
            return trainer.verl_update_actor(batch, metrics)
        finally:
            batch.extra_info.pop(DROP_FLAG, None)
            if saved is not None:
                _put_fields(batch, dropped, saved)

    Trainer.__name__ = Trainer.__qualname__ = f"AdvbudgetMetrics_{base_mode}"
    Trainer.__doc__ = f"verl's ``{base_mode}`` trainer plus advbudget's metrics and κ_eff."
    return Trainer


def _use_resample_sampler(config: Any, options: AdapterOptions) -> str:
    """Point verl's V1 trainer at :mod:`._resample`'s replay buffer (``config`` open);
    returns the start-up line saying so."""
    from ._resample import SAMPLER_NAME, SAMPLER_PATH, sampler_settings

    estimator = metrics_estimator(config.algorithm)
    assert estimator is not None  # check_options refused it
    settings = sampler_settings(config, estimator, options.max_generation_batches)
    sampler = config.trainer.v1.sampler
    sampler.custom_sampler = {"path": SAMPLER_PATH, "name": SAMPLER_NAME}
    sampler.sampler_kwargs = {**(sampler.get("sampler_kwargs") or {}), "advbudget": settings}
    # A refill replaces as many prompts as were evicted, fetched in whole gen_batch_size
    # chunks: verl forces 1 for its own DAPO filter (trainer_base.py:727-739), not for a
    # custom sampler, and a refill of fewer than train_batch_size prompts then raises
    # (trainer_base.py:1485, "num_prompts ... must be a positive multiple").
    gen_batch_size = config.data.get("gen_batch_size", None)
    if gen_batch_size not in (None, 1):
        warnings.warn(
            f"advbudget: skipped_groups=resample refills prompt by prompt: "
            f"data.gen_batch_size={gen_batch_size} is overridden to 1 (as verl's own "
            "algorithm.filter_groups does)",
            UserWarning,
            stacklevel=3,
        )
    config.data.gen_batch_size = 1
    return (
        f"advbudget: skipped_groups=resample: verl's replay buffer replaces the groups "
        f"{estimator} skips, at most {settings['max_generation_batches']} generation rounds "
        "a step (advbudget/generation_batches); data.gen_batch_size=1"
    )


def _described_spec(algorithm: Any) -> EstimatorSpec | None:
    """The core spec of the estimator the run's ``algorithm`` config names (None for one
    advbudget does not describe)."""
    estimator = metrics_estimator(algorithm)
    return None if estimator is None else get_spec(VERL.core_name(estimator))


def _remembers(algorithm: Any) -> bool:
    """Whether the run's estimator remembers prompts across steps (spo, rae)."""
    spec = _described_spec(algorithm)
    return spec is not None and spec.tracker is not None


#: The run's memory (the ledger, an estimator's state) in each ``global_step_N`` folder
#: verl writes; :data:`LEDGER_FILE`: the ledger alone, in checkpoints of earlier versions.
MEMORY_FILE = "advbudget_memory.json"
LEDGER_FILE = "advbudget_ledger.json"


def _step_folder(path: str, step: int | None) -> str:
    """verl's ``global_step_N`` folder (``path`` itself when ``step`` is None), absolute
    against the working directory as verl resolves it."""
    folder = path if step is None else os.path.join(path, f"global_step_{step}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def _row_identities(batch: Any, *, real_only: bool = False) -> list[Any] | None:
    """A stable prompt identity per row of ``batch``: verl's dataset ``index`` (from
    ``extra_info.index``) when TransferQueue has it, else the prompt's token ids (unpadded,
    hashed by :func:`~advbudget.metrics.prompt_key`); None for verl's padding rows (no-op
    samples that copy the first real row's prompt: :func:`._estimators.padding_left_out`), or with
    ``real_only`` only the real rows'. None when the batch has neither."""
    import transfer_queue as tq

    padding = [tag.get("is_padding", False) for tag in batch.tags]
    keys = [key for key, pad in zip(batch.keys, padding, strict=True) if not pad]
    get = tq.kv_batch_get
    identities: list[Any] | None = None
    try:
        values = get(keys=keys, partition_id=batch.partition_id, select_fields=["index"])["index"]
        values = values.tolist() if hasattr(values, "tolist") else list(values)
        identities = [int(v) for v in values]
    except Exception:  # no dataset index in this batch: the prompt itself
        try:
            rows = get(keys=keys, partition_id=batch.partition_id, select_fields=["prompts"])
            identities = [np.asarray(r, dtype=np.int64).tobytes() for r in rows["prompts"].unbind()]
        except Exception:  # neither (another rollout path): no ledger
            return None
    if real_only:
        return identities
    real = iter(identities)
    return [None if pad else next(real) for pad in padding]


MASK_FIELDS = ["response_mask", "loss_mask"]


def _zero_masks(batch: Any, keys: list[Any]) -> Any:
    """Zero the ``response_mask`` and ``loss_mask`` of the rows ``keys`` of ``batch`` in
    TransferQueue (the actor's workers read both); returns their old values, or None."""
    if not keys:
        return None
    import torch
    import transfer_queue as tq

    old = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=MASK_FIELDS)
    zeros = old.apply(torch.zeros_like)
    _put_fields(batch, keys, zeros)
    return old


def _put_fields(batch: Any, keys: list[Any], fields: Any) -> None:
    import transfer_queue as tq

    tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=fields)


def _reward_extra_info(batch: Any) -> list[dict[str, Any]] | None:
    """Each real response's ``reward_extra_info``, in the batch's order (verl keeps a score
    dict's keys, all but ``score``, in each response's ``extra_fields``; ``{}`` where a
    response has none); None when the batch has no ``extra_fields`` (another reward path)."""
    import transfer_queue as tq

    try:
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        fields = data["extra_fields"]
        fields = fields.tolist() if hasattr(fields, "tolist") else list(fields)
    except Exception:  # no extra_fields in this batch (another reward path)
        return None
    infos = []
    for i, tag in enumerate(batch.tags):
        if tag.get("is_padding", False):
            continue
        field = fields[i] if i < len(fields) else None
        info = field.get("reward_extra_info") if isinstance(field, dict) else None
        infos.append(info if isinstance(info, dict) else {})
    return infos


def _reward_fault_counts(infos: list[dict[str, Any]] | None) -> dict[str, float]:
    """``advbudget/reward_failures`` and ``advbudget/reward_timeouts``: the responses whose
    grader raised / overran this step, from the ``reward_failure`` / ``reward_timeout``
    keys :func:`advbudget.rewards.verl.compute_score` returns (verl logs a score dict's
    keys only in validation). Empty when the reward function is another one."""
    counted = [info for info in infos or () if "reward_failure" in info]
    if not counted:
        return {}
    return {
        "advbudget/reward_failures": sum(float(i.get("reward_failure") or 0.0) for i in counted),
        "advbudget/reward_timeouts": sum(float(i.get("reward_timeout") or 0.0) for i in counted),
    }


def _outcomes(infos: list[dict[str, Any]] | None, rows: int) -> Any:
    """Each response's ``acc`` (the grader's verdict beside its possibly shaped ``score``:
    what verl's DAPO filter reads, ``algorithm.filter_groups.metric=acc``), for
    ``advbudget/outcome_disagreement_group_fraction``; None unless every one of the
    step's ``rows`` responses has one."""
    if not infos or len(infos) != rows or not all("acc" in info for info in infos):
        return None
    return np.array([float(info["acc"]) for info in infos])


def _real_keys(batch: Any) -> list[str]:
    """The keys of the batch's rows that are responses (not verl's padding rows)."""
    tags = batch.tags
    return [key for key, tag in zip(batch.keys, tags, strict=True) if not tag.get("is_padding")]


def _per_trajectory(step: Step, batch: Any) -> Step:
    """The step as its metrics count it: for multi-output sessions (a result with
    ``trajectories``), the trajectory-level result, each trajectory's outcome that of its
    final output (whose reward it has); the step itself otherwise."""
    trajectories = step.result.trajectories
    if trajectories is None:
        return step
    outcome = step.outcome
    if outcome is not None:
        final = read_keys(_real_keys(batch)).final
        outcome = trajectory_values(outcome, final, trajectories.index)
    return dataclasses.replace(step, result=trajectories.result, outcome=outcome)


def trajectory_rows(keys: list[str], uids: Any) -> list[int]:
    """The rows that stand for the batch's trajectories in κ_eff's pairs: every row, or
    with multi-output sessions each session's final output (the row verl's grpo scores,
    which holds its reward), so that a pair is two trajectories of a prompt.

    Examples:
        >>> trajectory_rows(["p_0_0", "p_0_1", "p_1_0"], ["p", "p", "p"])
        [1, 2]
        >>> trajectory_rows(["p_0_0", "p_1_0"], ["p", "p"])
        [0, 1]
    """
    sessions = split_sessions(keys, uids)
    if sessions is None:
        return list(range(len(keys)))
    return [int(row) for row in np.flatnonzero(sessions.final)]


def _fetch_dataproto(batch: Any, fields: list[str]) -> Any:
    """The batch's ``fields`` from TransferQueue as a padded ``DataProto`` (uid as numpy)."""
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


def _kappa_eff_of_batch(trainer: Any, batch: Any) -> dict[str, float]:
    """κ_eff from a log-prob pass over the pair rows of ``batch`` only (a ``KVBatchMeta``).

    The pairs come from the advantages the update used (verl's token advantages, back to
    one per response) and the uids; the pair rows, padded with filler rows of the batch
    (verl's own padding rows first) to :func:`._hooks.log_prob_rows`, go through
    ``compute_log_prob`` as a ``select_keys`` sub-batch. When the batch has too few other
    rows for that, the pass is skipped with a warning (it never is in verl's loop: the whole
    batch went through the same ``compute_log_prob``, so it is itself such a multiple).
    """
    import torch

    from advbudget.metrics import (
        kappa_eff_of_pairs,
        kappa_metric_dict,
        kappa_pairs,
        sequence_advantages,
        sequence_logprobs,
    )

    from ._metrics import METRIC_PREFIX

    real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    data = _fetch_dataproto(batch, ["uid", "advantages", "response_mask"])
    # With multi-output sessions a pair is two trajectories, each its final output.
    candidates = trajectory_rows(_real_keys(batch), data.non_tensor_batch["uid"])
    if len(candidates) < len(real):
        data = data.select_idxs(candidates)
    advantages = sequence_advantages(data.batch["advantages"], data.batch["response_mask"])
    pairs = kappa_pairs(advantages, group_ids=data.non_tensor_batch["uid"])
    if len(pairs) == 0:
        return kappa_metric_dict(torch.zeros(0), prefix=METRIC_PREFIX)
    rows = pairs.rows()
    keys = [batch.keys[real[candidates[i]]] for i in rows.tolist()]
    chosen = set(keys)
    spare = [i for i, tag in enumerate(batch.tags) if tag.get("is_padding", False)]
    spare += [i for i in real if batch.keys[i] not in chosen]
    dp_size = data_parallel_size(trainer.actor_rollout_wg)
    micro_batch = log_prob_micro_batch_size(trainer.config.actor_rollout_ref)
    needed = log_prob_rows(len(keys), dp_size=dp_size, micro_batch_size=micro_batch) - len(keys)
    if needed > len(spare):
        warnings.warn(
            f"advbudget: κ_eff skipped at step {trainer.global_steps}: {len(keys)} pair rows "
            f"need {needed} filler rows (a multiple of {dp_size} data-parallel ranks x "
            f"{micro_batch or 1} rows a micro-batch) but the batch has {len(spare)} others",
            RuntimeWarning,
            stacklevel=3,
        )
        return {}
    fillers = [batch.keys[i] for i in spare[:needed]]
    forwarded = batch.select_keys(keys + fillers)
    forwarded.extra_info.update(
        {
            "calculate_entropy": False,
            "compute_loss": False,
            "temperature": trainer.config.actor_rollout_ref.rollout.temperature,
        }
    )
    trainer.actor_rollout_wg.compute_log_prob(forwarded)
    fetched = _fetch_log_probs(batch.select_keys(keys))
    mask = fetched["response_mask"]
    old = sequence_logprobs(fetched["old_log_probs"], mask)
    new = sequence_logprobs(fetched["log_probs"], mask)
    values = kappa_eff_of_pairs(pairs, old, new, rows=rows)
    return kappa_metric_dict(values, prefix=METRIC_PREFIX)


def _fetch_log_probs(batch: Any) -> dict[str, Any]:
    """``old_log_probs``, the new ``log_probs`` (response tokens only, as verl's
    ``_compute_old_log_prob`` slices them) and ``response_mask``, padded ``[R, L]``."""
    import transfer_queue as tq

    fields = ["old_log_probs", "log_probs", "response_mask"]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    out = {}
    for field in fields:
        value = data[field]
        if field == "log_probs" and value.is_nested:  # prompt + response: slice as verl does
            value = response_log_probs(value, data["response_mask"])
        out[field] = value.to_padded_tensor(0.0) if value.is_nested else value
    return out
