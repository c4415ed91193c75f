"""SkyRL 0.4.0's real training loop on CPU, end to end, through advbudget's entry point.

Each run is ``CPU_LOOP=1 bash examples/skyrl_qwen3.sh`` (the script's own overrides, then the
CPU ones of ``cpu_loop/cpu_overrides.py``): ``python -m skyrl_cpu_loop`` calls
``advbudget.adapters.skyrl.main`` with the harness's experiment, so SkyRL's config
validation, its Ray start-up and registry sync, the trainer in a Ray task, FSDP2 policy and
reference workers over gloo (KL loss on), the skyrl-gym generator, the weight sync after every
update and the checkpoints all run. Asserted from what SkyRL logs (its console tracker's
``Step N:`` payload, as the trainer's Ray task prints it), from the checkpoints, and from a
probe file the harness writes (``ADVBUDGET_CPU_LOOP_PROBE``: each call of advbudget's core
estimator with its process id, each state dict the rollout engine loads with its SHA-1).

The harness (``cpu_loop/``, on PYTHONPATH; ``skyrl/`` file:line of 0.4.0) replaces what needs
a GPU, and nothing else:

- ``flash_attn/``: an import stub (``workers/model_wrapper.py:13`` imports it at module level;
  its functions serve ``remove_microbatch_padding``, off: ``model_wrapper.py:154``);
- ``sitecustomize.py``, in every process: gloo for ``cpu:gloo,cuda:nccl``
  (``workers/worker.py:124-125``), device meshes on cpu (``worker.py:134``,
  ``distributed/fsdp_utils.py:256``), ``Tensor.cuda`` returning the tensor
  (``fsdp_utils.py:125``), ``torch.cuda`` device calls as no-ops or ``"cpu"``
  (``fsdp_strategy.py:102-146``, ``worker.py:1090``), fake GPUs and CPU slots for Ray
  (``train/utils/utils.py:1232``; workers ask 1 GPU each, ``worker.py:841-845``);
- ``skyrl_cpu_loop``: the vLLM servers and router (``train/entrypoints/main_base.py:210-240``)
  become a Ray actor sampling with transformers behind an ``InferenceEngineInterface``; the
  vLLM weight-transfer engine (``weight_sync/weight_senders.py:27``, built at
  ``worker.py:493``) a policy worker that sends its full state dict to that actor; the
  dataset's 8 filter processes (``main_base.py:78-83``) one;
- ``cpu_overrides.py``: no colocation (CUDA sleep and offload; sharing a fake GPU with the
  reference offloads the idle model, ``worker.py:427`` divides by ``device_count()``), no
  flash-attention, no vLLM Prometheus scraping (``train/utils/vllm_metrics_scraper.py``), no
  GPU monitor, no evaluation or export; a 2-prompt dataset.

Four runs (about 45 s each on 2 shared cores), on the same 2 prompts every step:
``reward_budget`` for 2 steps with a checkpoint after each, then the ``advbudget_grpo`` mirror
resumed from the step-2 checkpoint for step 3, ``reward_budget`` for 2 steps with SkyRL's
step-wise trajectories (one row per turn) on the multi-turn environment, and
``advbudget_spo`` with ``rho=kl`` for 3 steps. κ_eff every step
(the script's CPU default). The reward is the parity of a CRC-32 of the response
(``skyrl_cpu_loop.ParityEnv``, ``ParityTurnsEnv``): a tiny random model fails every DAPO
problem, which would make every group tie (skipped: no advantages, no κ_eff). The probe also
records each step's batch after the advantages (trajectory ids, rewards, advantages).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("skyrl")
pytest.importorskip("ray")

from advbudget import compute_advantages
from advbudget.metrics import advantage_metric_dict

from ..ray_console import console_text, logged_dicts
from .conftest import SKYRL_WARNINGS

pytestmark = [pytest.mark.slow, SKYRL_WARNINGS]

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "skyrl_qwen3.sh"
TIMEOUT_S = 360  # one run; about 45 s measured on a shared 2-core machine
# SkyRL's console tracker (tracking.py:189): "Step N: " then the pformat of the payload.
STEP_HEADER = re.compile(r"tracking:log:\d+ - Step (\d+):\s*$")
# advbudget's per-step metrics (besides κ_eff and the ledger's).
ADVANTAGE_METRICS = {
    "advbudget/advantage_mean",
    "advbudget/advantage_std",
    "advbudget/advantage_min",
    "advbudget/advantage_max",
    "advbudget/advantage_gap_mean",
    "advbudget/positive_advantage_fraction",
    "advbudget/skipped_group_fraction",
    "advbudget/unsolved_group_fraction",
    "advbudget/solved_group_fraction",
    "advbudget/valid_fraction",
    "advbudget/nan_reward_fraction",
    "advbudget/recurring_prompts",
}
KAPPA_METRICS = {
    f"advbudget/kappa_eff/{s}" for s in ("count", "mean", "median", "std", "min", "max")
}
MEMORY_FILE = "advbudget_memory.json"  # advbudget.adapters.skyrl._trainer.MEMORY_FILE
MAX_TURNS = 3  # skyrl_cpu_loop.MAX_TURNS: ParityTurnsEnv's turns
SAMPLES = 8  # the script's generator.n_samples_per_prompt


@dataclasses.dataclass
class Run:
    """One run of the example: its output, SkyRL's logged payload per step, the probe."""

    log: str
    returncode: int
    driver_pid: int  # the script execs the entry point: its pid is the driver's
    steps: dict[int, dict[str, Any]]
    trainer_pids: set[int]  # the processes that logged the steps
    estimator_calls: list[tuple[int, str]]  # (pid, core estimator name), one per call
    weights: list[tuple[int, str]]  # (version, sha1), in the order the engine loaded them
    batches: list[dict[str, Any]]  # each step's batch after the advantages (the probe's)

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.splitlines()[-lines:])


