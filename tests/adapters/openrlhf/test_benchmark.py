"""benchmarks/openrlhf_adapter.py keeps working: its agreement check passes (no timing
asserts), run as a user runs it: without the tests' flash_attn/vllm stubs on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import STUBS

pytest.importorskip("openrlhf")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "openrlhf_adapter.py"


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "openrlhf.json"
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p != str(STUBS))}
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    payload = json.loads(output.read_text())
    assert payload["problems"] == []
    assert {r["path"] for r in payload["results"]} == {
        "OpenRLHF group_norm",
        "advbudget_group_norm",
        "reward_budget",
        "advbudget_group_norm, copies",
        "floor: bookkeeping only",
    }
    assert [r["n"] for r in payload["drop_costs"]] == [512]
    assert output.with_suffix(".md").read_text().startswith("# advbudget OpenRLHF benchmark")
