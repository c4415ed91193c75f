"""Every adapter folder has the same files for the same roles (README, "Layout"), and the
files the core and ``advbudget data`` load by path stay loadable without the trainer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import advbudget
from advbudget.adapters import CONVENTIONS, get_convention
from advbudget.lab.data._writers import WRITERS

ADAPTERS = Path(advbudget.__file__).resolve().parent / "adapters"
ROLES = ("__init__.py", "_version.py", "_convention.py", "_options.py", "_hooks.py")
ROLES += ("rewards.py", "data.py")
THIN_PATH = dict.fromkeys(("verl", "openrlhf", "tunix", "skyrl"), "_estimators.py")
THIN_PATH["trl"] = "_trainer.py"
FRAMEWORKS = tuple(CONVENTIONS)
BY_PATH = ("_convention.py", "data.py")  # loaded without their package


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_folder_has_every_role(framework: str) -> None:
    folder = ADAPTERS / framework
    missing = [name for name in (*ROLES, THIN_PATH[framework]) if not (folder / name).is_file()]
    assert missing == [], f"{folder}: missing {missing}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", BY_PATH)
def test_files_loaded_by_path_import_nothing_of_their_package(framework: str, name: str) -> None:
    """A relative import would run the adapter's package (tunix's needs tunix)."""
    tree = ast.parse((ADAPTERS / framework / name).read_text(encoding="utf-8"))
    relative = [
        node.lineno for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
    ]
    own = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith(f"advbudget.adapters.{framework}")
    ]
    assert relative + own == [], (
        f"{framework}/{name}: imports its package at lines {relative + own}"
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_core_environment_reads_each_row_and_writer(framework: str) -> None:
    assert get_convention(framework).framework == framework
    assert WRITERS[framework].__module__ == f"advbudget.adapters.{framework}.data"
