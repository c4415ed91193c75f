"""advbudget_gdpo against verl 0.9.1's own gdpo, both through verl's ``compute_advantage``
on a ``DataProto`` as verl's (legacy) trainer builds it: the reward components in
``non_tensor_batch`` under the keys of ``algorithm.gdpo_reward_keys`` (what verl's reward
loop stores from the dict ``compute_score`` returns), ``prompts`` and ``attention_mask``
in the batch (verl's gdpo reads them to place each component on the last token)."""

from __future__ import annotations

import uuid
import warnings
from typing import Any

import numpy as np
import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402

with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
    warnings.simplefilter("ignore")
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

import advbudget.adapters.verl as adapter  # noqa: E402
from advbudget.adapters.verl.testing import observation_spans  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS
KEYS = ["format_reward", "accuracy_reward", "length_reward"]
PROMPT = 3


def make_batch(seed: int, *, dtype: torch.dtype = torch.float32, length: int = 8) -> Any:
    """Shuffled uuid groups of 1..9 (a group of one on even seeds), one all-zero response
    mask row, every third group constant in every component, the second in one; on odd
    seeds multi-turn responses: an observation span (response mask 0, attention 1) inside
    each response of four tokens or more."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 10, size=rng.integers(3, 8))
    if seed % 2 == 0:
        sizes[0] = 1
    names = [str(uuid.UUID(int=int(rng.integers(1, 2**62)))) for _ in sizes]
    uids = np.array([names[g] for g, s in enumerate(sizes) for _ in range(s)], dtype=object)
    n = len(uids)
    exact = [0.0, 0.25, 0.5, 1.0, 2.0, -1.0]
    components = rng.choice(exact, size=(n, len(KEYS)))
    components[:, 2] += rng.normal(size=n) * (rng.random(n) < 0.5)
    start = 0
    for g, size in enumerate(sizes):
        # Constant at values whose float32 mean is exact: verl's float32 mean of a
        # constant 0.1 is off by an ulp, which its (r - mean) / (0 + 1e-6) magnifies.
        if g % 3 == 2:
            components[start : start + size] = rng.choice(exact, size=len(KEYS))
        elif g % 3 == 1:
            components[start : start + size, 1] = rng.choice(exact)
        start += size
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    mask[rng.integers(n)] = 0
    score = components.sum(1)  # verl's "score": ignored by both gdpo
    token_rewards = np.zeros((n, length))
    token_rewards[np.arange(n), np.maximum(lengths - 1, 0)] = score
    order = rng.permutation(n)
    attention = np.concatenate([np.ones((n, PROMPT), np.int64), mask], axis=1)
    if seed % 2 == 1:
        observation_spans(mask, lengths, rng)
    non_tensors: dict[str, Any] = {"uid": uids[order]}
    for k, key in enumerate(KEYS):  # as verl's trainer stores reward_extra_info values
        non_tensors[key] = np.array(components[order, k].tolist())
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.tensor(token_rewards[order], dtype=dtype),
            "response_mask": torch.from_numpy(mask[order]),
            "prompts": torch.zeros((n, PROMPT), dtype=torch.int64),
            "attention_mask": torch.from_numpy(attention[order]),
        },
        non_tensors=non_tensors,
    )


def config(estimator: str, **algorithm: Any) -> Any:
    from omegaconf import OmegaConf

    values = {"adv_estimator": estimator, "norm_adv_by_std_in_grpo": True, **algorithm}
    values.setdefault("gdpo_reward_keys", KEYS)
    made = OmegaConf.create(values)
    OmegaConf.set_struct(made, True)
    return made


def run(estimator: str, batch: Any, **algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    copy = DataProto.from_dict(
        tensors={k: v.clone() for k, v in batch.batch.items()},
        non_tensors={k: v.copy() for k, v in batch.non_tensor_batch.items()},
    )
    out = compute_advantage(copy, adv_estimator=estimator, config=config(estimator, **algorithm))
    return out.batch["advantages"], out.batch["returns"]


@pytest.mark.parametrize("weights", [None, [1.0, 2.0, 0.5]])
@pytest.mark.parametrize("seed", range(4))
def test_parity_with_verls_gdpo(seed: int, weights: list[float] | None) -> None:
    batch = make_batch(seed)
    expected, expected_returns = run("gdpo", batch, gdpo_reward_weights=weights)
    got, returns = run("advbudget_gdpo", batch, gdpo_reward_weights=weights)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=3e-6)
    torch.testing.assert_close(returns, expected_returns, rtol=1e-5, atol=3e-6)
    assert expected.abs().max() > 0.5  # not a comparison of zeros


def test_float64_rewards_and_our_weights_option() -> None:
    # verl's gdpo computes in float32 whatever the dtype; ours in the rewards' dtype.
    batch = make_batch(5, dtype=torch.float64)
    expected, _ = run("gdpo", batch, gdpo_reward_weights=[0.5, 1.0, 3.0])
    got, _ = run("advbudget_gdpo", batch, advbudget={"weights": [0.5, 1.0, 3.0]})
    torch.testing.assert_close(got.float(), expected, rtol=1e-5, atol=3e-6)


def test_the_estimator_takes_non_tensor_batch_as_verls_gdpo_does() -> None:
    batch = make_batch(1)
    expected, _ = run("gdpo", batch)
    got, _ = adapter.estimator_function("advbudget_gdpo")(
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
        config=config("advbudget_gdpo"),
        non_tensor_batch=batch.non_tensor_batch,
    )
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=3e-6)


def test_missing_keys_are_one_line_errors() -> None:
    batch = make_batch(0)
    with pytest.raises(
        ValueError, match=r"^algorithm.gdpo_reward_keys: advbudget_gdpo needs the keys"
    ):
        run("advbudget_gdpo", batch, gdpo_reward_keys=None)
    # verl's v1 trainer scores a batch whose non_tensor_batch holds the uid only.
    del batch.non_tensor_batch["length_reward"]
    with pytest.raises(
        ValueError,
        match=(
            r"^non_tensor_batch: advbudget_gdpo expected the reward components of "
            r"algorithm.gdpo_reward_keys=\['format_reward', 'accuracy_reward', "
            r"'length_reward'\], got no 'length_reward' among \['uid', 'format_reward', "
            r"'accuracy_reward'\] \(compute_score must return a dict with it; .*use_v1=False\)$"
        ),
    ):
        run("advbudget_gdpo", batch)


def test_a_missing_component_value_follows_nan_policy() -> None:
    batch = make_batch(3)
    values = batch.non_tensor_batch["accuracy_reward"].astype(object)
    values[4] = None  # compute_score gave no accuracy for this response
    batch.non_tensor_batch["accuracy_reward"] = values
    with pytest.raises(ValueError, match=r"^rewards\['accuracy_reward'\]: expected finite"):
        run("advbudget_gdpo", batch)
    got, _ = run("advbudget_gdpo", batch, advbudget={"nan_policy": "omit"})
    assert torch.isfinite(got).all()
