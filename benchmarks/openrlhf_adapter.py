"""Timing benchmark of the OpenRLHF adapter against OpenRLHF's own advantage step.

One run times ``RemoteExperienceMaker.compute_advantages_and_returns`` (openrlhf 0.11.2) on
the same real ``Experience`` objects
(:func:`advbudget.adapters.openrlhf.testing.make_experiences`: N
samples in groups of 8, shuffled across micro-batches of B samples as OpenRLHF's rollout
leaves them, each micro-batch as wide as its longest response, KL terms in the reward,
float32, CPU):

- OpenRLHF's ``group_norm`` (its method: shaping, then per experience ``compute_reward`` and
  the Python loop over the response length);
- our ``advbudget_group_norm`` (the same numbers) and ``reward_budget`` through the patch,
  as they run in training: Ray's zero-copy tensor serialisation on (OpenRLHF's runtime env),
  so experiences get views of batch tensors;
- ``advbudget_group_norm`` with copies (``copy_blocks=True``: what runs when that
  serialisation is off);
- apart, ``reward_budget`` with ``--advbudget.skipped_groups drop`` over ``reward_budget``
  on the same experiences with half the groups dead (all rewards 1): what zeroing the
  skipped rows' action masks adds to the advantage step, the only part of a step drop adds
  work to (issue 20: under 1 % of a step);
- the floor: only the per-experience bookkeeping that OpenRLHF's ``Experience`` API
  requires of any implementation (gather the inputs into batch tensors, hand out 2
  per-token tensors and 4 info values per experience), no arithmetic.

It checks that OpenRLHF's and ours agree, writes ``results/openrlhf.json`` and
``results/openrlhf.md`` and prints the table. Goal (issue 6): at N = 4,096 and lengths 16
and 256, at least 20x faster than OpenRLHF; reported, never enforced. Run in the OpenRLHF
environment: ``make bench-openrlhf`` (``--quick`` for a smoke run); on a CPU machine,
without flash_attn and vllm, placeholders let OpenRLHF import
(:func:`advbudget.adapters.openrlhf.testing.experience_maker_module`).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
import statistics
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

from advbudget.adapters.openrlhf.testing import (
    experience_maker_module,
    make_args,
    make_experiences,
    make_maker,
)

# As in training: OpenRLHF's runtime env turns on Ray's zero-copy tensor serialisation.
os.environ.setdefault("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1")

GROUP_SIZE = 8
KL_COEF = 0.01
DEFAULT_SIZES = (4_096,)
DEFAULT_LENGTHS = (16, 256)
DEFAULT_MICRO_BATCHES = (1, 8, 32)
EXAMPLE_MICRO_BATCH = 8  # examples/openrlhf_qwen3.sh: --rollout.micro_batch_size 8
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "openrlhf.json"
TARGET = 20.0
TARGET_N = 4_096

P_OPENRLHF = "OpenRLHF group_norm"
P_OURS = "advbudget_group_norm"
P_BUDGET = "reward_budget"
P_COPIES = "advbudget_group_norm, copies"
P_FLOOR = "floor: bookkeeping only"
PATHS = (P_OPENRLHF, P_OURS, P_BUDGET, P_COPIES, P_FLOOR)
# Speed-ups over OpenRLHF; the goal is set for ours only.
TARGETS = tuple(
    Target(f"{P_OPENRLHF} / {path}", P_OPENRLHF, path, TARGET if path == P_OURS else None,
           at_most=False)
    for path in (P_OURS, P_BUDGET, P_COPIES, P_FLOOR)
)  # fmt: skip


def import_openrlhf() -> Any:
    """Our adapter, after OpenRLHF's experience maker (its import warnings silenced)."""
    experience_maker_module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import advbudget.adapters.openrlhf as adapter
    return adapter


def maker(estimator: str, length: int, skipped_groups: str = "keep") -> Any:
    """A real ``RemoteExperienceMaker`` with OpenRLHF 0.11.2's defaults and our flag."""
    args = make_args(estimator, GROUP_SIZE, max_new_tokens=length,
                     advbudget={"skipped_groups": skipped_groups})  # fmt: skip
    return make_maker(args, kl_coef=KL_COEF)


