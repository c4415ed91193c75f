"""The advbudget run of SkyRL: its config, experiment, trainer and entry point.

``python -m advbudget.adapters.skyrl <SkyRL's key=value overrides>`` (or SkyRL's own
``python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=advbudget.adapters.skyrl
...``) runs SkyRL's training as its own entry point does (its config validation, Ray start-up
and registry sync, the trainer in a Ray task), with:

- :class:`AdvBudgetConfig`: SkyRL's config with ``trainer.algorithm.advbudget``, a mapping of
  advbudget options (``trainer.algorithm.advbudget.budget=0.5``), read once and checked
  before Ray starts;
- :class:`AdvBudgetPPOTrainer`: around SkyRL's own advantage call, each step's advbudget
  metrics and the prompt ledger into SkyRL's logged metrics (``advbudget/...``), the rows
  ``skipped_groups=drop`` leaves out (their ``loss_mask`` zeroed), with ``row_weights`` and
  step-wise trajectories each step's advantages times 1 / its trajectory's steps, the
  estimator's memory across steps; around its update, κ_eff every ``kappa_every`` steps (of
  whole trajectories with step-wise trajectories: the sum of their steps' log-probs);
- :class:`MemoryCallback`: the run's memory (ledger, estimator state) in each
  ``global_step_N`` checkpoint folder (:data:`MEMORY_FILE`), read back on resume.

``skipped_groups=resample`` takes SkyRL's dynamic-sampling hook: each generation round (a new
batch of prompts from SkyRL's dataloader) is scored with the run's estimator, and the step
trains on the first ``trainer.train_batch_size`` groups it keeps, in round order, after at
most ``max_generation_batches`` rounds (then the skipped groups that fill the batch are
dropped, with a warning). SkyRL's own ``dynamic_sampling.type=filter`` keeps groups whose
rewards are not all equal (``np.std > 0``); ours keeps what the estimator does not skip (ties
within its tolerance, NaN rewards under ``nan_policy=omit``), and stops at the cap instead of
raising.

``skipped_groups=drop`` (and the fillers of ``resample``) zeroes the loss mask of the rows it
drops. SkyRL applies the loss reduction per mini-batch by rescaling advantages: ``token_mean``
divides by the mask's token count, so the dropped rows leave the normaliser too (the loss of
the kept rows alone); ``sequence_mean``, ``prompt_mean`` and ``seq_mean_token_sum_norm``
divide by a row or prompt count that keeps them (the kept rows' loss times kept / all;
tests/adapters/skyrl/test_drop_loss.py).
"""

# No `from __future__ import annotations`: SkyRL builds its config from the dataclass fields'
# annotations (skyrl/train/config/config.py:1816), which must be classes, not strings.
import json
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import torch
from skyrl.backends.skyrl_train.distributed.dispatch import loss_fn_outputs_to_tensor
from skyrl.backends.skyrl_train.training_batch import (
    TrainingInputBatch,
    pad_training_input_batch,
)
from skyrl.train.config import AlgorithmConfig, SkyRLTrainConfig, TrainerConfig
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.generators.utils import concatenate_generator_outputs
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.callbacks import CallbackInput, TrainingCallback, TrainingControl
from skyrl.train.utils.trainer_utils import filter_generator_output
from skyrl.train.utils.utils import initialize_ray, validate_cfg

from advbudget.core import compute_advantages
from advbudget.core._arrays import to_host
from advbudget.metrics import kappa_eff_of_pairs, kappa_metric_dict, sequence_logprobs

from .._features import (
    RunMemory,
    Step,
    check_memory,
    defined,
    dropped_rows,
    forget_published,
    group_prompts,
    kappa_due,
    kappa_rows,
    kept_groups,
    lend_memory,
    may_resample,
    resample_plan,
    resample_shortfall,
    sampled_group_metrics,
    score_by_shape,
    step_metrics,
    take_published,
    update_ledger,
)
from .._options import AdapterOptions
from ._convention import SKYRL
from ._estimators import check_inputs, check_step_wise_inputs, core_settings, padding_rows
from ._options import ROW_WEIGHTED_LOSSES, ROW_WEIGHTS, key_of, read_options, read_row_weights

