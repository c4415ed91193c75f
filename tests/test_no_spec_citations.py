"""User-facing text cites the docs or the paper, never SPEC.md (a file users never see)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_FACING = ["README.md", "docs", "examples", "advbudget"]
CITATION = re.compile(r"\bSPEC\b(?:\s*(?:section|§)|\.md|\))")


def test_no_spec_citations():
    found = []
    for entry in USER_FACING:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        for file in files:
            if file.suffix not in {".py", ".md", ".sh", ".yaml"} or not file.is_file():
                continue
            for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
                if CITATION.search(line):
                    found.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "cite the docs page or the paper instead:\n" + "\n".join(found)
