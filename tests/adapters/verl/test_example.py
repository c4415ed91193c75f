"""examples/verl_qwen3.sh: every baseline, with and without budgeting, composes into a
config that verl validates (``--dry-run``: CPU only, no model, data or GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "verl_qwen3.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHON": sys.executable, "ADVBUDGET_VERL_TRAINERS": "0", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=environ, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("budget", ["1", "0"])
@pytest.mark.parametrize("baseline", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_dry_run_validates(baseline: str, budget: str) -> None:
    out = run_script("--dry-run", BASELINE=baseline, BUDGET=budget)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_print_shows_the_recipe() -> None:
    out = run_script("--print", BASELINE="dr_grpo", BUDGET="1")
    assert out.returncode == 0, out.stderr
    command = out.stdout
    for expected in (
        "algorithm.adv_estimator=reward_budget",
        "algorithm.norm_adv_by_std_in_grpo=False",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
        "actor_rollout_ref.rollout.n=8",
        "data.train_batch_size=32",
        "actor_rollout_ref.rollout.name=vllm",
        "trainer.v1.trainer_mode=advbudget_sync",
    ):
        assert expected in command


def test_bad_baseline_and_bad_override_fail() -> None:
    assert run_script("--dry-run", BASELINE="ppo").returncode == 2
    out = run_script("--dry-run", "algorithm.adv_estimator=no_such_estimator")
    assert out.returncode == 1
    assert "no_such_estimator" in out.stderr
