"""The import map: the core at the bottom (no cycle, nothing above it, no framework), the
library on it, the lab on top. Every import of every module is read (module level and
inside functions, where a lazy import would hide an edge), resolved to the module it names,
and checked; ``if TYPE_CHECKING:`` blocks are for the type checker only."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import tomllib

import advbudget
from advbudget.lab._hints import EXTRAS

PACKAGE = Path(advbudget.__file__).parent
CORE = "advbudget.core"
LAB = "advbudget.lab"
# What the core may import from the rest of the library (its argument checks).
BELOW_THE_CORE = {"advbudget.checks"}
# The packages outside the standard library that the core may import: its dependencies.
CORE_DEPENDENCIES = {"numpy", "array_api_compat"}
# The lab extra's packages: the library (everything outside advbudget.lab) imports none.
LAB_PACKAGES = {module for module, extra in EXTRAS.items() if extra == "lab"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, everything: bool = False, name: str | None = None) -> set[str]:
    """The advbudget modules ``path`` imports at run time, anywhere in it (``from . import
    x`` counts as the submodule ``x`` where one exists); with ``everything``, every module
    it imports, advbudget's or not. ``name``: the module's name, for a file read as one."""
    name = name or _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            submodules = {f"{target}.{a.name}" for a in node.names}
            submodules = {m for m in submodules if _path_of(m) is not None}
            found.update(submodules or {target})
    if everything:
        return found
    return {m for m in found if m == "advbudget" or m.startswith("advbudget.")}


def _path_of(module: str) -> Path | None:
    base = PACKAGE.parent / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _core_graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in sorted((PACKAGE / "core").rglob("*.py"))}


def _library_paths() -> list[Path]:
    lab = PACKAGE / "lab"
    return [p for p in sorted(PACKAGE.rglob("*.py")) if lab not in p.parents]


def _top_level(module: str) -> str:
    return module.split(".")[0]


def test_the_core_imports_nothing_above_it() -> None:
    upward = {
        module: sorted(m for m in imported if not m.startswith(CORE) and m not in BELOW_THE_CORE)
        for module, imported in _core_graph().items()
    }
    upward = {module: up for module, up in upward.items() if up}
    assert not upward, upward


def test_the_core_has_no_import_cycle() -> None:
    """A module that imports, even lazily, a module that imports it back is a cycle; a
    module naming its own package (``from . import x``, resolved above to ``x``) is not."""
    graph = {
        module: {m for m in imported if m.startswith(CORE) and not module.startswith(m + ".")}
        for module, imported in _core_graph().items()
    }
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            if imported in path:
                cycle = [*path[path.index(imported) :], imported]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])


def test_the_core_imports_no_framework() -> None:
    """Its dependencies and the standard library only: a framework's conventions live in
    its adapter (advbudget/adapters/<framework>/_convention.py)."""
    outside = {
        _module_name(path): sorted(
            m
            for m in _imports(path, everything=True)
            if _top_level(m) not in {"advbudget", *CORE_DEPENDENCIES, *sys.stdlib_module_names}
        )
        for path in sorted((PACKAGE / "core").rglob("*.py"))
    }
    outside = {module: names for module, names in outside.items() if names}
    assert not outside, outside


def test_the_library_never_imports_the_lab() -> None:
    """``pip install advbudget`` (no extras) must run every module outside advbudget.lab."""
    found = {
        _module_name(path): sorted(
            m
            for m in _imports(path, everything=True)
            if m == LAB or m.startswith(LAB + ".") or _top_level(m) in LAB_PACKAGES
        )
        for path in _library_paths()
    }
    found = {module: names for module, names in found.items() if names}
    assert not found, found


def test_the_hints_know_the_lab_extras_packages() -> None:
    # What the check above and the console script's hint take for the lab's packages.
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    required = project["optional-dependencies"]["lab"]
    assert {re.split(r"[<>=!~ \[]", r)[0] for r in required} == LAB_PACKAGES


def test_the_map_sees_an_edge_into_the_lab(tmp_path: Path) -> None:
    # The check above reads lazy imports too; a TYPE_CHECKING import is not an edge.
    module = tmp_path / "module.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from advbudget.lab.data import Problem\n"
        "def f():\n    import typer\n    from advbudget.lab import sim\n"
    )
    imports = _imports(module, everything=True, name="advbudget.adapters.example")
    assert "typer" in imports
    assert "advbudget.lab.sim" in imports
    assert "advbudget.lab.data" not in imports