# Ray gives its raylet 30 s to start (ray/_private/node.py, not configurable); on a loaded
# machine it may not, before SkyRL has even started: that run is tried once more.
RAY_START_FAILURE = "The current node timed out during startup"


def run_example(cpu_dir: Path, *args: str, **env: str) -> Run:
    run = _run_example(cpu_dir, *args, **env)
    if run.returncode != 0 and RAY_START_FAILURE in run.log:
        print("Ray did not start in 30 s, trying again")
        run = _run_example(cpu_dir, *args, **env)
    return run


def _run_example(cpu_dir: Path, *args: str, **env: str) -> Run:
    probe = cpu_dir / f"probe-{len(list(cpu_dir.glob('probe-*')))}.txt"
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    environ = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "RAY_ADDRESS")}
    environ.update(
        CPU_LOOP="1",
        CPU_DIR=str(cpu_dir),
        PYTHON=sys.executable,
        ADVBUDGET_CPU_LOOP_PROBE=str(probe),
        RAY_TMPDIR=ray_tmp,
    )
    environ.update(env)
    # A session of its own: the whole group (Ray's processes too) can be killed at the end.
    # Bytes: see ray_console.console_text.
    process = subprocess.Popen(
        ["bash", str(SCRIPT), f"trainer.log_path={cpu_dir / 'logs'}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, cwd=cpu_dir,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
        log = console_text(output)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        log = console_text(output) + f"\n[test_loop] killed after {TIMEOUT_S} s"
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever of the run is still alive
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return parse_run(log, process.returncode, process.pid, probe)


def parse_run(log: str, returncode: int, driver_pid: int, probe: Path) -> Run:
    steps: dict[int, dict[str, Any]] = {}
    trainer_pids = set()
    for pid, header, payload in logged_dicts(log, STEP_HEADER):
        trainer_pids.add(pid)
        steps[int(header[1])] = {key: _number(value) for key, value in payload.items()}
    lines = probe.read_text().splitlines() if probe.exists() else []
    records = [line.split() for line in lines]
    calls = [(int(f[1]), f[2]) for f in records if f[0] == "estimator"]
    weights = [(int(f[1]), f[2]) for f in records if f[0] == "weights"]
    batches = [json.loads(line.split(" ", 2)[2]) for line in lines if line.startswith("batch ")]
    return Run(log, returncode, driver_pid, steps, trainer_pids, calls, weights, batches)


def _number(value: Any) -> Any:
    """The console tracker writes floats as '%.4f' strings (tracking.py:197)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def checked(run: Run) -> Run:
    if run.returncode != 0:
        pytest.fail(f"the CPU loop failed (exit {run.returncode}):\n{run.tail()}")
    return run


@pytest.fixture(scope="module")
def cpu_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="advbudget-skyrl-loop-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def budget_run(cpu_dir: Path) -> Run:
    """reward_budget, steps 1-2, a checkpoint after each."""
    return checked(run_example(cpu_dir, BUDGET="1", TOTAL_STEPS="2"))


@pytest.fixture(scope="module")
def resumed_run(cpu_dir: Path, budget_run: Run) -> Run:
    """The advbudget_grpo mirror, resumed from the step-2 checkpoint (SkyRL's default
    resume_mode=latest, the same ckpt_path) for step 3."""
    return checked(run_example(cpu_dir, BUDGET="0", TOTAL_STEPS="3"))


@pytest.fixture(scope="module")
def step_wise_run(cpu_dir: Path) -> Run:
    """reward_budget, steps 1-2, one row per turn (SkyRL's step-wise trajectories) on the
    multi-turn parity environment, each turn weighted 1 / its trajectory's turns
    (``row_weights``); checkpoints of its own."""
    return checked(
        run_example(
            cpu_dir,
            "generator.step_wise_trajectories=true",
            f"generator.max_turns={MAX_TURNS}",
            "trainer.algorithm.advbudget.row_weights=true",
            CPU_LOOP_ENV="advbudget_parity_turns",
            CKPT_DIR=str(cpu_dir / "step-wise"),
            TOTAL_STEPS="2",
        )
    )


@pytest.fixture(scope="module")
def kl_rho_run(cpu_dir: Path) -> Run:
    """advbudget_spo with SPO's KL-adaptive forgetting (``rho=kl``), steps 1-3, the same 2
    prompts every step; checkpoints of its own."""
    return checked(
        run_example(
            cpu_dir,
            "trainer.algorithm.advbudget.rho=kl",
            ESTIMATOR="advbudget_spo",
            BUDGET="0",
            CKPT_DIR=str(cpu_dir / "kl-rho"),
            TOTAL_STEPS="3",
        )
    )


RUNS = {
    "budget": ("budget_run", [1, 2], "budget"),
    "resumed_mirror": ("resumed_run", [3], "grpo"),
    "step_wise": ("step_wise_run", [1, 2], "budget"),
    "spo_kl_rho": ("kl_rho_run", [1, 2, 3], "spo"),
}


@pytest.fixture(params=list(RUNS))
def case(request: pytest.FixtureRequest) -> tuple[Run, list[int], str]:
    fixture, steps, estimator = RUNS[request.param]
    return request.getfixturevalue(fixture), steps, estimator


def test_every_step_runs_our_estimator_inside_the_trainer_task(case: Any) -> None:
    run, steps, estimator = case
    assert sorted(run.steps) == steps, run.tail()
    (trainer,) = run.trainer_pids  # SkyRL's tracker logs from the trainer's Ray task
    assert trainer != run.driver_pid
    # One call of advbudget's core per step, in that task (not the driver, not a worker).
    assert run.estimator_calls == [(trainer, estimator)] * len(steps), run.tail()


def test_every_advbudget_metric_every_step(case: Any) -> None:
    run, steps, _ = case
    for step in steps:
        logged = run.steps[step]
        assert set(logged) >= ADVANTAGE_METRICS, (step, sorted(logged))
        ours = {key: value for key, value in logged.items() if key.startswith("advbudget/")}
        assert all(math.isfinite(value) for value in ours.values()), (step, ours)
        assert logged["advbudget/skipped_group_fraction"] < 1.0  # rewards vary in groups
        assert logged["loss/avg_raw_advantages_abs"] > 0  # SkyRL trained on our advantages
        assert "policy/grad_norm" in logged  # the update ran
        assert "policy/policy_kl" in logged  # against the reference (use_kl_loss=true)


def test_kappa_eff_after_every_update(case: Any) -> None:
    run, steps, _ = case
    for step in steps:
        logged = run.steps[step]
        assert set(logged) >= KAPPA_METRICS, (step, sorted(logged))
        assert logged["advbudget/kappa_eff/count"] > 0, step
        assert all(math.isfinite(logged[key]) for key in KAPPA_METRICS), step


def test_policy_changes_and_the_engine_receives_it(case: Any) -> None:
    run, steps, _ = case
    # Version 0: the sync before the first step (the checkpoint's weights when resumed),
    # then one after every update.
    versions = [version for version, _ in run.weights]
    assert versions == list(range(len(steps) + 1)), run.weights
    assert len({sha for _, sha in run.weights}) == len(steps) + 1, run.weights


def test_checkpoints_keep_the_ledger_and_the_resumed_run_reads_it(
    cpu_dir: Path, budget_run: Run, resumed_run: Run
) -> None:
    ckpt = cpu_dir / "run" / "ckpt"
    for step in (1, 2, 3):
        memory = json.loads((ckpt / f"global_step_{step}" / MEMORY_FILE).read_text())
        assert len(memory["prompt_ledger"]["keys"]) == 2, (step, memory)  # the 2 prompts
    # The resumed run started from the step-2 policy: the engine got it first.
    assert resumed_run.weights[0][1] == budget_run.weights[-1][1]
    # Both prompts come back every step: recurring from step 2 on, and still at step 3 only
    # because the resumed run read steps 1-2 back from the checkpoint (a fresh ledger: 0).
    recurring = {
        step: run.steps[step]["advbudget/recurring_prompts"]
        for run in (budget_run, resumed_run)
        for step in run.steps
    }
    assert recurring == {1: 0.0, 2: 2.0, 3: 2.0}


def test_step_wise_trajectories_count_once_and_every_turn_carries_their_advantage(
    step_wise_run: Run,
) -> None:
    """One row per turn: each prompt's group is its 8 trajectories (not its rows), and every
    turn of a trajectory carries the advantage of the trajectory, the core's with
    ``trajectory_ids`` (the reward on the last turn, SkyRL's intermediate rewards left out),
    times the core's row weight (``row_weights``: 1 / the trajectory's turns)."""
    run = step_wise_run
    assert [batch["step"] for batch in run.batches] == [1, 2], run.tail()
    for batch in run.batches:
        trajectories = [
            f"{instance}/{repetition}" for instance, repetition in batch["trajectories"]
        ]
        last = batch["is_last_step"]
        # SkyRL's layout: a trajectory's turns together, its last turn last.
        assert last == [
            a != b for a, b in zip(trajectories, [*trajectories[1:], None], strict=True)
        ]
        turns = Counter(trajectories)
        assert min(turns.values()) == 1, turns  # trajectories of one turn and of several
        assert max(turns.values()) > 1, turns
        groups = Counter(uid for uid, end in zip(batch["uids"], last, strict=True) if end)
        assert set(groups.values()) == {SAMPLES}, groups
        rewards = np.where(last, batch["rewards"], np.nan)
        expected = compute_advantages(
            rewards, "budget", group_ids=batch["uids"], trajectory_ids=trajectories
        )
        weighted = expected.advantages * expected.row_weights
        np.testing.assert_allclose(batch["advantages"], weighted, rtol=0, atol=1e-6)
        assert max(batch["spread"]) == 0.0  # one value over each turn's response tokens
        earlier = [a for a, end in zip(batch["advantages"], last, strict=True) if not end]
        assert any(a != 0 for a in earlier)  # earlier turns are trained (SkyRL#1492)
        # The metrics count trajectories: what the core reports for one row per trajectory.
        logged = run.steps[batch["step"]]
        for key, value in advantage_metric_dict(expected, solved_reward=1.0).items():
            if key in ADVANTAGE_METRICS:
                assert logged[key] == pytest.approx(value, abs=1e-4), key  # '%.4f' strings


def test_spo_forgets_at_the_rate_the_policy_moved(kl_rho_run: Run) -> None:
    """rho=kl: step 1 meets its 2 prompts first (ρ 0.96); from step 2 on, each prompt's last
    response is scored again through SkyRL's policy forward and its drift sets ρ. Every
    step's advantages are the core's on one state fed the run's rewards with the ρ the
    trainer measured, and the logged means are those of that ρ."""
    from advbudget.testing import assert_memory_replays

    run = kl_rho_run
    assert [batch["step"] for batch in run.batches] == [1, 2, 3], run.tail()
    calls = []
    for batch in run.batches:
        step, rho = batch["step"], batch["rho"]
        assert rho is not None, step
        by_prompt = dict(zip(batch["uids"], rho, strict=True))
        assert len(by_prompt) == 2, by_prompt
        logged = run.steps[step]
        assert logged["advbudget/spo_rho_mean"] == pytest.approx(
            np.mean(list(by_prompt.values())), abs=1e-4
        )  # '%.4f' strings
        assert logged["advbudget/spo_first_seen_fraction"] == (1.0 if step == 1 else 0.0)
        if step == 1:
            assert set(rho) == {0.96}, rho
        else:  # the policy moved: an update after every step
            assert logged["advbudget/spo_drift_mean"] > 0
            assert all(0.875 <= r < 0.96 for r in rho), rho
        calls.append(
            {
                "prompt_ids": batch["uids"],
                "rewards": batch["rewards"],
                "advantages": batch["advantages"],
                "rho": rho,
            }
        )
    assert_memory_replays(calls, "spo")
