"""verl 0.9.1's async trainers, end to end on CPU, with the staleness rule
(``+algorithm.advbudget.max_staleness``, ``stale_rollouts``) in them.

Each run is the example's CPU command line (``CPU_LOOP=1 bash examples/verl_qwen3.sh``, as
in ``test_loop.py``) with verl's async entry module in place of ``verl.trainer.main_ppo``
(a ``PYTHON`` that swaps the module: the example stays as written) and what the async
trainers need on CPU: the actor and the rollout in pools of their own (2 fake GPUs) and
the ``hfcpu`` checkpoint engine (``cpu_loop/verlcpu/ckpt_engine.py``), the weight sync of
a CPU. Assertions read verl's file logger (``advbudget/*`` and verl's own metrics of each
logged step) and the probe (``verlcpu.probe``: each estimator call's rows, with their
weights labels and the trainer's own labels read from the trainer itself, and each row's
advantage on every response token).

- A: fully_async (verl.experimental.fully_async_policy.fully_async_main), 12 prompts,
  one weight sync a step, the rollouter up to half a batch ahead: steps 2 and 3 train on
  rollouts of the weights before the last sync beside fresh ones. ``max_staleness=0
  stale_rollouts=baseline_only``: each stale rollout gets advantage 0 on every token (no
  policy gradient), the fresh ones are scored.
- B: one_step_off (verl.experimental.one_step_off_policy.main_ppo), 3 steps,
  ``max_staleness=0 stale_rollouts=drop``: step 1's rollouts are fresh (the first weights
  carry labels 0 and 1), every later step's are one update behind, all dropped.
- C, D: verl's V1 async trainer modes with ours in them (``trainer.v1.trainer_mode=
  advbudget_colocate_async``, ``advbudget_separate_async``), ``advbudget_spo`` with
  ``rho=kl`` over the same 4 prompts, 3 steps: after step 1 each batch is one update behind
  the actor, and each returning prompt's kept response is scored again by the actor.

~1-1.5 min each on 2 cores.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Before test_loop's import: without verl it skips as it is imported.
pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from .test_loop import LOOP_MARKS, LR, MEMORY_OVERRIDES, Run, run_example

pytestmark = LOOP_MARKS

# Both async trainers: the rollout in a pool of its own (not hybrid), one fake GPU each
# for the actor and the rollout, weights through the hfcpu checkpoint engine.
ASYNC_OVERRIDES = (
    f"actor_rollout_ref.actor.optim.lr={LR}",
    "trainer.save_freq=-1",
    "actor_rollout_ref.hybrid_engine=False",
    "rollout.nnodes=1",
    "rollout.n_gpus_per_node=1",
    "++ray_kwargs.ray_init.num_gpus=2",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=hfcpu",
)


def python_with_entry(folder: Path, entry: str) -> str:
    """A ``PYTHON`` for the example that runs ``entry`` where the example runs
    ``-m verl.trainer.main_ppo``, and is this interpreter for everything else."""
    script = folder / "python"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = -m ] && [ "$2" = verl.trainer.main_ppo ]; then\n'
        f'  shift 2; exec "{sys.executable}" -m {entry} "$@"\n'
        "fi\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verl_async_loop")


def run_async(base: Path, name: str, entry: str, *overrides: str, **env: str) -> Run:
    """The example's command line with verl's async ``entry`` module and the async
    trainers' overrides (:data:`ASYNC_OVERRIDES`) before ``overrides``."""
    return run_example(
        base, name, *ASYNC_OVERRIDES, *overrides, PYTHON=python_with_entry(base, entry), **env
    )


@pytest.fixture(scope="module")
def run_a(base: Path) -> Run:
    """fully_async, reward_budget, max_staleness=0, baseline_only, 3 trainer steps."""
    return run_async(
        base,
        "a",
        "verl.experimental.fully_async_policy.fully_async_main",
        "ray_kwargs.ray_init.num_cpus=40",  # the trainer and rollouter actors ask for 10 each
        "actor_rollout_ref.rollout.n=4",
        "data.train_batch_size=0",  # fully_async: the trainer takes ppo_mini_batch_size prompts
        "data.gen_batch_size=1",
        "rollout.total_rollout_steps=12",  # 12 prompts: 3 trainer steps of 4
        "async_training.trigger_parameter_sync_step=1",  # a sync after every update
        "async_training.staleness_threshold=0.5",  # the rollouter runs ahead by half a batch
        "+algorithm.advbudget.max_staleness=0",
        "+algorithm.advbudget.stale_rollouts=baseline_only",
    )


