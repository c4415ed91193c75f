"""Advantage metrics and κ_eff of a verl batch, as a flat dict for verl's ``metrics``."""

from __future__ import annotations

from typing import Any

from advbudget.metrics import advantage_metrics, kappa_eff, summarize

from ._estimators import ESTIMATOR_NAMES, _option, compute_result

METRIC_PREFIX = "advbudget/"

# verl's own group estimators and the advbudget estimator computing the same advantages.
_VERL_EQUIVALENTS = {"grpo": "advbudget_grpo", "grpo_vectorized": "advbudget_grpo"}


def metrics_estimator(config: Any) -> str | None:
    """The advbudget estimator whose statistics describe ``config.adv_estimator`` (or None)."""
    value = _option(config, "adv_estimator", "")
    name = str(getattr(value, "value", value))  # verl's AdvantageEstimator enum or a string
    if name in ESTIMATOR_NAMES:
        return name
    return _VERL_EQUIVALENTS.get(name)


def batch_metrics(data: Any, config: Any, *, estimator: str | None = None) -> dict[str, float]:
    """Advantage statistics of a verl ``DataProto``, keyed ``advbudget/...``.

    Recomputes the advantages of ``estimator`` (default: the one ``config.adv_estimator``
    names; verl's ``grpo`` is described by ``advbudget_grpo``) from
    ``data.batch["token_level_rewards"]`` and ``data.non_tensor_batch["uid"]``: a few
    milliseconds per 65k responses. Keys (see :func:`advbudget.metrics.advantage_metrics`):
    ``advbudget/skipped_group_fraction``, ``advbudget/advantage_gap_mean`` (NaN when every
    group was skipped), ``advbudget/positive_advantage_fraction``,
    ``advbudget/valid_fraction``, ``advbudget/advantage_{mean,std,min,max}``. An
    estimator that is not a group estimator (``gae``, ...) gives an empty dict.

    Args:
        data: a ``DataProto`` with ``token_level_rewards`` and the ``uid`` non-tensor.
        config: verl's ``config.algorithm``.
        estimator: one of :data:`ESTIMATOR_NAMES`, to override the config.
    """
    name = estimator or metrics_estimator(config)
    if name is None:
        return {}
    result = compute_result(
        name, data.batch["token_level_rewards"], data.non_tensor_batch["uid"], config
    )
    return {METRIC_PREFIX + key: value for key, value in advantage_metrics(result).items()}


def kappa_metrics(
    old_log_probs: Any,
    new_log_probs: Any,
    response_mask: Any,
    advantages: Any,
    index: Any,
) -> dict[str, float]:
    """κ_eff of one update from per-token log-probs before and after it, keyed
    ``advbudget/kappa_eff/{mean,median,std,min,max,count}`` (SPEC section 4).

    Args:
        old_log_probs, new_log_probs: ``[B, L]`` per-token log-probs before / after.
        response_mask: ``[B, L]``.
        advantages: ``[B]`` the sequence advantages the update used.
        index: ``[B]`` the uids.
    """
    values = kappa_eff(
        old_log_probs, new_log_probs, advantages, group_ids=index, response_mask=response_mask
    )
    return {f"{METRIC_PREFIX}kappa_eff/{k}": v for k, v in summarize(values).items()}
