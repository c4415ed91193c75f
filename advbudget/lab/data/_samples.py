"""The small sample files bundled with advbudget (written for it; see sample/README.md)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SAMPLES = {
    "dapo": "dapo_sample.jsonl",  # 64 rows in DAPO-Math-17K's schema, integer answers
    "eval": "eval_sample.jsonl",  # 12 rows with problem and answer, for evaluation smoke tests
}


def sample_path(name: str = "dapo") -> Path:
    """The path of a bundled sample file: ``"dapo"`` (training rows) or ``"eval"``.

    ``dapo``: 64 arithmetic and word problems with integer answers (some negative), one
    DAPO-Math-17K / verl row a line with the exact DAPO prompt template. ``eval``: 12
    other problems as ``{"problem", "answer"}``. Both also carry an ``expression`` the
    answer was computed from. They ship inside the package (also in the wheel).

    Examples:
        >>> from advbudget.lab.data import load_problems, sample_path
        >>> sample_path("eval").name
        'eval_sample.jsonl'
        >>> len(load_problems(sample_path("eval")))
        12
    """
    if name not in SAMPLES:
        raise ValueError(f"name: expected one of {sorted(SAMPLES)}, got {name!r}")
    # Files of an installed package are on disk (hatchling wheels are not zip-imported).
    return Path(str(resources.files("advbudget.lab.data") / "sample" / SAMPLES[name]))
