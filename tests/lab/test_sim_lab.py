"""The lab's regimes, ceiling, map, entropy-in-reward, readings and CLI (fast: quick tasks)."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.sim import (
    REGIMES,
    RunConfig,
    TaskConfig,
    _report,
    exact_metrics,
    experiment_config,
    make_task,
    map_config,
    policy_ceiling,
    run_experiment,
    run_map,
    to_json,
    train,
)
from advbudget.lab.sim._ceiling import expected_accuracy
from advbudget.lab.sim._task import hard_types_discovered

SMALL = TaskConfig(train_prompts=256, validation_prompts=256)


def invoke(*args, columns=80):
    return CliRunner().invoke(app, ["simulate", *args], env={"COLUMNS": str(columns)})


# The task -------------------------------------------------------------------------------


def test_hard_share_sets_the_type_frequencies():
    config = TaskConfig(routine_types=3, hard_types=2, hard_share=0.2, train_prompts=20000)
    np.testing.assert_allclose(config.type_frequencies, [0.8 / 3] * 3 + [0.1, 0.1])
    counts = np.bincount(make_task(config).train.types, minlength=5) / 20000
    np.testing.assert_allclose(counts, config.type_frequencies, atol=0.01)
    # None keeps every type equally frequent (and the default task's draws unchanged).
    np.testing.assert_allclose(TaskConfig().type_frequencies, [1 / 8] * 8)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hard_share": 1.5}, "hard_share: expected a number in [0, 1], got 1.5"),
        ({"hard_share": 0.3, "hard_types": 0}, "hard_share: expected 0 with 4 routine and 0 hard"),
        ({"hard_share": 0.3, "routine_types": 0}, "hard_share: expected 1 with 0 routine"),
    ],
)
def test_bad_hard_share_names_the_argument(options, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TaskConfig(**options)


def test_hard_types_discovered_counts_specialists_above_one_half():
    task = make_task(SMALL)  # 4 routine, 4 hard types: specialists are strategies 4..7
    prompts = task.validation
    probs = np.full((prompts.size, 8), 0.0)
    probs[:, 0] = 1.0
    # Specialist 1 (hard type 5) at 0.6 on its prompts, specialist 2 at exactly 0.5.
    for hard_type, specialist, share in ((5, 5, 0.6), (6, 6, 0.5)):
        mine = prompts.types == hard_type
        probs[mine, 0], probs[mine, specialist] = 1 - share, share
    assert hard_types_discovered(probs, prompts) == 1
    weights = task.initial_weights
    assert exact_metrics(weights, prompts)["hard_types_discovered"] == 0


def test_regime_presets():
    assert REGIMES["transient"].task == TaskConfig()
    persistent = experiment_config("compare", regime="persistent")
    assert (persistent.task.routine_types, persistent.task.hard_types) == (19, 8)
    assert persistent.steps == REGIMES["persistent"].steps
    assert persistent.report_horizons == REGIMES["persistent"].horizons
    with pytest.raises(ValueError, match="regime: expected one of"):
        experiment_config("compare", regime="steady")


# The ceiling ----------------------------------------------------------------------------


def test_expected_accuracy_gradient_equals_finite_differences():
    task = make_task(replace(SMALL, validation_prompts=64))
    rng = np.random.default_rng(0)
    weights = task.initial_weights + rng.standard_normal(task.initial_weights.shape)
    value, gradient = expected_accuracy(weights, task.validation)
    assert value == pytest.approx(exact_metrics(weights, task.validation)["accuracy"])
    numeric = np.zeros_like(weights)
    for index in np.ndindex(weights.shape):
        shift = np.zeros_like(weights)
        shift[index] = 1e-6
        up = expected_accuracy(weights + shift, task.validation)[0]
        down = expected_accuracy(weights - shift, task.validation)[0]
        numeric[index] = (up - down) / 2e-6
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-9)


def test_ceiling_is_between_training_and_the_oracle():
    task = make_task(SMALL)
    ceiling = policy_ceiling(task)
    oracle = task.validation.success.max(axis=1).mean()
    assert ceiling.accuracy < oracle
    history = train(RunConfig(estimator="dr", steps=120, prompts_per_step=16), task)
    assert np.nanmax(history["accuracy"]) < ceiling.accuracy
    assert ceiling.accuracy == pytest.approx(
        exact_metrics(ceiling.weights, task.validation)["accuracy"]
    )


def test_ceiling_reaches_the_oracle_when_types_are_separable():
    # Far-apart types and no feature noise: a linear policy can pick the best strategy of
    # each type, so the ceiling is the best per-type strategy, i.e. the oracle.
    task = make_task(replace(SMALL, type_separation=4.0, feature_noise=0.0))
    oracle = task.validation.success.max(axis=1).mean()
    assert policy_ceiling(task).accuracy == pytest.approx(oracle, abs=0.003)


# Training -------------------------------------------------------------------------------


def test_entropy_in_reward_keeps_entropy_up_then_stops():
    task = make_task(SMALL)
    base = RunConfig(estimator="dr", steps=30, prompts_per_step=16, entropy_coef=1.0,
                     entropy_until=30)  # fmt: skip
    plain = train(replace(base, entropy_coef=0.0), task)
    in_reward = train(replace(base, entropy_in="reward"), task)
    in_loss = train(replace(base, entropy_in="loss"), task)
    assert in_reward["entropy"][-1] > plain["entropy"][-1] + 0.1
    assert in_loss["entropy"][-1] > plain["entropy"][-1] + 0.1
    # The reward bonus is shaping only: the recorded train reward is the task's.
    assert set(np.unique(in_reward["train_reward"][1:] * 16 * 8)) <= set(range(129))
    # After entropy_until the run is the baseline's loop again (same rollout stream).
    off = train(replace(base, entropy_in="reward", entropy_until=0), task)
    np.testing.assert_array_equal(off["accuracy"], plain["accuracy"])
    with pytest.raises(ValueError, match="entropy_in: expected one of"):
        RunConfig(entropy_in="advantage")


def test_eval_every_leaves_nan_between_evaluations():
    task = make_task(SMALL)
    history = train(RunConfig(steps=7, prompts_per_step=8, eval_every=3), task)
    evaluated = np.flatnonzero(np.isfinite(history["accuracy"]))
    assert evaluated.tolist() == [0, 3, 6, 7]
    full = train(RunConfig(steps=7, prompts_per_step=8), task)
    np.testing.assert_array_equal(history["accuracy"][evaluated], full["accuracy"][evaluated])


def test_workers_give_the_same_result():
    config = experiment_config("compare", quick=True, estimators=("dr", "budget"), steps=6)
    one, two = run_experiment(config), run_experiment(config, workers=2)
    for first, second in zip(one.arms, two.arms, strict=True):
        np.testing.assert_array_equal(first.curves("accuracy"), second.curves("accuracy"))


def test_entropy_arms_share_the_no_bonus_arm():
    labels = [label for label, _ in experiment_config("entropy").arms()]
    assert labels[:3] == ["grpo no bonus", "grpo H loss 0.01", "grpo H reward 0.01"]
    assert len(labels) == 2 * (1 + 3 * 2)
    sizes = [run.group_size for _, run in experiment_config("group-size").arms()]
    assert sizes == [4, 8, 16, 32] * 3


def test_horizon_summaries_and_gaps():
    config = experiment_config("compare", quick=True, estimators=("dr",), steps=10,
                               horizons=(4, 10))  # fmt: skip
    data = to_json(run_experiment(config))
    arm = data["arms"][0]
    curve = np.array(arm["curves"]["accuracy"][0])
    assert arm["summary"]["accuracy_at_4"]["per_seed"][0] == pytest.approx(curve[4], rel=1e-4)
    row = _report.experiment_rows(data)[0]
    gaps = [data["ceiling"]["accuracy"] - v for v in arm["summary"]["accuracy_at_4"]["per_seed"]]
    assert row[2] == f"{100 * np.mean(gaps):.1f} ±{100 * np.std(gaps, ddof=1):.1f}"
    assert _report.experiment_rows(data)[-2][0] == "ceiling"
    assert _report.experiment_rows(data)[-1][0] == "oracle"


# Readings follow the numbers ------------------------------------------------------------


def fake_compare(budget_final, grpo_final, budget_escape, grpo_escape, grpo_found, hard=4):
    """A compare result with given per-seed numbers (3 seeds)."""

    def arm(label, final, escape, found):
        summary = {
            "final_accuracy": {"per_seed": final, "mean": float(np.mean(final))},
            "escape_step": {"per_seed": escape},
            "final_hard_types_discovered": {"per_seed": found},
            "final_entropy": {"per_seed": [0.2] * 3},
            "accuracy_at_800": {"per_seed": final},
        }
        return {"label": label, "run": {"estimator": label}, "summary": summary}

    return {
        "config": {"name": "compare", "steps": 800, "seeds": [0, 1, 2],
                   "task": {"hard_types": hard, "routine_types": 4, "hard_share": None},
                   "group_size": 8, "group_sizes": None, "prompts_per_step": 32},
        "regime": "transient",
        "ceiling": {"accuracy": 0.82, "hard_types_discovered": hard},
        "oracle_accuracy": 0.85,
        "arms": [arm("grpo", grpo_final, grpo_escape, grpo_found),
                 arm("budget", budget_final, budget_escape, [hard] * 3)],
    }  # fmt: skip


def test_compare_reading_follows_the_numbers():
    lower = _report.sweep_reading(
        fake_compare(
            [0.76, 0.77, 0.765], [0.775, 0.78, 0.777], [70, 80, 90], [100, 120, 110], [4] * 3
        )
    )
    assert "budgeting leaves the plateau 27 % earlier than grpo (step 80 vs 110)" in lower
    assert "grpo finds all 4 hard types in every seed" in lower
    assert "budgeting ends 1.2 ±0.1 points lower at step 800" in lower
    higher = _report.sweep_reading(
        fake_compare(
            [0.75, 0.74, 0.76], [0.65, 0.66, 0.64], [70, 80, 90], [None, None, 400], [2, 3, 4]
        )
    )
    assert "left in 3/3 seeds with budgeting and 1/3 with grpo" in higher
    assert "grpo finds 3.0 of 4 hard types, budgeting 4.0" in higher
    assert "budgeting ends 10.0 ±1.2 points higher at step 800" in higher
    level = _report.sweep_reading(
        fake_compare([0.70, 0.80, 0.75], [0.75, 0.74, 0.76], [90, 80, 70], [80, 70, 60], [4] * 3)
    )
    assert "14 % later" in level
    assert "budgeting ends level at step 800 (+0.0 ±" in level


def test_difficulty_changes_only_the_estimators():
    # Each estimator at its defaults, on compare's settings: nothing tuned for this one.
    for regime in REGIMES:
        config = experiment_config("difficulty", regime=regime)
        assert [label for label, _ in config.arms()] == [
            "budget", "grpo", "grpo+grpo_lead", "dgpo", "maxrl", "spo", "rae",
        ]  # fmt: skip
        compare = experiment_config("compare", regime=regime)
        assert replace(config, name="compare", estimators=compare.estimators) == compare


def test_difficulty_table_and_reading_split_hard_and_routine():
    def arm(label, final, hard, routine):
        summary = {
            "final_accuracy": {"per_seed": final},
            "final_accuracy_hard": {"per_seed": hard},
            "final_accuracy_routine": {"per_seed": routine},
            "escape_step": {"per_seed": [100, 110, 120]},
            "final_hard_types_discovered": {"per_seed": [4] * 3},
            "final_entropy": {"per_seed": [0.2] * 3},
            "accuracy_at_800": {"per_seed": final},
        }
        return {"label": label, "run": {"estimator": label}, "summary": summary}

    data = fake_compare([0.7] * 3, [0.7] * 3, [1] * 3, [1] * 3, [4] * 3)
    data["config"]["name"] = "difficulty"
    data["ceiling"].update(accuracy_hard=0.8, accuracy_routine=0.84)
    data["arms"] = [
        arm("budget", [0.76, 0.77, 0.78], [0.60, 0.62, 0.64], [0.80, 0.80, 0.80]),
        arm("grpo+grpo_lead", [0.77, 0.77, 0.77], [0.50, 0.50, 0.50], [0.82, 0.83, 0.84]),
    ]
    columns = _report.experiment_columns(data)
    assert columns[:4] == ["arm", "final acc", "hard acc", "routine acc"]
    rows = _report.experiment_rows(data)
    assert all(len(row) == len(columns) for row in rows)
    assert rows[0][:4] == ["budget", "77.0 ±1.0", "62.0 ±2.0", "80.0 ±0.0"]
    assert rows[-2][:4] == ["ceiling", "82.0", "80.0", "84.0"]
    reading = _report.sweep_reading(data)
    assert "budget − each arm at step 800" in reading
    assert "grpo+grpo_lead +0.0 ±0.6 (hard +12.0 ±1.2, routine -3.0 ±0.6)" in reading


def test_map_numbers_are_paired_differences():
    result = run_map(map_config(quick=True))
    for cell in result["cells"]:
        budget = np.array(cell["arms"]["budget"]["final_accuracy"])
        grpo = np.array(cell["arms"]["grpo"]["final_accuracy"])
        difference = cell["difference"]["grpo"]
        assert difference["mean"] == pytest.approx((budget - grpo).mean())
        assert difference["se"] == pytest.approx((budget - grpo).std(ddof=1) / math.sqrt(2))
        assert cell["routine_types"] + cell["hard_types"] == cell["total_types"]
        assert all(0 < c < o for c, o in zip(cell["ceiling"], cell["oracle"], strict=True))
    rows = _report.map_rows(result, "grpo")
    first = result["cells"][0]["difference"]["grpo"]
    se = 100 * first["se"]
    se_text = f"±{se:.2f}" if se < 0.05 else f"±{se:.1f}"
    assert rows[0][1] == f"{100 * first['mean']:+.1f} {se_text}"
    # The reading counts what the cells say: make every cell a clear win, then a loss.
    won = copy.deepcopy(result)
    for cell in won["cells"]:
        cell["difference"]["grpo"].update(mean=0.05, se=0.01)
    assert "ahead in 4, behind in 0 of 4" in _report.map_reading(won)
    for cell in won["cells"]:
        cell["difference"]["grpo"].update(mean=-0.05, se=0.01)
    assert "ahead in 0, behind in 4 of 4" in _report.map_reading(won)
    assert run_map(map_config(quick=True), workers=2)["cells"] == result["cells"]


# The command line ----------------------------------------------------------------------


def test_cli_task_options_reach_the_json(tmp_path):
    result = invoke("--quick", "--steps", "3", "--seeds", "1", "--estimators", "budget",
                    "--routine-types", "3", "--hard-types", "2", "--hard-share", "0.5",
                    "--specialist-prior", "-2", "--output-dir", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "compare-custom.json").read_text())
    task = data["config"]["task"]
    assert (task["routine_types"], task["hard_types"], task["hard_share"]) == (3, 2, 0.5)
    assert task["specialist_prior_logit"] == -2.0
    assert data["regime"] == "custom"


def test_cli_both_regimes_fit_80_columns(tmp_path):
    result = invoke("--quick", "--steps", "4", "--regime", "both", "--estimators", "grpo,budget",
                    "--output-dir", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "compare-persistent.json", "compare-persistent.png",
        "compare-transient.json", "compare-transient.png",
    ]  # fmt: skip
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert result.output.count("Reading:") == 2
    assert "ceiling" in result.output
    assert "oracle" in result.output
    assert "persistent: 19 routine + 8 hard types" in result.output.replace("\n", " ")


def test_cli_map_quick(tmp_path):
    result = invoke("--experiment", "map", "--quick", "--output-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "map.png").stat().st_size > 10_000
    data = json.loads((tmp_path / "map.json").read_text())
    assert len(data["cells"]) == 4
    assert "Reading" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_cli_describe_prints_the_reference_points():
    result = invoke("--describe", "--regime", "both", "--quick")
    assert result.exit_code == 0, result.output
    assert "ceiling" in result.output
    assert "persistent" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--plot", "out.jpg"], "--plot"),
        (["--regime", "steady"], "--regime"),
        (["--entropy-in", "advantage"], "--entropy-in"),
        (["--regime", "both", "--hard-types", "2"], "--regime"),
        (["--experiment", "map", "--hard-types", "2"], "--hard-types"),
        (["--experiment", "map", "--estimators", "grpo,budget"], "--estimators"),
        (["--hard-share", "0.5", "--hard-types", "0"], "hard_share"),
    ],
)
def test_cli_rejects_bad_values_before_training(monkeypatch, args, hint):
    def never(*args, **kwargs):
        raise AssertionError("trained before checking the options")

    monkeypatch.setattr("advbudget.lab.cli._simulate.run_experiment", never)
    monkeypatch.setattr("advbudget.lab.cli._simulate.run_map", never)
    result = invoke("--quick", *args)
    assert result.exit_code == 2, result.output
    assert hint in result.output


def test_cli_unwritable_plot_folder_fails_before_training(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("trained before checking --plot")

    monkeypatch.setattr("advbudget.lab.cli._simulate.run_experiment", never)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = invoke("--quick", "--plot", str(a_file / "x.png"), "--output-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "--plot" in result.output


def test_map_reading_splits_cells_by_discovery():
    result = run_map(map_config(quick=True, steps=2))
    for index, cell in enumerate(result["cells"]):
        found = cell["hard_types"] if index < 2 else 0
        cell["arms"]["grpo"]["hard_types_discovered"] = [found, found]
        cell["difference"]["grpo"].update(
            mean=-0.01 if index < 2 else 0.03 + 0.01 * index, se=0.001
        )
    reading = _report.map_reading(result)
    assert "where grpo finds every hard type (2 cells) budgeting ends -1.0" in reading
    assert "where it leaves some unfound (2 cells) +5.0 to +6.0" in reading
