"""Timing benchmark of the core estimators on numpy, torch (CPU, eager) and jax (CPU).

One run times, for N rollouts in groups of G = 8 and float32 rewards:

- our contiguous path (``group_size=8``: a reshape) for budget, GRPO and Dr;
- our grouped path with shuffled int labels, with the factorisation on every call and
  with a prebuilt ``make_groups`` result (factorisation vs compute); the labels take the
  backend's segment ops on codes counted in O(N), the ``Permuted`` layout (a sort for the
  slots, one gather, then reshapes: ``method="permuted"``) and declared slots
  (``positions=``, OpenRLHF) beside it;
- string uids (uuid4, as verl passes them), shuffled and in verl's interleaved layout;
- the floor: the budget formula hand-written as a native reshape per backend;
- a per-rollout Python loop in the style of verl's ``grpo`` estimator (torch);
- gdpo on K = 3 reward components (``[N, 3]``) against three grpo passes, one per
  component (its group work), in the same run.

It checks once that all of these agree, then writes ``results/core.json`` and
``results/core.md`` and prints the markdown table. Targets are reported, never enforced:
only a disagreement between implementations exits non-zero. See benchmarks/README.md.

Run: ``python benchmarks/core.py`` (``make bench``), ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _harness
import numpy as np
from _harness import (
    MAX_REPEATS,
    Target,
    format_ms,
    machine_info,
    machine_line,
    positive_ints,
    summary,
    table,
    time_call,
    verdict,
    versions_line,
    write_results,
)

from advbudget import (
    budget_advantage,
    compute_advantages,
    dr_advantage,
    group_normalized_advantage,
    make_groups,
)

GROUP_SIZE = 8
BUDGET = 1.0
GRPO_EPS = 1e-6  # verl's epsilon
DEFAULT_SIZES = (4_096, 65_536, 1_048_576)
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "core.json"
LOOP_MAX_N = 65_536  # the Python loop takes seconds per call beyond this
LOOP_CHECK_N = 4_096
MIN_TIMED_SECONDS = 0.25  # per row: fast rows get more repeats than --repeats (see time_call)
AGREE_ATOL = 1e-5  # our paths vs each other and the floor
LOOP_ATOL = 1e-4  # the loop accumulates in a different order (torch.mean/std)
SPARSE_ID_STRIDE, SPARSE_ID_OFFSET = 1_009, 10**6  # sparse ids stay below 2**31 (jax int32)

# Targets, reported as booleans in the JSON (see README).
TARGET_CONTIGUOUS_VS_FLOOR = 1.3
TARGET_GROUPED_VS_CONTIGUOUS = 6.0
# Issue 23: shuffled int ids (equal sizes, factorised every call) within 2x of contiguous.
TARGET_SHUFFLED_VS_CONTIGUOUS = 2.0
TARGET_LOOP_SPEEDUP = 100.0
# Issue 21: gdpo with K = 3 components within 1.3x of three single grpo passes.
TARGET_GDPO_VS_GRPO_PASSES = 1.3
TARGET_N = 1_048_576
TARGET_LOOP_N = 65_536
TORCH_PROBE_SLOW_MS = 1.0  # torch.abs of 65,536 floats takes ~0.01 ms on a healthy pool

# Row names: the same path is timed on each backend (a column of the table).
P_BUDGET = "budget, contiguous"
P_GRPO = "grpo, contiguous"
P_DR = "dr, contiguous"
P_ALL = "all estimators (budget+grpo+dr), contiguous"
P_IDS = "budget, shuffled int ids (factorise each call)"
P_IDS_SPARSE = "budget, shuffled sparse int ids (dataset indices, factorise each call)"
P_MAKE_GROUPS = "make_groups, shuffled int ids (factorise only)"
P_PREBUILT = "budget, shuffled int ids (prebuilt groups)"
P_IDS_PERMUTED = "budget, shuffled int ids, slots (method='permuted', factorise each call)"
P_POSITIONS = "budget, declared slots (group_size=8, positions=, OpenRLHF layout)"
P_CODES = "budget, shuffled codes 0..M-1 (num_groups=M, no factorisation)"
P_UIDS_SHUFFLED = "budget, string uids (shuffled)"
P_UIDS_INTERLEAVED = "budget, string uids (interleaved, verl layout)"
P_GRPO_UIDS = "grpo, string uids (shuffled)"
P_FLOOR = "floor: hand-written reshape budget"
P_LOOP = "verl-style Python loop (grpo, string uids)"
P_GDPO = "gdpo, K = 3 components [N, 3], contiguous"
P_GRPO_PASSES = "3 x grpo, one per component, contiguous"
PATH_ORDER = (
    P_FLOOR,
    P_BUDGET,
    P_GRPO,
    P_DR,
    P_ALL,
    P_IDS,
    P_IDS_SPARSE,
    P_MAKE_GROUPS,
    P_PREBUILT,
    P_IDS_PERMUTED,
    P_POSITIONS,
    P_CODES,
    P_UIDS_INTERLEAVED,
    P_UIDS_SHUFFLED,
    P_GRPO_UIDS,
    P_LOOP,
    P_GRPO_PASSES,
    P_GDPO,
)
BACKEND_ORDER = ("numpy", "torch", "jax")


# -- data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One batch of N rewards in two layouts of the same groups.

    ``rewards`` is contiguous (rollouts ``8k..8k+7`` share a prompt); ``perm`` shuffles it,
    so a grouped result on the shuffled layout must equal ``contiguous_result[perm]``.
    """

    n: int
    rewards: np.ndarray
    perm: np.ndarray
    ids: np.ndarray  # int64 labels of the shuffled layout
    uids_interleaved: np.ndarray  # object array of uuid4 strings, verl's layout
    uids_shuffled: np.ndarray
    components: np.ndarray  # [N, 3] reward components (gdpo), contiguous groups

    @property
    def shuffled_rewards(self) -> np.ndarray:
        return self.rewards[self.perm]


