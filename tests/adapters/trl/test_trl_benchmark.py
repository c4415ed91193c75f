"""benchmarks/trl_adapter.py keeps working (a short run; timings are reported, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "trl_adapter.py"


def test_benchmark_runs(tmp_path: Path) -> None:
    output = tmp_path / "trl.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--steps",
        "3",
        "--rounds",
        "1",
        "--output",
        str(output),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    payload = json.loads(output.read_text())
    assert set(payload["results"]) == {
        "stock GRPO",
        "advbudget budget",
        "advbudget budget + kappa_eff every step",
        "advbudget budget, skipped_groups=drop",
    }
    assert payload["drop_overhead"]["ratio"] > 0
    assert output.with_suffix(".md").read_text().startswith("# advbudget TRL adapter benchmark")
