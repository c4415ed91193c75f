"""TRL's driver of the shared adapter suite (``tests/adapters/contract``): our estimators
through ``AdvBudgetGRPOTrainer`` (a tiny local model), options as its keyword arguments."""

from __future__ import annotations

import atexit
import functools
import inspect
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advbudget.adapters._options import AdapterOptions
from advbudget.adapters.trl._options import key_of
from advbudget.adapters.trl._options import read_options as read_kwargs

__all__ = ["advantages", "key_of", "read_options"]


def _kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """``AdvBudgetGRPOTrainer``'s keyword arguments of ``options``: an option that is one of
    them is given as it, an estimator's own option (``budget``) in ``advantage_options``."""
    from advbudget.adapters.trl import AdvBudgetGRPOTrainer

    keywords = inspect.signature(AdvBudgetGRPOTrainer.__init__).parameters
    kwargs = {name: value for name, value in options.items() if name in keywords}
    estimator = {name: value for name, value in options.items() if name not in keywords}
    return {**kwargs, "advantage_options": estimator} if estimator else kwargs


def read_options(options: Mapping[str, Any]) -> AdapterOptions:
    return read_kwargs(_kwargs(options))


def _no_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    return [0.0] * len(completions)


@functools.cache
def _run() -> tuple[Path, Any]:
    """A folder (removed at exit) with a tiny model, and a dataset."""
    import datasets

    from advbudget.lab.tiny import build_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="advbudget-trl-contract-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    build_tiny_model(folder / "model")
    return folder, datasets.Dataset.from_dict({"prompt": ["1 + 1 ="] * 8})


def advantages(
    name: str, rewards: Sequence[float], group_size: int, options: Mapping[str, Any]
) -> list[float]:
    """The advantages ``AdvBudgetGRPOTrainer(advantage_estimator=name, **options)`` gives
    TRL's gathered rewards of one reward function (its generation step's path)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    from advbudget.adapters.trl.testing import grpo_config

    folder, dataset = _run()
    trainer = AdvBudgetGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder / "model"),
        processing_class=AutoTokenizer.from_pretrained(folder / "model"),
        reward_funcs=_no_reward,
        args=grpo_config(folder / "out", num_generations=group_size),
        train_dataset=dataset,
        advantage_estimator=name,
        **_kwargs(options),
    )
    per_function = torch.tensor(rewards, dtype=torch.float32)[:, None]
    result = trainer.compute_group_advantages(per_function, group_size)
    return [float(v) for v in result.advantages]
