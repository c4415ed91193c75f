"""SkyRL's driver of the shared adapter suite (``tests/adapters/contract``): our estimators
through SkyRL's own dispatch (``ppo_utils.compute_advantages_and_returns``), options as
``trainer.algorithm.advbudget.<name>`` on SkyRL's command line, parsed by the adapter's
config."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from advbudget.adapters._options import AdapterOptions

__all__ = ["advantages", "key_of", "read_options"]


def key_of(name: str) -> str:
    from advbudget.adapters.skyrl._options import key_of as skyrl_key

    return skyrl_key(name)


def algorithm(name: str, options: Mapping[str, Any]) -> Any:
    """SkyRL's ``trainer.algorithm`` of a command line choosing ``name`` with ``options``."""
    from advbudget.adapters.skyrl._trainer import parse_config

    argv = [f"trainer.algorithm.advantage_estimator={name}"]
    argv += [f"{key_of(key)}={json.dumps(value)}" for key, value in options.items()]
    return parse_config(argv).trainer.algorithm


def read_options(options: Mapping[str, Any]) -> AdapterOptions:
    from advbudget.adapters.skyrl._options import read_options as read_algorithm

    return read_algorithm(algorithm("reward_budget", options))


def advantages(
    name: str, rewards: Sequence[float], group_size: int, options: Mapping[str, Any]
) -> list[float]:
    import torch

    from advbudget.adapters.skyrl.testing import dispatch

    count = len(rewards)
    token_rewards = torch.zeros(count, 3)
    token_rewards[:, -1] = torch.tensor(rewards)
    uids = [f"{row // group_size}" for row in range(count)]
    out, _ = dispatch(name, token_rewards, torch.ones(count, 3), uids, algorithm(name, options))
    return [float(v) for v in out[:, -1]]
