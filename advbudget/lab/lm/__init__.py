"""The LM experiment: a tiny Qwen3 learns column addition through TRL's GRPO trainer.

``advbudget experiment lm`` builds a task (routine additions without carry, rarer hard
ones with a carry), a tokenizer and a tiny Qwen3 model, warm-starts it with transformers'
``Trainer`` and trains it with :class:`advbudget.adapters.trl.AdvBudgetGRPOTrainer` for
each estimator and seed (docs: The LM experiment).

``import advbudget.lab.lm`` imports no ML framework: torch, transformers and trl are imported
when a model is built or trained.
"""

from ._config import PRESETS, LMConfig, lm_config
from ._task import (
    ALPHABET,
    TIERS,
    Problem,
    TaskSplits,
    carries,
    make_splits,
    mixture,
    tier_of,
)

__all__ = [
    "ALPHABET",
    "PRESETS",
    "TIERS",
    "LMConfig",
    "Problem",
    "TaskSplits",
    "carries",
    "lm_config",
    "make_splits",
    "mixture",
    "tier_of",
]
