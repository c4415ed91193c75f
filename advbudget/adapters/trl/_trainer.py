"""``AdvBudgetGRPOTrainer``: TRL's ``GRPOTrainer`` with advbudget's advantages.

TRL (1.16) has no advantage hook (trl issue #4525), so the trainer overrides two private
methods: ``_calculate_rewards`` (to keep the rewards TRL gathered from every process) and
``_generate_and_score_completions`` (to replace the advantages in its output before the
batch is shuffled and split). Advantages are computed on the global batch, because a
prompt's group can span processes, and each process keeps its own slice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from advbudget.core import AdvantageResult, Estimator, compute_advantages, get_estimator
from advbudget.core._compute import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL
from advbudget.metrics import advantage_metrics, kappa_eff, summarize

from ._version import check_trl_version

check_trl_version()

from transformers import TrainerCallback  # noqa: E402
from trl.trainer.grpo_trainer import (  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
    GRPOTrainer,
)

METRIC_PREFIX = "advbudget/"
# TRL's own GRPO: unbiased std and (r - mean) / (std + 1e-4).
TRL_GRPO_OPTIONS: Mapping[str, Any] = {"eps": 1e-4, "std_correction": 1}
_NAN_POLICIES = ("omit", "raise")


@dataclass
class _KappaBatch:
    """What the κ_eff pass after the update needs: the local rows and their old log-probs."""

    rows: torch.Tensor  # local indices of the max/min-advantage rollouts
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    logp_before: torch.Tensor  # sequence log-probs before the update, [len(rows)]
    advantages: torch.Tensor  # global advantages, [global B]
    group_size: int
    local_size: int


class AdvBudgetGRPOTrainer(GRPOTrainer):  # type: ignore[misc, unused-ignore]
    """TRL's ``GRPOTrainer`` whose advantages come from an advbudget estimator.

    Takes every ``GRPOTrainer`` argument, plus the ones below (keyword only). TRL's loss
    (``loss_type``: dapo, grpo, dr_grpo, bnpo, ...), clipping, KL and generation settings
    are used as they are; only the advantages change. ``scale_rewards`` is ignored (the
    estimator decides), and the rewards are TRL's weighted sum of the reward functions
    (``multi_objective_aggregation="sum_then_normalize"``, the default; the other value is
    refused).

    Args:
        advantage_estimator: an estimator name of :func:`advbudget.compute_advantages`
            (``"budget"``, ``"grpo"``, ``"dr"``, ``"rloo"``, a registered name) or an
            estimator callable.
        advantage_options: the estimator's options (``{"budget": 1.0}``; for ``"grpo"``
            ``eps`` and ``std_correction``, which default to TRL's ``1e-4`` and 1).
        nan_policy: a completion that every reward function scored ``None`` has a NaN
            reward. ``"omit"`` (default) leaves it out of its group's statistics and
            gives it advantage 0 (what TRL does); ``"raise"`` raises ValueError.
        tie_rtol, tie_atol: reward spreads at most this are ties (group skipped); see
            :func:`advbudget.compute_advantages`. Pass 0 and 0 to match TRL exactly.
        skip_empty_groups: when True, rollouts that take no part in the update (their
            group was skipped, or their reward is NaN) get their ``completion_mask`` rows
            zeroed, so they also leave the loss normaliser of the token-sum loss types
            (dapo, bnpo, cispo: ``num_items_in_batch`` is recomputed). The per-sequence
            ``grpo`` loss still divides by the number of sequences. Default False: TRL's
            behaviour (advantage 0, tokens still counted).
        kappa_every: log κ_eff every this many generation batches (0, the default: never).
            The old log-probs come from TRL's ``old_per_token_logps`` when the batch is
            reused, else from one extra forward pass before the update; the new ones from
            an extra forward pass after the last optimizer step on the batch, on the
            max/min-advantage rollouts of each group only.

    Metrics (in ``self._metrics[mode]``, logged by TRL with an ``eval_`` prefix in eval):
    ``advbudget/skipped_group_fraction``, ``advbudget/advantage_gap_mean``,
    ``advbudget/positive_advantage_fraction``, ``advbudget/valid_fraction``,
    ``advbudget/advantage_mean`` and ``advbudget/advantage_std``, and with
    ``kappa_every`` ``advbudget/kappa_eff/{mean,median,std}``. The advantages in TRL's
    completions table (``log_completions``) are the ones used.

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
        advantage_estimator: str | Estimator = "budget",
        advantage_options: Mapping[str, Any] | None = None,
        nan_policy: str = "omit",
        tie_rtol: float = DEFAULT_TIE_RTOL,
        tie_atol: float = DEFAULT_TIE_ATOL,
        skip_empty_groups: bool = False,
        kappa_every: int = 0,
        **kwargs: Any,
    ) -> None:
        if not (callable(advantage_estimator) or isinstance(advantage_estimator, str)):
            raise TypeError(
                "advantage_estimator: expected an estimator name or a callable, got "
                f"{type(advantage_estimator).__name__}"
            )
        if isinstance(advantage_estimator, str):
            get_estimator(advantage_estimator)  # an unknown name fails here, not at step 1
        if nan_policy not in _NAN_POLICIES:
            raise ValueError(f"nan_policy: expected one of {_NAN_POLICIES}, got {nan_policy!r}")
        if not isinstance(skip_empty_groups, bool):
            raise TypeError(f"skip_empty_groups: expected a bool, got {skip_empty_groups!r}")
        if isinstance(kappa_every, bool) or not isinstance(kappa_every, int) or kappa_every < 0:
            raise ValueError(f"kappa_every: expected an int >= 0, got {kappa_every!r}")
        options = dict(advantage_options or {})
        if advantage_estimator in ("grpo", "group_norm"):
            options = {**TRL_GRPO_OPTIONS, **options}
        self.advantage_estimator = advantage_estimator
        self.advantage_options = options
        self.nan_policy = nan_policy
        self.tie_rtol = tie_rtol
        self.tie_atol = tie_atol
        self.skip_empty_groups = skip_empty_groups
        self.kappa_every = kappa_every
        super().__init__(*args, **kwargs)
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "multi_objective_aggregation: AdvBudgetGRPOTrainer computes advantages from "
                "the weighted sum of the rewards; expected 'sum_then_normalize', got "
                f"{self.multi_objective_aggregation!r}"
            )
        self._advbudget_rewards_per_func: torch.Tensor | None = None
        self._advbudget_generations = 0
        self._advbudget_kappa: _KappaBatch | None = None
        self.last_advantage_result: AdvantageResult | None = None
        if kappa_every:
            self.add_callback(_KappaCallback(self))

    # -- TRL overrides ---------------------------------------------------------------

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, ids: Any) -> Any:
        # TRL returns the rewards of every process, [global B, n_funcs], NaN for None.
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, ids)
        self._advbudget_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        mode = "train" if self.model.training else "eval"
        output: dict[str, Any] = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._advbudget_rewards_per_func
        self._advbudget_rewards_per_func = None
        if rewards_per_func is None:
            raise RuntimeError(
                "AdvBudgetGRPOTrainer: TRL did not call _calculate_rewards; this TRL version "
                "is not supported by the adapter"
            )
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        if not isinstance(group_size, int):
            raise RuntimeError(f"num_generations: expected an int for {mode}, got {group_size!r}")
        result = self.compute_group_advantages(rewards_per_func, group_size)
        self.last_advantage_result = result

        local_size = int(output["advantages"].shape[0])
        start = self.accelerator.process_index * local_size
        local = slice(start, start + local_size)
        advantages = result.advantages.to(output["advantages"].dtype)
        output["advantages"] = advantages[local]
        if self.skip_empty_groups:
            self._drop_invalid_rows(output, result.valid[local])

        self._replace_logged_advantages(advantages)
        for key, value in advantage_metrics(result).items():
            if key in ("advantage_min", "advantage_max"):
                continue
            self._metrics[mode][METRIC_PREFIX + key].append(value)
        if mode == "train" and self.kappa_every:
            if self._advbudget_generations % self.kappa_every == 0:
                self._advbudget_kappa = self._kappa_before(output, advantages, group_size, start)
            self._advbudget_generations += 1
        return output

    # -- pieces ----------------------------------------------------------------------

    def compute_group_advantages(
        self, rewards_per_func: torch.Tensor, group_size: int
    ) -> AdvantageResult:
        """Advantages of the global batch from TRL's per-function rewards ``[B, n_funcs]``.

        The reward of a completion is TRL's weighted ``nansum`` over the reward functions;
        it is NaN when every function returned None (then ``nan_policy`` applies).
        """
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = torch.where(unscorable, torch.full_like(rewards, math.nan), rewards)
        return compute_advantages(
            rewards,
            self.advantage_estimator,
            group_size=group_size,
            nan_policy=self.nan_policy,  # type: ignore[arg-type]
            tie_rtol=self.tie_rtol,
            tie_atol=self.tie_atol,
            **self.advantage_options,
        )

    def _drop_invalid_rows(self, output: dict[str, Any], keep: torch.Tensor) -> None:
        mask = output["completion_mask"]
        output["completion_mask"] = mask * keep.unsqueeze(1).to(mask.dtype)
        loss_mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            loss_mask = loss_mask * output["tool_mask"]
        # The dapo/cispo normaliser: tokens of the whole generation batch, all processes.
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        # TRL appended its own advantages of all processes to the completions log just now.
        logged: Any = self._logs["advantages"]  # a deque of the last generation batch
        for _ in range(min(int(advantages.shape[0]), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    def _sequence_logps(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_mask: torch.Tensor
    ) -> torch.Tensor:
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                completion_mask.shape[1],
                batch_size=self.args.per_device_train_batch_size,
            )
        total: torch.Tensor = (logps * completion_mask).sum(dim=1)
        return total

    def _kappa_before(
        self, output: dict[str, Any], advantages: torch.Tensor, group_size: int, start: int
    ) -> _KappaBatch:
        local_size = int(output["advantages"].shape[0])
        rows = advantages.view(-1, group_size)
        offsets = torch.arange(rows.shape[0], device=rows.device) * group_size
        has_gap = rows.amax(dim=1) > rows.amin(dim=1)
        # torch.argmax/argmin return the first extreme: the rollouts kappa_eff picks.
        chosen = torch.cat(
            [(rows.argmax(dim=1) + offsets)[has_gap], (rows.argmin(dim=1) + offsets)[has_gap]]
        )
        chosen = torch.unique(chosen[(chosen >= start) & (chosen < start + local_size)]) - start
        if chosen.numel() == 0:  # still run the forward passes: sharded models need every rank
            chosen = torch.zeros(1, dtype=torch.long, device=rows.device)
        prompt_ids, prompt_mask = output["prompt_ids"][chosen], output["prompt_mask"][chosen]
        completion_ids = output["completion_ids"][chosen]
        completion_mask = output["completion_mask"][chosen].float()
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, output["completion_mask"][chosen]], dim=1)
        old = output.get("old_per_token_logps")
        if old is not None:
            logp_before = (old[chosen] * completion_mask).sum(dim=1)
        else:
            logp_before = self._sequence_logps(input_ids, attention_mask, completion_mask)
        return _KappaBatch(
            rows=chosen,
            input_ids=input_ids,
            attention_mask=attention_mask,
            completion_mask=completion_mask,
            logp_before=logp_before,
            advantages=advantages.detach(),
            group_size=group_size,
            local_size=local_size,
        )

    def _kappa_after(self) -> None:
        """Log κ_eff of the pending batch (call after its last optimizer step)."""
        batch, self._advbudget_kappa = self._advbudget_kappa, None
        if batch is None:
            return
        logp_after = self._sequence_logps(
            batch.input_ids, batch.attention_mask, batch.completion_mask
        )
        change = torch.zeros(batch.local_size, device=logp_after.device)
        change[batch.rows] = (logp_after - batch.logp_before).float()
        change = self.accelerator.gather(change)  # [global B], in process order
        values = kappa_eff(
            torch.zeros_like(change),
            change,
            batch.advantages.to(change.device),
            group_size=batch.group_size,
        )
        stats = summarize(values)
        for key in ("mean", "median", "std"):
            self._metrics["train"][f"{METRIC_PREFIX}kappa_eff/{key}"].append(stats[key])

    def _generation_batch_done(self) -> bool:
        generate_every = self.args.steps_per_generation * self.num_iterations
        return bool(self._step % generate_every == 0)


class _KappaCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]
    """Runs the κ_eff pass once the optimizer has stepped on a whole generation batch."""

    def __init__(self, trainer: AdvBudgetGRPOTrainer) -> None:
        self.trainer = trainer

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.trainer._advbudget_kappa is not None and self.trainer._generation_batch_done():
            self.trainer._kappa_after()
