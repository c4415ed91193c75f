"""tunix's row of conventions: how tunix computes the estimators it has itself
(its mirrors keep them, so switching to our name changes no number) and how it names ours.
Read by the adapter and the catalogue pages; a tunix upgrade that changes one of these
changes this file only (:class:`advbudget.core.Convention` says what each field means).
"""

from __future__ import annotations

from types import MappingProxyType

from advbudget.adapters import Convention

# tunix/rl/algo_core.py (0.1.7): grpo is (r - mean) / (std(ddof=1) + 1e-6), rloo and drgrpo
# have no constant; all on exact values (no tie tolerance). GRPOConfig refuses groups of one.
TUNIX = Convention(
    framework="tunix",
    version="0.1.7",
    own_names=MappingProxyType({"grpo": "grpo", "dr": "drgrpo", "rloo": "rloo"}),
    options=MappingProxyType({"grpo": {"eps": 1e-6, "std_correction": 1}}),
    extra_names=MappingProxyType({"reward_budget": "budget"}),
    whole_batch=(
        "GRPOLearner calls the estimator once per step on the merged micro-batches; the "
        "agentic learner calls it one group at a time (batch statistics are then the group's)"
    ),
    memory=(
        "identity: each row's prompt text, lent by AdvBudgetGRPOLearner to the estimator "
        "tunix calls; state: the custom metadata of tunix's actor checkpoints "
        "(`advbudget_memory`); evaluation reads it only; spo's `rho=\"kl\"`: tunix's "
        "get_old_per_token_logps scores each kept response again (not in the agentic "
        "learner)"
    ),
)
