"""benchmarks/skyrl_adapter.py keeps working: its agreement check passes (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...benchmark_runs import run_benchmark

pytest.importorskip("skyrl")


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "skyrl.json"
    payload = run_benchmark("skyrl_adapter", output, "--quick")
    assert payload["problems"] == []
    assert {r["path"] for r in payload["results"]} == {
        "SkyRL grpo",
        "advbudget_grpo",
        "reward_budget",
    }
    assert {r["name"] for r in payload["ratios"]} == {
        "advbudget_grpo / SkyRL grpo",
        "reward_budget / SkyRL grpo",
    }
    assert output.with_suffix(".md").read_text().startswith("# advbudget SkyRL benchmark")
