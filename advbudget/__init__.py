"""advbudget: reward budgeting and the other group advantage estimators of RL for LLM
reasoning, written once on the Array API (numpy, torch, jax) and plugged into verl, TRL
and OpenRLHF.

``import advbudget`` imports no ML framework; arrays of any namespace go in, arrays of
the same namespace and device come out.
"""

from .core import (
    AdvantageResult,
    Estimator,
    GroupedRewards,
    Groups,
    budget_advantage,
    compute_advantages,
    dr_advantage,
    estimator_names,
    get_estimator,
    group_normalized_advantage,
    make_groups,
    register_estimator,
    rloo_advantage,
    token_advantages,
)

__version__ = "0.1.0"

__all__ = [
    "AdvantageResult",
    "Estimator",
    "GroupedRewards",
    "Groups",
    "__version__",
    "budget_advantage",
    "compute_advantages",
    "dr_advantage",
    "estimator_names",
    "get_estimator",
    "group_normalized_advantage",
    "make_groups",
    "register_estimator",
    "rloo_advantage",
    "token_advantages",
]
