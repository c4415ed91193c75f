"""The example's --smoke mode: trains 2 steps on CPU and evaluates, in a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl_qwen3.py"


def test_smoke_runs_two_steps(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-W", "ignore::FutureWarning", str(EXAMPLE), "--smoke",
         "--max-steps", "2", "--kappa-every", "1", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "advbudget/skipped_group_fraction" in run.stdout
    # κ_eff is logged when a step has pairs; the tiny random model may score every
    # completion 0 (every group skipped), and then the key is left out, never None.
    assert not re.search(r"'advbudget/[^']*': '?None", run.stdout)
    assert (tmp_path / "final" / "config.json").exists()
    assert json.loads((tmp_path / "eval" / "scores.json").read_text())  # advbudget eval ran
