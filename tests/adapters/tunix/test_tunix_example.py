"""examples/tunix_qwen3.py: the smoke run trains (groups kept, κ_eff logged, the weights
move) and writes a Hugging Face checkpoint; that export is exactly the inverse of tunix's
loader; every baseline x estimator builds its tunix config."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from .conftest import TUNIX_WARNINGS

pytestmark = TUNIX_WARNINGS

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "tunix_qwen3.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tunix_qwen3_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_run_trains_on_kept_groups(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--smoke", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, check=False, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row["mode"] == "train"]
    assert [row["step"] for row in steps] == [0, 1]  # two updates
    for row in steps:  # groups with a reward gap were kept, and κ_eff measured on them
        assert row["advbudget/skipped_group_fraction"] < 1, row
        assert row["advbudget/advantage_gap_mean"] > 0, row
        assert row["advbudget/kappa_eff/count"] > 0, row
        assert math.isfinite(row["advbudget/kappa_eff/mean"]), row
    before = load_file(str(tmp_path / "tiny-qwen3" / "model.safetensors"))
    after = load_file(str(tmp_path / "final" / "model.safetensors"))
    assert {k: (v.shape, v.dtype) for k, v in after.items()} == {
        k: (v.shape, v.dtype) for k, v in before.items()
    }
    assert any(not np.array_equal(after[name], before[name]) for name in before)
    assert (tmp_path / "final" / "tokenizer.json").is_file()
    assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*")), "no TensorBoard log"
    assert f"advbudget eval --model {tmp_path / 'final'} " in run.stdout


def test_export_is_the_inverse_of_tunix_load(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from advbudget.lab.tiny import build_tiny_checkpoint

    example = load_example()
    source = build_tiny_checkpoint(tmp_path / "tiny", seed=3)
    config = example.qwen3_config(source, np.float32)
    model = example.load_model(source, config, example.make_mesh(""))
    out = example.export_hf(model, config, source, tmp_path / "out")
    original, exported = (
        load_file(str(source / "model.safetensors")),
        load_file(str(out / "model.safetensors")),
    )
    assert sorted(exported) == sorted(original)
    for name, tensor in original.items():
        assert exported[name].dtype == tensor.dtype, name
        np.testing.assert_array_equal(exported[name], tensor, err_msg=name)
    assert (out / "config.json").read_text() == (source / "config.json").read_text()


@pytest.mark.parametrize("baseline", ["grpo", "dr_grpo", "gspo", "dapo"])
def test_every_baseline_and_estimator_builds_its_tunix_config(baseline: str) -> None:
    from tunix.rl import function_registry

    from advbudget.adapters.tunix import AdvBudgetDAPOLearner, AdvBudgetGRPOLearner, configure

    example = load_example()
    _, fields = example.BASELINES[baseline]
    try:
        for estimator, tunix_name in (
            ("budget", "reward_budget"),
            ("baseline", f"advbudget_{example.OWN_ESTIMATOR[baseline]}"),
            ("rloo", "advbudget_rloo"),
        ):
            args = example.parse_args(
                ["--dry-run", "--baseline", baseline, "--estimator", estimator]
            )
            config, learner, rewards = example.tunix_algorithm(args)
            assert config.advantage_estimator == tunix_name
            function_registry.get_advantage_estimator(tunix_name)  # registered
            assert config.num_generations == example.GENERATIONS
            assert config.epsilon == fields["epsilon"]
            assert getattr(config, "epsilon_high", config.epsilon) == fields.get(
                "epsilon_high", fields["epsilon"]
            )
            assert (config.beta or 0.0) == fields["beta"]
            assert rewards == [example.dapo_reward]
            if baseline == "dapo":
                assert learner is AdvBudgetDAPOLearner
                assert config.loss_agg_mode == "token-mean"
                assert config.overlong_buffer["overlong_buffer_length"] == 4096
                assert config.overlong_buffer["max_response_length"] == 8192
            else:
                assert learner is AdvBudgetGRPOLearner
            if baseline == "dr_grpo":
                assert config.loss_agg_mode == "sequence-mean-token-scale"
            if baseline == "gspo":
                assert config.loss_algo == "gspo-token"
            if baseline == "grpo":
                assert config.kl_loss_mode == "low_var_kl"
    finally:
        configure()
    for refused in (["--baseline", "dapo_klcov"], ["--model", "llama3.2-3b"]):
        with pytest.raises(SystemExit):
            example.parse_args(["--dry-run", *refused])
