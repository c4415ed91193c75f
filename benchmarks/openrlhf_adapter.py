"""Timing benchmark of the OpenRLHF adapter against OpenRLHF's own advantage step.

One run times ``RemoteExperienceMaker.compute_advantages_and_returns`` (openrlhf 0.11.2) on
the same real ``Experience`` objects (N samples in groups of 8, shuffled across
micro-batches of B samples as OpenRLHF's rollout leaves them, each micro-batch as wide as its
longest response, KL terms in the reward, float32, CPU):

- OpenRLHF's ``group_norm`` (its method: shaping, then per experience ``compute_reward`` and
  the Python loop over the response length);
- our ``advbudget_group_norm`` (the same numbers) and ``reward_budget`` through the patch,
  as they run in training: Ray's zero-copy tensor serialisation on (OpenRLHF's runtime env),
  so experiences get views of batch tensors;
- ``advbudget_group_norm`` with copies (what runs when that serialisation is off);
- apart, ``reward_budget`` with ``--advbudget.skipped_groups drop`` over ``reward_budget``
  on the same experiences with half the groups dead (all rewards 1): what zeroing the
  skipped rows' action masks adds to the advantage step, the only part of a step drop adds
  work to (issue 20: under 1 % of a step);
- the floor: only the per-experience bookkeeping that OpenRLHF's ``Experience`` API
  requires of any implementation (gather the inputs, hand out 2 per-token tensors and 4
  info values per experience), no arithmetic.

It checks that OpenRLHF's and ours agree, writes ``results/openrlhf.json`` and
``results/openrlhf.md`` and prints the table. Goal (issue 6): at N = 4,096 and lengths 16
and 256, at least 20x faster than OpenRLHF; reported, never enforced. Run in the OpenRLHF
environment: ``make bench-openrlhf`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import itertools
import json
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import write_atomic

# As in training: OpenRLHF's runtime env turns on Ray's zero-copy tensor serialisation.
os.environ.setdefault("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1")

_HERE = Path(__file__).resolve().parent
STUBS = _HERE.parent / "tests" / "adapters" / "openrlhf" / "stubs"

GROUP_SIZE = 8
KL_COEF = 0.01
DEFAULT_SIZES = (4_096,)
DEFAULT_LENGTHS = (16, 256)
DEFAULT_MICRO_BATCHES = (1, 8, 32)
EXAMPLE_MICRO_BATCH = 8  # examples/openrlhf_qwen3.sh: --rollout.micro_batch_size 8
DEFAULT_OUTPUT = _HERE / "results" / "openrlhf.json"
TARGET = 20.0
TARGET_N = 4_096

P_OPENRLHF = "OpenRLHF group_norm"
P_OURS = "advbudget_group_norm"
P_BUDGET = "reward_budget"
P_COPIES = "advbudget_group_norm, copies"
P_FLOOR = "floor: bookkeeping only"
PATHS = (P_OPENRLHF, P_OURS, P_BUDGET, P_COPIES, P_FLOOR)


def import_openrlhf() -> tuple[Any, Any]:
    """OpenRLHF's experience-maker module and our adapter; on a CPU machine without
    flash_attn and vllm, their import stubs from the tests."""
    import importlib.util

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import peft  # noqa: F401  (probes flash_attn: before the stubs)
        import transformers.modeling_utils  # noqa: F401

        if importlib.util.find_spec("flash_attn") is None:
            sys.path.insert(0, str(STUBS))
        import openrlhf.trainer.ppo_utils.experience_maker as module

        import advbudget.adapters.openrlhf as adapter
    return module, adapter


def make_maker(module: Any, estimator: str, length: int, skipped_groups: str = "keep") -> Any:
    """A real ``RemoteExperienceMaker`` with the args it reads (0.11.2's defaults)."""
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    args = SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=GROUP_SIZE, max_new_tokens=length),
        data=SimpleNamespace(max_len=None),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator, gamma=1.0, lambd=1.0)),
        reward=SimpleNamespace(
            clip_range=(-10.0, 10.0),
            overlong_buffer_len=None,
            overlong_penalty_factor=1.0,
            stop_properly_penalty_coef=None,
        ),
        advbudget=SimpleNamespace(skipped_groups=skipped_groups),
    )
    maker = object.__new__(module.RemoteExperienceMaker)
    maker.strategy = SimpleNamespace(args=args)
    maker.args = args
    maker.advantage_estimator = estimator
    maker.kl_ctl = FixedKLController(KL_COEF)
    return maker


