"""Every command line of README.md, docs/ and examples/README.md is accounted for: run here as
written, or checked by a named test in the environment the text names, or (a GPU cluster,
the Hub) checked as far as a CPU machine can by a named test. A new command that no test
covers fails here; a named test that is renamed or removed fails here too."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    ROOT / "examples" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]


@dataclass(frozen=True)
class Run:
    """Run here, as written, in the core environment (``/tmp/`` paths go to a fresh folder)."""


@dataclass(frozen=True)
class Covered:
    """Checked by ``test`` ("path.py::name"); ``why`` says what that test runs."""

    test: str
    why: str


# The first rule whose pattern matches the whole command decides. Order: specific first.
RULES: list[tuple[str, Run | Covered]] = [
    (r"make test", Covered(".ci/run", "CI runs make test on a clean clone")),
    (
        r"make demo",
        Covered(
            "tests/test_makefile.py::test_demo_environment_installs_no_ml_framework",
            "its recipe; timed from a fresh clone in each closing note",
        ),
    ),
    (
        r"make bench",
        Covered(
            "tests/test_benchmarks.py::test_report_collects_results",
            "the report make bench ends with",
        ),
    ),
    (
        r"pip install .*",
        Covered(
            "tests/test_install_lines.py::test_every_extra_named_exists",
            "every extra exists; the Makefile builds each environment with these lines",
        ),
    ),
    (r"advbudget (explain|estimators)\b.*", Run()),
    (r"advbudget simulate --quick", Run()),
    (
        r"advbudget simulate( .*)?",
        Covered(
            "tests/lab/test_sim_docs.py::test_every_command_on_the_page_parses_and_configures",
            "each parses and configures what its stored JSON holds; the page is that JSON",
        ),
    ),
    (
        r"python docs/scripts/simulation_blocks\.py.*",
        Covered("tests/lab/test_sim_docs.py::test_docs_script_check_passes", "its check mode"),
    ),
    (
        r"python docs/scripts/make_figures\.py",
        Covered("tests/test_docs.py::test_make_figures_writes_pngs", "into a temporary folder"),
    ),
    (r"advbudget data prepare --sample .*", Run()),
    (
        r"advbudget data prepare -o data/dapo --source \S+ --val-size \d+",
        Covered(
            "tests/lab/test_data.py::test_cli_prepares_the_real_file",
            "a real DAPO-format parquet through the CLI",
        ),
    ),
    (
        r"advbudget data prepare -o data/dapo( --format \w+)? --val-size \d+",
        Covered(
            "tests/lab/test_data.py::test_real_aime_file_through_the_hub_code_path",
            "the Hub download itself needs the network; the same loader on DAPO's own file",
        ),
    ),
    (
        r"advbudget eval --score-only .*",
        Covered(
            "tests/lab/test_cli_errors.py::test_eval_score_only_keeps_the_runs_pass_at_k",
            "re-grading a generations file",
        ),
    ),
    (
        r"advbudget eval --model ckpt/ .*",
        Covered(
            "tests/lab/test_eval.py::test_eval_cli_end_to_end_on_cpu",
            "a checkpoint and a GPU on a cluster; the same CLI on a tiny local model",
        ),
    ),
    (r"advbudget eval --model tiny-model .*", Run()),
    (
        r"advbudget compare .*",
        Covered(
            "tests/lab/test_compare.py::test_deltas_against_the_first_run",
            "scores.json files written by our own writer",
        ),
    ),
    (r"python -c \"from advbudget\.lab\.tiny import .*", Run()),
    (r"printf .*", Run()),
    (
        r"python examples/trl_qwen3\.py --smoke",
        Covered(
            "tests/adapters/trl/test_trl_example.py::test_smoke_run_trains_on_kept_groups",
            "the smoke run in the TRL environment",
        ),
    ),
    (
        r"python examples/trl_qwen3\.py --dry-run .*",
        Covered(
            "tests/adapters/trl/test_trl_example.py::test_dry_run_prints_the_config",
            "in the TRL environment",
        ),
    ),
    (
        r"accelerate launch .*trl_qwen3\.py .*",
        Covered(
            "tests/adapters/trl/test_trl_example.py::test_every_baseline_estimator_and_model_builds_a_grpo_config",
            "8 GPUs; every GRPOConfig it can build",
        ),
    ),
    (
        r"python examples/tunix_qwen3\.py --smoke( --output-dir \S+)?",
        Covered(
            "tests/adapters/tunix/test_tunix_example.py::test_smoke_run_trains_on_kept_groups",
            "the smoke run in the tunix environment",
        ),
    ),
    (
        r"python examples/tunix_qwen3\.py --dry-run .*",
        Covered(
            "tests/test_examples_protocol.py::test_tunix_dry_run_prints_the_settings",
            "as written, in the core environment (it needs no jax)",
        ),
    ),
    (
        r"python examples/tunix_qwen3\.py --data .*",
        Covered(
            "tests/adapters/tunix/test_tunix_example.py::test_every_baseline_and_estimator_builds_its_tunix_config",
            "a TPU or GPU and the hub; every tunix config it builds, and the smoke run",
        ),
    ),
    (
        r"bash examples/verl_qwen3\.sh --dry-run",
        Covered(
            "tests/adapters/verl/test_example.py::test_dry_run_validates", "in the verl environment"
        ),
    ),
    (
        r"CPU_LOOP=1 (\w+=\S+ )*bash examples/verl_qwen3\.sh",
        Covered(
            "tests/adapters/verl/test_loop.py::test_a_runs_the_v1_loop_with_reward_budget",
            "in the verl environment: 2 steps of verl's loop on a CPU, and 2 more tests",
        ),
    ),
    (
        r"(\w+=\S+ )*bash examples/verl_qwen3\.sh",
        Covered(
            "tests/adapters/verl/test_example.py::test_every_baseline_model_and_budget_composes",
            "GPUs; every switch composes and validates",
        ),
    ),
    (
        r"bash examples/openrlhf_qwen3\.sh --parse-only",
        Covered(
            "tests/adapters/openrlhf/test_example.py::test_parse_only_runs_without_vllm_or_the_test_stubs",
            "in the OpenRLHF environment, clean PYTHONPATH",
        ),
    ),
    (
        r"CPU_LOOP=1 (\w+=\S+ )*bash examples/openrlhf_qwen3\.sh",
        Covered(
            "tests/adapters/openrlhf/test_loop.py::test_every_step_runs_our_estimator_inside_the_trainer_actor",
            "in the OpenRLHF environment: the script's CPU mode, OpenRLHF's real loop",
        ),
    ),
    (
        r"(\w+=\S+ )*bash examples/openrlhf_qwen3\.sh",
        Covered(
            "tests/adapters/openrlhf/test_example.py::test_every_baseline_model_and_budget_parses",
            "GPUs; every switch through OpenRLHF's parser",
        ),
    ),
    (
        r"CPU_LOOP=1 (\w+=\S+ )*bash examples/skyrl_qwen3\.sh",
        Covered(
            "tests/adapters/skyrl/test_loop.py::test_every_step_runs_our_estimator_inside_the_trainer_task",
            "in the SkyRL environment: the script's CPU mode, SkyRL's real loop",
        ),
    ),
    (
        r"bash examples/skyrl_qwen3\.sh --print",
        Covered(
            "tests/test_examples_protocol.py::test_shared_settings_agree_with_the_protocol",
            "the printed command, read against the protocol table",
        ),
    ),
    (
        r"(\w+=\S+ )*bash examples/skyrl_qwen3\.sh",
        Covered(
            "tests/adapters/skyrl/test_example.py::test_every_command_passes_skyrls_validation",
            "GPUs; every switch through SkyRL's config and validate_cfg",
        ),
    ),
    (
        r"python3\.12 -m venv \.venv-skyrl",
        Covered(
            "tests/test_makefile.py::test_skyrl_takes_torch_from_its_pin_first",
            "make test-skyrl builds .venv-skyrl on a Python 3.12",
        ),
    ),
    (
        r"\.venv-skyrl/bin/pip install .*",
        Covered(
            "tests/test_install_lines.py::test_every_extra_named_exists",
            "the extra exists; make test-skyrl installs its CPU part",
        ),
    ),
    (
        r"python -m advbudget\.adapters\.skyrl .*",
        Covered(
            "tests/adapters/skyrl/test_loop.py::test_every_step_runs_our_estimator_inside_the_trainer_task",
            "GPUs; the entry point's main() runs SkyRL's real loop in the CPU mode",
        ),
    ),
    (
        r"python -m skyrl\.train\.entrypoints\.main_base "
        r"trainer\.override_entrypoint=advbudget\.adapters\.skyrl .*",
        Covered(
            "tests/adapters/skyrl/test_example.py::test_skyrls_own_entry_point_dispatches_to_ours",
            "SkyRL's main_base reaches the adapter's config and checks (GPUs for the rest)",
        ),
    ),
    (
        r"ray start .*",
        Covered(
            "tests/adapters/openrlhf/test_example.py::test_print_shows_ray_job_submit_with_hook",
            "Ray's own CLI on the GPU nodes; the job the example submits",
        ),
    ),
    (
        r"ray job submit .*",
        Covered(
            "tests/adapters/openrlhf/test_entry_point.py::test_ray_job_submit",
            "a real local Ray job with the setup hook",
        ),
    ),
    (
        r"python -m advbudget\.adapters\.openrlhf .*",
        Covered(
            "tests/adapters/openrlhf/test_entry_point.py::test_accepts_reward_budget_and_budget",
            "its flags through OpenRLHF's parser",
        ),
    ),
    (
        r"--data\.prompt_dataset .*",
        Covered(
            "tests/adapters/openrlhf/test_entry_point.py::test_printed_data_flags_parse_with_openrlhf",
            "the guide's block through OpenRLHF's parser",
        ),
    ),
    (
        r"--reward\.remote_url .*",
        Covered(
            "tests/adapters/openrlhf/test_data_and_reward.py::test_reward_file_through_openrlhf_executor",
            "the reward file through OpenRLHF's executor",
        ),
    ),
    (
        r"python -m verl\.trainer\.main_ppo .*",
        Covered(
            "tests/adapters/verl/test_guide.py::test_the_switch_and_the_recipe_compose_with_registered_estimators",
            "hydra composition and verl's registry",
        ),
    ),
    (
        r"\+?reward\.custom_reward_function\.\S+",
        Covered(
            "tests/adapters/verl/test_guide.py::test_the_reward_block_loads_our_compute_score_with_its_options",
            "verl's loader and migration",
        ),
    ),
    (
        r"trainer\.use_v1=true trainer\.v1\.trainer_mode=advbudget_sync"
        r"|\+algorithm\.advbudget\.(skipped_groups|max_generation_batches)=\S+",
        Covered(
            "tests/adapters/verl/test_guide.py::test_the_skipped_groups_block_composes_and_validates",
            "hydra composition and our config check",
        ),
    ),
    (
        r"data\.train_files=\S+ data\.val_files=\S+|\+ray_kwargs\.\S+",
        Covered(
            "tests/adapters/verl/test_guide.py::test_the_data_and_worker_lines_compose",
            "hydra composition",
        ),
    ),
    (
        r"actor_rollout_ref\.rollout\.(multi_turn|agent)\.\S+=\S+( data\.return_raw_chat=True)?",
        Covered(
            "tests/adapters/verl/test_guide.py::test_the_multi_turn_block_composes_with_the_keys_the_loop_test_sets",
            "hydra composition; the keys of the multi-turn loop test",
        ),
    ),
    (
        r"python -c \"import (advbudget\.adapters\.verl|importlib\.metadata).*",
        Covered(
            "tests/adapters/verl/test_registration.py::test_entry_point_from_package_metadata",
            "the entry point in the verl environment",
        ),
    ),
    (
        r"advbudget experiment lm --quick",
        Covered(
            "tests/adapters/trl/test_lm_experiment.py::test_quick_run_end_to_end",
            "as written, in the TRL environment",
        ),
    ),
    (
        r"advbudget experiment lm( --\S+ \S+)*",
        Covered(
            "tests/adapters/trl/test_lm_experiment.py::test_quick_run_end_to_end",
            "13 to 21 minutes on 2 cores (results in docs/lm.md); the same code with --quick",
        ),
    ),
    (
        r"bash examples/gpu_lm\.sh( --dry-run)?",
        Covered(
            "tests/adapters/trl/test_lm_experiment.py::test_gpu_script_dry_run",
            "a GPU; the same command on the CPU with --dry-run",
        ),
    ),
    (
        r"python -m tunix\.cli\.grpo_main base_config\.yaml .*advbudget\.rewards\.tunix.*",
        Covered(
            "tests/adapters/tunix/test_tunix_estimators.py::test_the_cli_reward_module_registers_the_estimators",
            "an accelerator and a model; tunix's obtain_reward_fn on the module, in .venv-tunix",
        ),
    ),
    (
        r"\.venv/bin/python benchmarks/core\.py.*",
        Covered(
            "tests/test_benchmarks.py::test_core_benchmark_runs_and_agrees",
            "the benchmark's quick mode",
        ),
    ),
]


# In an unlabelled fence (often output beside commands), a line is a command when its
# first word is one of these.
COMMAND_WORDS = ("advbudget", "make", "python", "python3", "bash", "pip", "accelerate", "ray")


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every command line of every shell block, and for the lines of
    unlabelled blocks that start with a command word: continuations joined, comments
    dropped, `a && b` split."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for language, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
            if language not in ("bash", "sh", "shell", "console", ""):
                continue
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"(^|\s)#.*$", "", line).strip()
                if not language and line.split(" ", 1)[0] not in COMMAND_WORDS:
                    continue
                for command in filter(None, (c.strip() for c in line.split("&&"))):
                    found.append((str(page.relative_to(ROOT)), re.sub(r"\s+", " ", command)))
    return found


def rule_for(command: str) -> Run | Covered | None:
    return next((how for pattern, how in RULES if re.fullmatch(pattern, command)), None)


def test_every_documented_command_is_accounted_for() -> None:
    commands = documented_commands()
    assert len(commands) > 50, "the command blocks were not found"
    unaccounted = [f"{page}: {command}" for page, command in commands if rule_for(command) is None]
    assert not unaccounted, "no test runs these:\n" + "\n".join(unaccounted)


def test_every_named_test_exists() -> None:
    for _, how in RULES:
        if not isinstance(how, Covered) or "::" not in how.test:
            continue
        path, name = how.test.split("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in names, f"{how.test} is gone: point the rule at the test that runs it"
    assert (ROOT / ".ci" / "run").is_file()


def test_the_runnable_commands_run_as_written(tmp_path: Path) -> None:
    """Page by page, in order (a page's later command may use an earlier one's output), in a
    fresh folder, with the core environment's python and advbudget first on PATH."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
    }
    ran = 0
    for page, command in documented_commands():
        if not isinstance(rule_for(command), Run):
            continue
        folder = tmp_path / re.sub(r"\W", "_", page)
        folder.mkdir(exist_ok=True)
        written = command.replace("/tmp/", f"{folder}/tmp/").replace(
            "python ", f"{sys.executable} ", 1
        )
        out = subprocess.run(
            ["bash", "-c", written],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, f"{page}: {command}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        ran += 1
    assert ran >= 7
