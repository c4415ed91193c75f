"""What every adapter does, checked the same way in each trainer's environment (see the
folder's ``conftest.py``): private framework symbols recorded and nowhere else, nothing
patched by installing advbudget, options read once and refused in one line, the version
gate, the thin path equal to the core, and a plugin's estimator reaching the trainer."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from advbudget import compute_advantages
from advbudget.adapters import get_convention
from advbudget.adapters._hooks import hook_problems, private_names_outside
from advbudget.adapters._options import DEFAULT_MAX_GENERATION_BATCHES, AdapterOptions
from advbudget.metrics import DEFAULT_SOLVED_REWARD

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)


def adapter_module(framework: str, name: str) -> ModuleType:
    return importlib.import_module(f"advbudget.adapters.{framework}.{name}")


# -- hooks ------------------------------------------------------------------------------


def test_every_hook_resolves_with_its_signature(framework: str) -> None:
    hooks = adapter_module(framework, "_hooks").HOOKS
    assert hooks, "an empty hooks table"
    assert hook_problems(hooks) == []


def test_no_private_framework_name_outside_the_hooks(framework: str) -> None:
    hooks = adapter_module(framework, "_hooks").HOOKS
    folder = ROOT / "advbudget" / "adapters" / framework
    files = [path for path in sorted(folder.rglob("*.py")) if path.name != "_hooks.py"]
    for outside in (f"rewards/{framework}.py", f"testing/{framework}.py"):
        if (ROOT / "advbudget" / outside).exists():
            files.append(ROOT / "advbudget" / outside)
    assert private_names_outside(hooks, files) == []


# Imports the adapter and every framework module its hooks name, then lists the functions
# and methods of those modules whose code is ours (a wrapper copies the name, not the code).
_FOREIGN = """
import importlib, inspect, json, sys, types, warnings
warnings.simplefilter("ignore")
framework = sys.argv[1]
hooks = importlib.import_module(f"advbudget.adapters.{framework}._hooks").HOOKS
importlib.import_module(f"advbudget.adapters.{framework}")
roots = sorted({hook.module.split(".")[0] for hook in hooks})
for module in sorted({hook.module for hook in hooks}):
    importlib.import_module(module)
foreign = []
for name, module in list(sys.modules.items()):
    if module is None or name.split(".")[0] not in roots:
        continue
    owners = [(name, module)] + [
        (f"{name}.{key}", value) for key, value in list(vars(module).items())
        if inspect.isclass(value) and getattr(value, "__module__", "") == name
    ]
    for owner_name, owner in owners:
        for key, value in list(vars(owner).items()):
            # isinstance, not getattr: some values (Ray's client) raise on any attribute
            if isinstance(value, (classmethod, staticmethod, types.MethodType)):
                value = value.__func__
            if not isinstance(value, types.FunctionType):
                continue
            if "/advbudget/" in value.__code__.co_filename:
                foreign.append(f"{owner_name}.{key}")
