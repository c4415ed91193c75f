"""What policy versions cost: ``compute_advantages(rewards, base, group_size=8,
policy_versions=v, current_version=c, max_staleness=1, stale_rollouts=rule)`` against the
same call without versions, and against the same rule written by hand without versions,
in one run.

For base estimators ``grpo`` and ``budget`` and every rule (``keep``, ``baseline_only``,
``drop``, ``drop_group``), on numpy, at N = 65,536 and 1,048,576 rollouts of 0/1 rewards
(a quarter of the groups constant), versions 0..2 with the current one 2 (a third stale).
Target (issue 35): versions add at most 30 % at N = 1M. Each result must equal the rule
written by hand here (``by_hand``, also timed): ``drop`` and ``drop_group`` as the base
estimator with the left-out rewards NaN under ``nan_policy="omit"``, ``baseline_only`` as
the base advantages with the stale ones 0.

    python benchmarks/staleness.py [--sizes 65536,1048576] [--repeats 20]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from _harness import Target, machine_info, size_arguments, size_row, write_size_report
from estimators import G, make_rewards

from advbudget import compute_advantages

TARGET_N = 1_048_576
BOUND = 1.3
BASES = ("grpo", "budget")
RULES = ("keep", "baseline_only", "drop", "drop_group")
CURRENT, MAX_STALENESS = 2, 1


def by_hand(rewards: np.ndarray, versions: np.ndarray, base: str, rule: str) -> np.ndarray:
    """The rule's advantages from the base estimator alone, in the rewards' dtype: what a
    user would write without ``policy_versions=``."""
    stale = CURRENT - versions > MAX_STALENESS
    if rule in ("keep", "baseline_only"):
        plain = compute_advantages(rewards, base, group_size=G).advantages
        return plain if rule == "keep" else np.where(stale, 0.0, plain)
    out = stale if rule == "drop" else np.repeat(stale.reshape(-1, G).any(axis=1), G)
    masked = np.where(out, math.nan, rewards)
    return compute_advantages(masked, base, group_size=G, nan_policy="omit").advantages


def _settings(versions: np.ndarray, rule: str | None) -> dict[str, Any]:
    """The call's staleness keywords (none for the base path)."""
    if rule is None:
        return {}
    return {
        "policy_versions": versions,
        "current_version": CURRENT,
        "max_staleness": MAX_STALENESS,
        "stale_rollouts": rule,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = size_arguments(
        __doc__.splitlines()[0], "staleness", sizes=(65_536, TARGET_N), multiple_of=G, repeats=20
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info(("numpy",))
    results, problems = [], []
    for n in args.sizes:
        rewards = make_rewards(n)
        versions = np.random.default_rng(3).integers(0, CURRENT + 1, size=n)
        for base in BASES:
            paths = {base: None, **{f"{base}, {rule}": rule for rule in RULES}}
            settings = {path: _settings(versions, rule) for path, rule in paths.items()}
            # Every rule checked first: its large allocations also warm the allocator, so
            # the base path, timed first, is not the one that pays for fresh pages.
            for path, rule in paths.items():
                if rule is None:
                    continue
                got = compute_advantages(rewards, base, group_size=G, **settings[path])
                want = by_hand(rewards.astype(np.float64), versions, base, rule)
                if not np.allclose(got.advantages, want, rtol=1e-5, atol=1e-5):
                    diff = np.max(np.abs(got.advantages - want))
                    problems.append(f"{path} at N={n}: max |diff| {diff:.3g}")
            for path in paths:
                results.append(
                    size_row(
                        n,
                        path,
                        lambda r=rewards, b=base, s=settings[path]: compute_advantages(
                            r, b, group_size=G, **s
                        ),
                        args.repeats,
                    )
                )
            for rule in RULES[1:]:
                results.append(
                    size_row(
                        n,
                        f"{base}, {rule} by hand",
                        lambda r=rewards, v=versions, b=base, rule=rule: by_hand(r, v, b, rule),
                        args.repeats,
                    )
                )
    # Two readings of "what versions cost": against the call without versions (the
    # issue's bound; drop and drop_group then pay for statistics over fewer rollouts)
    # and against the same rule written by hand without versions (what the versions
    # argument itself adds).
    targets = [
        Target(f"{base}, {rule} / {base}", f"{base}, {rule}", base, BOUND)
        for base in BASES
        for rule in RULES
    ] + [
        Target(f"{base}, {rule} / by hand", f"{base}, {rule}", f"{base}, {rule} by hand", BOUND)
        for base in BASES
        for rule in RULES[1:]
    ]
    intro = (
        f"numpy, G = {G}, 0/1 rewards (a quarter of the groups constant), versions 0..2 with "
        f"the current one {CURRENT} and max_staleness={MAX_STALENESS} (a third of the "
        "rollouts stale); the base estimator with and without `policy_versions=`, and each "
        "rule by hand without versions (`drop`, `drop_group`: the left-out rewards NaN under "
        '`nan_policy="omit"`; `baseline_only`: the base advantages with the stale ones 0); '
        "median of the timed calls (`python benchmarks/staleness.py`)."
    )
    return write_size_report(
        args.output,
        "What policy versions cost",
        intro,
        machine,
        results,
        targets,
        problems,
        judged_n=TARGET_N,
    )


if __name__ == "__main__":
    sys.exit(main())
