"""Experiments: arms (estimator x G x β x entropy term x lag) times seeds, summarised over
seeds."""

from __future__ import annotations

import functools
import itertools
import json
import math
import multiprocessing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from advbudget._io import atomic_write
from advbudget.checks import int_at_least
from advbudget.core._staleness import StaleRule
from advbudget.metrics import oscillation

from ._ceiling import Ceiling, task_ceiling
from ._task import Float, Task, TaskConfig, make_task
from ._train import HISTORY_KEYS, RunConfig, train

EXPERIMENTS = ("compare", "kappa", "entropy", "kl", "group-size", "difficulty", "staleness")
# The ``difficulty`` experiment: advantages whose size follows how hard a prompt is (its
# group's success rate, a weight over the batch, or a per-prompt tracker across steps: spo,
# rae), with GRPO, the baseline, beside them.
DIFFICULTY = ("budget", "grpo", "grpo+grpo_lead", "dgpo", "maxrl", "spo", "rae")
# The policy has escaped the routine-only plateau once its accuracy on hard types reaches
# this fraction of the best any linear policy gets there (the held-out bound's).
ESCAPE_FRACTION = 0.5


@dataclass(frozen=True)
class Regime:
    """A named task structure with the horizon it needs (docs/simulation.md, section 2).

    Attributes:
        name: ``transient`` or ``persistent``.
        task: the prompt population.
        steps: the default training horizon.
        horizons: the steps at which the gap to the ceiling is reported.
        description: one line for the tables' titles.
    """

    name: str
    task: TaskConfig
    steps: int
    horizons: tuple[int, ...]
    description: str


REGIMES = {
    "transient": Regime(
        "transient",
        TaskConfig(),
        800,
        (200, 800),
        "4 routine + 4 hard types, 12.5 % of prompts each",
    ),
    "persistent": Regime(
        "persistent",
        TaskConfig(routine_types=19, hard_types=8),
        2000,
        (500, 2000),
        "19 routine + 8 hard types, 3.7 % of prompts each",
    ),
}

