"""tunix's RL dataset: :func:`write_tunix`, what ``advbudget data prepare --format tunix``
writes.

Loaded by file by :mod:`advbudget.lab.data` (``advbudget data prepare`` runs without any
trainer): it imports nothing from its own package."""

from __future__ import annotations

import os
from pathlib import Path

from advbudget.adapters._datafiles import Splits, write_jsonl


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
        >>> from advbudget.lab.data import load_problems, sample_path, write_tunix
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (path,) = write_tunix({"train": problems}, folder)
        ...     first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        >>> path.name, sorted(first), first["answer"], first["prompt"][0]["role"]
        ('train.jsonl', ['answer', 'prompt'], '-11', 'user')
    """
    return write_jsonl(splits, output_dir, "answer")
