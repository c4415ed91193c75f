"""The evaluation sets of the paper, by hub id or from local JSONL files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._jsonl import json_lines


@dataclass(frozen=True)
class BenchmarkSource:
    """Where a benchmark lives on the hub, and which columns hold the problem and answer."""

    hub_id: str
    split: str
    size: int  # problems, to catch a wrong or truncated download


# Column names differ between uploads; the first one present is used.
PROBLEM_COLUMNS = ("problem", "question", "Problem", "Question")
ANSWER_COLUMNS = ("answer", "Answer", "final_answer", "label")

BENCHMARKS: dict[str, BenchmarkSource] = {
    "amc23": BenchmarkSource("math-ai/amc23", "test", 40),
    "aime24": BenchmarkSource("HuggingFaceH4/aime_2024", "train", 30),
    "aime25": BenchmarkSource("math-ai/aime25", "test", 30),
    "math500": BenchmarkSource("HuggingFaceH4/MATH-500", "test", 500),
}


@dataclass(frozen=True)
class EvalProblem:
    """One problem of a benchmark: its text and its ground-truth answer (a string)."""

    benchmark: str
    index: int
    problem: str
    answer: str


def load_benchmark(spec: str) -> list[EvalProblem]:
    """Load a benchmark by name (``amc23``, ``aime24``, ``aime25``, ``math500``) or path.

    A path names a JSONL file with one ``{"problem": ..., "answer": ...}`` object a line
    (or a ``.parquet``/``.json`` file with those columns); the benchmark is named after the
    file. Names load from the hub with ``datasets`` (needs network: GPU machines).

    Examples:
        >>> import json, tempfile, pathlib
        >>> from advbudget.lab.eval import load_benchmark
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny.jsonl"
        >>> _ = path.write_text(json.dumps({"problem": "1 + 1?", "answer": 2}) + "\\n")
        >>> load_benchmark(str(path))
        [EvalProblem(benchmark='tiny', index=0, problem='1 + 1?', answer='2')]
    """
    path = Path(spec)
    if path.suffix in (".jsonl", ".json", ".parquet") or path.exists():
        if not path.exists():
            raise FileNotFoundError(f"benchmark: no such file {spec!r}")
        return _problems(path.stem, _read_rows(path), str(path))
    source = BENCHMARKS.get(spec.lower())
    if source is None:
        raise ValueError(
            f"benchmark: expected one of {sorted(BENCHMARKS)} or a path to a .jsonl file, "
            f"got {spec!r}"
        )
    return _problems(spec.lower(), _hub_rows(source), source.hub_id, expected=source.size)


def _hub_rows(source: BenchmarkSource) -> list[dict[str, Any]]:
    import datasets

    splits = datasets.load_dataset(source.hub_id)
    split = source.split if source.split in splits else next(iter(splits))
    return [dict(row) for row in splits[split]]


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pandas as pd

        return list(pd.read_parquet(path).to_dict("records"))
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of objects")
        return rows
    return [row for _, row in read_jsonl(path, text)]


def read_jsonl(path: Path, text: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line; errors name the file and line
    (:func:`advbudget.lab._jsonl.json_lines`)."""
    return list(json_lines(path, text))


def _problems(
    name: str, rows: list[dict[str, Any]], where: str, expected: int | None = None
) -> list[EvalProblem]:
    if not rows:
        raise ValueError(f"{where}: no problems found")
    problem_key = next((key for key in PROBLEM_COLUMNS if key in rows[0]), None)
    answer_key = next((key for key in ANSWER_COLUMNS if key in rows[0]), None)
    if problem_key is None or answer_key is None:
        missing = "problem" if problem_key is None else "answer"
        raise ValueError(
            f"{where}: expected a {missing!r} column (one of "
            f"{PROBLEM_COLUMNS if problem_key is None else ANSWER_COLUMNS}), "
            f"got columns {sorted(rows[0])}"
        )
    problems = []
    for index, row in enumerate(rows):
        problem, answer = row.get(problem_key), _answer_text(row.get(answer_key))
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(f"{where}: row {index}: expected a non-empty problem text")
        if answer is None:
            raise ValueError(
                f"{where}: row {index}: expected a non-empty answer, got {row.get(answer_key)!r}"
            )
        problems.append(EvalProblem(name, index, problem, answer))
    if expected is not None and len(problems) != expected:
        raise ValueError(f"{where}: expected {expected} problems, got {len(problems)}")
    return problems


def _answer_text(answer: Any) -> str | None:
    """Answers as strings; integral floats (27.0, as some uploads store AMC) as integers."""
    if isinstance(answer, bool) or answer is None:
        return None
    if isinstance(answer, float):
        return str(int(answer)) if answer.is_integer() else repr(answer)
    text = str(answer).strip()
    return text or None