def experiences(n: int, length: int, micro_batch: int, seed: int) -> list[Any]:
    """N samples of rewards -1, 0, 0.5 or 1, no group forced constant."""
    return make_experiences(n // GROUP_SIZE, GROUP_SIZE, length=length, micro_batch=micro_batch,
                            seed=seed, constant_groups=0)  # fmt: skip


def bookkeeping_floor(experiences: list[Any]) -> None:
    """What any implementation must do per experience: gather rewards, masks and KL into
    batch tensors, hand each experience its returns, advantages and 4 info values."""
    import torch

    sizes = [len(e.index) for e in experiences]
    shapes = [tuple(e.action_mask.shape) for e in experiences]
    torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))
    torch.cat([e.rewards for e in experiences])
    torch.cat([e.action_mask.reshape(-1) for e in experiences])
    flat = torch.cat([e.kl.reshape(-1) for e in experiences])
    blocks = [block.view(shape) for block, shape in
              zip(flat.split([a * b for a, b in shapes]), shapes, strict=True)]  # fmt: skip
    values = torch.zeros(sum(sizes))
    parts = zip(experiences, blocks, *(values.split(sizes) for _ in range(4)), strict=True)
    for experience, block, *info in parts:
        experience.returns = block
        experience.advantages = block
        experience.info.update(zip(("a", "b", "c", "d"), info, strict=True))
        experience.kl = None


def path_calls(adapter: Any, length: int) -> dict[str, Callable[[list[Any]], Any]]:
    theirs = maker("group_norm", length)
    ours = maker("advbudget_group_norm", length)
    budget = maker("reward_budget", length)
    step = adapter.compute_advantages_and_returns
    return {
        P_OPENRLHF: theirs.compute_advantages_and_returns,  # OpenRLHF's own (unpatched)
        P_OURS: lambda e: step(ours, e),
        P_BUDGET: lambda e: step(budget, e),
        P_COPIES: lambda e: step(ours, e, copy_blocks=True),
        P_FLOOR: bookkeeping_floor,
    }


def check_agreement(calls: dict[str, Callable[[list[Any]], Any]], batch: list[Any]) -> list[str]:
    import torch

    reference = calls[P_OPENRLHF](copy.deepcopy(batch))
    problems = []
    for path in (P_OURS, P_COPIES):
        got = calls[path](copy.deepcopy(batch))
        for a, b in zip(reference, got, strict=True):
            if not torch.allclose(a.advantages, b.advantages, rtol=1e-5, atol=1e-6):
                diff = float((a.advantages - b.advantages).abs().max())
                problems.append(f"{path} differs from {P_OPENRLHF} by up to {diff:.3g}")
                break
    return problems


def time_step(run: Callable[[list[Any]], Any], batch: list[Any], repeats: int) -> list[float]:
    """Seconds per call, each on a fresh copy of the experiences (the step mutates them),
    the garbage collector paused (the copies are thousands of objects)."""
    return time_call(run, repeats=repeats, fresh=lambda: copy.deepcopy(batch), pause_gc=True)


