"""verl 0.9.1's real training loop, end to end on CPU, with advbudget in it.

Each run is ``CPU_LOOP=1 bash examples/verl_qwen3.sh [overrides]``: the example's own
command line (``python -m verl.trainer.main_ppo``), plus the CPU harness of
``cpu_loop/verlcpu`` (a ``cpu`` platform and an HF-generate rollout; everything else of
verl is real: trainer, FSDP2 workers, reward loop, TransferQueue, weight sync,
checkpoints), on a tiny random Qwen3 and the bundled DAPO sample. Assertions read verl's
own logs: its ``file`` logger (one JSON line a step, ``VERL_FILE_LOGGER_PATH``), the
console, the checkpoint folder, and the probe (``verlcpu.probe``), which records each call
of advbudget's estimator with the pid of the process verl ran it in.

The reward is ``verlcpu.reward`` (the parity of a hash of the response and its call
number), not DAPO's: a random model scores -1 on every DAPO problem, so every group would
be constant, skipped by reward budgeting, and κ_eff would have no pairs.

Six runs (module fixtures, ~1-2.5 min each on 2 cores) cover it all:

- A: V1 trainer (``advbudget_sync``), ``reward_budget``, 2 data-parallel FSDP2 ranks
  (gloo), fixed micro-batches of 8 (``log_prob_micro_batch_size_per_gpu=8``: the κ_eff
  rows, 8 at most for 4 pairs, must be 16, 8 a rank; before the padding fix they were
  padded to a multiple of 2 only and the pass failed), κ_eff every 2 steps, 2 steps,
  checkpoint at 2;
- C: verl's legacy trainer (``trainer.use_v1=False``) with ``advbudget_grpo``, 1 rank;
- E: the V1 trainer with ``skipped_groups=drop``, ``seq-mean-token-mean``, 1 rank, the
  prompts in file order and dead ones chosen by answer (step 1: one of 4 groups skipped,
  step 2: three; every other group mixed for sure);
- F: ``skipped_groups=resample`` with ``max_generation_batches=2``, the prompts in file
  order and dead ones chosen by answer: step 1 refills fewer prompts than a train batch,
  step 2 reaches the cap;
- G: ``advbudget_spo`` (an estimator with memory) with ``rho=kl`` (each returning
  prompt's kept response scored again by the actor) over the same 4 prompts every step
  (``data.train_max_samples=4``), 1 rank, fixed micro-batches of 8 (the pairs' 2-8 rows
  and the 4 kept responses must be 8), κ_eff every step, 2 steps, checkpoint at 2;
- H: G resumed to step 3 with dynamic micro-batches and κ_eff every 3 steps: scored
  against the memory of steps 1-2, and κ_eff at step 3 only if the schedule reads the
  restored step.

Each run costs about a minute before its first step (Ray, the workers, the model): a case
joins a run where it can.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advbudget.adapters.verl.testing import algorithm_config, make_batch

from .conftest import VERL_WARNINGS

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "verl_qwen3.sh"
TIMEOUT_S = 900
RUN_NAME = "tiny-qwen3_grpo_budget"  # the example's folder name for MODEL=tiny-qwen3
LR = "1e-3"  # 1e-6 (the example's) moves the tiny model less than bf16's resolution: stale
# rollout weights would not show in rollout_probs_diff_max

# Fixed micro-batches (no dynamic batching): log-prob passes in micro-batches of 8 rows a
# rank, the κ_eff sub-batch included (verl/workers/engine/utils.py:125 asserts it).
FIXED_MICRO_BATCHES = (
    "actor_rollout_ref.actor.use_dynamic_bsz=False",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=False",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
)

# The marks of every test of verl's real loop (here, test_async_loop, test_multi_turn_loop).
LOOP_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash"),
    VERL_WARNINGS,
]
pytestmark = LOOP_MARKS


@dataclass
class Run:
    """One run of the example script: its exit code, console, and verl's logs."""

    name: str
    returncode: int | None  # None: killed at TIMEOUT_S
    wall_s: float
    console: str
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)  # verl's file logger
    probe: list[dict[str, Any]] = field(default_factory=list)  # estimator calls

    def tail(self, lines: int = 60) -> str:
        return f"\n--- {self.name}: last {lines} lines ---\n" + "\n".join(
            self.console.splitlines()[-lines:]
        )

    def check(self) -> None:
        assert self.returncode == 0, f"{self.name}: rc={self.returncode}" + self.tail()


# Ray gives its raylet 30 s to start (ray/_private/node.py:428, not configurable); on a
# loaded machine it may not, before verl has even started: that run is tried once more.
RAY_START_FAILURE = "The current node timed out during startup"


