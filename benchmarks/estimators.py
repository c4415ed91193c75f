"""The catalogue's newer estimators against a hand-written numpy floor, in one run.

For each of ``maxrl`` and ``passk`` (k = 4): ``compute_advantages(rewards, name,
group_size=8)`` on numpy against the same formula hand-written as a reshape (no
advbudget), at N = 65,536 and 1,048,576 rollouts of 0/1 rewards (a quarter of the groups
constant). Target: at most 1.3x the floor at N = 1M. Both paths must agree (float64).

    python benchmarks/estimators.py [--sizes 65536,1048576] [--repeats 20]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _harness import Target, machine_info, size_arguments, size_row, write_size_report

from advbudget import compute_advantages

G = 8
K = 4
EPS = 1e-6
TIE = 1e-6
TARGET_N = 1_048_576
BOUND = 1.3
NAMES = ("maxrl", "passk")


def make_rewards(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rewards = (rng.random((n // G, G)) < 0.4).astype(np.float64)
    # A quarter of the groups constant (all right or all wrong): skipped, advantage 0.
    constant = rng.integers(0, 2, size=(n // G, 1)).astype(np.float64)
    rewards = np.where(rng.random((n // G, 1)) < 0.25, constant, rewards)
    return rewards.reshape(-1)


def _kept(g: np.ndarray) -> np.ndarray:
    high, low = g.max(axis=1, keepdims=True), g.min(axis=1, keepdims=True)
    return (high - low) > TIE + TIE * np.maximum(np.abs(high), np.abs(low))


def floor_maxrl(rewards: np.ndarray) -> np.ndarray:
    g = rewards.reshape(-1, G)
    mean = g.mean(axis=1, keepdims=True)
    return np.where(_kept(g), (g - mean) / (mean + EPS), 0.0).reshape(-1)


# pass@k's two advantages for c = 0..G correct of G: a table, since G is fixed.
def _passk_table() -> tuple[np.ndarray, np.ndarray]:
    positive, negative = np.zeros(G + 1), np.zeros(G + 1)
    for c in range(1, G):
        rho = 1 - math.comb(G - c, K) / math.comb(G, K)
        sigma = math.sqrt(rho * (1 - rho)) + EPS
        positive[c] = (1 - rho) / sigma
        negative[c] = (1 - rho - math.comb(G - c - 1, K - 1) / math.comb(G - 1, K - 1)) / sigma
    return positive, negative


POSITIVE, NEGATIVE = _passk_table()


def floor_passk(rewards: np.ndarray) -> np.ndarray:
    g = rewards.reshape(-1, G)
    top = g == g.max(axis=1, keepdims=True)
    c = top.sum(axis=1, keepdims=True)
    advantages = np.where(top, POSITIVE[c], NEGATIVE[c])
    return np.where(_kept(g), advantages, 0.0).reshape(-1)


FLOORS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "maxrl": floor_maxrl,
    "passk": floor_passk,
}


def ours(name: str) -> Callable[[np.ndarray], np.ndarray]:
    options: dict[str, Any] = {"k": K} if name == "passk" else {}
    return lambda r: compute_advantages(r, name, group_size=G, **options).advantages


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = size_arguments(
        __doc__.splitlines()[0], "estimators", sizes=(65_536, TARGET_N), multiple_of=G, repeats=20
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info(("numpy",))
    results, problems = [], []
    for n in args.sizes:
        rewards = make_rewards(n)
        for name in NAMES:
            paths = {f"{name}: advbudget": ours(name), f"{name}: floor": FLOORS[name]}
            got, want = paths[f"{name}: advbudget"](rewards), FLOORS[name](rewards)
            if not np.allclose(got, want, rtol=1e-9, atol=1e-9):
                problems.append(f"{name} at N={n}: max |diff| {np.max(np.abs(got - want)):.3g}")
            results += [
                size_row(n, path, lambda run=run, rewards=rewards: run(rewards), args.repeats)
                for path, run in paths.items()
            ]
    targets = [
        Target(f"{name} / floor", f"{name}: advbudget", f"{name}: floor", BOUND) for name in NAMES
    ]
    intro = (
        f"numpy, G = {G}, 0/1 rewards (a quarter of the groups constant), passk k = {K}; "
        "median of the timed calls (`python benchmarks/estimators.py`)."
    )
    return write_size_report(
        args.output,
        "The newer estimators against a numpy floor",
        intro,
        machine,
        results,
        targets,
        problems,
        judged_n=TARGET_N,
    )


if __name__ == "__main__":
    sys.exit(main())
