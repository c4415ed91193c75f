"""``advbudget experiment lm``: the tiny-LM comparison, with a table, plots and JSON."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._hints import missing_dependency
from ..lm._config import PRESETS, LMConfig, lm_config
from ..lm._experiment import DEAD_GROUP_KEYS, LEDGER_KEYS
from ._errors import CommandError, cli_errors
from ._estimators import parse_estimators
from ._preflight import check_output_dir

app = typer.Typer(
    help="Experiments on real trainers (the bandit lab is `advbudget simulate`).",
    no_args_is_help=True,
    add_completion=False,
)

DEFAULT_CACHE = Path("~/.cache/advbudget/lm")


@app.command("lm")
@cli_errors
def lm_command(
    preset: Annotated[
        str, typer.Option(help=f"One of {', '.join(PRESETS)} (--quick is the quick one).")
    ] = "default",
    quick: Annotated[
        bool, typer.Option(help="The mechanics in about a minute: 2 estimators, 1 seed, 4 steps.")
    ] = False,
    estimators: Annotated[
        str | None, typer.Option(help="Comma-separated estimator names (default grpo,dr,budget).")
    ] = None,
    seeds: Annotated[int | None, typer.Option(min=1, help="Number of seeds (0..n-1).")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="RL steps per run.")] = None,
    learning_rate: Annotated[
        float | None, typer.Option(min=0.0, help="RL learning rate (Adam).")
    ] = None,
    sft_hard_fraction: Annotated[
        float | None,
        typer.Option(
            min=0.0, max=1.0, help="Share of hard problems in the warm start's data (0.03)."
        ),
    ] = None,
    eval_every: Annotated[
        int | None,
        typer.Option(min=1, help="Score the validation split every n steps (default 10)."),
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or cuda:N.")] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="torch CPU threads (default 1 on cpu: tiny ops, shared cores)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Runs side by side, one process each (default: the preset's)."),
    ] = None,
    cache_dir: Annotated[
        Path, typer.Option(help="Where warm starts are cached, one folder per config hash.")
    ] = DEFAULT_CACHE,
    output_dir: Annotated[
        Path, typer.Option(help="Where lm.json, lm_trl_logs.json.gz and lm.png go.")
    ] = Path("demo/lm"),
    plot: Annotated[
        Path | None, typer.Option(help="Write the curves here instead of <output-dir>/lm.png.")
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Write the JSON only.")] = False,
) -> None:
    """A tiny Qwen3 learns column addition through TRL's GRPOTrainer with each estimator.

    Routine problems need no carry, hard ones (a quarter of the prompts) need one, which
    the warm start rarely does. One supervised warm start (cached), then RL for every
    estimator × seed with the same prompts per step; prints final test accuracy per tier
    (mean ± SE) and budget's paired differences. Docs: The LM experiment.
    """
    if quick:
        if preset not in ("default", "quick"):
            raise typer.BadParameter("--quick is the quick preset", param_hint="--preset")
        preset = "quick"
    if preset not in PRESETS:
        raise typer.BadParameter(
            f"expected one of {tuple(PRESETS)}, got {preset!r}", param_hint="--preset"
        )
    overrides: dict[str, Any] = {}
    if estimators is not None:
        overrides["estimators"] = parse_estimators(
            estimators, rewards_only="the LM experiment's rewards come from its verifier alone"
        )
    if seeds is not None:
        overrides["seeds"] = tuple(range(seeds))
    if steps is not None:
        overrides["steps"] = steps
    if learning_rate is not None:
        overrides["learning_rate"] = learning_rate
    if device is not None:
        overrides["device"] = device
    if eval_every is not None:
        overrides["eval_every"] = eval_every
    if sft_hard_fraction is not None:
        overrides["sft_hard_fraction"] = sft_hard_fraction
    try:
        config = lm_config(preset, **overrides)
    except ValueError as error:
        raise CommandError(str(error), 2) from None
    check_output_dir(output_dir, "--output-dir")
    try:
        import torch
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as error:
        package = (error.name or "trl").split(".")[0]
        raise CommandError(
            f"advbudget experiment lm needs {package}, which is not installed: in the "
            'advbudget checkout run pip install -e ".[lm]"',
            1,
        ) from None
    if not no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise CommandError(
                missing_dependency(error, "the plot (or pass --no-plot)"), 1
            ) from None
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise CommandError(f"--device {config.device}: torch sees no CUDA device", 2)
    torch.set_num_threads(threads or (1 if config.device == "cpu" else os.cpu_count() or 1))
    _run(config, cache_dir.expanduser(), output_dir, plot, no_plot, workers or config.workers)


def _run(
    config: LMConfig,
    cache_dir: Path,
    output_dir: Path,
    plot: Path | None,
    no_plot: bool,
    workers: int,
) -> None:
    import warnings

    from ..lm._experiment import run_experiment, write_outputs

    console = Console()
    started = time.perf_counter()
    runs = len(config.estimators) * len(config.seeds)
    console.print(
        f"advbudget experiment lm: {', '.join(config.estimators)} × {len(config.seeds)} "
        f"seeds × {config.steps} steps ({runs} runs, {workers} at a time) on {config.device}"
    )
    with (
        Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as bars,
        warnings.catch_warnings(),
    ):
        # trl 1.16 still calls transformers' deprecated gradient-checkpointing aliases.
        warnings.filterwarnings("ignore", message=".*is deprecated and will be removed in v6")

        def progress(label: str, total: int) -> Any:
            task = bars.add_task(label, total=total)
            return lambda step: bars.update(task, completed=step)

        record = run_experiment(
            config, cache_dir, log=console.print, progress=progress, workers=workers
        )
    paths = write_outputs(record, output_dir)
    if not no_plot:
        from ..lm._plot import plot_curves

        paths.append(plot_curves(record, plot or output_dir / "lm.png"))
    for table in (summary_table, dynamics_table, differences_table, dead_groups_table):
        console.print(table(record))
    elapsed = time.perf_counter() - started
    console.print(f"{runs} runs in {elapsed:.0f} s; wrote {', '.join(str(p) for p in paths)}")


# The test-accuracy columns, keys of the summary's per-arm scores.
ACCURACY_COLUMNS = ("routine/avg", "routine/pass", "hard/avg", "hard/pass")


def _cell(stat: dict[str, float] | None, scale: float = 100.0, digits: int = 1) -> str:
    """``mean ± se``, the mean scaled (100: %); "-" for a metric the runs did not log."""
    if stat is None:
        return "-"
    return f"{stat['mean'] * scale:.{digits}f} ± {stat['se'] * scale:.{digits}f}"


def summary_table(record: dict[str, Any]) -> Table:
    """Final test accuracy per tier, in %: the warm start and each estimator."""
    summary = record["summary"]
    n = record["config"]["eval_samples"]
    seeds = len(record["config"]["seeds"])
    table = Table(title=f"final test accuracy, % (mean ± SE over {seeds} seeds)")
    table.add_column("arm")
    for column in ACCURACY_COLUMNS:
        table.add_column(column.replace("/", " ") + f"@{n}", justify="right")
    rows = {"warm start": summary["warm_start_test"], **summary["arms"]}
    for name, scores in rows.items():
        table.add_row(name, *(_cell(scores[key]) for key in ACCURACY_COLUMNS))
    return table


def dynamics_table(record: dict[str, Any]) -> Table:
    """Per estimator: entropy and KL to the warm start after the last step, κ_eff and
    the reward averaged over training (the skipped fraction: the dead-groups table)."""
    table = Table(title="training: final entropy and KL (nats/token), means over the steps")
    for column in ("arm", "entropy", "KL", "κ_eff", "reward"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for name, arm in record["summary"]["arms"].items():
        table.add_row(
            name,
            _cell(arm["final_entropy"], 1.0, 3),
            _cell(arm["final_kl_to_warm_start"], 1.0, 3),
            _cell(arm.get("kappa_eff_mean"), 1.0, 3),
            _cell(arm.get("reward_mean"), 1.0, 3),
        )
    return table


def dead_groups_table(record: dict[str, Any]) -> Table:
    """Per estimator, the dead-group signal (docs: Dead groups): the group fractions
    averaged over training and the prompt ledger at the end of the run, in %."""
    table = Table(title="dead groups, %: groups per step (mean), prompts seen twice (final)")
    for column in ("arm", "skipped", "unsolved", "solved", "never solved", "always solved"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for name, arm in record["summary"]["arms"].items():
        table.add_row(
            name,
            *(_cell(arm.get(f"{key}_mean")) for key in DEAD_GROUP_KEYS),
            *(_cell(arm.get(f"final_{key}")) for key in LEDGER_KEYS),
        )
    return table


def differences_table(record: dict[str, Any]) -> Table:
    n = record["config"]["eval_samples"]
    table = Table(title="paired differences (same seed, same prompts), points, mean ± SE")
    table.add_column("difference")
    for column in ACCURACY_COLUMNS:
        table.add_column(column.replace("/", " ") + f"@{n}", justify="right")
    for name, diff in record["summary"]["paired_differences"].items():
        table.add_row(name, *(_cell(diff[key]) for key in ACCURACY_COLUMNS))
    return table
