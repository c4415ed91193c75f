"""The package as a user gets it from an index: ``python -m build`` gives a wheel and an sdist,
each installs into a fresh virtual environment with nothing else: the library alone
(advbudget, numpy, array-api-compat) runs the README's numpy example, and the command says
which extra it needs; with the ``lab`` extra, ``advbudget explain`` and ``advbudget simulate``
run, with the sample data and ``py.typed`` on board."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What `pip install advbudget` brings (pip's own tools aside), by distribution name.
LIBRARY_DISTRIBUTIONS = {"advbudget", "numpy", "array-api-compat"}
PIP_OWN = {"pip", "setuptools", "wheel"}
# Files users rely on that are not Python modules: a build that drops them still imports.
PACKAGE_DATA = (
    "advbudget/py.typed",
    "advbudget/lab/data/sample/dapo_sample.jsonl",
    "advbudget/lab/data/sample/eval_sample.jsonl",
)


def _run(*command: str | Path, cwd: Path | None = None, returncode: int = 0) -> str:
    out = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert out.returncode == returncode, (
        f"{command}: exit {out.returncode}:\n{out.stdout}\n{out.stderr}"
    )
    return out.stdout + out.stderr if returncode else out.stdout


def _readme_numpy_example() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```")[0] for b in readme.split("```python\n")[1:]]
    numpy_blocks = [b for b in blocks if "import numpy as np" in b and "torch" not in b]
    assert numpy_blocks, "README.md lost its numpy example"
    return numpy_blocks[0]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("build")
    outdir = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", outdir, ROOT)
    (wheel,) = outdir.glob("advbudget-*.whl")
    (sdist,) = outdir.glob("advbudget-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_wheel_and_sdist_carry_the_package_data(artifacts: dict[str, Path]) -> None:
    wheel_names = set(zipfile.ZipFile(artifacts["wheel"]).namelist())
    missing = [name for name in PACKAGE_DATA if name not in wheel_names]
    assert not missing, f"wheel lacks {missing}"
    assert any(n.endswith("entry_points.txt") for n in wheel_names)
    assert any(n.endswith("licenses/LICENSE") for n in wheel_names)
    with tarfile.open(artifacts["sdist"]) as sdist:
        sdist_names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {*PACKAGE_DATA, "LICENSE", "README.md", "pyproject.toml"} <= sdist_names
    assert not any(name.startswith(".venv") for name in sdist_names)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_artifact_installs_and_runs_in_a_fresh_environment(
    artifacts: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", artifacts[kind])

    # Run outside the checkout so the installed copy, not the source tree, is imported.
    where = _run(python, "-c", "import advbudget; print(advbudget.__file__)", cwd=tmp_path)
    assert str(ROOT) not in where
    assert "site-packages" in where
    printed = _run(python, "-c", _readme_numpy_example() + "\nprint(res.advantages)", cwd=tmp_path)
    assert "0.75" in printed
    assert "-0.25" in printed
    installed = json.loads(_run(python, "-m", "pip", "list", "--format", "json"))
    assert {d["name"].lower() for d in installed} - PIP_OWN == LIBRARY_DISTRIBUTIONS
    without_lab = _run(venv / "bin" / "advbudget", "explain", cwd=tmp_path, returncode=1)
    assert 'pip install -e ".[lab]"' in without_lab

    _run(python, "-m", "pip", "install", "--quiet", f"{artifacts[kind]}[lab]")
    explained = _run(venv / "bin" / "advbudget", "explain", "--group-size", "8", cwd=tmp_path)
    assert "+0.8750" in explained  # budget, k = 1 of 8: 1 - 1/8
    version = _run(venv / "bin" / "advbudget", "--version", cwd=tmp_path)
    assert "0.1.0" in version
    simulated = _run(
        venv / "bin" / "advbudget", "simulate", "--quick", "--no-plot", "--output-dir", "sim",
        cwd=tmp_path,
    )  # fmt: skip
    assert "budget" in simulated
    assert (tmp_path / "sim").is_dir()
    data = _run(
        python,
        "-c",
        "from importlib.resources import files; import advbudget;"
        "root = files(advbudget);"
        f"print(all(root.joinpath(p.split('/', 1)[1]).is_file() for p in {PACKAGE_DATA!r}))",
        cwd=tmp_path,
    )
    assert data.strip() == "True"