#: The run's memory (the ledger, an estimator's state) in each ``global_step_N`` folder.
MEMORY_FILE = "advbudget_memory.json"

#: ``dynamic_sampling.type`` while ``skipped_groups=resample`` runs SkyRL's hook.
RESAMPLE = "advbudget_resample"


@dataclass
class AdvBudgetAlgorithmConfig(AlgorithmConfig):  # type: ignore[misc]
    """SkyRL's ``trainer.algorithm`` with advbudget's options."""

    advbudget: dict[str, Any] = field(default_factory=dict)
    """advbudget's options (``trainer.algorithm.advbudget.<name>=<value>``): any option of the
    chosen estimator, ``tie_rtol``/``tie_atol``/``nan_policy``, ``solved_reward``,
    ``group_weight``, ``skipped_groups``, ``max_generation_batches``, ``kappa_every``."""


@dataclass
class AdvBudgetTrainerConfig(TrainerConfig):  # type: ignore[misc]
    algorithm: AdvBudgetAlgorithmConfig = field(default_factory=AdvBudgetAlgorithmConfig)


@dataclass
class AdvBudgetConfig(SkyRLTrainConfig):  # type: ignore[misc]
    """SkyRL's config with ``trainer.algorithm.advbudget``."""

    trainer: AdvBudgetTrainerConfig = field(default_factory=AdvBudgetTrainerConfig)


def check_run(cfg: Any) -> AdapterOptions:
    """The run's advbudget options, read and checked before Ray starts: a bad option, or one
    the chosen estimator or SkyRL's mode cannot honour, raises one line naming its key."""
    algorithm = cfg.trainer.algorithm
    options = read_options(algorithm)
    name = algorithm.advantage_estimator
    spec = SKYRL.spec_of(name)  # None: SkyRL's own estimator
    if spec is not None:
        SKYRL.check_rewards(spec, name)
        check_inputs(name, spec)
        if cfg.generator.step_wise_trajectories:
            check_step_wise_inputs(name, spec)
    check_memory(spec, options, key_of)
    if options.kl_rho and cfg.generator.step_wise_trajectories:
        raise ValueError(
            f"{key_of('rho')}: 'kl' is not built for step-wise trajectories (a trajectory's "
            "response spans its steps' rows); give spo a constant rho in [0, 1]"
        )
    if options.skipped_groups == "resample":
        refused = _resample_refused(cfg, name)
        if refused:
            raise ValueError(f"{key_of('skipped_groups')}: 'resample' {refused}")
    if read_row_weights(algorithm):
        refused = _row_weights_refused(cfg, name)
        if refused:
            raise ValueError(f"{key_of(ROW_WEIGHTS)}: {refused}")
    return options


def _row_weights_refused(cfg: Any, name: str) -> str:
    """Why ``row_weights`` cannot run with this config ("" when it can)."""
    algorithm = cfg.trainer.algorithm
    if not cfg.generator.step_wise_trajectories:
        return (
            "weighs the steps of step-wise trajectories; without "
            "generator.step_wise_trajectories=true every row is a trajectory of its own"
        )
    if name not in SKYRL.names():
        return f"scales an advbudget estimator's advantages; {name!r} is SkyRL's own"
    if algorithm.policy_loss_type not in ROW_WEIGHTED_LOSSES:
        return (
            f"SkyRL's policy loss {algorithm.policy_loss_type!r} is not linear in each row's "
            f"advantages (clip_cov and kl_cov pick tokens by the advantages' covariance, "
            f"cross_entropy reads none); expected one of {', '.join(ROW_WEIGHTED_LOSSES)}"
        )
    if algorithm.advantage_batch_normalize:
        return (
            "trainer.algorithm.advantage_batch_normalize=true re-centres the weighted "
            "advantages over the batch (trainer.py:1507), undoing the weights"
        )
    return ""


