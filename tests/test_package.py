"""Packaging promises: no framework on import, a typed package, a working CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import advbudget
from advbudget.cli import app

FRAMEWORKS = ("torch", "jax", "tensorflow", "verl", "trl", "openrlhf", "transformers", "ray")


def test_import_loads_no_ml_framework():
    code = (
        "import sys, advbudget, advbudget.metrics, advbudget.theory, advbudget.adapters, "
        "advbudget.data, advbudget.rewards, advbudget.eval, advbudget.sim, advbudget.cli, "
        "advbudget.testing, advbudget.testing.verl, advbudget.testing.trl, "
        "advbudget.testing.openrlhf;"
        f"print([m for m in {FRAMEWORKS!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_and_typing():
    for name in advbudget.__all__:
        assert getattr(advbudget, name) is not None
    assert (Path(advbudget.__file__).parent / "py.typed").exists()


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
        [sys.executable, "-m", "advbudget.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "explain" in out.stdout


def test_readme_examples_run():
    """Every python block of the README runs as written."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = readme.split("```python\n")[1:]
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block.split("```")[0], "README.md", "exec"), {})
