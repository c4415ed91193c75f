"""Each verl mirror takes exactly verl's signature and honours or refuses every argument:
called directly, by position and by keyword, as a user calls verl's function.

The table is :data:`advbudget.adapters.verl._estimators.MIRRORS`; these tests hold it
to the installed verl (a verl release that adds an argument fails here first).
"""

from __future__ import annotations

import inspect
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl")

import torch
from omegaconf import OmegaConf

with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
    warnings.simplefilter("ignore")
    from verl.trainer.ppo import core_algos

from advbudget.adapters import get_convention
from advbudget.adapters.verl import estimator_function
from advbudget.adapters.verl._estimators import (
    MIRRORS,
    VERL_PASSES,
    verl_mirrors,
)

from .conftest import VERL_WARNINGS

pytestmark = VERL_WARNINGS
VERL = get_convention("verl")


def _parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _ours(core: str) -> Any:
    return estimator_function(VERL.name_of(core))


def test_every_mirror_has_verls_signature() -> None:
    assert sorted(MIRRORS) == sorted(VERL.own_names)
    for core, mirror in MIRRORS.items():
        theirs = getattr(core_algos, mirror.function)
        assert core_algos.ADV_ESTIMATOR_REGISTRY[mirror.verl] is theirs
        assert _parameters(_ours(core)) == _parameters(theirs), core
        for argument in (*mirror.options, *mirror.unused):
            assert argument in inspect.signature(theirs).parameters, (core, argument)
    assert verl_mirrors()["reinforce_plus_plus"] == "advbudget_reinforce"
    assert "dr" not in {VERL.core_name(name) for name in verl_mirrors().values()}


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor]:
    rng = np.random.default_rng(seed)
    mask = torch.ones(12, 5)
    mask[::3, 3:] = 0
    rewards = torch.zeros(12, 5, dtype=torch.float64)
    scores = torch.tensor(rng.choice([0.0, 0.5, 1.0, 3.0], size=12))
    rewards[torch.arange(12), mask.sum(-1).long() - 1] = scores
    index = np.array([f"p{i // 4}" for i in range(12)], dtype=object)
    return rewards, mask, index, torch.tensor(rng.normal(size=12))


CONFIG = OmegaConf.create({"gamma": 1.0, "norm_adv_by_std_in_grpo": True})
# verl computes some statistics in float32 whatever the rewards' dtype (gpg's alpha, the
# token counts of its whitening): the comparisons below are at that rounding
ATOL = 1e-6


