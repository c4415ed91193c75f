"""Parity of every verl mirror (the verl row's ``own_names``) with verl 0.9.1's own
estimator, both called through verl's ``ray_trainer.compute_advantage`` on a real
``DataProto``: advantages and returns on every token, and the same kind of error where
verl raises.

Batches: shuffled uuid uids, groups of 1..16 (every other seed has a group of one and an
all-zero response mask row), every third group constant (ties), binary and graded rewards,
float32 and float64. A mirror added to the row without a case here fails
``test_every_mirror_has_a_case`` (and its parity test); mirrors of reward components
(gdpo) have their own batches, in the module ``COMPONENTS`` names.
"""

from __future__ import annotations

import importlib
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402

with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
    warnings.simplefilter("ignore")
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage

import advbudget.adapters.verl  # noqa: E402, F401  (registers the advbudget_* names)
from advbudget import compute_advantages, token_advantages  # noqa: E402
from advbudget.adapters import get_convention  # noqa: E402
from advbudget.adapters.verl.testing import algorithm_config, observation_spans  # noqa: E402
from advbudget.core import get_spec  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS
VERL = get_convention("verl")
TOL = {torch.float32: 3e-5, torch.float64: 1e-10}


@dataclass(frozen=True)
class Case:
    """verl's estimator ``verl_name`` (with ``norm_adv_by_std_in_grpo=norm``) against our
    ``ours`` (default ``advbudget_<core name>``) under the same config."""

    verl_name: str
    norm: bool = True
    ours: str = ""


CASES: dict[str, tuple[Case, ...]] = {
    "grpo": (Case("grpo"),),
    # verl's Dr.GRPO switch reaches ours by either name
    "dr": (Case("grpo", norm=False), Case("grpo", norm=False, ours="advbudget_grpo")),
    "rloo": (Case("rloo"),),
    "opo": (Case("opo"),),
    "grpo_passk": (Case("grpo_passk"), Case("grpo_passk", norm=False)),
    "gpg": (Case("gpg"),),
    "reinforce_plus_plus_baseline": (Case("reinforce_plus_plus_baseline"),),
    "remax": (Case("remax"),),
    "reinforce": (Case("reinforce_plus_plus"),),
}


# mirrors of reward components -> (module, parity test): their batches carry the
# components in non_tensor_batch
COMPONENTS = {"gdpo": ("test_gdpo", "test_parity_with_verls_gdpo")}


def test_every_mirror_has_a_case() -> None:
    assert sorted([*CASES, *COMPONENTS]) == sorted(VERL.own_names)
    for core, (module, test) in COMPONENTS.items():
        assert get_spec(core).components
        assert callable(getattr(importlib.import_module(f"{__package__}.{module}"), test))
    for core, cases in CASES.items():
        for case in cases:  # the row's prose starts with verl's name
            assert VERL.own_names[core].split()[0] == case.verl_name


