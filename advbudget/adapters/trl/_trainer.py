"""``AdvBudgetGRPOTrainer``: TRL's ``GRPOTrainer`` with advbudget's advantages.

TRL (1.13 to 1.16) has no advantage hook (trl issue #4525), so the trainer overrides
private ``GRPOTrainer`` methods (:mod:`._hooks`, with every other private TRL symbol it
uses): the reward step, to keep the rewards TRL gathered from every process, and the
generation step, to replace the advantages in its output before the batch is shuffled and
split. Advantages are computed on the global batch, because a prompt's group can span
processes, and each process keeps its own slice.
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from advbudget.core import (
    AdvantageResult,
    Estimator,
    EstimatorSpec,
    compute_advantages,
    get_spec,
)
from advbudget.metrics import (
    DEFAULT_SOLVED_REWARD,
    KappaPairs,
    PromptLedger,
    kappa_eff_of_pairs,
    kappa_metric_dict,
    kappa_pairs,
    prompt_key,
    sequence_logprobs,
)

from .._features import (
    RunMemory,
    Step,
    check_memory,
    defined,
    dropped_rows,
    group_prompts,
    kappa_due,
    kept_groups,
    may_resample,
    resample_plan,
    resample_shortfall,
    sampled_group_metrics,
    step_metrics,
    update_ledger,
)
from .._options import DEFAULT_MAX_GENERATION_BATCHES, AdapterOptions
from ._convention import TRL
from ._hooks import (
    TrainerHooks,
    beta_scaled,
    generation_batch_done,
    logged_advantages,
    metrics_store,
    pad_token_id,
    per_token_logps,
    prompt_loader,
)
from ._options import read_options
from ._version import check_trl_version

TRL_VERSION = check_trl_version()

from transformers import TrainerCallback  # noqa: E402
from trl.trainer.grpo_trainer import (  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
    GRPOTrainer,
)

# TRL 1.13 computes use_liger_kernel=True's loss in compute_liger_loss, bypassing the loss
# step that grpo_loss takes over (see _check_loss_path); TRL 1.14 moved Liger into that step.
_LIGER_SKIPS_COMPUTE_LOSS = hasattr(GRPOTrainer, "compute_liger_loss")

LOGGER = logging.getLogger(__name__)
METRIC_PREFIX = TRL.metric_prefix
# Keywords of compute_advantages besides the estimator's own options.
_COMPUTE_KEYWORDS = (
    "tie_rtol",
    "tie_atol",
    "singletons",
    "nan_policy",
    "group_weight",
    "solved_reward",
)
# TRL averages each metric over the logging window: a mean of per-step extremes is no
# extreme, so the min and max of the advantage and of the group weight are left out.
_EXTREMES = ("advantage_min", "advantage_max", "group_weight_min", "group_weight_max")
# The adapter's counters, saved in each checkpoint folder and read back on resume.
STATE_FILE = "advbudget_state.json"


@dataclass(frozen=True)
class _Response:
    """A completion as spo's ``rho="kl"`` keeps it: its prompt's tokens, its tokens up to
    the last one in ``completion_mask``, and that mask (host tensors)."""

    prompt: torch.Tensor
    completion: torch.Tensor
    mask: torch.Tensor


@dataclass
class _KappaBatch:
    """What the κ_eff pass after the update needs: the pairs of the global batch, this
    process's pair rows and their log-probs before the update."""

    pairs: KappaPairs  # o+ / o- of each group, indices into the global batch
    rows: torch.Tensor  # local indices of this process's pair rows (one dummy row if none)
    real: int  # how many of ``rows`` are pair rows (0 or len(rows))
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    logp_before: torch.Tensor  # sequence log-probs before the update, [len(rows)]
    local_size: int