def _copy(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """verl's estimators write into the rewards they are given."""
    return tuple(a.clone() if torch.is_tensor(a) else a for a in args)


def _args(core: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional arguments in verl's order, and the config."""
    rewards, mask, index, baselines = _batch()
    if core == "remax":
        return (rewards, baselines, mask), {"config": CONFIG}
    if core == "reinforce":
        return (rewards, mask), {"config": CONFIG}
    return (rewards, mask, index), {"config": CONFIG}


@pytest.mark.parametrize("core", sorted(c for c in MIRRORS if c != "dr"))
def test_positional_calls_agree_with_verl(core: str) -> None:
    mirror = MIRRORS[core]
    args, kwargs = _args(core)
    theirs = getattr(core_algos, mirror.function)(
        *(a.clone() if torch.is_tensor(a) else a for a in args), **kwargs
    )
    ours = _ours(core)(*args, **kwargs)
    for mine, their in zip(ours, theirs, strict=True):
        assert mine.dtype == their.dtype
        torch.testing.assert_close(mine, their, rtol=0, atol=ATOL)


@pytest.mark.parametrize("core", sorted(c for c in MIRRORS if c != "dr"))
def test_an_unknown_keyword_is_refused(core: str) -> None:
    args, kwargs = _args(core)
    with pytest.raises(TypeError, match="'lam'"):
        _ours(core)(*args, lam=0.95, **kwargs)
    _, _, index, baselines = _batch()
    given = {"index": index, "reward_baselines": baselines, "non_tensor_batch": None}
    given["batch"] = None
    parameters = inspect.signature(_ours(core)).parameters
    if "kwargs" not in parameters:  # verl's grpo: no **kwargs (its trainer calls it by hand)
        return
    assert sorted(given) == sorted(VERL_PASSES)
    for name, value in given.items():  # what verl's trainer may hand any estimator
        if name not in parameters:
            _ours(core)(*args, **{name: value}, **kwargs)


ARGUMENTS = [  # (core, argument, value): verl's function reads it
    ("grpo", "epsilon", 0.5),
    ("grpo", "norm_adv_by_std_in_grpo", False),
    ("grpo_passk", "epsilon", 0.5),
    ("gdpo", "epsilon", 0.5),
    ("gpg", "f_norm", 3.0),
]
UNUSED = [  # verl's function takes it and never reads it: the same numbers
    ("rloo", "epsilon", 0.5),
    ("opo", "epsilon", 0.5),
    ("reinforce_plus_plus_baseline", "epsilon", 0.5),
    ("gpg", "alpha", 7.0),
    ("gpg", "epsilon", 0.5),
]


@pytest.mark.parametrize(("core", "argument", "value"), ARGUMENTS + UNUSED)
def test_every_argument_is_honoured_as_verl(core: str, argument: str, value: Any) -> None:
    mirror = MIRRORS[core]
    args, kwargs = _args(core)
    theirs = getattr(core_algos, mirror.function)
    changed = (core, argument, value) in ARGUMENTS
    their_default = theirs(*_copy(args), **kwargs)[0]
    their_value = theirs(*_copy(args), **{argument: value}, **kwargs)[0]
    ours = _ours(core)(*args, **{argument: value}, **kwargs)[0]
    assert changed == bool((their_value - their_default).abs().max() > 100 * ATOL)
    torch.testing.assert_close(ours, their_value, rtol=0, atol=ATOL)


def test_the_switch_given_wins_over_the_config() -> None:
    """verl's trainer passes norm_adv_by_std_in_grpo to its grpo from the config; ours reads
    the config when not given (verl hands our estimators the config only)."""
    rewards, mask, index, _ = _batch()
    dr = core_algos.compute_grpo_outcome_advantage(
        rewards.clone(), mask, index, norm_adv_by_std_in_grpo=False
    )[0]
    off = SimpleNamespace(norm_adv_by_std_in_grpo=False)
    on = SimpleNamespace(norm_adv_by_std_in_grpo=True)
    grpo = _ours("grpo")
    torch.testing.assert_close(grpo(rewards, mask, index, config=off)[0], dr, rtol=0, atol=ATOL)
    torch.testing.assert_close(
        grpo(rewards, mask, index, norm_adv_by_std_in_grpo=False, config=on)[0],
        dr,
        rtol=0,
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="norm_adv_by_std_in_grpo: advbudget_dr"):
        _ours("dr")(rewards, mask, index, norm_adv_by_std_in_grpo=True)
    with pytest.raises(ValueError, match="norm_adv_by_std_in_grpo: advbudget_gdpo"):
        _ours("gdpo")(rewards, mask, index, norm_adv_by_std_in_grpo=False)


def test_gdpo_without_components_takes_the_sequence_reward_as_verls() -> None:
    rewards, mask, index, _ = _batch()
    # weights without components: unused
    config = OmegaConf.create({"gdpo_reward_weights": [2.0, 1.0]})
    theirs = core_algos.compute_gdpo_outcome_advantage(rewards.clone(), mask, index, config=config)
    ours = _ours("gdpo")(rewards, mask, index, config=config)
    for mine, their in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, their, rtol=0, atol=ATOL)


@pytest.mark.parametrize("core", ["reinforce", "remax"])
def test_masks_with_holes_and_dense_rewards(core: str) -> None:
    """Observation spans (mask 0 inside a response) and a reward on every token: verl's
    per-token estimators, advantages and returns on every token (not only the mask's)."""
    rng = np.random.default_rng(5)
    mask = torch.tensor(rng.random((10, 8)) < 0.7, dtype=torch.float32)
    mask[:, 0] = 1
    rewards = torch.tensor(rng.normal(size=(10, 8)), dtype=torch.float32) * mask
    baselines = torch.tensor(rng.normal(size=10), dtype=torch.float32)
    mirror = MIRRORS[core]
    for gamma in (1.0, 0.7):
        config = SimpleNamespace(gamma=gamma)
        args = (rewards, baselines, mask) if core == "remax" else (rewards, mask)
        theirs = getattr(core_algos, mirror.function)(*(a.clone() for a in args), config=config)
        ours = _ours(core)(*args, config=config)
        for mine, their in zip(ours, theirs, strict=True):
            assert mine.dtype == torch.float32
            # ours in float64 rounded once, verl's in float32: its rounding of sums of 8
            torch.testing.assert_close(mine, their, rtol=0, atol=8 * 4 * 2**-23 * 4)
