"""The tests every adapter passes, written once and run in each trainer's environment.

Each trainer's make target runs this folder with ``ADVBUDGET_FRAMEWORK=<framework>``; the
framework's driver, ``tests/adapters/<framework>/contract.py``, is the only part written per
framework. A driver defines:

- ``advantages(name, rewards, group_size, options) -> list[float]``: one advantage per
  rollout (contiguous groups) of the framework's estimator ``name``, computed through the
  framework's own code path, with the advbudget ``options`` given in the framework's own
  way (a config key, a flag, a keyword);
- ``read_options(options) -> AdapterOptions``: the options as the framework hands them over,
  read by the adapter's own reader;
- ``key_of(name) -> str``: the framework's key of option ``name``, as a refusal names it.

The core environment has no trainer: there the folder is not collected.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

FRAMEWORKS = ("verl", "trl", "openrlhf", "tunix", "skyrl")
FRAMEWORK = os.environ.get("ADVBUDGET_FRAMEWORK", "")
ADAPTERS = Path(__file__).resolve().parents[1]

if not FRAMEWORK:
    collect_ignore_glob = ["test_*.py"]
elif FRAMEWORK not in FRAMEWORKS:
    raise ValueError(
        f"ADVBUDGET_FRAMEWORK: expected one of {', '.join(FRAMEWORKS)}, got {FRAMEWORK!r}"
    )


@pytest.fixture(scope="session")
def framework() -> str:
    return FRAMEWORK


@pytest.fixture(scope="session", autouse=True)
def driver(framework: str) -> ModuleType:
    """``tests/adapters/<framework>/contract.py``, loaded before any test: its import may
    prepare the environment (OpenRLHF's import stubs on a CPU machine)."""
    path = ADAPTERS / framework / "contract.py"
    spec = importlib.util.spec_from_file_location(f"contract_{framework}", path)
    assert spec is not None, f"{path}: no driver"
    assert spec.loader is not None, f"{path}: no driver"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
