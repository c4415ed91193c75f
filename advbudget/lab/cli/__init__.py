"""The ``advbudget`` command line: the application on top of the library.

This module builds the typer :data:`app` (the console script, ``advbudget.lab:main``, runs
it), with the catalogue's own commands, ``estimators`` and ``explain``; every other command
has a module named after it, which calls the public functions of its subject package:

- ``_data``: ``advbudget data prepare`` (:mod:`advbudget.lab.data`);
- ``_eval``, ``_compare``: ``advbudget eval``, ``advbudget compare`` (:mod:`advbudget.lab.eval`);
- ``_simulate``: ``advbudget simulate`` (:mod:`advbudget.lab.sim`);
- ``_experiment``: ``advbudget experiment lm`` (:mod:`advbudget.lab.lm`).

The helpers they share: ``_errors`` (one-line errors, exit codes, no partial output),
``advbudget.lab._hints`` (the extra to install, the Hub out of reach), ``_preflight`` (paths
checked before long work), ``_estimators`` (the one parser of ``--estimators`` lists), ``_help``
(help reflowed for any terminal width), ``_tables`` (tables split to fit the terminal),
``_estimators_page`` (``estimators --markdown``, docs/estimators.md).

No module outside this package imports it, and none imports typer (rich only for
:func:`advbudget.lab.eval.evaluate`'s progress bar): the libraries below know no command line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from advbudget import theory
from advbudget.core import estimator_names, get_spec
from advbudget.core._weights import GROUP_WEIGHTS, split_weighted

from .._hints import missing_dependency
from ._compare import compare_command
from ._data import app as data_app
from ._errors import CommandError, atomic_output, cli_errors
from ._estimators import parse_estimators
from ._eval import eval_command
from ._experiment import app as experiment_app
from ._help import reflow_help
from ._preflight import check_output_file
from ._simulate import simulate_command
from ._tables import fit_width

app = typer.Typer(
    help="Reward budgeting and the other group advantage estimators of RL for LLM reasoning.",
    no_args_is_help=True,
    add_completion=False,
)

MAX_EXPLAIN_GROUP_SIZE = 1024
SLOPE_POINTS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)


def _print_version(value: bool) -> None:
    if value:
        from advbudget import __version__

        typer.echo(f"advbudget {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """advbudget: one implementation of group advantage estimators, for every trainer."""


@app.command()
@cli_errors
def estimators(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the docs page (docs/estimators.md).")
    ] = False,
) -> None:
    """List every estimator of the catalogue (plugins included) and its names in each trainer."""
    from advbudget.adapters import CONVENTIONS

    from ._estimators_page import estimators_markdown

    if markdown:
        typer.echo(estimators_markdown(), nl=False)
        return
    table = Table(title="Estimators (--markdown: the full page, with options)")
    table.add_column("name (TRL)")
    table.add_column("advantage")
    table.add_column("verl / OpenRLHF")
    verl = CONVENTIONS["verl"]
    for name in estimator_names():
        spec = get_spec(name)
        table.add_row(", ".join(spec.names), spec.formula, verl.name_of(spec.name))
    Console().print(table)


@app.command()
@cli_errors
def explain(
    group_size: Annotated[
        int,
        typer.Option(
            "--group-size",
            "-G",
            min=2,
            max=MAX_EXPLAIN_GROUP_SIZE,  # the tables enumerate every k of G: O(G^2)
            help="Rollouts per prompt.",
        ),
    ] = 8,
    estimators: Annotated[
        str, typer.Option(help="Comma-separated estimator names.")
    ] = "budget,grpo,dr,rloo",
    plot: Annotated[
        Path | None, typer.Option(help="Write a figure of advantages and slopes (PNG, PDF, SVG).")
    ] = None,
    group_weight: Annotated[
        str | None,
        typer.Option(
            help="A difficulty weight on every estimator: grpo_lead (per group) or dqw (over "
            "the batch of the G + 1 groups k = 0..G). One estimator's own: grpo+grpo_lead."
        ),
    ] = None,
) -> None:
    """Show what each estimator does with binary rewards, and the objective it implies.

    For k = 0..G correct rollouts, the advantage of a correct and of a wrong rollout;
    then the exact expected update slope dJ/dp over the success probability p (docs:
    Method and theory): budgeting's equals f'_{G-1}(p), Dr's is flat, GRPO's is U-shaped.
    A name may carry a difficulty weight (grpo,grpo+grpo_lead: side by side).
    """
    names = parse_estimators(
        estimators,
        rewards_only="explain shows estimators of the reward alone (in Python: "
        "advbudget.theory.implied_slope(name, G, p, <input>=...))",
        memory="its advantage for k of G depends on the prompt's history, which explain "
        "does not have",
    )
    if group_weight is not None:
        _group_weight(group_weight)
    columns = {name: _column(name, group_weight) for name in names}
    if plot is not None:
        _check_plot(plot)
    console = Console()
    tables = {
        name: theory.binary_advantages(base, group_size, **options)
        for name, (base, options) in columns.items()
    }
    weighted = f", weight {group_weight}" if group_weight else ""

    def advantage_table(chosen: list[str]) -> Table:
        table = Table(
            title=f"Advantages of a correct and a wrong rollout, k of G = {group_size} correct"
            f"{weighted}"
        )
        table.add_column("k", justify="right")
        for name in chosen:  # one column per estimator: 4 of them fit 80 columns
            table.add_column(f"{name}\ncorrect   wrong", justify="right")
        for k in range(group_size + 1):
            pairs = [f"{_cell(tables[n][0][k]):>7} {_cell(tables[n][1][k]):>7}" for n in chosen]
            table.add_row(str(k), *pairs)
        return table

    p = np.array(SLOPE_POINTS)

    def slope(name: str, points: np.ndarray) -> np.ndarray:
        base, options = columns[name]
        return theory.implied_slope(base, group_size, points, **options)

    slopes = {name: slope(name, p) for name in names}
    reference = theory.objective_slope(p, group_size)

    def slope_table(chosen: list[str]) -> Table:
        table = Table(title=f"Implied objective slope dJ/dp (exact, binary rewards{weighted})")
        table.add_column("p", justify="right")
        for name in chosen:
            table.add_column(name, justify="right")
        table.add_column(f"f'_{group_size - 1}(p)", justify="right", style="dim")
        for i, point in enumerate(SLOPE_POINTS):
            table.add_row(
                f"{point:g}", *[f"{slopes[n][i]:.4f}" for n in chosen], f"{reference[i]:.4f}"
            )
        return table

    for table in [
        *fit_width(console, names, advantage_table),
        *fit_width(console, names, slope_table),
    ]:
        console.print(table)
    console.print(
        "Budgeting's slope is f'_{G-1}(p): strong on hard prompts (small p), weak on easy "
        "ones. Dr's is constant; GRPO's rises again as p -> 1."
    )
    used = {options.get("group_weight") for _, options in columns.values()}
    if "dqw" in used:
        console.print(
            "dqw weighs each group against the others of its batch: here the batch of the "
            f"{group_size + 1} groups k = 0..{group_size}; in training the weights follow "
            "each batch's mix of difficulties."
        )
    if "grpo_lead" in used:
        console.print(
            "grpo_lead multiplies every advantage of a group by a weight of its solved "
            "share k/G (a positive one by w(k/G), a negative one by w(1 - k/G)): the slopes "
            "above include it, so a weighted budgeting's is no longer f'_{G-1}(p)."
        )
    for name, note in _NOTES.items():
        if any(get_spec(base).name == name for base, _ in columns.values()):
            console.print(note.format(G=group_size))
    if plot is not None:
        _plot(plot, group_size, names, tables, slope)
        console.print(f"Figure written to [bold]{plot}[/bold]")


# What the tables cannot say, printed when the estimator is shown (docs: Method and theory).
_NOTES = {
    "maxrl": (
        "maxrl is exactly {G} x budget on 0/1 rewards (up to eps), so under Adam the two "
        "differ mainly through clipping, the KL weight and eps; they part on graded rewards "
        "and where a group's mean is <= 0 (±1 rewards with few correct), where maxrl flips "
        "the sign and warns."
    ),
    "passk": (
        "passk optimises pass@k, 1 - (1 - p)^k: without the std division its slope is "
        "exactly (G - k)(1 - p)^(k - 1), (G - k) / k times d pass@k / dp, so it vanishes "
        "as p -> 1 and at k = G."
    ),
}


def _column(name: str, group_weight: str | None) -> tuple[str, dict[str, str]]:
    """An ``--estimators`` column: its base estimator, and its weight as options (its own,
    ``grpo+grpo_lead``, or ``--group-weight``'s; both at once is refused)."""
    base, own = split_weighted(name)
    if own is not None and group_weight is not None:
        raise typer.BadParameter(
            f"{name} carries its own weight; --group-weight {group_weight} weighs every "
            f"estimator: give one or the other",
            param_hint="--group-weight",
        )
    weight = own or group_weight
    return base, {} if weight is None else {"group_weight": weight}


def _group_weight(name: str) -> str:
    """``--group-weight``: a named weight (a callable or options are for Python)."""
    if name not in GROUP_WEIGHTS:
        raise typer.BadParameter(
            f"expected one of {', '.join(GROUP_WEIGHTS)}, got {name!r}", param_hint="--group-weight"
        )
    return name


def _cell(value: float) -> str:
    return "" if np.isnan(value) else f"{value:+.4f}"


def _check_plot(path: Path) -> None:
    """Fail before any work on a --plot that cannot be written."""
    check_output_file(path, "--plot")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as error:
        raise CommandError(missing_dependency(error, "--plot")) from None
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise typer.BadParameter(
            f"expected a file name ending in one of {sorted(formats)}, got {str(path)!r}",
            param_hint="--plot",
        )


def _plot(
    path: Path,
    group_size: int,
    names: Sequence[str],
    tables: dict[str, tuple[np.ndarray, np.ndarray]],
    slope: Callable[[str, np.ndarray], np.ndarray],
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise CommandError(missing_dependency(error, "--plot")) from None
    k = np.arange(group_size + 1)
    p = np.linspace(0.005, 0.995, 199)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for name in names:
        correct, wrong = tables[name]
        (line,) = left.plot(k, correct, marker="o", label=f"{name} (correct)")
        left.plot(k, wrong, marker="x", linestyle="--", color=line.get_color())
        right.plot(p, slope(name, p), label=name)  # weighted where the column is
    right.plot(
        p,
        theory.objective_slope(p, group_size),
        color="black",
        linestyle=":",
        label=f"f'_{group_size - 1}(p)",
    )
    left.axhline(0, color="grey", linewidth=0.5)
    left.set(
        xlabel=f"k correct of G = {group_size}",
        ylabel="advantage",
        title="Advantages (solid: correct, dashed: wrong)",
    )
    right.set(
        xlabel="success probability p",
        ylabel="dJ/dp",
        yscale="log",
        title="Implied objective slope",
    )
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    try:
        with atomic_output(path, label="--plot") as partial:  # no half-written figure
            figure.savefig(partial, dpi=120, format=path.suffix.lstrip(".").lower())
    finally:
        plt.close(figure)


app.add_typer(data_app, name="data", help="Prepare DAPO-Math-17K for verl, TRL and OpenRLHF.")
app.command("eval")(eval_command)
app.command("compare")(compare_command)
app.command("simulate")(simulate_command)
app.add_typer(experiment_app, name="experiment", help="Experiments on real trainers: lm.")
reflow_help(app)


def main() -> None:
    app()
