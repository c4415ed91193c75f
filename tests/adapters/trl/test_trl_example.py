"""examples/trl_qwen3.py: the smoke run learns something (groups kept, a non-zero update
that changes the weights, TensorBoard logs, scores.json), and TRL's GRPOConfig accepts every
baseline x estimator x model the example offers."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

trl = pytest.importorskip("trl")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl_qwen3.py"
MODELS = {"qwen3-8b": "Qwen/Qwen3-8B", "llama3.2-3b": "meta-llama/Llama-3.2-3B-Instruct"}


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trl_qwen3_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass-free, but pickling needs the module found
    spec.loader.exec_module(module)
    return module


def training_logs(stdout: str) -> list[dict[str, float]]:
    """The per-step dicts TRL prints (``{'loss': '...', 'grad_norm': '...', ...}``)."""
    logs = []
    for line in stdout.splitlines():
        start = line.find("{'loss'")
        if start >= 0:
            logged = ast.literal_eval(line[start:])
            logs.append({k: float(v) for k, v in logged.items() if v not in (None, "None")})
    return logs


def test_smoke_run_trains_on_kept_groups(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    run = subprocess.run(
        [sys.executable, "-W", "ignore::FutureWarning", str(EXAMPLE), "--smoke",
         "--kappa-every", "1", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    logs = training_logs(run.stdout)
    assert len(logs) == 2, run.stdout[-3000:]  # two optimizer steps
    for step in logs:
        # Groups with a reward gap were kept and moved the model.
        assert step["advbudget/skipped_group_fraction"] < 1, step
        assert step["advbudget/advantage_gap_mean"] > 0, step
        assert step["grad_norm"] > 0, step
        assert step["completions/clipped_ratio"] < 1, step  # lengths differ: some stopped
    before = load_file(str(tmp_path / "tiny-qwen3" / "model.safetensors"))
    after = load_file(str(tmp_path / "final" / "model.safetensors"))
    assert any(not after[name].equal(before[name]) for name in before), "weights unchanged"
    assert list((tmp_path / "runs").glob("*/events.out.tfevents.*")), "no TensorBoard log"
    scores = json.loads((tmp_path / "eval" / "scores.json").read_text())
    assert "average" in scores["benchmarks"]


def test_every_baseline_estimator_and_model_builds_a_grpo_config() -> None:
    from trl import GRPOConfig

    example = load_example()
    folders = set()
    for baseline, estimator, model in itertools.product(
        example.BASELINES, ("budget", "baseline"), MODELS
    ):
        args = example.parse_args(
            ["--dry-run", "--baseline", baseline, "--estimator", estimator, "--model", model]
        )
        args.eos_token_id = None
        settings = example.config_settings(args, has_validation=True)
        config = GRPOConfig(**settings)  # TRL's own validation
        options = example.trainer_options(args)
        assert args.model_path == MODELS[model]
        assert config.num_generations == 8
        assert config.per_device_train_batch_size * config.gradient_accumulation_steps == 256
        assert config.max_completion_length == 8192
        assert config.max_steps == 500
        assert config.report_to == ["tensorboard"]
        assert config.chat_template_kwargs is None  # the template's default, as in eval
        expected_loss = {"dr_grpo": "dr_grpo", "dapo": "dapo"}.get(baseline, "grpo")
        assert config.loss_type == expected_loss
        assert config.beta == (1e-3 if baseline == "grpo" else 0.0)
        assert config.importance_sampling_level == ("sequence" if baseline == "gspo" else "token")
        assert options["advantage_estimator"] == (
            "budget" if estimator == "budget" else example.OWN_ESTIMATOR[baseline]
        )
        assert options["skipped_groups"] == ("resample" if baseline == "dapo" else "keep")
        assert (args.overlong_buffer == 4096) == (baseline == "dapo")
        folders.add(config.output_dir)
    assert len(folders) == len(example.BASELINES) * 2 * len(MODELS)  # no shared folders


def test_dry_run_prints_the_config() -> None:
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--dry-run", "--baseline", "gspo", "--model",
         "llama3.2-3b"], capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["report"] == "pass@8"
    assert summary["config"]["epsilon"] == 3e-4
    assert summary["config"]["output_dir"] == str(Path("runs/trl/llama3.2-3b_gspo_budget"))
    assert "--k" in summary["eval"]


def test_report_to_follows_wandb_key(monkeypatch: pytest.MonkeyPatch) -> None:
    example = load_example()
    monkeypatch.setenv("WANDB_API_KEY", "k")
    assert example.report_to("auto") == "wandb"
    monkeypatch.delenv("WANDB_API_KEY")
    assert example.report_to("auto") == "tensorboard"
    assert example.report_to("none") == "none"


@pytest.mark.parametrize("baseline", ["dapo_clipcov", "dapo_klcov"])
def test_verl_only_baselines_point_to_verl(
    baseline: str, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load_example()
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(["--dry-run", "--baseline", baseline])
    assert exit_info.value.code == 2
    assert "examples/verl_qwen3.sh" in capsys.readouterr().err


def test_the_earlier_loss_type_flag_names_the_baseline() -> None:
    example = load_example()
    args = example.parse_args(["--dry-run", "--estimator", "budget", "--loss-type", "dapo"])
    assert args.baseline == "dapo"
    assert args.output_dir == Path("runs/trl/qwen3-8b_dapo_budget")
