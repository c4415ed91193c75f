"""Experiments: arms (estimator x β x entropy bonus) times seeds, summarised over seeds."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..metrics import oscillation
from ._task import Float, TaskConfig, make_task
from ._train import HISTORY_KEYS, RunConfig, train

EXPERIMENTS = ("compare", "kappa", "entropy")
PLATEAU_TOLERANCE = 0.005  # 0.5 accuracy points
# The policy has escaped the routine-only plateau once its accuracy on hard types reaches
# this fraction of the oracle's (the best strategy on every hard prompt).
ESCAPE_FRACTION = 0.5

# Per-seed numbers of a run; the table and the JSON give their mean and spread over seeds.
SUMMARY_KEYS = (
    "final_accuracy",
    "best_accuracy",
    "plateau_step",
    "escape_step",
    "final_accuracy_hard",
    "final_accuracy_routine",
    "final_pass_at_8",
    "final_entropy",
    "final_kl_to_reference",
    "kappa_eff_mean",
    "kappa_eff_oscillation",
    "kappa_eff_jitter",
    "skipped_group_fraction",
)


@dataclass(frozen=True)
class ExperimentConfig:
    """A set of arms, each trained with every seed on the same task.

    The arms are every combination of ``estimators``, ``betas`` and ``entropy_coefs``;
    everything else is shared (see :class:`RunConfig` for each field's meaning).

    Attributes:
        name: a label for the outputs (``compare``, ``kappa``, ``entropy`` or your own).
        estimators: estimator names.
        seeds: training seeds (the task itself is drawn from ``task.task_seed``).
        betas: KL coefficients; more than one is a κ sweep.
        entropy_coefs: entropy bonus coefficients; more than one is a sweep.
        entropy_until: the bonus applies to steps ``1..entropy_until`` (None: all).
        task: the prompts and strategies.
    """

    name: str = "compare"
    estimators: tuple[str, ...] = ("grpo", "dr", "budget", "rloo")
    seeds: tuple[int, ...] = tuple(range(10))
    steps: int = 800
    group_size: int = 8
    prompts_per_step: int = 32
    minibatches: int = 4
    learning_rate: float = 0.01
    clip: float = 0.2
    betas: tuple[float, ...] = (0.001,)
    entropy_coefs: tuple[float, ...] = (0.0,)
    entropy_until: int | None = None
    optimizer: str = "adam"
    task: TaskConfig = field(default_factory=TaskConfig)

    def __post_init__(self) -> None:
        for name in ("estimators", "seeds", "betas", "entropy_coefs"):
            values = getattr(self, name)
            if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)):
                raise TypeError(f"{name}: expected a tuple of values, got {values!r}")
            if not values:
                raise ValueError(f"{name}: expected at least one value, got none")
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: expected distinct values, got {tuple(values)!r}")
        if not isinstance(self.task, TaskConfig):
            raise TypeError(f"task: expected a TaskConfig, got {type(self.task).__name__}")
        self.arms()  # every arm's RunConfig checks its own values

    def arms(self) -> list[tuple[str, RunConfig]]:
        """``(label, run config)`` of every arm, with the first seed."""
        arms = []
        for estimator, beta, entropy_coef in itertools.product(
            self.estimators, self.betas, self.entropy_coefs
        ):
            run = RunConfig(
                estimator=estimator,
                steps=self.steps,
                group_size=self.group_size,
                prompts_per_step=self.prompts_per_step,
                minibatches=self.minibatches,
                learning_rate=self.learning_rate,
                clip=self.clip,
                beta=beta,
                entropy_coef=entropy_coef,
                entropy_until=self.entropy_until,
                optimizer=self.optimizer,
                seed=self.seeds[0],
            )
            arms.append((self._label(run), run))
        return arms

    def _label(self, run: RunConfig) -> str:
        parts = [run.estimator]
        if len(self.betas) > 1:
            kappa_text = f"κ={_three_digits(1 / run.beta)}" if run.beta > 0 else "κ=∞"
            parts.append(f"β={run.beta:g} ({kappa_text})")
        if len(self.entropy_coefs) > 1:
            parts.append(f"entropy {run.entropy_coef:g}" if run.entropy_coef else "no bonus")
        return " ".join(parts)

    def arms_axes(self) -> list[str]:
        """The swept settings beside the estimator (``"beta"``, ``"entropy_coef"``)."""
        axes = []
        if len(self.betas) > 1:
            axes.append("beta")
        if len(self.entropy_coefs) > 1:
            axes.append("entropy_coef")
        return axes

    @property
    def num_runs(self) -> int:
        return len(self.estimators) * len(self.betas) * len(self.entropy_coefs) * len(self.seeds)


def experiment_config(
    name: str = "compare", *, quick: bool = False, **overrides: Any
) -> ExperimentConfig:
    """The default configuration of one of the three experiments, with ``overrides``.

    ``compare``: GRPO, Dr, budget and RLOO at the default β = 0.001. ``kappa``: Dr at
    β = 0 (no KL, κ = ∞) and κ = 1/β = 1000, 100, 33, 10, 3.3. ``entropy``: GRPO and
    budget without and with an entropy bonus (0.01, 0.03, 0.1) for the first half of
    training. ``quick=True`` shrinks everything
    to a few seconds (for tests and smoke runs).

    Examples:
        >>> from advbudget.sim import experiment_config
        >>> config = experiment_config("kappa", quick=True)
        >>> [label for label, _ in config.arms()]  # doctest: +NORMALIZE_WHITESPACE
        ['dr β=0 (κ=∞)', 'dr β=0.001 (κ=1000)', 'dr β=0.01 (κ=100)',
         'dr β=0.03 (κ=33.3)', 'dr β=0.1 (κ=10)', 'dr β=0.3 (κ=3.33)']
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment: expected one of {EXPERIMENTS}, got {name!r}")
    defaults: dict[str, Any] = {"name": name}
    if name == "kappa":
        defaults.update(estimators=("dr",), betas=(0.0, 0.001, 0.01, 0.03, 0.1, 0.3))
    elif name == "entropy":
        defaults.update(estimators=("grpo", "budget"), entropy_coefs=(0.0, 0.01, 0.03, 0.1))
    if quick:
        defaults.update(
            seeds=(0, 1),
            steps=40,
            task=TaskConfig(train_prompts=512, validation_prompts=256),
        )
    defaults.update(overrides)
    steps = defaults.get("steps", ExperimentConfig.steps)
    if name == "entropy" and "entropy_until" not in overrides:
        defaults["entropy_until"] = steps // 2
    return ExperimentConfig(**defaults)


def _three_digits(value: float) -> str:
    """1000 -> '1000', 33.33 -> '33.3', 3.333 -> '3.33' (no exponent for round numbers)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


@dataclass(frozen=True, eq=False)
class ArmResult:
    """The curves of one arm for every seed and their summary over seeds."""

    label: str
    run: RunConfig
    histories: list[dict[str, Float]]
    summary: dict[str, dict[str, Any]]

    def curves(self, key: str) -> Float:
        """``[seeds, steps + 1]`` values of one metric."""
        return np.stack([history[key] for history in self.histories])


@dataclass(frozen=True, eq=False)
class ExperimentResult:
    """What :func:`run_experiment` returns: the config, and one :class:`ArmResult` per arm."""

    config: ExperimentConfig
    arms: list[ArmResult]
    oracle_accuracy: float
    escape_level: float


def run_experiment(
    config: ExperimentConfig, *, on_step: Callable[[int], None] | None = None
) -> ExperimentResult:
    """Train every arm with every seed and summarise over seeds.

    ``on_step`` is called after each training step (for a progress bar).

    Examples:
        >>> from advbudget.sim import experiment_config, run_experiment
        >>> config = experiment_config("compare", quick=True, estimators=("dr", "budget"),
        ...                            steps=5)
        >>> result = run_experiment(config)
        >>> [arm.label for arm in result.arms], result.arms[0].curves("accuracy").shape
        (['dr', 'budget'], (2, 6))
    """
    task = make_task(config.task)
    best_possible = task.validation.success.max(axis=1)
    hard = task.validation.hard
    escape_level = ESCAPE_FRACTION * float(best_possible[hard].mean()) if hard.any() else math.nan
    arms = []
    for label, run in config.arms():
        histories = [train(replace(run, seed=seed), task, on_step=on_step) for seed in config.seeds]
        summary = summarize_runs(histories, escape_level=escape_level)
        arms.append(ArmResult(label, run, histories, summary))
    return ExperimentResult(config, arms, float(best_possible.mean()), escape_level)


def plateau_step(accuracy: Any, tolerance: float = PLATEAU_TOLERANCE) -> int:
    """The step at which accuracy stops improving.

    The first step ``t`` whose running best is within ``tolerance`` of the final running
    best: after ``t`` the best accuracy never improves by more than ``tolerance`` in all.

    Examples:
        >>> from advbudget.sim import plateau_step
        >>> plateau_step([0.1, 0.3, 0.5, 0.52, 0.503, 0.524])
        3
    """
    values = np.asarray(accuracy, dtype=np.float64)
    running_best = np.maximum.accumulate(values)
    return int(np.argmax(running_best >= running_best[-1] - tolerance))


def summarize_runs(
    histories: list[dict[str, Float]], *, escape_level: float = math.nan
) -> dict[str, dict[str, Any]]:
    """Per-seed numbers of each run (``SUMMARY_KEYS``) and their mean and spread over seeds.

    Each key maps to ``{"mean", "std", "min", "max", "count", "per_seed"}`` over the
    seeds where the number exists (``count`` of them): ``escape_step``, the first step at
    which the accuracy on hard types reaches ``escape_level``, is NaN for a seed that
    never gets there. ``std`` is the sample standard deviation over seeds (0 with one).

    Examples:
        >>> from advbudget.sim import RunConfig, TaskConfig, make_task, train, summarize_runs
        >>> task = make_task(TaskConfig(train_prompts=64, validation_prompts=64))
        >>> runs = [train(RunConfig(steps=4, prompts_per_step=8, seed=s), task) for s in (0, 1)]
        >>> summary = summarize_runs(runs)
        >>> sorted(summary["final_accuracy"])
        ['count', 'max', 'mean', 'min', 'per_seed', 'std']
    """
    per_seed: dict[str, list[float]] = {key: [] for key in SUMMARY_KEYS}
    for history in histories:
        kappa_means = history["kappa_eff_mean"][1:]
        kappa_means = kappa_means[np.isfinite(kappa_means)]
        numbers = {
            "final_accuracy": history["accuracy"][-1],
            "best_accuracy": np.max(history["accuracy"]),
            "plateau_step": plateau_step(history["accuracy"]),
            "escape_step": _first_step_at(history["accuracy_hard"], escape_level),
            "final_accuracy_hard": history["accuracy_hard"][-1],
            "final_accuracy_routine": history["accuracy_routine"][-1],
            "final_pass_at_8": history["pass_at_8"][-1],
            "final_entropy": history["entropy"][-1],
            "final_kl_to_reference": history["kl_to_reference"][-1],
            "kappa_eff_mean": float(kappa_means.mean()) if kappa_means.size else math.nan,
            "kappa_eff_oscillation": oscillation(kappa_means) if kappa_means.size else math.nan,
            # The oscillation above includes κ_eff's drift over training; step-to-step
            # differences leave only the noise (std of a difference of two is √2 std).
            "kappa_eff_jitter": float(np.std(np.diff(kappa_means)) / math.sqrt(2))
            if kappa_means.size > 1
            else math.nan,
            "skipped_group_fraction": float(np.nanmean(history["skipped_group_fraction"][1:]))
            if len(history["skipped_group_fraction"]) > 1
            else math.nan,
        }
        for key, value in numbers.items():
            per_seed[key].append(float(value))
    summary: dict[str, dict[str, Any]] = {}
    for key, values in per_seed.items():
        array = np.array(values)
        array = array[np.isfinite(array)]
        summary[key] = {
            "mean": float(array.mean()) if array.size else math.nan,
            "std": float(array.std(ddof=1)) if array.size > 1 else 0.0,
            "min": float(array.min()) if array.size else math.nan,
            "max": float(array.max()) if array.size else math.nan,
            "count": int(array.size),
            "per_seed": values,
        }
    return summary


def _first_step_at(values: Float, level: float) -> float:
    reached = values >= level
    return float(np.argmax(reached)) if math.isfinite(level) and reached.any() else math.nan


def to_json(result: ExperimentResult) -> dict[str, Any]:
    """Everything about an experiment as JSON-ready data (NaN becomes None).

    Examples:
        >>> from advbudget.sim import experiment_config, run_experiment, to_json
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=2)
        >>> data = to_json(run_experiment(config))
        >>> sorted(data)
        ['arms', 'config', 'escape_level', 'oracle_accuracy']
        >>> sorted(data["arms"][0])
        ['curves', 'label', 'run', 'summary']
    """
    arms = []
    for arm in result.arms:
        curves = {key: [_finite_or_none(row) for row in arm.curves(key)] for key in HISTORY_KEYS}
        run = asdict(arm.run)
        run.pop("seed")
        arms.append({"label": arm.label, "run": run, "summary": arm.summary, "curves": curves})
    return {
        "config": asdict(result.config),
        "oracle_accuracy": result.oracle_accuracy,
        "escape_level": result.escape_level,
        "arms": arms,
    }


def _finite_or_none(values: Float) -> list[float | None]:
    # Five significant digits are beyond what the seeds resolve and keep the file small.
    return [float(f"{v:.5g}") if math.isfinite(v) else None for v in values]


def write_json(result: ExperimentResult, path: str | Path) -> Path:
    """Write :func:`to_json` of ``result`` to ``path`` (directories are created).

    Examples:
        >>> import json, tempfile, pathlib
        >>> from advbudget.sim import experiment_config, run_experiment, write_json
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=2)
        >>> path = write_json(run_experiment(config), pathlib.Path(tempfile.mkdtemp()) / "r.json")
        >>> json.loads(path.read_text())["config"]["estimators"]
        ['dr']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_sanitize(to_json(result)), separators=(",", ":"), allow_nan=False)
    path.write_text(text)
    return path


def _sanitize(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _sanitize(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(item) for item in value]
    return value
