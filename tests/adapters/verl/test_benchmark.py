"""benchmarks/verl_adapter.py keeps working: its own agreement check passes (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "verl_adapter.py"


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "verl.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    payload = json.loads(output.read_text())
    assert payload["problems"] == []
    assert {r["path"] for r in payload["results"]} == {
        "verl grpo (Python loop)",
        "verl grpo_vectorized",
        "advbudget_grpo",
        "reward_budget",
    }
    assert output.with_suffix(".md").read_text().startswith("# advbudget verl benchmark")
