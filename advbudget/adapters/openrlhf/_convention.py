"""OpenRLHF's row of conventions: how OpenRLHF computes the estimators it has itself
(its mirrors keep them, so switching to our name changes no number) and how it names ours.
Read by the adapter and the catalogue pages; a OpenRLHF upgrade that changes one of these
changes this file only (:class:`advbudget.core.Convention` says what each field means).
"""

from __future__ import annotations

from types import MappingProxyType

from advbudget.adapters import Convention

OPENRLHF = Convention(
    framework="openrlhf",
    version="0.11.2",
    own_names=MappingProxyType(
        {
            "grpo": "group_norm",
            "dr": "dr_grpo",
            "rloo": "rloo",
            "reinforce": "reinforce",
            "reinforce_baseline": "reinforce_baseline",
        }
    ),
    options=MappingProxyType(
        {
            "grpo": {"eps": 1e-9, "std_correction": 1},
            "reinforce": {"std_correction": 0, "var_eps": 0.0, "var_floor": 1e-8},
            "reinforce_baseline": {"std_correction": 0, "var_eps": 0.0, "var_floor": 1e-8},
        }
    ),
    # train_ppo_ray asserts n_samples_per_prompt > 1 for these (its own names); reinforce
    # runs with groups of one.
    singletons_refused=frozenset({"grpo", "dr", "rloo", "reinforce_baseline"}),
    # OpenRLHF whitens the advantages after the returns: these are of the reward before.
    returns=MappingProxyType({"reinforce": "reward", "reinforce_baseline": "dr"}),
    extra_names=MappingProxyType({"reward_budget": "budget"}),
    whole_batch="every experience of the step, concatenated, in the PPOTrainer actor",
    memory=(
        "identity: the prompt text of each sample; state: the checkpoint's `client_states` "
        "(`advbudget_memory`), in the PPOTrainer actor; spo's `--advbudget.rho kl`: "
        "the actor group's `forward` scores each kept response again"
    ),
)
