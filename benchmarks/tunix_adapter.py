"""Timing benchmark of the tunix adapter's estimators against tunix's own ``grpo`` advantage.

tunix's GRPO learner calls the registered advantage estimator once per step, outside jit, as
``fn(rewards=<numpy float64 [B*G]>, num_generations=G)`` (``grpo/grpo_learner.py``); one
run times that call, through tunix's registry (``function_registry.get_advantage_estimator``)
on the same rewards (N rollouts in groups of G = 8, mostly 0/1 with a quarter graded in
[0, 1), so both skipped and mixed groups occur), for:

- tunix's ``grpo`` (``tunix/rl/algo_core.py`` ``compute_advantages``: numpy reshapes, mean
  and unbiased std per group, float64);
- our ``advbudget_grpo`` (the same advantages; the core once on the numpy rewards, in float64
  like them, its whole result kept for the step's metrics) and ``reward_budget``;

in rounds of alternating order (A B C, C B A, ...), so that the machine's drift falls on
every path alike; each path's median is over all its rounds.

It checks first that ``advbudget_grpo`` equals tunix's ``grpo``, writes
``results/tunix.json`` and ``results/tunix.md`` and prints the table; the cost ratios (ours
over tunix's, in one run) are reported, not judged: issue 22 sets no target. Only a
disagreement exits non-zero.

Run in the tunix environment: ``make bench-tunix`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _harness import (
    Target,
    compute_ratios,
    header,
    machine_info,
    positive_ints,
    summary,
    table,
    time_call,
    write_results,
)

GROUP_SIZE = 8
DEFAULT_SIZES = (4_096, 65_536)
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "tunix.json"
MIN_TIMED_SECONDS = 0.05  # per path and round: fast calls repeat until this much is timed
# both in float64: float64 rounding of group sums
AGREE_RTOL = AGREE_ATOL = 1e-12

P_TUNIX = "tunix grpo"
P_OURS_GRPO = "advbudget_grpo"
P_OURS_BUDGET = "reward_budget"
PATHS = (P_TUNIX, P_OURS_GRPO, P_OURS_BUDGET)
REGISTERED = {P_TUNIX: "grpo", P_OURS_GRPO: "advbudget_grpo", P_OURS_BUDGET: "reward_budget"}
# Costs relative to tunix's grpo (below 1: ours is cheaper); no bound is set.
TARGETS = (
    Target(f"{P_OURS_GRPO} / {P_TUNIX}", P_OURS_GRPO, P_TUNIX),
    Target(f"{P_OURS_BUDGET} / {P_TUNIX}", P_OURS_BUDGET, P_TUNIX),
)


def registry() -> Any:
    """tunix's function registry, with our estimators registered (import warnings off)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tunix.rl import function_registry

        import advbudget.adapters.tunix  # noqa: F401  (registers)
    return function_registry


def make_rewards(n: int, seed: int) -> np.ndarray:
    """float64 rewards as tunix's reward step returns them, each prompt's G adjacent."""
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 2, n).astype(np.float64)
    graded = rng.random(n) < 0.25
    rewards[graded] = rng.random(int(graded.sum()))
    return rewards


def path_calls(function_registry: Any, rewards: np.ndarray) -> dict[str, Callable[[], Any]]:
    """Each path as tunix's learner calls its estimator."""
    get = function_registry.get_advantage_estimator
    estimators = {path: get(REGISTERED[path]) for path in PATHS}
    return {
        path: lambda fn=fn: fn(rewards=rewards, num_generations=GROUP_SIZE)
        for path, fn in estimators.items()
    }


def check_agreement(calls: dict[str, Callable[[], Any]]) -> list[str]:
    reference = np.asarray(calls[P_TUNIX]())
    got = np.asarray(calls[P_OURS_GRPO]())
    if got.shape == reference.shape and np.allclose(
        got, reference, rtol=AGREE_RTOL, atol=AGREE_ATOL
    ):
        return []
    diff = float(np.max(np.abs(got - reference))) if got.shape == reference.shape else np.nan
    return [f"{P_OURS_GRPO} differs from {P_TUNIX} by up to {diff:.3g}"]


def markdown_report(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    lines = [
        *header(
            "advbudget tunix benchmark", machine, ("google-tunix", "jax", "numpy", "advbudget")
        ),
        f"One estimator call as tunix's GRPO learner makes it each step (numpy float64 "
        f"rewards in, numpy advantages out), through tunix's registry; groups of "
        f"{GROUP_SIZE}, CPU. tunix's grpo is numpy in float64; ours run the core on numpy "
        "(float64, as the rewards), the whole result kept for the step's metrics. Median over "
        f"{payload['rounds']} rounds in alternating order (A B C, C B A, ...).",
        "",
        "## Median ms per call",
        "",
    ]
    timed = {(r["path"], r["n"]): r["median_ms"] for r in payload["results"]}
    lines += table(
        ["N", *PATHS],
        (
            [f"{n:,}", *(f"{timed[p, n]:.3f}" if (p, n) in timed else "-" for p in PATHS)]
            for n in sorted({r["n"] for r in payload["results"]})
        ),
        "r" + "r" * len(PATHS),
    )
    lines += ["", "## Cost relative to tunix's grpo (below 1: ours is cheaper)", ""]
    lines += table(
        ["ratio", "N", "value"],
        ([r["name"], f"{r['n']:,}", f"{r['ratio']:.2f}"] for r in payload["ratios"]),
        "lrr",
    )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=positive_ints(GROUP_SIZE), default=list(DEFAULT_SIZES))
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per round")
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds over the paths, in alternating order"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--quick", action="store_true", help="N = 512, 1 round of 3 calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.rounds = [512], 3, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    function_registry = registry()
    machine = machine_info(("google-tunix", "jax", "jaxlib", "flax", "numpy"))
    results, problems = [], []
    for i, n in enumerate(args.sizes):
        calls = path_calls(function_registry, make_rewards(n, args.seed + i))
        problems += [f"N={n}: {p}" for p in check_agreement(calls)]
        # Rounds in alternating order: the machine's drift falls on every path alike.
        seconds: dict[str, list[float]] = {path: [] for path in calls}
        for round_ in range(args.rounds):
            order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
            for path in order:
                # warm-up: caches and the allocator
                seconds[path] += time_call(calls[path], repeats=args.repeats, warmup=2,
                                           min_seconds=MIN_TIMED_SECONDS)  # fmt: skip
        for path, timed in seconds.items():
            results.append({"path": path, "n": n, **summary(timed)})
            print(f"N={n:>7,} {path:<16} {results[-1]['median_ms']:10.3f} ms", file=sys.stderr)
    payload = {
        "machine": machine,
        "group_size": GROUP_SIZE,
        "rounds": args.rounds,
        "results": results,
        "ratios": compute_ratios(results, TARGETS, case=("n",)),
        "problems": problems,
    }
    return write_results(args.output, payload, markdown_report(payload))


if __name__ == "__main__":
    sys.exit(main())
