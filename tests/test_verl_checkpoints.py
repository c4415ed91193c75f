"""The verl example evaluates the checkpoint verl finished with (no verl needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from advbudget.adapters.verl.checkpoints import TRACKER, latest_checkpoint


def make_run(root: Path, steps: list[int], tracked: int | None = None) -> Path:
    for step in steps:
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    (root / "eval").mkdir()  # other folders do not count
    if tracked is not None:
        (root / TRACKER).write_text(f"{tracked}\n")
    return root


def test_the_tracker_file_decides(tmp_path: Path) -> None:
    # verl may keep a later, unfinished folder; the tracker names the finished one.
    run = make_run(tmp_path, [50, 950, 1000, 1050], tracked=1000)
    assert latest_checkpoint(run) == run / "global_step_1000"


def test_without_a_tracker_steps_compare_as_numbers(tmp_path: Path) -> None:
    # `sort -t_ -k3 -n` on the path picked global_step_950 (or 50) over 1000.
    run = make_run(tmp_path, [50, 950, 1000])
    assert latest_checkpoint(run).name == "global_step_1000"


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no global_step_<N> folder"):
        latest_checkpoint(tmp_path)
    (tmp_path / TRACKER).write_text("700")
    with pytest.raises(FileNotFoundError, match="names step 700"):
        latest_checkpoint(tmp_path)


def test_the_example_uses_it(tmp_path: Path) -> None:
    script = (Path(__file__).resolve().parents[1] / "examples" / "verl_qwen3.sh").read_text()
    assert "-m advbudget.adapters.verl.checkpoints" in script
    assert "sort -t_" not in script
    run = make_run(tmp_path, [5, 10, 1000], tracked=1000)
    out = subprocess.run(
        [sys.executable, "-m", "advbudget.adapters.verl.checkpoints", str(run)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(run / "global_step_1000")