def make_batch(n: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    num_groups = n // GROUP_SIZE
    # Mostly 0/1 verifier rewards, a quarter graded: both skipped and mixed groups occur.
    rewards = rng.integers(0, 2, n).astype(np.float32)
    graded = rng.random(n) < 0.25
    rewards[graded] = rng.random(int(graded.sum()), dtype=np.float32)
    perm = rng.permutation(n)
    labels = np.repeat(np.arange(num_groups, dtype=np.int64), GROUP_SIZE)
    # uuid4 strings from the seeded generator, so runs are reproducible.
    prompt_uids = np.array(
        [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(num_groups)],
        dtype=object,
    )
    uids = np.repeat(prompt_uids, GROUP_SIZE)
    components = np.stack(  # the rewards, a 0/1 format check, a graded one
        [rewards, rng.integers(0, 2, n).astype(np.float32), rng.random(n, dtype=np.float32)],
        axis=1,
    )
    return Batch(n, rewards, perm, labels[perm], uids, uids[perm], components)


# -- the floor and the Python loop (written without advbudget) --------------------------


def floor_budget_numpy_like(xp: Any, rewards: Any) -> Any:
    """The budget formula as a plain reshape, for numpy and jax.numpy (same API)."""
    rows = xp.reshape(rewards, (-1, GROUP_SIZE))
    gap = rows - xp.min(rows, axis=1, keepdims=True)
    total = xp.sum(gap, axis=1, keepdims=True)
    keep = total > 0
    advantages = xp.where(keep, BUDGET * gap / xp.where(keep, total, 1) - BUDGET / GROUP_SIZE, 0)
    return xp.reshape(advantages, (-1,))


def floor_budget_torch(rewards: Any) -> Any:
    import torch

    rows = rewards.reshape(-1, GROUP_SIZE)
    gap = rows - rows.amin(dim=1, keepdim=True)
    total = gap.sum(dim=1, keepdim=True)
    keep = total > 0
    advantages = torch.where(
        keep, BUDGET * gap / torch.where(keep, total, 1.0) - BUDGET / GROUP_SIZE, 0.0
    )
    return advantages.reshape(-1)


def python_loop_grpo(scores: Any, index: np.ndarray, eps: float = GRPO_EPS) -> Any:
    """GRPO with per-rollout Python loops, structured like verl's ``grpo`` estimator.

    Written for this benchmark (not copied): bucket the 0-d score tensors by uid, take
    torch.mean / torch.std of each bucket (mean 0, std 1 for a group of one), then
    normalise rollout by rollout.
    """
    import torch

    scores = scores.clone()
    buckets: dict[Any, list[Any]] = defaultdict(list)
    means: dict[Any, Any] = {}
    stds: dict[Any, Any] = {}
    with torch.no_grad():
        for i in range(scores.shape[0]):
            buckets[index[i]].append(scores[i])
        for uid, bucket in buckets.items():
            if len(bucket) == 1:
                means[uid], stds[uid] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                stacked = torch.stack(bucket)
                means[uid], stds[uid] = torch.mean(stacked), torch.std(stacked)
        for i in range(scores.shape[0]):
            scores[i] = (scores[i] - means[index[i]]) / (stds[index[i]] + eps)
    return scores


# -- backends -------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    name: str
    rewards: Callable[[np.ndarray], Any]  # float32 numpy -> backend array
    ids: Callable[[np.ndarray], Any]  # int64 numpy -> backend int array
    ready: Callable[[Any], Any]  # wait for asynchronous results (jax, CUDA)
    jit: Callable[[Callable[..., Any]], Callable[..., Any]]  # identity where eager
    floor: Callable[[Any], Any]
    peak_memory: Callable[[Callable[[], Any]], float | None] = lambda run: None  # MiB
    device: str = "cpu"


def load_backends(
    names: Sequence[str], device: str = "cpu"
) -> tuple[list[Backend], dict[str, str]]:
    """The requested backends that import; the others are reported, not fatal."""
    backends, missing = [], {}
    for name in names:
        try:
            backends.append(_LOADERS[name](device))
        except ImportError as error:
            missing[name] = f"not installed ({error})"
        except RuntimeError as error:  # e.g. no CUDA device for --device cuda
            missing[name] = f"unavailable on {device} ({error})"
    return backends, missing


def _numpy_peak_mib(run: Callable[[], Any]) -> float:
    """Peak memory allocated during one call: numpy reports its buffers to tracemalloc."""
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def _numpy_backend(device: str) -> Backend:
    if device != "cpu":
        raise RuntimeError("numpy runs on the CPU only")
    return Backend(
        name="numpy",
        rewards=lambda r: r,
        ids=lambda i: i,
        ready=lambda x: x,
        jit=lambda fn: fn,
        floor=lambda r: floor_budget_numpy_like(np, r),
        peak_memory=_numpy_peak_mib,
    )


def _torch_backend(device: str) -> Backend:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")

    def ready(x: Any) -> Any:
        if device == "cuda":
            torch.cuda.synchronize()
        return x

    def peak_mib(run: Callable[[], Any]) -> float | None:
        if device != "cuda":
            return None  # torch's CPU allocator keeps no statistics
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        ready(run())
        return (torch.cuda.max_memory_allocated() - base) / 2**20

    return Backend(
        name="torch",
        rewards=lambda r: torch.from_numpy(r.copy()).to(device),
        ids=lambda i: torch.from_numpy(i.copy()).to(device),
        ready=ready,
        jit=lambda fn: fn,
        floor=floor_budget_torch,
        peak_memory=peak_mib,
        device=device,
    )


def _jax_backend(device: str) -> Backend:
    import jax
    import jax.numpy as jnp

    target = jax.devices("gpu" if device == "cuda" else "cpu")[0]

    def peak_mib(run: Callable[[], Any]) -> float | None:
        stats = target.memory_stats()  # None on the CPU backend
        if not stats or "peak_bytes_in_use" not in stats:
            return None
        before = stats["peak_bytes_in_use"]
        jax.block_until_ready(run())
        after = target.memory_stats()["peak_bytes_in_use"]
        return max(after - before, 0) / 2**20  # only a new high water mark shows

    return Backend(
        name="jax",
        rewards=lambda r: jax.device_put(jnp.asarray(r), target),
        # jax's default int without x64
        ids=lambda i: jax.device_put(jnp.asarray(i.astype(np.int32)), target),
        ready=jax.block_until_ready,
        jit=jax.jit,
        floor=jax.jit(lambda r: floor_budget_numpy_like(jnp, r)),
        peak_memory=peak_mib,
        device=device,
    )


_LOADERS: dict[str, Callable[[str], Backend]] = {
    "numpy": _numpy_backend,
    "torch": _torch_backend,
    "jax": _jax_backend,
}


# -- what is timed -------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One timed path: a zero-argument call on prepared inputs."""

    run: Callable[[], Any]
    mode: str  # "jit" or "eager"
    warmup: int = 2


def contiguous_fns(backend: Backend) -> dict[str, Callable[[Any], Any]]:
    """The floor and our contiguous paths (jitted on jax), each ``rewards -> result``."""

    def all_estimators(r: Any) -> Any:
        return (
            budget_advantage(r, group_size=GROUP_SIZE),
            group_normalized_advantage(r, group_size=GROUP_SIZE),
            dr_advantage(r, group_size=GROUP_SIZE),
        )

    return {
        P_FLOOR: backend.floor,
        P_BUDGET: backend.jit(lambda r: budget_advantage(r, group_size=GROUP_SIZE)),
        P_GRPO: backend.jit(lambda r: group_normalized_advantage(r, group_size=GROUP_SIZE)),
        P_DR: backend.jit(lambda r: dr_advantage(r, group_size=GROUP_SIZE)),
        P_ALL: backend.jit(all_estimators),
    }


def path_calls(backend: Backend, batch: Batch) -> dict[str, Call]:
    """Every path timed for one backend and batch; the correctness check runs the same."""
    contiguous = backend.rewards(batch.rewards)
    shuffled = backend.rewards(batch.shuffled_rewards)
    ids = backend.ids(batch.ids)
    groups = make_groups(shuffled, group_ids=ids)
    uids_shuffled, uids_interleaved = batch.uids_shuffled, batch.uids_interleaved
    mode = "jit" if backend.name == "jax" else "eager"
    calls = {
        path: Call(lambda fn=fn: fn(contiguous), mode)
        for path, fn in contiguous_fns(backend).items()
    }
    # Labels are factorised eagerly (the group count must be concrete): no jit here.
    calls[P_IDS] = Call(lambda: budget_advantage(shuffled, group_ids=ids), "eager")
    # The same groups labelled by spread-out ints (e.g. dataset indices): not a small range.
    sparse_ids = backend.ids(batch.ids * SPARSE_ID_STRIDE + SPARSE_ID_OFFSET)
    calls[P_IDS_SPARSE] = Call(lambda: budget_advantage(shuffled, group_ids=sparse_ids), "eager")
    # The groups alone: group_index() would add numpy's inverse, which the row above skips.
    calls[P_MAKE_GROUPS] = Call(lambda: make_groups(shuffled, group_ids=ids), "eager")
    calls[P_PREBUILT] = Call(lambda: budget_advantage(shuffled, groups=groups), "eager")
    # The same ids through a sorted slot order and Permuted's gather, not the scatter ops.
    calls[P_IDS_PERMUTED] = Call(
        lambda: budget_advantage(
            shuffled, groups=make_groups(shuffled, group_ids=ids, method="permuted")
        ),
        "eager",
    )
    # Rollout k of the shuffled batch is slot perm[k] of the contiguous [M, 8] block.
    slots = backend.ids(batch.perm)
    calls[P_POSITIONS] = Call(
        lambda: budget_advantage(
            shuffled, groups=make_groups(shuffled, group_size=GROUP_SIZE, positions=slots)
        ),
        "eager",
    )
    # Codes with a static group count skip factorisation, so jax can jit the grouped path.
    num_groups = batch.n // GROUP_SIZE

    def from_codes(r: Any, codes: Any) -> Any:
        coded = make_groups(r, group_ids=codes, num_groups=num_groups)
        return budget_advantage(r, groups=coded)

    coded_fn = backend.jit(from_codes)
    calls[P_CODES] = Call(lambda: coded_fn(shuffled, ids), mode)
    if backend.name in ("numpy", "torch"):  # string labels with host-array rewards
        calls[P_UIDS_SHUFFLED] = Call(
            lambda: budget_advantage(shuffled, group_ids=uids_shuffled), "eager"
        )
        calls[P_UIDS_INTERLEAVED] = Call(
            lambda: budget_advantage(contiguous, group_ids=uids_interleaved), "eager"
        )
        calls[P_GRPO_UIDS] = Call(
            lambda: group_normalized_advantage(shuffled, group_ids=uids_shuffled), "eager"
        )
    components = backend.rewards(batch.components)
    columns = [backend.rewards(np.ascontiguousarray(c)) for c in batch.components.T]
    gdpo = backend.jit(lambda m: compute_advantages(m, "gdpo", group_size=GROUP_SIZE).advantages)
    passes = backend.jit(
        lambda cs: [group_normalized_advantage(c, group_size=GROUP_SIZE) for c in cs]
    )
    calls[P_GDPO] = Call(lambda: gdpo(components), mode)
    calls[P_GRPO_PASSES] = Call(lambda: passes(columns), mode)
    if backend.name == "torch" and backend.device == "cpu" and batch.n <= LOOP_MAX_N:
        # No warm-up: nothing to compile or cache, and each call is slow.
        calls[P_LOOP] = Call(lambda: python_loop_grpo(shuffled, uids_shuffled), "eager", warmup=0)
    return calls


def skipped_rows(backend: Backend, n: int) -> list[dict[str, Any]]:
    if backend.name != "torch" or backend.device != "cpu" or n <= LOOP_MAX_N:
        return []
    reason = f"too slow beyond N = {LOOP_MAX_N:,}"
    return [{"backend": "torch", "path": P_LOOP, "n": n, "median_ms": None, "repeats": 0,
             "mode": "eager", "skipped": reason}]  # fmt: skip


# -- correctness ----------------------------------------------------------------------


def check_agreement(backend: Backend, batch: Batch) -> list[str]:
    """Disagreements of our paths with the floor and each other (empty if none)."""
    calls = path_calls(backend, batch)
    floor = np.asarray(calls[P_FLOOR].run())
    grpo = np.asarray(calls[P_GRPO].run())
    dr = np.asarray(calls[P_DR].run())
    perm = batch.perm  # shuffled-layout results must equal contiguous ones [perm]
    expected = {
        P_BUDGET: floor,
        P_ALL: np.stack([floor, grpo, dr]),
        P_IDS: floor[perm],
        P_IDS_SPARSE: floor[perm],
        P_PREBUILT: floor[perm],
        P_IDS_PERMUTED: floor[perm],
        P_POSITIONS: floor[perm],
        P_CODES: floor[perm],
        P_UIDS_SHUFFLED: floor[perm],
        P_UIDS_INTERLEAVED: floor,
        P_GRPO_UIDS: grpo[perm],
    }
    # gdpo is the three grpo passes, summed and whitened over the batch (verl's constants).
    total = np.sum([np.asarray(a, np.float64) for a in calls[P_GRPO_PASSES].run()], axis=0)
    expected[P_GDPO] = (total - total.mean()) / np.sqrt(total.var(ddof=1) + 1e-8)
    problems = []
    for path, want in expected.items():
        if path not in calls:
            continue
        result = calls[path].run()
        got = np.stack([np.asarray(x) for x in result]) if path == P_ALL else np.asarray(result)
        got = got.astype(np.float64)
        if got.shape != want.shape or not np.allclose(got, want, atol=AGREE_ATOL):
            worst = float(np.max(np.abs(got - want))) if got.shape == want.shape else math.nan
            problems.append(
                f"{backend.name} N={batch.n}: {path!r} disagrees with the reference "
                f"(max abs diff {worst:.3g}, atol {AGREE_ATOL})"
            )
    return problems


def check_loop(backend: Backend, batch: Batch) -> list[str]:
    """The Python loop's GRPO must equal ours with the same string uids."""
    shuffled = backend.rewards(batch.shuffled_rewards)
    got = np.asarray(python_loop_grpo(shuffled, batch.uids_shuffled))
    ours = np.asarray(
        group_normalized_advantage(shuffled, group_ids=batch.uids_shuffled, eps=GRPO_EPS)
    )
    if np.allclose(got, ours, atol=LOOP_ATOL):
        return []
    worst = float(np.max(np.abs(got - ours)))
    return [
        f"torch N={batch.n}: the Python loop's GRPO disagrees with "
        f"group_normalized_advantage (max abs diff {worst:.3g}, atol {LOOP_ATOL})"
    ]


# -- timing ---------------------------------------------------------------------------


def default_repeats(n: int) -> int:
    return 20 if n <= 4_096 else 10 if n <= 65_536 else 5


def default_loop_repeats(n: int) -> int:
    return 5 if n <= 4_096 else 3


# -- ratios and report ----------------------------------------------------------------


# (name, numerator path, denominator path, target, whether the ratio must stay below it)
PER_BACKEND_RATIOS = (
    ("contiguous / floor", P_BUDGET, P_FLOOR, TARGET_CONTIGUOUS_VS_FLOOR, True),
    (
        "shuffled int ids, equal sizes (factorise each call) / contiguous",
        P_IDS,
        P_BUDGET,
        TARGET_SHUFFLED_VS_CONTIGUOUS,
        True,
    ),
    (
        "shuffled int ids, equal sizes (factorise each call) / floor",
        P_IDS,
        P_FLOOR,
        TARGET_SHUFFLED_VS_CONTIGUOUS,
        True,
    ),
    (
        "grouped int ids (prebuilt groups) / contiguous",
        P_PREBUILT,
        P_BUDGET,
        TARGET_GROUPED_VS_CONTIGUOUS,
        True,
    ),
    (
        "grouped codes (num_groups=M; jitted on jax) / contiguous",
        P_CODES,
        P_BUDGET,
        TARGET_GROUPED_VS_CONTIGUOUS,
        True,
    ),
    (
        "gdpo, K = 3 / three grpo passes",
        P_GDPO,
        P_GRPO_PASSES,
        TARGET_GDPO_VS_GRPO_PASSES,
        True,
    ),
)
LOOP_RATIOS = (
    ("Python loop grpo / our grpo with string uids (speed-up)", P_LOOP, P_GRPO_UIDS,
     TARGET_LOOP_SPEEDUP, False),
    ("Python loop grpo / our budget with string uids (speed-up)", P_LOOP, P_UIDS_SHUFFLED,
     TARGET_LOOP_SPEEDUP, False),
)  # fmt: skip


def compute_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ratios against the targets; at the largest measured N when a target N was not run."""
    sizes = sorted({r["n"] for r in results if r["median_ms"] is not None})
    if not sizes:
        return []
    big = TARGET_N if TARGET_N in sizes else sizes[-1]
    timed_loops = [r["n"] for r in results if r["path"] == P_LOOP and r["median_ms"] is not None]
    loop_sizes = [n for n in sizes if n <= TARGET_LOOP_N and n in timed_loops]
    cases = [([r for r in results if r["n"] == big], PER_BACKEND_RATIOS)]
    if loop_sizes:
        loop_n = TARGET_LOOP_N if TARGET_LOOP_N in loop_sizes else loop_sizes[-1]
        torch_rows = [r for r in results if r["n"] == loop_n and r["backend"] == "torch"]
        cases.append((torch_rows, LOOP_RATIOS))
    ratios = []
    for rows, specs in cases:
        rows.sort(key=lambda r: BACKEND_ORDER.index(r["backend"]))
        targets = [Target(*spec) for spec in specs]
        ratios += _harness.compute_ratios(rows, targets, case=("backend", "n"))
    return ratios


def markdown_report(
    results: list[dict[str, Any]], ratios: list[dict[str, Any]], machine: dict[str, Any]
) -> str:
    backends = [b for b in BACKEND_ORDER if any(r["backend"] == b for r in results)]
    cells = {(r["backend"], r["path"], r["n"]): r for r in results}
    device = machine.get("device", "cpu")
    versions = versions_line(machine, ("numpy", "torch", "jax", "advbudget"))
    lines = [
        "# advbudget core benchmark" + ("" if device == "cpu" else f" ({device})"),
        "",
        machine_line(machine),
        "",
        f"{versions}" + (f" · devices {machine['jax_devices']}" if device != "cpu" else ""),
        "",
        "Median wall time per call in ms (G = 8, float32). jax: jitted unless marked "
        "*eager* (factorising labels needs concrete values; codes with num_groups=M jit).",
        "",
        *_torch_warning(machine),
    ]
    rows = []
    for n in sorted({r["n"] for r in results}):
        for path in PATH_ORDER:
            row = [cells.get((b, path, n)) for b in backends]
            if not any(row):
                continue
            texts = []
            for backend, cell in zip(backends, row, strict=True):
                if cell is None:
                    texts.append("—")
                    continue
                text = format_ms(cell["median_ms"])
                if backend == "jax" and cell["mode"] == "eager":
                    text += " *eager*"
                texts.append(text)
            rows.append([f"{n:,}", path, *texts])
    lines += table(["N", "path", *backends], rows, "rl" + "r" * len(backends))
    lines += ["", "## Ratios", ""]
    lines += table(
        ["ratio", "backend", "N", "value", "target", "meets target"],
        (
            [r["name"], r["backend"], f"{r['n']:,}", f"{r['ratio']:.2f}", r["target"],
             verdict(r["meets_target"], no="**no**")]
            for r in ratios
        ),
        "llrrll",
    )  # fmt: skip
    return "\n".join(lines + _memory_table(results, backends)) + "\n"


def _memory_table(results: list[dict[str, Any]], backends: list[str]) -> list[str]:
    """Peak memory per call at the largest N, where the backend can measure it."""
    measured = [r for r in results if r.get("peak_mib") is not None]
    if not measured:
        return []
    n = max(r["n"] for r in measured)
    shown = [b for b in backends if any(r["backend"] == b for r in measured)]
    cells = {(r["backend"], r["path"]): r["peak_mib"] for r in measured if r["n"] == n}
    lines = [
        "",
        f"## Peak memory per call (MiB, N = {n:,})",
        "",
        "Allocated during one call on top of the inputs: numpy via tracemalloc, torch via "
        "`torch.cuda.max_memory_allocated` (CUDA only), jax via the device's memory stats "
        "(GPU only). The rewards themselves take " + f"{n * 4 / 2**20:.1f} MiB (float32).",
        "",
    ]
    rows = []
    for path in PATH_ORDER:
        row = [cells.get((b, path)) for b in shown]
        if any(v is not None for v in row):
            rows.append([path, *("—" if v is None else f"{v:.1f}" for v in row)])
    return lines + table(["path", *shown], rows, "l" + "r" * len(shown))


def _torch_warning(machine: dict[str, Any]) -> list[str]:
    probes = machine.get("torch_abs_65536_ms") or {}
    slow = {when: ms for when, ms in probes.items() if ms >= TORCH_PROBE_SLOW_MS}
    if not slow:
        return []
    seen = ", ".join(f"{ms:.2f} ms at the {when}" for when, ms in slow.items())
    return [
        f"**Warning:** torch.abs of 65,536 floats took {seen} (normally ~0.01 ms) with "
        f"{machine['torch_threads']} torch threads: torch's intra-op threads wake slowly on "
        "this machine, so torch rows above 32,768 elements may time thread scheduling. "
        "Rerun with `--torch-threads 1`.",
        "",
    ]


def core_machine_info(
    backends: list[Backend], missing: dict[str, str], device: str
) -> dict[str, Any]:
    names = {b.name for b in backends}
    extra: dict[str, Any] = {"device": device, "missing_backends": missing}
    if "torch" in names:
        extra["torch_abs_65536_ms"] = {"start": torch_parallel_probe_ms()}
    if "jax" in names:
        extra["jax_devices"] = [str(d) for d in sys.modules["jax"].devices()]
    return machine_info(("numpy", "torch", "jax", "array-api-compat"), **extra)


def torch_parallel_probe_ms() -> float:
    """Median ms of torch.abs on 65,536 floats: above ATen's grain size (32,768), so it
    runs on the intra-op thread pool. ~0.01 ms normally; ms here means torch timings
    measure thread wake-ups (seen on small VMs), not the code."""
    import torch

    x = torch.rand(65_536)
    seconds = []
    for _ in range(21):
        start = time.perf_counter()
        torch.abs(x)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1e3


# -- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=positive_ints(GROUP_SIZE),
        default=None,
        help="rollout counts N, comma-separated (default 4096,65536,1048576; --quick: 4096,65536)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed calls per case (default: 20 at N <= 4096, 10 at N <= 65536, 5 above; "
        "the Python loop uses at most 5 / 3)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small sizes, 3 repeats, 1 loop call"
    )
    parser.add_argument(
        "--backends",
        default=",".join(BACKEND_ORDER),
        help="comma-separated subset of numpy,torch,jax (default: all three)",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch.set_num_threads (default 1: single-thread numbers, comparable across "
        "machines and free of the thread wake-up stalls of small VMs; 0: torch's own choice)",
    )
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=MIN_TIMED_SECONDS,
        help="repeat fast rows until this much time is timed, up to "
        f"{MAX_REPEATS} calls (default {MIN_TIMED_SECONDS}; 0 with --quick)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where torch and jax arrays live (cuda: see benchmarks/gpu.sh)",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON result path")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = list(DEFAULT_SIZES[:2] if args.quick else DEFAULT_SIZES)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats: expected a positive int")
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(args.backends) - set(BACKEND_ORDER))
    if unknown:
        parser.error(f"--backends: unknown {unknown}; expected some of {BACKEND_ORDER}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    args = parse_args(argv)
    console = Console(stderr=True)  # progress on stderr, the table on stdout
    backends, missing = load_backends(args.backends, args.device)
    by_name = {b.name: b for b in backends}
    if "torch" in by_name and args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    machine = core_machine_info(backends, missing, args.device)

    def repeats_for(n: int) -> int:
        if args.repeats is not None:
            return args.repeats
        return 3 if args.quick else default_repeats(n)

    def loop_repeats_for(n: int) -> int:
        return 1 if args.quick else min(repeats_for(n), default_loop_repeats(n))

    console.print(f"[bold]advbudget core benchmark[/] sizes={args.sizes} backends={list(by_name)}")
    batches = {n: make_batch(n, args.seed + i) for i, n in enumerate(args.sizes)}

    # Correctness first: timing code that computes something else would be meaningless.
    problems: list[str] = []
    for backend in backends:
        for batch in batches.values():
            problems += check_agreement(backend, batch)
    if "torch" in by_name and args.device == "cpu":
        problems += check_loop(by_name["torch"], make_batch(LOOP_CHECK_N, args.seed + 100))
    if problems:
        for problem in problems:
            console.print(f"[red]{problem}[/]")
        return 1
    console.print("correctness: all paths agree with the floor and each other")

    results: list[dict[str, Any]] = []
    jobs: list[tuple[Backend, int, str, Call, int]] = []
    for n, batch in batches.items():
        for backend in backends:
            results += skipped_rows(backend, n)
            for path, call in path_calls(backend, batch).items():
                repeats = loop_repeats_for(n) if path == P_LOOP else repeats_for(n)
                jobs.append((backend, n, path, call, repeats))
    min_seconds = 0.0 if args.quick else args.min_seconds
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("timing", total=len(jobs))
        for backend, n, path, call, repeats in jobs:
            progress.update(task, description=f"{backend.name:5} N={n:>9,} {path}")
            seconds = time_call(
                call.run,
                repeats=repeats,
                warmup=call.warmup,
                min_seconds=min_seconds,
                ready=backend.ready,
            )
            results.append(
                {
                    "backend": backend.name,
                    "path": path,
                    "n": n,
                    **summary(seconds),
                    "mode": call.mode,
                    # One more, untimed call: tracing allocations would skew the timing.
                    "peak_mib": None if path == P_LOOP else backend.peak_memory(call.run),
                }
            )
            progress.advance(task)

    if "torch" in by_name:  # the thread pool can turn slow mid-run: probe again
        machine["torch_abs_65536_ms"]["end"] = torch_parallel_probe_ms()
    ratios = compute_ratios(results)
    report = markdown_report(results, ratios, machine)
    payload = {
        "machine": machine,
        "config": {
            "group_size": GROUP_SIZE,
            "dtype": "float32",
            "device": args.device,
            "sizes": args.sizes,
            "seed": args.seed,
            "quick": args.quick,
            "timer": "time.perf_counter, median of repeats after 2 warm-up calls",
            "min_timed_seconds": min_seconds,
        },
        "results": results,
        "ratios": ratios,
    }
    write_results(args.output, payload, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
