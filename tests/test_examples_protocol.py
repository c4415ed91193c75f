"""The five examples are one experiment: the settings each script passes its trainer
agree with the protocol and baseline tables of examples/README.md.

The verl, OpenRLHF and SkyRL commands come from the scripts' ``--print`` (bash only); the TRL
settings from the example's own ``config_settings`` (no TRL needed to compute them; the
TRL tests build a ``GRPOConfig`` from every one); the tunix settings from its
``algo_settings`` and ``training_settings`` (no jax needed; the tunix tests build every
tunix config from them)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
README = (EXAMPLES / "README.md").read_text()
FRAMEWORKS = ("verl", "TRL", "OpenRLHF", "tunix", "SkyRL")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def table(heading: str) -> list[dict[str, str]]:
    """The rows of the first markdown table after ``heading``, keyed by column name."""
    section = README[README.index(heading) :]
    block = []
    for line in section[section.index("|") :].splitlines():
        if not line.startswith("|"):
            break
        block.append(line)
    header = [c.strip() for c in block[0].strip("|").split("|")]
    header = [re.sub(r" \(`[^`]*`\)$", "", h) for h in header]  # "verl (`x.sh`)" -> "verl"
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in block[2:]
    ]


PROTOCOL = {row["setting"]: row for row in table("## One protocol")}
BASELINES = {row["baseline"].strip("`"): row for row in table("## The baselines")}


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def protocol_number(setting: str) -> float:
    return numbers(PROTOCOL[setting]["protocol"])[0]


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(
        ["bash", str(EXAMPLES / script), *args],
        capture_output=True, text=True, env=environ, timeout=120, check=False,
    )  # fmt: skip


def verl_settings(baseline: str = "grpo", budget: str = "1") -> dict[str, str]:
    out = run("verl_qwen3.sh", "--print", BASELINE=baseline, BUDGET=budget)
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    items = words[words.index("verl.trainer.main_ppo") + 1 :]
    return dict(item.lstrip("+").split("=", 1) for item in items)


def openrlhf_flags(baseline: str = "grpo", budget: str = "1") -> dict[str, list[str]]:
    out = run("openrlhf_qwen3.sh", "--print", BASELINE=baseline, BUDGET=budget)
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    flags: dict[str, list[str]] = {}
    for word in words[words.index("advbudget.adapters.openrlhf") + 1 :]:
        if word.startswith("--"):
            current = flags.setdefault(word, [])
        else:
            current.append(word)
    return flags


def skyrl_settings(baseline: str = "grpo", budget: str = "1") -> dict[str, str]:
    """The SkyRL overrides of ``skyrl_qwen3.sh --print`` (``key=value`` words)."""
    out = run("skyrl_qwen3.sh", "--print", BASELINE=baseline, BUDGET=budget)
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    items = words[words.index("advbudget.adapters.skyrl") + 1 :]
    return dict(item.split("=", 1) for item in items)


def load_example(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{script}_protocol", EXAMPLES / f"{script}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


TRL = load_example("trl_qwen3")
TUNIX = load_example("tunix_qwen3")


def trl_settings(baseline: str = "grpo") -> tuple[dict[str, Any], Any]:
    args = TRL.parse_args(["--dry-run", "--baseline", baseline])
    args.eos_token_id = None
    return TRL.config_settings(args, has_validation=True), args


def tunix_settings(baseline: str = "grpo") -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The tunix example's algorithm config fields, training settings and arguments."""
    args = TUNIX.parse_args(["--dry-run", "--baseline", baseline])
    return TUNIX.algo_settings(args)[1], TUNIX.training_settings(args), args


def eval_command(script: str) -> list[str]:
    """The ``advbudget eval`` command of a shell example (continuation lines joined)."""
    text = (EXAMPLES / script).read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.lstrip().startswith("advbudget eval")]
    return shlex.split(line, posix=True)


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_tables_were_read() -> None:
    assert {"rollouts per prompt", "evaluation", "chat template"} <= set(PROTOCOL)
    assert set(BASELINES) == {"grpo", "dr_grpo", "gspo", "dapo", "dapo_clipcov", "dapo_klcov"}
    assert all(set(FRAMEWORKS) <= set(row) for row in PROTOCOL.values())


