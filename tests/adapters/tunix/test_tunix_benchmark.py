"""benchmarks/tunix_adapter.py keeps working: its agreement check passes (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tunix")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "tunix_adapter.py"


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "tunix.json"
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
        "tunix grpo",
        "advbudget_grpo",
        "reward_budget",
    }
    assert {r["name"] for r in payload["ratios"]} == {
        "advbudget_grpo / tunix grpo",
        "reward_budget / tunix grpo",
    }
    assert output.with_suffix(".md").read_text().startswith("# advbudget tunix benchmark")
