"""Every OpenRLHF flag the docs name, in prose and tables as well as in commands, is one
that OpenRLHF 0.11.2's parser (or the adapter's ``--advbudget.*``) takes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openrlhf")

ROOT = Path(__file__).resolve().parents[3]
PAGES = [
    ROOT / "README.md",
    ROOT / "examples" / "README.md",
    ROOT / "examples" / "openrlhf_qwen3.sh",
    *sorted((ROOT / "docs").rglob("*.md")),
]
# OpenRLHF 0.11's flags are grouped: --algo.kl.init_coef, --actor.entropy_coef, ...
FLAG = re.compile(
    r"--(?:advbudget|algo|actor|ref|critic|reward|rollout|vllm|ds|train|data|ckpt|eval"
    r"|logger|model)\.[a-z0-9_]+(?:\.[a-z0-9_]+)*\*?"
)  # a trailing * names a family: --algo.advantage.is_correction_*


def _known_flags() -> set[str]:
    """Every flag in ``python -m advbudget.adapters.openrlhf --help``: OpenRLHF's parser,
    run for real, and the adapter's own."""
    run = subprocess.run(
        [sys.executable, "-m", "advbudget.adapters.openrlhf", "--help"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return set(FLAG.findall(run.stdout))


def _named_flags() -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for page in PAGES:
        for flag in FLAG.findall(page.read_text(encoding="utf-8")):
            named.setdefault(flag.rstrip("."), set()).add(str(page.relative_to(ROOT)))
    return named


def test_every_flag_named_in_the_docs_is_real() -> None:
    known = _known_flags()
    assert "--algo.kl.init_coef" in known  # the parser was read
    assert "--advbudget.skipped_groups" in known
    named = _named_flags()
    assert len(named) > 20  # the docs were read

    def real(flag: str) -> bool:
        if flag.endswith("*"):
            return any(k.startswith(flag[:-1]) for k in known)
        return flag in known

    unknown = {flag: sorted(pages) for flag, pages in named.items() if not real(flag)}
    assert not unknown, f"flags OpenRLHF 0.11.2 does not have: {unknown}"
