"""The core's import map: no cycle, nothing above it. Every import of every module under
``advbudget/core`` is read (module level and inside functions, where a lazy import would
hide a cycle), resolved to the module it names, and checked."""

from __future__ import annotations

import ast
from pathlib import Path

import advbudget

PACKAGE = Path(advbudget.__file__).parent
CORE = "advbudget.core"
# What the core may import from the rest of the library (its argument checks).
BELOW_THE_CORE = {"advbudget.checks"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The advbudget modules ``path`` imports at run time, anywhere in it (``from . import
    x`` counts as the submodule ``x`` where one exists; ``if TYPE_CHECKING:`` blocks are
    for the type checker only)."""
    name = _module_name(path)
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
    return {m for m in found if m == "advbudget" or m.startswith("advbudget.")}


def _path_of(module: str) -> Path | None:
    base = PACKAGE.parent / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _core_graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in sorted((PACKAGE / "core").rglob("*.py"))}


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
