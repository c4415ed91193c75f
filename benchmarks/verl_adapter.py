"""Timing benchmark of the verl adapter against verl's own ``grpo`` and ``grpo_vectorized``.

One run times, on the same verl ``DataProto`` (N responses in groups of G = 8, verl's
layout: each prompt's uuid4 uid repeated on adjacent rows; the reward on the last valid
token of ``token_level_rewards`` [N, L]; float32, CPU):

- verl's ``grpo`` (``core_algos.compute_grpo_outcome_advantage``: a Python loop over rows);
- verl's ``grpo_vectorized`` (registered estimator; ``np.unique`` on the uid strings);
- our ``advbudget_grpo`` (the same advantages) and ``reward_budget``, called as verl calls a
  registered estimator.

It checks once that verl's two and ``advbudget_grpo`` agree, then writes
``results/verl.json`` and ``results/verl.md`` and prints the table. Targets (issue 4): at
N = 65,536, at least 100x faster than ``grpo`` and 3x faster than ``grpo_vectorized``;
reported, never enforced: only a disagreement exits non-zero.

Run in the verl environment: ``.venv-verl/bin/python benchmarks/verl_adapter.py`` (``--quick`` for
a smoke run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import write_atomic

_HERE = Path(__file__).resolve().parent

GROUP_SIZE = 8
DEFAULT_SIZES = (4_096, 65_536)
DEFAULT_LENGTHS = (1, 512)
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "verl.json"
TARGET_N = 65_536
TARGET_VS_GRPO = 100.0
TARGET_VS_VECTORIZED = 3.0
AGREE_ATOL = 1e-4
MIN_TIMED_SECONDS = 0.25
MAX_REPEATS = 200

P_GRPO = "verl grpo (Python loop)"
P_VECTORIZED = "verl grpo_vectorized"
P_OURS_GRPO = "advbudget_grpo"
P_OURS_BUDGET = "reward_budget"
PATHS = (P_GRPO, P_VECTORIZED, P_OURS_GRPO, P_OURS_BUDGET)
# (name, numerator, denominator, target): a speed-up, so it must reach the target.
RATIOS = (
    ("verl grpo / advbudget_grpo", P_GRPO, P_OURS_GRPO, TARGET_VS_GRPO),
    ("verl grpo / reward_budget", P_GRPO, P_OURS_BUDGET, TARGET_VS_GRPO),
    ("verl grpo_vectorized / advbudget_grpo", P_VECTORIZED, P_OURS_GRPO, TARGET_VS_VECTORIZED),
    ("verl grpo_vectorized / reward_budget", P_VECTORIZED, P_OURS_BUDGET, TARGET_VS_VECTORIZED),
)


def import_verl() -> tuple[Any, Any]:
    """verl's ``core_algos`` and the adapter (registered), with verl's import warnings off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo import core_algos

        import advbudget.adapters.verl as adapter
    return core_algos, adapter


