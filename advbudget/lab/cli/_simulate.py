"""``advbudget simulate``: run one of the lab's experiments, print a table, write plots + JSON."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._machine import machine_info
from ..sim import _report
from ..sim._experiment import (
    EXPERIMENTS,
    REGIMES,
    ExperimentConfig,
    experiment_config,
    run_experiment,
    to_json,
    write_json,
)
from ..sim._map import MapConfig, map_config, run_map, write_map_json
from ..sim._train import ENTROPY_PLACES
from ._errors import atomic_output, cli_errors
from ._estimators import parse_estimators
from ._preflight import check_output_dir

ALL_EXPERIMENTS = (*EXPERIMENTS, "map")
REGIME_CHOICES = (*REGIMES, "both")
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


@cli_errors
def simulate_command(
    experiment: Annotated[
        str, typer.Option(help=f"One of {', '.join(ALL_EXPERIMENTS)}.")
    ] = "compare",
    regime: Annotated[
        str | None,
        typer.Option(
            help="transient (every hard type found eventually), persistent (many rare hard "
            "types: some stay unfound), or both, one after the other (default: transient)."
        ),
    ] = None,
    routine_types: Annotated[
        int | None, typer.Option(min=0, help="Prompt types the sound generic strategy solves.")
    ] = None,
    hard_types: Annotated[
        int | None, typer.Option(min=0, help="Prompt types only their own specialist solves.")
    ] = None,
    hard_share: Annotated[
        float | None,
        typer.Option(
            min=0.0, max=1.0, help="Fraction of prompts of a hard type (default: all types equal)."
        ),
    ] = None,
    specialist_prior: Annotated[
        float | None,
        typer.Option(help="Initial logit of each specialist (generic strategies start at 0)."),
    ] = None,
    task_seed: Annotated[int | None, typer.Option(min=0, help="Draws the prompts.")] = None,
    estimators: Annotated[
        str | None,
        typer.Option(help="Comma-separated estimator names (default: the experiment's)."),
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(min=1, help="Number of training seeds (0..n-1).")
    ] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Training steps per run (default: the regime's).")
    ] = None,
    group_size: Annotated[
        int | None, typer.Option("--group-size", "-G", min=2, help="Rollouts per prompt (8).")
    ] = None,
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
        typer.Option(min=0.0, help="Entropy term coefficient; repeat it for a sweep."),
    ] = None,
    entropy_in: Annotated[
        str | None,
        typer.Option(help="Where the entropy term goes: loss, reward or loss,reward."),
    ] = None,
    learning_rate: Annotated[
        float | None, typer.Option(min=0.0, help="Adam step size (default 0.01).")
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Processes training runs side by side (same results).")
    ] = 1,
    output_dir: Annotated[
        Path, typer.Option(help="Where <experiment>-<regime>.png and .json go.")
    ] = Path("demo"),
    plot: Annotated[
        Path | None,
        typer.Option(help="Write the plot here instead (.png, .pdf or .svg; one regime)."),
    ] = None,
    curve_stride: Annotated[
        int,
        typer.Option(min=0, help="Keep every n-th step of the curves in the JSON (0: none)."),
    ] = 1,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Write the JSON only.")] = False,
    describe: Annotated[
        bool, typer.Option(help="Only print the task: types, oracle, ceiling, start.")
    ] = False,
    print_config: Annotated[
        bool, typer.Option(hidden=True, help="Print the configuration as JSON and exit.")
    ] = False,
    quick: Annotated[
        bool, typer.Option(help="A few seconds: 2 seeds, 40 steps, a smaller task.")
    ] = False,
) -> None:
    """Train a shared softmax policy on prompts of varied difficulty, once per
    estimator and seed, and compare the dynamics with the policy-class ceiling.

    Experiments: compare (GRPO, Dr, budget, RLOO); kappa (β swept, κ = 1/β);
    entropy (in the loss or the reward, first half only); kl (off / on, every
    estimator); group-size (G = 4..32); difficulty (budget, GRPO, GRPO-LEAD, DGPO,
    MaxRL, SPO, RAE); staleness (GRPO and budget with rollouts up to 4 updates old, each
    stale-rollout rule); map (budget − GRPO and budget − Dr over task structures, under
    15 minutes with --workers 2). See docs/simulation.md.
    """
    if experiment not in ALL_EXPERIMENTS:
        raise typer.BadParameter(
            f"expected one of {ALL_EXPERIMENTS}, got {experiment!r}", param_hint="--experiment"
        )
    if regime is not None and regime not in REGIME_CHOICES:
        raise typer.BadParameter(
            f"expected one of {REGIME_CHOICES}, got {regime!r}", param_hint="--regime"
        )
    if plot is not None and plot.suffix.lower() not in PLOT_SUFFIXES:
        raise typer.BadParameter(
            f"expected a file name ending in {', '.join(PLOT_SUFFIXES)}, got {str(plot)!r}",
            param_hint="--plot",
        )
    task_options = {
        "routine_types": routine_types,
        "hard_types": hard_types,
        "hard_share": hard_share,
        "specialist_prior_logit": specialist_prior,
        "task_seed": task_seed,
    }
    task_changes = {key: value for key, value in task_options.items() if value is not None}
    names = _estimator_names(estimators)
    run_options: dict[str, Any] = {"prompts_per_step": prompts_per_step}
    if group_size is not None:
        run_options["group_size"] = group_size
    if learning_rate is not None:
        run_options["learning_rate"] = learning_rate

    if experiment == "map":
        not_for_map = {
            "--regime": regime,
            "--plot": plot,
            "--beta": beta,
            "--entropy-coef": entropy_coef,
            "--entropy-in": entropy_in,
        }
        for flag, value in not_for_map.items():
            if value:
                raise typer.BadParameter("the map has no such setting", param_hint=flag)
        if {"routine_types", "hard_types", "hard_share"} & task_changes.keys():
            raise typer.BadParameter(
                "the map sets the types of each cell itself", param_hint="--hard-types"
            )
        map_settings = _map_config(quick, names, seeds, steps, task_changes, run_options)
        if print_config:
            typer.echo(json.dumps(asdict(map_settings), default=str))
            return
        _run_map_command(map_settings, workers, output_dir)
        return

    regimes = list(REGIMES) if regime == "both" else [regime or "transient"]
    if len(regimes) > 1 and (task_changes or plot is not None):
        raise typer.BadParameter(
            "--regime both takes no task options and no --plot (use one regime)",
            param_hint="--regime",
        )
    overrides: dict[str, Any] = dict(run_options)
    if names is not None:
        overrides["estimators"] = names
    if seeds is not None:
        overrides["seeds"] = tuple(range(seeds))
    if steps is not None:
        overrides["steps"] = steps
    if beta:
        overrides["betas"] = tuple(beta)
    if entropy_coef:
        overrides["entropy_coefs"] = tuple(entropy_coef)
    if entropy_in is not None:
        places = tuple(part.strip() for part in entropy_in.split(",") if part.strip())
        if not places or any(place not in ENTROPY_PLACES for place in places):
            raise typer.BadParameter(
                f"expected loss, reward or loss,reward, got {entropy_in!r}",
                param_hint="--entropy-in",
            )
        overrides["entropy_in"] = places
    configs = []
    for name in regimes:
        try:
            configs.append(_experiment_config(experiment, name, quick, task_changes, overrides))
        except (ValueError, TypeError) as error:
            raise typer.BadParameter(str(error)) from None
    if print_config:
        typer.echo(json.dumps([asdict(config) for config in configs], default=str))
        return
    console = Console()
    if describe:
        _describe(console, configs)
        return

    check_output_dir(output_dir, "--output-dir")  # before the training, not after it
    if plot is not None:
        check_output_dir(plot.parent, "--plot")
    command = _command_line()
    for config in configs:
        _run_one(console, config, workers, output_dir, plot, curve_stride, command, no_plot)
    console.print(f"[dim]{_report.LEGEND}[/dim]")
    console.print(_report.DOCS_POINTER)


def _estimator_names(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return parse_estimators(text, rewards_only="the lab's rewards are binary, nothing else")


def _experiment_config(
    experiment: str,
    regime: str,
    quick: bool,
    task_changes: dict[str, Any],
    overrides: dict[str, Any],
) -> ExperimentConfig:
    options = dict(overrides)
    label = regime
    if task_changes:
        base = experiment_config(experiment, regime=regime, quick=quick).task
        options["task"] = replace(base, **task_changes)
        label = "custom"
    config = experiment_config(experiment, regime=regime, quick=quick, **options)
    return replace(config, regime=label)


def _map_config(
    quick: bool,
    names: tuple[str, ...] | None,
    seeds: int | None,
    steps: int | None,
    task_changes: dict[str, Any],
    run_options: dict[str, Any],
) -> MapConfig:
    base = map_config(quick=quick)
    options: dict[str, Any] = {}
    if names is not None:
        if names[0] != "budget":
            raise typer.BadParameter(
                f"expected budget first (the others are compared with it), got {names!r}",
                param_hint="--estimators",
            )
        options["estimators"] = names
    if seeds is not None:
        options["seeds"] = tuple(range(seeds))
    if steps is not None:
        options["steps"] = steps
    try:
        if task_changes:
            options["task"] = replace(base.task, **task_changes)
        options["run"] = replace(base.run, **run_options)
        return replace(base, **options)
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(str(error)) from None


def _command_line() -> str:
    """The command as typed, for the JSON (``advbudget simulate ...``)."""
    return " ".join(["advbudget", *sys.argv[1:]]) if sys.argv else "advbudget simulate"


def _progress(console: Console, label: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{label}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _run_one(
    console: Console,
    config: ExperimentConfig,
    workers: int,
    output_dir: Path,
    plot: Path | None,
    curve_stride: int,
    command: str,
    no_plot: bool = False,
) -> None:
    stem = f"{config.name}-{config.regime}"
    # The files are written into a folder beside --output-dir and renamed into place at
    # the end: an interrupted or failed run leaves no half-written plot or JSON.
    with atomic_output(output_dir, directory=True, label="--output-dir") as partial:
        started = time.perf_counter()
        with _progress(console, f"{config.name} ({config.regime})") as progress:
            bar = progress.add_task("training", total=config.num_runs * config.steps)
            result = run_experiment(
                config, on_step=lambda _: progress.advance(bar), workers=workers
            )
        elapsed = time.perf_counter() - started
        data = to_json(result, curve_stride=curve_stride)
        data["command"] = command
        data["seconds"] = round(elapsed, 1)
        console.print(f"[bold]{_report.short_title(data)}[/bold]")
        console.print(experiment_table(data))
        console.print(_report.sweep_reading(data))
        extra = {
            "command": command,
            "seconds": data["seconds"],
            "workers": workers,
            "machine": machine_info(packages=("advbudget", "numpy")),
        }
        write_json(result, partial / f"{stem}.json", curve_stride=curve_stride, extra=extra)
        from ..sim._plot import plot_experiment

        if plot is None and not no_plot:
            plot_experiment(result, partial / f"{stem}.png")
    if plot is not None and not no_plot:
        with atomic_output(plot, label="--plot") as partial_plot:
            plot_experiment(result, partial_plot)
    json_path = output_dir / f"{stem}.json"
    sizes = config.group_sizes or (config.group_size,)
    group = f"G={sizes[0]}" if len(sizes) == 1 else "G=" + ",".join(map(str, sizes))
    if plot is not None:
        written = f"{plot}, {json_path}"
    elif no_plot:
        written = str(json_path)
    else:
        written = str(output_dir / f"{stem}.{{png,json}}")
    console.print(
        f"[dim]{config.num_runs} runs, {elapsed:.1f} s, {group} "
        f"B={config.prompts_per_step} → {written}[/dim]"
    )


def _run_map_command(config: MapConfig, workers: int, output_dir: Path) -> None:
    check_output_dir(output_dir, "--output-dir")
    console = Console()
    command = _command_line()
    with atomic_output(output_dir, directory=True, label="--output-dir") as partial:
        started = time.perf_counter()
        with _progress(console, "map") as progress:
            bar = progress.add_task("runs", total=config.num_runs)
            result = run_map(config, workers=workers, on_run=lambda: progress.advance(bar))
        elapsed = time.perf_counter() - started
        result["command"] = command
        result["seconds"] = round(elapsed, 1)
        result["workers"] = workers
        result["machine"] = machine_info(packages=("advbudget", "numpy"))
        for other in config.estimators[1:]:
            title = _report.map_title(result).replace("{other}", other)
            console.print(f"\n[bold]{title}[/bold]")
            console.print(map_table(result, other))
        console.print(_report.map_reading(result))
        write_map_json(result, partial / "map.json")
        from ..sim._plot import plot_map

        plot_map(result, partial / "map.png")
    console.print(
        f"[dim]{config.num_runs} runs of {config.steps} steps in {elapsed:.1f} s with "
        f"{workers} worker(s); wrote {output_dir / 'map.png'}, {output_dir / 'map.json'}[/dim]"
    )
    console.print(_report.DOCS_POINTER)


def _describe(console: Console, configs: list[ExperimentConfig]) -> None:
    table = Table(
        title="the task (points: % of held-out prompts solved)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for name in _report.TASK_HEADERS:
        table.add_column(name, justify="left" if name == "regime" else "right", no_wrap=True)
    for config in configs:
        facts = _report.describe_task(config.task, config.group_size)
        table.add_row(*_report.task_row(config.regime, facts))
    table.caption = (
        "ceiling: held-out accuracy of the class's best policy for the training pool "
        "(exact, maximised directly); start: the initial policy; skipped: groups of G "
        "all right or all wrong."
    )
    console.print(table)


def experiment_table(data: dict[str, Any]) -> Table:
    """The terminal table of an experiment (from its JSON data): one row per arm, then
    the ceiling and the oracle (the title is :func:`_report.experiment_title`).

    Examples:
        >>> from advbudget.lab.sim import experiment_config, run_experiment, to_json
        >>> from advbudget.lab.cli._simulate import experiment_table
        >>> config = experiment_config("compare", quick=True, estimators=("dr",), steps=2)
        >>> experiment_table(to_json(run_experiment(config))).row_count
        3
    """
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False)
    for name in _report.experiment_columns(data):
        table.add_column(name, justify="left" if name == "arm" else "right")
    rows = _report.experiment_rows(data)
    for index, row in enumerate(rows):
        table.add_row(*row, style="dim" if index >= len(rows) - 2 else None)
    return table


def map_table(data: dict[str, Any], other: str) -> Table:
    """The map as a table: budget − ``other`` per cell, mean ± SE over paired seeds."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False)
    for name in _report.map_columns(data):
        table.add_column(name, justify="right")
    for row in _report.map_rows(data, other):
        table.add_row(*row)
    return table
