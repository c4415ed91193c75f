"""The Makefile's environments: torch from its CPU pin before anything else, a loud failure
when pip brought a CUDA build anyway, a demo environment with no ML framework, and the
constraints each environment is built under (``make lock``, ``make test-latest``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
#: make test's environments and their constraints files (constraints/NAME.txt).
ENVIRONMENTS = {
    ".venv": "core",
    ".venv-verl": "verl",
    ".venv-trl": "trl",
    ".venv-trl-oldest": "trl-oldest",
    ".venv-openrlhf": "openrlhf",
    ".venv-tunix": "tunix",
    ".venv-skyrl": "skyrl",
}
#: Those with torch's CPU wheel (tunix's is jax only; PyPI serves torch for SkyRL's Python,
#: 3.12, as a CUDA build only, which that environment accepts).
TRAINER_STAMPS = tuple(venv for venv in ENVIRONMENTS if venv not in (".venv-tunix", ".venv-skyrl"))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _recipe(target: str, *variables: str) -> list[str]:
    """The commands `make` would run to build `target` from scratch."""
    out = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), *variables, target],
        capture_output=True,
        text=True,
        check=True,
    )
    commands = out.stdout.replace("\\\n", " ")  # a command continued over lines is one
    return [line for line in commands.splitlines() if line.strip()]


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


def test_skyrl_takes_torch_from_its_pin_first() -> None:
    lines = _recipe(".venv-skyrl/.installed")
    installs = [line for line in lines if "pip install" in line and "--upgrade pip" not in line]
    assert '"torch==2.13.0"' in installs[0], installs[0]
    venv = [line for line in lines if "-m venv .venv-skyrl" in line]
    assert venv, lines
    assert "python3.12 -m venv" in venv[0], venv[0]  # SkyRL needs Python >= 3.12


def test_without_python_312_make_test_skips_skyrl_in_one_line() -> None:
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(ROOT), "test-skyrl", "PYTHON_SKYRL="],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().splitlines() == [
        "test-skyrl: skipped: SkyRL needs Python >= 3.12, none found (python3.12 on PATH or "
        "pyenv's; set PYTHON_SKYRL)"
    ]


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
    venvs = [re.search(r"(\.venv[\w-]*)/bin/python", line) for line in runs]
    assert [v.group(1) if v else None for v in venvs] == [".venv-trl", ".venv-trl-oldest"]
    suite = " tests/adapters/trl tests/adapters/contract advbudget/adapters/trl"
    assert all(line.endswith(suite) for line in runs)
    # The oldest environment pins the lower bound of the trl extra (the adapter's range).
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [r for r in extras["optional-dependencies"]["trl"] if r.startswith("trl>=")]
    low = spec.removeprefix("trl>=").split(",")[0].removesuffix(".0")
    (pin,) = [line for line in _recipe(".venv-trl-oldest/.installed") if '-e ".[lm]"' in line]
    assert f'"trl=={low}.*"' in pin, (spec, pin)


def test_demo_environment_installs_no_ml_framework() -> None:
    lines = _recipe("demo")
    installs = [line for line in lines if "pip install" in line and "--upgrade pip" not in line]
    assert installs
    assert all("torch" not in line and "[test" not in line for line in installs)
    assert any('-e ".[lab,plot]"' in line for line in installs)
    runs = [line for line in lines if "advbudget " in line and "pip" not in line]
    assert runs
    assert all(line.startswith(".venv-demo/bin/") for line in runs), runs


def _installs(lines: list[str]) -> list[str]:
    """The pip installs that resolve requirements (not pip itself, not the plugin, which
    installs --no-deps)."""
    return [
        line
        for line in lines
        if "pip install" in line and "--upgrade pip" not in line and "./tests/plugin" not in line
    ]


@pytest.mark.parametrize("venv", ENVIRONMENTS)
def test_every_install_takes_the_environments_constraints(venv: str) -> None:
    """A fresh clone installs what was tested; CONSTRAINTS= (test-latest) lifts them."""
    name = ENVIRONMENTS[venv]
    installs = _installs(_recipe(f"{venv}/.installed"))
    assert installs
    for line in installs:
        assert f"-c constraints/{name}.txt" in line, line
    assert all(
        " -c " not in line for line in _installs(_recipe(f"{venv}/.installed", "CONSTRAINTS="))
    )


def test_test_latest_builds_other_environments_without_constraints() -> None:
    lines = _recipe("test-latest")
    installs = _installs(lines)
    assert installs
    assert all(" -c " not in line for line in installs)
    assert all(line.startswith(".venv-latest") for line in installs), installs
    runs = [line for line in lines if "-m pytest" in line]
    venvs = {venv for run in runs for venv in re.findall(r"(\.venv[\w-]*)/bin/python", run)}
    assert venvs == {venv.replace(".venv", ".venv-latest") for venv in ENVIRONMENTS}


@pytest.mark.parametrize(
    ("target", "trainer"), [("test-verl", "verl"), ("test-openrlhf", "openrlhf")]
)
def test_the_trainers_own_tests_run_stock_then_swapped(target: str, trainer: str) -> None:
    """The trainer's shipped tests run from its site-packages through the plugin of
    tests/upstream, once as they are and once with our mirrors swapped in."""
    upstream = [line for line in _recipe(target) if "--upstream=" in line]
    assert len(upstream) == 1, upstream
    line = upstream[0]
    assert f"--upstream={trainer}" in line
    assert "purelib" in line  # run from the installed wheel, not this repository
    assert 'for swap in "" --upstream-swap' in line
    assert "tests/upstream/pytest.ini" in line
    assert (ROOT / "tests" / "upstream" / "advbudget_upstream.py").is_file()


@pytest.mark.parametrize("name", ENVIRONMENTS.values())
def test_constraints_files_are_dated_pins_without_torch_or_advbudget(name: str) -> None:
    lines = (ROOT / "constraints" / f"{name}.txt").read_text().splitlines()
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert re.search(r"\(make lock, \d{4}-\d{2}-\d{2}, Python 3\.\d+", header), header
    pins = [line for line in lines if line and not line.startswith("#")]
    assert pins
    for pin in pins:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==\S+", pin), pin
    names = {pin.split("==")[0].lower() for pin in pins}
    assert "torch" not in names  # TORCH_PIN decides it
    assert not {n for n in names if n.startswith("advbudget")}


def test_readme_names_the_versions_make_test_installs() -> None:
    """Each version README's table gives is the one its environment's constraints pin."""
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(\.venv[\w-]*)` \| `([\w-]+\.txt)` \| (.+) \|$", readme, re.M)
    assert {venv for venv, _, _ in rows} == set(ENVIRONMENTS)
    for venv, file, frameworks in rows:
        assert file == f"{ENVIRONMENTS[venv]}.txt", venv
        pinned = set((ROOT / "constraints" / file).read_text().splitlines())
        versions = re.findall(r"`([\w.-]+==[\w.]+)`", frameworks)
        assert versions, venv
        for version in versions:
            assert version in pinned, f"README: {venv} {version}, not in constraints/{file}"


def test_lock_writes_each_environments_versions(tmp_path: Path) -> None:
    """make lock freezes each environment (here all of them: this test's own) into a dated
    constraints file, leaving out torch and advbudget's own packages."""
    import numpy as np

    here = sys.prefix
    venvs = [f"{variable}={here}" for variable in ("VENV", "VENV_VERL", "VENV_TRL",
             "VENV_TRL_OLDEST", "VENV_OPENRLHF", "VENV_TUNIX", "VENV_SKYRL")]  # fmt: skip
    out = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "lock", f"LOCK_DIR={tmp_path}", *venvs],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(p.stem for p in tmp_path.glob("*.txt")) == sorted(ENVIRONMENTS.values())
    text = (tmp_path / "verl.txt").read_text()
    assert text.startswith("# make test's verl environment: the versions it was last green")
    assert f"\nnumpy=={np.__version__}\n" in text
    assert "\ntorch==" not in text
    assert "advbudget" not in text.split("\n", 3)[3]  # the pins, after the header
    missing = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "lock", f"LOCK_DIR={tmp_path}", "VENV=/nonexistent"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0
    assert "lock: /nonexistent is missing: run make test first" in missing.stderr


