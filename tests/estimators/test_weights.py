"""Difficulty weights, ``compute_advantages(..., group_weight=...)``, and the ``dgpo``
estimator (SPEC §6 C1, C2): hand values, a float64 reference on every backend, invariants
(hypothesis), metrics, tracing and the errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages, estimator_names
from advbudget.metrics import advantage_metrics
from advbudget.testing import assert_close, to_numpy

from ..references import dqw, reference, solved_share

TIE = 1e-6


def lead(x: float, floor: float = 0.4, ceiling: float = 1.5, midpoint: float = 0.75,
         steepness: float = 10.0) -> float:  # fmt: skip
    return floor + (ceiling - floor) / (1 + math.exp(steepness * (x - midpoint)))


def weighted_reference(
    estimator: str,
    rewards: list[float],
    labels: list[Any],
    weight: Any,
    *,
    solved_reward: float = 1.0,
    **options: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """float64: the estimator's reference advantages and the weight of each rollout, a
    Python loop over groups in order of first appearance."""
    base = reference(estimator, rewards, labels, **options)
    members: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    r = np.asarray(rewards, dtype=np.float64)
    groups = list(members.values())
    shares = [solved_share(r[idx], TIE, solved_reward) for idx in groups]
    weights = np.ones(len(r))
    if weight == "grpo_lead":
        for idx, share in zip(groups, shares, strict=True):
            for i in idx:
                if base[i] > 0:
                    weights[i] = lead(share)
                elif base[i] < 0:
                    weights[i] = lead(1 - share)
    elif weight == "dqw":
        kept = [k for k, idx in enumerate(groups) if np.any(base[idx] != 0)]
        for k, w in zip(kept, dqw([shares[k] for k in kept], 2.0), strict=True):
            weights[groups[k]] = w
    else:
        for idx, w in zip(groups, weight(np.asarray(shares)), strict=True):
            weights[idx] = w
    return base * weights, weights


# -- hand values (SPEC §6 C1, C2) -----------------------------------------------------------


def test_grpo_lead_hand_values() -> None:
    """GRPO on G=4 with GRPO-LEAD's weight: [1,0,0,0] and [1,1,0,0] (SPEC's example)."""
    result = compute_advantages(
        np.array([1.0, 0, 0, 0, 1, 1, 0, 0]), "grpo", group_size=4, group_weight="grpo_lead"
    )
    expected = [2.23895, -0.47500, -0.47500, -0.47500, 1.22677, 1.22677, -1.22677, -1.22677]
    np.testing.assert_allclose(result.advantages, expected, atol=5e-6)
    # w(1/4) = 0.4 + 1.1 / (1 + e^-5): the hard group's positive rollout gets ~1.49
    assert result.weights[0] == pytest.approx(0.4 + 1.1 / (1 + math.exp(-5)), rel=1e-12)
    assert result.weights[1] == pytest.approx(0.4 + 1.1 / (1 + math.exp(0)), rel=1e-12)


def test_dqw_hand_values() -> None:
    """p̂ 1/4 and 1/2 in two kept groups, one group all solved (skipped: weight 1)."""
    rewards = np.array([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1])
    result = compute_advantages(rewards, "grpo", group_size=4, group_weight="dqw")
    hard = 2 / (1 + math.exp(-0.125))  # 2 e^{-1/8} / (e^{-1/8} + e^{-1/4})
    assert to_numpy(result.weights).tolist() == pytest.approx([hard] * 4 + [2 - hard] * 4 + [1] * 4)
    base = compute_advantages(rewards, "grpo", group_size=4).advantages
    np.testing.assert_allclose(result.advantages, base * result.weights, rtol=1e-15)
    assert result.valid.tolist() == [True] * 8 + [False] * 4


def test_dqw_counts_an_unsolved_kept_group_as_solved_once() -> None:
    """A kept group nobody solved (graded rewards below 1) gets d = 1: the least weight."""
    rewards = np.array([0.5, 0.0, 1.0, 0.0])
    result = compute_advantages(rewards, "dr", group_size=2, group_weight="dqw")
    # d = 1 (p̂ 0, remapped) and d = 1/2
    low = 2 * math.exp(-0.5) / (math.exp(-0.5) + math.exp(-0.25))
    assert to_numpy(result.weights).tolist() == pytest.approx([low, low, 2 - low, 2 - low])


def test_dgpo_hand_values() -> None:
    rewards = np.array([1.0, 0, 0, 0, 1, 1, 0, 0])
    alone = compute_advantages(rewards, "dgpo", group_size=4, dqw=False)
    # 4 (r - 1/4) / (1.5 + 1e-4) and 4 (r - 1/2) / (2 + 1e-4)
    expected = [3 / 1.5001, -1 / 1.5001, -1 / 1.5001, -1 / 1.5001]
    expected += [2 / 2.0001, 2 / 2.0001, -2 / 2.0001, -2 / 2.0001]
    np.testing.assert_allclose(alone.advantages, expected, rtol=1e-14)
    weighted = compute_advantages(rewards, "dgpo", group_size=4)
    hard = 2 / (1 + math.exp(-0.125))
    np.testing.assert_allclose(
        weighted.advantages, np.array(expected) * ([hard] * 4 + [2 - hard] * 4), rtol=1e-14
    )
    assert weighted.weights is None  # DQW is dgpo's own, not a group_weight


# -- every backend against the float64 reference --------------------------------------------


@pytest.mark.parametrize("weight", ["grpo_lead", "dqw", "callable"])
@pytest.mark.parametrize("estimator", ["budget", "grpo", "dr", "rloo", "maxrl", "dgpo"])
def test_weights_match_the_reference_on_every_backend(xp: Any, estimator: str, weight: str) -> None:
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 6, size=40).tolist()
    rewards = rng.integers(0, 3, size=40).astype(np.float64) / 2  # 0, 0.5, 1: ties and grades
    chosen: Any = weight
    if weight == "callable":
        chosen = lambda p: 1 + p**2  # noqa: E731
    expected, weights = weighted_reference(estimator, rewards.tolist(), labels, chosen)
    result = compute_advantages(
        xp.asarray(rewards), estimator, group_ids=xp.asarray(labels), group_weight=chosen
    )
    assert_close(result.advantages, expected, xp=xp)
    valid = to_numpy(result.valid)
    assert_close(xp.asarray(to_numpy(result.weights)[valid]), weights[valid], xp=xp)


# -- invariants -------------------------------------------------------------------------------

GROUPS = st.lists(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=6),
    min_size=1,
    max_size=8,
)


def _flat(groups: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    rewards = np.array([r for group in groups for r in group])
    labels = np.array([g for g, group in enumerate(groups) for _ in group])
    return rewards, labels


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GROUPS, st.sampled_from(["budget", "grpo", "rloo", "dgpo", "reinforce", "gpg"]))
def test_a_weight_of_one_is_the_base_estimator(groups: list[list[float]], estimator: str) -> None:
    rewards, labels = _flat(groups)
    base = compute_advantages(rewards, estimator, group_ids=labels)
    ones = compute_advantages(
        rewards, estimator, group_ids=labels, group_weight=lambda p: np.ones_like(p)
    )
    np.testing.assert_array_equal(ones.advantages, base.advantages)
    np.testing.assert_array_equal(ones.valid, base.valid)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GROUPS, st.sampled_from(["grpo_lead", "dqw"]), st.sampled_from(["budget", "grpo", "dr"]))
def test_weights_stay_in_range_and_never_touch_skips(
    groups: list[list[float]], weight: str, estimator: str
) -> None:
    rewards, labels = _flat(groups)
    base = compute_advantages(rewards, estimator, group_ids=labels)
    result = compute_advantages(rewards, estimator, group_ids=labels, group_weight=weight)
    np.testing.assert_array_equal(result.valid, base.valid)
    np.testing.assert_array_equal(result.group_skipped, base.group_skipped)
    assert np.all(result.advantages[~result.valid] == 0)
    assert np.all(np.sign(result.advantages) == np.sign(base.advantages))
    valid = result.valid
    if weight == "grpo_lead":
        assert np.all((result.weights > 0.4) & (result.weights < 1.5))
    else:
        kept = ~result.group_skipped
        per_group = result.weights[
            np.argmax(result.group_index[:, None] == np.arange(len(kept)), 0)
        ]
        assert np.all(per_group > 0)
        assert per_group[kept].sum() == pytest.approx(kept.sum(), rel=1e-12)
        assert np.all(per_group[~kept] == 1)
    assert result.weights.shape == rewards.shape
    assert valid.shape == rewards.shape


FLOATS = st.sampled_from([np.float64, np.float32])
SPECIAL = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -1e-300])


@settings(max_examples=80, deadline=None)
@given(FLOATS, st.integers(1, 40), st.sampled_from([1, 2, 3, 8]), st.data())
def test_the_sign_choice_is_numpys_where_bit_for_bit(
    dtype: Any, num_groups: int, size: int, data: Any
) -> None:
    """numpy's grpo_lead product chooses each weight by the bits of the row's sign
    (``_by_sign``): the same numbers as ``where(rows > 0, up, down) * rows``, with zeros of
    both signs, infinities and NaN among the rows, per-group weights broadcast."""
    from advbudget.core._weights import _by_sign

    values = st.one_of(st.floats(-1e3, 1e3, width=32), SPECIAL)
    rows = np.array(data.draw(st.lists(values, min_size=num_groups * size,
                                       max_size=num_groups * size)), dtype=dtype)  # fmt: skip
    rows = rows.reshape(num_groups, size)
    weights = st.floats(0, 2, width=32)
    up, down = (
        np.array(
            data.draw(st.lists(weights, min_size=num_groups, max_size=num_groups)), dtype=dtype
        ).reshape(num_groups, 1)
        for _ in range(2)
    )
    with np.errstate(invalid="ignore"):
        want = np.where(rows > 0, up, down) * rows
        got = _by_sign(rows, up, down)
    assert got is not None
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert _by_sign(rows, up.astype(np.float16), down) is None  # mixed dtypes: where()


def test_dqw_with_a_tiny_temperature_and_a_near_tie_skipped() -> None:
    """A near-tie group is skipped, yet one of its rewards reaches the solved bar and one
    does not (p̂ 1/2, below both kept groups'): its term must not overflow (exp(+gap/T) · 0
    would be NaN); weight 1. The kept groups' softmax at T = 1e-300 puts their whole
    weight (2) on the harder one (p̂ 3/4 against 4/5)."""
    rewards = np.array([1 - 1.5e-6, 1 - 2.5e-6, 1, 1, 0, 1, 1, 0, 1, 1, 1])
    result = compute_advantages(
        rewards,
        "grpo",
        group_ids=np.repeat([0, 1, 2], [2, 4, 5]),
        group_weight={"name": "dqw", "temperature": 1e-300},
    )
    assert result.group_skipped.tolist() == [True, False, False]
    assert result.weights.tolist() == [1.0] * 2 + [2.0] * 4 + [0.0] * 5


def test_solved_reward_and_nan_set_the_solved_share() -> None:
    """±1 rewards: solved is +1 (p̂ 1/4 here); a NaN left out does not count."""
    rewards = np.array([1.0, -1, -1, -1, 1, -1, np.nan, -1])
    shares = []
    result = compute_advantages(
        rewards,
        "grpo",
        group_size=4,
        nan_policy="omit",
        group_weight=lambda p: shares.append(p.tolist()) or np.ones_like(p),
    )
    assert shares == [[0.25, 1 / 3]]
    assert result.weights.tolist() == [1.0] * 8
    compute_advantages(
        np.array([0.6, 0.2]),
        "dr",
        group_size=2,
        solved_reward=0.5,
        group_weight=lambda p: shares.append(p.tolist()) or p + 1,
    )
    assert shares[-1] == [0.5]


def test_options_of_a_named_weight() -> None:
    rewards = np.array([1.0, 0, 0, 0])
    steep = compute_advantages(
        rewards, "dr", group_size=4, group_weight={"name": "grpo_lead", "steepness": 20}
    )
    assert steep.weights[0] == pytest.approx(lead(0.25, steepness=20))
    assert steep.group_weight == "grpo_lead(steepness=20)"
    cold = compute_advantages(
        np.array([1.0, 0, 1, 1, 0, 0]),
        "dr",
        group_size=3,
        group_weight={"name": "dqw", "temperature": 0.001},
    )
    # a tiny temperature neither overflows nor divides by 0: the harder group (p̂ 1/3)
    # takes it all
    assert to_numpy(cold.weights).tolist() == pytest.approx([0.0] * 3 + [2.0] * 3, abs=1e-12)


def test_metrics_report_the_weights_of_updating_rollouts() -> None:
    rewards = np.array([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1])
    result = compute_advantages(rewards, "grpo", group_size=4, group_weight="grpo_lead")
    metrics = advantage_metrics(result)
    weights = result.weights[:8]
    assert metrics["group_weight_mean"] == pytest.approx(weights.mean())
    assert metrics["group_weight_min"] == pytest.approx(weights.min())
    assert metrics["group_weight_max"] == pytest.approx(weights.max())
    plain = advantage_metrics(compute_advantages(rewards, "grpo", group_size=4))
    assert not any(key.startswith("group_weight") for key in plain)
    none = compute_advantages(np.ones(4), "grpo", group_size=4, group_weight="dqw")
    assert math.isnan(advantage_metrics(none)["group_weight_mean"])


def test_group_weight_under_jax_jit() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rewards = jnp.asarray([1.0, 0, 0, 0, 1, 1, 0, 0])

    @jax.jit
    def step(r: Any) -> Any:
        return compute_advantages(r, "grpo", group_size=4, group_weight="grpo_lead").advantages

    eager = compute_advantages(rewards, "grpo", group_size=4, group_weight="grpo_lead")
    np.testing.assert_allclose(np.asarray(step(rewards)), np.asarray(eager.advantages), rtol=1e-6)


def test_every_estimator_takes_a_weight() -> None:
    rewards = np.array([1.0, 0, 1, 1])
    weighed = []
    for name in estimator_names():
        try:
            base = compute_advantages(rewards, name, group_size=2)
        except (TypeError, ValueError):
            continue  # needs inputs of its own (response_lengths, components, ...)
        result = compute_advantages(rewards, name, group_size=2, group_weight="dqw")
        assert result.weights is not None, name
        np.testing.assert_allclose(result.advantages, base.advantages * result.weights)
        weighed.append(name)
    assert {"budget", "grpo", "dgpo", "rloo", "maxrl", "reinforce"} <= set(weighed)


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weight", "error", "message"),
    [
        ("lead", ValueError, "group_weight: expected one of 'grpo_lead', 'dqw'"),
        ({"steepness": 3}, ValueError, "group_weight: a mapping needs 'name'"),
        ({"name": "dqw", "tau": 1}, ValueError, "group_weight: dqw takes the options temperature"),
        ({"name": "dqw", "temperature": 0}, ValueError, "group_weight temperature: expected a"),
        ({"name": "grpo_lead", "floor": -1}, ValueError, "group_weight floor: expected a"),
        (3, TypeError, "group_weight: expected a name"),
        (lambda p: p[:1], ValueError, "group_weight: the callable must return 2 weights"),
        (lambda p: p * np.nan, ValueError, "group_weight: the callable must return finite"),
        (lambda p: "heavy", ValueError, "group_weight: the callable must return 2 numbers"),
    ],
)
def test_bad_weights_are_refused_in_one_line(weight: Any, error: type, message: str) -> None:
    with pytest.raises(error, match="^" + message.replace("(", r"\(")) as caught:
        compute_advantages(np.array([1.0, 0, 1, 0.5]), "dr", group_size=2, group_weight=weight)
    assert "\n" not in str(caught.value)


def test_bad_solved_reward_and_dgpo_options() -> None:
    with pytest.raises(ValueError, match=r"^solved_reward: expected a finite number"):
        compute_advantages(np.array([1.0, 0]), "dr", group_size=2, solved_reward=math.inf)
    with pytest.raises(ValueError, match=r"^temperature: "):
        compute_advantages(np.array([1.0, 0]), "dgpo", group_size=2, temperature=-1)
    with pytest.raises(ValueError, match=r"^dqw: "):
        compute_advantages(np.array([1.0, 0]), "dgpo", group_size=2, dqw="yes")
