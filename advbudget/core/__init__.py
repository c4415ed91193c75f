"""The framework-agnostic core: estimators on the Python Array API standard."""

from ._advantages import (
    budget_advantage,
    dr_advantage,
    group_normalized_advantage,
    rloo_advantage,
)
from ._compute import (
    AdvantageResult,
    Estimator,
    compute_advantages,
    estimator_names,
    get_estimator,
    make_groups,
    register_estimator,
)
from ._estimators import GroupedRewards
from ._groups import Groups
from ._tokens import token_advantages

__all__ = [
    "AdvantageResult",
    "Estimator",
    "GroupedRewards",
    "Groups",
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
