"""``advbudget compare RUN ...``: evaluated runs side by side, with deltas against the first.

Each RUN is an ``advbudget eval`` ``scores.json``, or a folder holding one (directly or in
``eval/``, where the examples write it). One table per metric (avg@n, the paper's
Qwen3-8B number, and pass@k, its Llama-3.2-3B number), one row per benchmark and the mean
over benchmarks, in points; every run after the first also shows its difference from the
first, and the last column the largest gains the paper reports for budgeting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from advbudget.checks import finite, int_at_least

from ..eval._run import SCORES
from ._errors import CommandError, cli_errors

AVERAGE = "average"
METRICS = ("both", "avg", "pass")
# The paper's largest gains of budgeting over a baseline, in points (arXiv 2611.05942).
PAPER_MAX_GAINS = {"amc23": 12.50, "aime24": 10.00, "aime25": 10.00}
PAPER_NOTE = (
    "paper: the largest gains of budgeting over any baseline (arXiv 2611.05942); on "
    "Qwen3-8B GRPO its average rose +6.66 points with KL and +5.38 without."
)


@dataclass(frozen=True)
class BenchmarkResult:
    avg: float
    samples_per_problem: int
    pass_at: dict[int, float]


@dataclass(frozen=True)
class RunScores:
    """One run's ``scores.json``: ``benchmarks`` in file order, ``average`` last."""

    label: str
    path: Path
    benchmarks: dict[str, BenchmarkResult]


