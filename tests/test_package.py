"""Packaging promises: the library runs where only its dependencies import, loads no ML
framework on import, is typed; without the lab, the command names the extra it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import advbudget

FRAMEWORKS = ("torch", "jax", "tensorflow", "verl", "trl", "openrlhf", "transformers", "ray")

# A Python where only the library's dependencies can be imported (what `pip install
# advbudget` gives): any other module outside the standard library is refused.
_ONLY_THE_DEPENDENCIES = """
import sys
ALLOWED = {"advbudget", "numpy", "array_api_compat", *sys.stdlib_module_names}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top not in ALLOWED and not top.startswith("_sysconfigdata"):  # stdlib's, per OS
            raise ModuleNotFoundError(f"No module named {name!r} (refused)", name=name)


sys.meta_path.insert(0, Refuse())
"""


def _run_with_only_the_dependencies(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _ONLY_THE_DEPENDENCIES + code], capture_output=True, text=True
    )


def test_the_library_runs_with_only_its_dependencies():
    code = """
import numpy as np
import advbudget, advbudget.core, advbudget.metrics, advbudget.theory, advbudget.checks
import advbudget.testing, advbudget.rewards, advbudget.adapters
from advbudget import budget_advantage, compute_advantages
from advbudget.testing import assert_close

rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
assert_close(budget_advantage(rewards, group_size=4)[:4], [0.75, -0.25, -0.25, -0.25], xp=np)
result = compute_advantages(rewards, "grpo", group_size=4)
print(advbudget.metrics.advantage_metrics(result)["valid_fraction"])
print(advbudget.theory.implied_slope("budget", 8, 0.5) > 0)
print(advbudget.rewards.dapo_reward("Answer: 34", "34"))
print(advbudget.adapters.get_convention("verl").framework)
"""
    result = _run_with_only_the_dependencies(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == ["1.0", "True", "1.0", "verl"], result.stdout


def test_the_refusing_python_refuses():
    # The test above means something only if a module outside the dependencies fails there.
    result = _run_with_only_the_dependencies("import typer")
    assert result.returncode == 1
    assert "No module named 'typer' (refused)" in result.stderr


def test_the_command_without_the_lab_names_the_extra():
    result = _run_with_only_the_dependencies("from advbudget.lab import main; main()")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "advbudget: the command line needs typer, which is not installed: in the advbudget "
        'checkout run pip install -e ".[lab]"'
    )


def test_import_loads_no_ml_framework():
    code = (
        "import sys, advbudget, advbudget.metrics, advbudget.theory, advbudget.adapters, "
        "advbudget.rewards, advbudget.testing, advbudget.testing.verl, advbudget.testing.trl, "
        "advbudget.testing.openrlhf, advbudget.lab.data, advbudget.lab.eval, advbudget.lab.sim, "
        "advbudget.lab.cli;"
        f"print([m for m in {FRAMEWORKS!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_and_typing():
    for name in advbudget.__all__:
        assert getattr(advbudget, name) is not None
    assert (Path(advbudget.__file__).parent / "py.typed").exists()


def test_readme_examples_run():
    """Every python block of the README runs as written."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = readme.split("```python\n")[1:]
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block.split("```")[0], "README.md", "exec"), {})
