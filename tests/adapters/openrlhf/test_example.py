"""``examples/openrlhf_qwen3.sh``: every flag of every baseline x model x budgeting parses
with the installed OpenRLHF's parser and checks; ``--parse-only`` works on a CPU without
vLLM, flash-attn or anything from tests/; logging and run folders are as documented."""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openrlhf")

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "openrlhf_qwen3.sh"
BASELINES = ("grpo", "dr_grpo", "gspo", "dapo")
MODELS = {"qwen3-8b": "Qwen/Qwen3-8B", "llama3.2-3b": "meta-llama/Llama-3.2-3B-Instruct"}


def run(*args: str, clean: bool = False, cwd: Path | None = None, **env: str):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    environ = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    environ.update(PYTHON=sys.executable, **env)
    if clean:  # what a user's shell has: no test stubs (conftest adds them) on the path
        environ.pop("PYTHONPATH", None)
        environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environ["PATH"]])
        environ.pop("PYTHON")
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def flags(**env: str) -> list[str]:
    """The flags the script gives OpenRLHF (from ``--print``)."""
    out = run("--print", **env)
    assert out.returncode == 0, out.stderr[-3000:]
    words = shlex.split(out.stdout)
    return words[words.index("advbudget.adapters.openrlhf") + 1 :]


def parse(given: list[str]) -> Any:
    """OpenRLHF's parser and checks, in this process (the parse-only path)."""
    from advbudget.adapters.openrlhf.__main__ import main

    return main(["--advbudget.parse_only", *given])


def test_parse_only_runs_without_vllm_or_the_test_stubs(tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('vllm'))"],
        capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                             if k != "PYTHONPATH"}, check=False,
    )  # fmt: skip
    assert probe.stdout.strip() == "None", "this check needs an environment without vllm"
    out = run("--parse-only", clean=True, cwd=tmp_path)  # the user's cwd, not the checkout
    assert out.returncode == 0, out.stderr[-3000:]
    assert "advbudget: flags parse; estimator reward_budget" in out.stdout


def test_every_baseline_model_and_budget_parses() -> None:
    folders = set()
    for baseline, model, budget in itertools.product(BASELINES, MODELS, ("1", "0")):
        args = parse(flags(BASELINE=baseline, MODEL=model, BUDGET=budget))
        own = "dr_grpo" if baseline == "dr_grpo" else "group_norm"
        assert args.algo.advantage.estimator == (
            "reward_budget" if budget == "1" else f"advbudget_{own}"
        )
        assert args.actor.model_name_or_path == MODELS[model]
        assert args.rollout.n_samples_per_prompt == 8
        assert args.rollout.batch_size == 32
        assert args.rollout.max_new_tokens == 8192
        assert args.data.max_samples == 500 * 32
        assert args.algo.kl.use_loss == (baseline == "grpo")
        assert args.algo.kl.init_coef == (1e-3 if baseline == "grpo" else 0)
        assert args.actor.policy_loss_type == ("gspo" if baseline == "gspo" else "ppo")
        clip = {"gspo": [0.0003, 0.0004], "dapo": [0.2, 0.28]}.get(baseline, [0.2, 0.2])
        assert args.actor.eps_clip_low_high == clip
        assert args.algo.dynamic_filtering_enable == (baseline == "dapo")
        assert args.reward.overlong_buffer_len == (4096 if baseline == "dapo" else None)
        assert args.eval.dataset.endswith("dapo/openrlhf/val.jsonl")
        assert args.logger.tensorboard_dir == f"{Path(args.ckpt.path).parent}/tensorboard"
        assert args.logger.wandb.key is None  # no WANDB_API_KEY here
        folders.add(Path(args.ckpt.path).parent)
    assert len(folders) == len(BASELINES) * len(MODELS) * 2  # no two runs share a folder


def test_openrlhf_own_estimator() -> None:
    args = parse(flags(BUDGET="0", ESTIMATOR="group_norm"))
    assert args.algo.advantage.estimator == "group_norm"
    assert Path(args.ckpt.path).parent.name == "qwen3-8b_grpo_group_norm"


def test_wandb_when_a_key_is_set_and_masked_in_print() -> None:
    given = flags(WANDB_API_KEY="k-123", BASELINE="dapo")
    assert given[given.index("--logger.wandb.key") + 1] == "<WANDB_API_KEY>"
    assert "k-123" not in " ".join(given)
    args = parse(given)
    assert args.logger.wandb.run_name == "qwen3-8b_dapo_budget"
    assert args.logger.wandb.project == "advbudget"


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


@pytest.mark.parametrize(
    ("baseline", "message"),
    [("gae", "expected grpo, dr_grpo, gspo or dapo"), ("dapo_klcov", "examples/verl_qwen3.sh")],
)
def test_rejects_baselines_it_does_not_have(baseline: str, message: str) -> None:
    out = run("--print", BASELINE=baseline)
    assert out.returncode == 2
    assert message in out.stderr


def test_the_main_block_is_found_or_the_error_says_so() -> None:
    from advbudget.adapters.openrlhf._parse_only import main_block

    source = "import vllm\nx = 1\nif __name__ == '__main__':\n    y = 2\n    train(y)\n"
    block = main_block(source, "f.py")
    assert [type(node).__name__ for node in block.body] == ["Assign", "Expr"]
    with pytest.raises(RuntimeError, match=r"f\.py: no `if __name__ == '__main__':` block"):
        main_block("import vllm\n", "f.py")