def test_shared_settings_agree_with_the_protocol() -> None:
    verl = verl_settings()
    orl = openrlhf_flags()
    trl, _ = trl_settings()
    generations = trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"]
    tunix_algo, tunix, _ = tunix_settings()
    sky = skyrl_settings()
    checks: dict[str, dict[str, float]] = {
        "rollouts per prompt": {
            "verl": float(verl["actor_rollout_ref.rollout.n"]),
            "TRL": trl["num_generations"],
            "OpenRLHF": float(orl["--rollout.n_samples_per_prompt"][0]),
            "tunix": tunix_algo["num_generations"],
            "SkyRL": float(sky["generator.n_samples_per_prompt"]),
        },
        "prompts per update": {
            "verl": float(verl["data.train_batch_size"]),
            "verl mini-batch": float(verl["actor_rollout_ref.actor.ppo_mini_batch_size"]),
            "TRL": generations / trl["num_generations"],
            "OpenRLHF": float(orl["--rollout.batch_size"][0]),
            "OpenRLHF update": float(orl["--train.batch_size"][0]) / 8,
            "tunix": tunix["mini_batch_size"],
            "SkyRL": float(sky["trainer.train_batch_size"]),
            "SkyRL mini-batch": float(sky["trainer.policy_mini_batch_size"]),
        },
        "training steps": {
            "verl": float(verl["trainer.total_training_steps"]),
            "TRL": trl["max_steps"],
            "OpenRLHF": float(orl["--data.max_samples"][0]) / 32,
            "tunix": tunix["max_steps"],
            "SkyRL": float(sky["trainer.max_training_steps"]),
        },
        "response tokens": {
            "verl": float(verl["data.max_response_length"]),
            "TRL": trl["max_completion_length"],
            "OpenRLHF": float(orl["--rollout.max_new_tokens"][0]),
            "tunix": tunix["rollout"]["max_tokens_to_generate"],
            "SkyRL": float(sky["generator.sampling_params.max_generate_length"]),
        },
        "sampling temperature": {
            "verl": float(verl["actor_rollout_ref.rollout.temperature"]),
            "TRL": trl["temperature"],
            "OpenRLHF": float(orl["--rollout.temperature"][0]),
            "tunix": tunix["rollout"]["temperature"],
            "SkyRL": float(sky["generator.sampling_params.temperature"]),
        },
        "learning rate": {
            "verl": float(verl["actor_rollout_ref.actor.optim.lr"]),
            "TRL": trl["learning_rate"],
            "OpenRLHF": float(orl["--actor.adam.lr"][0]),
            "tunix": tunix["learning_rate"],
            "SkyRL": float(sky["trainer.policy.optimizer_config.lr"]),
        },
        "entropy bonus": {
            "verl": float(verl["actor_rollout_ref.actor.entropy_coeff"]),
            "OpenRLHF": float(orl["--actor.entropy_coef"][0]),
            "SkyRL": 0.0 if sky["trainer.algorithm.use_entropy_loss"] == "false" else 1.0,
        },
    }
    for setting, values in checks.items():
        expected = protocol_number(setting)
        for where, value in values.items():
            assert value == pytest.approx(expected), (setting, where, value, expected)


def test_validation_agrees() -> None:
    every, samples, temperature = numbers(PROTOCOL["validation"]["protocol"])[:3]
    verl = verl_settings()
    assert float(verl["trainer.test_freq"]) == every
    assert float(verl["actor_rollout_ref.rollout.val_kwargs.n"]) == samples
    assert float(verl["actor_rollout_ref.rollout.val_kwargs.temperature"]) == temperature
    assert verl["data.val_files"].endswith("dapo/verl/val.parquet")  # the held-out split
    orl = openrlhf_flags()
    assert float(orl["--eval.steps"][0]) == every
    assert float(orl["--eval.n_samples_per_prompt"][0]) == samples
    assert float(orl["--eval.temperature"][0]) == temperature
    assert orl["--eval.dataset"][0].endswith("dapo/openrlhf/val.jsonl")
    trl, _ = trl_settings()
    assert trl["eval_steps"] == every
    assert trl["num_generations_eval"] == samples
    assert "training temperature" in PROTOCOL["validation"]["TRL"]  # the stated difference
    _, tunix, _ = tunix_settings()
    assert tunix["eval_every_n_steps"] == every
    assert tunix["checkpoint_every"] == every  # with the checkpoints
    assert tunix["validation_rollout"] == {"n": samples, "temperature": temperature}
    sky = skyrl_settings()
    assert float(sky["trainer.eval_interval"]) == every
    assert float(sky["trainer.ckpt_interval"]) == every  # with the checkpoints
    assert float(sky["generator.eval_n_samples_per_prompt"]) == samples
    assert float(sky["generator.eval_sampling_params.temperature"]) == temperature
    assert sky["data.val_data"].endswith("dapo/skyrl/val.jsonl']")


