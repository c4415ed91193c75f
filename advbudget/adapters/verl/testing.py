"""verl batches for tests and benchmarks of the verl adapter: a real ``DataProto`` as verl's
trainer hands it to an advantage estimator, and its ``config.algorithm``.

verl, torch and omegaconf are imported only when a function runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["algorithm_config", "make_batch", "make_sessions", "observation_spans", "uuid4s"]


def uuid4s(count: int, rng: np.random.Generator) -> list[str]:
    """``count`` uuid4 strings drawn from ``rng`` (reproducible), as verl's
    ``str(uuid.uuid4())`` prompt uids: random from the first character, which matters to
    anything that sorts or hashes them (verl's ``grpo_vectorized`` runs ``np.unique``)."""
    return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(count)]


def observation_spans(mask: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> None:
    """Make ``mask`` ``[N, L]`` (left-aligned responses of ``lengths``) multi-turn, in
    place: a span of observation tokens (mask 0) between the first and the last token of
    every response of four tokens or more, as verl's agent loop leaves them.

    Examples:
        >>> mask = np.ones((1, 6), dtype=np.int64)
        >>> observation_spans(mask, np.array([6]), np.random.default_rng(0))
        >>> int(mask[0, 0]), int(mask[0, -1]), int(mask.sum()) < 6
        (1, 1, True)
    """
    for row in np.flatnonzero(lengths >= 4):
        start = rng.integers(1, lengths[row] - 2)
        mask[row, start : rng.integers(start + 1, lengths[row] - 1)] = 0


def make_batch(
    sizes: Sequence[int],
    *,
    length: int = 6,
    seed: int = 0,
    shuffle: bool = True,
    constant_groups: int = 0,
    empty_rows: int = 0,
    binary: bool = True,
) -> Any:
    """A ``DataProto`` as verl builds it: uuid4 uids in ``non_tensor_batch["uid"]``, each
    response's score on its last valid token of ``token_level_rewards`` ``[N, length]``
    (float32), ``response_mask`` ``[N, length]`` (int64, lengths uniform in 1..length).

    ``sizes`` are the group sizes (each group's responses adjacent, as verl's
    ``repeat(interleave=True)`` leaves them, unless ``shuffle``); scores are 0/1
    (``binary``) or standard normal; the first ``constant_groups`` groups get one score for
    all their responses; ``empty_rows`` responses get an all-zero response mask (their
    score stays in ``token_level_rewards``, as when verl scores an empty response).
    """
    import torch
    from verl import DataProto

    rng = np.random.default_rng(seed)
    n = int(sum(sizes))
    scores = rng.integers(0, 2, n).astype(np.float32) if binary else rng.normal(size=n)
    starts = np.cumsum([0, *sizes[:-1]])
    for g, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        if g < constant_groups:
            scores[start : start + size] = float(g % 2)
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    mask[rng.choice(n, empty_rows, replace=False)] = 0
    rewards = np.zeros((n, length), np.float32)
    rewards[np.arange(n), lengths - 1] = scores
    order = rng.permutation(n) if shuffle else np.arange(n)
    names = uuid4s(len(sizes), rng)
    uids = np.array([names[g] for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.from_numpy(rewards[order]),
            "response_mask": torch.from_numpy(mask[order]),
        },
        non_tensors={"uid": uids[order]},
    )


def make_sessions(
    outputs: Sequence[Sequence[int]],
    *,
    length: int = 6,
    seed: int = 0,
    shuffle: bool = True,
    copied: bool = True,
) -> tuple[Any, list[str]]:
    """A batch of verl's V1 multi-output step and its keys, as
    ``compute_advantage_for_multi_trajectories`` gets them: ``outputs[p][s]`` outputs
    (rows) for rollout (session) ``s`` of prompt ``p``, keyed ``{uid}_{s}_{index}``
    (``verl/trainer/ppo/v1/agent_loop_tq.py:193``), each row's reward on its last valid
    token. A session's reward (0/1) is on every output (``copied``: verl copies the final
    output's score to the others, ``agent_loop_tq.py:172-175``), or, ``copied=False``, on
    its final output only, the others scored 0/1 at random (a reward step that scores each
    output). Returns ``(DataProto, keys)``, rows in random order (``shuffle``).

    Examples:
        >>> data, keys = make_sessions([[2, 1], [1, 3]], shuffle=False)
        >>> len(data), [key[-4:] for key in keys]
        (7, ['_0_0', '_0_1', '_1_0', '_0_0', '_1_0', '_1_1', '_1_2'])
    """
    import torch
    from verl import DataProto

    rng = np.random.default_rng(seed)
    names = uuid4s(len(outputs), rng)
    keys, uids, rewards = [], [], []
    for p, sessions in enumerate(outputs):
        for s, count in enumerate(sessions):
            reward = float(rng.integers(0, 2))
            for i in range(count):
                keys.append(f"{names[p]}_{s}_{i}")
                uids.append(names[p])
                final = i == count - 1
                rewards.append(reward if copied or final else float(rng.integers(0, 2)))
    n = len(keys)
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    tokens = np.zeros((n, length), np.float32)
    tokens[np.arange(n), lengths - 1] = rewards
    order = rng.permutation(n) if shuffle else np.arange(n)
    data = DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.from_numpy(tokens[order]),
            "response_mask": torch.from_numpy(mask[order]),
        },
        non_tensors={"uid": np.array(uids, dtype=object)[order]},
    )
    return data, [keys[i] for i in order]


def algorithm_config(adv_estimator: str, **options: Any) -> Any:
    """A ``config.algorithm`` as verl passes it (a struct ``DictConfig``: unknown keys
    raise, as hydra hands it over), with ``options`` under ``advbudget`` (our
    ``+algorithm.advbudget.<option>``) and ``norm_adv_by_std_in_grpo`` (default True)."""
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
    OmegaConf.set_struct(config, True)
    return config