# Per-seed numbers of a run; the table and the JSON give their mean and spread over seeds.
# ``accuracy_at_<step>`` are added for each horizon.
SUMMARY_KEYS = (
    "final_accuracy",
    "best_accuracy",
    "escape_step",
    "final_hard_types_discovered",
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

    The arms are every combination of ``estimators``, ``group_sizes``, ``betas``,
    ``entropy_coefs`` and ``entropy_in`` (without a bonus, where it goes does not
    matter: one arm); everything else is shared (see :class:`RunConfig`).

    Attributes:
        name: a label for the outputs (one of ``EXPERIMENTS`` or your own).
        regime: the task structure's name (``transient``, ``persistent`` or ``custom``).
        estimators: estimator names.
        seeds: training seeds (the task itself is drawn from ``task.task_seed``).
        group_sizes: G values; more than one is a group-size sweep (None: ``group_size``).
        betas: KL coefficients; more than one is a κ sweep.
        entropy_coefs: entropy bonus coefficients; more than one is a sweep.
        entropy_in: where the entropy term goes, ``"loss"`` and/or ``"reward"``.
        entropy_until: the bonus applies to steps ``1..entropy_until`` (None: all).
        lags: async sampling: each a run's ``max_lag`` (a rollout's policy is up to this
            many updates old); more than one is a lag sweep.
        stale_rules: ``stale_rollouts`` rules, each an arm at every lag above 0 (at lag 0
            nothing is stale: one arm).
        max_staleness: the staleness beyond which a rollout is stale (None: none is).
        horizons: steps at which the accuracy (and the gap to the ceiling) is reported.
        eval_every: evaluate every this many steps (1: full curves).
        task: the prompts and strategies.
    """

    name: str = "compare"
    regime: str = "transient"
    estimators: tuple[str, ...] = ("grpo", "dr", "budget", "rloo")
    seeds: tuple[int, ...] = tuple(range(10))
    steps: int = 800
    group_size: int = 8
    group_sizes: tuple[int, ...] | None = None
    prompts_per_step: int = 32
    minibatches: int = 4
    learning_rate: float = 0.01
    clip: float = 0.2
    betas: tuple[float, ...] = (0.001,)
    entropy_coefs: tuple[float, ...] = (0.0,)
    entropy_in: tuple[str, ...] = ("loss",)
    entropy_until: int | None = None
    optimizer: str = "adam"
    lags: tuple[int, ...] = (0,)
    stale_rules: tuple[StaleRule, ...] = ("keep",)
    max_staleness: int | None = None
    horizons: tuple[int, ...] = (200, 800)
    eval_every: int = 1
    task: TaskConfig = field(default_factory=TaskConfig)

    def __post_init__(self) -> None:
        names = ["estimators", "seeds", "betas", "entropy_coefs", "entropy_in", "horizons"]
        names += ["lags", "stale_rules"]
        if self.group_sizes is not None:
            names.append("group_sizes")
        for name in names:
            values = getattr(self, name)
            if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)):
                raise TypeError(f"{name}: expected a tuple of values, got {values!r}")
            if not values and name != "horizons":
                raise ValueError(f"{name}: expected at least one value, got none")
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: expected distinct values, got {tuple(values)!r}")
        for horizon in self.horizons:
            if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
                raise ValueError(f"horizons: expected ints >= 1, got {tuple(self.horizons)!r}")
        if not isinstance(self.task, TaskConfig):
            raise TypeError(f"task: expected a TaskConfig, got {type(self.task).__name__}")
        self.arms()  # every arm's RunConfig checks its own values

    @property
    def report_horizons(self) -> tuple[int, ...]:
        """The horizons within the run, and the last step, in order."""
        return tuple(sorted({h for h in self.horizons if h <= self.steps} | {self.steps}))

    def arms(self) -> list[tuple[str, RunConfig]]:
        """``(label, run config)`` of every arm, with the first seed."""
        arms = []
        sizes = self.group_sizes if self.group_sizes is not None else (self.group_size,)
        bonuses = [
            (coef, place)
            for coef in self.entropy_coefs
            for place in (self.entropy_in if coef else self.entropy_in[:1])
        ]
        lagged = [
            (lag, rule) for lag in self.lags for rule in (self.stale_rules if lag else ("keep",))
        ]
        for estimator, size, beta, (entropy_coef, place), (lag, rule) in itertools.product(
            self.estimators, sizes, self.betas, bonuses, lagged
        ):
            run = RunConfig(
                estimator=estimator,
                steps=self.steps,
                group_size=size,
                prompts_per_step=self.prompts_per_step,
                minibatches=self.minibatches,
                learning_rate=self.learning_rate,
                clip=self.clip,
                beta=beta,
                entropy_coef=entropy_coef,
                entropy_in=place,
                entropy_until=self.entropy_until,
                optimizer=self.optimizer,
                seed=self.seeds[0],
                eval_every=self.eval_every,
                max_lag=lag,
                max_staleness=self.max_staleness if lag else None,
                stale_rollouts=rule,
            )
            arms.append((self._label(run), run))
        return arms

    def _label(self, run: RunConfig) -> str:
        parts = [run.estimator]
        if self.group_sizes is not None and len(self.group_sizes) > 1:
            parts.append(f"G={run.group_size}")
        if len(self.betas) > 1:
            parts.append(f"κ={_three_digits(1 / run.beta)}" if run.beta > 0 else "κ=∞")
        if len(self.entropy_coefs) > 1 or len(self.entropy_in) > 1:
            if run.entropy_coef:
                parts.append(f"H {run.entropy_in} {run.entropy_coef:g}")
            else:
                parts.append("no bonus")
        if len(self.lags) > 1 or self.lags != (0,):
            parts.append(f"lag≤{run.max_lag} {run.stale_rollouts}" if run.max_lag else "lag 0")
        return " ".join(parts)

    def arms_axes(self) -> list[str]:
        """The swept settings beside the estimator."""
        axes = []
        if self.group_sizes is not None and len(self.group_sizes) > 1:
            axes.append("group_size")
        if len(self.betas) > 1:
            axes.append("beta")
        if len(self.entropy_coefs) > 1 or len(self.entropy_in) > 1:
            axes.append("entropy_coef")
        if len(self.lags) > 1 or self.lags != (0,):
            axes.append("max_lag")
        return axes

    @property
    def num_runs(self) -> int:
        return len(self.arms()) * len(self.seeds)


def experiment_config(
    name: str = "compare", *, regime: str = "transient", quick: bool = False, **overrides: Any
) -> ExperimentConfig:
    """The default configuration of an experiment in a regime, with ``overrides``.

    ``compare``: GRPO, Dr, budget and RLOO at the default β = 0.001. ``kappa``: Dr and
    budget at β = 0 (no KL, κ = ∞) and κ = 1/β = 1000, 100, 33, 10, 3.3. ``entropy``:
    GRPO and budget without and with an entropy term (0.01, 0.03, 0.1) in the loss or
    in the reward, for the first half of training. ``kl``: every lab estimator with
    the KL off (β = 0), at verl's default β = 0.001 and at β = 0.01. ``group-size``:
    GRPO, Dr and budget at G = 4, 8, 16, 32 (B = 32 prompts a step). ``difficulty``:
    the difficulty-aware advantages side by side, each at its defaults (``DIFFICULTY``).
    ``staleness``: GRPO and budget with rollouts up to 0, 2 or 4 updates old (async
    sampling), each stale rule at ``max_staleness=1``.
    ``regime``
    (``transient`` or ``persistent``, see ``REGIMES``) sets the task, the horizon and
    the reported horizons. ``quick=True`` shrinks everything to a few seconds (for
    tests and smoke runs).

    Examples:
        >>> from advbudget.lab.sim import experiment_config
        >>> config = experiment_config("kappa", quick=True, estimators=("dr",))
        >>> [label for label, _ in config.arms()]  # doctest: +NORMALIZE_WHITESPACE
        ['dr κ=∞', 'dr κ=1000', 'dr κ=100', 'dr κ=33.3', 'dr κ=10', 'dr κ=3.33']
        >>> experiment_config(regime="persistent").task.hard_types
        8
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment: expected one of {EXPERIMENTS}, got {name!r}")
    if regime not in REGIMES:
        raise ValueError(f"regime: expected one of {tuple(REGIMES)}, got {regime!r}")
    preset = REGIMES[regime]
    defaults: dict[str, Any] = {
        "name": name,
        "regime": regime,
        "task": preset.task,
        "steps": preset.steps,
        "horizons": preset.horizons,
    }
    if name == "kappa":
        defaults.update(estimators=("dr", "budget"), betas=(0.0, 0.001, 0.01, 0.03, 0.1, 0.3))
    elif name == "entropy":
        defaults.update(
            estimators=("grpo", "budget"),
            entropy_coefs=(0.0, 0.01, 0.03, 0.1),
            entropy_in=("loss", "reward"),
        )
    elif name == "kl":
        defaults.update(betas=(0.0, 0.001, 0.01))
    elif name == "group-size":
        defaults.update(estimators=("grpo", "dr", "budget"), group_sizes=(4, 8, 16, 32))
    elif name == "difficulty":
        defaults.update(estimators=DIFFICULTY)
    elif name == "staleness":
        defaults.update(
            estimators=("grpo", "budget"),
            lags=(0, 2, 4),
            stale_rules=("keep", "baseline_only", "drop", "drop_group"),
            max_staleness=1,
        )
    if quick:
        defaults.update(
            seeds=(0, 1),
            steps=40,
            horizons=(20, 40),
            task=replace(preset.task, train_prompts=512, validation_prompts=256),
        )
    defaults.update(overrides)
    steps = defaults["steps"]
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
    """What :func:`run_experiment` returns: the config, one :class:`ArmResult` per arm,
    and the task's reference points (fractions): the oracle (best strategy on every
    prompt), the policy-class ceiling and the hard-type accuracy that counts as escape."""

    config: ExperimentConfig
    arms: list[ArmResult]
    oracle_accuracy: float
    escape_level: float
    ceiling: Ceiling