def drop_cost(adapter: Any, batch: list[Any], length: int, repeats: int) -> float:
    """Median time of ``reward_budget`` with drop over without, on ``batch`` with every
    other group made dead, the two timed alternately (the machine's drift hits both)."""
    import torch

    dead = copy.deepcopy(batch)
    for experience in dead:
        is_dead = torch.tensor([(slot // GROUP_SIZE) % 2 == 1 for slot in experience.index])
        experience.rewards = torch.where(is_dead, 1.0, experience.rewards)
    keep = maker("reward_budget", length)
    drop = maker("reward_budget", length, skipped_groups="drop")
    times: dict[str, list[float]] = {"keep": [], "drop": []}
    for i in range(max(repeats, 3) * 2):
        order = (("keep", keep), ("drop", drop)) if i % 2 else (("drop", drop), ("keep", keep))
        for name, chosen in order:
            times[name] += time_step(
                lambda e, m=chosen: adapter.compute_advantages_and_returns(m, e), dead, 1
            )
    return statistics.median(times["drop"]) / statistics.median(times["keep"])


def markdown_report(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    lines = [
        *header("advbudget OpenRLHF benchmark", machine, ("openrlhf", "ray", "torch", "advbudget")),
        f"Groups of {GROUP_SIZE}, KL coefficient {KL_COEF}, float32, CPU; B = samples per "
        f"experience (`--rollout.micro_batch_size`; OpenRLHF's default 1, the example's "
        f"{EXAMPLE_MICRO_BATCH}). Ray zero-copy tensor serialisation: "
        f"{machine['ray_zero_copy_tensors']}.",
        "",
        "## Median ms per call",
        "",
    ]
    timed = {
        (r["path"], r["n"], r["length"], r["micro_batch"]): r["median_ms"]
        for r in payload["results"]
    }
    lines += table(
        ["N", "L", "B", *PATHS],
        (
            [f"{n:,}", length, micro, *(f"{timed[p, n, length, micro]:.2f}"
                                        if (p, n, length, micro) in timed else "-"
                                        for p in PATHS)]
            for n, length, micro in sorted({k[1:] for k in timed})
        ),
        "rrr" + "r" * len(PATHS),
    )  # fmt: skip
    lines += [
        "",
        f"## Speed-ups over OpenRLHF (goal {TARGET:.0f}x for {P_OURS} at N = {TARGET_N:,})",
        "",
    ]
    lines += table(
        ["path", "N", "L", "B", "speed-up", "goal met"],
        (
            [r["denominator"], f"{r['n']:,}", r["length"], r["micro_batch"],
             f"{r['ratio']:.1f}x", verdict(r["meets_target"])]
            for r in payload["ratios"]
        ),
        "lrrrrl",
    )  # fmt: skip
    if payload.get("drop_costs"):
        lines += [
            "",
            f"## What drop adds to the advantage step ({P_BUDGET}, half the groups dead: "
            "drop / keep)",
            "",
        ]
        lines += table(
            ["N", "L", "B", "ratio"],
            (
                [f"{r['n']:,}", r["length"], r["micro_batch"], f"{r['value']:.3f}"]
                for r in payload["drop_costs"]
            ),
            "rrrr",
        )
    return "\n".join(lines) + "\n"


def ray_zero_copy_tensors() -> bool:
    """Whether Ray serialises a tensor view as its own elements (its zero-copy tensor
    serialisation, read once at import from the environment): what the adapter's default
    ``copy_blocks=None`` follows."""
    from ray._private import ray_constants

    return bool(getattr(ray_constants, "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", False))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=positive_ints(GROUP_SIZE), default=list(DEFAULT_SIZES))
    parser.add_argument("--lengths", type=positive_ints(), default=list(DEFAULT_LENGTHS))
    parser.add_argument(
        "--micro-batches", type=positive_ints(), default=list(DEFAULT_MICRO_BATCHES)
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--quick", action="store_true", help="N = 512, L = 16, B = 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.lengths, args.micro_batches, args.repeats = [512], [16], [8], 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    adapter = import_openrlhf()
    machine = machine_info(
        ("openrlhf", "ray", "torch"), ray_zero_copy_tensors=ray_zero_copy_tensors()
    )
    results, problems, drop_costs = [], [], []
    for n, length, micro in itertools.product(args.sizes, args.lengths, args.micro_batches):
        batch = experiences(n, length, micro, args.seed)
        calls = path_calls(adapter, length)
        problems += [f"N={n}, L={length}, B={micro}: {p}" for p in check_agreement(calls, batch)]
        for path, run in calls.items():
            seconds = time_step(run, batch, args.repeats)
            results.append(
                {"path": path, "n": n, "length": length, "micro_batch": micro, **summary(seconds)}
            )
            print(f"N={n:,} L={length} B={micro} {path:<32} {results[-1]['median_ms']:9.2f} ms")
        cost = drop_cost(adapter, batch, length, args.repeats)
        drop_costs.append({"n": n, "length": length, "micro_batch": micro, "value": cost})
        print(f"N={n:,} L={length} B={micro} drop / keep (half dead) {cost:9.3f}")
    payload = {
        "machine": machine,
        "group_size": GROUP_SIZE,
        "kl_coef": KL_COEF,
        "results": results,
        "ratios": compute_ratios(
            results,
            TARGETS,
            case=("n", "length", "micro_batch"),
            judged=lambda case: case["n"] == TARGET_N,
        ),
        "drop_costs": drop_costs,
        "problems": problems,
    }
    return write_results(args.output, payload, markdown_report(payload))


if __name__ == "__main__":
    sys.exit(main())
