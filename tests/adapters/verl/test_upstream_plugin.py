"""The plugin that runs verl's own tests against our mirrors (tests/upstream/) proves its
swap: a test that reached verl's estimator stock and not our mirror swapped fails, and a
swapped run without the stock run's record refuses to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("verl")

UPSTREAM = Path(__file__).resolve().parents[2] / "upstream"

CALLS = """
import numpy as np
import torch
from verl.trainer.ppo import core_algos

from advbudget.adapters.verl import estimator_function


def test_grpo():
    rewards, mask = torch.tensor([[1.0], [0.0]]), torch.ones(2, 1)
    {call}


def test_swap_is_visible():
    swapped = core_algos.compute_grpo_outcome_advantage.__wrapped__
    ours = estimator_function("advbudget_grpo")
    assert (swapped is ours) == {swap}
"""
GRPO = (
    'core_algos.compute_grpo_outcome_advantage(rewards, mask, np.array(["a", "a"], dtype=object))'
)


def _run(tmp_path: Path, call: str, swap: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_up.py").write_text(textwrap.dedent(CALLS.format(call=call, swap=swap)))
    command = [
        sys.executable, "-m", "pytest", "-q", "-c", str(UPSTREAM / "pytest.ini"),
        "--rootdir", str(tmp_path), "--upstream=verl",
        f"--upstream-reached={tmp_path / 'reached.json'}", "test_up.py",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(UPSTREAM)}
    return subprocess.run(
        command + (["--upstream-swap"] if swap else []),
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_swap_is_proven(tmp_path: Path) -> None:
    refused = _run(tmp_path, GRPO, swap=True)
    assert refused.returncode != 0
    assert "run the stock tests first" in refused.stderr

    stock = _run(tmp_path, GRPO, swap=False)
    assert stock.returncode == 0, stock.stdout + stock.stderr
    reached = json.loads((tmp_path / "reached.json").read_text())
    assert reached == {"test_up.py::test_grpo": ["grpo"], "test_up.py::test_swap_is_visible": []}
    assert "2 tests run, 1 reaching verl's own estimators (grpo), 1 of them passed" in stock.stdout

    swapped = _run(tmp_path, GRPO, swap=True)
    assert swapped.returncode == 0, swapped.stdout + swapped.stderr
    assert "1 reaching advbudget's mirrors (grpo), 1 of them passed" in swapped.stdout

    missed = _run(tmp_path, "pass", swap=True)  # the same test, no longer reaching it
    assert missed.returncode != 0
    assert "reached ['grpo'] stock but not advbudget's mirrors swapped" in missed.stdout
