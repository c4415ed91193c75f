"""The framework-agnostic core: estimators on the Python Array API standard.

Data flow, one module per step: ``_labels`` (group ids to dense codes) and ``_groups``
(who belongs to which prompt: contiguous, permuted, segmented or padded) -> ``_stats``
(``GroupedRewards``: group statistics and the building blocks of estimators) ->
``estimators/`` (one unit per estimator family: each function beside its spec, and the
registry) -> ``_compute`` (checks and orchestration) -> ``_result``; per-framework
conventions in ``_conventions``; the public functions in ``_advantages``; κ in ``_kappa``. Argument
checks come from :mod:`advbudget.checks`, shared with the rest of the library.
"""

from ._advantages import (
    budget_advantage,
    dr_advantage,
    group_normalized_advantage,
    rloo_advantage,
)
from ._compute import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL, compute_advantages, make_groups
from ._conventions import CONVENTIONS, Convention, get_convention
from ._groups import Groups
from ._kappa import (
    KappaPairs,
    kappa_eff_of_pairs,
    kappa_pairs,
    sequence_advantages,
    sequence_logprobs,
)
from ._result import AdvantageResult
from ._state import EstimatorState, Tracker
from ._stats import GroupedRewards
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
    "CONVENTIONS",
    "DEFAULT_TIE_ATOL",
    "DEFAULT_TIE_RTOL",
    "AdvantageResult",
    "Convention",
    "Estimator",
    "EstimatorSpec",
    "EstimatorState",
    "GroupedRewards",
    "Groups",
    "Input",
    "KappaPairs",
    "Option",
    "Rule",
    "Tracker",
    "Trajectories",
    "budget_advantage",
    "compute_advantages",
    "dr_advantage",
    "estimator_names",
    "estimator_spec",
    "estimator_specs",
    "get_convention",
    "get_estimator",
    "get_spec",
    "group_normalized_advantage",
    "kappa_eff_of_pairs",
    "kappa_pairs",
    "make_groups",
    "on_register",
    "register_estimator",
    "reward_to_go",
    "rloo_advantage",
    "sequence_advantages",
    "sequence_logprobs",
    "spo_rho",
    "token_advantages",
    "turn_returns",
    "unregister_estimator",
    "whiten_tokens",
]
