"""``examples/openrlhf_qwen3.sh``: every flag parses with the installed OpenRLHF's parser
(``--parse-only``, CPU), for each baseline with and without budgeting."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openrlhf")

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "openrlhf_qwen3.sh"


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable, **env},
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("baseline", ["group_norm", "dr_grpo"])
@pytest.mark.parametrize("budget", ["1", "0"])
def test_flags_parse(baseline: str, budget: str) -> None:
    out = run("--parse-only", BASELINE=baseline, BUDGET=budget)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = "reward_budget" if budget == "1" else f"advbudget_{baseline}"
    assert f"flags parse; estimator {expected}" in out.stdout


def test_openrlhf_own_estimator() -> None:
    out = run("--parse-only", BUDGET="0", ESTIMATOR="group_norm")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "flags parse; estimator group_norm" in out.stdout


def test_extra_flags_reach_the_parser() -> None:
    out = run("--parse-only", "--no-such-flag")
    assert out.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in out.stderr


def test_print_shows_ray_job_submit_with_hook() -> None:
    out = run("--print")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ray job submit" in out.stdout
    assert "worker_process_setup_hook" in out.stdout
    assert "-m advbudget.adapters.openrlhf" in out.stdout


def test_rejects_unknown_baseline() -> None:
    out = run("--parse-only", BASELINE="gae")
    assert out.returncode == 2
    assert "BASELINE" in out.stderr
