"""TRL's row of conventions: how TRL computes the estimators it has itself
(its mirrors keep them, so switching to our name changes no number) and how it names ours.
Read by the adapter and the catalogue pages; a TRL upgrade that changes one of these
changes this file only (:class:`advbudget.core.Convention` says what each field means).
"""

from __future__ import annotations

from types import MappingProxyType

from advbudget.adapters import Convention

TRL = Convention(
    framework="trl",
    version="1.13, 1.16",
    own_names=MappingProxyType(
        {
            "grpo": 'GRPOTrainer scale_rewards="group"',
            "dr": 'GRPOTrainer scale_rewards="none"',
            "rloo": "RLOOTrainer",
            "grpo_batch_std": 'GRPOTrainer scale_rewards="batch"',
            "rloo_normalized": "RLOOTrainer normalize_advantages=True",
            "gdpo": 'GRPOTrainer multi_objective_aggregation="normalize_then_sum"',
        }
    ),
    options=MappingProxyType(
        {
            "grpo": {"eps": 1e-4, "std_correction": 1},
            "grpo_batch_std": {"eps": 1e-4, "std_correction": 1},
            "rloo_normalized": {"eps": 1e-4, "std_correction": 1},
            "gdpo": {"eps": 1e-4, "std_correction": 1, "var_eps": 0.0, "std_eps": 1e-4},
        }
    ),
    prefix="",
    kappa_every=0,
    whole_batch="the rewards gathered from every process (TRL's reward step)",
    memory=(
        "identity: each completion's `prompt` (gathered from every process); state: "
        "`advbudget_state.json` in each `checkpoint-N` folder; evaluation reads it only; "
        'spo\'s `advantage_options={"rho": "kl"}`: TRL\'s forward scores each kept '
        "response again"
    ),
    components="the rewards of each reward function (reward_funcs), weighted by reward_weights",
)
