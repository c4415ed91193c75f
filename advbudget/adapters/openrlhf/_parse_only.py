"""OpenRLHF's own parser and argument checks, without its trainer modules (CPU, no vLLM).

``openrlhf/cli/train_ppo_ray.py`` builds its parser and checks the arguments in its
``if __name__ == "__main__":`` block, then calls ``train(args)``. Its module-level imports
pull in vLLM and flash-attn (``openrlhf.trainer.ray``), which do not install on a CPU
machine. :func:`run_main_block` executes only that block of the installed file, with
``train`` replaced by a function that raises :class:`ParsedOnly`: every flag goes
through OpenRLHF's real parser and checks, and nothing needs a GPU stack.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

TRAINER_MODULE = "openrlhf.cli.train_ppo_ray"


class ParsedOnly(Exception):
    """Raised to stop after parsing (``--advbudget.parse_only``); ``.parsed``: the args."""

    def __init__(self, args: Any) -> None:
        super().__init__("parse only")
        self.parsed = args


def main_block(source: str, filename: str) -> ast.Module:
    """The body of the module's top-level ``if __name__ == "__main__":`` as a module."""
    tree = ast.parse(source, filename)
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
            and len(node.test.comparators) == 1
            and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value == "__main__"
        ):
            return ast.Module(body=node.body, type_ignores=[])
    raise RuntimeError(
        f"{filename}: no `if __name__ == '__main__':` block; this OpenRLHF version builds its "
        "parser elsewhere (advbudget supports openrlhf 0.11)"
    )


def run_main_block() -> NoReturn:
    """Run the installed ``train_ppo_ray``'s main block on ``sys.argv``; raises
    :class:`ParsedOnly` with the checked, hierarchised args (or ``SystemExit`` from
    argparse and OpenRLHF's checks)."""
    spec = importlib.util.find_spec(TRAINER_MODULE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"No module named {TRAINER_MODULE!r}", name=TRAINER_MODULE)
    source = Path(spec.origin).read_text(encoding="utf-8")
    code = compile(main_block(source, spec.origin), spec.origin, "exec")

    def train(args: Any) -> NoReturn:
        raise ParsedOnly(args)

    # The names the block uses from the module's own imports; `train` is where it ends.
    namespace = {
        "__name__": "__main__",
        "__file__": spec.origin,
        "argparse": argparse,
        "os": os,
        "datetime": datetime,
        "train": train,
    }
    exec(code, namespace)
    raise RuntimeError(f"{TRAINER_MODULE}: the main block returned without calling train(args)")
