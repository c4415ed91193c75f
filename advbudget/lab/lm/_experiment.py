"""Every estimator × seed from one warm start; summaries over seeds and paired differences."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from advbudget._io import atomic_path, atomic_write
from advbudget.checks import int_at_least

from ._config import LMConfig
from ._task import TIERS

# Per-step group fractions (averaged over a run) and the prompt ledger (its last value).
DEAD_GROUP_KEYS = ("skipped_group_fraction", "unsolved_group_fraction", "solved_group_fraction")
LEDGER_KEYS = ("never_solved_prompt_fraction", "always_solved_prompt_fraction")
FINAL_KEYS = tuple(f"{tier}/{metric}" for tier in TIERS for metric in ("avg", "pass"))


def mean_se(values: Sequence[float]) -> dict[str, float]:
    """Mean and standard error (sample std / √n; 0 for one value) of ``values``.

    Examples:
        >>> from advbudget.lab.lm._experiment import mean_se
        >>> mean_se([1.0, 2.0, 3.0])
        {'mean': 2.0, 'se': 0.5773502691896257, 'n': 3}
    """
    n = len(values)
    if n == 0:
        raise ValueError("values: expected at least one value, got none")
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "se": 0.0, "n": 1}
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": mean, "se": math.sqrt(variance / n), "n": n}


def final_scores(run: dict[str, Any], samples: int) -> dict[str, float]:
    """The test split's avg@n and pass@n per tier of one run, keyed ``routine/avg``..."""
    return {
        f"{tier}/{metric}": run["test"][f"{tier}/{metric}@{samples}"]
        for tier in TIERS
        for metric in ("avg", "pass")
    }


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def summarize(config: LMConfig, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per estimator: final test scores (mean ± SE over seeds), training means of the
    skipped fraction and κ_eff, final entropy and KL; and each estimator's paired
    difference from ``budget`` (same seed, same prompts), mean ± SE."""
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        by_arm.setdefault(run["estimator"], {})[run["seed"]] = run
    arms: dict[str, Any] = {}
    for estimator, seeded in by_arm.items():
        scores = [final_scores(run, config.eval_samples) for run in seeded.values()]
        summary = {key: mean_se([s[key] for s in scores]) for key in FINAL_KEYS}
        for name in (*DEAD_GROUP_KEYS, "kappa_eff", "reward"):
            per_seed = [_finite(run["history"].get(name, [])) for run in seeded.values()]
            if any(per_seed):  # runs from before a key existed have none
                summary[f"{name}_mean"] = mean_se([sum(v) / len(v) for v in per_seed if v])
        # The ledger's last values: over the prompts seen twice or more in the whole run.
        for name in LEDGER_KEYS:
            last = [_finite(run["history"].get(name, [])) for run in seeded.values()]
            if any(last):
                summary[f"final_{name}"] = mean_se([v[-1] for v in last if v])
        for name in ("entropy", "kl_to_warm_start"):
            summary[f"final_{name}"] = mean_se([run["test"][name] for run in seeded.values()])
        summary["seconds"] = mean_se([run["seconds"] for run in seeded.values()])
        arms[estimator] = summary
    differences: dict[str, Any] = {}
    if "budget" in by_arm:
        for estimator, seeded in by_arm.items():
            if estimator == "budget":
                continue
            common = sorted(set(seeded) & set(by_arm["budget"]))
            if not common:
                continue
            differences[f"budget - {estimator}"] = {
                key: mean_se(
                    [
                        final_scores(by_arm["budget"][s], config.eval_samples)[key]
                        - final_scores(seeded[s], config.eval_samples)[key]
                        for s in common
                    ]
                )
                for key in FINAL_KEYS
            }
    warm = [final_scores({"test": r["test_warm_start"]}, config.eval_samples) for r in runs]
    return {
        "arms": arms,
        "paired_differences": differences,
        "warm_start_test": {key: mean_se([w[key] for w in warm]) for key in FINAL_KEYS},
    }


def machine() -> dict[str, Any]:
    """:func:`advbudget.lab._machine.machine_info` with torch imported (its threads, CPU
    capability and GPU): the numbers of this experiment depend on all of it."""
    import torch  # noqa: F401

    from .._machine import machine_info

    return machine_info()


def run_experiment(
    config: LMConfig,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = print,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """The warm start (cached), then every estimator × seed; returns the full record.

    ``progress(label, total)`` may return a per-step callback for each run (a bar).
    ``workers`` > 1 trains that many runs side by side in their own processes; each run
    is seeded on its own, so the records are those of ``workers=1`` up to float
    non-associativity of parallel kernels.
    """
    from ._model import warm_start

    int_at_least("workers", workers, 1)
    started = time.perf_counter()
    folder, warm = warm_start(config, cache_dir, log=log)
    # Seeds outermost: a run cut short still leaves whole estimator pairs behind it.
    jobs = [(estimator, seed) for seed in config.seeds for estimator in config.estimators]
    if workers == 1:
        from ._rl import run_rl

        runs = []
        for estimator, seed in jobs:
            on_step = progress(f"{estimator} seed {seed}", config.steps) if progress else None
            runs.append(run_rl(config, folder, estimator, seed, on_step=on_step))
    else:
        runs = _run_in_processes(config, folder, jobs, workers, progress)
    return {
        "config": config.to_dict(),
        "warm_start": warm,
        "runs": runs,
        "summary": summarize(config, runs),
        "seconds": time.perf_counter() - started,
        "workers": workers,
        "machine": machine(),
    }


def _worker(
    config: LMConfig, folder: Path, estimator: str, seed: int, threads: int, queue: Any
) -> dict[str, Any]:
    import warnings

    import torch

    from ._rl import run_rl

    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", message=".*is deprecated and will be removed in v6")
    label = f"{estimator} seed {seed}"
    return run_rl(config, folder, estimator, seed, on_step=lambda s: queue.put((label, s)))


def _run_in_processes(
    config: LMConfig,
    folder: Path,
    jobs: list[tuple[str, int]],
    workers: int,
    progress: Callable[[str, int], Callable[[int], None]] | None,
) -> list[dict[str, Any]]:
    import multiprocessing
    import queue as queues
    from concurrent.futures import ProcessPoolExecutor

    import torch

    context = multiprocessing.get_context("spawn")  # CUDA and forked torch do not mix
    threads = torch.get_num_threads()
    bars = {}
    if progress:
        bars = {f"{e} seed {s}": progress(f"{e} seed {s}", config.steps) for e, s in jobs}
    with context.Manager() as manager, ProcessPoolExecutor(workers, mp_context=context) as pool:
        updates = manager.Queue()
        futures = [
            pool.submit(_worker, config, folder, estimator, seed, threads, updates)
            for estimator, seed in jobs
        ]
        while not all(f.done() for f in futures):
            try:
                label, step = updates.get(timeout=0.5)
            except queues.Empty:
                continue
            if label in bars:
                bars[label](step)
        return [f.result() for f in futures]  # a failed run raises here, with its error


def write_outputs(record: dict[str, Any], output_dir: Path) -> list[Path]:
    """``lm.json`` (everything but TRL's raw logs) and ``lm_trl_logs.json.gz`` (each run's
    ``trainer.state.log_history`` as TRL logged it, gzipped: ~20 kB per step)."""
    import gzip

    trl_logs = {f"{r['estimator']}/seed{r['seed']}": r["log_history"] for r in record["runs"]}
    runs = [{k: v for k, v in r.items() if k != "log_history"} for r in record["runs"]]
    slim = {**record, "runs": runs}
    paths = [output_dir / "lm.json", output_dir / "lm_trl_logs.json.gz"]
    atomic_write(paths[0], json.dumps(slim, separators=(",", ":")))
    with atomic_path(paths[1]) as partial, gzip.open(partial, "wt", encoding="utf-8") as file:
        json.dump(trl_logs, file, separators=(",", ":"))
    return paths
