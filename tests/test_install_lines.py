"""Every install line users read works from a checkout: advbudget is installed with
``pip install -e ".[extras]"`` (it is not on an index), and every extra named exists."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# What users read: the README, the docs, the examples, and the hints the code prints.
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "examples").rglob("*")),
    *sorted((ROOT / "advbudget").rglob("*.py")),
    *sorted((ROOT / "docs" / "scripts").rglob("*.py")),
]
FROM_AN_INDEX = re.compile(r"""pip install[^\n`]*?["']?advbudget\[""")
FROM_A_CHECKOUT = re.compile(r"""pip install[^\n`]*?-e\s+["']?\.\[([\w,-]+)\]""")


def _texts() -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in SOURCES if p.is_file() and p.suffix != ".png"]


def test_no_install_line_assumes_a_published_package() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path, text in _texts()
        for match in FROM_AN_INDEX.finditer(text)
    ]
    assert not offenders, "install from a checkout (pip install -e '.[...]'):\n" + "\n".join(
        offenders
    )


def test_every_extra_named_exists() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        (path.relative_to(ROOT), extra)
        for path, text in _texts()
        for match in FROM_A_CHECKOUT.finditer(text)
        for extra in match.group(1).split(",")
    }
    assert len(named) >= 10, "the install lines were not found"
    unknown = sorted(f"{path}: {extra}" for path, extra in named if extra not in extras)
    assert not unknown, f"extras not in pyproject.toml: {unknown}"


def test_missing_dependency_hints_name_real_extras() -> None:
    from advbudget.lab._hints import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(EXTRAS.values()) <= set(extras)
