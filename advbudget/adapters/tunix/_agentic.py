"""``AdvBudgetAgenticGRPOLearner``: tunix's agentic ``GRPOLearner`` (agents, multi-turn
environments, rollouts that run ahead of training) with the advbudget metrics,
``skipped_groups`` and the staleness rule on each trajectory's policy version."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from tunix.rl import rl_cluster as rl_cluster_lib  # type: ignore[import-not-found, unused-ignore]
from tunix.rl.agentic.agentic_grpo_learner import (  # type: ignore[import-not-found, unused-ignore]
    GRPOLearner as AgenticGRPOLearner,
)

from .._features import Step, forget_published, lend_versions, step_metrics, take_published
from ._convention import TUNIX
from ._hooks import AgenticLearnerHooks, trajectory_version
from ._learner import drop_step_rows, split_metric_fns
from ._options import AGENTIC_KL_RHO_REFUSED, options, read_options, staleness_given


class AdvBudgetAgenticGRPOLearner(AgenticLearnerHooks, AgenticGRPOLearner):  # type: ignore[misc, unused-ignore]
    """tunix's agentic ``GRPOLearner`` plus:

    - the ``advbudget/*`` metrics in tunix's metrics logger, at the step tunix files the
      group's own metrics under (``metrics=False``: off), with ``staleness_mean``,
      ``staleness_max``, ``stale_fraction`` and ``mixed_version_group_fraction`` on every
      step;
    - ``max_staleness`` and ``stale_rollouts``: a trajectory is stale when the learner's
      policy version (tunix raises it after each weight sync) exceeds the version tunix
      stamped on it by more than ``max_staleness``; ``stale_rollouts`` is the core's rule
      (``keep``, ``baseline_only``, ``drop``, ``drop_group``; see
      :func:`advbudget.compute_advantages`). The lag is taken when tunix scores the
      trajectories: in its producer as each group finishes, or, with
      ``compute_logps_micro_batch_size > 1``, in its consumer as it takes a micro-batch
      to train. tunix stamps the version of a trajectory's last model call, so a multi-turn
      trajectory's earlier turns may be older than its stamp;
    - ``skipped_groups``: ``"keep"`` (tunix's behaviour: rollouts without an update stay in
      the loss with advantage 0, in its denominator and KL term) or ``"drop"`` (the
      completion rows of every rollout whose ``valid`` is False, a skipped group's or a
      stale one the rule withheld or dropped, are masked out of the loss).

    A multi-turn trajectory is one row of tunix's batch (its turns concatenated, the
    environment's replies out of the completion mask), so it is one rollout of its prompt's
    group as it stands: no ``trajectory_ids`` to pass (docs/guides/tunix.md, Multi-turn).

    Not here (each refused when asked for): κ_eff (``kappa_every`` is 0), estimators with
    memory (they need each row's prompt, which tunix's group scoring does not lend),
    ``resample`` (no dynamic sampling in tunix). Every other argument is tunix's agentic
    ``GRPOLearner``'s.
    """

    def __init__(
        self,
        *args: Any,
        skipped_groups: str = "keep",
        metrics: bool = True,
        metric_fns: Sequence[Any] | None = None,
        max_staleness: int | None = None,
        stale_rollouts: str = "keep",
        **kwargs: Any,
    ) -> None:
        self.advbudget_options = read_options(
            {
                **options(),
                "skipped_groups": skipped_groups,
                "kappa_every": 0,
                **staleness_given(max_staleness, stale_rollouts),
            },
            kl_rho_refused=AGENTIC_KL_RHO_REFUSED,
        )
        self._advbudget_metrics, fns = split_metric_fns(metrics, metric_fns)
        super().__init__(*args, metric_fns=fns, **kwargs)
        name = self.algo_config.advantage_estimator
        ours = name in TUNIX.names()
        for option, asked in (
            ("skipped_groups", self.advbudget_options.skipped_groups == "drop"),
            ("stale_rollouts", self.advbudget_options.stale_rollouts != "keep"),
        ):
            if asked and not ours:
                raise ValueError(
                    f"{option}: {getattr(self.advbudget_options, option)!r} needs an "
                    "advbudget estimator (advbudget_<name> or reward_budget) as "
                    f"advantage_estimator, got {name!r}"
                )

    def process_results(self, trajectories: Any, mode: Any, expected_step: Any) -> Any:
        """tunix's rewards and advantages of ``trajectories`` with each one's policy version
        lent to our estimator, then ``drop``'s mask and the metrics."""
        forget_published()  # a result left in this thread is not these trajectories'
        versions = [trajectory_version(t) for t in trajectories]
        lent = (  # tunix itself refuses a trajectory without a version
            contextlib.nullcontext()
            if any(v is None for v in versions)
            else lend_versions(self.advbudget_options, versions, self.policy_version)
        )
        with lent:
            examples = self.tunix_process_results(trajectories, mode, expected_step)
        scored = take_published(len(trajectories))
        if scored is None:
            return examples  # not one of our estimators
        step = Step(scored, self.advbudget_options, TUNIX.metric_prefix)
        if self.advbudget_options.skipped_groups == "drop":
            (example,) = examples  # tunix's GRPO merges the trajectories into one example
            examples = [drop_step_rows(example, step)]
        if self._advbudget_metrics:
            metrics = step_metrics(step)
            self.rl_cluster.buffer_metrics_async(
                {key: (value, np.mean) for key, value in metrics.items()},
                mode=rl_cluster_lib.Mode.TRAIN if mode is None else mode,
                step=expected_step,
            )
        return examples
