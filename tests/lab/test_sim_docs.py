"""docs/simulation.md: every result there is what a command in the repository prints.

The cheap blocks (the task's reference points, the skill table) are computed here; the
others are rendered again from the JSON in docs/data/sim/ that the command shown in each
block wrote, and that JSON is checked to be what that command configures.
"""

from __future__ import annotations

import json
import re
import runpy
import shlex
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.sim import EXPERIMENTS, REGIMES, TaskConfig, experiment_config, map_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "simulation.md"
DATA = ROOT / "docs" / "data" / "sim"
SCRIPT = ROOT / "docs" / "scripts" / "simulation_blocks.py"

_docs = SimpleNamespace(**runpy.run_path(str(SCRIPT)))  # a docs script, not a package module
TEXT = PAGE.read_text(encoding="utf-8")
BLOCKS = dict(_docs.blocks(TEXT))
STORED = sorted(name for name in BLOCKS if name not in ("task", "skills"))


def test_the_page_has_every_block():
    expected = {"task", "skills", "map"} | {
        f"{name}-{regime}" for name in EXPERIMENTS for regime in REGIMES
    }
    assert set(BLOCKS) == expected
    assert sorted(path.stem for path in DATA.glob("*.json")) == sorted(STORED)


@pytest.mark.parametrize("name", ["task", "skills"])
def test_live_blocks_equal_the_commands_output(name):
    assert BLOCKS[name] == _docs.render(name, DATA)


def test_task_block_equals_the_describe_command():
    # The block shows `advbudget simulate --regime both --describe`: run it and find every
    # number of the block's rows in its output.
    result = CliRunner().invoke(
        app, ["simulate", "--regime", "both", "--describe"], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    assert "advbudget simulate --regime both --describe" in BLOCKS["task"]
    printed = re.findall(r"\d+\.\d+", result.output)
    shown = re.findall(r"\d+\.\d+", BLOCKS["task"].split("|---", 1)[1])
    assert shown == printed


@pytest.mark.parametrize("name", STORED)
def test_stored_blocks_equal_their_json(name):
    assert BLOCKS[name] == _docs.render(name, DATA), (
        f"docs/simulation.md block {name!r} is stale: python docs/scripts/simulation_blocks.py"
    )


@pytest.mark.parametrize("name", STORED)
def test_stored_json_is_what_the_shown_command_configures(name):
    data = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    command = data["command"]
    assert f"```\n{command}\n```" in BLOCKS[name]
    words = shlex.split(command)
    assert words[:2] == ["advbudget", "simulate"]
    result = CliRunner().invoke(app, ["simulate", *words[2:], "--print-config"])
    assert result.exit_code == 0, result.output
    configs = json.loads(result.output)
    if name == "map":
        assert configs == json.loads(json.dumps(data["config"]))
        assert data["config"] == json.loads(json.dumps(asdict(map_config())))
        return
    regime = data["regime"]
    by_regime = {config["regime"]: config for config in configs}
    assert by_regime[regime] == json.loads(json.dumps(data["config"]))
    # And the defaults of the experiment in that regime, apart from the options shown.
    default = asdict(experiment_config(data["config"]["name"], regime=regime))
    assert data["config"]["task"] == json.loads(json.dumps(default["task"]))


def _allowed_decimals() -> set[str]:
    """Decimal numbers the prose may use: settings of the lab, not results."""
    values: set[float] = {0.5}  # the discovery threshold (specialist probability)
    configs = [asdict(TaskConfig()), asdict(map_config())]
    configs += [asdict(experiment_config(n, regime=r)) for n in EXPERIMENTS for r in REGIMES]

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, float):
            values.add(abs(value))

    for config in configs:
        walk(config)
    return {f"{value:g}" for value in values} | {f"{value}" for value in values}


def test_prose_quotes_no_result():
    """Outside the generated blocks the page states settings, never measured numbers."""
    prose = _docs.BLOCK.sub("", TEXT)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)
    prose = re.sub(r"^#+ .*$|§[\d.]+", "", prose, flags=re.M)  # section numbers
    allowed = _allowed_decimals()
    found = set(re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", prose))
    assert found <= allowed, f"numbers in the prose that no command prints: {found - allowed}"


def _demo_simulate_command() -> list[str]:
    """The `advbudget simulate` line of the Makefile's demo recipe, as words."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    line = next(line for line in recipe.splitlines() if "advbudget simulate" in line)
    words = shlex.split(line.strip())
    return words[words.index("simulate") :]


def test_make_demo_runs_both_regimes_in_80_columns(tmp_path):
    words = _demo_simulate_command()
    configs = json.loads(CliRunner().invoke(app, [*words, "--print-config"]).output)
    assert [config["regime"] for config in configs] == ["transient", "persistent"]
    # The same command, shrunk to seconds: two tables, two readings, the pointer.
    quick = [*words, "--quick", "--steps", "6", "--output-dir", str(tmp_path)]
    result = CliRunner().invoke(app, quick, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert result.output.count("Reading:") == 2
    assert lines[-1] == "What this shows and what it does not: docs/simulation.md"
    assert len(lines) <= 40  # one screen, with `advbudget explain` above it


def _page_commands() -> list[str]:
    """Every `advbudget simulate ...` line in the page's code blocks (comments cut)."""
    commands = []
    for block in re.findall(r"```\n(.*?)```", TEXT, flags=re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("advbudget simulate"):
                commands.append(line)
    return sorted(set(commands))


@pytest.mark.parametrize("command", _page_commands())
def test_every_command_on_the_page_parses_and_configures(command):
    # The long ones are run for the stored JSON (checked above); here each is parsed
    # and configured exactly as written, which fails on any unknown or bad option.
    words = shlex.split(command)[2:]
    result = CliRunner().invoke(app, ["simulate", *words, "--print-config"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)


def test_docs_script_check_passes():
    # As the page says to run it: from the repository's root, with its default paths.
    result = subprocess.run(
        [sys.executable, str(SCRIPT.relative_to(ROOT)), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docs_script_check_names_a_stale_block(tmp_path):
    stale = tmp_path / "simulation.md"
    stale.write_text(TEXT.replace("| budget |", "| budgeted |", 1), encoding="utf-8")
    assert stale.read_text(encoding="utf-8") != TEXT
    assert _docs.main(["--page", str(stale), "--data-dir", str(DATA), "--check"]) == 1


def test_tables_escape_pipes_in_cells():
    assert _docs.markdown_table(["a", "b"], [["1", "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"