def run_experiment(
    config: ExperimentConfig,
    *,
    on_step: Callable[[int], None] | None = None,
    workers: int = 1,
) -> ExperimentResult:
    """Train every arm with every seed and summarise over seeds.

    ``on_step`` is called after each training step (for a progress bar; with
    ``workers > 1`` it is called for a run's steps when the run ends). ``workers``
    processes train runs side by side; every run is seeded, so the result is the same.

    Examples:
        >>> from advbudget.lab.sim import experiment_config, run_experiment
        >>> config = experiment_config("compare", quick=True, estimators=("dr", "budget"),
        ...                            steps=5)
        >>> result = run_experiment(config)
        >>> [arm.label for arm in result.arms], result.arms[0].curves("accuracy").shape
        (['dr', 'budget'], (2, 6))
    """
    task = make_task(config.task)
    ceiling = task_ceiling(config.task)
    best_possible = task.validation.success.max(axis=1)
    has_hard = task.validation.hard.any()
    escape_level = ESCAPE_FRACTION * ceiling.bound_accuracy_hard if has_hard else math.nan
    jobs = [
        (label, replace(run, seed=seed), config.task)
        for label, run in config.arms()
        for seed in config.seeds
    ]
    histories = run_many([(run, task_config) for _, run, task_config in jobs], workers, on_step)
    arms = []
    for index, (label, run) in enumerate(config.arms()):
        mine = histories[index * len(config.seeds) : (index + 1) * len(config.seeds)]
        summary = summarize_runs(mine, escape_level=escape_level, horizons=config.report_horizons)
        arms.append(ArmResult(label, run, mine, summary))
    return ExperimentResult(config, arms, float(best_possible.mean()), escape_level, ceiling)


