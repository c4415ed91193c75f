"""The premature-convergence lab: a fast, exact simulation of RL for reasoning.

A shared linear-softmax policy picks one of a few solution strategies per prompt;
prompts come in routine and hard types, and the strategies that solve the hard ones
start unlikely. Training uses the library's own estimators and metrics, so estimators
can be compared on dynamics: accuracy, entropy, κ_eff, skipped groups (docs/simulation.md).
"""

from ._experiment import (
    EXPERIMENTS,
    ArmResult,
    ExperimentConfig,
    ExperimentResult,
    experiment_config,
    plateau_step,
    run_experiment,
    summarize_runs,
    to_json,
    write_json,
)
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
    "ArmResult",
    "ExperimentConfig",
    "ExperimentResult",
    "LossTerms",
    "Minibatch",
    "PromptSet",
    "RunConfig",
    "Task",
    "TaskConfig",
    "exact_metrics",
    "experiment_config",
    "log_policy",
    "make_task",
    "plateau_step",
    "plot_experiment",
    "run_experiment",
    "sample_rollouts",
    "summarize_runs",
    "surrogate_loss",
    "to_json",
    "train",
    "write_json",
]
