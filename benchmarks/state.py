"""What an estimator's memory costs: ``compute_advantages(rewards, "rae" | "spo",
group_size=8, prompt_ids=ids, state=state)`` against ``remax`` (``r - b`` with the baseline
``b`` given per rollout: the arithmetic of ``rae`` without the memory), in one run.

On numpy, at N = 65,536 and 1,048,576 rollouts of 0/1 rewards, one int prompt id per group
(its G rollouts side by side, as trainers hand them over), every prompt already remembered
(a steady step), and with the rollouts shuffled (each prompt's rollouts apart). Target
(issue 32): the state adds at most 30 % to its base estimator at N = 1M. Each call must
equal the float64 rule written by hand here (``rae``: the baseline of the state before the
call).

    python benchmarks/state.py [--sizes 65536,1048576] [--repeats 10]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from _harness import (
    Target,
    compute_ratios,
    header,
    machine_info,
    positive_ints,
    summary,
    time_call,
    timings_by_size,
    write_results,
)
from estimators import G, make_rewards

from advbudget import EstimatorState, compute_advantages

TARGET_N = 1_048_576
BOUND = 1.3


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=positive_ints(G), default=[65_536, TARGET_N])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / "state.json"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info(("numpy",))
    results, problems = [], []
    for n in args.sizes:
        rewards = make_rewards(n)
        ids = np.repeat(np.arange(n // G), G)
        shuffled = np.random.default_rng(1).permutation(n)
        baseline = np.random.default_rng(2).random(n // G).repeat(G)
        paths = {
            "remax (baseline given)": lambda r=rewards, b=baseline: compute_advantages(
                r, "remax", group_size=1, reward_baselines=b
            ),
        }
        for name in ("rae", "spo"):
            for label, order in (("", None), (", shuffled", shuffled)):
                r = rewards if order is None else rewards[order]
                p = ids if order is None else ids[order]
                state = EstimatorState()
                compute_advantages(r, name, group_size=1, prompt_ids=p, state=state)
                if name == "rae":  # the rule by hand, against the state before the call
                    before = np.array([state.values(k)["baseline"] for k in range(3)])
                    got = compute_advantages(r, name, group_size=1, prompt_ids=p, state=state)
                    first = [int(np.flatnonzero(p == k)[0]) for k in range(3)]
                    want = r[first] - before[[0, 1, 2]]
                    if not np.allclose(np.asarray(got.advantages)[first], want, atol=1e-12):
                        problems.append(f"rae{label} at N={n}: not r - b")
                paths[f"{name}{label}"] = lambda r=r, p=p, name=name, state=state: (
                    compute_advantages(r, name, group_size=1, prompt_ids=p, state=state)
                )
        for path, run in paths.items():
            seconds = time_call(run, repeats=args.repeats, min_seconds=0.2)
            results.append({"n": n, "path": path, **summary(seconds)})
    targets = [
        Target(f"{path} / remax", path, "remax (baseline given)", BOUND)
        for path in ("rae", "spo", "rae, shuffled", "spo, shuffled")
    ]
    ratios = compute_ratios(
        results, targets, case=("n",), judged=lambda case: case["n"] == TARGET_N
    )
    lines = header("What an estimator's memory costs", machine, ("numpy",))
    lines += [
        f"numpy, 0/1 rewards, one int prompt id per group of G = {G} (side by side, or "
        "shuffled), every prompt remembered; median of the timed calls, each of which "
        "updates the state (`python benchmarks/state.py`).",
        "",
        *timings_by_size(results, ratios),
    ]
    payload = {"machine": machine, "results": results, "ratios": ratios, "problems": problems}
    return write_results(args.output, payload, "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
