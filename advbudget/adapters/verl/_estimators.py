"""verl advantage estimators computed by the advbudget core.

verl calls a registered estimator as ``fn(token_level_rewards=[B, L], response_mask=[B, L],
config=<config.algorithm>, index=<numpy object array of uid strings>, **extra)`` and expects
``(advantages, returns)``, both ``[B, L]``. Each function here only translates: sequence
reward ``token_level_rewards.sum(-1)``, options from ``config``, the core's
:func:`~advbudget.compute_advantages`, then :func:`~advbudget.token_advantages`.

Options (all under ``algorithm`` in verl's config; own keys need a ``+`` on the command
line, e.g. ``+algorithm.advbudget.budget=0.5``):

- ``norm_adv_by_std_in_grpo`` (verl's own, default True): ``advbudget_grpo`` divides by the
  group std only when it is True; False gives Dr.GRPO's ``r - mean``, as verl's ``grpo`` does.
- ``advbudget.budget`` (default 1.0): the total budget B of ``reward_budget``.
- ``advbudget.eps`` (default 1e-6) and ``advbudget.std_correction`` (default 1, unbiased):
  GRPO's ``(r - mean) / (std + eps)``, verl's values.
- ``advbudget.tie_rtol`` / ``advbudget.tie_atol``: the core's tie tolerance. Defaults: 0 and 0
  for ``advbudget_grpo``/``_dr``/``_rloo`` (verl compares exactly), the core's 1e-6 for
  ``reward_budget`` (float32 rounding noise is not a reward gap).

verl conventions kept for ``advbudget_grpo``/``_dr``/``_rloo``: a group of one is scored
against mean 0 and std 1 (its advantage is its raw reward), and rows whose response mask is
all zero still count in their group. ``reward_budget`` gives a group of one, and every group
without a reward gap, advantage 0 (SPEC section 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from advbudget.core import compute_advantages, token_advantages
from advbudget.core._compute import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL

VerlEstimator = Callable[..., tuple[Any, Any]]

ESTIMATOR_NAMES = ("reward_budget", "advbudget_grpo", "advbudget_dr", "advbudget_rloo")


def _option(config: Any, key: str, default: Any) -> Any:
    """``config.<key>`` (a dotted path) from a DictConfig, a dataclass, a dict or None."""
    value: Any = config
    for part in key.split("."):
        if value is None:
            return default
        if isinstance(value, dict) or hasattr(value, "get"):
            try:
                value = value.get(part, None)
            except Exception:  # a dataclass with an unrelated ``get``
                value = getattr(value, part, None)
        else:
            value = getattr(value, part, None)
    return default if value is None else value


def _estimator_for(name: str, config: Any) -> tuple[str, dict[str, Any]]:
    """The core estimator and its keyword options for verl estimator ``name``."""
    options: dict[str, Any] = {}
    if name == "reward_budget":
        options["budget"] = float(_option(config, "advbudget.budget", 1.0))
        tie = (DEFAULT_TIE_RTOL, DEFAULT_TIE_ATOL)
        core, singletons = "budget", "skip"
    else:
        tie, singletons = (0.0, 0.0), "raw"
        core = {"advbudget_grpo": "grpo", "advbudget_dr": "dr", "advbudget_rloo": "rloo"}[name]
        if core == "grpo" and not bool(_option(config, "norm_adv_by_std_in_grpo", True)):
            core = "dr"
        if core == "grpo":
            options["eps"] = float(_option(config, "advbudget.eps", 1e-6))
            options["std_correction"] = int(_option(config, "advbudget.std_correction", 1))
    options["tie_rtol"] = float(_option(config, "advbudget.tie_rtol", tie[0]))
    options["tie_atol"] = float(_option(config, "advbudget.tie_atol", tie[1]))
    options["singletons"] = singletons
    return core, options


def compute_result(name: str, token_level_rewards: Any, index: Any, config: Any = None) -> Any:
    """The core's :class:`~advbudget.core.AdvantageResult` for verl estimator ``name``.

    Shared by the estimators and the metrics, so both see the same advantages.

    Examples:
        >>> import numpy as np
        >>> rewards = np.array([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
        >>> uids = np.array(["a", "a", "b", "b"], dtype=object)
        >>> compute_result("reward_budget", rewards, uids).advantages
        array([ 0.5, -0.5,  0. ,  0. ])
    """
    if name not in ESTIMATOR_NAMES:
        raise ValueError(f"name: expected one of {ESTIMATOR_NAMES}, got {name!r}")
    if index is None:
        raise ValueError(
            f"index: {name} needs verl's uid of each response (non_tensor_batch['uid']), got None"
        )
    if getattr(token_level_rewards, "ndim", None) != 2:
        raise ValueError(
            "token_level_rewards: expected shape [B, L], "
            f"got {tuple(getattr(token_level_rewards, 'shape', ()))}"
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(
            f"index: expected one uid per response ({token_level_rewards.shape[0]}), "
            f"got {len(index)}"
        )
    core, options = _estimator_for(name, config)
    scores = token_level_rewards.sum(-1)
    return compute_advantages(scores, core, group_ids=index, **options)


def _make(name: str, doc: str) -> VerlEstimator:
    def estimator(
        token_level_rewards: Any,
        response_mask: Any,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        result = compute_result(name, token_level_rewards, index, config)
        advantages = token_advantages(result.advantages, response_mask)
        return advantages, advantages

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__doc__ = (
        f"verl estimator ``{name}``: {doc}\n\n"
        "Args:\n"
        "    token_level_rewards: ``[B, L]``; the sequence reward is the sum over L.\n"
        "    response_mask: ``[B, L]``; the advantage is broadcast over it.\n"
        "    index: ``[B]`` numpy object array of uid strings (the prompt groups).\n"
        "    config: verl's ``config.algorithm`` (options: see the module docstring).\n"
        "    **kwargs: anything else verl passes (ignored).\n\n"
        "Returns:\n"
        "    ``(advantages, returns)``, both the same ``[B, L]`` tensor.\n"
    )
    return estimator


ESTIMATORS: dict[str, VerlEstimator] = {
    "reward_budget": _make(
        "reward_budget", "reward budgeting (arXiv 2611.05942), budget ``advbudget.budget``."
    ),
    "advbudget_grpo": _make(
        "advbudget_grpo", "GRPO as verl computes it; Dr.GRPO when norm_adv_by_std_in_grpo=False."
    ),
    "advbudget_dr": _make("advbudget_dr", "Dr.GRPO, ``r - mean`` per group."),
    "advbudget_rloo": _make("advbudget_rloo", "RLOO, ``r - mean of the others`` per group."),
}


def register_estimators() -> list[str]:
    """Register the estimators with verl's ``register_adv_est``; returns their names.

    Idempotent: a second call, or a re-import of this module under another name (as
    pytest's importlib mode does), replaces our own earlier functions. A name taken by
    anything else raises verl's ValueError.
    """
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for name, fn in ESTIMATORS.items():
        existing = registry.get(name)
        if existing is not None and getattr(existing, "__qualname__", None) == fn.__qualname__:
            registry.pop(name)  # ours, from an earlier import of this module
        core_algos.register_adv_est(name)(fn)
    return list(ESTIMATORS)


def report_failure(error: BaseException, what: str = "") -> None:
    """Say loudly on stderr that registration failed (verl hides plugin import errors)."""
    consequence = (
        f"verl will later report 'Unknown advantage estimator' for {', '.join(ESTIMATOR_NAMES)}."
        if not what
        else "The advantage estimators are registered; the metrics trainers are not."
    )
    print(
        "\n" + "!" * 78 + "\n"
        f"advbudget: registering {what or 'the verl advantage estimators'} failed: "
        f"{type(error).__name__}: {error}\n{consequence}\n" + "!" * 78,
        file=sys.stderr,
        flush=True,
    )
