"""advbudget: reward budgeting and the other group advantage estimators of RL for LLM
reasoning, written once on the Array API (numpy, torch, jax) and plugged into verl, TRL,
OpenRLHF, tunix and SkyRL.

``import advbudget`` imports no ML framework; arrays of any namespace go in, arrays of
the same namespace and device come out.

This module re-exports the estimators of :mod:`advbudget.core`. Around them, the rest of
the library (numpy and array-api-compat are all it needs): :mod:`advbudget.metrics`,
:mod:`advbudget.theory`, :mod:`advbudget.rewards`, :mod:`advbudget.testing` and one adapter
per trainer under :mod:`advbudget.adapters`. On top, importing the library and imported by
none of it, the lab (:mod:`advbudget.lab`, the ``lab`` extra): data preparation,
evaluation, the two experiments and the ``advbudget`` command.
"""

from .core import (
    AdvantageResult,
    Estimator,
    EstimatorSpec,
    EstimatorState,
    GroupedRewards,
    GroupMethod,
    Groups,
    Input,
    NanPolicy,
    Option,
    Rule,
    Singletons,
    budget_advantage,
    compute_advantages,
    dr_advantage,
    estimator_names,
    estimator_spec,
    get_estimator,
    get_spec,
    group_normalized_advantage,
    make_groups,
    register_estimator,
    rloo_advantage,
    token_advantages,
    turn_returns,
    unregister_estimator,
)

__version__ = "0.1.0"

__all__ = [
    "AdvantageResult",
    "Estimator",
    "EstimatorSpec",
    "EstimatorState",
    "GroupMethod",
    "GroupedRewards",
    "Groups",
    "Input",
    "NanPolicy",
    "Option",
    "Rule",
    "Singletons",
    "__version__",
    "budget_advantage",
    "compute_advantages",
    "dr_advantage",
    "estimator_names",
    "estimator_spec",
    "get_estimator",
    "get_spec",
    "group_normalized_advantage",
    "make_groups",
    "register_estimator",
    "rloo_advantage",
    "token_advantages",
    "turn_returns",
    "unregister_estimator",
]
