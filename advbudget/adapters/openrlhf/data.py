"""OpenRLHF's prompt dataset: :func:`write_openrlhf`, what ``advbudget data prepare
--format openrlhf`` writes.

Loaded by file by :mod:`advbudget.lab.data` (``advbudget data prepare`` runs without any
trainer): it imports nothing from its own package."""

from __future__ import annotations

import os
from pathlib import Path

from advbudget.adapters._datafiles import Splits, write_jsonl


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
        >>> from advbudget.lab.data import load_problems, sample_path, write_openrlhf
        >>> problems = load_problems(sample_path("dapo"))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (path,) = write_openrlhf({"train": problems}, folder)
        ...     first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        >>> path.name, sorted(first), first["label"]
        ('train.jsonl', ['label', 'prompt'], '-11')
    """
    return write_jsonl(splits, output_dir, "label")
