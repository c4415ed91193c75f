"""verl's row of conventions: how verl computes the estimators it has itself
(its mirrors keep them, so switching to our name changes no number) and how it names ours.
Read by the adapter and the catalogue pages; a verl upgrade that changes one of these
changes this file only (:class:`advbudget.core.Convention` says what each field means).
"""

from __future__ import annotations

from types import MappingProxyType

from advbudget.adapters import Convention

VERL = Convention(
    framework="verl",
    version="0.9.1",
    own_names=MappingProxyType(
        {
            "grpo": "grpo",
            "dr": "grpo with norm_adv_by_std_in_grpo=False",
            "rloo": 'rloo (rloo_vectorized is rloo with singletons="skip")',
            "opo": "opo",
            "grpo_passk": "grpo_passk",
            "gpg": "gpg",
            "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
            "remax": "remax",
            # per token in verl, so in the adapter: the reward-to-go at algorithm.gamma
            "reinforce": "reinforce_plus_plus",
            "gdpo": "gdpo",
        }
    ),
    options=MappingProxyType(
        {
            "grpo": {"eps": 1e-6, "std_correction": 1},
            "grpo_passk": {"eps": 1e-6, "std_correction": 1},
            "gpg": {"f_norm": 1.0},
            "reinforce_plus_plus_baseline": {
                "std_correction": 1,
                "var_eps": 1e-8,
                "var_floor": 0.0,
            },
            "reinforce": {"std_correction": 1, "var_eps": 1e-8, "var_floor": 0.0},
            "gdpo": {"eps": 1e-6, "std_correction": 1, "var_eps": 1e-8, "std_eps": 0.0},
        }
    ),
    singletons="raw",
    singletons_refused=frozenset({"grpo_passk"}),  # "Pass@k requires at least 2 samples"
    # verl's remax and reinforce_plus_plus return the reward-to-go, not the advantages
    returns=MappingProxyType({"remax": "reward", "reinforce": "reward"}),
    extra_names=MappingProxyType({"reward_budget": "budget"}),
    whole_batch="verl calls the estimator once on the whole batch, in its TaskRunner",
    memory=(
        "identity: the dataset `index` (else the prompt tokens), lent by the advbudget_* "
        "trainer modes to the estimator verl calls; state: `advbudget_memory.json` in each "
        "`global_step_N` checkpoint folder; spo's `rho=kl`: the actor's `compute_log_prob` "
        "scores each kept response again"
    ),
    components=(
        "non_tensor_batch[key] for each key of algorithm.gdpo_reward_keys (the keys of the "
        "dict compute_score returns, verl's reward_extra_info), weighted by "
        "algorithm.gdpo_reward_weights, as verl's own gdpo"
    ),
)
