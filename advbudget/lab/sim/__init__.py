"""The premature-convergence lab: a fast, exact simulation of RL for reasoning.

A shared linear-softmax policy picks one of a few solution strategies per prompt;
prompts come in routine and hard types, and the strategies that solve the hard ones
start unlikely. Training uses the library's own estimators and metrics, so estimators
can be compared on dynamics: accuracy against the policy class's ceiling, hard types
discovered, escape from the routine-only plateau, entropy, κ_eff, skipped groups; and
mapped over task structures (docs/simulation.md).
"""

from ._ceiling import Ceiling, policy_ceiling
from ._experiment import (
    EXPERIMENTS,
    REGIMES,
    ArmResult,
    ExperimentConfig,
    ExperimentResult,
    Regime,
    experiment_config,
    run_experiment,
    summarize_runs,
    to_json,
    write_json,
)
from ._map import MapConfig, map_config, run_map, write_map_json
from ._plot import plot_experiment
from ._policy import LossTerms, Minibatch, surrogate_loss
from ._task import (
    PromptSet,
    Task,
    TaskConfig,
    exact_metrics,
    log_policy,
    make_task,
    sample_rollouts,
)
from ._train import HISTORY_KEYS, RunConfig, train

__all__ = [
    "EXPERIMENTS",
    "HISTORY_KEYS",
    "REGIMES",
    "ArmResult",
    "Ceiling",
    "ExperimentConfig",
    "ExperimentResult",
    "LossTerms",
    "MapConfig",
    "Minibatch",
    "PromptSet",
    "Regime",
    "RunConfig",
    "Task",
    "TaskConfig",
    "exact_metrics",
    "experiment_config",
    "log_policy",
    "make_task",
    "map_config",
    "plot_experiment",
    "policy_ceiling",
    "run_experiment",
    "run_map",
    "sample_rollouts",
    "summarize_runs",
    "surrogate_loss",
    "to_json",
    "train",
    "write_json",
    "write_map_json",
]