print(json.dumps({"roots": roots, "foreign": foreign}))
"""


def test_installing_advbudget_patches_nothing(framework: str) -> None:
    """Importing the adapter (as a framework's plugin hooks do) and the framework modules
    it hooks leaves every function and method of those frameworks their own."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ADVBUDGET_VERL")}
    done = subprocess.run(
        [sys.executable, "-c", _FOREIGN, framework],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["roots"], found
    assert found["foreign"] == []


def test_the_adapter_needs_no_part_of_the_lab(framework: str) -> None:
    """The adapter's face and its step (the estimators, the metrics, the rewards) import
    nothing of advbudget.lab: ``pip install advbudget`` and the trainer are enough."""
    code = (
        "import sys, importlib; "
        f"importlib.import_module('advbudget.adapters.{framework}'); "
        "import advbudget.metrics, advbudget.rewards; "
        "print(sorted(m for m in sys.modules if m.startswith('advbudget.lab')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


# -- options ----------------------------------------------------------------------------

BAD = {
    "skipped_groups": "skip",
    "max_generation_batches": 0,
    "kappa_every": -1,
    "solved_reward": "high",
    "budget": -1.0,
    "tie_rtol": -1.0,
    "nan_policy": "ignore",
    "group_weight": "lead",
}


def test_defaults_come_from_the_framework_row(framework: str, driver: ModuleType) -> None:
    row = get_convention(framework)
    assert driver.read_options({}) == AdapterOptions(
        framework,
        solved_reward=DEFAULT_SOLVED_REWARD,
        skipped_groups="keep",
        max_generation_batches=DEFAULT_MAX_GENERATION_BATCHES,
        kappa_every=row.kappa_every,
    )


def test_options_are_read_once_into_one_record(driver: ModuleType) -> None:
    given = {"budget": 0.5, "solved_reward": 0.5, "kappa_every": 3, "max_generation_batches": 2}
    options = driver.read_options(given)
    assert dict(options.estimator_options) == {"budget": 0.5}
    assert (options.solved_reward, options.kappa_every, options.max_generation_batches) == (
        0.5,
        3,
        2,
    )
    assert driver.read_options({"solved_reward": None}).solved_reward is None


@pytest.mark.parametrize(("name", "value"), sorted(BAD.items()))
def test_a_bad_option_is_refused_in_one_line(driver: ModuleType, name: str, value: object) -> None:
    with pytest.raises(ValueError, match=r"^[^\n]+$") as refused:
        driver.read_options({name: value})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{driver.key_of(name)}: "), message


#: The adapters that know which policy version sampled each rollout; the others refuse the
#: staleness options with their reason.
STALENESS_WIRED = {"openrlhf", "tunix", "verl"}


def test_the_staleness_options_are_read_or_refused_with_the_reason(
    driver: ModuleType, framework: str
) -> None:
    given = {"max_staleness": 1, "stale_rollouts": "baseline_only"}
    if framework not in STALENESS_WIRED:
        for name, value in given.items():
            key = re.escape(driver.key_of(name))
            with pytest.raises(ValueError, match=rf"^{key}: not available here: \S[^\n]+$"):
                driver.read_options({name: value})
        return
    options = driver.read_options(given)
    assert (options.max_staleness, options.stale_rollouts) == (1, "baseline_only")
    assert driver.read_options({}).max_staleness is None
    key = re.escape(driver.key_of("stale_rollouts"))
    with pytest.raises(ValueError, match=rf"^{key}: 'drop' acts on stale rollouts, and none"):
        driver.read_options({"stale_rollouts": "drop"})
    with pytest.raises(ValueError, match=rf"^{re.escape(driver.key_of('max_staleness'))}: "):
        driver.read_options({"max_staleness": -1})


# -- the version gate -------------------------------------------------------------------


def test_the_version_gate(framework: str) -> None:
    from importlib.metadata import version

    gate = adapter_module(framework, "_version")
    check = getattr(gate, f"check_{framework}_version")
    distribution = "google-tunix" if framework == "tunix" else framework
    assert check() == version(distribution)
    with pytest.raises(ImportError) as refused:
        check("0.0.1")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{distribution}: advbudget.adapters.{framework} supports"), message


# -- the thin path ----------------------------------------------------------------------

REWARDS = [1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 0.0, 0.25, 0.75, 0.0]


def test_budget_through_the_framework_is_the_cores(driver: ModuleType, framework: str) -> None:
    name = get_convention(framework).name_of("budget")
    got = driver.advantages(name, REWARDS, 4, {"budget": 0.5})
    expected = compute_advantages(np.asarray(REWARDS), "budget", group_size=4, budget=0.5)
    # float32 in most frameworks: rounding of values of order 1
    np.testing.assert_allclose(got, np.asarray(expected.advantages), rtol=0, atol=1e-6)
    assert max(map(abs, got)) > 0.1  # not a comparison of zeros


@pytest.mark.parametrize("weight", ["grpo_lead", "dqw"])
def test_a_group_weight_reaches_the_framework(
    driver: ModuleType, framework: str, weight: str
) -> None:
    """``group_weight`` given the framework's way multiplies the advantages as the core does
    (its solved share at the run's ``solved_reward``: 0.5 here, so 0.5 and 0.75 count)."""
    name = get_convention(framework).name_of("budget")
    options = {"group_weight": weight, "solved_reward": 0.5}
    got = driver.advantages(name, REWARDS, 4, options)
    rewards = np.asarray(REWARDS)
    expected = compute_advantages(rewards, "budget", group_size=4, **options)
    plain = compute_advantages(rewards, "budget", group_size=4)
    np.testing.assert_allclose(got, np.asarray(expected.advantages), rtol=0, atol=1e-6)
    assert not np.allclose(expected.advantages, plain.advantages, atol=1e-3)  # it weighs
    assert driver.read_options(options).group_weight is not None


def test_a_plugins_estimator_reaches_the_framework(driver: ModuleType, framework: str) -> None:
    plugin = pytest.importorskip("advbudget_example_plugin")  # required by every make target
    name = get_convention(framework).name_of("plugin_scaled_dr")
    got = driver.advantages(name, REWARDS, 4, {"scale": 3.0})
    expected = plugin.expected(REWARDS, 4, scale=3.0)
    assert got == pytest.approx(expected, abs=1e-6)
    assert any(not math.isclose(v, 0.0) for v in expected)


def test_a_nan_reward_follows_nan_policy(driver: ModuleType, framework: str) -> None:
    """A NaN reward (a grader that failed) stops the step under ``nan_policy=raise``,
    naming the way out; under ``omit`` the rollout leaves its group's statistics with
    advantage 0. (The default is the framework's: raise, omit in TRL as TRL's own.)"""
    name = get_convention(framework).name_of("budget")
    rewards = [math.nan, *REWARDS[1:]]
    with pytest.raises(ValueError, match="nan_policy"):
        driver.advantages(name, rewards, 4, {"nan_policy": "raise"})
    got = driver.advantages(name, rewards, 4, {"nan_policy": "omit"})
    expected = compute_advantages(np.asarray(rewards), "budget", group_size=4, nan_policy="omit")
    np.testing.assert_allclose(got, np.asarray(expected.advantages), rtol=0, atol=1e-6)
    assert got[0] == 0.0


# -- the guide ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "skipped_groups",
        "max_generation_batches",
        "kappa_every",
        "solved_reward",
        "nan_policy",
        "group_weight",
        "max_staleness",  # where refused, the guide says why
        "stale_rollouts",
    ],
)
def test_each_option_is_documented_under_the_frameworks_key(
    driver: ModuleType, framework: str, name: str
) -> None:
    guide = (ROOT / "docs" / "guides" / f"{framework}.md").read_text(encoding="utf-8")
    assert driver.key_of(name) in guide
