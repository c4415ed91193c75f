"""Run a script of benchmarks/ as a user runs it, for the tests that keep each one working
(their agreement checks and report format; timings are reported, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(
    name: str,
    output: Path,
    *args: str,
    timeout: int = 300,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``python benchmarks/<name>.py *args --output output``: its JSON payload, after
    checking that it exited 0 and wrote the markdown report beside it."""
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args, "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert output.with_suffix(".md").read_text().startswith("# ")
    payload: dict[str, Any] = json.loads(output.read_text())
    return payload
