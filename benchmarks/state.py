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

import numpy as np
from _harness import Target, machine_info, size_arguments, size_row, write_size_report
from estimators import G, make_rewards

from advbudget import EstimatorState, compute_advantages

TARGET_N = 1_048_576
BOUND = 1.3


class HandMemory:
    """rae's memory as plain numpy would keep it, the least it takes: the remembered keys
    sorted with their baselines, found by ``searchsorted``, the call's keys by
    ``np.unique``, the means by ``bincount`` (no checks, no new prompts: a steady step).
    What any exact per-prompt memory pays beyond remax's subtraction."""

    def __init__(self, prompts: np.ndarray, decay: float = 0.95) -> None:
        self.keys = np.unique(prompts)
        self.baselines = np.zeros(len(self.keys))
        self.decay = decay

    def __call__(self, rewards: np.ndarray, prompts: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(prompts, return_inverse=True)
        where = np.searchsorted(self.keys, unique)
        before = self.baselines[where]
        advantages = rewards - before[inverse]
        mean = np.bincount(inverse, rewards) / np.bincount(inverse)
        self.baselines[where] = self.decay * before + (1 - self.decay) * mean
        return advantages


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = size_arguments(
        __doc__.splitlines()[0], "state", sizes=(65_536, TARGET_N), multiple_of=G, repeats=10
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
                if name == "rae":  # the same memory by hand, on the same rows
                    hand = HandMemory(p)
                    twin = EstimatorState()
                    for _ in range(2):
                        want = compute_advantages(r, name, group_size=1, prompt_ids=p, state=twin)
                        if not np.allclose(hand(r, p), want.advantages, atol=1e-12):
                            problems.append(f"rae by hand{label} at N={n}: not rae")
                    paths[f"rae by hand{label}"] = lambda r=r, p=p, hand=hand: hand(r, p)
        results += [size_row(n, path, run, args.repeats) for path, run in paths.items()]
    targets = (
        [
            Target(f"{path} / remax", path, "remax (baseline given)", BOUND)
            for path in ("rae", "spo", "rae, shuffled", "spo, shuffled")
        ]
        + [
            Target(f"{path} / remax", path, "remax (baseline given)")
            for path in ("rae by hand", "rae by hand, shuffled")
        ]
        + [
            Target(f"rae{label} / rae by hand{label}", f"rae{label}", f"rae by hand{label}")
            for label in ("", ", shuffled")
        ]
    )
    intro = (
        f"numpy, 0/1 rewards, one int prompt id per group of G = {G} (side by side, or "
        "shuffled), every prompt remembered; median of the timed calls, each of which "
        "updates the state; `rae by hand`: the same memory in plain numpy, the least an "
        "exact per-prompt memory takes (sorted keys, `np.unique`, `searchsorted`, "
        "`bincount`; no checks) (`python benchmarks/state.py`)."
    )
    return write_size_report(
        args.output,
        "What an estimator's memory costs",
        intro,
        machine,
        results,
        targets,
        problems,
        judged_n=TARGET_N,
    )


if __name__ == "__main__":
    sys.exit(main())
