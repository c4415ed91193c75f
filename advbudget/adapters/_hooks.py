"""The record of a private framework symbol an adapter relies on, and its check.

Each ``advbudget/adapters/<framework>/_hooks.py`` lists, in a module-level ``HOOKS`` tuple,
every override, monkeypatch and private name advbudget uses in that framework, with the
signature it had in the version the adapter supports. :func:`hook_problems` resolves them
all (import, then attribute lookup) and compares the signatures, so a framework upgrade
fails in one test (``tests/adapters/<framework>/test_hooks.py``) with the list of what
moved. Nothing outside a ``_hooks.py`` touches a private framework name.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: How an adapter uses a symbol.
USES = ("wrap", "override", "call", "read", "write", "subclass", "register")


@dataclass(frozen=True)
class Hook:
    """One framework symbol advbudget relies on.

    Attributes:
        module: the module that defines it (``"verl.workers.engine_workers"``).
        qualname: the dotted path inside the module (``"TrainingWorker.train_batch"``).
        signature: ``str(inspect.signature(symbol))`` in the supported version (a tuple:
            one per supported version where they differ), or None where none applies (a
            class, a registry dict).
        mirrors: the framework's file:line it answers (``"verl/workers/engine_workers.py:312"``).
        use: how the adapter uses it (one of :data:`USES`).
        attribute: an instance attribute (``_metrics``) read or written by the adapter:
            ``qualname`` is then the method that sets it (``self._metrics = ...``).
    """

    module: str
    qualname: str
    signature: str | tuple[str, ...] | None
    mirrors: str
    use: str
    attribute: str = ""

    def __post_init__(self) -> None:
        if self.use not in USES:
            raise ValueError(f"use: expected one of {', '.join(USES)}, got {self.use!r}")

    @property
    def name(self) -> str:
        """``module:qualname`` (``.attribute``): how a problem names the symbol."""
        tail = f" (self.{self.attribute})" if self.attribute else ""
        return f"{self.module}:{self.qualname}{tail}"

    def resolve(self) -> Any:
        """The symbol itself: the module imported, then each part of ``qualname`` looked up
        (a class's own entry first, so a staticmethod or a patched method is seen as stored)."""
        symbol: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            symbol = getattr(symbol, part)
        return inspect.unwrap(symbol)


def hook_problems(hooks: Iterable[Hook]) -> list[str]:
    """One line per hook that does not resolve, whose signature differs from the recorded
    one, or whose method no longer sets its recorded instance attribute; [] when all hold."""
    problems = []
    for hook in hooks:
        try:
            symbol = hook.resolve()
        except (ImportError, AttributeError) as error:
            problems.append(f"{hook.name}: not found ({type(error).__name__}: {error})")
            continue
        if hook.signature is not None:
            recorded = (hook.signature,) if isinstance(hook.signature, str) else hook.signature
            try:
                found = _signature(symbol)
            except (TypeError, ValueError) as error:
                found = f"<no signature: {error}>"
            if found not in recorded:
                problems.append(
                    f"{hook.name}: signature changed: recorded {' or '.join(recorded)}, "
                    f"found {found}"
                )
        if hook.attribute and not _sets(symbol, hook.attribute):
            problems.append(f"{hook.name}: no longer sets self.{hook.attribute}")
    return problems


def _signature(symbol: Any) -> str:
    """``str(inspect.signature(symbol))`` without Ray's ``_ray_trace_ctx``: Ray sets a
    ``__signature__`` with it, in place, on the methods of a class it makes an actor
    (``ray/util/tracing/tracing_helper.py``), so a hook's signature would depend on
    whether a test made its class an actor first."""
    signature = inspect.signature(symbol)
    kept = [p for p in signature.parameters.values() if p.name != "_ray_trace_ctx"]
    return str(signature.replace(parameters=kept))


def _sets(function: Any, attribute: str) -> bool:
    """Whether ``function``'s source assigns ``self.<attribute>``."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    pattern = rf"\bself\.{re.escape(attribute)}\s*(?::[^=\n]+)?=(?!=)"
    return re.search(pattern, source) is not None


def private_names_outside(hooks: Iterable[Hook], files: Iterable[Any]) -> list[str]:
    """``file:line: name`` for each private name of ``hooks`` (a ``_``-prefixed part of a
    qualname or attribute, dunders aside) that appears in ``files`` (paths): the places
    that touch a framework's private API outside its ``_hooks.py``."""
    names = set()
    for hook in hooks:
        for part in [*hook.qualname.split("."), hook.attribute]:
            if part.startswith("_") and not part.startswith("__"):
                names.add(part)
    if not names:
        return []
    pattern = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    found = []
    for path in files:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                for match in pattern.finditer(line.split("#", 1)[0]):
                    found.append(f"{path}:{number}: {match.group(1)}")
    return found
