"""Every private verl symbol the adapter uses is in ``_hooks.HOOKS``, resolves in the
installed verl with its recorded signature, and is named nowhere else; installing
advbudget changes no verl function until a run asks for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advbudget.adapters._hooks import hook_problems, private_names_outside

from .conftest import VERL_WARNINGS

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = VERL_WARNINGS

ROOT = Path(__file__).resolve().parents[3]


def test_every_hook_resolves_with_its_signature() -> None:
    from advbudget.adapters.verl._hooks import HOOKS

    assert hook_problems(HOOKS) == []


def test_no_private_verl_name_outside_the_hooks() -> None:
    from advbudget.adapters.verl._hooks import HOOKS

    adapter = ROOT / "advbudget" / "adapters" / "verl"
    files = [path for path in sorted(adapter.glob("*.py")) if path.name != "_hooks.py"]
    files += [
        ROOT / "advbudget" / "rewards" / "verl.py",
        ROOT / "advbudget" / "testing" / "verl.py",
    ]
    assert private_names_outside(HOOKS, files) == []


# Loads verl's trainer modules the way a run does (the plugin imports the adapter), then
# lists every function or method of a verl module or class that is not verl's own.
_NOT_VERLS = """
import importlib, inspect, json, sys, types, warnings
warnings.simplefilter("ignore")
for name in ["verl", "verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.trainer_base",
             "verl.trainer.ppo.v1.replay_buffer", "verl.workers.engine_workers",
             "verl.trainer.main_ppo"]:
    importlib.import_module(name)
from verl.trainer.ppo import core_algos
foreign = []
for name, module in list(sys.modules.items()):
    if not name.startswith("verl.") or module is None:
        continue
    owners = [(name, module)] + [
        (f"{name}.{key}", value) for key, value in vars(module).items()
        if inspect.isclass(value) and getattr(value, "__module__", "") == name
    ]
    for owner_name, owner in owners:
        for key, value in list(vars(owner).items()):
            code = getattr(getattr(value, "__func__", value), "__code__", None)
            # a wrapper copies verl's __module__ and __name__, not its code
            if isinstance(code, types.CodeType) and "advbudget" in code.co_filename:
                foreign.append(f"{owner_name}.{key}")
print(json.dumps({
    "plugin": "advbudget.adapters.verl" in sys.modules,
    "registered": "reward_budget" in core_algos.ADV_ESTIMATOR_REGISTRY,
    "foreign": foreign,
}))
"""


def _not_verls(**env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ADVBUDGET_VERL")}
    done = subprocess.run(
        [sys.executable, "-c", _NOT_VERLS],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_verl_leaves_verls_functions_verls() -> None:
    """With advbudget installed and nothing selected, ``import verl`` registers our names
    (the plugin ran) and every verl function and method is verl's; asked for drop's
    kept-row count (as drop's workers are), the one wrapper it needs is there."""
    plain = _not_verls()
    assert plain == {"plugin": True, "registered": True, "foreign": []}
    asked = _not_verls(ADVBUDGET_VERL_KEPT_ROWS="1")
    assert asked["foreign"] == ["verl.workers.engine_workers.TrainingWorker.train_batch"]


def test_worker_environment_reaches_verls_worker_group_and_is_undone() -> None:
    from verl.single_controller.ray import RayWorkerGroup
    from verl.trainer.ppo.v1 import trainer_base

    from advbudget.adapters.verl._hooks import worker_environment

    with worker_environment({}):
        assert trainer_base.RayWorkerGroup is RayWorkerGroup
    with worker_environment({"ADVBUDGET_VERL_KEPT_ROWS": "1"}):
        group = trainer_base.RayWorkerGroup
        assert group is not RayWorkerGroup
        assert issubclass(group, RayWorkerGroup)
    assert trainer_base.RayWorkerGroup is RayWorkerGroup
