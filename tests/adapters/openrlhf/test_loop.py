"""OpenRLHF 0.11.2's real PPO loop on CPU, end to end, through the documented entry point.

Each run is ``CPU_LOOP=1 bash examples/openrlhf_qwen3.sh`` (the script's own flags, through
``python -m advbudget.adapters.openrlhf``, on the harness in ``cpu_loop/``): OpenRLHF's
``PPOTrainer`` Ray actor, DeepSpeed actor and reference ranks, ``RolloutRayActor`` around a
vLLM stand-in that generates with transformers, the reward file, ``broadcast_to_vllm`` over
gloo, checkpoints. Everything is asserted from what OpenRLHF logs (its ``✨ Global step N:
{...}`` status lines), from the saved checkpoint, and from a probe file the harness writes
(``ADVBUDGET_CPU_LOOP_PROBE``: each call of advbudget's core estimator, each weight version
the engine receives).

Three runs (40-90 s each on 2 shared cores): ``reward_budget`` for 3 steps, then the
``advbudget_group_norm`` mirror resumed from its checkpoint for steps 4-5, then 2 steps of
the async trainer (``--train.async_enable``) with 2 data-parallel ranks and
``--advbudget.skipped_groups drop`` (masks zeroed on both ranks, the loss normalisers
patched in the model ranks' processes). κ_eff every 2 steps
in the first two: step 2, then step 4 (the restored count; a per-run count would give step
5), every step in the third.
The reward is the parity of a hash of the response (``cpu_loop/parity_reward.py``): a tiny
random model fails every DAPO problem, which would make every group constant (skipped: no
advantages, no κ_eff pairs).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("deepspeed")
pytest.importorskip("ray")

from ..ray_console import console_text, logged_dicts, logged_reprs

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "openrlhf_qwen3.sh"
TIMEOUT_S = 420  # one run; 40-90 s measured on a shared 2-core machine
KAPPA_EVERY = 2
# The trainer's status line: ppo_trainer.py:551 (sync), ppo_trainer_async.py:244 (async).
STATUS = re.compile(r" Global step (\d+): ")
# The client states a resumed run restored (ppo_trainer.py:439).
CHECKPOINT_STATES = re.compile(r" checkpoint_states: ")
# advbudget's per-step metrics (besides κ_eff and the reward file's counters).
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
    # each sample's policy version, stamped by the generator
    "advbudget/staleness_mean",
    "advbudget/staleness_max",
    "advbudget/stale_fraction",
    "advbudget/mixed_version_group_fraction",
    # the reward file's scores (the outcome) beside the parity reward
    "advbudget/outcome_disagreement_group_fraction",
}
KAPPA_METRICS = {f"advbudget/kappa_eff/{s}" for s in ("mean", "median", "std", "min", "max")}


@dataclasses.dataclass
class Run:
    """One run of the example: its log, OpenRLHF's status per step, the probe's records."""

    log: str
    returncode: int
    driver_pid: int  # the script execs the entry point: bash's pid is the driver's
    steps: dict[int, dict[str, Any]]
    trainer_pids: set[int]
    estimator_calls: list[tuple[int, str]]  # (pid, core estimator name), one per call
    weights: list[tuple[int, str]]  # (version, sha1), in the order the engine received them
    memory_calls: list[dict[str, Any]]  # an estimator with memory: prompts, rewards, advantages
    generated: list[int]  # the engine's weights version of each sample, in generation order
    # each call's versions, current version, advantages, valid, and the weight syncs the
    # engine had completed before it ("syncs_before")
    staleness_calls: list[dict[str, Any]]

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.splitlines()[-lines:])


# Ray gives its raylet 30 s to start (ray/_private/node.py:428, not configurable); on a
# loaded machine it may not, before OpenRLHF has even started: that run is tried once more.
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
        KAPPA_EVERY=str(KAPPA_EVERY),
        ADVBUDGET_CPU_LOOP_PROBE=str(probe),
        RAY_TMPDIR=ray_tmp,
    )
    environ.update(env)
    # A session of its own: on a timeout the whole group (Ray's processes too) is killed.
    # Bytes: see ray_console.console_text.
    process = subprocess.Popen(
        ["bash", str(SCRIPT), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
        log = console_text(output)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        log = console_text(output) + f"\n[test_loop] killed after {TIMEOUT_S} s"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return parse_run(log, process.returncode, process.pid, probe)


def parse_run(log: str, returncode: int, driver_pid: int, probe: Path) -> Run:
    steps: dict[int, dict[str, Any]] = {}
    trainer_pids = set()
    for pid, header, status in logged_dicts(log, STATUS):
        trainer_pids.add(pid)
        steps[int(header[1])] = status
    records = probe.read_text().split("\n") if probe.exists() else []
    fields = [line.split() for line in records if line]
    calls = [(int(f[1]), f[2]) for f in fields if f[0] == "estimator"]
    weights = [(int(f[2]), f[3]) for f in fields if f[0] == "weights"]
    memory = [json.loads(line.split(" ", 3)[3]) for line in records if line.startswith("memory ")]
    generated = [int(f[2]) for f in fields if f[0] == "generated"]
    staleness, syncs = [], 0
    for line in records:  # in the order the processes wrote them
        if line.startswith("weights ") and int(line.split()[2]) > 0:
            syncs += 1
        elif line.startswith("staleness "):
            staleness.append({**json.loads(line.split(" ", 3)[3]), "syncs_before": syncs})
    return Run(
        log, returncode, driver_pid, steps, trainer_pids, calls, weights, memory, generated,
        staleness,
    )  # fmt: skip


def checked(run: Run) -> Run:
    if run.returncode != 0:
        pytest.fail(f"the CPU loop failed (exit {run.returncode}):\n{run.tail()}")
    return run


@pytest.fixture(scope="module")
def cpu_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="advbudget-openrlhf-loop-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def budget_run(cpu_dir: Path) -> Run:
    """reward_budget, 3 steps, 1 data-parallel rank; a checkpoint at step 3."""
    return checked(run_example(cpu_dir, BUDGET="1", TOTAL_STEPS="3"))


@pytest.fixture(scope="module")
def resumed_run(cpu_dir: Path, budget_run: Run) -> Run:
    """The advbudget_group_norm mirror from the step-3 checkpoint, to step 5."""
    return checked(run_example(cpu_dir, "--ckpt.load_enable", BUDGET="0", TOTAL_STEPS="5"))


@pytest.fixture(scope="module")
def two_ranks_run(cpu_dir: Path) -> Run:
    """reward_budget, 2 steps of the async trainer (its ``TrainingActor`` inherits
    ``ppo_train`` too), 2 data-parallel ranks (actor and reference), κ_eff each step,
    skipped groups dropped, samples older than the weights being updated withheld."""
    other = cpu_dir / "two-ranks"
    other.mkdir()
    for reused in ("tiny-qwen3", "data"):  # built by the first run
        if (cpu_dir / reused).exists():
            os.symlink(cpu_dir / reused, other / reused)
    return checked(
        run_example(
            other,
            "--train.async_enable",
            "--advbudget.skipped_groups",
            "drop",
            "--advbudget.max_staleness",
            "0",
            "--advbudget.stale_rollouts",
            "baseline_only",
            BUDGET="1",
            TOTAL_STEPS="2",
            NGPUS="2",
            KAPPA_EVERY="1",
        )
    )


def _reusing(cpu_dir: Path, name: str) -> Path:
    """A folder of its own for a run, with the tiny model and data of the first run."""
    other = cpu_dir / name
    other.mkdir(exist_ok=True)
    for reused in ("tiny-qwen3", "data"):
        if (cpu_dir / reused).exists() and not (other / reused).exists():
            os.symlink(cpu_dir / reused, other / reused)
    return other


# rae (the parity reward is ±1: spo takes [0, 1]) over one step's 2 prompts, again every
# episode (so each step reads what the last one remembered), a checkpoint at step 2.
MEMORY_FLAGS = ("--data.max_samples", "2", "--ckpt.save_steps", "2", "--advbudget.decay", "0.5")


@pytest.fixture(scope="module")
def memory_run(cpu_dir: Path, budget_run: Run) -> Run:
    """advbudget_rae for 2 episodes of one step; a checkpoint at step 2."""
    return checked(
        run_example(
            _reusing(cpu_dir, "rae"), *MEMORY_FLAGS, "--train.num_episodes", "2",
            ESTIMATOR="advbudget_rae", BUDGET="0", TOTAL_STEPS="2", KAPPA_EVERY="0",
        )
    )  # fmt: skip


@pytest.fixture(scope="module")
def memory_resumed_run(cpu_dir: Path, memory_run: Run) -> Run:
    """The same run resumed from its step-2 checkpoint for a third episode."""
    return checked(
        run_example(
            _reusing(cpu_dir, "rae"), *MEMORY_FLAGS, "--train.num_episodes", "3",
            "--ckpt.load_enable",
            ESTIMATOR="advbudget_rae", BUDGET="0", TOTAL_STEPS="2", KAPPA_EVERY="0",
        )
    )  # fmt: skip


@pytest.fixture(scope="module")
def kl_rho_run(cpu_dir: Path, budget_run: Run) -> Run:
    """advbudget_spo with --advbudget.rho kl for 3 episodes of one step (the same 2
    prompts each step), rewards 0 / 1."""
    return checked(
        run_example(
            _reusing(cpu_dir, "spo"), "--data.max_samples", "2", "--train.num_episodes", "3",
            "--advbudget.rho", "kl",
            ESTIMATOR="advbudget_spo", BUDGET="0", TOTAL_STEPS="3", KAPPA_EVERY="0",
            ADVBUDGET_PARITY_LOW="0",
        )
    )  # fmt: skip


RUNS = {
    "budget": ("budget_run", [1, 2, 3], "budget", [2]),
    "resumed_mirror": ("resumed_run", [4, 5], "grpo", [4]),
    "async_two_ranks": ("two_ranks_run", [1, 2], "budget", [1, 2]),
}


@pytest.fixture(params=list(RUNS))
def case(request: pytest.FixtureRequest) -> tuple[Run, list[int], str, list[int]]:
    fixture, steps, estimator, kappa_steps = RUNS[request.param]
    return request.getfixturevalue(fixture), steps, estimator, kappa_steps


def test_every_step_runs_our_estimator_inside_the_trainer_actor(case: Any) -> None:
    run, steps, estimator, _ = case
    assert sorted(run.steps) == steps, run.tail()
    (trainer,) = run.trainer_pids  # OpenRLHF's status lines come from the trainer actor
    assert trainer != run.driver_pid
    # One call of advbudget's core per step, in that actor (not the driver, not a model rank).
    assert run.estimator_calls == [(trainer, estimator)] * len(steps), run.tail()


def test_every_advbudget_metric_every_step(case: Any) -> None:
    run, steps, _, _ = case
    for step in steps:
        status = run.steps[step]
        assert set(status) >= ADVANTAGE_METRICS, (step, sorted(status))
        assert status["advbudget/skipped_group_fraction"] < 1.0  # the reward varies in groups
        # The prompt ledger: one episode, so no prompt recurs within a run (the resumed
        # run counts on from the checkpoint's ledger: test_checkpoint_saved_and_resumed).
        if steps[0] == 1:
            assert status["advbudget/recurring_prompts"] == 0.0
        assert "advbudget/recurring_prompts" in status
        assert "policy_loss" in status  # the update ran
        assert "actor_grad_norm" in status


def test_kappa_eff_after_every_kth_update(case: Any) -> None:
    """Regression: κ_eff pairs were kept every step but the pass after ``ppo_train`` never
    ran in the Ray actor (Ray's copy of the unpatched method; see ``_hooks``)."""
    run, steps, _, kappa_steps = case
    for step, call in zip(steps, run.staleness_calls, strict=True):
        status = run.steps[step]
        if not any(call["valid"]):  # every sample withheld (async, stale): no pair to measure
            assert status.get("advbudget/kappa_eff/count", 0) == 0, (step, call)
        elif step in kappa_steps:
            assert status.get("advbudget/kappa_eff/count", 0) > 0, (step, sorted(status))
            assert set(status) >= KAPPA_METRICS, (step, sorted(status))
        else:
            assert not any(key.startswith("advbudget/kappa_eff/") for key in status), step
    assert "κ_eff skipped" not in run.log
    assert "κ_eff is not running" not in run.log


def test_policy_changes_and_the_engine_receives_it(case: Any) -> None:
    run, steps, _, _ = case
    versions = [version for version, _ in run.weights]
    sync_at_start = steps[0] > 1  # a resumed run first sends the checkpoint's weights
    assert versions == list(range(len(steps) + 1 + sync_at_start)), run.weights
    checksums = [sha for _, sha in run.weights[1 + sync_at_start :]]
    before = run.weights[sync_at_start][1]
    # Every step's update changed the weights the engine generates with.
    assert len({before, *checksums}) == len(steps) + 1, run.weights


def test_checkpoint_saved_and_resumed(cpu_dir: Path, budget_run: Run, resumed_run: Run) -> None:
    assert (cpu_dir / "run" / "ckpt" / "_actor" / "global_step3").is_dir()
    assert (cpu_dir / "run" / "final" / "model.safetensors").is_file()
    # The resumed run loaded the step-3 policy (the engine got it first), counted on from
    # step 4, and kept the κ_eff schedule of the global step (test_kappa_eff_...: step 4).
    assert resumed_run.weights[1][1] == budget_run.weights[-1][1]
    assert sorted(resumed_run.steps) == [4, 5]
    assert (cpu_dir / "run" / "ckpt" / "_actor" / "global_step5").is_dir()
    # The prompt ledger went into the step-3 checkpoint (6 prompts seen) and came back:
    # OpenRLHF logs the restored client states (ppo_trainer.py:439).
    (states,) = [text for _, _, text in logged_reprs(resumed_run.log, CHECKPOINT_STATES)]
    restored = re.search(r"'advbudget_memory': \{[^{}]*'prompt_ledger': (\{[^{}]*\})", states)
    assert restored, states
    assert len(ast.literal_eval(restored[1])["keys"]) == 6


def test_memory_resumes_as_an_uninterrupted_run(memory_run: Run, memory_resumed_run: Run) -> None:
    """Each step's rae advantages are the core's on one state fed the run's samples, and
    the resumed step 3 is scored against the memory of steps 1-2 (restored from the
    checkpoint's client states), as an uninterrupted run would score it."""
    from advbudget.testing import assert_memory_replays

    assert sorted(memory_run.steps) == [1, 2]
    assert sorted(memory_resumed_run.steps) == [3]
    calls = [*memory_run.memory_calls, *memory_resumed_run.memory_calls]
    assert len(calls) == 3, calls
    assert len(set(calls[0]["prompt_ids"])) == 2  # the same 2 prompts every step
    assert set(calls[2]["prompt_ids"]) == set(calls[0]["prompt_ids"])
    assert_memory_replays(calls, "rae", decay=0.5)
    assert "'advbudget_memory'" in memory_resumed_run.log


def test_spo_forgets_at_the_rate_the_actor_moved(kl_rho_run: Run) -> None:
    """--advbudget.rho kl: step 1 meets its prompts first (ρ = 0.96); steps 2 and 3 score
    each prompt's last response again with the actor's forward, and its drift sets ρ. Each
    step's advantages are the core's on one state fed the run's samples with the ρ the
    adapter measured; the logged means are those of the ρ given to the core."""
    from advbudget.testing import assert_memory_replays

    run = kl_rho_run
    assert sorted(run.steps) == [1, 2, 3], run.tail()
    calls = run.memory_calls
    assert len(calls) == 3, calls
    assert calls[0]["rho"] == [0.96] * len(calls[0]["rho"])
    for step, call in zip([1, 2, 3], calls, strict=True):
        status = run.steps[step]
        by_prompt = dict(zip(call["prompt_ids"], call["rho"], strict=True))
        assert status["advbudget/spo_rho_mean"] == pytest.approx(
            np.mean(list(by_prompt.values())), rel=1e-6
        )
        assert status["advbudget/spo_first_seen_fraction"] == (1.0 if step == 1 else 0.0)
        if step > 1:  # the actor moved: its weights changed every step
            assert status["advbudget/spo_drift_mean"] > 0
            assert all(0.875 <= r < 0.96 for r in call["rho"]), call["rho"]
    assert_memory_replays(calls, "spo")


def test_each_sample_carries_the_version_it_was_generated_with(case: Any) -> None:
    """The stamps the advantage step got are the engine's own record of the weights each
    sample was generated with, and the current version is that of the weights sent last
    (the engine counts its syncs from its start: a resumed run's first sync brings the
    checkpoint's weights, so its engine versions are the trainer's less the steps before)."""
    run, steps, _, _ = case
    resumed_from = steps[0] - 1
    offset = resumed_from - 1 if resumed_from else 0
    calls = run.staleness_calls
    assert len(calls) == len(steps), run.tail()
    start = 0
    for step, call in zip(steps, calls, strict=True):
        rows = len(call["versions"])
        engine = run.generated[start : start + rows]
        assert sorted(call["versions"]) == sorted(v + offset for v in engine), (step, call)
        start += rows
        assert call["current"] == call["syncs_before"] + offset, (step, call)
        lag = [call["current"] - v for v in call["versions"]]
        status = run.steps[step]
        assert status["advbudget/staleness_mean"] == pytest.approx(np.mean(lag), rel=1e-6)
        assert status["advbudget/staleness_max"] == max(lag)
    assert start == len(run.generated)


def test_async_withholds_samples_of_older_weights(two_ranks_run: Run) -> None:
    """--advbudget.max_staleness 0 --advbudget.stale_rollouts baseline_only in the async
    trainer: the generator samples step 2's batch while step 1 trains (one version behind);
    those samples get advantage 0 and leave the update (skipped_groups drop), the others
    are scored in their group's statistics with them."""
    stale_rows = 0
    for step, call in zip([1, 2], two_ranks_run.staleness_calls, strict=True):
        stale = np.array(call["versions"]) < call["current"]
        stale_rows += int(stale.sum())
        assert np.all(np.array(call["advantages"])[stale] == 0.0), (step, call)
        assert not np.any(np.array(call["valid"])[stale]), (step, call)
        status = two_ranks_run.steps[step]
        assert status["advbudget/stale_fraction"] == pytest.approx(np.mean(stale), rel=1e-6)
        assert status["advbudget/valid_fraction"] <= 1 - np.mean(stale) + 1e-6
    assert stale_rows > 0  # step 2's samples: generated before step 1's weights were sent


def test_the_shaped_reward_s_spread_where_the_outcome_has_none(case: Any) -> None:
    """The reward file's scores (its outcome: the tiny model solves nothing) beside the
    parity reward the estimator gets: every group the estimator trains on is one whose
    outcomes are tied, verl-recipe#125's phantom gradient, and the metric counts them."""
    run, steps, _, _ = case
    for step in steps:
        status = run.steps[step]
        assert status["score"] == 0.0  # the outcomes: nothing solved, every group tied
        trained = 1 - status["advbudget/skipped_group_fraction"]
        assert status["advbudget/outcome_disagreement_group_fraction"] == pytest.approx(
            trained, rel=1e-6
        ), (step, sorted(status))


def test_drop_trains_on_finite_losses_on_two_ranks(two_ranks_run: Run) -> None:
    """drop on 2 ranks: every step updates, and no logged value is NaN (a micro-batch of
    dropped rows gives 0 metrics, not 0/0; ``parse_run`` reads nan as None)."""
    for step, status in two_ranks_run.steps.items():
        assert None not in status.values(), (step, status)
        assert status["advbudget/valid_fraction"] <= 1.0


def test_two_data_parallel_ranks(two_ranks_run: Run) -> None:
    ranks = set(re.findall(r"\(PolicyModelActor pid=(\d+)\)", two_ranks_run.log))
    references = set(re.findall(r"\(ReferenceModelActor pid=(\d+)\)", two_ranks_run.log))
    assert len(ranks) == 2, two_ranks_run.tail()
    assert len(references) == 2, two_ranks_run.tail()