def _resample_refused(cfg: Any, name: str) -> str:
    """Why ``resample`` cannot run with this config ("" when it can)."""
    if name not in SKYRL.names():
        return f"decides with an advbudget estimator's skip rule; {name!r} is SkyRL's own"
    if cfg.generator.step_wise_trajectories:
        return "is not built for step-wise trajectories (one row per turn)"
    if cfg.trainer.algorithm.dynamic_sampling.type not in (None, RESAMPLE):
        return (
            "and SkyRL's trainer.algorithm.dynamic_sampling.type="
            f"{cfg.trainer.algorithm.dynamic_sampling.type} both generate again: choose one"
        )
    return ""


class AdvBudgetPPOTrainer(RayPPOTrainer):  # type: ignore[misc]
    """SkyRL's ``RayPPOTrainer`` with advbudget's step features (see the module)."""

    def __init__(self, *args: Any, callbacks: Sequence[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, callbacks=[*(callbacks or []), MemoryCallback()], **kwargs)
        self.start_advbudget()

    def start_advbudget(self) -> None:
        """The run's options (checked), its memory and the step's result, none yet."""
        self.advbudget_options = check_run(self.cfg)
        self.advbudget_row_weights = read_row_weights(self.cfg.trainer.algorithm)
        self.advbudget_memory = RunMemory().with_ledger(self.advbudget_options.prompt_ledger)
        self.advbudget_step: Step | None = None
        self.advbudget_rounds: list[tuple[Any, list[str], Step]] = []
        if self.advbudget_options.skipped_groups == "resample":
            # SkyRL calls its dynamic-sampling hook (ours, below) only when a type is set
            self.cfg.trainer.algorithm.dynamic_sampling.type = RESAMPLE

    def handle_dynamic_sampling(
        self, generator_output: Any, uids: list[str]
    ) -> tuple[Any, list[str], bool]:
        if self.advbudget_options.skipped_groups != "resample":
            return super().handle_dynamic_sampling(generator_output, uids)  # type: ignore[no-any-return]
        self.advbudget_rounds.append(
            (generator_output, list(uids), self._score(generator_output, uids))
        )
        rounds = self.advbudget_rounds
        need = int(self.cfg.trainer.train_batch_size)
        plan = resample_plan([kept_groups(step.result) for *_, step in rounds], need, need)
        if may_resample(self.advbudget_options, len(rounds), plan.short):
            return generator_output, uids, True  # SkyRL draws the next batch of prompts
        if plan.short:
            warnings.warn(
                resample_shortfall(need - plan.short, need, len(rounds), self.advbudget_options),
                UserWarning,
                stacklevel=2,
            )
        pieces, chosen = [], []
        for index, group in plan.picks:
            output, round_uids, step = rounds[index]
            rows = np.flatnonzero(to_host(step.result.group_index) == group).tolist()
            if not rows:  # a filler past the end of a short round
                continue
            pieces.append(filter_generator_output(output, rows))
            uid = round_uids[rows[0]]
            if uid in chosen:  # the same prompt in two rounds (an epoch ended): two groups
                uid = f"{uid}#{index}"
            chosen.extend([uid] * len(rows))
        self.all_metrics.update(sampled_group_metrics([step for *_, step in rounds]))
        self.all_metrics[f"{SKYRL.metric_prefix}generation_rounds"] = float(len(rounds))
        self.advbudget_rounds = []
        return concatenate_generator_outputs(pieces), chosen, False

    def _score(self, generator_output: Any, uids: list[str]) -> Step:
        """One generation round scored by the run's estimator (its skip rule decides)."""
        algorithm = self.cfg.trainer.algorithm
        switch = {"grpo_norm_by_std": algorithm.grpo_norm_by_std}
        core, settings = core_settings(algorithm.advantage_estimator, algorithm, switch)
        rewards = [sum(r) if isinstance(r, list) else r for r in generator_output["rewards"]]
        result = compute_advantages(
            np.asarray(rewards, dtype=np.float64), core, group_ids=list(uids), **settings
        )
        return Step(result, self.advbudget_options, SKYRL.metric_prefix)

    def compute_advantages_and_returns(self, data: TrainingInputBatch) -> TrainingInputBatch:
        uids = list(data.metadata["uids"])
        last = data.metadata.get("is_last_step") if self._step_wise else None
        rows = uids if last is None else [uid for uid, end in zip(uids, last, strict=True) if end]
        padding = int(data.metadata.get("pad_size", 0) or 0)
        prompts = rows[: len(rows) - padding]
        rho, forgetting = self._forgetting(data, prompts)
        forget_published()
        with padding_rows(padding), lend_memory(self.advbudget_memory, prompts, rho=rho):
            data = super().compute_advantages_and_returns(data)
        result = take_published(len(prompts))
        self.advbudget_step = None
        if result is None:
            return data  # SkyRL's own estimator ran
        step = Step(result, self.advbudget_options, SKYRL.metric_prefix)
        metrics = {**step_metrics(step), **forgetting}
        if self.advbudget_memory.ledger is not None:
            ledger = self.advbudget_memory.ledger
            metrics.update(update_ledger(ledger, step, group_prompts(step, prompts)))
        dropped = dropped_rows(step)
        if dropped:
            _drop(data, dropped, last)
        if last is not None and self.advbudget_row_weights:
            weights = step_row_weights(last).to(data["advantages"].dtype)
            data["advantages"] = data["advantages"] * weights[:, None]
        self.all_metrics.update(metrics)
        self.advbudget_step = step
        return data

    def _forgetting(
        self, data: TrainingInputBatch, prompts: list[str]
    ) -> tuple[np.ndarray | None, dict[str, float]]:
        """With ``rho="kl"``: spo's ρ of each of the step's rows and its metrics
        (:class:`~advbudget.adapters._features.LastResponses`): the log-probs now are the
        policy's ``action_log_probs`` of the step (SkyRL's forward before the update; ours
        when SkyRL skipped it), a kept response is scored again through SkyRL's forward."""
        if not self.advbudget_options.kl_rho:
            return None, {}
        length = int(data.metadata["response_length"])

        def now(rows: list[int]) -> tuple[list[Any], list[np.ndarray]]:
            # Copies: a row of the batch's tensors would keep the whole batch alive.
            handles = [
                _Response(
                    data["sequences"][row].to("cpu", copy=True),
                    data["attention_mask"][row].to("cpu", copy=True),
                    data["response_mask"][row].to("cpu", torch.bool, copy=True),
                    length,
                )
                for row in rows
            ]
            logps = data.get("action_log_probs")
            if logps is None:  # SkyRL skipped its policy forward (a loss without old logprobs)
                return handles, self._token_logprobs(handles)
            return handles, [
                logps[row].cpu()[h.response_mask].double().numpy()
                for row, h in zip(rows, handles, strict=True)
            ]

        return self.advbudget_memory.last_responses.rho(
            prompts, now, self._token_logprobs, prefix=SKYRL.metric_prefix
        )

    def _token_logprobs(self, handles: list["_Response"]) -> list[np.ndarray]:
        """The policy's log-probs of each response's tokens now (its ``response_mask``),
        one forward through SkyRL's workers per shape of the responses (their step's
        sequence and response lengths)."""

        def score(same: list[_Response]) -> list[np.ndarray]:
            logprobs = self._policy_logprobs(
                torch.stack([h.sequences for h in same]),
                torch.stack([h.attention_mask for h in same]),
                same[0].response_length,
            )
            return [
                values[h.response_mask].double().numpy()
                for values, h in zip(logprobs, same, strict=True)
            ]

        return score_by_shape(handles, lambda h: (h.sequences.shape[0], h.response_length), score)

    def train_critic_and_policy(self, data: TrainingInputBatch) -> Any:
        step = self.advbudget_step
        if step is None or not kappa_due(step.options, self.global_step):
            return super().train_critic_and_policy(data)
        pairs = kappa_rows(step)  # in the result's namespace: torch here
        rows = to_host(pairs.rows()).tolist()
        before = self._trajectory_logprobs(data, rows)
        status = super().train_critic_and_policy(data)
        after = self._trajectory_logprobs(data, rows)
        values = (
            kappa_eff_of_pairs(pairs, before, after, rows=pairs.rows()) if rows else torch.zeros(0)
        )
        self.all_metrics.update(defined(kappa_metric_dict(values, prefix=SKYRL.metric_prefix)))
        return status

    def _trajectory_logprobs(self, data: TrainingInputBatch, trajectories: list[int]) -> Any:
        """The policy's log-prob of each of the estimator's ``trajectories`` (its rows): a
        row's response tokens, or with step-wise trajectories the sum over the trajectory's
        steps of each step's response tokens (the environment's turns are in the next step's
        prompt, not scored)."""
        last = data.metadata.get("is_last_step") if self._step_wise else None
        if last is None:
            return self._sequence_logprobs(data, trajectories)
        owner = trajectory_of_steps(last).tolist()
        position = {trajectory: at for at, trajectory in enumerate(trajectories)}
        steps = [row for row, trajectory in enumerate(owner) if trajectory in position]
        per_step = self._sequence_logprobs(data, steps)
        owners = torch.tensor([position[owner[row]] for row in steps], dtype=torch.long)
        return torch.zeros(len(trajectories), dtype=per_step.dtype).index_add(0, owners, per_step)

    @property
    def _step_wise(self) -> bool:
        return bool(self.cfg.generator.step_wise_trajectories)

    def _sequence_logprobs(self, data: TrainingInputBatch, rows: list[int]) -> torch.Tensor:
        """The policy's sequence log-probs of ``rows`` of ``data`` (their response tokens)."""
        if not rows:
            return torch.zeros(0)
        logprobs = self._policy_logprobs(
            data["sequences"][rows],
            data["attention_mask"][rows],
            int(data.metadata["response_length"]),
        )
        mask = data["response_mask"][rows]
        values: torch.Tensor = sequence_logprobs(logprobs.to(torch.float64), mask)
        return values

    def _policy_logprobs(
        self, sequences: torch.Tensor, attention_mask: torch.Tensor, response_length: int
    ) -> torch.Tensor:
        """The policy's token log-probs ``[n, response_length]`` of ``n`` sequences (their
        last ``response_length`` positions), through SkyRL's own forward pass, padded to the
        data-parallel size."""
        rows = int(sequences.shape[0])
        batch = TrainingInputBatch({"sequences": sequences, "attention_mask": attention_mask})
        batch.metadata = {"response_length": response_length}
        batch = pad_training_input_batch(batch, -rows % self.dispatch.get_lcm_dp_size())
        output = self.dispatch.forward("policy", batch)
        logprobs: torch.Tensor = loss_fn_outputs_to_tensor(output.loss_fn_outputs, key="logprobs")
        return logprobs[:rows]


@dataclass(frozen=True)
class _Response:
    """A response kept for ``rho="kl"``: its step's sequence (prompt and response), its
    attention mask, its response tokens' mask and that step's response length."""

    sequences: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    response_length: int


def trajectory_of_steps(last_step: Sequence[bool]) -> torch.Tensor:
    """The trajectory of each row of a step-wise batch: SkyRL keeps a trajectory's steps
    together, its last step last (``is_last_step``; ``trainer.py:1198-1200``), and row k of
    the estimator's call is trajectory k."""
    ends = torch.tensor(list(last_step), dtype=torch.long)
    return torch.cat([torch.zeros(1, dtype=torch.long), ends[:-1]]).cumsum(0)


def step_row_weights(last_step: Sequence[bool]) -> torch.Tensor:
    """Each row's weight in a step-wise batch: 1 / the steps of its trajectory (the core's
    ``row_weights``), so that each trajectory weighs as one row in SkyRL's loss."""
    owner = trajectory_of_steps(last_step)
    return 1.0 / torch.bincount(owner).double()[owner]


def _drop(data: TrainingInputBatch, rows: list[int], last_step: Sequence[bool] | None) -> None:
    """Zero the loss mask of the estimator's ``rows`` (trajectories: every step of each,
    with step-wise trajectories)."""
    if last_step is not None:
        chosen = torch.isin(trajectory_of_steps(last_step), torch.tensor(rows))
    else:
        chosen = torch.zeros(len(data["loss_mask"]), dtype=torch.bool)
        chosen[rows] = True
    mask = data["loss_mask"].clone()
    mask[chosen] = 0
    data["loss_mask"] = mask


class MemoryCallback(TrainingCallback):  # type: ignore[misc]
    """The run's memory beside each SkyRL checkpoint, and back on resume."""

    def on_save(
        self, trainer: Any, callback_input: CallbackInput, control: TrainingControl
    ) -> None:
        memory = getattr(trainer, "advbudget_memory", None)
        if memory and callback_input.ckpt_path:
            path = os.path.join(callback_input.ckpt_path, MEMORY_FILE)
            with open(path, "w", encoding="utf-8") as file:
                json.dump(memory.state_dict(), file)

    def on_train_start(
        self, trainer: Any, callback_input: CallbackInput, control: TrainingControl
    ) -> None:
        if trainer.global_step <= 0:  # a fresh run
            return
        config = trainer.cfg.trainer
        folder = (
            config.resume_path
            if str(config.resume_mode) == "from_path"
            else os.path.join(config.ckpt_path, f"global_step_{trainer.global_step}")
        )
        path = os.path.join(folder, MEMORY_FILE)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as file:
                memory = RunMemory.from_state_dict(json.load(file))
            trainer.advbudget_memory = memory.with_ledger(trainer.advbudget_options.prompt_ledger)


class AdvBudgetPPOExp(BasePPOExp):  # type: ignore[misc]
    """SkyRL's experiment with :class:`AdvBudgetPPOTrainer` and the DAPO environment
    (``environment.env_class=advbudget_dapo``) registered."""

    def __init__(self, cfg: Any) -> None:
        from . import rewards  # registers the DAPO environment in this process  # noqa: F401

        super().__init__(cfg)

    def get_trainer(
        self,
        cfg: Any,
        tracker: Any,
        tokenizer: Any,
        train_dataset: Any,
        eval_dataset: Any,
        inference_engine_client: Any,
        generator: Any,
        colocate_pg: Any,
    ) -> AdvBudgetPPOTrainer:
        return AdvBudgetPPOTrainer(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
        )


@ray.remote(num_cpus=1)  # type: ignore[untyped-decorator, unused-ignore]
def _entrypoint(cfg: Any, experiment: type[AdvBudgetPPOExp]) -> None:
    experiment(cfg).run()  # in a Ray task, as SkyRL's own entry point runs its trainer


def parse_config(argv: Sequence[str]) -> AdvBudgetConfig:
    """:class:`AdvBudgetConfig` from SkyRL's ``key=value`` overrides (SkyRL's
    ``trainer.override_entrypoint=...``, which dispatched here, left out)."""
    args = [arg for arg in argv if not arg.startswith("trainer.override_entrypoint=")]
    config: AdvBudgetConfig = AdvBudgetConfig.from_cli_overrides(args)
    return config


def main(
    argv: Sequence[str] | None = None, experiment: type[AdvBudgetPPOExp] = AdvBudgetPPOExp
) -> None:
    """SkyRL's training with advbudget (see the module): ``argv`` are SkyRL's overrides
    (default: the command line); ``experiment`` a subclass of :class:`AdvBudgetPPOExp`."""
    cfg = parse_config(sys.argv[1:] if argv is None else argv)
    check_run(cfg)
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(_entrypoint.remote(cfg, experiment))
