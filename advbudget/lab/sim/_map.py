"""The map of where budgeting helps: budget − GRPO and budget − Dr over task structures.

Each cell is a task structure: ``n`` hard types among ``T`` equally frequent types, so
each hard type is a fraction ``f = 1 / T`` of the prompts and ``T − n`` types are
routine. Seed ``s`` draws its own task (``task_seed = s``) and trains every estimator
on it, so the differences are paired: per seed, then mean ± standard error over seeds.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from advbudget.checks import int_at_least

from ._ceiling import BOUND_ITERATIONS, CEILING_ITERATIONS, policy_ceiling
from ._experiment import ESCAPE_FRACTION, _write_compact_json, cached_task
from ._task import TaskConfig
from ._train import RunConfig, train

MAP_REFERENCE = "budget"


@dataclass(frozen=True)
class MapConfig:
    """The grid, the seeds and the training settings of the map.

    Attributes:
        hard_types: the rows: numbers of hard types.
        total_types: the columns: ``T``, the number of equally frequent types (each hard
            type is ``1 / T`` of the prompts); ``T`` must exceed every ``hard_types``.
        estimators: the first is compared with each of the others.
        seeds: training seeds; seed ``s`` also draws the task (``task_seed = s``).
        steps: training horizon (the final accuracy is read there).
        eval_every: held-out evaluation every this many steps (and at the last).
        ceiling_iterations, bound_iterations: Adam iterations of each task's ceiling
            and held-out bound (:func:`advbudget.lab.sim.policy_ceiling`).
        task: every other task setting (``routine_types``, ``hard_types``,
            ``hard_share`` and ``task_seed`` are set per cell and seed).
        run: every other training setting (estimator, seed, steps are set per run).
    """

    hard_types: tuple[int, ...] = (1, 2, 4, 8)
    total_types: tuple[int, ...] = (9, 13, 19, 27)
    estimators: tuple[str, ...] = ("budget", "grpo", "dr")
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    steps: int = 2000
    eval_every: int = 10
    ceiling_iterations: int = CEILING_ITERATIONS
    bound_iterations: int = BOUND_ITERATIONS
    task: TaskConfig = field(default_factory=TaskConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        for name in ("hard_types", "total_types", "estimators", "seeds"):
            values = getattr(self, name)
            if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)):
                raise TypeError(f"{name}: expected a tuple of values, got {values!r}")
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{name}: expected distinct values, got {tuple(values)!r}")
        if len(self.estimators) < 2:
            raise ValueError(
                f"estimators: expected budget and at least one other, got {self.estimators!r}"
            )
        for hard in self.hard_types:
            if isinstance(hard, bool) or not isinstance(hard, int) or hard < 1:
                raise ValueError(f"hard_types: expected ints >= 1, got {self.hard_types!r}")
        if min(self.total_types) <= max(self.hard_types):
            raise ValueError(
                f"total_types: expected every value > the most hard types "
                f"({max(self.hard_types)}), got {self.total_types!r}"
            )
        for run in self.runs_of_one_cell(self.hard_types[0], self.total_types[0]):
            del run  # constructing each RunConfig checks its values

    def cell_task(self, hard_types: int, total_types: int, seed: int) -> TaskConfig:
        """The task of one cell for one seed."""
        return replace(
            self.task,
            routine_types=total_types - hard_types,
            hard_types=hard_types,
            hard_share=None,
            task_seed=seed,
        )

    def runs_of_one_cell(self, hard_types: int, total_types: int) -> list[RunConfig]:
        del hard_types, total_types  # the same runs in every cell
        return [
            replace(
                self.run, estimator=name, seed=seed, steps=self.steps, eval_every=self.eval_every
            )
            for name in self.estimators
            for seed in self.seeds
        ]

    @property
    def num_runs(self) -> int:
        return len(self.hard_types) * len(self.total_types) * len(self.estimators) * len(self.seeds)


def map_config(*, quick: bool = False, **overrides: Any) -> MapConfig:
    """The map's default configuration (``quick``: a few seconds, for tests).

    Examples:
        >>> from advbudget.lab.sim import map_config
        >>> config = map_config(quick=True)
        >>> config.num_runs
        16
    """
    defaults: dict[str, Any] = {}
    if quick:
        defaults.update(
            hard_types=(1, 2),
            total_types=(4, 8),
            estimators=("budget", "grpo"),
            seeds=(0, 1),
            steps=30,
            ceiling_iterations=100,
            bound_iterations=100,
            task=TaskConfig(train_prompts=256, validation_prompts=128),
        )
    defaults.update(overrides)
    return MapConfig(**defaults)


def run_map(
    config: MapConfig, *, workers: int = 1, on_run: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Run every cell × estimator × seed and the ceiling of every task; JSON-ready result.

    ``result["cells"]`` holds one entry per (hard types, total types) with, per
    estimator, the per-seed final accuracy, hard types discovered and escape step, the
    per-seed ceiling and oracle, and for each other estimator the paired difference
    ``budget − other`` (mean, standard error, seeds budget won).

    Examples:
        >>> from advbudget.lab.sim import map_config, run_map
        >>> result = run_map(map_config(quick=True))
        >>> len(result["cells"]), sorted(result["cells"][0]["difference"])
        (4, ['grpo'])
    """
    int_at_least("workers", workers, 1)
    jobs: list[tuple[str, Any, TaskConfig]] = []
    for hard in config.hard_types:
        for total in config.total_types:
            for seed in config.seeds:
                task = config.cell_task(hard, total, seed)
                iterations = (config.ceiling_iterations, config.bound_iterations)
                jobs.append(("ceiling", iterations, task))
                for name in config.estimators:
                    run = replace(
                        config.run,
                        estimator=name,
                        seed=seed,
                        steps=config.steps,
                        eval_every=config.eval_every,
                    )
                    jobs.append(("train", run, task))
    outputs: list[Any] = [None] * len(jobs)
    if workers == 1:
        for index, job in enumerate(jobs):
            outputs[index] = _map_job((index, job))[1]
            if on_run is not None and job[0] == "train":
                on_run()
    else:
        # spawn, not fork: a fork of a process that has imported jax or torch (their threads)
        # can deadlock, and the lab must run beside them.
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for index, numbers in pool.imap_unordered(_map_job, enumerate(jobs)):
                outputs[index] = numbers
                if on_run is not None and jobs[index][0] == "train":
                    on_run()
    by_job = {
        (job[0], job[1].estimator if job[0] == "train" else job[1], job[2]): out
        for job, out in zip(jobs, outputs, strict=True)
    }
    cells = []
    for hard in config.hard_types:
        for total in config.total_types:
            tasks = [config.cell_task(hard, total, seed) for seed in config.seeds]
            iterations = (config.ceiling_iterations, config.bound_iterations)
            ceilings = [by_job[("ceiling", iterations, t)] for t in tasks]
            arms = {
                name: _collect([by_job[("train", name, t)] for t in tasks], ceilings)
                for name in config.estimators
            }
            reference = np.array(arms[config.estimators[0]]["final_accuracy"])
            difference = {}
            for name in config.estimators[1:]:
                delta = reference - np.array(arms[name]["final_accuracy"])
                difference[name] = {
                    "mean": float(delta.mean()),
                    "se": float(delta.std(ddof=1) / math.sqrt(delta.size))
                    if delta.size > 1
                    else 0.0,
                    "wins": int((delta > 0).sum()),
                    "per_seed": [float(d) for d in delta],
                }
            cells.append(
                {
                    "hard_types": hard,
                    "total_types": total,
                    "routine_types": total - hard,
                    "type_frequency": 1 / total,
                    "ceiling": [c["accuracy"] for c in ceilings],
                    "oracle": [c["oracle"] for c in ceilings],
                    "arms": arms,
                    "difference": difference,
                }
            )
    return {"experiment": "map", "config": asdict(config), "cells": cells}


