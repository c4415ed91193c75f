"""examples/verl_qwen3.sh: every baseline x model x budgeting composes into a config that
verl validates (hydra composition, CPU only), each baseline sets what the paper's recipe
says, runs never share a folder, and every step the script runs works in this (the
documented verl) environment."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import VERL_WARNINGS

verl = pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "verl_qwen3.sh"
BASELINES = ("grpo", "dr_grpo", "gspo", "dapo", "dapo_clipcov", "dapo_klcov")
MODELS = {"qwen3-8b": "Qwen/Qwen3-8B", "llama3.2-3b": "meta-llama/Llama-3.2-3B-Instruct"}

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash"),
    VERL_WARNINGS,
]


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHON": sys.executable, "ADVBUDGET_VERL_TRAINERS": "0", **env}
    environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environ["PATH"]])
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=environ, capture_output=True, text=True, timeout=300
    )


def overrides(**env: str) -> list[str]:
    """The hydra overrides the script passes to verl (from ``--print``)."""
    out = run_script("--print", **env)
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    return words[words.index("verl.trainer.main_ppo") + 1 :]


def as_dict(items: list[str]) -> dict[str, str]:
    return dict(item.lstrip("+").split("=", 1) for item in items)


def test_dry_run_validates() -> None:
    out = run_script("--dry-run", BASELINE="dapo_klcov", MODEL="llama3.2-3b")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_every_baseline_model_and_budget_composes() -> None:
    from advbudget.adapters.verl.check_config import compose_config, validate

    folders = set()
    for baseline, model, budget in itertools.product(BASELINES, MODELS, ("1", "0")):
        given = overrides(BASELINE=baseline, MODEL=model, BUDGET=budget)
        config = compose_config(given)
        validate(config)  # verl's validate_config and our registries
        actor = config.actor_rollout_ref.actor
        assert config.actor_rollout_ref.model.path == MODELS[model]
        assert config.algorithm.adv_estimator == ("reward_budget" if budget == "1" else "grpo")
        assert config.actor_rollout_ref.rollout.n == 8
        assert config.data.train_batch_size == 32
        if baseline.startswith("dapo"):
            assert config.algorithm.filter_groups.enable
            assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
            assert config.reward.reward_manager.name == "dapo"
            loss_mode = {"dapo": "vanilla", "dapo_clipcov": "clip_cov", "dapo_klcov": "kl_cov"}
            assert actor.policy_loss.loss_mode == loss_mode[baseline]
        assert actor.use_kl_loss == (baseline == "grpo")
        folders.add(config.trainer.default_local_dir)
        assert config.trainer.experiment_name == Path(config.trainer.default_local_dir).name
    assert len(folders) == len(BASELINES) * len(MODELS) * 2  # no two runs share a folder


@pytest.mark.parametrize(
    ("baseline", "expected"),
    [
        ("grpo", {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
                  "actor_rollout_ref.actor.kl_loss_coef": "0.001",
                  "actor_rollout_ref.actor.kl_loss_type": "low_var_kl"}),
        ("dr_grpo", {"algorithm.norm_adv_by_std_in_grpo": "False",
                     "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm"}),
        ("gspo", {"actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
                  "actor_rollout_ref.actor.clip_ratio_low": "0.0003",
                  "actor_rollout_ref.actor.clip_ratio_high": "0.0004"}),
        ("dapo_clipcov", {"actor_rollout_ref.actor.policy_loss.clip_cov_ratio": "0.0002",
                          "reward.reward_kwargs.overlong_buffer_cfg.len": "4096"}),
        ("dapo_klcov", {"actor_rollout_ref.actor.policy_loss.kl_cov_ratio": "0.0002"}),
    ],
)  # fmt: skip
def test_baseline_recipes(baseline: str, expected: dict[str, str]) -> None:
    given = as_dict(overrides(BASELINE=baseline))
    for key, value in expected.items():
        assert given[key] == value, key


def test_names_logging_and_evaluation() -> None:
    given = as_dict(overrides(BASELINE="dapo", BUDGET="1", MODEL="llama3.2-3b"))
    assert given["trainer.experiment_name"] == "llama3.2-3b_dapo_budget"
    assert given["trainer.logger"] == '["console","wandb"]'
    assert given["data.val_files"].endswith("dapo/verl/val.parquet")
    assert as_dict(overrides(BUDGET_TOTAL="2.0"))["trainer.experiment_name"] == (
        "qwen3-8b_grpo_budget2.0"
    )
    script = SCRIPT.read_text()
    assert "--n 8 --k 8" in script
    assert "enable_thinking" not in script  # the chat template's default, as in eval


def test_bad_switches_fail() -> None:
    out = run_script("--dry-run", BASELINE="ppo")
    assert out.returncode == 2
    assert "dapo_klcov" in out.stderr
    assert run_script("--print", BUDGET="2").returncode == 2
    out = run_script("--dry-run", "algorithm.adv_estimator=no_such_estimator")
    assert out.returncode == 1
    assert "no_such_estimator" in out.stderr


def _advbudget(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from advbudget.lab.cli import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


def test_every_step_of_the_example_runs_in_this_environment(tmp_path: Path) -> None:
    """Data, training launch, checkpoint choice, merge and eval: what the script runs, in
    the environment the docs install (`pip install -e ".[verl]"`); vLLM (eval's GPU
    backend) is the only piece a CPU machine lacks."""
    script = SCRIPT.read_text()
    for step in ("advbudget data prepare --format verl", "-m verl.trainer.main_ppo",
                 "-m advbudget.adapters.verl.checkpoints", "-m verl.model_merger merge",
                 "advbudget eval --model"):  # fmt: skip
        assert step in script, step
    # 1. data: the bundled sample through the same command and format.
    out = _advbudget("data", "prepare", "--sample", "--format", "verl", "--val-size", "8",
                     "--output-dir", str(tmp_path / "dapo"), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "dapo" / "verl" / "val.parquet").is_file()
    # 2-3. the training entry point and the merger import (their --help runs no training).
    for module in ("verl.trainer.main_ppo", "verl.model_merger"):
        out = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
            timeout=300, cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
    # 4. eval's grading, with its default grader (math-verify, which the verl extra brings).
    generations = tmp_path / "generations.jsonl"
    lines = [{"benchmark": "aime24", "index": 0, "problem": "1+1?", "answer": "2",
              "samples": ["so \\boxed{2}", "Answer: 3"]}]  # fmt: skip
    generations.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = _advbudget("eval", "--score-only", str(generations), "--k", "2",
                     "--output-dir", str(tmp_path / "eval"), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    scores: dict[str, Any] = json.loads((tmp_path / "eval" / "scores.json").read_text())
    assert scores["benchmarks"]["aime24"]["avg"] == 0.5
