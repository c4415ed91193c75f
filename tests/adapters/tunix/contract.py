"""tunix's driver of the shared adapter suite (``tests/adapters/contract``): our estimators
through tunix's own advantage registry, called as tunix's ``GRPOLearner`` calls them, with
the options as keyword arguments (``configure(**options)``, the learner's keywords).

The adapter is imported when a function runs: the core environment (no tunix) collects
this file for its doctests."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from advbudget.adapters._options import AdapterOptions

__all__ = ["advantages", "key_of", "read_options"]


def key_of(name: str) -> str:
    from advbudget.adapters.tunix._options import key_of as tunix_key

    return tunix_key(name)


def read_options(options: Mapping[str, Any]) -> AdapterOptions:
    from advbudget.adapters.tunix._options import read_options as read_keywords

    return read_keywords(dict(options))


def advantages(
    name: str, rewards: Sequence[float], group_size: int, options: Mapping[str, Any]
) -> list[float]:
    with warnings.catch_warnings():  # tunix's stack warns at import (optional parts)
        warnings.simplefilter("ignore")
        from tunix.rl import function_registry

        import advbudget.adapters.tunix as adapter

    before = adapter.options()
    adapter.configure(**options)
    try:
        # grpo_learner.py: the estimator by name, on float64 numpy rewards
        estimator = function_registry.get_advantage_estimator(name)
        out = estimator(rewards=np.asarray(rewards, dtype=np.float64), num_generations=group_size)
    finally:
        adapter.configure(**before)
    return [float(v) for v in np.ravel(out)]
