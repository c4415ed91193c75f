"""``advbudget data``: prepare DAPO-Math-17K for verl, TRL and OpenRLHF.

The main command line mounts :data:`app` with ``app.add_typer(data_app, name="data")``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .._hints import hub_unreachable, missing_dependency, not_cached
from ..data._prepare import FORMATS, PreparedData, check_split_options, parse_formats, prepare
from ..data._problems import DEFAULT_SOURCE, DataError
from ..data._samples import sample_path
from ._errors import atomic_output, cli_errors, fail
from ._preflight import check_output_dir

app = typer.Typer(
    help="Training data: DAPO-Math-17K in, verl / TRL / OpenRLHF files out.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _main() -> None:
    """Prepare training data for the trainers advbudget plugs into."""


@app.command("prepare")
@cli_errors
def prepare_command(
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Folder to write <format>/<split> files.")
    ],
    source: Annotated[
        str | None,
        typer.Option(
            help="Hub dataset id or a .parquet/.jsonl/.json file.", show_default=DEFAULT_SOURCE
        ),
    ] = None,
    sample: Annotated[
        bool, typer.Option("--sample", help="Use the bundled 64-problem sample (offline).")
    ] = False,
    output_format: Annotated[
        str,
        typer.Option("--format", help=f"{', '.join(FORMATS)} or all; several comma-separated."),
    ] = "all",
    split: Annotated[str, typer.Option(help="Hub split to read.")] = "train",
    config: Annotated[str | None, typer.Option(help="Hub configuration, e.g. en.")] = None,
    max_samples: Annotated[
        int | None, typer.Option(help="Keep at most this many problems (after dedup).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Shuffle seed.")] = 0,
    shuffle: Annotated[bool, typer.Option(help="Shuffle before selecting and splitting.")] = True,
    val_size: Annotated[int | None, typer.Option(help="Problems held out for validation.")] = None,
    val_fraction: Annotated[
        float | None, typer.Option(help="Share held out for validation, in [0, 1).")
    ] = None,
) -> None:
    """Load, deduplicate, shuffle, split and write DAPO-Math-17K for each trainer.

    Writes <output-dir>/<format>/train and, with --val-size or --val-fraction, .../val.
    Files appear only once all are written (a failed or interrupted run leaves none).
    """
    if sample and source is not None:
        raise typer.BadParameter("give --source or --sample, not both", param_hint="--sample")
    try:
        formats = parse_formats(output_format)
    except ValueError as error:
        message = str(error).removeprefix("formats: ")
        raise typer.BadParameter(message, param_hint="--format") from None
    try:
        check_split_options(val_size=val_size, val_fraction=val_fraction, max_samples=max_samples)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    chosen_source = str(sample_path("dapo")) if sample else (source or DEFAULT_SOURCE)
    check_output_dir(output_dir, "--output-dir")  # before a long download
    console = Console()
    try:
        # Written into a folder beside --output-dir, renamed into place at the end.
        with atomic_output(output_dir, directory=True, label="--output-dir") as partial:
            result = prepare(
                partial,
                source=chosen_source,
                formats=formats,
                split=split,
                config=config,
                max_samples=max_samples,
                seed=seed,
                shuffle=shuffle,
                val_size=val_size,
                val_fraction=val_fraction,
            )
    except ImportError as error:
        raise fail(missing_dependency(error, "advbudget data prepare")) from None
    except Exception as error:
        if hub_unreachable(error):
            raise fail(not_cached("dataset", chosen_source, "a local file as --source")) from None
        if not isinstance(error, (DataError, FileNotFoundError, ValueError)):
            raise
        # Data problems are not usage errors: the message names the file and row.
        if isinstance(error, FileNotFoundError) and error.filename is not None:
            raise fail(f"--source {error.filename}: no such file") from None
        raise fail(str(error)) from None
    files = {
        name: [output_dir / path.relative_to(partial) for path in paths]
        for name, paths in result.files.items()
    }
    result = dataclasses.replace(result, files=files)
    _print_summary(console, result, output_dir)


def _print_summary(console: Console, result: PreparedData, output_dir: Path) -> None:
    # Paths are printed as lines, not cells: a path folded inside a cell cannot be copied.
    report = result.dedup
    console.print(f"Prepared data from {result.source}", highlight=False, soft_wrap=True)
    summary = Table(show_header=False)
    summary.add_column("", style="bold")
    summary.add_column("", justify="right")
    for label, value in report.summary():  # every count, unique indices and texts both
        if label.startswith("dropped repeats with a different") and report.conflicts:
            label, value = f"[yellow]{label}[/yellow]", f"[yellow]{value}[/yellow]"
        summary.add_row(label, value)
    summary.add_row("train", f"{len(result.train):,}")
    summary.add_row("validation", f"{len(result.val):,}")
    console.print(summary)

    console.print(f"Files written in {output_dir}", highlight=False, soft_wrap=True)
    files = Table()
    files.add_column("format")
    files.add_column("split")
    files.add_column("rows", justify="right")
    files.add_column("file")
    rows = {"train": len(result.train), "val": len(result.val)}
    for name, paths in result.files.items():
        for path in paths:
            split = path.stem
            files.add_row(name, split, f"{rows.get(split, 0):,}", str(path.relative_to(output_dir)))
    console.print(files)
    for name, paths in result.files.items():
        usage = _usage(name, {path.stem: str(path) for path in paths})
        console.print(f"[bold]{name}[/bold]: {usage}", highlight=False, soft_wrap=True)


def _usage(name: str, files: dict[str, str]) -> str:
    """How the trainer ``name`` is pointed at the files just written."""
    if name == "verl":
        return " ".join(
            f"data.{key}={files[split]}"
            for key, split in (("train_files", "train"), ("val_files", "val"))
            if split in files
        )
    if name == "trl":
        return f"datasets.load_dataset('parquet', data_files={files!r})"
    if name == "tunix":
        return f"python examples/tunix_qwen3.py --data {Path(files['train']).parent}"
    if name == "skyrl":
        return " ".join(
            f"data.{key}=['{files[split]}']"
            for key, split in (("train_data", "train"), ("val_data", "val"))
            if split in files
        )
    return (
        f"--data.prompt_dataset {files['train']} --data.input_key prompt "
        "--data.label_key label --data.apply_chat_template"
        + (f" --eval.dataset {files['val']}" if "val" in files else "")
    )
