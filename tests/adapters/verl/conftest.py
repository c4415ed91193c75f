"""Shared pieces of the verl adapter tests: real verl ``DataProto`` batches."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

# verl 0.9.1 warns at import about optional engines (megatron, mindspeed) and deprecations.
VERL_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)


def make_batch(
    sizes: list[int],
    *,
    length: int = 6,
    seed: int = 0,
    shuffle: bool = True,
    constant_groups: int = 0,
    empty_rows: int = 0,
    binary: bool = True,
) -> Any:
    """A ``DataProto`` as verl builds it: uuid4 uids, the reward on the last valid token.

    ``sizes`` are the group sizes; the first ``constant_groups`` groups get one reward for
    all their responses; ``empty_rows`` responses get an all-zero response mask (their
    reward stays in ``token_level_rewards``, as when verl scores an empty response).
    """
    import torch
    from verl import DataProto

    rng = np.random.default_rng(seed)
    uids = np.array(
        [u for g, size in enumerate(sizes) for u in [str(uuid.UUID(int=g + 1))] * size],
        dtype=object,
    )
    n = len(uids)
    scores = rng.integers(0, 2, n).astype(np.float32) if binary else rng.normal(size=n)
    start = 0
    for g, size in enumerate(sizes):
        if g < constant_groups:
            scores[start : start + size] = float(g % 2)
        start += size
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    mask[rng.choice(n, empty_rows, replace=False)] = 0
    rewards = np.zeros((n, length), np.float32)
    rewards[np.arange(n), lengths - 1] = scores
    order = rng.permutation(n) if shuffle else np.arange(n)
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.from_numpy(rewards[order]),
            "response_mask": torch.from_numpy(mask[order]),
        },
        non_tensors={"uid": uids[order]},
    )


def algorithm_config(adv_estimator: str, **options: Any) -> Any:
    """A ``config.algorithm`` as verl passes it (``DictConfig``), with ``advbudget`` options."""
    from omegaconf import OmegaConf

    norm = options.pop("norm_adv_by_std_in_grpo", True)
    config = OmegaConf.create(
        {
            "adv_estimator": adv_estimator,
            "norm_adv_by_std_in_grpo": norm,
            "gamma": 1.0,
            "lam": 1.0,
            **({"advbudget": options} if options else {}),
        }
    )
    OmegaConf.set_struct(config, True)  # as hydra hands it over: unknown keys raise
    return config


# cpu_loop/ is the CPU harness the loop tests run verl with (PYTHONPATH of a subprocess);
# importing it here would register a platform and patch torch in the test process.
collect_ignore = ["cpu_loop"]
