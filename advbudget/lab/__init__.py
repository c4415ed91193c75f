"""The lab: the application and the experiments built on the library, installed with the
``lab`` extra (``pip install -e ".[lab]"``; ``data``, ``eval``, ``plot`` and ``lm`` include it).

- :mod:`advbudget.lab.cli`: the ``advbudget`` command (typer, rich);
- :mod:`advbudget.lab.sim`: the simulation lab (``advbudget simulate``);
- :mod:`advbudget.lab.data`: DAPO-Math-17K in, each trainer's files out
  (``advbudget data prepare``; the writers live with their adapters);
- :mod:`advbudget.lab.eval`: the paper's evaluation (``advbudget eval``, ``compare``);
- :mod:`advbudget.lab.lm`: the tiny-LM experiment (``advbudget experiment lm``);
- :mod:`advbudget.lab.tiny`: tiny Qwen3 models and tokenizers built locally, for smoke runs.

The lab is a client of the library: nothing outside ``advbudget.lab`` imports it, so
``pip install advbudget`` (numpy and array-api-compat only) runs every estimator, metric and
adapter.
"""

from __future__ import annotations

import sys

from ._hints import EXTRAS, missing_dependency


def main() -> None:
    """The ``advbudget`` console script: the lab's command line, or, without the lab's
    packages, one line saying which extra brings them (exit status 1)."""
    try:
        from .cli import main as run
    except ModuleNotFoundError as error:
        if EXTRAS.get((error.name or "").split(".")[0]) != "lab":
            raise
        sys.exit(f"advbudget: {missing_dependency(error, 'the command line')}")
    run()
