"""``advbudget eval``: sample, grade and score a model as the paper did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .._cli_errors import (
    atomic_output,
    check_input_file,
    check_output_dir,
    cli_errors,
    describe,
    fail,
)
from ._run import (
    GENERATIONS,
    GRADERS,
    EvalReport,
    _complete_lines,
    evaluate,
    score_generations,
    write_outputs,
)

DEFAULT_BENCHMARKS = "amc23,aime24,aime25,math500"


@cli_errors
def eval_command(
    model: Annotated[
        str | None, typer.Option(help="Model path or hub id (not needed with --score-only).")
    ] = None,
    benchmarks: Annotated[
        str,
        typer.Option(help="Comma-separated names (amc23, aime24, aime25, math500) or JSONL paths."),
    ] = DEFAULT_BENCHMARKS,
    n: Annotated[int, typer.Option("--n", min=1, help="Samples per problem.")] = 8,
    k: Annotated[
        list[int] | None, typer.Option("--k", help="pass@k to report (repeatable; default n).")
    ] = None,
    temperature: Annotated[float, typer.Option(min=0.0)] = 0.7,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 8192,
    grader: Annotated[str, typer.Option(help=f"One of {', '.join(GRADERS)}.")] = "math_verify",
    backend: Annotated[str, typer.Option(help="auto, vllm or transformers.")] = "auto",
    output_dir: Annotated[
        Path, typer.Option(help="Where generations.jsonl and scores.json go.")
    ] = Path("eval_results"),
    seed: int = 0,
    tensor_parallel_size: Annotated[int, typer.Option(min=1, help="vLLM only.")] = 1,
    batch_size: Annotated[
        int, typer.Option(min=1, help="transformers only: prompts per batch.")
    ] = 8,
    enable_thinking: Annotated[
        bool | None,
        typer.Option(
            "--enable-thinking/--disable-thinking",
            help="Passed to the chat template (Qwen3); default: the template's own.",
        ),
    ] = None,
    score_only: Annotated[
        Path | None,
        typer.Option(help="Grade an existing generations.jsonl instead of sampling."),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="Continue the run whose generations.jsonl is in --output-dir (same settings)."
        ),
    ] = False,
) -> None:
    """Evaluate a checkpoint: n samples per problem, graded; avg@n and unbiased pass@k.

    Generations are appended to <output-dir>/generations.jsonl as each problem is done;
    after a crash or Ctrl-C, the same command with --resume continues where it stopped.
    """
    if grader not in GRADERS:
        raise typer.BadParameter(
            f"expected one of {GRADERS}, got {grader!r}", param_hint="--grader"
        )
    ks = k or [n]
    console = Console()
    if score_only is not None:
        check_input_file(score_only, "--score-only")
    elif model is None:
        raise typer.BadParameter("expected a model path or hub id", param_hint="--model")
    check_output_dir(output_dir, "--output-dir")  # before the model is loaded
    try:
        if score_only is not None:
            records, report = score_generations(score_only, ks=k or [], grader=grader)
            with atomic_output(output_dir, directory=True, label="--output-dir") as partial:
                write_outputs(partial, records, report)
        else:
            assert model is not None
            template = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
            report = evaluate(
                model,
                [b.strip() for b in benchmarks.split(",") if b.strip()],
                n=n,
                ks=ks,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                grader=grader,
                backend=backend,  # type: ignore[arg-type]
                output_dir=output_dir,
                seed=seed,
                resume=resume,
                tensor_parallel_size=tensor_parallel_size,
                batch_size=batch_size,
                chat_template_kwargs=template,
            )
    except (ValueError, FileNotFoundError, ImportError) as error:
        raise fail(str(error), 2) from None
    except (KeyboardInterrupt, OSError) as error:
        if score_only is not None:
            raise
        what = "interrupted (Ctrl-C)" if isinstance(error, KeyboardInterrupt) else describe(error)
        code = 130 if isinstance(error, KeyboardInterrupt) else 1
        raise fail(f"{what}; {_saved(output_dir / GENERATIONS)}", code) from None
    console.print(report_table(report))
    console.print(f"Scores in [bold]{output_dir / 'scores.json'}[/bold]")
    console.print_json(json.dumps(report.to_dict()["benchmarks"]["average"]))


def _saved(path: Path) -> str:
    """What an interrupted run kept, and how to continue it."""
    try:
        count = len(_complete_lines(path.read_bytes())[0])
    except OSError:
        count = 0
    if not count:
        return "nothing was written"
    return f"{count} problems are saved in {path}: rerun with --resume to continue"


def report_table(report: EvalReport) -> Table:
    """The scores as a terminal table, one row per benchmark and the average."""
    rows = [*report.scores, report.average]
    n = min(s.samples_per_problem for s in report.scores)
    ks = sorted(report.average.pass_at)
    table = Table(title="Evaluation (percent)")
    table.add_column("benchmark")
    table.add_column("problems", justify="right")
    table.add_column(f"avg@{n}", justify="right")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    for row in rows:
        style = "bold" if row.benchmark == "average" else None
        table.add_row(
            row.benchmark,
            str(row.problems),
            f"{100 * row.avg:.2f}",
            *[f"{100 * row.pass_at[k]:.2f}" for k in ks],
            style=style,
        )
    return table
