"""``AdvBudgetGRPOTrainer``: TRL's ``GRPOTrainer`` with advbudget's advantages.

TRL (1.16) has no advantage hook (trl issue #4525), so the trainer overrides two private
methods: ``_calculate_rewards`` (to keep the rewards TRL gathered from every process) and
``_generate_and_score_completions`` (to replace the advantages in its output before the
batch is shuffled and split). Advantages are computed on the global batch, because a
prompt's group can span processes, and each process keeps its own slice.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from advbudget.core import (
    AdvantageResult,
    Estimator,
    EstimatorSpec,
    KappaPairs,
    compute_advantages,
    get_convention,
    get_spec,
    kappa_eff_of_pairs,
    kappa_pairs,
    sequence_logprobs,
)
from advbudget.metrics import (
    DEFAULT_SOLVED_REWARD,
    advantage_metric_dict,
    check_solved_reward,
    kappa_metric_dict,
)

from ._version import check_trl_version

check_trl_version()

from transformers import TrainerCallback  # noqa: E402
from trl.trainer.grpo_trainer import (  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
    GRPOTrainer,
)

TRL = get_convention("trl")
METRIC_PREFIX = TRL.metric_prefix
_NAN_POLICIES = ("omit", "raise")


_COMPUTE_KEYWORDS = ("tie_rtol", "tie_atol", "singletons")
# The adapter's counters, saved in each checkpoint folder and read back on resume.
STATE_FILE = "advbudget_state.json"


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


class AdvBudgetGRPOTrainer(GRPOTrainer):  # type: ignore[misc, unused-ignore]
    """TRL's ``GRPOTrainer`` whose advantages come from an advbudget estimator.

    Takes every ``GRPOTrainer`` argument, plus the ones below (keyword only). TRL's loss
    (``loss_type``: dapo, grpo, dr_grpo, bnpo, ...), clipping, KL and generation settings
    are used as they are; only the advantages change. ``scale_rewards`` is ignored (the
    estimator decides), and the rewards are TRL's weighted sum of the reward functions
    (``multi_objective_aggregation="sum_then_normalize"``, the default; the other value is
    refused).

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
        skip_empty_groups: when True, rollouts that take no part in the update (their
            group was skipped, or their reward is NaN) get their ``completion_mask`` rows
            zeroed, so they also leave the loss normaliser of the token-sum loss types
            (dapo, bnpo, cispo: ``num_items_in_batch`` is recomputed). The per-sequence
            ``grpo`` loss still divides by the number of sequences. Default False: TRL's
            behaviour (advantage 0, tokens still counted).
        solved_reward: the reward (TRL's weighted sum) at which a completion counts as
            solved, for ``advbudget/unsolved_group_fraction`` (no completion of the group
            reached it) and ``advbudget/solved_group_fraction`` (every one did); default
            1.0, the success value of 0/1 and +-1 rewards; None leaves the two keys out.
            See :func:`advbudget.metrics.group_outcomes` for the rule.
        kappa_every: log κ_eff every this many generation batches (0, the default: never).
            The old log-probs come from TRL's ``old_per_token_logps`` when the batch is
            reused, else from one extra forward pass before the update; the new ones from
            an extra forward pass after the last optimizer step on the batch, on the
            max/min-advantage rollouts of each group only.

    Metrics (in ``self._metrics[mode]``, logged by TRL with an ``eval_`` prefix in eval):
    ``advbudget/skipped_group_fraction``, ``advbudget/unsolved_group_fraction``,
    ``advbudget/solved_group_fraction``, ``advbudget/advantage_gap_mean``,
    ``advbudget/positive_advantage_fraction``, ``advbudget/valid_fraction``,
    ``advbudget/advantage_mean``, ``advbudget/advantage_std`` and
    ``advbudget/nan_reward_fraction`` (rollouts every reward function scored None), and
    with ``kappa_every`` ``advbudget/kappa_eff/{mean,median,std}``. A metric a step has no
    value for (the advantage gap when every group is skipped, κ_eff without pairs) is left
    out of that step rather than logged as NaN/None.

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
        skip_empty_groups: bool = False,
        kappa_every: int = 0,
        solved_reward: float | None = DEFAULT_SOLVED_REWARD,
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
        if nan_policy not in _NAN_POLICIES:
            raise ValueError(f"nan_policy: expected one of {_NAN_POLICIES}, got {nan_policy!r}")
        if not isinstance(skip_empty_groups, bool):
            raise TypeError(f"skip_empty_groups: expected a bool, got {skip_empty_groups!r}")
        if isinstance(kappa_every, bool) or not isinstance(kappa_every, int) or kappa_every < 0:
            raise ValueError(f"kappa_every: expected an int >= 0, got {kappa_every!r}")
        solved_reward = check_solved_reward(solved_reward)  # one line naming the option
        overrides = dict(advantage_options or {})
        for key, value in (("tie_rtol", tie_rtol), ("tie_atol", tie_atol)):
            if value is not None:
                overrides[key] = value
        needs = [] if spec is None else [i.name for i in spec.inputs if i.required]
        if spec is not None and needs:  # optional inputs (whitening's weights): not given
            names = ", ".join(needs)
            raise ValueError(
                f"advantage_estimator: {spec.name} needs per-rollout inputs ({names}) that "
                "TRL's reward step does not provide"
            )
        settings = TRL.settings(advantage_estimator, overrides)
        if spec is not None:  # a bad option fails here, not at step 1
            spec.resolve_options({k: v for k, v in settings.items() if k not in _COMPUTE_KEYWORDS})
        self.advantage_estimator = advantage_estimator
        self.advantage_settings = settings
        self.nan_policy = nan_policy
        self.skip_empty_groups = skip_empty_groups
        self.kappa_every = kappa_every
        self.solved_reward = solved_reward
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
        self.add_callback(_StateCallback(self))
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
        metrics = advantage_metric_dict(result, METRIC_PREFIX, solved_reward=self.solved_reward)
        metrics = {k: v for k, v in metrics.items() if not k.endswith(("_min", "_max"))}
        self._log_metrics(mode, metrics)
        if mode == "train" and self.kappa_every:
            if self._advbudget_generations % self.kappa_every == 0:
                try:
                    self._advbudget_kappa = self._kappa_before(
                        output, advantages, group_size, start
                    )
                except Exception as error:  # a metric: never worth the step
                    self._kappa_failed("before the update", error)
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
            **self.advantage_settings,
        )

    def _log_metrics(self, mode: str, metrics: Mapping[str, float]) -> None:
        """Append to TRL's metrics, leaving out values a step does not have (NaN, e.g. the
        advantage gap when every group was skipped): TRL averages what it has over the
        logging steps and logs None for a key with nothing, which TensorBoard refuses."""
        for key, value in metrics.items():
            if not math.isnan(value):
                self._metrics[mode][key].append(value)

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
        """The adapter's counters that a resumed run must continue from."""
        return {"generations": self._advbudget_generations}

    def load_advbudget_state(self, state: Mapping[str, Any]) -> None:
        self._advbudget_generations = int(state.get("generations", 0))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = os.path.join(resume_from_checkpoint, STATE_FILE)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as file:
                self.load_advbudget_state(json.load(file))
        else:
            warnings.warn(
                f"AdvBudgetGRPOTrainer: {path} not found (a checkpoint of another trainer?): "
                "the κ_eff schedule restarts at this step",
                RuntimeWarning,
                stacklevel=2,
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
        total: torch.Tensor = sequence_logprobs(logps, completion_mask)
        return total

    def _kappa_before(
        self, output: dict[str, Any], advantages: torch.Tensor, group_size: int, start: int
    ) -> _KappaBatch:
        """Pick the pairs from the global batch's AdvantageResult; keep this process's pair
        rows and their log-probs before the update (``advantages`` and ``group_size`` are
        those of ``self.last_advantage_result``, which holds the grouping)."""
        result = self.last_advantage_result
        if result is None:
            raise RuntimeError("AdvBudgetGRPOTrainer: κ_eff needs the batch's AdvantageResult")
        local_size = int(output["advantages"].shape[0])
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

    def _generation_batch_done(self) -> bool:
        generate_every = self.args.steps_per_generation * self.num_iterations
        return bool(self._step % generate_every == 0)


class _StateCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]
    """Writes the adapter's counters into each checkpoint folder (read back by
    ``_load_from_checkpoint`` on ``train(resume_from_checkpoint=...)``)."""

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
        if self.trainer._advbudget_kappa is not None and self.trainer._generation_batch_done():
            self.trainer._kappa_after()
