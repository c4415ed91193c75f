"""TRL: ``GRPOTrainer`` with any advbudget estimator (reward budgeting by default).

One argument switches TRL's GRPO advantages to budgeted ones; everything else (loss type,
clipping, KL, vLLM) stays TRL's::

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    trainer = AdvBudgetGRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...),
                                   train_dataset=..., advantage_estimator="budget")

``trl`` is imported only when :class:`AdvBudgetGRPOTrainer` is first used, so this package
imports without it. Supported TRL versions: :data:`SUPPORTED_TRL`; another version raises
:class:`ImportError` on first use.
"""

from __future__ import annotations

from typing import Any

from ._version import SUPPORTED_TRL, check_trl_version

__all__ = ["SUPPORTED_TRL", "AdvBudgetGRPOTrainer", "check_trl_version"]


def __getattr__(name: str) -> Any:
    # Import trl (seconds, and an optional dependency) only when the trainer is asked for.
    if name == "AdvBudgetGRPOTrainer":
        from ._trainer import AdvBudgetGRPOTrainer

        return AdvBudgetGRPOTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
