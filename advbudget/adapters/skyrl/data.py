"""SkyRL's RL dataset: :func:`write_skyrl`, what ``advbudget data prepare --format skyrl``
writes.

Loaded by file by :mod:`advbudget.lab.data` (``advbudget data prepare`` runs without any
trainer): it imports nothing from its own package."""

from __future__ import annotations

import json
import os
from pathlib import Path

from advbudget._io import atomic_path
from advbudget.adapters._datafiles import Splits, chat_messages, split_files

#: The skyrl-gym environment the adapter registers (:mod:`advbudget.adapters.skyrl.rewards`).
ENV_CLASS = "advbudget_dapo"


def write_skyrl(splits: Splits, output_dir: str | os.PathLike[str]) -> list[Path]:
    """SkyRL's RL dataset: one JSON-lines file per split, a row per problem.

    Columns: ``prompt`` (the chat list SkyRL's ``PromptDataset`` templates), ``env_class``
    (``advbudget_dapo``: the environment that scores a response, one step, with DAPO's
    rule), ``reward_model`` ``{"ground_truth": ...}`` (what the environment reads, as
    SkyRL's own ``aime`` environment does) and ``data_source`` (SkyRL's per-dataset eval
    metrics group on it). SkyRL hands every column but ``prompt`` and ``env_class`` to the
    environment as its extras.

    Args:
        splits: problems by split name; empty splits are skipped.
        output_dir: the folder to write ``<split>.jsonl`` into (created if missing).

    Returns:
        The paths written, in the order of ``splits``.

    Examples:
        >>> import json, tempfile
        >>> from advbudget.lab.data import load_problems, sample_path, write_skyrl
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (path,) = write_skyrl({"train": problems}, folder)
        ...     first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        >>> path.name, first["env_class"], first["reward_model"], first["prompt"][0]["role"]
        ('train.jsonl', 'advbudget_dapo', {'ground_truth': '-11'}, 'user')
    """
    paths = []
    for _, problems, path in split_files(splits, output_dir, ".jsonl"):
        rows = (
            {
                "prompt": chat_messages(problem),
                "env_class": ENV_CLASS,
                "reward_model": {"ground_truth": problem.answer},
                "data_source": problem.data_source,
            }
            for problem in problems
        )
        with (
            atomic_path(path) as partial,
            partial.open("w", encoding="utf-8", newline="\n") as file,
        ):
            file.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        paths.append(path)
    return paths