def _standard_error(values: Any) -> float:
    return float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0


def _collect(runs: list[Any], ceilings: list[Any]) -> dict[str, list[float]]:
    """Per-seed numbers of one estimator in one cell (seed i ran on task i)."""
    escapes = []
    for run, ceiling in zip(runs, ceilings, strict=True):
        # Escape: hard-type accuracy reaches half of the best any policy gets there.
        level = ESCAPE_FRACTION * ceiling["bound_accuracy_hard"]
        reached = [
            step
            for step, value in zip(run["hard_steps"], run["hard_curve"], strict=True)
            if value >= level
        ]
        escapes.append(float(reached[0]) if reached else math.nan)
    return {
        "final_accuracy": [run["final_accuracy"] for run in runs],
        "hard_types_discovered": [run["hard_types_discovered"] for run in runs],
        "escape_step": escapes,
    }


def _map_job(job: tuple[int, tuple[str, Any, TaskConfig]]) -> tuple[int, dict[str, Any]]:
    index, (kind, run, task_config) = job
    task = cached_task(task_config)
    if kind == "ceiling":
        ceiling = policy_ceiling(task, iterations=run[0], bound_iterations=run[1])
        oracle = float(task.validation.success.max(axis=1).mean())
        return index, {
            "accuracy": ceiling.accuracy,
            "accuracy_hard": ceiling.accuracy_hard,
            "bound_accuracy_hard": ceiling.bound_accuracy_hard,
            "oracle": oracle,
        }
    history = train(run, task)
    hard_curve = history["accuracy_hard"]
    evaluated = np.flatnonzero(np.isfinite(hard_curve))
    return index, {
        "final_accuracy": float(history["accuracy"][-1]),
        "hard_types_discovered": float(history["hard_types_discovered"][-1]),
        # The escape step needs the task's ceiling (another job): keep the curve.
        "hard_steps": evaluated.tolist(),
        "hard_curve": hard_curve[evaluated].tolist(),
    }


def write_map_json(result: dict[str, Any], path: str | Path) -> Path:
    """Write a :func:`run_map` result to ``path`` (folders are created; NaN as null).

    Examples:
        >>> import json, tempfile, pathlib
        >>> from advbudget.lab.sim import write_map_json
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "m.json"
        >>> path = write_map_json({"cells": [0.5, float("nan")]}, target)
        >>> json.loads(path.read_text())
        {'cells': [0.5, None]}
    """
    return _write_compact_json(result, path)
