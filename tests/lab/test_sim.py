"""The premature-convergence lab: exact metrics, gradients, training, experiments, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from advbudget.core.estimators import BUILTINS
from advbudget.lab.cli import app
from advbudget.lab.sim import (
    ExperimentConfig,
    Minibatch,
    RunConfig,
    TaskConfig,
    exact_metrics,
    experiment_config,
    log_policy,
    make_task,
    run_experiment,
    sample_rollouts,
    surrogate_loss,
    train,
)

SMALL = TaskConfig(train_prompts=256, validation_prompts=256)
# Specialists start likely and half the types are routine: every estimator learns fast.
EASY = TaskConfig(
    routine_types=2, hard_types=2, specialist_prior_logit=0.0, train_prompts=256,
    validation_prompts=256,
)  # fmt: skip


def random_weights(task, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return task.initial_weights + scale * rng.standard_normal(task.initial_weights.shape)


@pytest.mark.parametrize("partial_credit", [0.0, 0.4])
def test_exact_metrics_equal_monte_carlo(partial_credit):
    task = make_task(replace(SMALL, partial_credit=partial_credit))
    prompts = task.validation
    weights = random_weights(task)
    reference = log_policy(task.initial_weights, prompts.features)
    exact = exact_metrics(weights, prompts, reference)
    log_probs = log_policy(weights, prompts.features)
    draws = 400
    strategies, rewards = sample_rollouts(
        log_probs, prompts.success, draws, np.random.default_rng(1), partial_credit=partial_credit
    )
    sampled_log_probs = np.take_along_axis(log_probs, strategies, axis=1)
    sampled_reference = np.take_along_axis(reference, strategies, axis=1)
    solved = np.take_along_axis(prompts.success, strategies, axis=1)
    n = rewards.size  # ~1e5 rollouts: Monte-Carlo error ~ 0.002 for a proportion
    assert np.mean(rewards == 1.0) == pytest.approx(exact["accuracy"], abs=4 / np.sqrt(n))
    assert np.mean(solved) == pytest.approx(exact["accuracy"], abs=4 / np.sqrt(n))
    assert -np.mean(sampled_log_probs) == pytest.approx(exact["entropy"], rel=0.02)
    kl = np.mean(sampled_log_probs - sampled_reference)
    assert kl == pytest.approx(exact["kl_to_reference"], rel=0.03)
    hard = prompts.hard
    hard_accuracy = np.mean(rewards[hard] == 1.0)
    assert hard_accuracy == pytest.approx(exact["accuracy_hard"], abs=8 / np.sqrt(n))
    per_prompt = np.mean(rewards == 1.0, axis=1)  # 400 draws: p to about ±0.025
    pass8 = np.mean(1 - (1 - per_prompt) ** 8)
    assert pass8 == pytest.approx(exact["pass_at_8"], abs=0.02)
    if partial_credit:
        q = prompts.success
        expected = np.mean((np.exp(log_probs) * (q + partial_credit * (1 - q) * q)).sum(1))
        assert rewards.mean() == pytest.approx(expected, abs=4 / np.sqrt(n))
        assert set(np.unique(rewards)) <= {0.0, partial_credit, 1.0}


def test_sampling_follows_the_policy():
    probs = np.array([[0.1, 0.6, 0.3], [0.0, 0.0, 1.0]])
    with np.errstate(divide="ignore"):
        log_probs = np.log(probs)
    strategies, _ = sample_rollouts(log_probs, np.zeros((2, 3)), 20000, np.random.default_rng(0))
    frequencies = np.stack([np.bincount(row, minlength=3) / row.size for row in strategies])
    np.testing.assert_allclose(frequencies, probs, atol=0.01)


def make_minibatch(task, weights, seed=0):
    """Rollouts of 6 prompts sampled from a policy near ``weights`` (ratios ≠ 1)."""
    rng = np.random.default_rng(seed)
    features = task.train.features[:6]
    old_weights = weights + 0.2 * rng.standard_normal(weights.shape)
    old_log_probs = log_policy(old_weights, features)
    strategies, _rewards = sample_rollouts(old_log_probs, task.train.success[:6], 5, rng)
    return Minibatch(
        features=features,
        strategies=strategies,
        advantages=rng.standard_normal(strategies.shape),
        old_log_probs=np.take_along_axis(old_log_probs, strategies, axis=1),
        reference_log_probs=log_policy(task.initial_weights, features),
    )


@pytest.mark.parametrize(("clip", "beta", "entropy_coef"), [(0.2, 0.0, 0.0), (0.1, 0.3, 0.05)])
def test_gradient_equals_finite_differences(clip, beta, entropy_coef):
    task = make_task(SMALL)
    weights = random_weights(task, scale=0.5)
    batch = make_minibatch(task, weights)
    ratio = np.exp(
        np.take_along_axis(log_policy(weights, batch.features), batch.strategies, 1)
        - batch.old_log_probs
    )
    # The surrogate has kinks at the clip boundaries: keep away from them, and make sure
    # both branches (clipped and not) occur.
    assert np.min(np.abs(np.abs(ratio - 1) - clip)) > 1e-3
    assert np.any(np.abs(ratio - 1) > clip)
    assert np.any(np.abs(ratio - 1) < clip)
    options = {"clip": clip, "beta": beta, "entropy_coef": entropy_coef}
    terms, gradient = surrogate_loss(weights, batch, **options)
    numeric = np.zeros_like(weights)
    step = 1e-6
    for index in np.ndindex(weights.shape):
        shift = np.zeros_like(weights)
        shift[index] = step
        up, _ = surrogate_loss(weights + shift, batch, **options)
        down, _ = surrogate_loss(weights - shift, batch, **options)
        numeric[index] = (up.total - down.total) / (2 * step)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-8)
    assert 0 < terms.clip_fraction < 1


def test_gradient_descent_on_the_surrogate_raises_good_strategies():
    # Unclipped, on-policy, one prompt: the step follows A_i ∇log π(s_i).
    features = np.ones((1, 1))
    batch = Minibatch(
        features=features,
        strategies=np.array([[0, 1, 2]]),
        advantages=np.array([[1.0, -0.5, -0.5]]),
        old_log_probs=np.full((1, 3), np.log(1 / 3)),
        reference_log_probs=np.full((1, 3), np.log(1 / 3)),
    )
    _, gradient = surrogate_loss(np.zeros((3, 1)), batch)
    assert gradient[0, 0] < 0 < gradient[1, 0]  # descent raises strategy 0, lowers 1 and 2


def test_zero_learning_rate_changes_nothing():
    task = make_task(SMALL)
    config = RunConfig(
        estimator="grpo", steps=6, learning_rate=0.0, beta=0.1, entropy_coef=0.1, seed=3
    )
    history = train(config, task)
    np.testing.assert_array_equal(history["weights"], task.initial_weights)
    assert np.all(history["accuracy"] == history["accuracy"][0])
    assert np.all(history["kl_to_reference"] == 0)
    np.testing.assert_array_equal(history["kappa_eff_mean"][1:], 0.0)


# The built-ins that need no per-rollout input beside the reward (a bandit has no lengths).
LAB_ESTIMATORS = [
    spec.name
    for spec in BUILTINS
    if not any(i.required for i in spec.inputs) and not spec.components  # gdpo: refused
]


@pytest.mark.parametrize("estimator", LAB_ESTIMATORS)
def test_short_run_improves_accuracy(estimator):
    task = make_task(EASY)
    history = train(RunConfig(estimator=estimator, steps=40, prompts_per_step=16), task)
    assert history["accuracy"][-1] > history["accuracy"][0] + 0.15
    assert history["entropy"][-1] < history["entropy"][0]
    # Batch metrics exist from step 1 on, evaluation metrics from step 0.
    assert np.isnan(history["skipped_group_fraction"][0])
    assert np.all(np.isfinite(history["skipped_group_fraction"][1:]))
    assert np.all(history["skipped_group_fraction"][1:] >= 0)


def test_seeds_make_runs_reproducible():
    task = make_task(SMALL)
    config = RunConfig(estimator="budget", steps=8, prompts_per_step=8, minibatches=2)
    first, again = train(config, task), train(config, task)
    other = train(replace(config, seed=1), task)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.array_equal(first["accuracy"], other["accuracy"])
    # The task is drawn from its own seed: the same for every training seed.
    np.testing.assert_array_equal(make_task(SMALL).train.features, task.train.features)
    assert not np.array_equal(make_task(replace(SMALL, task_seed=1)).train.features,
                              task.train.features)  # fmt: skip


def test_lagged_rollouts_come_from_their_policy_and_their_version_is_passed_on():
    from collections import deque

    from advbudget.lab.sim._train import _sample

    task = make_task(SMALL)
    past = deque([random_weights(task, scale=1.0 + k) for k in range(3)])  # newest first
    prompts = np.arange(16)
    features = task.train.features[prompts]
    config = RunConfig(estimator="grpo", max_lag=4, group_size=8, prompts_per_step=16)
    strategies, _, old, lags = _sample(
        past, features, task, prompts, config, np.random.default_rng(0)
    )
    assert set(np.unique(lags)) == {0, 1, 2}  # capped at the policies there are
    for lag, weights in enumerate(past):
        mine = lags == lag
        want = np.take_along_axis(log_policy(weights, features), strategies, axis=1)
        np.testing.assert_array_equal(old[mine], want[mine])
    # On-policy, the old log-probs are the current policy's.
    on = replace(config, max_lag=0)
    strategies, _, old, lags = _sample(past, features, task, prompts, on, np.random.default_rng(0))
    assert not lags.any()
    np.testing.assert_array_equal(
        old, np.take_along_axis(log_policy(past[0], features), strategies, axis=1)
    )
    # A lagged run under drop_group trains on fewer groups than under keep.
    runs = {
        rule: train(replace(config, steps=6, max_staleness=0, stale_rollouts=rule, seed=1), task)
        for rule in ("keep", "drop_group")
    }
    kept, dropped = (runs[r]["skipped_group_fraction"][2:] for r in ("keep", "drop_group"))
    assert np.all(dropped >= kept)
    assert np.any(dropped > kept)


def test_the_staleness_experiment_has_one_arm_at_lag_0():
    labels = [label for label, _ in experiment_config("staleness").arms()]
    assert labels[:3] == ["grpo lag 0", "grpo lag≤2 keep", "grpo lag≤2 baseline_only"]
    assert len(labels) == 2 * (1 + 2 * 4)


def test_experiment_summaries():
    config = experiment_config("kappa", quick=True, estimators=("dr",), betas=(0.0, 1.0), steps=12)
    result = run_experiment(config)
    assert [arm.label for arm in result.arms] == ["dr κ=∞", "dr κ=1"]
    for arm in result.arms:
        assert arm.curves("accuracy").shape == (2, 13)
        summary = arm.summary["final_accuracy"]
        per_seed = arm.curves("accuracy")[:, -1]
        assert summary["mean"] == pytest.approx(per_seed.mean())
        assert summary["std"] == pytest.approx(per_seed.std(ddof=1))
        assert arm.summary["kappa_eff_oscillation"]["mean"] >= 0
    entropy = experiment_config("entropy", quick=True)
    assert entropy.entropy_until == entropy.steps // 2
    assert 0.0 in entropy.entropy_coefs
    assert len(entropy.entropy_coefs) > 1


@pytest.mark.parametrize(
    "experiment", ["compare", "kappa", "entropy", "kl", "group-size", "difficulty", "staleness"]
)
def test_cli_quick_writes_json_and_pngs(tmp_path, experiment):
    out = tmp_path / "demo"
    plot = experiment in ("compare", "entropy")  # plotting is the slow part: twice is enough
    args = ["simulate", "--experiment", experiment, "--quick", "--output-dir", str(out),
            "--steps", "12", *([] if plot else ["--no-plot"])]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    stem = f"{experiment}-transient"
    assert (
        (out / f"{stem}.png").stat().st_size > 10_000
        if plot
        else not (out / f"{stem}.png").exists()
    )
    data = json.loads((out / f"{stem}.json").read_text())
    assert data["config"]["name"] == experiment
    assert len(data["arms"]) == len(experiment_config(experiment).arms())
    curves = data["arms"][0]["curves"]["accuracy"]
    assert len(curves) == 2
    assert len(curves[0]) == 13
    assert data["arms"][0]["curves"]["kappa_eff_mean"][0][0] is None  # no batch at step 0
    assert 0 < data["ceiling"]["accuracy"] < data["oracle_accuracy"]
    text = result.output.replace("\n", "")
    assert str(out / (f"{stem}.{{png,json}}" if plot else f"{stem}.json")) in text
    assert "Reading" in text
    assert "docs/simulation.md" in text
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_cli_options_reach_the_config(tmp_path):
    args = ["simulate", "--quick", "--estimators", "dr,budget", "--seeds", "1", "--steps", "5",
            "-G", "4", "-B", "8", "--beta", "0.5", "--output-dir", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "compare-transient.json").read_text())["config"]
    assert config["estimators"] == ["dr", "budget"]
    assert config["seeds"] == [0]
    assert (config["steps"], config["group_size"], config["prompts_per_step"]) == (5, 4, 8)
    assert config["betas"] == [0.5]


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--group-size", "1"], "group-size"),
        (["--estimators", "grpo,ppo"], "--estimators"),
        (["--beta", "-0.1"], "beta"),
        (["--experiment", "sweep"], "--experiment"),
    ],
)
def test_cli_rejects_bad_values(tmp_path, args, hint):
    result = CliRunner().invoke(app, ["simulate", "--quick", *args])
    assert result.exit_code == 2
    assert hint in result.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_size": 1}, "group_size: expected an int >= 2, got 1"),
        ({"estimator": "ppo"}, "estimator: expected one of"),
        ({"beta": -0.5}, "beta: expected a finite number >= 0, got -0.5"),
        ({"learning_rate": float("nan")}, "learning_rate: expected a finite number >= 0"),
        ({"entropy_coef": -1.0}, "entropy_coef: expected a finite number >= 0"),
        ({"clip": 0.0}, "clip: expected a number > 0"),
        ({"minibatches": 5}, "minibatches: expected a divisor of prompts_per_step=32"),
        ({"optimizer": "lion"}, "optimizer: expected one of"),
        ({"steps": -1}, "steps: expected an int >= 0"),
        ({"max_lag": -1}, "max_lag: expected an int >= 0, got -1"),
        ({"max_staleness": -2}, "max_staleness: expected an int >= 0, got -2"),
        ({"stale_rollouts": "withhold"}, "stale_rollouts: expected one of"),
    ],
)
def test_bad_run_config_names_the_argument(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        RunConfig(**options)


def test_bad_experiment_and_task_config_names_the_argument():
    with pytest.raises(ValueError, match="estimator: expected one of"):
        ExperimentConfig(estimators=("budget", "ppo"))
    with pytest.raises(ValueError, match="group_size: expected an int >= 2"):
        ExperimentConfig(group_size=0)
    with pytest.raises(ValueError, match="beta: expected a finite number >= 0"):
        ExperimentConfig(betas=(0.001, -1.0))
    with pytest.raises(ValueError, match="seeds: expected at least one value"):
        ExperimentConfig(seeds=())
    with pytest.raises(TypeError, match="estimators: expected a tuple"):
        ExperimentConfig(estimators="budget")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="experiment: expected one of"):
        experiment_config("sweep")
    with pytest.raises(ValueError, match="hardness_std: expected a number >= 0"):
        TaskConfig(hardness_std=-1.0)
    with pytest.raises(ValueError, match="partial_credit: expected a number in"):
        TaskConfig(partial_credit=1.0)
    with pytest.raises(ValueError, match="train_prompts: expected an int >= 1"):
        TaskConfig(train_prompts=0)


def test_import_does_not_load_matplotlib():
    code = (
        "import sys, advbudget, advbudget.lab.sim, advbudget.lab.cli._simulate; "
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_estimators_needing_inputs_are_refused_by_name():
    from advbudget import EstimatorSpec, Input, register_estimator

    register_estimator(
        EstimatorSpec(
            name="needs_lengths",
            fn=lambda g, *, lengths: g.gap,
            inputs=(Input("lengths", "lengths"),),
        )
    )
    with pytest.raises(ValueError, match=r"needs_lengths needs per-rollout inputs \(lengths\)"):
        RunConfig(estimator="needs_lengths")
    with pytest.raises(ValueError, match=r"^estimator: gdpo takes several rewards per rollout"):
        RunConfig(estimator="gdpo")
