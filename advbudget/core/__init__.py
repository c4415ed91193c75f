"""The framework-agnostic core: estimators on the Python Array API standard.

Data flow, one module per step: ``_labels`` (``make_groups``: group ids to dense codes and a
layout) and ``_groups`` (who belongs to which prompt: contiguous, permuted, segmented or
padded) -> ``_stats`` (``GroupedRewards``: group statistics, ties, and the building blocks
of estimators) -> ``estimators/`` (one unit per estimator family: each function beside its
spec, and the registry) -> ``_compute`` (checks and orchestration; the finiteness checks in
``_finite``) -> ``_result``; the public functions in ``_advantages``; κ in ``_kappa`` (public in
:mod:`advbudget.metrics`).
Each framework's conventions live with its adapter (:mod:`advbudget.adapters`). Argument
checks come from :mod:`advbudget.checks`, shared with the rest of the library.
"""

from ._advantages import (
    budget_advantage,
    dr_advantage,
    group_normalized_advantage,
    rloo_advantage,
)
from ._compute import compute_advantages
from ._finite import NanPolicy
from ._groups import GroupMethod, Groups
from ._labels import make_groups
from ._result import AdvantageResult
from ._state import EstimatorState, Tracker
from ._stats import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL, GroupedRewards, Singletons
from ._tokens import reward_to_go, token_advantages, whiten_tokens
from ._trajectories import Trajectories, turn_returns
from .estimators import (
    Estimator,
    EstimatorSpec,
    Input,
    Option,
    Rule,
    estimator_names,
    estimator_spec,
    estimator_specs,
    get_estimator,
    get_spec,
    on_register,
    register_estimator,
    unregister_estimator,
)
from .estimators.stateful import spo_rho

__all__ = [
    "DEFAULT_TIE_ATOL",
    "DEFAULT_TIE_RTOL",
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
    "Tracker",
    "Trajectories",
    "budget_advantage",
    "compute_advantages",
    "dr_advantage",
    "estimator_names",
    "estimator_spec",
    "estimator_specs",
    "get_estimator",
    "get_spec",
    "group_normalized_advantage",
    "make_groups",
    "on_register",
    "register_estimator",
    "reward_to_go",
    "rloo_advantage",
    "spo_rho",
    "token_advantages",
    "turn_returns",
    "unregister_estimator",
    "whiten_tokens",
]
