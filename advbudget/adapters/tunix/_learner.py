"""``AdvBudgetGRPOLearner``: tunix's ``GRPOLearner`` with the advbudget metrics and
``skipped_groups``; ``drgrpo_config``: Dr.GRPO's config with another estimator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from tunix.rl.grpo import drgrpo_learner  # type: ignore[import-not-found, unused-ignore]
from tunix.rl.grpo.grpo_learner import GRPOLearner  # type: ignore[import-not-found, unused-ignore]

from .._options import parse_skipped_groups
from ._estimators import LAST, TUNIX, metric_fn, registered_names

RESAMPLE_REFUSED = (
    "tunix 0.1.7 has no dynamic sampling (DAPOConfig.dynamic_sampling is a TODO); "
    "use 'drop' or 'keep'"
)


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


def _ours(name: str) -> bool:
    return name in TUNIX.names()


class AdvBudgetGRPOLearner(GRPOLearner):  # type: ignore[misc, unused-ignore]
    """tunix's ``GRPOLearner`` (also with ``DAPOConfig`` or :func:`drgrpo_config`) plus:

    - the ``advbudget/*`` metrics in tunix's metrics logger (``metrics=False``: off);
    - ``skipped_groups``: ``"keep"`` (tunix's behaviour: skipped groups stay in the loss
      with advantage 0, and in its denominator and KL term) or ``"drop"`` (their completion
      rows are masked out: see :func:`drop_skipped_rows`). ``"resample"`` is refused:
      tunix has no dynamic sampling. ``drop`` needs an advbudget estimator.

    Every other argument is ``GRPOLearner``'s.
    """

    def __init__(
        self,
        *args: Any,
        skipped_groups: str = "keep",
        metrics: bool = True,
        metric_fns: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.skipped_groups = parse_skipped_groups(
            skipped_groups, "skipped_groups", resample_refused=RESAMPLE_REFUSED
        )
        fns = [*(metric_fns or ()), *([metric_fn] if metrics else [])]
        super().__init__(*args, metric_fns=fns, **kwargs)
        name = self.algo_config.advantage_estimator
        if self.skipped_groups == "drop" and not _ours(name):
            raise ValueError(
                f"skipped_groups: 'drop' needs an advbudget estimator (advbudget_<name> or "
                f"reward_budget) as advantage_estimator, got {name!r}"
            )

    def _generate_and_compute_advantage(self, training_input: Any, mode: Any = None) -> Any:
        LAST.valid = None
        if mode is None:
            example = super()._generate_and_compute_advantage(training_input)
        else:
            example = super()._generate_and_compute_advantage(training_input, mode)
        if self.skipped_groups == "drop":
            if LAST.valid is None:  # e.g. an estimator replaced after construction
                raise RuntimeError(
                    "skipped_groups: 'drop' found no advbudget estimator call in this step "
                    f"(advantage_estimator={self.algo_config.advantage_estimator!r})"
                )
            example = drop_skipped_rows(example, LAST.valid)
        return example


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