def find_scores(run: Path) -> Path:
    """The ``scores.json`` of ``run``: the file, ``run/scores.json`` or ``run/eval/scores.json``."""
    if run.is_file():
        return run
    if not run.exists():
        raise CommandError(f"RUN: {run}: no such file or folder", code=2)
    candidates = [run / SCORES, run / "eval" / SCORES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = " or ".join(str(c) for c in candidates)
    raise CommandError(
        f"RUN: {run}: no scores.json (looked for {looked}); evaluate the run first "
        f"(advbudget eval --model ... --output-dir {run / 'eval'})",
        code=2,
    )


def _label(run: Path, scores: Path) -> str:
    folder = run if run.is_dir() else scores.parent
    if folder.name == "eval" and folder.parent.name:
        folder = folder.parent  # <run>/eval/scores.json: the run's name
    return folder.resolve().name or str(run)


def parse_scores(data: Any) -> dict[str, BenchmarkResult]:
    """The per-benchmark results of a ``scores.json`` document; raises ``ValueError``
    naming the first field that is missing or wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), dict):
        raise ValueError("expected an object with a 'benchmarks' object")
    results: dict[str, BenchmarkResult] = {}
    for name, entry in data["benchmarks"].items():
        where = f"benchmarks.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object, got {type(entry).__name__}")
        n = int_at_least(f"{where}.samples_per_problem", entry.get("samples_per_problem"), 1)
        pass_at = entry.get("pass_at", {})
        if not isinstance(pass_at, dict):
            raise ValueError(f"{where}.pass_at: expected an object, got {pass_at!r}")
        passes = {}
        for k, value in pass_at.items():
            if not str(k).isdigit():
                raise ValueError(f"{where}.pass_at: expected integer keys, got {k!r}")
            passes[int(k)] = finite(f"{where}.pass_at.{k}", value)
        results[str(name)] = BenchmarkResult(
            avg=finite(f"{where}.avg", entry.get("avg")), samples_per_problem=n, pass_at=passes
        )
    if not results:
        raise ValueError("benchmarks: expected at least one benchmark, got none")
    return results


def load_run(run: Path) -> RunScores:
    """Find, read and check one run's ``scores.json``."""
    path = find_scores(run)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise CommandError(f"{path}: not a text file ({error.reason})") from None
    except json.JSONDecodeError as error:
        raise CommandError(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    try:
        benchmarks = parse_scores(data)
    except ValueError as error:
        raise CommandError(f"{path}: not a scores.json of advbudget eval: {error}") from None
    return RunScores(_label(run, path), path, benchmarks)


def _unique_labels(runs: list[RunScores]) -> list[str]:
    labels: list[str] = []
    for run in runs:
        label, copy = run.label, 2
        while label in labels:
            label, copy = f"{run.label} #{copy}", copy + 1
        labels.append(label)
    return labels


def _benchmark_order(runs: list[RunScores]) -> list[str]:
    names: list[str] = []
    for run in runs:
        names += [name for name in run.benchmarks if name not in names and name != AVERAGE]
    return [*names, AVERAGE] if any(AVERAGE in run.benchmarks for run in runs) else names


def _common_k(runs: list[RunScores]) -> int | None:
    """pass@k to show: 8 (the paper's) when every run has it, else the largest k all have."""
    sets = [set(r.pass_at) for run in runs for r in run.benchmarks.values()]
    common = set.intersection(*sets) if sets else set()
    if not common:
        return None
    return 8 if 8 in common else max(common)


def _value(run: RunScores, benchmark: str, k: int | None) -> float | None:
    result = run.benchmarks.get(benchmark)
    if result is None:
        return None
    return 100 * (result.avg if k is None else result.pass_at[k])


def comparison_table(
    runs: list[RunScores], k: int | None = None, *, numbered: bool = False
) -> Table:
    """One metric (avg@n when ``k`` is None, else pass@k) for every run, in points;
    ``numbered``: the columns are headed ``#1``, ``#2``, ... (for a narrow terminal)."""
    if k is None:
        ns = sorted({r.samples_per_problem for run in runs for r in run.benchmarks.values()})
        metric = (
            f"avg@{ns[0]}" if len(ns) == 1 else "avg@n (n differs: " + ", ".join(map(str, ns)) + ")"
        )
    else:
        metric = f"pass@{k}"
    labels = [f"#{i}" for i in range(1, len(runs) + 1)] if numbered else _unique_labels(runs)
    table = Table(title=f"{metric}, points (Δ: against {labels[0]})", title_justify="left")
    table.add_column("benchmark", no_wrap=True)
    for index, label in enumerate(labels):
        table.add_column(label if index == 0 else f"{label} (Δ)", justify="right", overflow="fold")
    table.add_column("paper Δ≤", justify="right", style="dim", overflow="fold")
    for benchmark in _benchmark_order(runs):
        first = _value(runs[0], benchmark, k)
        cells = [benchmark, "–" if first is None else f"{first:.2f}"]
        for run in runs[1:]:
            value = _value(run, benchmark, k)
            if value is None:
                cells.append("–")
            elif first is None:
                cells.append(f"{value:.2f}")
            else:
                delta = value - first
                colour = "green" if delta > 0 else "red" if delta < 0 else ""
                shown = f"({delta:+.2f})"
                cells.append(
                    f"{value:.2f} " + (f"[{colour}]{shown}[/{colour}]" if colour else shown)
                )
        gain = PAPER_MAX_GAINS.get(benchmark)
        cells.append("" if gain is None else f"+{gain:.2f}")
        table.add_row(*cells, end_section=benchmark == AVERAGE)
    return table


def _width(console: Console, table: Table) -> int:
    """The width ``table`` takes unwrapped."""
    return Measurement.get(console, console.options.update(width=10_000), table).maximum


@cli_errors
def compare_command(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Runs to compare: scores.json files or folders holding one (or eval/scores.json); "
            "the first is the reference.",
            show_default=False,
        ),
    ],
    metric: Annotated[str, typer.Option(help="avg (avg@n), pass (pass@k) or both.")] = "both",
) -> None:
    """Put evaluated runs side by side: avg@8 and pass@8 per benchmark, deltas against the
    first run, and the largest gains the paper reports."""
    if metric not in METRICS:
        raise typer.BadParameter(
            f"expected one of {', '.join(METRICS)}, got {metric!r}", param_hint="--metric"
        )
    loaded = [load_run(run) for run in runs]  # every file checked before anything is printed
    console = Console()
    # Run names as column headers when the table fits the terminal, else #1, #2, ...
    numbered = _width(console, comparison_table(loaded)) > console.width
    if numbered:
        for index, (label, run) in enumerate(
            zip(_unique_labels(loaded), loaded, strict=True), start=1
        ):
            console.print(f"#{index}: {label} ({run.path})", overflow="fold")
    if metric in ("both", "avg"):
        console.print(comparison_table(loaded, numbered=numbered))
    if metric in ("both", "pass"):
        k = _common_k(loaded)
        if k is None:
            message = "no pass@k common to every run (advbudget eval --k 8 reports pass@8)"
            if metric == "pass":
                raise CommandError(message, code=2)
            console.print(f"[dim]{message}[/dim]")
        else:
            console.print(comparison_table(loaded, k, numbered=numbered))
    console.print(f"[dim]{PAPER_NOTE}[/dim]")