def run_many(
    jobs: list[tuple[RunConfig, TaskConfig]],
    workers: int = 1,
    on_step: Callable[[int], None] | None = None,
) -> list[dict[str, Float]]:
    """Train ``(run, task)`` pairs, in ``workers`` processes when more than 1; in order."""
    int_at_least("workers", workers, 1)
    if workers == 1 or len(jobs) <= 1:
        return [train(run, cached_task(task), on_step=on_step) for run, task in jobs]
    results: list[dict[str, Float] | None] = [None] * len(jobs)
    # The pool's context manager terminates the workers on any exception (Ctrl-C too).
    # spawn, not fork: a fork of a process that has imported jax or torch (their threads)
    # can deadlock, and the lab must run beside them.
    with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
        for index, history in pool.imap_unordered(_train_job, enumerate(jobs)):
            results[index] = history
            if on_step is not None:
                for step in range(1, jobs[index][0].steps + 1):
                    on_step(step)
    return [history for history in results if history is not None]


def _train_job(
    job: tuple[int, tuple[RunConfig, TaskConfig]],
) -> tuple[int, dict[str, Float]]:
    index, (run, task) = job
    return index, train(run, cached_task(task))


@functools.lru_cache(maxsize=8)
def cached_task(config: TaskConfig) -> Task:
    """:func:`make_task`, drawn once per process and task configuration."""
    return make_task(config)


