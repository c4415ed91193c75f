"""Parity of the SkyRL mirrors with SkyRL's own estimators, through SkyRL's own dispatch
(``ppo_utils.compute_advantages_and_returns``, the estimator looked up by name in SkyRL's
registry): advantages and returns per token, with random response masks, shuffled uids,
groups of one, exact ties and graded rewards.

SkyRL computes in float32 from its float32 sequence reward; the mirrors take the same sum
and compute after it in float64, rounded once: the two agree to float32 rounding of the
group statistics (:func:`advbudget.testing.rounding_tolerance`). Where SkyRL's float32
arithmetic is the only source of a value (a tie of non-dyadic rewards, whose float32 mean
is not the reward), SkyRL's estimators give rounding noise divided by eps; the mirrors give
0: :func:`test_a_tie_of_non_dyadic_rewards`.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("skyrl")

import torch

from advbudget.adapters import get_convention
from advbudget.adapters.skyrl._estimators import MIRRORS
from advbudget.adapters.skyrl.testing import dispatch
from advbudget.testing import rounding_tolerance

from .conftest import SKYRL_WARNINGS

pytestmark = SKYRL_WARNINGS
SKYRL = get_convention("skyrl")
# (SkyRL's name, grpo_norm_by_std, our core estimator)
CASES = [
    ("grpo", True, "grpo"),
    ("grpo", False, "dr"),
    ("grpo", False, "grpo"),  # advbudget_grpo follows the switch as SkyRL's grpo does
    ("rloo", True, "rloo"),
    ("maxrl", True, "maxrl"),
]
REWARDS = {
    "binary": lambda rng, n: rng.integers(0, 2, n).astype(np.float32),
    "dyadic": lambda rng, n: rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], n).astype(np.float32),
    "graded": lambda rng, n: rng.uniform(0.05, 1.0, n).astype(np.float32),
}


def _algorithm(norm_by_std: bool) -> object:
    from skyrl.train.config import AlgorithmConfig

    return AlgorithmConfig(grpo_norm_by_std=norm_by_std)


def _batch(seed: int, kind: str) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """A shuffled batch: groups of 1 to 6 rollouts (uids in random order), a random
    response mask per row (never empty), the reward spread over the response's tokens."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, 6)
    uids = np.repeat([f"{seed}-{g}" for g in range(len(sizes))], sizes)
    rng.shuffle(uids)
    rows, length = len(uids), 7
    lengths = rng.integers(1, length + 1, rows)
    mask = torch.tensor(np.arange(length)[None, :] < lengths[:, None], dtype=torch.float32)
    rewards = REWARDS[kind](rng, rows)
    tokens = torch.zeros(rows, length)
    for row, (count, reward) in enumerate(zip(lengths, rewards, strict=True)):
        tokens[row, count - 1] = float(reward)  # on the last response token, as SkyRL puts it
    return tokens, mask, uids.tolist()


@pytest.mark.parametrize(("skyrl", "norm_by_std", "core"), CASES)
@pytest.mark.parametrize("kind", sorted(REWARDS))
@pytest.mark.parametrize("seed", range(4))
def test_the_mirror_gives_skyrls_numbers(
    skyrl: str, norm_by_std: bool, core: str, kind: str, seed: int
) -> None:
    tokens, mask, uids = _batch(seed, kind)
    algorithm = _algorithm(norm_by_std)
    with torch.no_grad():
        expected, expected_returns = dispatch(skyrl, tokens, mask, uids, algorithm)
        got, returns = dispatch(SKYRL.name_of(core), tokens, mask, uids, algorithm)
    assert got.dtype == expected.dtype == torch.float32
    assert got.shape == expected.shape
    tolerance = rounding_tolerance(expected.numpy(), terms=12, dtype=np.float32)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=tolerance)
    np.testing.assert_allclose(returns.numpy(), expected_returns.numpy(), rtol=0, atol=tolerance)
    assert torch.all(got[mask == 0] == 0)
    assert expected.abs().max() > 0.05  # not a comparison of zeros


