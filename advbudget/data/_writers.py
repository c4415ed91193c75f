"""Writing problems in the formats verl, TRL, OpenRLHF and tunix read.

One file per split, named after it (``train.parquet``, ``val.parquet``, ...). The
frameworks are not dependencies of advbudget: these files are read back here with
pyarrow and ``datasets``, and checked with the frameworks' own loaders in the adapter
environments.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._io import atomic_path
from ._problems import DAPO_DATA_SOURCE, DAPO_REWARD_STYLE, Problem

Splits = Mapping[str, Sequence[Problem]]

_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")  # what datasets accepts as a split name


def write_verl(
    splits: Splits,
    output_dir: str | os.PathLike[str],
    *,
    data_source: str = DAPO_DATA_SOURCE,
) -> list[Path]:
    """verl's RL dataset: one parquet file per split, in DAPO-Math-17K's own schema.

    Columns: ``data_source`` (``"math_dapo"``: verl routes the reward on it, to DAPO's
    ±1 rule), ``prompt`` (the chat messages, the DAPO template as the user message),
    ``ability``, ``reward_model`` ``{"ground_truth", "style": "rule-lighteval/MATH_v2"}``
    and ``extra_info`` ``{"index", "raw_problem", "split"}``, all strings. verl's
    ``RLHFDataset`` reads it with ``data.train_files=<dir>/train.parquet
    data.val_files=<dir>/val.parquet`` (prompt key ``prompt``, the default).

    Args:
        splits: problems by split name, e.g. ``{"train": train, "val": val}``; empty
            splits are skipped.
        output_dir: the folder to write ``<split>.parquet`` into (created if missing).
        data_source: the ``data_source`` of every row.

    Returns:
        The paths written, in the order of ``splits``.

    Examples:
        >>> import tempfile
        >>> import pyarrow.parquet as pq
        >>> from advbudget.data import load_problems, sample_path, write_verl
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     paths = write_verl({"train": problems[:60], "val": problems[60:]}, folder)
        ...     table = pq.read_table(paths[1])
        >>> [path.name for path in paths], table.num_rows
        (['train.parquet', 'val.parquet'], 4)
        >>> table.column_names
        ['data_source', 'prompt', 'ability', 'reward_model', 'extra_info']
        >>> table.column("reward_model")[0].as_py()
        {'ground_truth': '-20', 'style': 'rule-lighteval/MATH_v2'}
    """
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    # DAPO's own file orders the message fields content, role; the same here.
    messages = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", messages),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [("index", pa.string()), ("raw_problem", pa.string()), ("split", pa.string())]
                ),
            ),
        ]
    )
    paths = []
    for name, problems, path in _targets(splits, output_dir, ".parquet"):
        rows = [
            {
                "data_source": data_source,
                "prompt": [{"content": m["content"], "role": m["role"]} for m in p.prompt_messages],
                "ability": p.ability,
                "reward_model": {"ground_truth": p.answer, "style": DAPO_REWARD_STYLE},
                "extra_info": {"index": p.index, "raw_problem": p.problem, "split": name},
            }
            for p in problems
        ]
        _write_parquet(pa.Table.from_pylist(rows, schema=schema), path)
        paths.append(path)
    return paths


def write_trl(splits: Splits, output_dir: str | os.PathLike[str]) -> list[Path]:
    """TRL's GRPO dataset: one parquet file per split with ``prompt`` and ``solution``.

    ``prompt`` is the conversational form TRL's ``GRPOTrainer`` applies the chat template
    to (``[{"role": "user", "content": <DAPO template>}]``); ``solution`` is the ground
    truth string, the column TRL's ``accuracy_reward`` and a custom reward function
    receive as the ``solution`` keyword. Parquet rather than JSON lines: the column types
    are stored, not inferred by the json loader. Load with
    ``datasets.load_dataset("parquet", data_files={"train": ..., "val": ...})``.

    Args:
        splits: problems by split name; empty splits are skipped.
        output_dir: the folder to write ``<split>.parquet`` into (created if missing).

    Returns:
        The paths written, in the order of ``splits``.

    Examples:
        >>> import tempfile
        >>> import datasets
        >>> from advbudget.data import load_problems, sample_path, write_trl
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (path,) = write_trl({"train": problems}, folder)
        ...     dataset = datasets.Dataset.from_parquet(str(path), cache_dir=folder)
        ...     row = dataset[0]
        >>> dataset.column_names, row["solution"], row["prompt"][0]["role"]
        (['prompt', 'solution'], '-11', 'user')
    """
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    messages = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    schema = pa.schema([("prompt", messages), ("solution", pa.string())])
    paths = []
    for _, problems, path in _targets(splits, output_dir, ".parquet"):
        rows = [{"prompt": _messages(p), "solution": p.answer} for p in problems]
        _write_parquet(pa.Table.from_pylist(rows, schema=schema), path)
        paths.append(path)
    return paths


def write_openrlhf(splits: Splits, output_dir: str | os.PathLike[str]) -> list[Path]:
    """OpenRLHF's prompt dataset: one JSON-lines file per split with ``prompt`` and ``label``.

    ``prompt`` is a chat list for ``--data.apply_chat_template``; ``label`` is the ground
    truth string, top-level as ``--data.label_key`` requires (DAPO nests it in
    ``reward_model``). Train with ``--data.prompt_dataset <dir>/train.jsonl
    --data.input_key prompt --data.label_key label --data.apply_chat_template``.

    Args:
        splits: problems by split name; empty splits are skipped.
        output_dir: the folder to write ``<split>.jsonl`` into (created if missing).

    Returns:
        The paths written, in the order of ``splits``.

    Examples:
        >>> import json, tempfile
        >>> from advbudget.data import load_problems, sample_path, write_openrlhf
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (path,) = write_openrlhf({"train": problems}, folder)
        ...     first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        >>> path.name, sorted(first), first["label"]
        ('train.jsonl', ['label', 'prompt'], '-11')
    """
    return _write_jsonl(splits, output_dir, "label")


def write_tunix(splits: Splits, output_dir: str | os.PathLike[str]) -> list[Path]:
    """tunix's RL dataset: one JSON-lines file per split with ``prompt`` and ``answer``.

    ``prompt`` is the chat list that tunix's CLI templates into its ``prompts`` field
    (``apply_chat_template_to_dataset=True`` with a ``data_module`` whose
    ``create_dataset`` returns these rows; examples/tunix_qwen3.py does the same with the
    model's tokenizer); ``answer`` is the ground truth string: tunix hands every column
    but ``prompts`` to the reward functions as keywords, and
    ``advbudget.rewards.tunix.dapo_accuracy`` reads ``answer`` (tunix's own GSM8K data
    names it so too).

    Args:
        splits: problems by split name; empty splits are skipped.
        output_dir: the folder to write ``<split>.jsonl`` into (created if missing).

    Returns:
        The paths written, in the order of ``splits``.

    Examples:
        >>> import json, tempfile
        >>> from advbudget.data import load_problems, sample_path, write_tunix
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (path,) = write_tunix({"train": problems}, folder)
        ...     first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        >>> path.name, sorted(first), first["answer"], first["prompt"][0]["role"]
        ('train.jsonl', ['answer', 'prompt'], '-11', 'user')
    """
    return _write_jsonl(splits, output_dir, "answer")


def _write_jsonl(splits: Splits, output_dir: str | os.PathLike[str], answer: str) -> list[Path]:
    """``{"prompt": <chat>, <answer>: <ground truth>}`` per line, one file per split."""
    paths = []
    for _, problems, path in _targets(splits, output_dir, ".jsonl"):
        lines = (
            json.dumps({"prompt": _messages(p), answer: p.answer}, ensure_ascii=False) + "\n"
            for p in problems
        )
        with (
            atomic_path(path) as partial,
            partial.open("w", encoding="utf-8", newline="\n") as file,
        ):
            file.writelines(lines)
        paths.append(path)
    return paths


WRITERS: dict[str, Callable[[Splits, str | os.PathLike[str]], list[Path]]] = {
    "verl": write_verl,
    "trl": write_trl,
    "openrlhf": write_openrlhf,
    "tunix": write_tunix,
}


def _messages(problem: Problem) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in problem.prompt_messages]


def _targets(
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


def _write_parquet(table: Any, path: Path) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    with atomic_path(path) as partial:  # an interrupted run leaves no half file
        pq.write_table(table, partial)
