"""``examples/skyrl_qwen3.sh``: every baseline's command, with and without budgeting, is
parsed by the adapter's SkyRL config and passes SkyRL's own ``validate_cfg`` (what the entry
point runs before Ray starts) and the adapter's checks. The CPU mode runs in test_loop.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("skyrl")

from advbudget.adapters.skyrl._trainer import check_run, parse_config

from .conftest import SKYRL_WARNINGS

pytestmark = SKYRL_WARNINGS
SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "skyrl_qwen3.sh"
BASELINES = ["grpo", "dr_grpo", "gspo", "dapo", "dapo_clipcov", "dapo_klcov"]


def _overrides(**env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    out = subprocess.run(
        ["bash", str(SCRIPT), "--print"],
        capture_output=True,
        text=True,
        env={**environ, "PYTHON": sys.executable, **env},
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    return words[words.index("advbudget.adapters.skyrl") + 1 :]


@pytest.mark.parametrize("budget", ["1", "0"])
@pytest.mark.parametrize("baseline", BASELINES)
def test_every_command_passes_skyrls_validation(baseline: str, budget: str) -> None:
    from skyrl.train.utils.utils import validate_cfg

    cfg = parse_config(_overrides(BASELINE=baseline, BUDGET=budget))
    validate_cfg(cfg)
    options = check_run(cfg)
    algorithm = cfg.trainer.algorithm
    expected = (
        "reward_budget"
        if budget == "1"
        else f"advbudget_{'dr' if baseline == 'dr_grpo' else 'grpo'}"
    )
    assert algorithm.advantage_estimator == expected
    assert dict(options.estimator_options) == {"budget": 1.0}
    assert options.kappa_every == 10
    assert cfg.trainer.max_training_steps == 500


def test_an_unknown_baseline_is_refused() -> None:
    out = subprocess.run(
        ["bash", str(SCRIPT), "--print"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable, "BASELINE": "ppo"},
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "BASELINE: expected grpo, dr_grpo, gspo, dapo, dapo_clipcov or dapo_klcov" in out.stderr


def test_skyrls_own_entry_point_dispatches_to_ours() -> None:
    """``python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=
    advbudget.adapters.skyrl ...``: SkyRL's main hands the command line to the adapter's
    main, whose config knows ``trainer.algorithm.advbudget`` (SkyRL's would refuse the key)
    and whose checks refuse a bad option in one line before Ray starts."""
    out = subprocess.run(
        [
            sys.executable, "-m", "skyrl.train.entrypoints.main_base",
            "trainer.override_entrypoint=advbudget.adapters.skyrl",
            "trainer.algorithm.advantage_estimator=reward_budget",
            "trainer.algorithm.advbudget.skipped_groups=skip",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last == (
        "ValueError: trainer.algorithm.advbudget.skipped_groups: expected one of keep, drop, "
        "resample, got 'skip'"
    ), out.stderr[-2000:]
    assert "Invalid fields" not in out.stderr  # not SkyRL's own config
