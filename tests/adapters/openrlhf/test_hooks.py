"""Every OpenRLHF (and Ray) symbol the adapter patches or touches privately is in
``_hooks.HOOKS``, resolves in the installed OpenRLHF with its recorded signature, and no
private one is named anywhere else; what :func:`install` patches is exactly ``PATCHED``."""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("openrlhf")

import advbudget
import advbudget.adapters.openrlhf as adapter
from advbudget.adapters._hooks import hook_problems, private_names_outside
from advbudget.adapters.openrlhf._hooks import HOOKS, PATCHED

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = Path(advbudget.__file__).resolve().parent


def test_every_hook_resolves_with_its_signature() -> None:
    assert hook_problems(HOOKS) == []


def test_no_private_openrlhf_name_outside_the_hooks() -> None:
    adapter_dir = ROOT / "advbudget" / "adapters" / "openrlhf"
    files = [path for path in sorted(adapter_dir.rglob("*.py")) if path.name != "_hooks.py"]
    files += [
        ROOT / "advbudget" / "rewards" / "openrlhf.py",
        ROOT / "advbudget" / "testing" / "openrlhf.py",
    ]
    assert private_names_outside(HOOKS, files) == []


def _ours(value: object) -> bool:
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    # a wrapper copies OpenRLHF's __module__ and __name__, not its code
    return isinstance(code, types.CodeType) and Path(code.co_filename).is_relative_to(PACKAGE)


def test_install_patches_exactly_the_recorded_targets() -> None:
    """Every function or method of an OpenRLHF module or class that is ours once the patch
    is installed is a record of ``PATCHED``, and none is left after ``uninstall``."""
    modules = sorted({hook.module for hook in PATCHED})

    def foreign() -> set[str]:
        found = set()
        for name, module in list(sys.modules.items()):
            if not name.startswith("openrlhf.") or module is None:
                continue
            owners = [("", module)] + [
                (f"{key}.", value)
                for key, value in vars(module).items()
                if inspect.isclass(value) and value.__module__ == name
            ]
            for prefix, owner in owners:
                found |= {
                    f"{name}:{prefix}{key}" for key, value in vars(owner).items() if _ours(value)
                }
        return found

    adapter.install()
    try:
        for name in modules:
            importlib.import_module(name)
        patched = foreign()
    finally:
        adapter.uninstall()
    assert patched == {hook.name for hook in PATCHED}
    assert foreign() == set()