def make_batch(
    seed: int,
    dtype: torch.dtype,
    *,
    graded: bool,
    baselines: bool = False,
    length: int = 9,
    dense: bool = False,
) -> Any:
    """A ``DataProto`` as verl's trainer builds it; even seeds have a group of one and a
    response with an all-zero mask (its reward still in ``token_level_rewards``);
    ``reward_baselines`` as verl's trainer adds them for its remax. ``dense``: a multi-turn
    batch with a KL penalty in the reward (``algorithm.use_kl_in_reward``): observation
    spans (mask 0) inside most responses, and a reward on every response token besides
    the score on the last."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1 if seed % 2 == 0 else 2, 17, size=rng.integers(2, 9))
    if seed % 2 == 0:
        sizes[rng.integers(len(sizes))] = 1
    names = [str(uuid.UUID(int=int(rng.integers(1, 2**62)))) for _ in sizes]  # verl's uuid4s
    uids = np.array([names[g] for g, s in enumerate(sizes) for _ in range(s)], dtype=object)
    n = len(uids)
    if graded:  # repeated values (ties at the top too) and continuous ones
        scores = rng.choice([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0], size=n)
        scores = np.where(rng.random(n) < 0.3, rng.normal(size=n), scores)
    else:
        scores = rng.integers(0, 2, n).astype(np.float64)
    unique_best = False
    for g, (start, size) in enumerate(zip(np.cumsum([0, *sizes[:-1]]), sizes, strict=True)):
        group = slice(start, start + size)
        if g % 3 == 2:  # constant, at a value whose float32 mean is exact (see below)
            scores[group] = rng.choice([0.0, 1.0] if not graded else [-1.0, 0.5, 2.0])
        elif size > 1 and not unique_best:  # one best rollout: pass@k's gain is not 0
            if graded:
                scores[start] = scores[group].max() + 1.0
            else:
                scores[group], scores[start] = 0.0, 1.0
            unique_best = True
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    if seed % 2 == 0:
        mask[rng.integers(n)] = 0
    token_rewards = np.zeros((n, length))
    if dense:
        observation_spans(mask, lengths, rng)
        token_rewards = -0.05 * rng.exponential(size=(n, length)) * mask  # -beta * KL
    token_rewards[np.arange(n), lengths - 1] += scores
    order = rng.permutation(n)
    tensors = {
        "token_level_rewards": torch.tensor(token_rewards[order], dtype=dtype),
        "response_mask": torch.from_numpy(mask[order]),
    }
    if baselines:
        tensors["reward_baselines"] = torch.tensor(rng.normal(size=n)[order], dtype=dtype)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids[order]})


def run(
    estimator: str, batch: Any, norm: bool, gamma: float = 1.0, **options: Any
) -> tuple[Any, BaseException | None]:
    """``compute_advantage``'s (advantages, returns), or the error it raised."""
    copy = DataProto.from_dict(
        tensors={k: v.clone() for k, v in batch.batch.items()},
        non_tensors={k: v.copy() for k, v in batch.non_tensor_batch.items()},
    )
    config = algorithm_config(estimator, norm_adv_by_std_in_grpo=norm, **options)
    config.gamma = gamma
    try:
        out = compute_advantage(
            copy, adv_estimator=estimator, norm_adv_by_std_in_grpo=norm, config=config
        )
    except Exception as error:  # compared with the other side's below
        return None, error
    return (out.batch["advantages"], out.batch["returns"]), None


def check(mine: torch.Tensor, theirs: torch.Tensor, tol: float) -> None:
    assert mine.shape == theirs.shape
    assert mine.dtype == theirs.dtype
    diff = float((mine.double() - theirs.double()).abs().max())
    scale = max(1.0, float(theirs.double().abs().max()))
    assert diff <= tol * scale, f"max abs difference {diff}"


# verl rounds to float32 inside whatever the rewards' dtype: gpg's alpha = bsz /
# count_nonzero, grpo's std of a group of one (1 + eps), the token counts of the masked
# whitening (an int mask + 1e-8). float64 agrees to float32 rounding of these only.
FLOAT32_INSIDE = ("gpg", "grpo", "reinforce_plus_plus_baseline", "reinforce")


def _tol(core: str, dtype: torch.dtype) -> float:
    return 1e-7 if core in FLOAT32_INSIDE and dtype == torch.float64 else TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dense", [False, True], ids=["outcome", "dense-multiturn"])
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("core", sorted(CASES))
def test_mirror(core: str, graded: bool, dense: bool, seed: int, dtype: torch.dtype) -> None:
    batch = make_batch(seed, dtype, graded=graded, baselines=core == "remax", dense=dense)
    # verl's reinforce_plus_plus discounts by algorithm.gamma (the others ignore it)
    gamma = 0.9 if dense else 1.0
    for case in CASES[core]:
        theirs, their_error = run(case.verl_name, batch, case.norm, gamma)
        ours, our_error = run(case.ours or f"advbudget_{core}", batch, case.norm, gamma)
        if their_error is not None:  # the same kind of error, naming the group size
            assert type(our_error) is type(their_error), (their_error, our_error)
            assert "1 rollout" in str(our_error)
            continue
        assert our_error is None, our_error
        assert theirs is not None
        assert ours is not None
        check(ours[0], theirs[0], _tol(core, dtype))  # advantages
        check(ours[1], theirs[1], _tol(core, dtype))  # returns
        assert float(theirs[0].abs().max()) > 0  # not a comparison of zeros


