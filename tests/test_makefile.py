"""The Makefile's environments: torch from its CPU pin before anything else, a loud failure
when pip brought a CUDA build anyway, and a demo environment with no ML framework."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
TRAINER_STAMPS = (".venv", ".venv-verl", ".venv-trl", ".venv-trl-oldest", ".venv-openrlhf")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _recipe(target: str, *variables: str) -> list[str]:
    """The commands `make` would run to build `target` from scratch."""
    out = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), *variables, target],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("venv", TRAINER_STAMPS)
def test_torch_pin_comes_first_and_is_checked_last(venv: str) -> None:
    lines = _recipe(f"{venv}/.installed")
    # Installs that resolve dependencies: each could replace the pinned torch.
    installs = [
        i
        for i, line in enumerate(lines)
        if "pip install" in line and "--upgrade pip" not in line and "--no-deps" not in line
    ]
    assert '"torch==2.13.0"' in lines[installs[0]], lines[installs[0]]
    guard = [i for i, line in enumerate(lines) if "torch.version.cuda" in line]
    assert guard, "no CUDA check"
    assert guard[0] > installs[-1], "the CUDA check must follow the last install"


def test_torch_index_reaches_pip() -> None:
    lines = _recipe(".venv/.installed", "TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    (torch_line,) = [line for line in lines if '"torch==' in line]
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line


def _guard(tmp_path: Path, cuda: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the Makefile's guard on a venv whose torch reports `cuda` as its CUDA version."""
    tmp_path = tmp_path / f"cuda-{cuda}-{len(env)}"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        f"__version__ = '2.13.0'\nclass version:\n    cuda = {cuda!r}\n"
    )
    makefile = tmp_path / "check.mk"
    makefile.write_text(f"include {ROOT}/Makefile\ncheck:\n\t$(call require_cpu_torch,{venv})\n")
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), "-f", str(makefile), "check"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site"), **env},
    )


def test_a_cuda_torch_fails_the_build_with_the_fix(tmp_path: Path) -> None:
    assert _guard(tmp_path, None).returncode == 0
    refused = _guard(tmp_path, "12.8")
    assert refused.returncode != 0
    assert "CUDA 12.8 build" in refused.stderr
    assert "TORCH_INDEX=" in refused.stderr
    assert _guard(tmp_path, "12.8", ALLOW_CUDA_TORCH="1").returncode == 0


def test_trl_suite_runs_on_the_newest_and_the_oldest_supported_trl() -> None:
    runs = [line for line in _recipe("test-trl") if "-m pytest" in line]
    assert [line.split("/")[0] for line in runs] == [".venv-trl", ".venv-trl-oldest"]
    assert all(line.endswith(" tests/adapters/trl advbudget/adapters/trl") for line in runs)
    # The oldest environment pins the lower bound of the trl extra (the adapter's range).
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [r for r in extras["optional-dependencies"]["trl"] if r.startswith("trl>=")]
    low = spec.removeprefix("trl>=").split(",")[0].removesuffix(".0")
    (pin,) = [line for line in _recipe(".venv-trl-oldest/.installed") if '-e ".[lm]"' in line]
    assert pin.endswith(f'"trl=={low}.*"'), (spec, pin)


def test_demo_environment_installs_no_ml_framework() -> None:
    lines = _recipe("demo")
    installs = [line for line in lines if "pip install" in line and "--upgrade pip" not in line]
    assert installs
    assert all("torch" not in line and "[test" not in line for line in installs)
    assert any('-e ".[plot]"' in line for line in installs)
    runs = [line for line in lines if "advbudget " in line and "pip" not in line]
    assert runs
    assert all(line.startswith(".venv-demo/bin/") for line in runs), runs
