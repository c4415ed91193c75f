"""An adapter's framework-free file, loaded by itself.

The core and ``advbudget data`` need a few declarations that live in an adapter's folder
(its convention row, its data writer) without running the adapter's package, which may
import its framework or, for tunix, refuse to import without it. Such a file imports
nothing from its own package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_ADAPTERS = Path(__file__).resolve().parent


def adapter_module(framework: str, name: str) -> ModuleType:
    """``advbudget.adapters.<framework>.<name>``, loaded from its file without its package;
    the adapter's own import of the module later finds this one in ``sys.modules``."""
    qualified = f"advbudget.adapters.{framework}.{name}"
    if qualified not in sys.modules:
        path = _ADAPTERS / framework / f"{name}.py"
        spec = importlib.util.spec_from_file_location(qualified, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise ImportError(f"{path}: no {name} module in the {framework} adapter")
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[qualified]
            raise
    return sys.modules[qualified]