def make_experiences(n: int, length: int, micro_batch: int, seed: int) -> list[Any]:
    """Experiences as OpenRLHF's experience maker hands them to the advantage step."""
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience

    g = torch.Generator().manual_seed(seed)
    rewards = torch.tensor([-1.0, 0.0, 0.5, 1.0])[torch.randint(4, (n,), generator=g)]
    lengths = torch.randint(1, length + 1, (n,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    kl = torch.randn(n, length, generator=g) * 0.05 * mask
    order = torch.randperm(n, generator=g)
    experiences = []
    for start in range(0, n, micro_batch):
        rows = order[start : start + micro_batch]
        width = int(lengths[rows].max())
        experiences.append(
            Experience(
                rewards=rewards[rows].clone(),
                action_mask=mask[rows, :width].clone(),
                kl=kl[rows, :width].clone(),
                response_length=lengths[rows].float(),
                truncated=lengths[rows] == length,
                index=rows.tolist(),
                info={"reward": rewards[rows].clone()},
            )
        )
    return experiences


def bookkeeping_floor(experiences: list[Any], adapter_module: Any) -> None:
    """What any implementation must do per experience: gather rewards, masks and KL into
    batch tensors, hand each experience its returns, advantages and 4 info values."""
    import torch

    sizes = [len(e.index) for e in experiences]
    torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))
    torch.cat([e.rewards for e in experiences])
    layout = adapter_module._Layout(sizes, [int(e.action_mask.shape[1]) for e in experiences])
    layout.stack([e.action_mask for e in experiences])
    flat = layout.flatten(layout.stack([e.kl for e in experiences]))
    values = torch.zeros(sum(sizes))
    parts = zip(
        experiences,
        layout.blocks(flat),
        layout.blocks(flat),
        *(values.split(sizes) for _ in range(4)),
        strict=True,
    )
    for experience, returns, advantages, *info in parts:
        experience.returns = returns
        experience.advantages = advantages
        experience.info.update(zip(("a", "b", "c", "d"), info, strict=True))
        experience.kl = None


