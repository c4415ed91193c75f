"""benchmarks/tunix_adapter.py keeps working: its agreement check passes (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...benchmark_runs import run_benchmark

pytest.importorskip("tunix")


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "tunix.json"
    payload = run_benchmark("tunix_adapter", output, "--quick")
    assert payload["problems"] == []
    assert {r["path"] for r in payload["results"]} == {
        "tunix grpo",
        "advbudget_grpo",
        "reward_budget",
    }
    assert {r["name"] for r in payload["ratios"]} == {
        "advbudget_grpo / tunix grpo",
        "reward_budget / tunix grpo",
    }
    assert output.with_suffix(".md").read_text().startswith("# advbudget tunix benchmark")
