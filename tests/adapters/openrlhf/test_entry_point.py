"""``python -m advbudget.adapters.openrlhf``: OpenRLHF's real parser and checks, our names
and preconditions, parse-only mode."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

pytest.importorskip("openrlhf")

from advbudget.adapters.openrlhf.__main__ import main

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

BASE = ["--advbudget.parse_only", "--actor.model_name_or_path", "Qwen/Qwen3-8B"]


def parse(*flags: str):  # type: ignore[no-untyped-def]
    return main([*BASE, *flags])


def test_accepts_reward_budget_and_budget() -> None:
    args = parse(
        "--algo.advantage.estimator", "reward_budget",
        "--rollout.n_samples_per_prompt", "8",
        "--advbudget.budget", "0.5",
    )  # fmt: skip
    assert args.algo.advantage.estimator == "reward_budget"
    assert args.advbudget.budget == 0.5
    assert args.rollout.n_samples_per_prompt == 8
    assert args.critic.model_name_or_path is None  # OpenRLHF's own post-parse logic ran


@pytest.mark.parametrize("name", ["advbudget_group_norm", "advbudget_dr_grpo", "advbudget_rloo"])
def test_accepts_our_other_names(name: str) -> None:
    args = parse("--algo.advantage.estimator", name, "--rollout.n_samples_per_prompt", "4")
    assert args.advbudget.budget == 1.0


def test_openrlhf_names_and_checks_unchanged() -> None:
    args = parse("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "8")
    assert args.algo.advantage.estimator == "group_norm"
    with pytest.raises(AssertionError, match="n_samples_per_prompt > 1"):
        parse("--algo.advantage.estimator", "group_norm")


def test_rejects_single_sample() -> None:
    with pytest.raises(SystemExit, match=r"n_samples_per_prompt > 1 \(got 1\)"):
        parse("--algo.advantage.estimator", "reward_budget")


def test_rejects_critic() -> None:
    with pytest.raises(SystemExit, match="uses no critic"):
        parse(
            "--algo.advantage.estimator", "reward_budget",
            "--rollout.n_samples_per_prompt", "8",
            "--critic.model_name_or_path", "x",
        )  # fmt: skip


def test_rejects_bad_budget() -> None:
    with pytest.raises(SystemExit, match="budget must be > 0"):
        parse(
            "--algo.advantage.estimator", "reward_budget",
            "--rollout.n_samples_per_prompt", "8",
            "--advbudget.budget", "0",
        )  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [
        ["--algo.advantage.estimator", "nope", "--rollout.n_samples_per_prompt", "8"],
        ["--advantage_estimator", "reward_budget"],  # flat flags: gone since 0.10.2
    ],
)
def test_argparse_errors(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*flags)
    assert info.value.code == 2


def test_parser_restored() -> None:
    parse("--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8")
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo.advantage.estimator", choices=["gae"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--algo.advantage.estimator", "reward_budget"])


def test_module_runs_as_a_script() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "advbudget.adapters.openrlhf", *BASE,
         "--algo.advantage.estimator", "reward_budget", "--rollout.n_samples_per_prompt", "8"],
        capture_output=True, text=True, env=dict(os.environ), timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "flags parse; estimator reward_budget" in out.stdout