@pytest.fixture(scope="module")
def run_b(base: Path) -> Run:
    """one_step_off, reward_budget, max_staleness=0, drop, 3 steps."""
    return run_async(
        base,
        "b",
        "verl.experimental.one_step_off_policy.main_ppo",
        "ray_kwargs.ray_init.num_cpus=16",
        "hydra.searchpath=[pkg://verl.trainer.config]",  # its config extends verl's
        "+algorithm.advbudget.max_staleness=0",
        "+algorithm.advbudget.stale_rollouts=drop",
        TOTAL_STEPS="3",
    )


def calls(run: Run, trainer: str) -> dict[int, dict[str, Any]]:
    """The probe's estimator calls under ``trainer``'s advantage step, by global step."""
    found = {c["global_steps"]: c for c in run.probe if trainer in c.get("trainer", [])}
    assert len(found) == len(run.probe), run.probe
    return found


def logged(run: Run) -> dict[int, dict[str, Any]]:
    """verl's logged step metrics with ours, by the trainer's global step."""
    steps = {}
    for metrics in run.steps.values():
        if "advbudget/staleness_max" in metrics:
            steps[int(metrics["training/global_step"])] = metrics
    return steps


def staleness_metrics(versions: np.ndarray, current: int, limit: int) -> dict[str, float]:
    staleness = current - versions
    return {
        "advbudget/staleness_mean": float(staleness.mean()),
        "advbudget/staleness_max": float(staleness.max()),
        "advbudget/stale_fraction": float((staleness > limit).mean()),
    }


def test_a_fully_async_scores_only_the_fresh_rollouts(run_a: Run) -> None:
    run_a.check()
    steps = calls(run_a, "FullyAsyncTrainer")
    assert sorted(steps) == [1, 2, 3], run_a.tail()
    stale_rows = fresh_scored = 0
    for step, call in steps.items():
        labels, current = np.array(call["labels"]), call["current_param_version"]
        assert current == step - 1, call  # one sync a step, after the advantage step
        stale = labels < current  # max_staleness=0
        low, high = np.array(call["advantage_min"]), np.array(call["advantage_max"])
        assert (low[stale] == 0).all(), (step, call)
        assert (high[stale] == 0).all(), (step, call)
        stale_rows += int(stale.sum())
        fresh_scored += int((high[~stale] != 0).sum())
    assert stale_rows > 0, "no stale rollout in the run: the rollouter did not run ahead"
    assert fresh_scored > 0
    mixed = [s for s, c in steps.items() if len(set(c["labels"])) > 1]
    assert mixed, "every batch of one version: the rule had nothing to choose between"


def test_a_staleness_metrics_match_the_labels(run_a: Run) -> None:
    run_a.check()
    steps, metrics = calls(run_a, "FullyAsyncTrainer"), logged(run_a)
    assert metrics, run_a.tail()  # verl logs a step at each sync (the last one may not be)
    for step, logged_metrics in metrics.items():
        call = steps[step]
        expected = staleness_metrics(np.array(call["labels"]), call["current_param_version"], 0)
        for key, value in expected.items():
            assert logged_metrics[key] == pytest.approx(value), (step, key)
        assert (
            logged_metrics["advbudget/valid_fraction"]
            <= 1 - expected["advbudget/stale_fraction"] + 1e-9
        )
        # verl's own count of stale trajectories (max_global_steps behind its version)
        stale = expected["advbudget/stale_fraction"] * len(call["labels"])
        assert logged_metrics["fully_async/count/stale_trajectory_processed"] == stale


def test_b_one_step_off_drops_every_rollout_after_step_1(run_b: Run) -> None:
    run_b.check()
    steps = calls(run_b, "OneStepOffRayTrainer")
    assert sorted(steps) == [1, 2, 3], run_b.tail()
    for step, call in steps.items():
        assert set(call["labels"]) == {step - 1}, call  # sent at the step's start
        scored = np.array(call["advantage_max"]) != 0
        assert scored.any() == (step == 1), (step, call)
    metrics = logged(run_b)
    assert sorted(metrics) == [1, 2, 3], run_b.tail()
    for step, logged_metrics in metrics.items():
        behind = 0.0 if step == 1 else 1.0
        assert logged_metrics["advbudget/staleness_max"] == behind
        assert logged_metrics["advbudget/stale_fraction"] == behind
        valid = logged_metrics["advbudget/valid_fraction"]
        assert valid > 0 if step == 1 else valid == 0, (step, valid)


