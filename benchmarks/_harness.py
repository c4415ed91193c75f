"""The harness every benchmark script shares: timing, ratios against targets, markdown
tables, the machine record and the JSON + markdown output.

The scripts run as scripts (``python benchmarks/core.py``), so this folder is
``sys.path[0]`` and they import this module by name; it puts the checkout's advbudget
ahead of an installed one, so that a script measures the code beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))

import advbudget  # noqa: E402
from advbudget._io import atomic_write  # noqa: E402
from advbudget.lab import _machine  # noqa: E402

MAX_REPEATS = 200

# -- timing ---------------------------------------------------------------------------


def time_call(
    run: Callable[..., Any],
    *,
    repeats: int,
    warmup: int = 1,
    min_seconds: float = 0.0,
    max_repeats: int = MAX_REPEATS,
    ready: Callable[[Any], Any] | None = None,
    fresh: Callable[[], Any] | None = None,
    pause_gc: bool = False,
    stop_above: float | None = None,
) -> list[float]:
    """Seconds (``time.perf_counter``) of each of ``repeats`` timed calls of ``run``, after
    ``warmup`` untimed ones (jit compilation, allocator, caches).

    - ``ready``: applied to each result inside the timing, to wait for asynchronous work
      (jax's ``block_until_ready``, a CUDA synchronize);
    - ``min_seconds``: a call faster than the last warm-up suggests is repeated until this
      much has been timed, at most ``max_repeats`` calls: a median of five ~1 ms calls
      moves by 2x between runs on a busy machine;
    - ``fresh``: made before each call, untimed, and passed to it (``run(fresh())``): a
      step that mutates its input gets a new one every time;
    - ``pause_gc``: the garbage collector runs before each call and is off during it, as
      in ``timeit``: a collection triggered inside a call walks every object of the
      process and costs whichever path happens to trigger it;
    - ``stop_above``: stop once every call so far took longer than this (in seconds).
    """

    def once() -> float:
        args = () if fresh is None else (fresh(),)
        if pause_gc:
            gc.collect()
            gc.disable()
        try:
            start = time.perf_counter()
            result = run(*args)
            if ready is not None:
                ready(result)
            return time.perf_counter() - start
        finally:
            if pause_gc:
                gc.enable()

    per_call = math.inf
    for _ in range(warmup):
        per_call = once()
    if warmup and min_seconds > 0 and per_call > 0:
        repeats = max(repeats, min(max_repeats, math.ceil(min_seconds / per_call)))
    seconds: list[float] = []
    for _ in range(repeats):
        seconds.append(once())
        if stop_above is not None and min(seconds) > stop_above:
            break
    return seconds


def time_side_by_side(
    runs: Mapping[str, Callable[[], Any]], *, repeats: int, min_seconds: float = 0.0
) -> dict[str, list[float]]:
    """Seconds of each of ``runs``' calls, taken in rounds (one call of each path per
    round, the order turned by one each round) after one untimed call each: paths whose
    ratio is judged see the same machine (a neighbour's load, the CPU's clock, the
    allocator's free memory) instead of whichever stretch of the run each got alone. At
    least ``repeats`` rounds, more (at most ``MAX_REPEATS``) until the slowest path has
    ``min_seconds`` timed."""
    names = list(runs)
    seconds: dict[str, list[float]] = {name: [] for name in names}

    def once(name: str) -> float:
        start = time.perf_counter()
        runs[name]()
        return time.perf_counter() - start

    slowest = max(once(name) for name in names)
    if min_seconds > 0 and slowest > 0:
        repeats = max(repeats, min(MAX_REPEATS, math.ceil(min_seconds / slowest)))
    for round_number in range(repeats):
        turn = round_number % len(names)
        for name in names[turn:] + names[:turn]:
            seconds[name].append(once(name))
    return seconds


def summary(seconds: Sequence[float]) -> dict[str, Any]:
    """The median and fastest call in ms and the number of calls timed."""
    return {
        "median_ms": statistics.median(seconds) * 1e3,
        "min_ms": min(seconds) * 1e3,
        "repeats": len(seconds),
    }


def size_row(n: int, path: str, run: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """One timing of a benchmark over sizes: ``run`` at size ``n`` (``repeats`` calls, at
    least 0.2 s timed in all), its :func:`summary` under ``n`` and ``path``."""
    return {"n": n, "path": path, **summary(time_call(run, repeats=repeats, min_seconds=0.2))}


# -- ratios ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The ratio of two paths' median times, and the bound it is judged against: at most
    ``bound`` (a cost, ``at_most``) or at least (a speed-up). Reported, never enforced."""

    name: str
    numerator: str
    denominator: str
    bound: float | None = None
    at_most: bool = True

    def text(self) -> str | None:
        if self.bound is None:
            return None
        return f"{'<=' if self.at_most else '>='} {self.bound:g}"

    def meets(self, value: float) -> bool | None:
        if self.bound is None:
            return None
        return value <= self.bound if self.at_most else value >= self.bound


def compute_ratios(
    results: Iterable[Mapping[str, Any]],
    targets: Iterable[Target],
    *,
    case: Sequence[str],
    judged: Callable[[Mapping[str, Any]], bool] = lambda case: True,
) -> list[dict[str, Any]]:
    """Every target's ratio in every case where both of its paths were timed.

    A case is the results that share the values of the ``case`` fields (``("n",
    "length")``), in the order first seen; each row holds its ``path`` and ``median_ms``
    (None: not run). A ratio row: ``name``, the case fields, ``numerator``, ``denominator``,
    ``ratio``, ``target`` (``"<= 2"``, or None) and ``meets_target`` (None without a bound,
    or where ``judged(case)`` is False: a size the target is not set at).
    """
    timed: dict[tuple[Any, ...], dict[str, float]] = {}
    for row in results:
        if row.get("median_ms") is not None:
            key = tuple(row[field] for field in case)
            timed.setdefault(key, {})[row["path"]] = row["median_ms"]
    targets = list(targets)
    ratios = []
    for key, medians in timed.items():
        fields = dict(zip(case, key, strict=True))
        for target in targets:
            if target.numerator not in medians or target.denominator not in medians:
                continue
            value = medians[target.numerator] / medians[target.denominator]
            ratios.append(
                {
                    "name": target.name,
                    **fields,
                    "numerator": target.numerator,
                    "denominator": target.denominator,
                    "ratio": value,
                    "target": target.text(),
                    "meets_target": target.meets(value) if judged(fields) else None,
                }
            )
    return ratios


# -- markdown -------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str) -> list[str]:
    """A markdown table; ``align`` has a letter per column: ``l``, or ``r`` (numbers)."""
    if len(align) != len(header):
        raise ValueError(f"align: expected {len(header)} letters, got {align!r}")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def timings_by_size(
    results: Sequence[Mapping[str, Any]], ratios: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The two tables of a benchmark over sizes ``n``: each path's median, then each ratio
    against its target."""
    return [
        *table(
            ("N", "path", "median ms"),
            [(f"{r['n']:,}", r["path"], format_ms(r["median_ms"])) for r in results],
            "rlr",
        ),
        "",
        *table(
            ("ratio", "N", "value", "target", "meets"),
            [
                (
                    r["name"],
                    f"{r['n']:,}",
                    f"{r['ratio']:.2f}",
                    r["target"] or "-",  # a ratio reported without a bound
                    verdict(r["meets_target"]),
                )
                for r in ratios
            ],
            "lrrll",
        ),
        "",
    ]


def format_ms(ms: float | None) -> str:
    """Three significant digits, whole ms from 100 ms; ``skipped`` for None."""
    if ms is None:
        return "skipped"
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def verdict(meets: bool | None, no: str = "no") -> str:
    return "-" if meets is None else "yes" if meets else no


# -- the machine ----------------------------------------------------------------------


def machine_info(packages: Sequence[str], **extra: Any) -> dict[str, Any]:
    """:func:`advbudget.lab._machine.machine_info` for ``packages`` (date, platform, CPU model
    and vector flags, CPU count, load average at the start, Python, versions, and torch's
    threads when torch is imported: call it after setting them), with the advbudget
    measured (its version and folder) and ``extra``."""
    info = _machine.machine_info(("advbudget", *packages))
    info["packages"]["advbudget"] = advbudget.__version__
    info["advbudget_path"] = str(Path(advbudget.__file__).resolve().parent)
    info.update(extra)
    return info


def machine_line(machine: Mapping[str, Any]) -> str:
    """``date · platform · N CPUs (load ...) · torch threads T · python X``."""
    load = machine.get("load_average")
    parts = [
        machine["date"],
        machine["platform"],
        f"{machine['cpu_count']} CPUs (load "
        + (" ".join(f"{x:.2f}" for x in load) if load else "n/a")
        + ")",
    ]
    if machine.get("torch_threads") is not None:
        parts.append(f"torch threads {machine['torch_threads']}")
    parts.append(f"python {machine['python']}")
    return " · ".join(parts)


def versions_line(machine: Mapping[str, Any], names: Sequence[str]) -> str:
    """``name version · ...`` for the ``names`` installed."""
    packages = machine["packages"]
    return " · ".join(f"{name} {packages[name]}" for name in names if packages.get(name))


def header(title: str, machine: Mapping[str, Any], versions: Sequence[str]) -> list[str]:
    """A report's first lines: its title, :func:`machine_line` and :func:`versions_line`."""
    return [f"# {title}", "", machine_line(machine), "", versions_line(machine, versions), ""]


# -- command line and output ----------------------------------------------------------


def positive_ints(multiple_of: int = 1) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated positive integers (``4_096`` allowed), each a
    multiple of ``multiple_of``."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
        except ValueError:
            values = []
        if not values or any(v <= 0 or v % multiple_of for v in values):
            what = "integers" if multiple_of == 1 else f"multiples of {multiple_of}"
            raise argparse.ArgumentTypeError(
                f"expected positive {what} separated by commas, got {text!r}"
            )
        return values

    return parse


def size_arguments(
    description: str, name: str, *, sizes: Sequence[int], multiple_of: int, repeats: int
) -> argparse.ArgumentParser:
    """The command line of a benchmark over sizes: ``--sizes``, ``--repeats`` and
    ``--output`` (default ``results/<name>.json``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", type=positive_ints(multiple_of), default=list(sizes))
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / f"{name}.json"
    )
    return parser


def write_size_report(
    output: Path,
    title: str,
    intro: str,
    machine: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    targets: Sequence[Target],
    problems: Sequence[str],
    *,
    judged_n: int,
) -> int:
    """The report of a benchmark over sizes (numpy): the ratios against their targets,
    judged at ``n == judged_n``, the two tables under ``title`` and ``intro``, and the
    JSON payload (:func:`write_results`)."""
    ratios = compute_ratios(
        results, targets, case=("n",), judged=lambda case: case["n"] == judged_n
    )
    lines = [*header(title, machine, ("numpy",)), intro, "", *timings_by_size(results, ratios)]
    payload = {"machine": machine, "results": results, "ratios": ratios, "problems": problems}
    return write_results(output, payload, "\n".join(lines))


def write_results(output: Path, payload: Mapping[str, Any], report: str) -> int:
    """``output`` (the JSON payload) and the markdown ``report`` beside it (``.md``), each
    written atomically; the report goes to stdout, the payload's ``problems`` (paths that
    disagreed) to stderr. Returns the exit status: 1 when there are problems."""
    atomic_write(output, json.dumps(payload, indent=2, allow_nan=False) + "\n")
    atomic_write(output.with_suffix(".md"), report)
    print(report)
    print(f"wrote {output} and {output.with_suffix('.md')}", file=sys.stderr)
    problems = payload.get("problems") or []
    for problem in problems:
        print(f"DISAGREEMENT: {problem}", file=sys.stderr)
    return 1 if problems else 0