def run_example(base: Path, name: str, *overrides: str, **env: str) -> Run:
    run = _run_example(base, name, *overrides, **env)
    if run.returncode != 0 and RAY_START_FAILURE in run.console:
        print(f"{name}: Ray did not start in 30 s, trying again")
        shutil.rmtree(base / name)
        run = _run_example(base, name, *overrides, **env)
    return run


def _run_example(base: Path, name: str, *overrides: str, **env: str) -> Run:
    out = base / name
    out.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # sockets: paths < 108 chars
    environ = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},  # never another Ray
        "CPU_LOOP": "1",
        "CPU_DIR": str(base),
        "PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "RAY_TMPDIR": ray_tmp,
        "VERL_FILE_LOGGER_PATH": str(out / "metrics.jsonl"),
        "VERLCPU_PROBE_FILE": str(out / "probe.jsonl"),
        **env,
    }
    start = time.monotonic()
    with open(out / "console.log", "w") as log:
        process = subprocess.Popen(
            ["bash", str(SCRIPT), *overrides],
            env=environ,
            cwd=out,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ray's processes too go with a timeout
        )
        try:
            returncode: int | None = process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    wall = time.monotonic() - start
    shutil.rmtree(ray_tmp, ignore_errors=True)
    run = Run(name, returncode, wall, (out / "console.log").read_text(errors="replace"))
    if (out / "metrics.jsonl").exists():
        for line in (out / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            run.steps[int(record["step"])] = record["data"]
    if (out / "probe.jsonl").exists():
        run.probe = [json.loads(line) for line in (out / "probe.jsonl").read_text().splitlines()]
    print(f"{name}: rc={returncode}, {wall:.0f} s, steps {sorted(run.steps)}")
    return run


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verl_loop")


@pytest.fixture(scope="module")
def run_a(base: Path) -> Run:
    """V1, reward_budget, 2 ranks, fixed micro-batches, κ_eff every 2 steps, 2 steps."""
    return run_example(
        base,
        "a",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        *FIXED_MICRO_BATCHES,
        KAPPA_EVERY="2",
        NGPUS="2",
        TOTAL_STEPS="2",
    )


@pytest.fixture(scope="module")
def run_c(base: Path) -> Run:
    """verl's legacy trainer with advbudget's mirror of GRPO."""
    return run_example(
        base,
        "c",
        "trainer.use_v1=False",
        "algorithm.adv_estimator=advbudget_grpo",
        BUDGET="0",
        TOTAL_STEPS="2",
    )


# E's and F's prompts in file order (data.shuffle=False): the bundled sample's 12
# training answers; the dead ones score 1 for every response, every other group is mixed
# for sure (verlcpu.reward's dead_answers). E: step 1 draws the first 4, one dead; step 2
# the next 4, three dead. F: step 1 refills 1 or 2 prompts (whatever the timing), fewer
# than data.train_batch_size (4), and needs one live refill ("0"). From the 6th on all are
# dead but 88 and the wrap-around's: step 2 reaches the cap of 2 rounds with one live
# group at least (88, in its batch or first refill).
F_ANSWERS = ["77", "8", "-12", "-105", "0", "-20", "-6", "7", "62", "88", "18", "6"]
F_DEAD = ["77", "-20", "-6", "7", "62", "18", "6"]
DEAD_ANSWERS = f"+reward.custom_reward_function.reward_kwargs.dead_answers=[{','.join(F_DEAD)}]"


@pytest.fixture(scope="module")
def run_e(base: Path) -> Run:
    """V1, reward_budget, skipped_groups=drop, seq-mean-token-mean, fixed dead prompts
    (a random draw of prompts and responses could make every group of step 1 dead), 1
    rank."""
    return run_example(
        base,
        "e",
        "+algorithm.advbudget.skipped_groups=drop",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "data.shuffle=False",
        DEAD_ANSWERS,
        "trainer.save_freq=-1",
        RUN_NAME="tiny-qwen3_v1_drop",
        TOTAL_STEPS="2",
    )


@pytest.fixture(scope="module")
def run_f(base: Path) -> Run:
    """V1, reward_budget, skipped_groups=resample (2 rounds at most), fixed dead prompts."""
    return run_example(
        base,
        "f",
        "+algorithm.advbudget.skipped_groups=resample",
        "+algorithm.advbudget.max_generation_batches=2",
        "data.shuffle=False",
        DEAD_ANSWERS,
        "trainer.save_freq=-1",
        RUN_NAME="tiny-qwen3_v1_resample",
        TOTAL_STEPS="2",
    )


# G and H: one train batch of 4 prompts, again every epoch; spo forgets at the rate the
# actor moved on each prompt (rho=kl: at the example's lr the bf16 weights do not move).
MEMORY_OVERRIDES = (
    "algorithm.adv_estimator=advbudget_spo",
    "+algorithm.advbudget.rho=kl",
    f"actor_rollout_ref.actor.optim.lr={LR}",
    "data.train_max_samples=4",
    "data.shuffle=False",  # the first 4: the same in every run (else a random 4 each)
    "trainer.save_freq=2",
)
MEMORY_RUN = "tiny-qwen3_v1_spo"


@pytest.fixture(scope="module")
def run_g(base: Path) -> Run:
    """V1, advbudget_spo (rho=kl) over the same 4 prompts each step, 1 rank, fixed micro-batches,
    κ_eff every step, 2 steps, checkpoint at 2."""
    return run_example(
        base, "g", *MEMORY_OVERRIDES, *FIXED_MICRO_BATCHES, RUN_NAME=MEMORY_RUN,
        KAPPA_EVERY="1", TOTAL_STEPS="2",
    )  # fmt: skip


@pytest.fixture(scope="module")
def run_h(base: Path, run_g: Run) -> Run:
    """G resumed to step 3, dynamic micro-batches, κ_eff every 3 steps."""
    run_g.check()
    return run_example(
        base, "h", *MEMORY_OVERRIDES, "trainer.resume_mode=auto", RUN_NAME=MEMORY_RUN,
        KAPPA_EVERY="3", TOTAL_STEPS="3",
    )  # fmt: skip


def advbudget_keys() -> set[str]:
    """The ``advbudget/*`` metrics the trainer mode logs every step (a batch with both
    kinds of group; no reward_failures: the reward is not advbudget's grader)."""
    from advbudget.adapters.verl import batch_metrics

    batch = make_batch([4, 4], constant_groups=1)
    return set(batch_metrics(batch, algorithm_config("reward_budget")))


def assert_estimator_in_verl(run: Run, estimator: str, steps: int) -> None:
    """One call a step, in one process that is not this one (verl's TaskRunner)."""
    assert [call["estimator"] for call in run.probe] == [estimator] * steps, run.probe
    pids = {call["pid"] for call in run.probe}
    assert len(pids) == 1, pids
    assert os.getpid() not in pids
    assert f"pid={pids.pop()}" in run.console  # Ray's prefix of the TaskRunner's lines


def test_a_runs_the_v1_loop_with_reward_budget(run_a: Run) -> None:
    run_a.check()
    assert sorted(run_a.steps) == [1, 2], run_a.tail()
    assert_estimator_in_verl(run_a, "reward_budget", steps=2)
    assert "advbudget.adapters.verl._estimators" in run_a.probe[0]["function"]
    for step, metrics in run_a.steps.items():
        missing = advbudget_keys() - set(metrics)
        assert not missing, f"step {step} lacks {missing}"
        assert metrics["advbudget/valid_fraction"] > 0


def test_a_kappa_eff_with_fixed_micro_batches(run_a: Run) -> None:
    """The regression case: 4 pairs at most (8 rows, 4 a rank) under micro-batches of 8 on
    2 ranks. Before the padding fix the pass hit verl/workers/engine/utils.py:125 and was
    skipped with a warning."""
    run_a.check()
    assert "κ_eff skipped" not in run_a.console, run_a.tail()
    assert not any(key.startswith("advbudget/kappa_eff") for key in run_a.steps[1])
    assert run_a.steps[2]["advbudget/kappa_eff/count"] > 0, run_a.steps[2]


def test_a_updates_the_policy_and_syncs_the_rollout(run_a: Run, base: Path) -> None:
    run_a.check()
    import torch
    from safetensors.torch import load_file

    for step, metrics in run_a.steps.items():
        assert metrics["actor/grad_norm"] > 0
        # The rollout generated with the weights of the step before (the server tags each
        # response with the global step of its weights): verl's own staleness metric.
        assert metrics["training/off_policy/trajectory_staleness/max"] == 0, step
    # After an update, rollout and actor still agree (fp32 against bf16 noise): 0.997-0.999
    # and ~1e-4 measured; with the rollout's weights frozen (VERLCPU_FREEZE_ROLLOUT=1)
    # 0.946 and 4.5e-4 (a random model's token probabilities are all near 1/400).
    step_2 = run_a.steps[2]
    assert step_2["training/rollout_actor_probs_pearson_corr"] > 0.99, step_2
    assert step_2["training/rollout_probs_diff_max"] < 2.5e-4, step_2
    assert "hfcpu server loaded 25 tensors: weight version 3, global_steps 2" in run_a.console
    # The checkpoint holds new weights.
    checkpoint = base / "checkpoints" / RUN_NAME
    assert (checkpoint / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    saved = torch.load(  # rank 0's shards (FSDP2: the first rows of each tensor)
        checkpoint / "global_step_2" / "actor" / "model_world_size_2_rank_0.pt",
        weights_only=False,
    )
    initial = load_file(base / "tiny-qwen3" / "model.safetensors")
    changed = []
    for name, tensor in initial.items():
        shard = saved[name].to_local().float()
        if not torch.equal(shard, tensor[: len(shard)].float()):
            changed.append(name)
    assert len(changed) > len(initial) // 2, changed


def test_c_legacy_trainer_runs_advbudget_grpo(run_c: Run) -> None:
    run_c.check()
    assert sorted(run_c.steps) == [1, 2], run_c.tail()
    assert_estimator_in_verl(run_c, "advbudget_grpo", steps=2)
    for metrics in run_c.steps.values():
        assert metrics["actor/grad_norm"] > 0


def test_e_drop_in_the_real_loop(run_e: Run) -> None:
    """drop through TransferQueue and the actor's workers: the skipped rows' masks are
    empty in the worker's mini-batch (its seq-mean row count says so), back for verl's
    metrics after the update (no response of length 0), and a step runs an actor update
    exactly when some group is kept (keep would still train its KL and entropy terms)."""
    run_e.check()
    assert sorted(run_e.steps) == [1, 2], run_e.tail()
    assert "skipped_groups=drop, loss_agg_mode=seq-mean-token-mean: skipped rows leave" in (
        run_e.console
    )
    step_1, step_2 = run_e.steps[1], run_e.steps[2]
    assert 0 < step_1["advbudget/skipped_group_fraction"] < 1, step_1
    kept = round(16 * step_1["advbudget/valid_fraction"])
    assert f"rows with a non-empty loss_mask: {kept} of 16" in run_e.console, run_e.tail()
    assert step_1["actor/grad_norm"] > 0
    for metrics in run_e.steps.values():
        assert metrics["response_length/min"] > 0, metrics
        assert metrics["advbudget/recurring_prompts"] == 0  # the ledger: 2 steps, no repeat
    assert step_1["advbudget/actor_update_skipped"] == 0
    # Which prompts step 2 draws depends on the order verl's async rollouts finish in:
    # when all its groups are dead no actor update runs (the unit test
    # test_skipped_groups.py pins that case), else one does.
    all_dead = step_2["advbudget/valid_fraction"] == 0
    assert step_2["advbudget/actor_update_skipped"] == float(all_dead), step_2
    assert ("actor/grad_norm" in step_2) is not all_dead, step_2


def test_f_resample_in_the_real_loop(run_f: Run, base: Path) -> None:
    """resample through verl's own replay-buffer loop and custom-sampler hook: dead groups
    are evicted and refilled (verl's counter); a refill of fewer prompts than a train batch
    goes through (it raised in verl's dataloader fetch before data.gen_batch_size=1); the
    rounds are logged and capped, and a step that reaches the cap says so and trains on
    what it drew, kept groups first."""
    import pandas as pd

    train = pd.read_parquet(base / "dapo" / "verl" / "train.parquet")
    assert [row["ground_truth"] for row in train["reward_model"]] == F_ANSWERS
    run_f.check()
    assert sorted(run_f.steps) == [1, 2], run_f.tail()
    assert "skipped_groups=resample: verl's replay buffer replaces the groups reward_budget" in (
        run_f.console
    )
    first, second = run_f.steps[1], run_f.steps[2]
    assert first["training/filter_groups/evicted_samples"] > 0, first
    assert 0 < first["advbudget/refilled_prompts"] < 4, first  # the case that crashed
    assert first["advbudget/generation_batches"] == 2, first
    assert first["advbudget/skipped_group_fraction"] == 0, first
    assert second["training/filter_groups/evicted_samples"] > 0, second
    assert 2 <= second["advbudget/generation_batches"] <= 3, second  # up to a batch past it
    assert "step 2 reached max_generation_batches=2" in run_f.console or (
        second["advbudget/skipped_group_fraction"] == 0
    ), second
    assert second["advbudget/skipped_group_fraction"] < 1, second  # 88 is kept first
    for metrics in (first, second):
        assert metrics["actor/grad_norm"] > 0, metrics


def test_g_h_memory_resumes_as_an_uninterrupted_run(run_g: Run, run_h: Run, base: Path) -> None:
    """Each step's spo advantages are the core's on one state fed the run's rows with the
    ρ the trainer measured (it lends each row's prompt and ρ to the estimator verl calls),
    and the resumed step 3 is scored against the memory of steps 1-2, read back from the
    checkpoint's ``advbudget_memory.json``, as an uninterrupted run would score it."""
    from advbudget.testing import assert_memory_replays

    run_h.check()
    assert sorted(run_g.steps) == [1, 2], run_g.tail()
    assert sorted(run_h.steps) == [3], run_h.tail()
    saved = base / "checkpoints" / MEMORY_RUN / "global_step_2" / "advbudget_memory.json"
    assert json.loads(saved.read_text())["estimator_state"]["estimator"] == "spo"
    calls = [*run_g.probe, *run_h.probe]
    assert [call["estimator"] for call in calls] == ["advbudget_spo"] * 3, calls
    assert len(set(calls[0]["prompt_ids"])) == 4  # the same 4 prompts every step
    assert set(calls[2]["prompt_ids"]) == set(calls[0]["prompt_ids"])
    assert_memory_replays(calls, "spo", rtol=1e-5, atol=1e-5)


def test_g_h_spo_forgets_at_the_rate_the_actor_moved(run_g: Run, run_h: Run) -> None:
    """rho=kl: step 1 meets its 4 prompts first (ρ 0.96, SPO's ceiling); at step 2 each
    prompt's step-1 response is scored again by the actor one update later: a drift D > 0
    but far below a nat (a response compared with another's tokens, or prompt tokens with
    response ones, would drift by nats), ρ = clip(2^(-D/0.06), 0.875, 0.96), the logged ρ
    mean that of the ρ spo was given. The kept responses live in memory only, as SPO's
    reference keeps them: the resumed step 3 meets its prompts first again."""
    from advbudget.core import spo_rho

    run_h.check()
    first, second, third = run_g.steps[1], run_g.steps[2], run_h.steps[3]
    for metrics in (first, third):
        assert metrics["advbudget/spo_first_seen_fraction"] == 1, metrics
        assert metrics["advbudget/spo_rho_mean"] == pytest.approx(0.96), metrics
        assert metrics["advbudget/spo_drift_mean"] == 0, metrics
    assert second["advbudget/spo_first_seen_fraction"] == 0, second
    assert 0 < second["advbudget/spo_drift_mean"] < 0.5, second
    calls = [*run_g.probe, *run_h.probe]
    for call, metrics in zip(calls, (first, second, third), strict=True):
        by_prompt = dict(zip(call["prompt_ids"], call["rho"], strict=True))
        assert len(by_prompt) == 4  # one ρ a prompt (spo refuses another)
        assert np.mean(list(by_prompt.values())) == pytest.approx(metrics["advbudget/spo_rho_mean"])
    lowest = float(spo_rho(np.array([second["advbudget/spo_drift_mean"]]))[0])
    assert min(calls[1]["rho"]) <= lowest + 1e-12  # some prompt drifted at least the mean


def test_g_logs_kappa_eff_every_step_with_fixed_micro_batches_on_one_rank(run_g: Run) -> None:
    run_g.check()
    assert sorted(run_g.steps) == [1, 2], run_g.tail()
    assert "κ_eff skipped" not in run_g.console, run_g.tail()
    for step, metrics in run_g.steps.items():
        missing = advbudget_keys() - set(metrics)
        assert not missing, f"step {step} lacks {missing}"
        assert metrics["advbudget/kappa_eff/count"] > 0, (step, metrics)
        assert metrics["actor/grad_norm"] > 0


def test_h_resumes_at_step_3(run_h: Run, base: Path) -> None:
    run_h.check()
    assert sorted(run_h.steps) == [3], run_h.tail()  # not 1, 2, 3: it resumed
    checkpoints = base / "checkpoints" / MEMORY_RUN
    assert f"Resuming from {checkpoints / 'global_step_2'}" in run_h.console
    missing = advbudget_keys() - set(run_h.steps[3])
    assert not missing, missing
    # κ_eff every 3 steps: at step 3 only if the schedule reads the restored global step.
    assert run_h.steps[3]["advbudget/kappa_eff/count"] > 0, run_h.steps[3]
    assert run_h.steps[3]["training/off_policy/trajectory_staleness/max"] == 0
    assert (checkpoints / "global_step_3").is_dir()
