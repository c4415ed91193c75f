"""The checkpoint a verl run finished with: ``python -m advbudget.adapters.verl.checkpoints DIR``.

verl writes ``global_step_<N>/`` folders and records the last one it completed in
``latest_checkpointed_iteration.txt`` in the same folder. That file decides; a folder
without it (an older verl, a copied run) falls back to the largest N, compared as
numbers (``global_step_1000`` after ``global_step_950``), never as text.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
_STEP = re.compile(r"global_step_(\d+)")


def latest_checkpoint(folder: str | Path) -> Path:
    """The ``global_step_<N>`` folder verl last completed in ``folder``.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> for step in (50, 950, 1000):
        ...     (root / f"global_step_{step}").mkdir()
        >>> latest_checkpoint(root).name
        'global_step_1000'
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder: no such folder {str(folder)!r}")
    tracker = folder / TRACKER
    if tracker.is_file():
        text = tracker.read_text(encoding="utf-8").strip()
        if not text.isdigit():
            raise ValueError(f"{tracker}: expected a step number, got {text!r}")
        step = folder / f"global_step_{int(text)}"
        if not step.is_dir():
            raise FileNotFoundError(f"{tracker} names step {text}, but {step} does not exist")
        return step
    steps = [
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if path.is_dir() and (match := _STEP.fullmatch(path.name))
    ]
    if not steps:
        raise FileNotFoundError(f"checkpoint folder: no global_step_<N> folder in {folder}")
    return max(steps)[1]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m advbudget.adapters.verl.checkpoints CHECKPOINT_DIR", file=sys.stderr
        )
        return 2
    try:
        print(latest_checkpoint(args[0]))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
