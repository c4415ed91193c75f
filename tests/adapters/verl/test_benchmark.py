"""benchmarks/verl_adapter.py keeps working: its own agreement check passes (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...benchmark_runs import run_benchmark

verl = pytest.importorskip("verl")


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "verl.json"
    payload = run_benchmark("verl_adapter", output, "--quick")
    assert payload["problems"] == []
    assert {r["path"] for r in payload["results"]} == {
        "verl grpo (Python loop)",
        "verl grpo_vectorized",
        "advbudget_grpo",
        "reward_budget",
    }
    assert output.with_suffix(".md").read_text().startswith("# advbudget verl benchmark")
