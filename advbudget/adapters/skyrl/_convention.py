"""SkyRL's row of conventions: how SkyRL computes the estimators it has itself
(its mirrors keep them, so switching to our name changes no number) and how it names ours.
Read by the adapter and the catalogue pages; a SkyRL upgrade that changes one of these
changes this file only (:class:`advbudget.core.Convention` says what each field means).
"""

from __future__ import annotations

from types import MappingProxyType

from advbudget.adapters import Convention

# skyrl/backends/skyrl_train/utils/ppo_utils.py (0.4.0): grpo is (r - mean) / (std(ddof=1)
# + 1e-6), r - mean with grpo_norm_by_std=False, and scores a group of one against mean 0
# and std 1; rloo scores a group of one 0; maxrl is (r - mean) / (mean + 1e-6), a group of
# one r - 0. All on exact values (no tie tolerance).
SKYRL = Convention(
    framework="skyrl",
    version="0.4.0",
    own_names=MappingProxyType(
        {
            "grpo": "grpo",
            "dr": "grpo with trainer.algorithm.grpo_norm_by_std=false",
            "rloo": "rloo",
            "maxrl": "maxrl",
        }
    ),
    options=MappingProxyType({"grpo": {"eps": 1e-6, "std_correction": 1}, "maxrl": {"eps": 1e-6}}),
    singletons="raw",
    singletons_skipped=frozenset({"rloo"}),
    extra_names=MappingProxyType({"reward_budget": "budget"}),
    whole_batch=(
        "SkyRL calls the estimator once per step on the whole batch (step-wise trajectories: "
        "on each trajectory's last step), in its trainer's Ray task; padding rows are left out"
    ),
    memory=(
        "identity: SkyRL's uid of each prompt (its dataset index), which SkyRL hands the "
        "estimator; state: `advbudget_memory.json` in each `global_step_N` checkpoint "
        "folder; spo's `rho=kl`: SkyRL's policy forward scores each kept response again "
        "(not with step-wise trajectories)"
    ),
)