def _lock_python(variable: str = "LOCK_PYTHON") -> str:
    (line,) = [
        line
        for line in (ROOT / "Makefile").read_text().splitlines()
        if line.startswith(f"{variable} :=")
    ]
    return line.split(":=")[1].strip()


@pytest.mark.parametrize("name", ENVIRONMENTS.values())
def test_constraints_were_locked_on_the_makefiles_python(name: str) -> None:
    header = (ROOT / "constraints" / f"{name}.txt").read_text().splitlines()[1]
    python = _lock_python("SKYRL_LOCK_PYTHON" if name == "skyrl" else "LOCK_PYTHON")
    assert f"Python {python}." in header, header


def test_another_python_installs_without_constraints_and_says_so(tmp_path: Path) -> None:
    """Pins locked on one Python may have no wheel on another (numpy 2.4 needs 3.11+)."""
    python = tmp_path / "python3.10"
    python.write_text("#!/bin/sh\necho 3.10\n")  # what the Makefile asks: its version
    python.chmod(0o755)
    lines = _recipe(".venv-verl/.installed", f"PYTHON={python}")
    assert (
        f"Python 3.10: constraints/ are locked on {_lock_python()}; installing without them"
        in lines
    )
    installs = _installs(lines)
    assert installs
    assert all(" -c " not in line for line in installs)


