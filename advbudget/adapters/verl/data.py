"""verl's RL dataset: :func:`write_verl`, what ``advbudget data prepare --format verl``
writes.

Loaded by file by :mod:`advbudget.lab.data` (``advbudget data prepare`` runs without any
trainer): it imports nothing from its own package."""

from __future__ import annotations

import os
from pathlib import Path

from advbudget.adapters._datafiles import (
    DAPO_DATA_SOURCE,
    DAPO_REWARD_STYLE,
    Splits,
    split_files,
    write_parquet,
)


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
        >>> from advbudget.lab.data import load_problems, sample_path, write_verl
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
    for name, problems, path in split_files(splits, output_dir, ".parquet"):
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
        write_parquet(pa.Table.from_pylist(rows, schema=schema), path)
        paths.append(path)
    return paths