@pytest.mark.parametrize("core", ["grpo", "rloo", "maxrl"])
def test_a_group_of_one_as_skyrl_scores_it(core: str) -> None:
    """grpo: r / (1 + eps) (mean 0, std 1); rloo: 0 (SkyRL warns); maxrl: r - 0."""
    tokens = torch.tensor([[0.0, 0.75], [0.0, 1.0], [0.0, 0.0], [0.0, 0.5]])
    mask = torch.ones(4, 2)
    uids = ["a", "b", "b", "c"]
    expected, _ = dispatch(core, tokens, mask, uids)  # SkyRL's own, by the same name
    got, _ = dispatch(SKYRL.name_of(core), tokens, mask, uids)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-6)
    singleton = {"grpo": 0.75 / (1 + 1e-6), "rloo": 0.0, "maxrl": 0.75}[core]
    assert got[0, -1].item() == pytest.approx(singleton, abs=1e-7)


@pytest.mark.parametrize("reward", [0.0, 0.5, 1.0, 0.25])
@pytest.mark.parametrize(("skyrl", "norm_by_std", "core"), CASES)
def test_a_tie_of_dyadic_rewards_scores_zero_in_both(
    reward: float, skyrl: str, norm_by_std: bool, core: str
) -> None:
    tokens = torch.zeros(8, 3)
    tokens[:, -1] = reward
    mask = torch.ones(8, 3)
    uids = ["g"] * 8
    algorithm = _algorithm(norm_by_std)
    expected, _ = dispatch(skyrl, tokens, mask, uids, algorithm)
    got, _ = dispatch(SKYRL.name_of(core), tokens, mask, uids, algorithm)
    assert torch.all(expected == 0)
    assert torch.all(got == 0)


def test_a_tie_of_non_dyadic_rewards() -> None:
    """8 x 0.7: SkyRL's grpo divides float32 rounding of the mean by eps (|A| about 0.06
    here), its rloo and maxrl give rounding noise; the mirrors give 0, the tie's value."""
    tokens = torch.zeros(8, 2)
    tokens[:, -1] = 0.7
    mask = torch.ones(8, 2)
    uids = ["g"] * 8
    skyrl_grpo, _ = dispatch("grpo", tokens, mask, uids)
    assert 1e-3 < skyrl_grpo.abs().max().item() < 0.5  # the float32 artefact, measured
    for core in ("grpo", "rloo", "maxrl"):
        got, _ = dispatch(SKYRL.name_of(core), tokens, mask, uids)
        assert torch.all(got == 0), core


def test_epsilon_reaches_the_mirror() -> None:
    """SkyRL's ``epsilon`` argument (its default 1e-6) sets the mirror's eps."""
    tokens = torch.tensor([[1.0], [1.0], [1.0], [0.0]])
    mask, uids = torch.ones(4, 1), ["g"] * 4
    for skyrl, core in (("grpo", "grpo"), ("maxrl", "maxrl")):
        expected, _ = dispatch(skyrl, tokens, mask, uids, epsilon=0.5)
        got, _ = dispatch(SKYRL.name_of(core), tokens, mask, uids, epsilon=0.5)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-6)
        default, _ = dispatch(SKYRL.name_of(core), tokens, mask, uids)
        assert not torch.allclose(got, default)


def test_every_mirror_has_skyrls_signature() -> None:
    import inspect

    from skyrl.backends.skyrl_train.utils import ppo_utils

    from advbudget.adapters.skyrl import estimator_function

    for core, mirror in MIRRORS.items():
        theirs = inspect.signature(getattr(ppo_utils, mirror.function))
        ours = inspect.signature(estimator_function(SKYRL.name_of(core)))
        assert list(ours.parameters) == list(theirs.parameters), core
        for name, parameter in theirs.parameters.items():
            assert ours.parameters[name].default == parameter.default, (core, name)
            assert ours.parameters[name].kind == parameter.kind, (core, name)
    assert set(MIRRORS) == set(SKYRL.own_names)


def test_an_unknown_keyword_is_refused() -> None:
    from advbudget.adapters.skyrl import estimator_function

    tokens, mask = torch.ones(2, 1), torch.ones(2, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'temperature'"):
        estimator_function("reward_budget")(tokens, mask, ["a", "a"], temperature=1.0)