def make_batch(n: int, length: int, seed: int) -> Any:
    """A ``DataProto`` as verl builds it (see the module docstring)."""
    import torch
    from verl import DataProto

    rng = np.random.default_rng(seed)
    uids = np.repeat(
        np.array([str(uuid.UUID(int=int(u))) for u in rng.integers(1, 2**62, n // GROUP_SIZE)]),
        GROUP_SIZE,
    ).astype(object)
    lengths = rng.integers(1, length + 1, n)
    rewards = torch.zeros(n, length)
    rewards[torch.arange(n), torch.from_numpy(lengths - 1)] = torch.from_numpy(
        rng.integers(0, 2, n).astype(np.float32)
    )
    mask = (torch.arange(length)[None, :] < torch.from_numpy(lengths)[:, None]).to(torch.int64)
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": uids},
    )


def path_calls(batch: Any, core_algos: Any, adapter: Any) -> dict[str, Callable[[], Any]]:
    from omegaconf import OmegaConf

    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    kwargs = {
        "token_level_rewards": batch.batch["token_level_rewards"],
        "response_mask": batch.batch["response_mask"],
        "index": batch.non_tensor_batch["uid"],
    }
    vectorized = core_algos.get_adv_estimator_fn("grpo_vectorized")
    return {
        P_GRPO: lambda: core_algos.compute_grpo_outcome_advantage(**kwargs)[0],
        P_VECTORIZED: lambda: vectorized(**kwargs, config=config)[0],
        P_OURS_GRPO: lambda: adapter.estimator_function("advbudget_grpo")(**kwargs, config=config)[
            0
        ],
        P_OURS_BUDGET: lambda: adapter.estimator_function("reward_budget")(**kwargs, config=config)[
            0
        ],
    }


def check_agreement(calls: dict[str, Callable[[], Any]]) -> list[str]:
    import torch

    reference = calls[P_GRPO]()
    problems = []
    for path in (P_VECTORIZED, P_OURS_GRPO):
        got = calls[path]()
        if not torch.allclose(got, reference, atol=AGREE_ATOL, rtol=0):
            diff = float((got - reference).abs().max())
            problems.append(f"{path} differs from {P_GRPO} by up to {diff:.3g}")
    return problems


def time_call(run: Callable[[], Any], repeats: int) -> list[float]:
    """Seconds per call after one warm-up; fast calls repeat until MIN_TIMED_SECONDS."""
    start = time.perf_counter()
    run()
    per_call = time.perf_counter() - start
    if per_call > 0:
        repeats = max(repeats, min(MAX_REPEATS, int(MIN_TIMED_SECONDS / per_call) + 1))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds


def compute_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    timed = {(r["path"], r["n"], r["length"]): r["median_ms"] for r in results}
    ratios = []
    for n, length in sorted({(r["n"], r["length"]) for r in results}):
        for name, top, bottom, target in RATIOS:
            if (top, n, length) not in timed or (bottom, n, length) not in timed:
                continue
            ratio = timed[(top, n, length)] / timed[(bottom, n, length)]
            ratios.append(
                {
                    "ratio": name,
                    "n": n,
                    "length": length,
                    "value": ratio,
                    "target": target,
                    "meets_target": ratio >= target if n == TARGET_N else None,
                }
            )
    return ratios


def markdown_report(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    lines = [
        "# advbudget verl benchmark",
        "",
        f"verl {machine['verl']}, torch {machine['torch']} ({machine['torch_threads']} threads), "
        f"{machine['processor']}, {machine['cpu_count']} CPUs, {machine['date']}. "
        f"Groups of {GROUP_SIZE}, uuid4 uids in verl's layout, float32, CPU.",
        "",
        "## Median ms per call",
        "",
        "| N | L | " + " | ".join(PATHS) + " |",
        "|---:|---:|" + "---:|" * len(PATHS),
    ]
    timed = {(r["path"], r["n"], r["length"]): r["median_ms"] for r in payload["results"]}
    for n, length in sorted({(r["n"], r["length"]) for r in payload["results"]}):
        cells = [f"{timed[(p, n, length)]:.3f}" if (p, n, length) in timed else "-" for p in PATHS]
        lines.append(f"| {n:,} | {length} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Speed-ups (targets at N = {TARGET_N:,})",
        "",
        "| ratio | N | L | value | target | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in payload["ratios"]:
        met = "-" if r["meets_target"] is None else ("yes" if r["meets_target"] else "no")
        lines.append(
            f"| {r['ratio']} | {r['n']:,} | {r['length']} | {r['value']:.1f}x | "
            f"{r['target']:.0f}x | {met} |"
        )
    return "\n".join(lines) + "\n"


def machine_info() -> dict[str, Any]:
    import torch
    import verl

    import advbudget

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "verl": verl.__version__,
        "advbudget": advbudget.__version__,
    }


def parse_ints(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=parse_ints, default=list(DEFAULT_SIZES))
    parser.add_argument("--lengths", type=parse_ints, default=list(DEFAULT_LENGTHS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--quick", action="store_true", help="N = 512, L = 1 and 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.lengths, args.repeats = [512], [1, 8], 1
    bad = [n for n in args.sizes if n % GROUP_SIZE]
    if bad:
        parser.error(f"--sizes: expected multiples of {GROUP_SIZE}, got {bad}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    core_algos, adapter = import_verl()
    results, problems = [], []
    for n in args.sizes:
        for length in args.lengths:
            calls = path_calls(make_batch(n, length, args.seed), core_algos, adapter)
            problems += [f"N={n}, L={length}: {p}" for p in check_agreement(calls)]
            for path, run in calls.items():
                seconds = time_call(run, args.repeats)
                results.append(
                    {
                        "path": path,
                        "n": n,
                        "length": length,
                        "median_ms": statistics.median(seconds) * 1e3,
                        "repeats": len(seconds),
                    }
                )
                print(f"N={n:>7,} L={length:>4} {path:<28} {results[-1]['median_ms']:10.3f} ms")
    payload = {
        "machine": machine_info(),
        "group_size": GROUP_SIZE,
        "results": results,
        "ratios": compute_ratios(results),
        "problems": problems,
    }
    write_atomic(args.output, json.dumps(payload, indent=2) + "\n")
    report = markdown_report(payload)
    write_atomic(args.output.with_suffix(".md"), report)
    print(report)
    for problem in problems:
        print(f"DISAGREEMENT: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
