"""benchmarks/openrlhf_adapter.py keeps working: its agreement check passes (no timing
asserts), run as a user runs it: without the tests' flash_attn/vllm stubs on the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ...benchmark_runs import run_benchmark
from .conftest import STUBS

pytest.importorskip("openrlhf")


def test_quick_run_agrees_and_reports(tmp_path: Path) -> None:
    output = tmp_path / "openrlhf.json"
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p != str(STUBS))}
    payload = run_benchmark("openrlhf_adapter", output, "--quick", timeout=600, env=env)
    assert payload["problems"] == []
    assert {r["path"] for r in payload["results"]} == {
        "OpenRLHF group_norm",
        "advbudget_group_norm",
        "reward_budget",
        "advbudget_group_norm, copies",
        "floor: bookkeeping only",
    }
    assert [r["n"] for r in payload["drop_costs"]] == [512]
    assert output.with_suffix(".md").read_text().startswith("# advbudget OpenRLHF benchmark")
