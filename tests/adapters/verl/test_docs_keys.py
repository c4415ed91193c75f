"""Every verl config key the docs name, in prose and tables as well as in commands, is in
verl 0.9.1's composed trainer config (or, for ``+algorithm.advbudget.*``, an option the
adapter reads)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("verl")

from advbudget.adapters import get_convention

ROOT = Path(__file__).resolve().parents[3]
PAGES = [
    ROOT / "README.md",
    ROOT / "examples" / "README.md",
    ROOT / "docs" / "guides" / "verl.md",
    ROOT / "docs" / "dead-groups.md",
    ROOT / "docs" / "reproducing.md",
]
# A dotted key under one of verl's config roots, not part of a module path (verl.trainer...).
KEY = re.compile(
    r"(?<![\w./-])(\+?)((?:algorithm|actor_rollout_ref|trainer|data|reward|critic|ray_kwargs)"
    r"(?:\.[a-z0-9_]+)+)"
)
# What the adapter reads under algorithm.advbudget besides each estimator's options (the
# staleness options to refuse them with the reason).
ADAPTER_OPTIONS = {
    "kappa_every", "solved_reward", "skipped_groups", "max_generation_batches",
    "tie_rtol", "tie_atol", "nan_policy", "group_weight", "max_staleness", "stale_rollouts",
}  # fmt: skip
# A file name that starts like a root (data.py) is not a key.
FILE_SUFFIXES = (".py", ".md", ".json", ".jsonl", ".yaml", ".parquet")


def _without_skyrl(text: str) -> str:
    """The page less SkyRL's parts, whose keys (``trainer.algorithm.advbudget.*``, ...)
    share verl's roots: its ``## SkyRL`` sections, its paragraphs and table rows (those that
    start with "SkyRL"), and its table columns (the SkyRL guide has its own test)."""
    kept, skipping = [], False
    for block in re.split(r"\n\s*\n", text):
        columns: set[int] = set()  # a table is one block
        if block.startswith("## "):
            skipping = block.startswith("## SkyRL")
        if skipping or block.startswith("SkyRL"):
            continue
        lines = []
        for line in block.splitlines():
            cells = line.split("|")
            if (
                line.startswith("|")
                and "SkyRL" in line
                and any("SkyRL" in cell and "`" not in cell for cell in cells[:2])
            ):
                continue  # a SkyRL row
            if line.startswith("| setting") or line.startswith("| baseline"):
                columns = {i for i, cell in enumerate(cells) if "SkyRL" in cell}
            if line.startswith("|") and columns:
                cells = [cell for i, cell in enumerate(cells) if i not in columns]
                line = "|".join(cells)
            lines.append(line)
        kept.append("\n".join(lines))
    return "\n\n".join(kept)


def _named_keys() -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for page in PAGES:
        for plus, key in KEY.findall(_without_skyrl(page.read_text(encoding="utf-8"))):
            if key.endswith(FILE_SUFFIXES):
                continue
            named.setdefault(plus + key, set()).add(str(page.relative_to(ROOT)))
    return named


def _exists(config: object, key: str) -> bool:
    node = config
    for part in key.split("."):
        try:
            node = node[part]  # type: ignore[index]
        except (KeyError, TypeError, AttributeError):
            try:
                node = getattr(node, part)
            except Exception:
                return False
    return True


def test_every_key_named_in_the_docs_is_real() -> None:
    from advbudget.adapters.verl.check_config import compose_config

    config = compose_config()
    ours = set(get_convention("verl").option_names()) | ADAPTER_OPTIONS
    named = _named_keys()
    assert len(named) > 10  # the pages were read
    wrong = {}
    for key, pages in named.items():
        bare = key.lstrip("+")
        if bare.startswith("algorithm.advbudget."):
            real = bare.removeprefix("algorithm.advbudget.") in ours
        elif key.startswith("+"):  # verl lets + add a key below an existing node
            real = _exists(config, bare.rsplit(".", 1)[0]) or _exists(config, bare.split(".")[0])
        else:
            real = _exists(config, bare)
        if not real:
            wrong[key] = sorted(pages)
    assert not wrong, f"keys verl 0.9.1's config does not have: {wrong}"
