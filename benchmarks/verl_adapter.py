"""Timing benchmark of the verl adapter against verl's own ``grpo`` and ``grpo_vectorized``.

One run times, on the same verl ``DataProto`` (:func:`advbudget.adapters.verl.testing.make_batch`:
N responses in groups of G = 8, verl's layout: each prompt's uuid4 uid repeated on adjacent
rows; the reward on the last valid token of ``token_level_rewards`` [N, L]; float32, CPU):

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
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import (
    Target,
    compute_ratios,
    header,
    machine_info,
    positive_ints,
    summary,
    table,
    time_call,
    verdict,
    write_results,
)

from advbudget.adapters.verl.testing import algorithm_config, make_batch

GROUP_SIZE = 8
DEFAULT_SIZES = (4_096, 65_536)
DEFAULT_LENGTHS = (1, 512)
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "verl.json"
TARGET_N = 65_536
TARGET_VS_GRPO = 100.0
TARGET_VS_VECTORIZED = 3.0
AGREE_ATOL = 1e-4
MIN_TIMED_SECONDS = 0.25

P_GRPO = "verl grpo (Python loop)"
P_VECTORIZED = "verl grpo_vectorized"
P_OURS_GRPO = "advbudget_grpo"
P_OURS_BUDGET = "reward_budget"
PATHS = (P_GRPO, P_VECTORIZED, P_OURS_GRPO, P_OURS_BUDGET)
# Speed-ups: each must reach its bound (at N = TARGET_N).
TARGETS = (
    Target("verl grpo / advbudget_grpo", P_GRPO, P_OURS_GRPO, TARGET_VS_GRPO, at_most=False),
    Target("verl grpo / reward_budget", P_GRPO, P_OURS_BUDGET, TARGET_VS_GRPO, at_most=False),
    Target("verl grpo_vectorized / advbudget_grpo", P_VECTORIZED, P_OURS_GRPO,
           TARGET_VS_VECTORIZED, at_most=False),
    Target("verl grpo_vectorized / reward_budget", P_VECTORIZED, P_OURS_BUDGET,
           TARGET_VS_VECTORIZED, at_most=False),
)  # fmt: skip


def import_verl() -> tuple[Any, Any]:
    """verl's ``core_algos`` and the adapter (registered), with verl's import warnings off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo import core_algos

        import advbudget.adapters.verl as adapter
    return core_algos, adapter


def path_calls(batch: Any, core_algos: Any, adapter: Any) -> dict[str, Callable[[], Any]]:
    """Each path as verl calls an estimator: the batch's tensors and uids, verl's config."""
    config = algorithm_config("grpo")
    kwargs = {
        "token_level_rewards": batch.batch["token_level_rewards"],
        "response_mask": batch.batch["response_mask"],
        "index": batch.non_tensor_batch["uid"],
    }
    vectorized = core_algos.get_adv_estimator_fn("grpo_vectorized")
    ours_grpo = adapter.estimator_function(P_OURS_GRPO)
    ours_budget = adapter.estimator_function(P_OURS_BUDGET)
    return {
        P_GRPO: lambda: core_algos.compute_grpo_outcome_advantage(**kwargs)[0],
        P_VECTORIZED: lambda: vectorized(**kwargs, config=config)[0],
        P_OURS_GRPO: lambda: ours_grpo(**kwargs, config=config)[0],
        P_OURS_BUDGET: lambda: ours_budget(**kwargs, config=config)[0],
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


def markdown_report(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    lines = [
        *header("advbudget verl benchmark", machine, ("verl", "torch", "numpy", "advbudget")),
        f"Groups of {GROUP_SIZE}, uuid4 uids in verl's layout, float32, CPU.",
        "",
        "## Median ms per call",
        "",
    ]
    timed = {(r["path"], r["n"], r["length"]): r["median_ms"] for r in payload["results"]}
    cases = sorted({(r["n"], r["length"]) for r in payload["results"]})
    lines += table(
        ["N", "L", *PATHS],
        (
            [f"{n:,}", length, *(f"{timed[p, n, length]:.3f}" if (p, n, length) in timed
                                 else "-" for p in PATHS)]
            for n, length in cases
        ),
        "rr" + "r" * len(PATHS),
    )  # fmt: skip
    lines += ["", f"## Speed-ups (targets at N = {TARGET_N:,})", ""]
    bounds = {target.name: target.bound for target in TARGETS}
    lines += table(
        ["ratio", "N", "L", "value", "target", "met"],
        (
            [r["name"], f"{r['n']:,}", r["length"], f"{r['ratio']:.1f}x",
             f"{bounds[r['name']]:.0f}x", verdict(r["meets_target"])]
            for r in payload["ratios"]
        ),
        "lrrrrl",
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=positive_ints(GROUP_SIZE), default=list(DEFAULT_SIZES))
    parser.add_argument("--lengths", type=positive_ints(), default=list(DEFAULT_LENGTHS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--quick", action="store_true", help="N = 512, L = 1 and 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.lengths, args.repeats = [512], [1, 8], 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    core_algos, adapter = import_verl()
    machine = machine_info(("verl", "torch", "numpy"))
    results, problems = [], []
    for n in args.sizes:
        for length in args.lengths:
            batch = make_batch([GROUP_SIZE] * (n // GROUP_SIZE), length=length, seed=args.seed,
                               shuffle=False)  # fmt: skip
            calls = path_calls(batch, core_algos, adapter)
            problems += [f"N={n}, L={length}: {p}" for p in check_agreement(calls)]
            for path, run in calls.items():
                seconds = time_call(run, repeats=args.repeats, min_seconds=MIN_TIMED_SECONDS)
                results.append({"path": path, "n": n, "length": length, **summary(seconds)})
                print(f"N={n:>7,} L={length:>4} {path:<28} {results[-1]['median_ms']:10.3f} ms")
    payload = {
        "machine": machine,
        "group_size": GROUP_SIZE,
        "results": results,
        "ratios": compute_ratios(
            results, TARGETS, case=("n", "length"), judged=lambda case: case["n"] == TARGET_N
        ),
        "problems": problems,
    }
    return write_results(args.output, payload, markdown_report(payload))


if __name__ == "__main__":
    sys.exit(main())
