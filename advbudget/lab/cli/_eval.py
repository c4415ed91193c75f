"""``advbudget eval``: sample, grade and score a model as the paper did."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .._hints import hub_unreachable, missing_dependency, not_cached
from ..eval._benchmarks import BENCHMARKS
from ..eval._protocol import PAPER_BENCHMARKS, PAPER_TEMPERATURE
from ..eval._run import (
    GENERATIONS,
    GRADERS,
    SCORES,
    SETTINGS,
    EvalReport,
    _complete_lines,
    evaluate,
    score,
    score_generations,
    write_outputs,
)
from ._errors import CommandError, atomic_output, cli_errors, describe, fail
from ._preflight import check_input_file, check_output_dir
from ._tables import fit_width


@cli_errors
def eval_command(
    model: Annotated[
        str | None, typer.Option(help="Model path or hub id (not needed with --score-only).")
    ] = None,
    benchmarks: Annotated[
        str,
        typer.Option(help="Comma-separated names (amc23, aime24, aime25, math500) or JSONL paths."),
    ] = PAPER_BENCHMARKS,
    n: Annotated[int, typer.Option("--n", min=1, help="Samples per problem.")] = 8,
    k: Annotated[
        list[int] | None, typer.Option("--k", help="pass@k to report (repeatable; default n).")
    ] = None,
    temperature: Annotated[float, typer.Option(min=0.0)] = PAPER_TEMPERATURE,
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
    if grader == "math_verify" and importlib.util.find_spec("math_verify") is None:
        # Grading starts after the first generations: found missing now, not then.
        error = ModuleNotFoundError("No module named 'math_verify'", name="math_verify")
        raise CommandError(missing_dependency(error, "--grader math_verify"))
    try:
        if score_only is not None:
            records, report = score_generations(score_only, ks=[], grader=grader)
            # The pass@k of the run that wrote the file (its settings.json), else pass@n.
            n_file = min(s.samples_per_problem for s in report.scores)
            report = EvalReport(score(records, k or _run_ks(score_only) or [n_file]), report.config)
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
    except Exception as error:
        if hub_unreachable(error):
            raise fail(_not_cached(error, model, benchmarks)) from None
        if isinstance(error, ImportError):
            raise fail(missing_dependency(error), 2) from None
        if isinstance(error, (ValueError, FileNotFoundError)):
            raise fail(str(error), 2) from None
        if not isinstance(error, OSError) or score_only is not None:
            raise
        raise fail(f"{describe(error)}; {_saved(output_dir / GENERATIONS)}") from None
    except KeyboardInterrupt:
        if score_only is not None:
            raise
        raise fail(f"interrupted (Ctrl-C); {_saved(output_dir / GENERATIONS)}", 130) from None
    for table in report_table(report, console):
        console.print(table)
    console.print(f"Scores in [bold]{output_dir / SCORES}[/bold]")
    console.print_json(json.dumps(report.to_dict()["benchmarks"]["average"]))


def _run_ks(generations: Path) -> list[int]:
    """The pass@k that the run which wrote ``generations`` reported (its settings.json
    beside it); empty when there is none or it cannot be read."""
    try:
        settings = json.loads((generations.parent / SETTINGS).read_text(encoding="utf-8"))
        ks = settings["ks"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    ok = isinstance(ks, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in ks)
    return list(ks) if ok else []


def _not_cached(error: BaseException, model: str | None, benchmarks: str) -> str:
    """Which hub id could not be fetched: a benchmark the error names, else the model."""
    text = " ".join(str(e) for e in _chain(error))
    for name in (b.strip().lower() for b in benchmarks.split(",")):
        source = BENCHMARKS.get(name)
        if source is not None and source.hub_id in text:
            return not_cached("dataset", source.hub_id, "a local .jsonl benchmark file")
    return not_cached("model", model, "a local model folder as --model")


def _chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _saved(path: Path) -> str:
    """What an interrupted run kept, and how to continue it."""
    try:
        count = len(_complete_lines(path.read_bytes())[0])
    except OSError:
        count = 0
    if not count:
        return "nothing was written"
    return f"{count} problems are saved in {path}: rerun with --resume to continue"


def report_table(report: EvalReport, console: Console | None = None) -> list[Table]:
    """The scores as terminal tables, one row per benchmark and the average; the pass@k
    columns go to more tables when they do not fit the terminal's width."""
    rows = [*report.scores, report.average]
    n = min(s.samples_per_problem for s in report.scores)

    def table_of(ks: list[int]) -> Table:
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

    ks = sorted(report.average.pass_at)
    return fit_width(console or Console(), ks, table_of) if ks else [table_of([])]