# spo with rho=kl over the same 4 prompts (test_loop's memory run), no checkpoints, 3 steps.
SPO_KL = (
    *(o for o in MEMORY_OVERRIDES if not o.startswith("trainer.save_freq=")),
    "trainer.save_freq=-1",
)


@pytest.fixture(scope="module")
def run_c(base: Path) -> Run:
    """V1 colocate_async (ours), advbudget_spo with rho=kl, 3 steps."""
    return run_example(
        base, "c", *SPO_KL, "trainer.v1.trainer_mode=advbudget_colocate_async",
        RUN_NAME="tiny-qwen3_colocate_async", TOTAL_STEPS="3",
    )  # fmt: skip


@pytest.fixture(scope="module")
def run_d(base: Path) -> Run:
    """V1 separate_async (ours): a standalone rollout pool (one fake GPU) beside the
    trainer's, weights through the hfcpu checkpoint engine, a sync after every update
    (train batch = 1 × mini-batch); advbudget_spo with rho=kl, 3 steps."""
    return run_example(
        base, "d", *SPO_KL, "trainer.v1.trainer_mode=advbudget_separate_async",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "++ray_kwargs.ray_init.num_gpus=2",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=hfcpu",
        RUN_NAME="tiny-qwen3_separate_async", TOTAL_STEPS="3",
    )  # fmt: skip


@pytest.mark.parametrize("name", ["run_c", "run_d"])
def test_c_d_spo_forgets_at_the_rate_the_actor_moved_in_the_async_modes(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Each step's spo advantages are the core's on one state fed the run's rows with the
    ρ the trainer measured; a prompt met first has ρ 0.96 (SPO's ceiling), a returning one
    the ρ of its drift (the actor moved: below the ceiling), and the logged ρ mean is that
    of the ρ spo was given. A batch after step 1 was sampled from older weights."""
    from advbudget.testing import assert_memory_replays

    run: Run = request.getfixturevalue(name)
    run.check()
    assert sorted(run.steps) == [1, 2, 3], run.tail()
    calls = run.probe
    assert [call["estimator"] for call in calls] == ["advbudget_spo"] * 3, calls
    assert_memory_replays(calls, "spo", rtol=1e-5, atol=1e-5)
    seen: set[int] = set()
    returned: list[int] = []
    for step, call in enumerate(calls, start=1):
        metrics = run.steps[step]
        by_prompt = dict(zip(call["prompt_ids"], call["rho"], strict=True))  # one ρ a prompt
        returning = {p: rho for p, rho in by_prompt.items() if p in seen}
        first = {p: rho for p, rho in by_prompt.items() if p not in seen}
        assert all(rho == pytest.approx(0.96) for rho in first.values()), (step, call)
        assert all(0.875 - 1e-12 <= rho < 0.96 for rho in returning.values()), (step, call)
        assert metrics["advbudget/spo_first_seen_fraction"] == pytest.approx(
            len(first) / len(by_prompt)
        )
        assert metrics["advbudget/spo_rho_mean"] == pytest.approx(np.mean([*by_prompt.values()]))
        assert (metrics["advbudget/spo_drift_mean"] > 0) == bool(returning), (step, metrics)
        assert metrics["advbudget/spo_drift_mean"] < 0.5  # a response's own tokens: not nats
        seen |= set(by_prompt)
        returned.append(len(returning))
    assert len(seen) == 4  # data.train_max_samples
    # prompts came back (which step they come back at is the async sampler's order)
    assert max(returned[1:]) > 0, returned
    # verl's own count of how far behind the actor each step's rollouts were sampled
    behind = [run.steps[s]["training/off_policy/trajectory_staleness/max"] for s in (1, 2, 3)]
    assert behind[0] == 0, behind
    assert max(behind[1:]) >= 1, behind  # asynchronous: a batch of older weights
