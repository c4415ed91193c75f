"""``advbudget simulate``: run one of the lab's experiments, print a table, write plots + JSON."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._cli_errors import atomic_output, check_output_dir, cli_errors
from ..core import estimator_names, get_estimator
from ._experiment import (
    EXPERIMENTS,
    ExperimentResult,
    experiment_config,
    run_experiment,
    write_json,
)


@cli_errors
def simulate_command(
    experiment: Annotated[str, typer.Option(help=f"One of {', '.join(EXPERIMENTS)}.")] = "compare",
    estimators: Annotated[
        str | None,
        typer.Option(help="Comma-separated estimator names (default: the experiment's)."),
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(min=1, help="Number of training seeds (0..n-1).")
    ] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Training steps per run.")] = None,
    group_size: Annotated[
        int, typer.Option("--group-size", "-G", min=2, help="Rollouts per prompt.")
    ] = 8,
    prompts_per_step: Annotated[
        int, typer.Option("--prompts-per-step", "-B", min=1, help="Prompts per update.")
    ] = 32,
    beta: Annotated[
        list[float] | None,
        typer.Option(
            min=0.0, help="KL coefficient to the initial policy; repeat it for a κ sweep."
        ),
    ] = None,
    entropy_coef: Annotated[
        list[float] | None,
        typer.Option(min=0.0, help="Entropy bonus coefficient; repeat it for a sweep."),
    ] = None,
    learning_rate: Annotated[
        float | None, typer.Option(min=0.0, help="Adam step size (default 0.01).")
    ] = None,
    output_dir: Annotated[
        Path, typer.Option(help="Where <experiment>.png and <experiment>.json go.")
    ] = Path("demo"),
    quick: Annotated[
        bool, typer.Option(help="A few seconds: 2 seeds, 40 steps, a smaller task.")
    ] = False,
) -> None:
    """Train a shared softmax policy on prompts of varied difficulty, once per estimator and
    seed, and compare the dynamics: accuracy, entropy, κ_eff, skipped groups.

    Experiments: compare (GRPO, Dr, budget, RLOO), kappa (Dr with β swept: κ = 1/β) and
    entropy (an entropy bonus for the first half of training, then none).
    """
    if experiment not in EXPERIMENTS:
        raise typer.BadParameter(
            f"expected one of {EXPERIMENTS}, got {experiment!r}", param_hint="--experiment"
        )
    overrides: dict[str, Any] = {"group_size": group_size, "prompts_per_step": prompts_per_step}
    if estimators is not None:
        names = tuple(name.strip() for name in estimators.split(",") if name.strip())
        unknown = [name for name in names if not _is_estimator(name)]
        if unknown or not names:
            raise typer.BadParameter(
                f"expected names from {estimator_names()}, got {list(names) or estimators!r}",
                param_hint="--estimators",
            )
        overrides["estimators"] = names
    if seeds is not None:
        overrides["seeds"] = tuple(range(seeds))
    if steps is not None:
        overrides["steps"] = steps
    if beta:
        overrides["betas"] = tuple(beta)
    if entropy_coef:
        overrides["entropy_coefs"] = tuple(entropy_coef)
    if learning_rate is not None:
        overrides["learning_rate"] = learning_rate
    try:
        config = experiment_config(experiment, quick=quick, **overrides)
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(str(error)) from None

    check_output_dir(output_dir, "--output-dir")  # before the training, not after it
    console = Console()
    # The files are written into a folder beside --output-dir and renamed into place at
    # the end: an interrupted or failed run leaves no half-written plot or JSON.
    with atomic_output(output_dir, directory=True, label="--output-dir") as partial:
        started = time.perf_counter()
        with Progress(
            TextColumn(f"[bold]{experiment}[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("training", total=config.num_runs * config.steps)
            result = run_experiment(config, on_step=lambda _: progress.advance(task))
        elapsed = time.perf_counter() - started

        console.width = max(console.width, 150)  # the table has ten columns
        console.print(summary_table(result))
        write_json(result, partial / f"{experiment}.json")
        from ._plot import plot_experiment

        plot_experiment(result, partial / f"{experiment}.png")
    json_path = output_dir / f"{experiment}.json"
    png_path = output_dir / f"{experiment}.png"
    console.print(
        f"{config.num_runs} runs of {config.steps} steps in {elapsed:.1f} s. "
        f"Oracle accuracy (best strategy per prompt): {100 * result.oracle_accuracy:.1f}."
    )
    console.print(f"Plots: [bold]{png_path}[/bold]")
    console.print(f"Data:  [bold]{json_path}[/bold]")


def summary_table(result: ExperimentResult) -> Table:
    """The terminal table: one row per arm, mean ± std over seeds.

    Examples:
        >>> from advbudget.sim import experiment_config, run_experiment
        >>> from advbudget.sim._cli import summary_table
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=2)
        >>> summary_table(run_experiment(config)).row_count
        1
    """
    config = result.config
    table = Table(
        title=(
            f"{config.name}: {len(config.seeds)} seeds x {config.steps} steps, "
            f"G = {config.group_size}, B = {config.prompts_per_step}; mean ± std over seeds"
        )
    )
    columns = (
        ("arm", "left"),
        ("final acc", "right"),
        ("best acc", "right"),
        ("plateau step", "right"),
        ("escape step", "right"),
        ("hard-type acc", "right"),
        ("final entropy", "right"),
        ("κ_eff mean", "right"),
        ("κ_eff oscillation", "right"),
        ("skipped", "right"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for arm in result.arms:
        s = arm.summary
        table.add_row(
            arm.label,
            _spread(s["final_accuracy"], 100, 1),
            _spread(s["best_accuracy"], 100, 1),
            _spread(s["plateau_step"], 1, 0),
            _escape(s["escape_step"], len(config.seeds)),
            _spread(s["final_accuracy_hard"], 100, 1),
            _spread(s["final_entropy"], 1, 3),
            _spread(s["kappa_eff_mean"], 1, 4),
            _spread(s["kappa_eff_oscillation"], 1, 4),
            _spread(s["skipped_group_fraction"], 1, 2),
        )
    table.caption = (
        "acc in points (exact, held-out prompts); plateau step: first step whose running best "
        "is within 0.5 points of the final best; escape step: first step at which accuracy on "
        f"hard types reaches {100 * result.escape_level:.1f} (half the oracle's), over the seeds "
        "that got there; κ_eff oscillation: std over steps of the batch "
        "mean κ_eff; skipped: mean fraction of groups with no reward gap."
    )
    return table


def _is_estimator(name: str) -> bool:
    try:
        get_estimator(name)  # also knows the aliases (dr_grpo, group_norm, ...)
    except ValueError:
        return False
    return True


def _spread(summary: dict[str, Any], scale: float, digits: int) -> str:
    return f"{scale * summary['mean']:.{digits}f} ± {scale * summary['std']:.{digits}f}"


def _escape(summary: dict[str, Any], num_seeds: int) -> str:
    if summary["count"] == 0:
        return f"never (0/{num_seeds})"
    text = _spread(summary, 1, 0)
    return text if summary["count"] == num_seeds else f"{text} ({summary['count']}/{num_seeds})"