def summarize_runs(
    histories: list[dict[str, Float]],
    *,
    escape_level: float = math.nan,
    horizons: tuple[int, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Per-seed numbers of each run (``SUMMARY_KEYS``) and their mean and spread over seeds.

    Each key maps to ``{"mean", "std", "min", "max", "count", "per_seed"}`` over the
    seeds where the number exists (``count`` of them): ``escape_step``, the first step at
    which the accuracy on hard types reaches ``escape_level``, is NaN for a seed that
    never gets there. ``accuracy_at_<h>`` is the accuracy at step ``h`` (the last
    evaluated step at or before it) for each of ``horizons``. ``std`` is the sample
    standard deviation over seeds (0 with one).

    Examples:
        >>> from advbudget.lab.sim import RunConfig, TaskConfig, make_task, train, summarize_runs
        >>> task = make_task(TaskConfig(train_prompts=64, validation_prompts=64))
        >>> runs = [train(RunConfig(steps=4, prompts_per_step=8, seed=s), task) for s in (0, 1)]
        >>> summary = summarize_runs(runs, horizons=(2, 4))
        >>> sorted(summary["final_accuracy"])
        ['count', 'max', 'mean', 'min', 'per_seed', 'std']
        >>> summary["accuracy_at_4"]["per_seed"] == summary["final_accuracy"]["per_seed"]
        True
    """
    keys = SUMMARY_KEYS + tuple(f"accuracy_at_{h}" for h in horizons)
    per_seed: dict[str, list[float]] = {key: [] for key in keys}
    for history in histories:
        kappa_means = history["kappa_eff_mean"][1:]
        kappa_means = kappa_means[np.isfinite(kappa_means)]
        numbers = {
            "final_accuracy": history["accuracy"][-1],
            "best_accuracy": np.nanmax(history["accuracy"]),
            "escape_step": _first_step_at(history["accuracy_hard"], escape_level),
            "final_hard_types_discovered": history["hard_types_discovered"][-1],
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
        for horizon in horizons:
            numbers[f"accuracy_at_{horizon}"] = _last_value_at(history["accuracy"], horizon)
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
    reached = values >= level  # NaN (a step not evaluated) never counts
    return float(np.argmax(reached)) if math.isfinite(level) and reached.any() else math.nan


def _last_value_at(values: Float, step: int) -> float:
    known = np.flatnonzero(np.isfinite(values[: step + 1]))
    return float(values[known[-1]]) if known.size else math.nan


def to_json(result: ExperimentResult, *, curve_stride: int = 1) -> dict[str, Any]:
    """Everything about an experiment as JSON-ready data (NaN becomes None).

    The curves keep every ``curve_stride``-th step and the last (``curve_steps`` lists
    them; 0 keeps no curves); the summaries are computed from every step whatever the
    stride.

    Examples:
        >>> from advbudget.lab.sim import experiment_config, run_experiment, to_json
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=2)
        >>> data = to_json(run_experiment(config))
        >>> sorted(data)  # doctest: +NORMALIZE_WHITESPACE
        ['arms', 'ceiling', 'config', 'curve_steps', 'escape_level', 'oracle_accuracy',
         'regime']
        >>> sorted(data["arms"][0])
        ['curves', 'label', 'run', 'summary']
    """
    int_at_least("curve_stride", curve_stride, 0)
    steps = result.config.steps
    kept = sorted(set(range(0, steps + 1, curve_stride)) | {steps}) if curve_stride else []
    arms = []
    for arm in result.arms:
        curves = (
            {key: [_finite_or_none(row[kept]) for row in arm.curves(key)] for key in HISTORY_KEYS}
            if kept
            else {}
        )
        run = asdict(arm.run)
        run.pop("seed")
        arms.append({"label": arm.label, "run": run, "summary": arm.summary, "curves": curves})
    ceiling = result.ceiling
    return {
        "config": asdict(result.config),
        "regime": result.config.regime,
        "oracle_accuracy": result.oracle_accuracy,
        "ceiling": {
            "accuracy": ceiling.accuracy,
            "accuracy_routine": ceiling.accuracy_routine,
            "accuracy_hard": ceiling.accuracy_hard,
            "hard_types_discovered": ceiling.hard_types_discovered,
            "bound_accuracy": ceiling.bound_accuracy,
            "bound_accuracy_hard": ceiling.bound_accuracy_hard,
        },
        "escape_level": result.escape_level,
        "curve_steps": kept,
        "arms": arms,
    }


def _finite_or_none(values: Float) -> list[float | None]:
    # Five significant digits are beyond what the seeds resolve and keep the file small.
    return [float(f"{v:.5g}") if math.isfinite(v) else None for v in values]


def write_json(
    result: ExperimentResult,
    path: str | Path,
    *,
    curve_stride: int = 1,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write :func:`to_json` of ``result`` (and the ``extra`` keys) to ``path`` (directories
    are created).

    Examples:
        >>> import json, tempfile, pathlib
        >>> from advbudget.lab.sim import experiment_config, run_experiment, write_json
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=2)
        >>> path = write_json(run_experiment(config), pathlib.Path(tempfile.mkdtemp()) / "r.json")
        >>> json.loads(path.read_text())["config"]["estimators"]
        ['dr']
    """
    data = {**to_json(result, curve_stride=curve_stride), **(extra or {})}
    return _write_compact_json(data, path)


def _write_compact_json(data: Any, path: str | Path) -> Path:
    """``data`` as compact JSON at ``path`` (folders created), non-finite floats as null."""
    return atomic_write(path, json.dumps(_sanitize(data), separators=(",", ":"), allow_nan=False))


def _sanitize(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _sanitize(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(item) for item in value]
    return value
