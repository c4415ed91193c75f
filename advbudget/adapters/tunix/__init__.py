"""tunix: every advbudget estimator in tunix's advantage registry, by name.

Importing this package registers each catalogue estimator with
``tunix.rl.function_registry.register_advantage_estimator`` under ``advbudget_<name>``
(``advbudget_budget``, ``advbudget_grpo``, ``advbudget_opo``, a plugin's ``advbudget_mine``,
...) and ``reward_budget``. One setting then switches a tunix run::

    import advbudget.adapters.tunix  # registers the estimators
    config = GRPOConfig(num_generations=8, advantage_estimator="reward_budget")

tunix's CLI reaches it through a reward module: ``reward_functions=['advbudget.rewards.tunix']``
imports this package (and grades with DAPO's rule).

Options (all estimators, checked at once): :func:`configure` (``budget=``, ``eps=``,
``tie_rtol=``, ``nan_policy=``, ``solved_reward=``, ...), or the environment variable
``ADVBUDGET_TUNIX_OPTIONS="budget=0.5,nan_policy=omit"`` read at import (the CLI's route).

:class:`AdvBudgetGRPOLearner` (tunix's ``GRPOLearner``) adds the ``advbudget/*`` metrics,
κ_eff (``kappa_every``) and the per-prompt ledger to tunix's logs, and
``skipped_groups="drop"``; :class:`AdvBudgetDAPOLearner` is the same over tunix's
``DAPOLearner`` (its overlong reward shaping); :func:`metric_fn` alone gives the metrics
to any ``GRPOLearner(metric_fns=[...])``. :func:`drgrpo_config` is ``DrGRPOConfig`` with our
estimator (it fixes its own). :class:`AdvBudgetAgenticGRPOLearner` (tunix's agentic
``GRPOLearner``: agents, multi-turn environments, rollouts ahead of training) adds the
metrics, ``skipped_groups="drop"`` and ``max_staleness``/``stale_rollouts`` on each
trajectory's policy version. Supported tunix versions: :data:`SUPPORTED_TUNIX`.
"""

from __future__ import annotations

from typing import Any

from ._estimators import (
    advantages_and_valid,
    estimator_function,
    estimator_names,
    metric_fn,
    register_estimators,
    registered_names,
    result,
)
from ._hooks import quiet_reregistration
from ._options import OPTIONS_ENV, configure, configure_from_environment, known_options, options
from ._version import SUPPORTED_TUNIX, check_tunix_version

TUNIX_VERSION = check_tunix_version()

__all__ = [
    "OPTIONS_ENV",
    "SUPPORTED_TUNIX",
    "TUNIX_VERSION",
    "AdvBudgetAgenticGRPOLearner",
    "AdvBudgetDAPOLearner",
    "AdvBudgetGRPOLearner",
    "advantages_and_valid",
    "check_tunix_version",
    "configure",
    "drgrpo_config",
    "drop_skipped_rows",
    "estimator_function",
    "estimator_names",
    "known_options",
    "metric_fn",
    "options",
    "register_estimators",
    "registered_names",
    "result",
]

# tunix logs a warning for every name registered twice; re-registering ours is expected.
quiet_reregistration(lambda name: name.startswith("advbudget_") or name == "reward_budget")

register_estimators()
configure_from_environment()


def __getattr__(name: str) -> Any:
    # The learner imports tunix's GRPO stack (flax, optax): only when asked for.
    if name in (
        "AdvBudgetDAPOLearner",
        "AdvBudgetGRPOLearner",
        "drgrpo_config",
        "drop_skipped_rows",
    ):
        from . import _learner

        return getattr(_learner, name)
    if name == "AdvBudgetAgenticGRPOLearner":
        from . import _agentic

        return _agentic.AdvBudgetAgenticGRPOLearner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
