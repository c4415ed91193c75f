"""benchmarks/trl_adapter.py keeps working (a short run; timings are reported, never asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...benchmark_runs import run_benchmark

trl = pytest.importorskip("trl")


def test_benchmark_runs(tmp_path: Path) -> None:
    output = tmp_path / "trl.json"
    payload = run_benchmark("trl_adapter", output, "--steps", "3", "--rounds", "1")
    assert set(payload["results"]) == {
        "stock GRPO",
        "advbudget budget",
        "advbudget budget + kappa_eff every step",
        "advbudget budget, skipped_groups=drop",
    }
    assert payload["drop_overhead"]["ratio"] > 0
    assert output.with_suffix(".md").read_text().startswith("# advbudget TRL adapter benchmark")