def test_evaluation_agrees() -> None:
    cell = PROTOCOL["evaluation"]["protocol"]
    benchmarks = ",".join(b.lower() for b in re.findall(r"AMC23|AIME24|AIME25|MATH500", cell))
    samples, temperature, tokens = numbers(cell)[:3]
    _, args = trl_settings()
    commands = {
        "verl": eval_command("verl_qwen3.sh"),
        "OpenRLHF": eval_command("openrlhf_qwen3.sh"),
        "SkyRL": eval_command("skyrl_qwen3.sh"),
        "TRL": TRL.eval_command(args, Path("final"))[3:],
        "tunix": TUNIX.eval_command(tunix_settings()[2], Path("final"))[3:],
    }
    for where, command in commands.items():
        assert option(command, "--benchmarks") == benchmarks, where
        assert float(option(command, "--n")) == samples, where
        assert float(option(command, "--k")) == samples, where  # pass@8 beside avg@8
        assert float(option(command, "--temperature")) == temperature, where
        max_tokens = option(command, "--max-new-tokens")
        assert max_tokens in ("$MAX_RESPONSE", str(int(tokens))), (where, max_tokens)
        assert option(command, "--output-dir").endswith("eval"), where


def test_chat_template_default_everywhere() -> None:
    assert "default" in PROTOCOL["chat template"]["protocol"]
    for script in ("verl_qwen3.sh", "openrlhf_qwen3.sh", "skyrl_qwen3.sh"):
        assert "thinking" not in " ".join(eval_command(script))
    assert not any("thinking" in key for key in skyrl_settings())
    assert not any("thinking" in key for key in verl_settings())
    assert not any("thinking" in flag for flag in openrlhf_flags())
    trl, args = trl_settings()
    assert "chat_template_kwargs" not in trl
    assert "thinking" not in " ".join(TRL.eval_command(args, Path("final")))
    assert "thinking" not in " ".join(TUNIX.eval_command(tunix_settings()[2], Path("final")))
    assert "enable_thinking" not in (EXAMPLES / "tunix_qwen3.py").read_text()  # the default


def _clip_and_kl(baseline: str) -> tuple[tuple[float, float], float]:
    row = BASELINES[baseline]
    if "as `dapo`" in row["clip (low, high)"]:
        row = {**row, "clip (low, high)": BASELINES["dapo"]["clip (low, high)"]}
    low, high = numbers(row["clip (low, high)"])
    kl = numbers(row["KL"])
    return (low, high), (kl[0] if kl else 0.0)


@pytest.mark.parametrize("baseline", list(BASELINES))
def test_each_baseline_agrees_where_the_framework_has_it(baseline: str) -> None:
    (low, high), kl = _clip_and_kl(baseline)
    row = BASELINES[baseline]
    # verl has every baseline.
    verl = verl_settings(baseline)
    assert float(verl["actor_rollout_ref.actor.clip_ratio_low"]) == low
    assert float(verl["actor_rollout_ref.actor.clip_ratio_high"]) == high
    verl_kl = float(verl["actor_rollout_ref.actor.kl_loss_coef"])
    assert (verl_kl if verl["actor_rollout_ref.actor.use_kl_loss"] == "True" else 0.0) == kl
    if row["TRL"] == "–":
        with pytest.raises(SystemExit):
            TRL.parse_args(["--dry-run", "--baseline", baseline])
    else:
        trl, _ = trl_settings(baseline)
        assert (trl["epsilon"], trl.get("epsilon_high", trl["epsilon"])) == (low, high)
        assert trl["beta"] == kl
    if row["tunix"] == "–":
        with pytest.raises(SystemExit):
            TUNIX.parse_args(["--dry-run", "--baseline", baseline])
    else:
        tunix, _, _ = tunix_settings(baseline)
        assert (tunix["epsilon"], tunix.get("epsilon_high", tunix["epsilon"])) == (low, high)
        assert tunix["beta"] == kl
    assert row["SkyRL"].startswith("✓")  # SkyRL has every baseline
    sky = skyrl_settings(baseline)
    assert float(sky["trainer.algorithm.eps_clip_low"]) == low
    assert float(sky["trainer.algorithm.eps_clip_high"]) == high
    sky_kl = float(sky.get("trainer.algorithm.kl_loss_coef", "0"))
    assert (sky_kl if sky["trainer.algorithm.use_kl_loss"] == "true" else 0.0) == kl
    if row["OpenRLHF"] == "–":
        out = run("openrlhf_qwen3.sh", "--print", BASELINE=baseline)
        assert out.returncode == 2
        assert "verl_qwen3.sh" in out.stderr
    else:
        orl = openrlhf_flags(baseline)
        assert [float(x) for x in orl["--actor.eps_clip_low_high"]] == [low, high]
        assert float(orl["--algo.kl.init_coef"][0]) == kl
        assert ("--algo.kl.use_loss" in orl) == (kl > 0)


