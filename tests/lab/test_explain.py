"""The catalogue in the lab: ``advbudget explain`` (tables, slopes, the theory beside each
estimator, weights, plots, errors), the console script, and the lab's and the LM
experiment's weighted names (``<estimator>+<weight>``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.cli._estimators import parse_estimators
from advbudget.lab.lm import LMConfig
from advbudget.lab.sim import RunConfig, TaskConfig, make_task, train


def test_explain_prints_tables_and_slopes():
    result = CliRunner().invoke(app, ["explain", "--group-size", "8"])
    assert result.exit_code == 0, result.output
    assert "+0.8750" in result.output  # budget, k = 1: 1 - 1/8
    assert "6.0333" in result.output  # f'_7(0.05)
    assert "18.5067" in result.output  # GRPO's slope at p = 0.05


def test_explain_writes_a_plot(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "figures" / "slopes.png"
    result = CliRunner().invoke(
        app, ["explain", "-G", "4", "--estimators", "budget,dr", "--plot", str(target)]
    )
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explain_rejects_bad_input():
    result = CliRunner().invoke(app, ["explain", "--estimators", "budget,nope"])
    assert result.exit_code != 0
    assert "nope" in result.output
    assert CliRunner().invoke(app, ["explain", "--group-size", "1"]).exit_code != 0


def test_console_script_is_installed():
    out = subprocess.run(
        [sys.executable, "-m", "advbudget.lab.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "explain" in out.stdout


def test_explain_shows_them_beside_budget_with_their_theory():
    result = CliRunner().invoke(
        app, ["explain", "-G", "8", "--estimators", "budget,maxrl,passk"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "maxrl is exactly 8 x budget on 0/1 rewards" in text
    assert "passk optimises pass@k" in text
    # k = 1 of 8 correct: budget +0.8750, maxrl +6.9999 (8 x, up to eps), passk +1.0000.
    for cells in ("+0.8750 -0.1250", "+6.9999 -1.0000", "+1.0000 -0.1429"):
        assert cells in text
    plain = CliRunner().invoke(app, ["explain", "-G", "8", "--estimators", "budget,grpo"])
    assert "maxrl" not in plain.output


def test_explain_shows_a_weighted_table() -> None:
    plain = CliRunner().invoke(app, ["explain", "-G", "4", "--estimators", "grpo"])
    weighted = CliRunner().invoke(
        app, ["explain", "-G", "4", "--estimators", "grpo", "--group-weight", "grpo_lead"]
    )
    assert plain.exit_code == weighted.exit_code == 0
    # k = 1: GRPO's +1.5 / -0.5, weighted by w(1/4) and w(3/4) (the SPEC's example)
    assert "+1.5000 -0.5000" in plain.output
    assert "+2.2390 -0.4750" in weighted.output
    assert "multiplies every advantage" in weighted.output
    bad = CliRunner().invoke(app, ["explain", "--group-weight", "lead"])
    assert bad.exit_code == 2
    assert "expected one of grpo_lead, dqw, got 'lead'" in bad.output


def test_explain_shows_an_estimator_beside_its_weighted_self() -> None:
    from advbudget.theory import implied_slope

    result = CliRunner().invoke(
        app, ["explain", "-G", "4", "--estimators", "grpo,grpo+grpo_lead,budget+dqw"]
    )
    assert result.exit_code == 0, result.output
    # k = 1: GRPO's +1.5 / -0.5, and weighted by w(1/4) and w(3/4), in one table
    assert "│ 1 │ +1.5000 -0.5000 │ +2.2390 -0.4750 │" in result.output
    # the slopes are the weighted estimator's (p = 0.5 is a row of the slope table)
    weighted = implied_slope("grpo", 4, [0.5], group_weight="grpo_lead")[0]
    plain = implied_slope("grpo", 4, [0.5])[0]
    assert f"│  0.5 │ {plain:.4f} │ {weighted:>14.4f} │" in result.output
    text = " ".join(result.output.split())
    assert "dqw weighs each group against the others of its batch" in text
    assert "grpo_lead multiplies every advantage" in text
    both = CliRunner().invoke(
        app, ["explain", "--estimators", "grpo+dqw", "--group-weight", "grpo_lead"]
    )
    assert both.exit_code == 2
    assert "grpo+dqw carries its own weight" in " ".join(both.output.split())


def test_the_lab_trains_with_a_weighted_estimator() -> None:
    """The same seed with and without the weight: identical rollouts at step 1, different
    updates (the weight reaches the advantages), and the same accuracy at step 0."""
    task = make_task(TaskConfig(train_prompts=64, validation_prompts=64))
    plain = train(RunConfig(estimator="grpo", steps=3, prompts_per_step=8), task)
    lead = train(RunConfig(estimator="grpo+grpo_lead", steps=3, prompts_per_step=8), task)
    assert plain["accuracy"][0] == lead["accuracy"][0]
    assert not np.array_equal(plain["weights"], lead["weights"])
    with pytest.raises(ValueError, match=r"^estimator: expected a name, or <estimator>\+<weight>"):
        RunConfig(estimator="grpo+lead")


def test_the_command_line_and_the_lm_config_take_weighted_names() -> None:
    assert parse_estimators("grpo, grpo+dqw,budget+grpo_lead") == (
        "grpo",
        "grpo+dqw",
        "budget+grpo_lead",
    )
    with pytest.raises(typer.BadParameter, match="with a weight of 'grpo_lead', 'dqw'"):
        parse_estimators("grpo+lead")
    with pytest.raises(typer.BadParameter, match="nope"):
        parse_estimators("nope+dqw")
    assert LMConfig(estimators=("grpo", "grpo+grpo_lead")).estimators[1] == "grpo+grpo_lead"
