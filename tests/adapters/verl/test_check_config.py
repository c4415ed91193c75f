"""``python -m advbudget.adapters.verl.check_config`` (the verl example's ``--dry-run``) says
what it validated and warns about settings verl accepts that would waste a run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from advbudget.adapters.verl.check_config import compose_config, concerns, summary

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "verl_qwen3.sh"


def _config(tmp_path: Path, *overrides: str):  # type: ignore[no-untyped-def]
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    train.touch()
    val.touch()
    return compose_config(
        [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "algorithm.adv_estimator=grpo",
            *list(overrides),
        ]
    )


def test_a_group_of_one_rollout_is_flagged(tmp_path: Path) -> None:
    assert concerns(_config(tmp_path, "actor_rollout_ref.rollout.n=8")) == []
    (only,) = concerns(_config(tmp_path, "actor_rollout_ref.rollout.n=1"))
    assert only.startswith("actor_rollout_ref.rollout.n=1: grpo")
    assert "every group is skipped" in only
    # GAE learns from a critic, not from groups: one rollout per prompt is its normal case.
    gae = _config(tmp_path, "actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=gae")
    assert concerns(gae) == []


def test_missing_data_files_are_named(tmp_path: Path) -> None:
    config = compose_config(
        [f"data.train_files={tmp_path / 'nope.parquet'}", f"data.val_files=[{tmp_path}]"]
    )
    (missing,) = concerns(config)
    assert missing.startswith("data.train_files: ")
    assert "nope.parquet does not exist" in missing


def test_summary_names_the_run(tmp_path: Path) -> None:
    line = summary(_config(tmp_path, "actor_rollout_ref.rollout.n=8"))
    assert "estimator=grpo" in line
    assert "rollout.n=8" in line
    assert "policy_loss=vanilla" in line


def test_solved_reward_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``+algorithm.advbudget.solved_reward`` from the command line: a number, or null
    (off); anything else fails the check (before verl's own) in one line naming it."""
    from advbudget.adapters.verl._metrics import solved_reward
    from advbudget.adapters.verl.check_config import main

    def read(value: str) -> float | None:
        config = _config(tmp_path, f"+algorithm.advbudget.solved_reward={value}")
        return solved_reward(config.algorithm)

    assert read("0.5") == 0.5
    assert read("-1") == -1.0
    assert read("null") is None
    assert read("None") is None  # hydra passes the string
    assert solved_reward(_config(tmp_path).algorithm) == 1.0
    base = [f"data.train_files={tmp_path / 'train.parquet'}", "algorithm.adv_estimator=grpo"]
    assert main([*base, "+algorithm.advbudget.solved_reward=high"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "invalid verl config: ValueError: algorithm.advbudget.solved_reward: expected a "
        "finite number or null (off), got 'high'"
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_example_dry_run_warns_on_one_rollout_per_prompt() -> None:
    out = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "actor_rollout_ref.rollout.n=1"],
        env={**os.environ, "PYTHON": sys.executable, "ADVBUDGET_VERL_TRAINERS": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "warning: actor_rollout_ref.rollout.n=1: reward_budget" in out.stderr
    assert "validated: estimator=reward_budget" in out.stdout
    assert "Disabled critic" not in out.stderr
    assert out.stdout.strip().endswith("ok")
