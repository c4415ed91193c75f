"""Shared pieces of the TRL adapter tests: a tiny Qwen3 model, a dataset, a trainer factory."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from advbudget.adapters.trl.testing import grpo_config

PROMPTS = 8
# trl 1.16 still calls transformers 5.24's deprecated gradient-checkpointing aliases.
TRL_WARNINGS = pytest.mark.filterwarnings(
    "ignore:.*is deprecated and will be removed in v6:FutureWarning"
)  # rows of the bundled DAPO sample used


def length_parity_reward(completion_ids: Sequence[Sequence[int]], **kwargs: Any) -> list[float]:
    """A reward that varies inside groups even for a random model: token-id parity."""
    return [float(sum(ids) % 2) for ids in completion_ids]


def mixed_reward(
    completion_ids: Sequence[Sequence[int]], kind: Sequence[str], **kwargs: Any
) -> list[float | None]:
    """``kind`` "const": 1.0 for every completion (a group with no gap); "none": None
    (unscorable); else the parity reward."""
    rewards: list[float | None] = []
    for ids, k in zip(completion_ids, kind, strict=True):
        rewards.append(1.0 if k == "const" else None if k == "none" else float(sum(ids) % 2))
    return rewards


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from advbudget.lab.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def train_dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import datasets

    from advbudget.lab.data import load_problems, sample_path, write_trl

    folder = tmp_path_factory.mktemp("trl-data")
    (path,) = write_trl({"train": load_problems(sample_path("dapo"))[:PROMPTS]}, folder)
    dataset = datasets.Dataset.from_parquet(str(path), cache_dir=str(folder))
    kinds = ["const", "mixed", "mixed", "none", "mixed", "const", "mixed", "mixed"]
    return dataset.add_column("kind", kinds[: len(dataset)])


@pytest.fixture
def make_trainer(tiny_model: Path, train_dataset: Any, tmp_path: Path) -> Callable[..., Any]:
    """``make_trainer(cls=None, reward_funcs=..., config=..., **trainer_kwargs)``."""

    def make(
        cls: Any = None,
        *,
        reward_funcs: Any = length_parity_reward,
        config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOTrainer

        trainer_cls = cls or GRPOTrainer
        kwargs.setdefault("train_dataset", train_dataset)
        return trainer_cls(
            model=AutoModelForCausalLM.from_pretrained(tiny_model),
            processing_class=AutoTokenizer.from_pretrained(tiny_model),
            reward_funcs=reward_funcs,
            args=grpo_config(tmp_path / "out", **(config or {})),
            **kwargs,
        )

    return make


def finite(values: Sequence[Any]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]
