"""SkyRL adapter: ``trainer.algorithm.advantage_estimator=reward_budget`` (and
``advbudget_NAME`` for every estimator of the advbudget catalogue: ``advbudget_grpo``,
``advbudget_dr``, a plugin's) computed by the advbudget core.

Importing this module registers our estimators in SkyRL's ``AdvantageEstimatorRegistry``
when SkyRL is installed, and changes nothing else. SkyRL reads no plugin entry points: its
estimators must be registered in the process that validates the config, before Ray starts,
and SkyRL's registry sync carries them to its trainer's Ray task. Run the advbudget entry
point, which does both and adds the step's features (metrics, κ_eff, ledger, drop, memory):

    python -m advbudget.adapters.skyrl trainer.algorithm.advantage_estimator=reward_budget ...

or SkyRL's own, dispatched here: ``python -m skyrl.train.entrypoints.main_base
trainer.override_entrypoint=advbudget.adapters.skyrl ...``. Options:
``trainer.algorithm.advbudget.<name>`` (:mod:`._options`); conventions:
:mod:`._estimators`; the run: :mod:`._trainer`.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ._estimators import (
    compute_result,
    estimator_function,
    estimator_names,
    register_estimators,
)
from ._version import SUPPORTED_SKYRL, check_skyrl_version

__all__ = [
    "SUPPORTED_SKYRL",
    "AdvBudgetConfig",
    "AdvBudgetPPOExp",
    "AdvBudgetPPOTrainer",
    "check_skyrl_version",
    "compute_result",
    "estimator_function",
    "estimator_names",
    "main",
    "register_estimators",
]

# The run's classes import SkyRL's trainer (about 9 s): loaded when first asked for.
_RUN = ("AdvBudgetConfig", "AdvBudgetPPOExp", "AdvBudgetPPOTrainer", "main")


def __getattr__(name: str) -> Any:
    if name in _RUN:
        from . import _trainer

        return getattr(_trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if importlib.util.find_spec("skyrl") is not None:
    check_skyrl_version()
    register_estimators()