@pytest.mark.parametrize(
    ("target", "framework"),
    [
        ("test-verl", "verl"),
        ("test-trl", "trl"),
        ("test-openrlhf", "openrlhf"),
        ("test-tunix", "tunix"),
        ("test-skyrl", "skyrl"),
    ],
)
def test_each_trainer_suite_requires_what_its_environment_is_built_with(
    target: str, framework: str
) -> None:
    """A skip for want of the trainer (or the example plugin every trainer environment
    installs) fails in make's runs: advbudget/testing/_required.py reads ADVBUDGET_REQUIRE;
    the shared adapter suite (tests/adapters/contract) runs there for that framework
    (ADVBUDGET_FRAMEWORK)."""
    runs = [line for line in _recipe(target) if "-m pytest" in line and "--upstream" not in line]
    assert runs
    for run in runs:
        required = re.search(r"\bADVBUDGET_REQUIRE=(\S+) ", run)
        assert required, run
        assert {framework, "advbudget_example_plugin"} <= set(required.group(1).split(","))
        assert f"ADVBUDGET_FRAMEWORK={framework} " in run, run
        assert " tests/adapters/contract " in run, run


def test_make_test_builds_every_environment_first() -> None:
    """``make test`` builds its environments together (``-j3 environments``), then runs the
    suites; ``environments`` names every one of them."""
    (line,) = [line for line in _recipe("test") if "-j3 environments" in line]
    assert line.endswith("-j3 environments"), line
    venvs = [line.split()[-1] for line in _recipe("environments") if " -m venv " in line]
    assert sorted(venvs) == sorted(ENVIRONMENTS)


def test_make_test_runs_the_core_suite_then_every_trainer_suite_two_at_a_time() -> None:
    """The core suite first (it fails fast and uses both cores), then the trainer suites
    side by side, each one's output whole: every ``test-<trainer>`` target, once."""
    makes = [line.split() for line in _recipe("test") if line.startswith("make ")]
    assert makes[1] == ["make", "lint", "typecheck", "test-core"], makes
    assert makes[2][:3] == ["make", "-j2", "--output-sync=target"], makes
    targets = re.findall(r"^(test-[a-z]+):", (ROOT / "Makefile").read_text(), re.MULTILINE)
    trainers = {t for t in targets if t not in ("test-core", "test-latest")}
    assert sorted(makes[2][3:]) == sorted(trainers), makes[2]
