"""What a difficulty weight costs: ``compute_advantages(rewards, base, group_size=8,
group_weight=W)`` against the same call without ``W``, in one run.

For base estimators ``budget`` and ``grpo`` and weights ``grpo_lead`` and ``dqw``, on numpy,
at N = 65,536 and 1,048,576 rollouts of 0/1 rewards (a quarter of the groups constant).
Target (issue 32): a weight adds at most 30 % to its base estimator at N = 1M. Each weighted
result must equal the base advantages times the weights written by hand here (float64).

    python benchmarks/weights.py [--sizes 65536,1048576] [--repeats 20]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
from _harness import (
    Target,
    machine_info,
    size_arguments,
    summary,
    time_side_by_side,
    write_size_report,
)
from estimators import G, make_rewards

from advbudget import compute_advantages

TARGET_N = 1_048_576
BOUND = 1.3
BASES = ("budget", "grpo")
WEIGHTS = ("grpo_lead", "dqw")


def hand_weights(rewards: np.ndarray, base: np.ndarray, weight: str) -> np.ndarray:
    """The weight of each rollout, as a reshape: p̂ is the group's share of rewards >= 1."""
    g = rewards.reshape(-1, G)
    share = (g >= 1 - 2e-6).mean(axis=1, keepdims=True)
    kept = g.max(axis=1, keepdims=True) > g.min(axis=1, keepdims=True)
    if weight == "grpo_lead":
        up = 0.4 + 1.1 / (1 + np.exp(10 * (share - 0.75)))
        down = 0.4 + 1.1 / (1 + np.exp(10 * (0.25 - share)))
        a = base.reshape(-1, G)
        return np.where(a > 0, up, np.where(a < 0, down, 1.0)).reshape(-1)
    d = np.where(share > 0, share, 1.0)
    terms = np.where(kept, np.exp(-d / 2.0), 0.0)
    lam = np.where(kept, kept.sum() * terms / terms.sum(), 1.0)
    return np.broadcast_to(lam, g.shape).reshape(-1)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = size_arguments(
        __doc__.splitlines()[0], "weights", sizes=(65_536, TARGET_N), multiple_of=G, repeats=20
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info(("numpy",))
    results, problems = [], []
    for n in args.sizes:
        rewards = make_rewards(n)
        for base in BASES:
            plain = compute_advantages(rewards, base, group_size=G).advantages
            paths = {base: None, **{f"{base} + {w}": w for w in WEIGHTS}}
            for path, weight in paths.items():
                if weight is not None:
                    got = compute_advantages(
                        rewards, base, group_size=G, group_weight=weight
                    ).advantages
                    want = plain * hand_weights(rewards, plain, weight)
                    if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
                        diff = np.max(np.abs(got - want))
                        problems.append(f"{path} at N={n}: max |diff| {diff:.3g}")
            runs = {
                path: lambda r=rewards, b=base, w=weight: compute_advantages(
                    r, b, group_size=G, group_weight=w
                )
                for path, weight in paths.items()
            }
            timed = time_side_by_side(runs, repeats=args.repeats, min_seconds=0.2)
            results += [{"n": n, "path": path, **summary(timed[path])} for path in paths]
    targets = [
        Target(f"{base} + {w} / {base}", f"{base} + {w}", base, BOUND)
        for base in BASES
        for w in WEIGHTS
    ]
    intro = (
        f"numpy, G = {G}, 0/1 rewards (a quarter of the groups constant); the base "
        "estimator with and without `group_weight=`, timed side by side (one call of "
        "each path per round); median of the timed calls (`python benchmarks/weights.py`)."
    )
    return write_size_report(
        args.output,
        "What a difficulty weight costs",
        intro,
        machine,
        results,
        targets,
        problems,
        judged_n=TARGET_N,
    )


if __name__ == "__main__":
    sys.exit(main())
