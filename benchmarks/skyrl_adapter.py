"""Timing benchmark of the SkyRL adapter's estimators against SkyRL's own ``grpo`` advantage.

SkyRL's trainer calls the registered advantage estimator once per step, on the whole batch,
through ``ppo_utils.compute_advantages_and_returns`` (the registry lookup included):
``fn(token_level_rewards=[B, L] float32, response_mask=[B, L], index=<list of uid str>,
...)``. One run times that dispatch on the same batch (N rollouts in groups of G = 8, the
reward on each response's last token, mostly 0/1 with a quarter graded in [0, 1), so both
skipped and mixed groups occur; uids in SkyRL's order, each prompt's G adjacent), for:

- SkyRL's ``grpo`` (``ppo_utils.compute_grpo_outcome_advantage``: a Python loop over the
  rows, a torch mean and std per uid, float32);
- our ``advbudget_grpo`` (the same advantages; the core once, float64 after SkyRL's float32
  sum, its whole result kept for the step's metrics) and ``reward_budget``;

in rounds of alternating order (A B C, C B A, ...), so that the machine's drift falls on
every path alike; each path's median is over all its rounds.

It checks first that ``advbudget_grpo`` equals SkyRL's ``grpo`` (to float32 rounding of the
group statistics), writes ``results/skyrl.json`` and ``results/skyrl.md`` and prints the
table; the cost ratios (ours over SkyRL's, in one run) are reported, not judged. Only a
disagreement exits non-zero.

Run in the SkyRL environment: ``make bench-skyrl`` (``--quick`` for a smoke run).
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
RESPONSE_LENGTH = 64
DEFAULT_SIZES = (4_096, 32_768)
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "skyrl.json"
MIN_TIMED_SECONDS = 0.05  # per path and round: fast calls repeat until this much is timed
# SkyRL computes in float32: a few roundings of values of order 1 (its std, its division)
AGREE_ATOL = 1e-5

P_SKYRL = "SkyRL grpo"
P_OURS_GRPO = "advbudget_grpo"
P_OURS_BUDGET = "reward_budget"
PATHS = (P_SKYRL, P_OURS_GRPO, P_OURS_BUDGET)
REGISTERED = {P_SKYRL: "grpo", P_OURS_GRPO: "advbudget_grpo", P_OURS_BUDGET: "reward_budget"}
# Costs relative to SkyRL's grpo (below 1: ours is cheaper); no bound is set.
TARGETS = (
    Target(f"{P_OURS_GRPO} / {P_SKYRL}", P_OURS_GRPO, P_SKYRL),
    Target(f"{P_OURS_BUDGET} / {P_SKYRL}", P_OURS_BUDGET, P_SKYRL),
)


def make_batch(n: int, seed: int) -> tuple[Any, Any, list[str]]:
    """float32 token rewards ``[N, L]`` (the reward on each response's last token), the
    response mask and the uids, as SkyRL's trainer hands them over."""
    import torch

    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 2, n).astype(np.float32)
    graded = rng.random(n) < 0.25
    rewards[graded] = rng.random(int(graded.sum()))
    lengths = rng.integers(1, RESPONSE_LENGTH + 1, n)
    mask = torch.as_tensor(np.arange(RESPONSE_LENGTH)[None, :] < lengths[:, None]).long()
    tokens = torch.zeros(n, RESPONSE_LENGTH)
    tokens[torch.arange(n), torch.as_tensor(lengths - 1)] = torch.as_tensor(rewards)
    return tokens, mask, [str(row // GROUP_SIZE) for row in range(n)]


def path_calls(tokens: Any, mask: Any, uids: list[str]) -> dict[str, Callable[[], Any]]:
    """Each path as SkyRL's trainer calls its estimator (a fresh copy of the rewards each
    call: SkyRL's own estimators write into them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from advbudget.adapters.skyrl.testing import dispatch

    return {
        path: lambda name=REGISTERED[path]: dispatch(name, tokens, mask, uids)[0] for path in PATHS
    }


def check_agreement(calls: dict[str, Callable[[], Any]]) -> list[str]:
    reference = calls[P_SKYRL]().numpy()
    got = calls[P_OURS_GRPO]().numpy()
    if got.shape == reference.shape and np.allclose(got, reference, rtol=0, atol=AGREE_ATOL):
        return []
    diff = float(np.max(np.abs(got - reference))) if got.shape == reference.shape else np.nan
    return [f"{P_OURS_GRPO} differs from {P_SKYRL} by up to {diff:.3g}"]


def markdown_report(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    lines = [
        *header("advbudget SkyRL benchmark", machine, ("skyrl", "torch", "numpy", "advbudget")),
        "One estimator call as SkyRL's trainer makes it each step (its dispatch "
        "`compute_advantages_and_returns`, the registry lookup included): float32 token "
        f"rewards [N, {RESPONSE_LENGTH}] in, token advantages out; groups of {GROUP_SIZE}, "
        "CPU. SkyRL's grpo loops over the rows in Python (float32); ours run the core once "
        "(float64 after SkyRL's float32 sum), the whole result kept for the step's metrics. "
        f"Median over {payload['rounds']} rounds in alternating order (A B C, C B A, ...).",
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
    lines += ["", "## Cost relative to SkyRL's grpo (below 1: ours is cheaper)", ""]
    lines += table(
        ["ratio", "N", "value"],
        ([r["name"], f"{r['n']:,}", f"{r['ratio']:.3f}"] for r in payload["ratios"]),
        "lrr",
    )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=positive_ints(GROUP_SIZE), default=list(DEFAULT_SIZES))
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds over the paths, in alternating order"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--quick", action="store_true", help="N = 512, 1 round of 2 calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.rounds = [512], 2, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info(("skyrl", "torch", "numpy"))
    results, problems = [], []
    for i, n in enumerate(args.sizes):
        calls = path_calls(*make_batch(n, args.seed + i))
        problems += [f"N={n}: {p}" for p in check_agreement(calls)]
        seconds: dict[str, list[float]] = {path: [] for path in calls}
        for round_ in range(args.rounds):
            order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
            for path in order:
                seconds[path] += time_call(calls[path], repeats=args.repeats, warmup=1,
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
