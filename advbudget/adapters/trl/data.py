"""TRL's GRPO dataset: :func:`write_trl`, what ``advbudget data prepare --format trl``
writes.

Loaded by file by :mod:`advbudget.lab.data` (``advbudget data prepare`` runs without any
trainer): it imports nothing from its own package."""

from __future__ import annotations

import os
from pathlib import Path

from advbudget.adapters._datafiles import Splits, chat_messages, split_files, write_parquet


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
        >>> from advbudget.lab.data import load_problems, sample_path, write_trl
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
    for _, problems, path in split_files(splits, output_dir, ".parquet"):
        rows = [{"prompt": chat_messages(p), "solution": p.answer} for p in problems]
        write_parquet(pa.Table.from_pylist(rows, schema=schema), path)
        paths.append(path)
    return paths
