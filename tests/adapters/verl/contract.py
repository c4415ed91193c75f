"""verl's driver of the shared adapter suite (``tests/adapters/contract``): our estimators
through verl's own ``compute_advantage``, options as ``+algorithm.advbudget.<name>``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from advbudget.adapters._options import AdapterOptions
from advbudget.adapters.verl._options import key_of
from advbudget.adapters.verl._options import read_options as read_algorithm
from advbudget.adapters.verl.testing import algorithm_config

__all__ = ["advantages", "key_of", "read_options"]


def read_options(options: Mapping[str, Any]) -> AdapterOptions:
    return read_algorithm(algorithm_config("reward_budget", **options))


def advantages(
    name: str, rewards: Sequence[float], group_size: int, options: Mapping[str, Any]
) -> list[float]:
    import torch

    with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
        warnings.simplefilter("ignore")
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage

    count = len(rewards)
    token_rewards = torch.zeros(count, 3)
    token_rewards[:, -1] = torch.tensor(rewards)
    uids = np.array([f"g{row // group_size}" for row in range(count)], dtype=object)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": torch.ones(count, 3)},
        non_tensors={"uid": uids},
    )
    config = algorithm_config(name, **options)
    out = compute_advantage(data, adv_estimator=name, config=config)
    return [float(v) for v in out.batch["advantages"][:, -1]]
