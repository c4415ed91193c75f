"""Every private TRL symbol the adapter uses is in ``_hooks.HOOKS``, resolves in the
installed TRL with its recorded signature, and is named nowhere else; every TRL method the
trainer overrides is one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from advbudget.adapters._hooks import hook_problems, private_names_outside
from advbudget.adapters.trl._hooks import HOOKS

from .conftest import TRL_WARNINGS

pytestmark = TRL_WARNINGS

ROOT = Path(__file__).resolve().parents[3]


def test_every_hook_resolves_with_its_signature() -> None:
    assert hook_problems(HOOKS) == []


def test_no_private_trl_name_outside_the_hooks() -> None:
    adapter = ROOT / "advbudget" / "adapters" / "trl"
    files = [path for path in sorted(adapter.rglob("*.py")) if path.name != "_hooks.py"]
    files += [ROOT / "advbudget" / "rewards" / "trl.py", ROOT / "advbudget" / "testing" / "trl.py"]
    assert private_names_outside(HOOKS, files) == []


def test_every_override_is_a_recorded_hook() -> None:
    """A method of ours that shadows one of ``GRPOTrainer``'s (on purpose or by a clash of
    names) is an override, recorded and kept in ``_hooks.TrainerHooks``."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer

    mro = AdvBudgetGRPOTrainer.__mro__
    overrides = {
        f"{cls.__module__}.{cls.__qualname__}.{name}"
        for cls in mro[: mro.index(GRPOTrainer)]
        for name in vars(cls)
        if hasattr(GRPOTrainer, name) and not name.startswith("__")
    }
    recorded = {
        f"advbudget.adapters.trl._hooks.TrainerHooks.{hook.qualname.rsplit('.', 1)[-1]}"
        for hook in HOOKS
        if hook.use == "override"
    }
    assert overrides == recorded