def path_calls(module: Any, adapter: Any, length: int) -> dict[str, Callable[[list[Any]], Any]]:
    from advbudget.adapters.openrlhf import _advantages

    theirs = make_maker(module, "group_norm", length)
    ours = make_maker(module, "advbudget_group_norm", length)
    budget = make_maker(module, "reward_budget", length)

    def copies(experiences: list[Any]) -> Any:
        saved = _advantages._ray_ships_views_compactly
        _advantages._ray_ships_views_compactly = lambda: False
        try:
            return adapter.compute_advantages_and_returns(ours, experiences)
        finally:
            _advantages._ray_ships_views_compactly = saved

    return {
        P_OPENRLHF: theirs.compute_advantages_and_returns,  # OpenRLHF's own (unpatched)
        P_OURS: lambda e: adapter.compute_advantages_and_returns(ours, e),
        P_BUDGET: lambda e: adapter.compute_advantages_and_returns(budget, e),
        P_COPIES: copies,
        P_FLOOR: lambda e: bookkeeping_floor(e, _advantages),
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


def time_call(run: Callable[[list[Any]], Any], batch: list[Any], repeats: int) -> list[float]:
    """Seconds per call, each on a fresh copy of the experiences (the step mutates them),
    with the garbage collector off as ``timeit`` does: a collection triggered inside a call
    walks every object of the process (here the thousands of copied experiences) and costs
    whichever path happens to trigger it."""
    seconds = []
    for _ in range(repeats + 1):  # the first call warms up
        fresh = copy.deepcopy(batch)
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            run(fresh)
            seconds.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return seconds[1:]


def compute_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    timed = {(r["path"], r["n"], r["length"], r["micro_batch"]): r["median_ms"] for r in results}
    ratios = []
    for n, length, micro in sorted({(r["n"], r["length"], r["micro_batch"]) for r in results}):
        for path in (P_OURS, P_BUDGET, P_COPIES, P_FLOOR):
            key = (path, n, length, micro)
            if key not in timed or (P_OPENRLHF, n, length, micro) not in timed:
                continue
            value = timed[(P_OPENRLHF, n, length, micro)] / timed[key]
            ratios.append(
                {
                    "ratio": f"{P_OPENRLHF} / {path}",
                    "n": n,
                    "length": length,
                    "micro_batch": micro,
                    "value": value,
                    "target": TARGET if path == P_OURS else None,
                    "meets_target": value >= TARGET if path == P_OURS and n == TARGET_N else None,
                }
            )
    return ratios


def drop_cost(module: Any, adapter: Any, batch: list[Any], length: int, repeats: int) -> float:
    """Median time of ``reward_budget`` with drop over without, on ``batch`` with every
    other group made dead, the two timed alternately (the machine's drift hits both)."""
    import torch

    dead = copy.deepcopy(batch)
    for experience in dead:
        is_dead = torch.tensor([(slot // GROUP_SIZE) % 2 == 1 for slot in experience.index])
        experience.rewards = torch.where(is_dead, 1.0, experience.rewards)
    keep = make_maker(module, "reward_budget", length)
    drop = make_maker(module, "reward_budget", length, skipped_groups="drop")
    times: dict[str, list[float]] = {"keep": [], "drop": []}
    for i in range(max(repeats, 3) * 2):
        order = (("keep", keep), ("drop", drop)) if i % 2 else (("drop", drop), ("keep", keep))
        for name, maker in order:
            times[name] += time_call(
                lambda e, m=maker: adapter.compute_advantages_and_returns(m, e), dead, 1
            )
    return statistics.median(times["drop"]) / statistics.median(times["keep"])


def markdown_report(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    lines = [
        "# advbudget OpenRLHF benchmark",
        "",
        f"openrlhf {machine['openrlhf']}, torch {machine['torch']} "
        f"({machine['torch_threads']} threads), {machine['processor']}, "
        f"{machine['cpu_count']} CPUs, {machine['date']}. Groups of {GROUP_SIZE}, KL "
        f"coefficient {KL_COEF}, float32, CPU; B = samples per experience "
        f"(`--rollout.micro_batch_size`; OpenRLHF's default 1, the example's "
        f"{EXAMPLE_MICRO_BATCH}). Ray zero-copy tensor serialisation: "
        f"{machine['ray_zero_copy_tensors']}.",
        "",
        "## Median ms per call",
        "",
        "| N | L | B | " + " | ".join(PATHS) + " |",
        "|---:|---:|---:|" + "---:|" * len(PATHS),
    ]
    timed = {
        (r["path"], r["n"], r["length"], r["micro_batch"]): r["median_ms"]
        for r in payload["results"]
    }
    for n, length, micro in sorted({k[1:] for k in timed}):
        cells = [
            f"{timed[(p, n, length, micro)]:.2f}" if (p, n, length, micro) in timed else "-"
            for p in PATHS
        ]
        lines.append(f"| {n:,} | {length} | {micro} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Speed-ups over OpenRLHF (goal {TARGET:.0f}x for {P_OURS} at N = {TARGET_N:,})",
        "",
        "| path | N | L | B | speed-up | goal met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in payload["ratios"]:
        met = "-" if r["meets_target"] is None else ("yes" if r["meets_target"] else "no")
        path = r["ratio"].split(" / ", 1)[1]
        lines.append(
            f"| {path} | {r['n']:,} | {r['length']} | {r['micro_batch']} | "
            f"{r['value']:.1f}x | {met} |"
        )
    if payload.get("drop_costs"):
        lines += [
            "",
            f"## What drop adds to the advantage step ({P_BUDGET}, half the groups dead: "
            "drop / keep)",
            "",
            "| N | L | B | ratio |",
            "|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['n']:,} | {r['length']} | {r['micro_batch']} | {r['value']:.3f} |"
            for r in payload["drop_costs"]
        ]
    return "\n".join(lines) + "\n"


def machine_info() -> dict[str, Any]:
    import openrlhf
    import ray
    import torch

    import advbudget
    from advbudget.adapters.openrlhf._advantages import _ray_ships_views_compactly

    version = getattr(openrlhf, "__version__", None)
    if version is None:
        from importlib.metadata import version as installed

        version = installed("openrlhf")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "openrlhf": version,
        "ray": ray.__version__,
        "ray_zero_copy_tensors": _ray_ships_views_compactly(),
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
    parser.add_argument("--micro-batches", type=parse_ints, default=list(DEFAULT_MICRO_BATCHES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--quick", action="store_true", help="N = 512, L = 16, B = 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.lengths, args.micro_batches, args.repeats = [512], [16], [8], 1
    bad = [n for n in args.sizes if n % GROUP_SIZE]
    if bad:
        parser.error(f"--sizes: expected multiples of {GROUP_SIZE}, got {bad}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    module, adapter = import_openrlhf()
    results, problems, drop_costs = [], [], []
    for n, length, micro in itertools.product(args.sizes, args.lengths, args.micro_batches):
        batch = make_experiences(n, length, micro, args.seed)
        calls = path_calls(module, adapter, length)
        problems += [f"N={n}, L={length}, B={micro}: {p}" for p in check_agreement(calls, batch)]
        for path, run in calls.items():
            seconds = time_call(run, batch, args.repeats)
            results.append(
                {
                    "path": path,
                    "n": n,
                    "length": length,
                    "micro_batch": micro,
                    "median_ms": statistics.median(seconds) * 1e3,
                    "repeats": len(seconds),
                }
            )
            print(f"N={n:,} L={length} B={micro} {path:<32} {results[-1]['median_ms']:9.2f} ms")
        cost = drop_cost(module, adapter, batch, length, args.repeats)
        drop_costs.append({"n": n, "length": length, "micro_batch": micro, "value": cost})
        print(f"N={n:,} L={length} B={micro} drop / keep (half dead) {cost:9.3f}")
    payload = {
        "machine": machine_info(),
        "group_size": GROUP_SIZE,
        "kl_coef": KL_COEF,
        "results": results,
        "ratios": compute_ratios(results),
        "drop_costs": drop_costs,
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
