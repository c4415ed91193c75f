"""What the data writers of the adapters share (``advbudget/adapters/<framework>/data.py``):
DAPO-Math-17K's routing fields, the split files, the chat messages, and atomic JSON-lines
and parquet writes.

The writers are library code (pyarrow only when a parquet file is written); the lab's
``advbudget data prepare`` (:mod:`advbudget.lab.data`) loads them and hands them its
problems. The frameworks are not dependencies of advbudget: the files are read back in the
tests with pyarrow and ``datasets``, and with the frameworks' own loaders in the adapter
environments.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advbudget._io import atomic_path

if TYPE_CHECKING:  # the lab's type; the writers only read its fields
    from advbudget.lab.data import Problem

Splits = Mapping[str, Sequence["Problem"]]

DAPO_DATA_SOURCE = "math_dapo"  # verl routes rewards on this: math_dapo -> DAPO's ±1 rule
DAPO_REWARD_STYLE = "rule-lighteval/MATH_v2"

_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")  # what datasets accepts as a split name


def write_jsonl(splits: Splits, output_dir: str | os.PathLike[str], answer: str) -> list[Path]:
    """``{"prompt": <chat>, <answer>: <ground truth>}`` per line, one file per split."""
    paths = []
    for _, problems, path in split_files(splits, output_dir, ".jsonl"):
        lines = (
            json.dumps({"prompt": chat_messages(p), answer: p.answer}, ensure_ascii=False) + "\n"
            for p in problems
        )
        with (
            atomic_path(path) as partial,
            partial.open("w", encoding="utf-8", newline="\n") as file,
        ):
            file.writelines(lines)
        paths.append(path)
    return paths


def chat_messages(problem: Problem) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in problem.prompt_messages]


def split_files(
    splits: Splits, output_dir: str | os.PathLike[str], suffix: str
) -> Iterator[tuple[str, Sequence[Problem], Path]]:
    """(split name, problems, file) for each non-empty split; checks names first."""
    if not isinstance(splits, Mapping):
        raise TypeError(
            f"splits: expected a mapping of split name to problems, e.g. {{'train': problems}}, "
            f"got {type(splits).__name__}"
        )
    for name in splits:
        if not isinstance(name, str) or not _SPLIT_NAME.fullmatch(name):
            raise ValueError(f"splits: split names must be letters, digits or _, got {name!r}")
    chosen = [(name, problems) for name, problems in splits.items() if len(problems)]
    if not chosen:
        raise ValueError(f"splits: nothing to write, every split is empty ({list(splits)})")
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for name, problems in chosen:
        yield name, problems, folder / f"{name}{suffix}"


def write_parquet(table: Any, path: Path) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    with atomic_path(path) as partial:  # an interrupted run leaves no half file
        pq.write_table(table, partial)
