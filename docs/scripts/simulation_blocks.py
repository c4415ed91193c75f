"""The generated parts of docs/simulation.md: every result there is rendered from a command.

Each block of the page sits between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``. ``task`` and ``skills`` are computed live (seconds); the
others are rendered from the JSON that the command shown in the block wrote to
docs/data/sim/. After rerunning those commands::

    python docs/scripts/simulation_blocks.py            # rewrites the blocks of the page
    python docs/scripts/simulation_blocks.py --check    # exit 1 if a block is stale

The tests render every block the same way and compare it with the page (the lab, with
``pip install -e ".[lab]"``; run from the repository's root).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from advbudget.lab.sim import _report
from advbudget.lab.sim._experiment import REGIMES
from advbudget.lab.sim._task import TaskConfig, make_task

BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)
DOCS_PAGE = Path("docs/simulation.md")
DATA_DIR = Path("docs/data/sim")


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    """A pipe table; ``|`` inside a cell is escaped.

    Examples:
        >>> print(markdown_table(["a", "b"], [["1", "x|y"]]))
        | a | b |
        |---|---|
        | 1 | x\\|y |
    """

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(columns), "|" + "---|" * len(columns), *(line(r) for r in rows)])


def render_task() -> str:
    """The reference points of both regimes (``advbudget simulate --regime both --describe``)."""
    rows = [
        _report.task_row(name, _report.describe_task(regime.task))
        for name, regime in REGIMES.items()
    ]
    return (
        "```\nadvbudget simulate --regime both --describe\n```\n\n"
        + markdown_table(_report.TASK_COLUMNS, rows)
        + "\n"
    )


def render_skills() -> str:
    """The skill table of the default task: logit and success probability at hardness 0."""
    task = make_task(TaskConfig(train_prompts=1, validation_prompts=1))
    config = task.config
    routine, hard = 0, config.routine_types
    other_hard = hard + 1 if config.hard_types > 1 else hard

    def cell(logit: float) -> str:
        return f"{logit:+g} (q = {1 / (1 + math.exp(-logit)):.2f})"

    first_specialist = 1 + config.flawed_strategies
    labels = {
        0: "`sound` (generic)",
        1: "`flawed1..n` (generic, plausible, mostly wrong)",
        first_specialist: "`special_j` (one per hard type j)",
    }
    rows = [
        [label, cell(task.skill[index, routine]), cell(task.skill[index, hard]),
         cell(task.skill[index, other_hard])]
        for index, label in labels.items()
        if index < len(task.strategy_names)
    ]  # fmt: skip
    columns = ["strategy", "routine types", "hard type j", "other hard types"]
    return markdown_table(columns, rows) + "\n"


def render_experiment(data: dict[str, Any]) -> str:
    """Command, table, reading and run time of an experiment's JSON."""
    columns = _report.experiment_columns(data)
    lines = [
        f"```\n{data['command']}\n```\n",
        f"*{_report.experiment_title(data)}.*\n",
        markdown_table(columns, _report.experiment_rows(data)),
        "",
        _report.sweep_reading(data),
        "",
        f"<small>{_runs(data)} in {data['seconds']:.0f} s with --workers "
        f"{data.get('workers', 1)} on the shared 2-core development machine.</small>",
    ]
    return "\n".join(lines) + "\n"


def _runs(data: dict[str, Any]) -> str:
    count = len(data["arms"]) * len(data["config"]["seeds"])
    return f"{count} runs of {data['config']['steps']} steps"


def render_map(data: dict[str, Any]) -> str:
    """Command, the two difference tables, the per-cell details and the reading."""
    config = data["config"]
    lines = [f"```\n{data['command']}\n```\n"]
    for other in config["estimators"][1:]:
        lines.append(f"*{_report.map_title(data).replace('{other}', other)}.*\n")
        lines.append(markdown_table(_report.map_columns(data), _report.map_rows(data, other)))
        lines.append("")
    lines.append(_report.map_reading(data))
    lines.append("")
    lines.append(
        "Per cell (means over the seeds): the policy-class ceiling and each estimator's "
        "final accuracy, with the hard types it found in brackets.\n"
    )
    lines.append(markdown_table(_report.map_detail_columns(data), _report.map_detail_rows(data)))
    runs = len(data["cells"]) * len(config["estimators"]) * len(config["seeds"])
    lines.append("")
    lines.append(
        f"<small>{runs} runs of {config['steps']} steps in {data['seconds']:.0f} s "
        f"({data['seconds'] / 60:.1f} min) with --workers {data['workers']} on the shared "
        "2-core development machine.</small>"
    )
    return "\n".join(lines) + "\n"


def render(name: str, data_dir: Path = DATA_DIR) -> str:
    """The body of the block ``name``."""
    if name == "task":
        return render_task()
    if name == "skills":
        return render_skills()
    path = Path(data_dir) / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return render_map(data) if name == "map" else render_experiment(data)


def blocks(text: str) -> list[tuple[str, str]]:
    """``(name, body)`` of every generated block of a page."""
    return [(match["name"], match["body"]) for match in BLOCK.finditer(text)]


def update(text: str, data_dir: Path = DATA_DIR) -> str:
    """``text`` with every generated block rendered afresh."""

    def fill(match: re.Match[str]) -> str:
        return match[1] + render(match["name"], data_dir) + match[4]

    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--page", type=Path, default=DOCS_PAGE)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--check", action="store_true", help="only report stale blocks")
    options = parser.parse_args(argv)
    text = options.page.read_text(encoding="utf-8")
    fresh = update(text, options.data_dir)
    if options.check:
        stale = [n for (n, old), (_, new) in zip(blocks(text), blocks(fresh), strict=True)
                 if old != new]  # fmt: skip
        for name in stale:
            print(f"{options.page}: block {name!r} differs from its source")
        return 1 if stale else 0
    options.page.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