def test_an_inexact_constant_group_is_a_tie_for_us_noise_for_verl() -> None:
    """The one difference on purpose (docs/guides/verl.md): eight float32 rewards of -0.6779
    have a float32 mean that is not exactly -0.6779, so verl's grpo divides rounding
    noise by std + eps (about -0.056 for every rollout); the core sees the tie: 0."""
    rewards = torch.zeros(8, 3)
    rewards[:, -1] = torch.tensor(-0.6778861880302429)
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(8, 3, dtype=int)},
        non_tensors={"uid": np.array(["a"] * 8, dtype=object)},
    )
    (theirs, _), _ = run("grpo", batch, True)
    (ours, _), _ = run("advbudget_grpo", batch, True)
    assert float(theirs.max()) < -0.05
    assert float(ours.abs().max()) == 0.0


def test_a_group_of_one_is_refused_where_verl_refuses() -> None:
    """verl's grpo_passk raises on a group of one (its mirror too); its other mirrors
    score it (raw reward against mean 0, std 1)."""
    batch = make_batch(0, torch.float64, graded=True, baselines=True)
    refusing = {core for core in CASES if run(CASES[core][0].verl_name, batch, True)[1]}
    assert refusing == set(VERL.singletons_refused) == {"grpo_passk"}
    _, error = run("advbudget_grpo_passk", batch, True)
    assert isinstance(error, ValueError)
    assert str(error).startswith("group_ids: grpo_passk expected at least 2 rollouts")


def test_a_missing_input_is_a_type_error_as_in_verl() -> None:
    """verl's trainer adds reward_baselines for its own remax only: without them verl's
    remax misses an argument (TypeError), and ours names it."""
    batch = make_batch(1, torch.float64, graded=True)
    _, their_error = run("remax", batch, True)
    _, our_error = run("advbudget_remax", batch, True)
    assert isinstance(their_error, TypeError)
    assert isinstance(our_error, TypeError)
    assert "'reward_baselines'" in str(our_error)


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5, 0.0])
def test_reinforce_is_reinforce_plus_plus_at_any_gamma(gamma: float) -> None:
    """verl's reinforce_plus_plus discounts the per-token reward-to-go by algorithm.gamma,
    skipping observation spans; ours the same, on dense multi-turn batches, advantages and
    returns on every token."""
    batch = make_batch(3, torch.float64, graded=True, dense=True)
    (theirs, their_returns), _ = run("reinforce_plus_plus", batch, True, gamma=gamma)
    (ours, our_returns), _ = run("advbudget_reinforce", batch, True, gamma=gamma)
    check(ours, theirs, 1e-7)
    check(our_returns, their_returns, 1e-12)
    at_one, _ = run("advbudget_reinforce", batch, True)[0] or (None, None)
    assert (gamma == 1.0) == bool(torch.equal(ours, at_one))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpg_f_norm(dtype: torch.dtype) -> None:
    """verl's trainer never passes gpg's f_norm; its function takes one: ours from
    ``+algorithm.advbudget.f_norm`` gives the same numbers."""
    batch = make_batch(3, dtype, graded=True)
    (ours, _), error = run("advbudget_gpg", batch, True, f_norm=2.5)
    assert error is None
    theirs, _ = core_algos.compute_gpg_outcome_advantage(
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
        f_norm=2.5,
    )
    check(ours, theirs, _tol("gpg", dtype))


def test_rloo_vectorized_is_rloo_without_raw_singletons() -> None:
    """verl's second RLOO gives a group of one 0 where ``rloo`` keeps its raw reward: the
    core's rloo with ``singletons="skip"`` (not an adapter name)."""
    batch = make_batch(2, torch.float64, graded=True)
    (theirs, _), _ = run("rloo_vectorized", batch, True)
    scores = batch.batch["token_level_rewards"].sum(-1)
    settings = {**VERL.settings("rloo"), "singletons": "skip"}
    index = list(batch.non_tensor_batch["uid"])
    ours = compute_advantages(scores, "rloo", group_ids=index, **settings).advantages
    check(token_advantages(ours, batch.batch["response_mask"]), theirs, TOL[torch.float64])
    (loop, _), _ = run("rloo", batch, True)
    assert float((loop - theirs).abs().max()) > 0  # the batch has a group of one
