"""Every tunix symbol the adapter overrides or touches privately is in ``_hooks.HOOKS``,
resolves in the installed tunix with its recorded signature, and no private one is named
anywhere else; every tunix method the learner overrides is one of them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("tunix")  # its own environment: make test-tunix

from advbudget.adapters._hooks import hook_problems, private_names_outside
from advbudget.adapters.tunix._hooks import HOOKS

from .conftest import TUNIX_WARNINGS

pytestmark = TUNIX_WARNINGS

ROOT = Path(__file__).resolve().parents[3]

#: What ``abc.ABCMeta`` sets on every class it makes (tunix's learners are ABCs).
ABC_CACHE = "_abc_impl"


def test_every_hook_resolves_with_its_signature() -> None:
    assert hook_problems(HOOKS) == []


def test_no_private_tunix_name_outside_the_hooks() -> None:
    adapter = ROOT / "advbudget" / "adapters" / "tunix"
    files = [path for path in sorted(adapter.rglob("*.py")) if path.name != "_hooks.py"]
    files.append(ROOT / "advbudget" / "rewards" / "tunix.py")
    assert private_names_outside(HOOKS, files) == []


def test_every_override_is_a_recorded_hook() -> None:
    """A method of ours that shadows one of tunix's learners' (on purpose or by a clash of
    names) is an override, recorded and kept in ``_hooks.LearnerHooks``."""
    from tunix.rl.grpo.dapo_learner import DAPOLearner
    from tunix.rl.grpo.grpo_learner import GRPOLearner

    from advbudget.adapters.tunix import AdvBudgetDAPOLearner, AdvBudgetGRPOLearner

    overrides = set()
    for learner, tunix in (
        (AdvBudgetGRPOLearner, GRPOLearner),
        (AdvBudgetDAPOLearner, DAPOLearner),
    ):
        mro = learner.__mro__
        overrides |= {
            f"{cls.__module__}.{cls.__qualname__}.{name}"
            for cls in mro[: mro.index(tunix)]
            for name in vars(cls)
            if hasattr(tunix, name) and not name.startswith("__") and name != ABC_CACHE
        }
    recorded = {
        f"advbudget.adapters.tunix._hooks.LearnerHooks.{hook.qualname.rsplit('.', 1)[-1]}"
        for hook in HOOKS
        if hook.use == "override"
    }
    assert overrides == recorded


def test_only_our_names_registered_again_are_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """The package's filter of tunix's warning (installed at import) matches tunix's words:
    ours registered again log nothing, another name still warns."""
    from tunix.rl.function_registry import FunctionRegistry

    import advbudget.adapters.tunix  # noqa: F401  (installs the filter)

    registry = FunctionRegistry()
    with caplog.at_level(logging.WARNING):
        for name in ("advbudget_budget", "reward_budget", "advbudget_budget", "reward_budget"):
            registry.register("advantage_estimator", name)(print)
        assert caplog.messages == []
        for _ in range(2):
            registry.register("advantage_estimator", "grpo")(print)
    assert [m for m in caplog.messages if "already registered" in m] == [
        "Function 'grpo' is already registered in category 'advantage_estimator'. "
        "Overwriting with new function."
    ]