def test_dapo_extras_everywhere() -> None:
    assert "4096 of 8192" in BASELINES["dapo"]["also"]
    verl = verl_settings("dapo")
    assert verl["algorithm.filter_groups.enable"] == "True"
    assert verl["reward.reward_kwargs.overlong_buffer_cfg.len"] == "4096"
    orl = openrlhf_flags("dapo")
    assert "--algo.dynamic_filtering_enable" in orl
    assert orl["--reward.overlong_buffer_len"] == ["4096"]
    _, args = trl_settings("dapo")
    assert args.overlong_buffer == 4096
    assert TRL.trainer_options(args)["skipped_groups"] == "resample"  # the adapter's
    tunix_algo, tunix, _ = tunix_settings("dapo")
    assert tunix_algo["overlong_buffer"]["overlong_buffer_length"] == 4096
    assert tunix_algo["overlong_buffer"]["max_response_length"] == 8192
    # tunix has no dynamic sampling: the stated difference, and what the example does instead
    assert "no dynamic sampling" in BASELINES["dapo"]["tunix"]
    assert tunix["learner"]["skipped_groups"] == "drop"
    sky = skyrl_settings("dapo")
    assert sky["trainer.algorithm.dynamic_sampling.type"] == "filter"
    assert "no overlong penalty" in BASELINES["dapo"]["SkyRL"]  # the stated difference


def test_the_held_out_split_is_the_same_in_every_format(tmp_path: Path) -> None:
    """Each script prepares its own format; the table promises one split (same seed)."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    for fmt in ("verl", "trl", "openrlhf", "tunix", "skyrl"):
        out = subprocess.run(
            [sys.executable, "-c", "from advbudget.lab.cli import main; main()", "data", "prepare",
             "--sample", "--format", fmt, "--val-size", "8", "-o", str(tmp_path / fmt)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    verl = [
        r["ground_truth"] for r in pd.read_parquet(tmp_path / "verl/verl/val.parquet").reward_model
    ]
    trl = list(pd.read_parquet(tmp_path / "trl/trl/val.parquet").solution)
    lines = (tmp_path / "openrlhf/openrlhf/val.jsonl").read_text().splitlines()
    assert verl == trl == [json.loads(line)["label"] for line in lines]
    lines = (tmp_path / "tunix/tunix/val.jsonl").read_text().splitlines()
    assert verl == [json.loads(line)["answer"] for line in lines]
    lines = (tmp_path / "skyrl/skyrl/val.jsonl").read_text().splitlines()
    assert verl == [json.loads(line)["reward_model"]["ground_truth"] for line in lines]
    assert len(verl) == 8


@pytest.mark.parametrize("budget", ["1", "0"])
def test_the_same_run_has_the_same_name_in_every_framework(budget: str) -> None:
    names = set()
    for baseline in ("grpo", "dr_grpo", "gspo", "dapo"):
        verl = verl_settings(baseline, budget)["trainer.experiment_name"]
        orl = openrlhf_flags(baseline, budget)["--logger.wandb.run_name"][0]
        estimator = "budget" if budget == "1" else "baseline"
        trl = TRL.run_name(TRL.parse_args(["--dry-run", "--baseline", baseline,
                                           "--estimator", estimator]))  # fmt: skip
        tunix = TUNIX.run_name(TUNIX.parse_args(["--dry-run", "--baseline", baseline,
                                                 "--estimator", estimator]))  # fmt: skip
        sky = skyrl_settings(baseline, budget)["trainer.run_name"]
        assert verl == orl == trl == tunix == sky, (verl, orl, trl, tunix, sky)
        names.add(verl)
    assert len(names) == 4


def test_tunix_dry_run_prints_the_settings() -> None:
    """The documented command, as written, from the repository root (no jax needed)."""
    out = subprocess.run(
        [sys.executable, "examples/tunix_qwen3.py", "--dry-run", "--baseline", "dapo"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["config"]["class"] == "DAPOConfig"
    assert summary["training"]["learner"]["estimator"] == "reward_budget"
    assert summary["output_dir"] == "runs/tunix/qwen3-8b_dapo_budget"
