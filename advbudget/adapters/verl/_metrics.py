"""Advantage metrics and κ_eff of a verl batch, as a flat dict for verl's ``metrics``."""

from __future__ import annotations

from typing import Any

from advbudget.core import get_spec
from advbudget.metrics import advantage_metric_dict

from ._convention import VERL
from ._estimators import compute_result
from ._options import option, read_options
from ._sessions import Sessions

METRIC_PREFIX = VERL.metric_prefix


def solved_reward(config: Any) -> float | None:
    """``+algorithm.advbudget.solved_reward``: the reward at which a response counts as
    solved in ``advbudget/{unsolved,solved}_group_fraction`` (default 1.0; ``null``, or
    ``None`` or ``off``, the strings hydra passes, turn the split off).

    Raises a one-line ValueError naming the option for anything else than a finite number.

    Examples:
        >>> solved_reward({"advbudget": {"solved_reward": 0.5}}), solved_reward(None)
        (0.5, 1.0)
        >>> solved_reward({"advbudget": {"solved_reward": None}}) is None
        True
    """
    return read_options(config).solved_reward


def metrics_estimator(config: Any) -> str | None:
    """The advbudget estimator whose statistics describe ``config.adv_estimator`` (or None).

    Ours describe themselves; verl's own outcome estimators are described by the core
    estimator of the same name (core names are verl's: ``grpo`` -> ``advbudget_grpo``,
    ``opo`` -> ``advbudget_opo``; ``*_vectorized`` as their loop versions).
    """
    value = option(config, "adv_estimator", "")
    name = str(getattr(value, "value", value))  # verl's AdvantageEstimator enum or a string
    known = VERL.names()
    ours = name if name in known else VERL.name_of(name.removesuffix("_vectorized"))
    if ours not in known:
        return None
    # The metrics see uid, rewards and the response mask: an estimator needing another
    # input (remax's reward_baselines) is described by none.
    needs = set(get_spec(VERL.core_name(ours)).required_inputs)
    return ours if needs <= {"response_lengths"} else None


def batch_metrics(data: Any, config: Any, *, estimator: str | None = None) -> dict[str, float]:
    """Advantage statistics of a verl ``DataProto``, keyed ``advbudget/...``.

    Recomputes the advantages of ``estimator`` (default: the one ``config.adv_estimator``
    names; verl's ``grpo`` is described by ``advbudget_grpo``) from
    ``data.batch["token_level_rewards"]`` and ``data.non_tensor_batch["uid"]``: a few
    milliseconds per 65k responses. Keys (see :func:`advbudget.metrics.advantage_metrics`):
    ``advbudget/skipped_group_fraction``, ``advbudget/unsolved_group_fraction`` and
    ``advbudget/solved_group_fraction`` (groups where no response, or every one, reached
    ``+algorithm.advbudget.solved_reward``, default 1.0, on the sequence rewards the
    estimator sees; absent when it is ``null``), ``advbudget/advantage_gap_mean`` (NaN when
    every group was skipped), ``advbudget/positive_advantage_fraction``,
    ``advbudget/valid_fraction``, ``advbudget/advantage_{mean,std,min,max}``. An
    estimator that is not a group estimator (``gae``, ...) gives an empty dict.

    Args:
        data: a ``DataProto`` with ``token_level_rewards`` and the ``uid`` non-tensor.
        config: verl's ``config.algorithm``.
        estimator: a verl name of ours (``advbudget_grpo``, ...), to override the config.
    """
    result = batch_result(data, config, estimator=estimator)
    if result is None:
        return {}
    return advantage_metric_dict(result, METRIC_PREFIX, solved_reward=solved_reward(config))


def batch_result(
    data: Any,
    config: Any,
    *,
    estimator: str | None = None,
    sessions: Sessions | None = None,
) -> Any:
    """The core's :class:`~advbudget.core.AdvantageResult` of a verl ``DataProto`` as
    :func:`batch_metrics` sees it (its ``valid`` marks the rows ``drop`` keeps); None for
    an estimator that is not a group estimator. ``sessions``: the rows' sessions, for a
    batch of multi-output sessions (each then one trajectory:
    :func:`._estimators.compute_result`)."""
    name = estimator or metrics_estimator(config)
    if name is None:
        return None
    fields = data.batch.keys()  # TensorDict refuses `in` on itself
    mask = data.batch["response_mask"] if "response_mask" in fields else None  # response_lengths
    rewards, uids = data.batch["token_level_rewards"], data.non_tensor_batch["uid"]
    return compute_result(
        name,
        rewards,
        uids,
        config,
        response_mask=mask,
        non_tensor_batch=data.non_tensor_batch,
        sessions=sessions,
    )