class AdvBudgetGRPOTrainer(TrainerHooks, GRPOTrainer):  # type: ignore[misc, unused-ignore]
    """TRL's ``GRPOTrainer`` whose advantages come from an advbudget estimator.

    Takes every ``GRPOTrainer`` argument, plus the ones below (keyword only). TRL's loss
    (``loss_type``: dapo, grpo, dr_grpo, bnpo, ...), clipping, KL and generation settings
    are used as they are; only the advantages change. ``scale_rewards`` is ignored (the
    estimator decides), and the rewards are TRL's weighted sum of the reward functions
    (``multi_objective_aggregation="sum_then_normalize"``, the default; the other value is
    refused). An estimator of reward components (``"gdpo"``) gets each reward function's
    rewards instead, one component each (``[B, n_funcs]``, NaN where a function returned
    None), and TRL's ``reward_weights`` as its ``weights`` unless
    ``advantage_options`` has them; ``multi_objective_aggregation`` is then ignored too
    (``"gdpo"`` is TRL's ``"normalize_then_sum"``).

    Args:
        advantage_estimator: any estimator of the advbudget catalogue, by name or alias
            (``"budget"``, ``"grpo"``, ``"dr"``, ``"rloo"``, a registered or plugin name;
            ``advbudget estimators`` lists them), an ``EstimatorSpec``, or an estimator
            callable.
        advantage_options: the estimator's options (``{"budget": 1.0}``), checked against
            its spec now. Estimators TRL has too keep TRL's constants unless given here
            (``"grpo"``: ``eps`` 1e-4 and unbiased std, as ``scale_rewards="group"``).
        nan_policy: a completion that every reward function scored ``None`` has a NaN
            reward. ``"omit"`` (default) leaves it out of its group's statistics and
            gives it advantage 0 (what TRL does); ``"raise"`` raises ValueError.
        tie_rtol, tie_atol: reward spreads at most this are ties (group skipped); see
            :func:`advbudget.compute_advantages`. Default: exact ties for the estimators
            TRL has (its numbers), 1e-6 for the others (budget, plugins).
        skipped_groups: what happens to the rollouts that take no part in the update
            (their group was skipped, or their reward is NaN under ``nan_policy="omit"``):
            ``"keep"`` (default, TRL's behaviour): advantage 0, still counted by the loss
            normaliser. ``"drop"``: out of the loss and its normaliser for every
            ``loss_type``, as if the batch held only the kept groups (their
            ``completion_mask`` rows are zeroed, so the KL and entropy terms leave them
            too; the per-sequence normalisers of grpo, sapo, luspo and dr_grpo count kept
            sequences only, dr_grpo's constant ``max_completion_length`` per sequence
            stays; bnpo's is per micro-batch, dapo's, cispo's and vespo's the generation
            batch's kept tokens; refused for the per-sequence losses where the loss does
            not go through :meth:`grpo_loss`: TRL 1.13 with ``use_liger_kernel``, a
            patched trainer such as Unsloth's). ``"resample"``: DAPO's dynamic sampling:
            generate for new prompts until every process holds its share of kept groups, at most
            ``max_generation_batches`` rounds a step, then drop what is still skipped
            (with a warning naming the counts); needs each process's generation batch
            (``per_device_train_batch_size * steps_per_generation``) to hold whole groups.
        max_generation_batches: the most generation rounds one step may take with
            ``skipped_groups="resample"`` (default 10, as verl's DAPO recipe).
        skip_empty_groups: deprecated alias: True is ``skipped_groups="drop"``.
        prompt_ledger: keep the per-prompt ledger (default True): every step logs
            ``advbudget/never_solved_prompt_fraction``,
            ``advbudget/always_solved_prompt_fraction`` and ``advbudget/recurring_prompts``
            over the prompts seen at least twice (identity: a hash of the prompt text or
            messages), saved in each checkpoint and restored on resume. Needs
            ``solved_reward``.
        solved_reward: the reward (TRL's weighted sum; with reward components, their
            plain sum) at which a completion counts as solved, for
            ``advbudget/unsolved_group_fraction`` (no completion of the group reached it)
            and ``advbudget/solved_group_fraction`` (every one did); default 1.0, the
            success value of 0/1 and +-1 rewards; None leaves the two keys out.
            See :func:`advbudget.metrics.group_outcomes` for the rule.
        group_weight: a difficulty weight on the advantages from each group's solved share
            (reaching ``solved_reward``, 1.0 when that is None): ``"grpo_lead"``,
            ``"dqw"``, ``{"name": ..., options}`` or a callable ``fn(p_hat)``; see
            :func:`advbudget.compute_advantages`. Logged as
            ``advbudget/group_weight_mean`` (its min and max are left out, as the
            advantage's). Default None: no weight.
        kappa_every: log κ_eff every this many generation batches (0, the default: never).
            The old log-probs come from TRL's ``old_per_token_logps`` when the batch is
            reused, else from one extra forward pass before the update; the new ones from
            an extra forward pass after the last optimizer step on the batch, on the
            max/min-advantage rollouts of each group only.

    Metrics (in TRL's metrics of the mode, logged by TRL with an ``eval_`` prefix in eval):
    ``advbudget/skipped_group_fraction``, ``advbudget/unsolved_group_fraction``,
    ``advbudget/solved_group_fraction``, ``advbudget/advantage_gap_mean``,
    ``advbudget/positive_advantage_fraction``, ``advbudget/valid_fraction``,
    ``advbudget/advantage_mean``, ``advbudget/advantage_std`` and
    ``advbudget/nan_reward_fraction`` (rollouts every reward function scored None), the
    ledger's three keys, with ``skipped_groups="resample"`` ``advbudget/generation_batches``
    (the group fractions are then over every generated group), and with ``kappa_every``
    ``advbudget/kappa_eff/{mean,median,std}``. A metric a step has no
    value for (the advantage gap when every group is skipped, κ_eff without pairs) is left
    out of that step rather than logged as NaN/None.

    The options above are read and checked once, at construction (a bad value raises a
    one-line ValueError naming the argument before the model loads), into
    ``trainer.advbudget_options``.

    Faults: a κ_eff pass that raises is skipped with a RuntimeWarning and training goes
    on. Resume: the κ_eff schedule's counter is saved as ``advbudget_state.json`` in each
    checkpoint folder and read back by ``train(resume_from_checkpoint=...)``.

    The advantages in TRL's completions table (``log_completions``) are the ones used.

    Eval uses ``num_generations_eval`` as the group size.

    Scale: budget advantages are much smaller than GRPO's unit-variance ones, so a KL
    (``beta``) or entropy term weighs relatively more at the same coefficient.

    References:
        Reward Budgeting Reduces Premature Convergence in Reinforcement Learning for LLM
        Reasoning, https://arxiv.org/abs/2611.05942
    """

    def __init__(
        self,
        *args: Any,
        advantage_estimator: str | Estimator | EstimatorSpec = "budget",
        advantage_options: Mapping[str, Any] | None = None,
        nan_policy: str = "omit",
        tie_rtol: float | None = None,
        tie_atol: float | None = None,
        skipped_groups: str = "keep",
        max_generation_batches: int = DEFAULT_MAX_GENERATION_BATCHES,
        skip_empty_groups: bool | None = None,
        kappa_every: int = 0,
        solved_reward: float | None = DEFAULT_SOLVED_REWARD,
        prompt_ledger: bool = True,
        group_weight: Any = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(advantage_estimator, str):
            spec = get_spec(advantage_estimator)  # an unknown name fails here, not at step 1
        elif isinstance(advantage_estimator, EstimatorSpec):
            spec = advantage_estimator
        elif callable(advantage_estimator):
            spec = None
        else:
            raise TypeError(
                "advantage_estimator: expected an estimator name, an EstimatorSpec or a "
                f"callable, got {type(advantage_estimator).__name__}"
            )
        # Read once: every later use goes through this record.
        options = read_options(
            {
                "advantage_options": advantage_options,
                "nan_policy": nan_policy,
                "tie_rtol": tie_rtol,
                "tie_atol": tie_atol,
                "skipped_groups": skipped_groups,
                "max_generation_batches": max_generation_batches,
                "skip_empty_groups": skip_empty_groups,
                "kappa_every": kappa_every,
                "solved_reward": solved_reward,
                "group_weight": group_weight,
            }
        )
        if skip_empty_groups is not None:
            warnings.warn(
                "AdvBudgetGRPOTrainer: skip_empty_groups is deprecated; use "
                "skipped_groups='drop' (True) or 'keep' (False)",
                DeprecationWarning,
                stacklevel=2,
            )
        if not isinstance(prompt_ledger, bool):
            raise TypeError(f"prompt_ledger: expected a bool, got {prompt_ledger!r}")
        if options.skipped_groups != "keep":
            trl_args = kwargs.get("args", args[2] if len(args) > 2 else None)
            _check_loss_path(trl_args, options.skipped_groups)
        needs = [] if spec is None else list(spec.required_inputs)
        if spec is not None and needs:  # optional inputs (whitening's weights): not given
            names = ", ".join(needs)
            raise ValueError(
                f"advantage_estimator: {spec.name} needs per-rollout inputs ({names}) that "
                "TRL's reward step does not provide"
            )
        # advantage_options as given (a key the estimator does not take is refused below),
        # with the checked values of the options read.
        overrides = {
            **{
                k: v
                for k, v in (advantage_options or {}).items()
                if not (options.kl_rho and k == "rho")  # measured each step: see _forgetting
            },
            **options.estimator_options,
            **options.weight_keywords(),
        }
        settings = TRL.settings(advantage_estimator, overrides)
        if spec is not None:  # a bad option fails here, not at step 1
            spec.resolve_options({k: v for k, v in settings.items() if k not in _COMPUTE_KEYWORDS})
        self.advantage_estimator = advantage_estimator
        self.advantage_settings = settings
        self.advbudget_options: AdapterOptions = options
        check_memory(spec, options, str, unnamed="a callable estimator")
        self._advbudget_spec = spec
        # The ledger and an estimator's memory: kept with each checkpoint (advbudget_state).
        self.advbudget_memory = RunMemory().with_ledger(prompt_ledger and options.prompt_ledger)
        super().__init__(*args, **kwargs)
        if options.skipped_groups == "resample":
            self._check_resample()
        if options.skipped_groups != "keep" and self.loss_type == "dr_grpo":
            LOGGER.warning(
                "AdvBudgetGRPOTrainer: loss_type='dr_grpo' divides by a constant by design "
                "(max_completion_length per sequence); skipped_groups=%r counts the kept "
                "sequences only",
                options.skipped_groups,
            )
        self._advbudget_components = spec is not None and spec.components
        if self._advbudget_components and "weights" not in self.advantage_settings:
            self.advantage_settings["weights"] = self.reward_weights.tolist()
        if self.multi_objective_aggregation != "sum_then_normalize" and not (
            self._advbudget_components
        ):
            raise ValueError(
                "multi_objective_aggregation: AdvBudgetGRPOTrainer computes advantages from "
                "the weighted sum of the rewards; expected 'sum_then_normalize', got "
                f"{self.multi_objective_aggregation!r}"
            )
        self._advbudget_rewards_per_func: torch.Tensor | None = None
        self._advbudget_generations = 0
        self._advbudget_kappa: _KappaBatch | None = None
        # Per mode, the factor that turns a per-sequence loss's normaliser (all rows) into
        # the kept rows' under skipped_groups="drop" (see grpo_loss).
        self._advbudget_row_scale = {"train": 1.0, "eval": 1.0}
        self._advbudget_refill: Any = None  # resample's prompt stream, made on first use
        self._advbudget_refill_epoch = 0
        self.last_advantage_result: AdvantageResult | None = None
        self.add_callback(_StateCallback(self))
        if options.kappa_every:
            self.add_callback(_KappaCallback(self))

    # -- where TRL's steps come in (through ._hooks.TrainerHooks) -----------------------

    def after_rewards(self, rewards_per_func: torch.Tensor) -> None:
        """Keep the rewards TRL's reward step gathered from every process, [global B,
        n_funcs], NaN where a function returned None, for the generation step."""
        self._advbudget_rewards_per_func = rewards_per_func

    def generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's generation step on this process's ``inputs``, with the advantages (and,
        under ``skipped_groups``, the rows) of the estimator: what TRL then shuffles and
        splits into micro-batches."""
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        if not isinstance(group_size, int):
            raise RuntimeError(f"num_generations: expected an int for {mode}, got {group_size!r}")
        options = self.advbudget_options
        output, rewards = self._generate_round(inputs)
        local_size = int(output["advantages"].shape[0])
        start = self.accelerator.process_index * local_size
        local = slice(start, start + local_size)
        rho, forgetting = self._forgetting(inputs, output, start, mode)
        rounds = [self._scored(inputs, rewards, group_size, mode, rho)]
        step = rounds[0][0]
        resample = mode == "train" and options.skipped_groups == "resample"
        if resample:
            output, rewards = self._resample(output, rewards, rounds, group_size, local)
            # The assembled batch's own advantages: an estimator with batch statistics
            # sees the batch it trains on.
            step = Step(self._advantages(rewards, group_size), options, METRIC_PREFIX)
        result = self.last_advantage_result = step.result

        advantages = result.advantages.to(output["advantages"].dtype)
        output["advantages"] = advantages[local]
        self._advbudget_row_scale[mode] = 1.0
        if options.skipped_groups != "keep":
            valid = torch.ones_like(result.valid, dtype=torch.bool)
            valid[dropped_rows(step)] = False
            self._drop_invalid_rows(output, valid, local, mode)

        metrics = {k: v for k, v in step_metrics(step).items() if not k.endswith(_EXTREMES)}
        metrics.update(forgetting)
        if resample:
            metrics.update(sampled_group_metrics([round_step for round_step, _ in rounds]))
        if self.prompt_ledger is not None and mode == "train":
            for round_step, prompts in rounds:  # the metrics after the last round stay
                metrics.update(update_ledger(self.prompt_ledger, round_step, prompts))
        self._log_metrics(mode, metrics)
        if mode == "train":
            # TRL's first generation batch is measured too: its count starts at 0.
            if kappa_due(options, self._advbudget_generations):
                try:
                    self._advbudget_kappa = self._kappa_before(output, start)
                except Exception as error:  # a metric: never worth the step
                    self._kappa_failed("before the update", error)
            self._advbudget_generations += 1
        return output

    def grpo_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        """TRL's loss of one micro-batch; under ``skipped_groups="drop"``, the per-sequence
        losses over the kept rows."""
        mode = "train" if self.model.training else "eval"
        scale = self._advbudget_row_scale[mode]
        if scale == 1.0 or self.loss_type not in _PER_SEQUENCE_LOSSES:
            return self.trl_grpo_loss(model, inputs)
        # These losses divide by the micro-batch's number of sequences, which still counts
        # the dropped rows. Every TRL 1.13-1.16 loss is positively homogeneous in the advantages
        # and linear in beta, so scaling both by (rows / kept rows) of the generation batch
        # is dividing by the kept rows instead; the entropy bonus (a token mean) is left as
        # it is. Over the accumulation window and the processes this is the kept rows'
        # mean, as the dapo loss's num_items_in_batch is the kept tokens' total.
        with beta_scaled(self, scale):
            scaled = {**inputs, "advantages": inputs["advantages"] * scale}
            return self.trl_grpo_loss(model, scaled)

    def _generate_round(self, inputs: Any) -> tuple[dict[str, Any], torch.Tensor]:
        """TRL's generation and scoring of ``inputs`` (this process's prompts), and the
        rewards of the global batch (TRL's weighted sum, NaN where no function scored; per
        reward function for an estimator of reward components)."""
        output = self.trl_generate_and_score_completions(inputs)
        rewards_per_func = self._advbudget_rewards_per_func
        self._advbudget_rewards_per_func = None
        if rewards_per_func is None:
            raise RuntimeError(
                "AdvBudgetGRPOTrainer: TRL's generation step did not go through its reward "
                "step; this TRL version is not supported by the adapter"
            )
        return output, self._rewards(rewards_per_func)

    # -- pieces ----------------------------------------------------------------------

    def compute_group_advantages(
        self,
        rewards_per_func: torch.Tensor,
        group_size: int,
        prompts: list[Any] | None = None,
    ) -> AdvantageResult:
        """Advantages of the global batch from TRL's per-function rewards ``[B, n_funcs]``.

        The reward of a completion is TRL's weighted ``nansum`` over the reward functions;
        it is NaN when every function returned None (then ``nan_policy`` applies). An
        estimator of reward components takes the matrix as it is, one component per
        function. ``prompts``: one per completion, for an estimator with memory (``spo``,
        ``rae``), which this call then updates.
        """
        keys = None if prompts is None else [prompt_key(p) for p in prompts]
        return self._advantages(self._rewards(rewards_per_func), group_size, keys)

    def _rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        if self._advbudget_components:
            return rewards_per_func
        return self._weighted_rewards(rewards_per_func)

    def _weighted_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        return torch.where(unscorable, torch.full_like(rewards, math.nan), rewards)

    @property
    def prompt_ledger(self) -> PromptLedger | None:
        """The run's per-prompt ledger (None when off)."""
        return self.advbudget_memory.ledger

    def _advantages(
        self,
        rewards: torch.Tensor,
        group_size: int,
        row_prompts: list[int] | None = None,
        mode: str = "train",
        rho: np.ndarray | None = None,
    ) -> AdvantageResult:
        memory: dict[str, Any] = {}
        if self._advbudget_spec is not None:
            memory = self.advbudget_memory.keywords(
                self._advbudget_spec,
                row_prompts,
                "AdvBudgetGRPOTrainer passes the prompt of each completion (prompt_key of "
                "its 'prompt'); compute_group_advantages(..., prompts=) takes them",
                remember=mode == "train",
                rho=rho,
            )
        return compute_advantages(
            rewards,
            self.advantage_estimator,
            group_size=group_size,
            **self.advantage_settings,
            **memory,
        )

    def _row_prompts(self, inputs: list[Any]) -> list[int]:
        """The prompt identity of each completion of the global batch (TRL's inputs repeat
        a prompt for each of its completions): what the ledger and an estimator's memory
        key on."""
        keys = [prompt_key(example.get("prompt")) for example in inputs]
        if self.accelerator.num_processes > 1:  # a group may start on another process
            from accelerate.utils import (  # type: ignore[import-untyped, unused-ignore]
                gather_object,
            )

            keys = list(gather_object(keys))
        return keys

    def _scored(
        self,
        inputs: list[Any],
        rewards: torch.Tensor,
        group_size: int,
        mode: str,
        rho: np.ndarray | None = None,
    ) -> tuple[Step, list[int]]:
        """One generation round's advantages (computed once, and shown in TRL's completions
        log), and the prompt identity of each group of the global batch for the ledger
        (empty when it is off, or in eval). ``rho``: spo's forgetting per row (rho="kl")."""
        stateful = self._advbudget_spec is not None and self._advbudget_spec.tracker is not None
        ledger = self.prompt_ledger is not None and mode == "train"
        keys = self._row_prompts(inputs) if stateful or ledger else None
        result = self._advantages(rewards, group_size, keys, mode, rho)
        step = Step(result, self.advbudget_options, METRIC_PREFIX)
        self._replace_logged_advantages(step.result.advantages)
        if not ledger or keys is None:
            return step, []
        return step, group_prompts(step, keys)

    # -- rho="kl": spo's KL-adaptive forgetting ------------------------------------------

    def _forgetting(
        self, inputs: list[Any], output: dict[str, Any], start: int, mode: str
    ) -> tuple[np.ndarray | None, dict[str, float]]:
        """With ``rho="kl"``, in training: spo's ρ of each row of the global batch and its
        metrics (:class:`~advbudget.adapters._features.LastResponses`). Each process keeps
        the last responses of the rows it holds, scores them again when their prompt comes
        back, and shares the drifts with the others."""
        if not (self.advbudget_options.kl_rho and mode == "train"):
            return None, {}
        local_size = int(output["completion_ids"].shape[0])

        def now(rows: list[int]) -> tuple[list[Any], list[np.ndarray]]:
            handles = [_response(output, row - start) for row in rows]
            old = output.get("old_per_token_logps")
            if old is None:  # TRL computed none this step (one update per generation)
                return handles, self._token_logps(handles)
            logps = [
                old[row - start, : h.mask.shape[0]].cpu()[h.mask]
                for row, h in zip(rows, handles, strict=True)
            ]
            return handles, [values.float().numpy() for values in logps]

        share = None
        if self.accelerator.num_processes > 1:
            from accelerate.utils import gather_object  # type: ignore[import-untyped, unused-ignore]

            def share(drift: dict[Any, float]) -> dict[Any, float]:
                return {k: v for part in gather_object([drift]) for k, v in part.items()}

        return self.advbudget_memory.last_responses.rho(
            self._row_prompts(inputs),
            now,
            lambda handles: self._token_logps(handles, filler=_response(output, 0)),
            local=range(start, start + local_size),
            share=share,
            prefix=METRIC_PREFIX,
        )

    def _token_logps(self, handles: list[_Response], filler: Any = None) -> list[np.ndarray]:
        """The policy's log-probs of the completion tokens of ``handles``, one forward pass
        through TRL's own (a sharded model needs every process in it: with no response
        here, ``filler`` goes through and nothing comes back)."""
        if not handles and (filler is None or self.accelerator.num_processes == 1):
            return []
        batch = handles or [filler]
        prompt_width = max(int(h.prompt.shape[0]) for h in batch)
        width = max(int(h.completion.shape[0]) for h in batch)
        ids, masks, pad = [], [], pad_token_id(self)
        for h in batch:
            left = prompt_width - int(h.prompt.shape[0])
            right = width - int(h.completion.shape[0])
            tokens = torch.cat([h.prompt, h.completion])
            ids.append(torch.nn.functional.pad(tokens, (left, right), value=pad))
            masks.append(torch.nn.functional.pad(torch.ones_like(tokens), (left, right)))
        device = self.accelerator.device
        with torch.no_grad():
            logps = per_token_logps(
                self,
                torch.stack(ids).to(device),
                torch.stack(masks).to(device),
                width,
                batch_size=self.args.per_device_train_batch_size,
            ).cpu()
        return [logps[i, : h.mask.shape[0]][h.mask].float().numpy() for i, h in enumerate(handles)]

    # -- skipped_groups="resample" -----------------------------------------------------

    def _check_resample(self) -> None:
        """Refuse, before training, what resampling cannot do (one line each)."""
        local_rows = self.args.per_device_train_batch_size * self.args.steps_per_generation
        if local_rows % self.num_generations:
            raise ValueError(
                "skipped_groups: 'resample' needs each process's generation batch "
                "(per_device_train_batch_size * steps_per_generation) to hold whole groups "
                f"of num_generations={self.num_generations}, got {local_rows} rows"
            )
        if isinstance(self.train_dataset, torch.utils.data.IterableDataset):
            raise ValueError(
                "skipped_groups: 'resample' draws extra prompts by index and needs a "
                "map-style train_dataset, got an IterableDataset"
            )

    def _refill_inputs(self) -> list[Any]:
        """The next local generation batch of resample's own prompt stream: TRL's sampler
        with one repeat per batch and another seed than the training stream's, so extra
        prompts are fresh draws, the same on every process."""
        while True:
            if self._advbudget_refill is None:
                seed = self.args.seed + 1 + self._advbudget_refill_epoch
                self._advbudget_refill = iter(prompt_loader(self, seed))
            try:
                return list(next(self._advbudget_refill))
            except StopIteration:  # a new epoch of the stream, shuffled anew
                self._advbudget_refill = None
                self._advbudget_refill_epoch += 1

    def _resample(
        self,
        output: dict[str, Any],
        rewards: torch.Tensor,
        rounds: list[tuple[Step, list[int]]],
        group_size: int,
        local: slice,
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """DAPO's dynamic sampling: generate for new prompts until every process holds as
        many kept groups as its generation batch has groups (or the rounds run out), then
        train on the first ones of each process in round order, filled up with skipped
        groups (dropped) when short. Every process decides from the same gathered counts,
        so all take the same number of rounds. Each round is appended to ``rounds``; the
        assembled output and the rewards of the assembled global batch are returned."""
        options = self.advbudget_options
        local_groups = (local.stop - local.start) // group_size
        first = local.start // group_size
        mine = range(first, first + local_groups)
        outputs, local_rewards = [output], [rewards[local]]
        kept = [[g - first for g in kept_groups(rounds[0][0].result, mine)]]
        while True:
            have = torch.tensor([sum(map(len, kept))], device=rewards.device)
            short = int((local_groups - self.accelerator.gather(have)).clamp(min=0).sum())
            if not may_resample(options, len(outputs), short):
                break
            inputs = self._refill_inputs()
            round_output, round_rewards = self._generate_round(inputs)
            rounds.append(self._scored(inputs, round_rewards, group_size, "train"))
            outputs.append(round_output)
            local_rewards.append(round_rewards[local])
            kept.append([g - first for g in kept_groups(rounds[-1][0].result, mine)])
        if short:
            total = local_groups * self.accelerator.num_processes
            message = resample_shortfall(total - short, total, len(outputs), options)
            warnings.warn(f"AdvBudgetGRPOTrainer: {message}", RuntimeWarning, stacklevel=3)
        plan = resample_plan(kept, need=local_groups, groups_per_round=local_groups)
        rows = [(r, g * group_size + i) for r, g in plan.picks for i in range(group_size)]
        assembled = _take_rows(outputs, rows, pad_token_id(self))
        picked = torch.stack([local_rewards[r][i] for r, i in rows])
        self._log_metrics("train", {METRIC_PREFIX + "generation_batches": float(len(outputs))})
        return assembled, self.accelerator.gather(picked)

    def _log_metrics(self, mode: str, metrics: Mapping[str, float]) -> None:
        """Append to TRL's metrics, leaving out values a step does not have (NaN): TRL
        averages what it has over the logging steps and logs None for a key with nothing,
        which TensorBoard refuses."""
        store = metrics_store(self)[mode]
        for key, value in defined(metrics).items():
            store[key].append(value)

    def _kappa_failed(self, when: str, error: Exception) -> None:
        warnings.warn(
            f"AdvBudgetGRPOTrainer: κ_eff skipped at step {self.state.global_step}: the pass "
            f"{when} failed ({type(error).__name__}: {error}); training goes on",
            RuntimeWarning,
            stacklevel=3,
        )
        self._advbudget_kappa = None

    # -- checkpoint state --------------------------------------------------------------

    def advbudget_state(self) -> dict[str, Any]:
        """The adapter's state that a resumed run must continue from: the κ_eff
        schedule's counter, the prompt ledger and an estimator's memory."""
        state: dict[str, Any] = {"generations": self._advbudget_generations}
        if self.advbudget_memory:
            state["memory"] = self.advbudget_memory.state_dict()
        return state

    def load_advbudget_state(self, state: Mapping[str, Any]) -> None:
        self._advbudget_generations = int(state.get("generations", 0))
        saved = state.get("memory", state.get("prompt_ledger"))  # older: the ledger alone
        if saved is not None:
            ledger = self.prompt_ledger is not None
            self.advbudget_memory = RunMemory.from_state_dict(saved).with_ledger(ledger)

    def after_load(self, checkpoint: str) -> None:
        """Read the adapter's state back from ``checkpoint`` (a folder TRL resumes from)."""
        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as file:
                self.load_advbudget_state(json.load(file))
        else:
            warnings.warn(
                f"AdvBudgetGRPOTrainer: {path} not found (a checkpoint of another trainer?): "
                "the κ_eff schedule, the prompt ledger and an estimator's memory restart at "
                "this step",
                RuntimeWarning,
                stacklevel=3,  # TRL's train(), past the hook,
            )

    def _drop_invalid_rows(
        self, output: dict[str, Any], valid: torch.Tensor, local: slice, mode: str
    ) -> None:
        """Take the rows that are not ``valid`` (global) out of the loss: zero their
        ``completion_mask`` (token sums, token means, KL, entropy), recount the token
        normaliser of dapo/cispo/vespo and set the per-sequence losses' row factor."""
        mask = output["completion_mask"]
        output["completion_mask"] = mask * valid[local].unsqueeze(1).to(mask.dtype)
        loss_mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            loss_mask = loss_mask * output["tool_mask"]
        # The dapo/cispo normaliser: tokens of the whole generation batch, all processes.
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        kept = int(valid.sum())  # valid is the global batch's: the same on every process
        if kept:
            self._advbudget_row_scale[mode] = int(valid.shape[0]) / kept

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        # TRL appended its own advantages of all processes to the completions log just now.
        logged = logged_advantages(self)
        for _ in range(min(int(advantages.shape[0]), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    def _sequence_logps(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_mask: torch.Tensor
    ) -> torch.Tensor:
        with torch.no_grad():
            logps = per_token_logps(
                self,
                input_ids,
                attention_mask,
                completion_mask.shape[1],
                batch_size=self.args.per_device_train_batch_size,
            )
        total: torch.Tensor = sequence_logprobs(logps, completion_mask)
        return total

    def _kappa_before(self, output: dict[str, Any], start: int) -> _KappaBatch:
        """Pick the pairs from the global batch's AdvantageResult
        (``self.last_advantage_result``); keep this process's pair rows (from row ``start``
        of the global batch) and their log-probs before the update."""
        result = self.last_advantage_result
        if result is None:
            raise RuntimeError("AdvBudgetGRPOTrainer: κ_eff needs the batch's AdvantageResult")
        local_size = int(output["advantages"].shape[0])
        # The result's own grouping: no pair in a group the estimator skipped, and never a
        # rollout without a reward (the bare advantages' pairs, _features.kappa_rows, may
        # pick either; see grpo_passk, reinforce).
        pairs = kappa_pairs(result)
        rows = pairs.rows()
        rows = rows[(rows >= start) & (rows < start + local_size)] - start
        real = int(rows.shape[0])
        if real == 0:  # still run the forward passes: sharded models need every rank
            rows = torch.zeros(1, dtype=torch.long, device=rows.device)
        rows = rows.to(output["completion_ids"].device)
        prompt_ids, prompt_mask = output["prompt_ids"][rows], output["prompt_mask"][rows]
        completion_ids = output["completion_ids"][rows]
        completion_mask = output["completion_mask"][rows]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        old = output.get("old_per_token_logps")
        if old is not None:
            logp_before = sequence_logprobs(old[rows], completion_mask)
        else:
            logp_before = self._sequence_logps(input_ids, attention_mask, completion_mask)
        return _KappaBatch(
            pairs=pairs,
            rows=rows,
            real=real,
            input_ids=input_ids,
            attention_mask=attention_mask,
            completion_mask=completion_mask,
            logp_before=logp_before,
            local_size=local_size,
        )

    def _kappa_after(self) -> None:
        """Log κ_eff of the pending batch (call after its last optimizer step)."""
        batch, self._advbudget_kappa = self._advbudget_kappa, None
        if batch is None:
            return
        try:
            self._kappa_after_batch(batch)
        except Exception as error:  # a metric: never worth the step
            self._kappa_failed("after the update", error)

    def _kappa_after_batch(self, batch: _KappaBatch) -> None:
        logp_after = self._sequence_logps(
            batch.input_ids, batch.attention_mask, batch.completion_mask
        )
        # This process's rows of the global batch, [local B, 2] (before, after), NaN off
        # the pair rows; one gather gives every process's, in process order.
        local = torch.full((batch.local_size, 2), math.nan, device=logp_after.device)
        if batch.real:
            local[batch.rows] = torch.stack([batch.logp_before, logp_after], dim=1).float()
        both = self.accelerator.gather(local).to(batch.pairs.top.device)
        values = kappa_eff_of_pairs(batch.pairs, both[:, 0], both[:, 1])
        stats = kappa_metric_dict(values, prefix=METRIC_PREFIX)
        keys = [f"{METRIC_PREFIX}kappa_eff/{key}" for key in ("mean", "median", "std")]
        self._log_metrics("train", {key: stats[key] for key in keys})


class _StateCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]
    """Writes the adapter's counters into each checkpoint folder (read back by
    :meth:`AdvBudgetGRPOTrainer.after_load` on ``train(resume_from_checkpoint=...)``)."""

    def __init__(self, trainer: AdvBudgetGRPOTrainer) -> None:
        self.trainer = trainer

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if os.path.isdir(folder):
            with open(os.path.join(folder, STATE_FILE), "w", encoding="utf-8") as file:
                json.dump(self.trainer.advbudget_state(), file)


class _KappaCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]
    """Runs the κ_eff pass once the optimizer has stepped on a whole generation batch."""

    def __init__(self, trainer: AdvBudgetGRPOTrainer) -> None:
        self.trainer = trainer

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.trainer._advbudget_kappa is not None and generation_batch_done(self.trainer):
            self.trainer._kappa_after()


# What TRL's loss divides by a number of sequences (see AdvBudgetGRPOTrainer.grpo_loss).
_PER_SEQUENCE_LOSSES = ("grpo", "sapo", "luspo", "dr_grpo")
# Keys of TRL's generation output resample knows how to assemble: [B, T] completion-aligned
# tensors pad on the right, prompts on the left; other keys are refused.
_COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def _check_loss_path(
    args: Any, skipped_groups: str, compute_loss: Any = GRPOTrainer.compute_loss
) -> None:
    """Refuse dropping rows where the per-sequence losses' normaliser would still count them:
    ``AdvBudgetGRPOTrainer.grpo_loss`` divides grpo, sapo, luspo and dr_grpo by the kept
    rows, and a loss computed elsewhere skips it (TRL 1.13's Liger loss; a GRPOTrainer whose
    ``compute_loss`` was replaced, as Unsloth's). The token-level losses read the zeroed
    ``completion_mask`` and recounted ``num_items_in_batch`` from the batch itself."""
    loss_type = getattr(args, "loss_type", None)
    if loss_type not in _PER_SEQUENCE_LOSSES:
        return
    head = f"skipped_groups: {skipped_groups!r} with loss_type={loss_type!r}"
    fix = "use skipped_groups='keep' or a token-level loss_type (dapo, bnpo, cispo, vespo)"
    if _LIGER_SKIPS_COMPUTE_LOSS and getattr(args, "use_liger_kernel", False):
        raise ValueError(
            f"{head} and use_liger_kernel=True needs trl>=1.14, got trl {TRL_VERSION} (its "
            f"Liger loss bypasses the adapter's per-sequence normaliser); {fix}, or "
            "use_liger_kernel=False"
        )
    owner = getattr(compute_loss, "__module__", None) or "?"
    if not owner.startswith("trl."):
        raise ValueError(
            f"{head} needs TRL's own GRPOTrainer.compute_loss, got one from {owner} (a "
            "patched trainer, such as Unsloth's, bypasses the adapter's per-sequence "
            f"normaliser); {fix}"
        )


def _response(output: dict[str, Any], row: int) -> _Response:
    """One row of TRL's generation output, on the host and without padding: what spo's
    ``rho="kl"`` scores again later."""
    prompt = output["prompt_ids"][row][output["prompt_mask"][row].bool()]
    mask = output["completion_mask"][row].bool()
    length = int(mask.nonzero().max()) + 1 if mask.any() else 0
    return _Response(
        prompt.cpu(), output["completion_ids"][row][:length].cpu(), mask[:length].cpu()
    )


def _take_rows(
    outputs: list[dict[str, Any]], rows: list[tuple[int, int]], pad_token_id: int
) -> dict[str, Any]:
    """One generation output made of ``rows`` ((round, local row) pairs) of several,
    padded to the widest round: prompts on the left, completions on the right (pad
    token for ids, 0 for masks and per-token values)."""
    known = {*_COMPLETION_KEYS, *_PROMPT_KEYS, "advantages", "num_items_in_batch"}
    unknown = set(outputs[0]) - known
    if unknown:
        raise ValueError(
            "skipped_groups: 'resample' cannot assemble the generation output keys "
            f"{sorted(unknown)} (multimodal inputs, or a patched trainer's); use 'drop'"
        )
    assembled: dict[str, Any] = {}
    for key in outputs[0]:  # TRL's order: its shuffle reads the batch size off the first
        if key == "num_items_in_batch":  # recounted by the caller
            assembled[key] = outputs[0][key]
            continue
        parts = [output[key] for output in outputs]
        if parts[0].dim() == 2 and key in (*_COMPLETION_KEYS, *_PROMPT_KEYS):
            width = max(int(part.shape[1]) for part in parts)
            fill = pad_token_id if key.endswith("_ids") else 0
            left = key in _PROMPT_KEYS
            parts = [
                torch.nn.functional.pad(
                    part,
                    (width - part.shape[1], 0) if left else (0, width - part.shape[1]),
                    value=fill,
                )
                for part in parts
            ]
        assembled[key] = torch.stack([parts[r][i] for r, i in rows])
    return assembled
