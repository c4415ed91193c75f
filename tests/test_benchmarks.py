"""The benchmark script keeps working: its own correctness checks pass (no timing asserts)."""

from __future__ import annotations

import importlib.util

import pytest

from .benchmark_runs import BENCHMARKS, run_benchmark


@pytest.mark.slow
def test_core_benchmark_runs_and_agrees(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    output = tmp_path / "core.json"
    payload = run_benchmark("core", output, "--quick", "--sizes", "512", "--repeats", "1")
    paths = {(row["backend"], row["path"]) for row in payload["results"]}
    assert ("torch", "verl-style Python loop (grpo, string uids)") in paths
    assert ("jax", "budget, contiguous") in paths
    report = output.with_suffix(".md").read_text()
    assert report.startswith("# advbudget core benchmark")
    assert "## Peak memory per call" in report


def test_estimators_benchmark_runs_and_agrees(tmp_path):
    output = tmp_path / "estimators.json"
    payload = run_benchmark("estimators", output, "--sizes", "4096", "--repeats", "1")
    assert payload["problems"] == []  # ours and the hand-written floor agree
    assert {r["name"] for r in payload["ratios"]} == {"maxrl / floor", "passk / floor"}


def test_weights_benchmark_runs_and_agrees(tmp_path):
    output = tmp_path / "weights.json"
    payload = run_benchmark("weights", output, "--sizes", "4096", "--repeats", "1")
    assert payload["problems"] == []  # weighted == base x the weights written by hand
    assert {r["name"] for r in payload["ratios"]} == {
        "budget + grpo_lead / budget",
        "budget + dqw / budget",
        "grpo + grpo_lead / grpo",
        "grpo + dqw / grpo",
    }


def test_state_benchmark_runs_and_agrees(tmp_path):
    output = tmp_path / "state.json"
    payload = run_benchmark("state", output, "--sizes", "4096", "--repeats", "1")
    assert payload["problems"] == []  # rae's advantages == r - the remembered baseline
    assert {r["name"] for r in payload["ratios"]} == {  # the hand memory == rae, too
        "rae / remax",
        "spo / remax",
        "rae, shuffled / remax",
        "spo, shuffled / remax",
        "rae by hand / remax",
        "rae by hand, shuffled / remax",
        "rae / rae by hand",
        "rae, shuffled / rae by hand, shuffled",
    }


def test_trajectories_benchmark_runs_and_agrees(tmp_path):
    output = tmp_path / "trajectories.json"
    payload = run_benchmark("trajectories", output, "--sizes", "4096", "--repeats", "1")
    assert payload["problems"] == []  # every row has its trajectory's advantage
    assert {r["name"] for r in payload["ratios"]} == {
        "rows / (2 x trajectory level + one grouping)",
        "rows / trajectory level",
    }


def test_staleness_benchmark_runs_and_agrees(tmp_path):
    output = tmp_path / "staleness.json"
    payload = run_benchmark("staleness", output, "--sizes", "4096", "--repeats", "1")
    assert payload["problems"] == []  # each rule == the rule by hand from the base estimator
    assert {r["name"] for r in payload["ratios"]} == {
        f"{base}, {rule} / {base}"
        for base in ("grpo", "budget")
        for rule in ("keep", "baseline_only", "drop", "drop_group")
    } | {
        f"{base}, {rule} / by hand"
        for base in ("grpo", "budget")
        for rule in ("baseline_only", "drop", "drop_group")
    }


def test_report_collects_results(tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark_report", BENCHMARKS / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    (tmp_path / "core.md").write_text("# advbudget core benchmark\n\n| a |\n")
    text = report.build(tmp_path)
    assert "## advbudget core benchmark" in text  # nested one level down
    assert "- `gpu`:" in text  # named as not measured yet
