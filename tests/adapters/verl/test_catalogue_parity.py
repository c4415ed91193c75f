"""Parity of the catalogue's verl estimators with verl's own functions (verl 0.9.1).

Each case calls the installed ``verl.trainer.ppo.core_algos`` function on token-level
rewards (the score on the last valid token), a response mask and shuffled uids, and
compares its per-token advantages with ours, computed by the core with verl's conventions
(``VERL.settings``) and broadcast with ``token_advantages``. Groups of 1..16, ties,
binary and graded rewards, float32 and float64.
"""

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
    from verl.trainer.ppo import core_algos

from advbudget import compute_advantages, token_advantages  # noqa: E402
from advbudget.core import get_convention  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS
VERL = get_convention("verl")
TOL = {torch.float32: 3e-5, torch.float64: 1e-10}


def _batch(seed: int, dtype: torch.dtype, *, min_size: int = 1, graded: bool, length: int = 9):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, 17, size=rng.integers(1, 9))
    names = [str(uuid.UUID(int=int(rng.integers(1, 2**62)))) for _ in sizes]  # verl's uuid4s
    uids = np.array([names[g] for g, s in enumerate(sizes) for _ in range(s)], dtype=object)
    n = len(uids)
    if graded:  # graded rewards with repeats (ties at the top too)
        scores = rng.choice([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0], size=n)
        scores = np.where(rng.random(n) < 0.3, rng.normal(size=n), scores)
    else:
        scores = rng.integers(0, 2, n).astype(np.float64)
    start = 0
    for g, size in enumerate(sizes):  # every third group constant
        if g % 3 == 2:
            scores[start : start + size] = scores[start]
        start += size
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.float64)
    token_rewards = np.zeros((n, length))
    token_rewards[np.arange(n), lengths - 1] = scores
    order = rng.permutation(n)
    return {
        "token_level_rewards": torch.tensor(token_rewards[order], dtype=dtype),
        "response_mask": torch.tensor(mask[order], dtype=dtype),
        "index": uids[order],
        "baselines": torch.tensor(rng.normal(size=n)[order], dtype=dtype),
    }


def ours(name: str, b: dict[str, Any], **overrides: Any) -> torch.Tensor:
    scores = b["token_level_rewards"].sum(-1)
    inputs: dict[str, Any] = {}
    if name in ("opo", "reinforce_plus_plus_baseline"):
        inputs["response_lengths"] = b["response_mask"].sum(-1)
    if name == "remax":
        inputs["reward_baselines"] = b["baselines"]
    settings = VERL.settings(name, overrides)
    res = compute_advantages(scores, name, group_ids=list(b["index"]), **settings, **inputs)
    return token_advantages(res.advantages, b["response_mask"])


def theirs(name: str, b: dict[str, Any], **kwargs: Any) -> torch.Tensor:
    fn = core_algos.get_adv_estimator_fn(name)
    common = {"token_level_rewards": b["token_level_rewards"], "response_mask": b["response_mask"]}
    if name == "remax":
        return fn(**common, reward_baselines=b["baselines"], config=None)[0]
    return fn(**common, index=b["index"], **kwargs)[0]


def check(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, tol: float | None = None) -> float:
    assert a.shape == b.shape
    diff = float((a.double() - b.double()).abs().max())
    scale = max(1.0, float(b.double().abs().max()))
    assert diff <= (tol or TOL[dtype]) * scale, f"max abs difference {diff}"
    return diff


DTYPES = [torch.float32, torch.float64]
SEEDS = range(6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("name", ["opo", "gpg", "reinforce_plus_plus_baseline", "remax"])
def test_parity(name: str, graded: bool, seed: int, dtype: torch.dtype) -> None:
    b = _batch(seed, dtype, graded=graded)
    check(ours(name, b), theirs(name, b, config=None), dtype, _tol(name, dtype))


def _tol(name: str, dtype: torch.dtype) -> float:
    # verl's gpg computes alpha = bsz / count_nonzero as a float32 tensor whatever the
    # rewards' dtype: float64 agrees to float32 rounding of alpha only.
    return 1e-7 if name == "gpg" and dtype == torch.float64 else TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_gpg_f_norm(seed: int, dtype: torch.dtype) -> None:
    b = _batch(seed, dtype, graded=True)
    mine = ours("gpg", b, f_norm=2.5)
    check(mine, theirs("gpg", b, f_norm=2.5, config=None), dtype, _tol("gpg", dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk(norm: bool, graded: bool, seed: int, dtype: torch.dtype) -> None:
    b = _batch(seed, dtype, min_size=2, graded=graded)  # verl raises on a group of one
    mine = ours("grpo_passk", b, norm_adv_by_std=norm)
    check(mine, theirs("grpo_passk", b, config={"norm_adv_by_std_in_grpo": norm}), dtype)


def test_grpo_passk_raises_on_a_group_of_one_where_we_skip() -> None:
    b = _batch(0, torch.float64, graded=True)
    b["index"][0] = "alone"
    with pytest.raises(ValueError, match="at least 2 samples"):
        theirs("grpo_passk", b, config={})
    alone = ours("grpo_passk", b)
    assert float(alone[0].abs().sum()) == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("graded", [False, True])
def test_rloo_and_rloo_vectorized(graded: bool, seed: int, dtype: torch.dtype) -> None:
    b = _batch(seed, dtype, graded=graded)
    # verl's rloo keeps a lone rollout's raw reward (singletons="raw", the convention) ...
    check(ours("rloo", b), theirs("rloo", b, config=None), dtype)
    # ... rloo_vectorized gives it 0 (singletons="skip").
    check(ours("rloo", b, singletons="skip"), theirs("rloo_vectorized", b, config=None), dtype)


def test_the_two_rloos_differ_only_on_groups_of_one() -> None:
    b = _batch(3, torch.float64, graded=True)
    b["index"][0] = "alone"
    loop, vectorized = theirs("rloo", b, config=None), theirs("rloo_vectorized", b, config=None)
    assert float((loop[1:] - vectorized[1:]).abs().max()) < 1e-12
    assert float(vectorized[0].abs().max()) == 0.0
    assert float(loop[0].abs().max()) > 0.0 or float(b["token_level_rewards"][0].sum()) == 0.0
