"""The frameworks' other outcome estimators (opo, grpo_passk, gpg, reinforce_plus_plus_baseline,
remax, reinforce_baseline, reinforce, grpo_batch_std, rloo_normalized): hand values,
invariants, errors, jax.jit and their implied slopes. (Their float64 references on every
layout and backend: tests/references.py and tests/test_conformance.py.)"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages, get_spec
from advbudget.adapters import get_convention
from advbudget.testing import assert_close, to_numpy
from advbudget.theory import binary_advantages, implied_slope

from .references import reference

NEW = (
    "opo",
    "grpo_passk",
    "gpg",
    "reinforce_plus_plus_baseline",
    "remax",
    "reinforce_baseline",
    "reinforce",
    "grpo_batch_std",
    "rloo_normalized",
)
SEED = int(os.environ.get("ADVBUDGET_TEST_SEED", "0"))
WHITENED = ("reinforce_plus_plus_baseline", "reinforce_baseline", "reinforce")


def _inputs(name, rng, n):
    out: dict[str, Any] = {}
    if name == "remax":
        out["reward_baselines"] = rng.normal(size=n)
    if any(i.name == "response_lengths" for i in get_spec(name).inputs):
        out["response_lengths"] = rng.integers(1, 40, size=n).astype(np.float64)
    return out


def _as(xp, inputs, dtype):
    return {k: xp.asarray(v, dtype=dtype) for k, v in inputs.items()}


# -- hand-computed values -------------------------------------------------------------------

# Two groups of four: [1, 0, 0, 0] and [0.5, 0.5, 1, 0]; lengths [4, 1, 1, 2 | 1, 3, 2, 2].
R = [1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0]
L = [4.0, 1.0, 1.0, 2.0, 1.0, 3.0, 2.0, 2.0]
DR = np.array([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.5, -0.5])  # r - group mean
RLOO = np.array([1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 2 / 3, -2 / 3])  # 4/3 (r - mean)
HAND = {
    # OPO: group 1 baseline 4*1 / 8 = 0.5; group 2 (0.5 + 1.5 + 2 + 0) / 8 = 0.5.
    ("opo", ()): [0.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.5, -0.5],
    # Pass@k: group 1's unique best gets (1 - 0) / (unbiased std 0.5 + 1e-6); group 2's best
    # (1.0) gets (1 - 0.5) / (sqrt(0.5 / 3) + 1e-6).
    ("grpo_passk", ()): [1 / (0.5 + 1e-6), 0, 0, 0, 0, 0, 0.5 / (math.sqrt(1 / 6) + 1e-6), 0],
    ("grpo_passk", (("norm_adv_by_std", False),)): [1, 0, 0, 0, 0, 0, 0.5, 0],
    # GPG: 4 nonzero rewards of N = 8, alpha = 2; f_norm divides.
    ("gpg", ()): 2 * DR,
    ("gpg", (("f_norm", 4.0),)): DR / 2,
    # ReMax with baselines 0.5: r - 0.5.
    ("remax", ()): np.array(R) - 0.5,
    # Batch std of the 8 rewards: mean 3/8, sum of squares 1.375, unbiased 1.375 / 7.
    ("grpo_batch_std", ()): DR / (math.sqrt(1.375 / 7) + 1e-4),
    # RLOO's advantages have batch mean 0 and unbiased variance (1 + 3/9 + 8/9) / 7 = 20/63.
    ("rloo_normalized", ()): RLOO / (math.sqrt(20 / 63) + 1e-4),
    # OpenRLHF's reinforce: r whitened, mean 3/8, biased variance 1.375 / 8.
    ("reinforce", ()): (np.array(R) - 0.375) / math.sqrt(1.375 / 8),
    # OpenRLHF's reinforce_baseline without lengths: DR has mean 0, biased var 1.25 / 8.
    ("reinforce_baseline", ()): DR / math.sqrt(1.25 / 8),
    ("reinforce_baseline", (("std_norm", False),)): DR,
    # verl's: weighted by L (total 16): mean (3 - 1) / 16 = 1/8; the weighted sum of squares
    # about it is 3.25, unbiased over tokens / 15, plus 1e-8 under the root.
    ("reinforce_plus_plus_baseline", ()): (DR - 0.125) / math.sqrt(3.25 / 15 + 1e-8),
}


@pytest.mark.parametrize(("name", "options"), list(HAND), ids=lambda x: str(x))
def test_hand_computed_values(xp, name, options):
    expected = HAND[(name, options)]
    raw: dict[str, Any] = {}
    if name in ("opo", "reinforce_plus_plus_baseline"):
        raw["response_lengths"] = np.array(L)
    if name == "remax":
        raw["reward_baselines"] = np.full(8, 0.5)
    order = [5, 0, 7, 2, 4, 1, 6, 3]
    labels = [f"q{i // 4}" for i in order]
    for dtype in (xp.float64, xp.float32):
        kw = {**dict(options), **_as(xp, raw, dtype)}
        res = compute_advantages(xp.asarray(R, dtype=dtype), name, group_size=4, **kw)
        assert_close(res.advantages, expected, xp=xp, dtype=dtype)
        # The same numbers with the groups shuffled and labelled by strings.
        kw = {**dict(options), **_as(xp, {k: v[order] for k, v in raw.items()}, dtype)}
        res = compute_advantages(
            xp.asarray([R[i] for i in order], dtype=dtype), name, group_ids=labels, **kw
        )
        assert_close(res.advantages, np.asarray(expected)[order], xp=xp, dtype=dtype)


def test_groups_of_one(xp):
    # Rewards [2 | 1, 0]: under "raw" the lone rollout keeps its reward (verl's baseline 0).
    rewards = xp.asarray([2.0, 1.0, 0.0], dtype=xp.float64)
    labels = ["a", "b", "b"]
    lengths = xp.asarray([3.0, 1.0, 1.0], dtype=xp.float64)
    opo = compute_advantages(rewards, "opo", group_ids=labels, response_lengths=lengths)
    assert_close(opo.advantages, [0.0, 0.5, -0.5], xp=xp)
    assert to_numpy(opo.valid).tolist() == [False, True, True]
    raw = compute_advantages(
        rewards, "opo", group_ids=labels, response_lengths=lengths, singletons="raw"
    )
    assert_close(raw.advantages, [2.0, 0.5, -0.5], xp=xp)
    # GPG: 2 nonzero rewards of 3, alpha 3/2 (the lone rollout counts in alpha either way).
    gpg = compute_advantages(rewards, "gpg", group_ids=labels, singletons="raw")
    assert_close(gpg.advantages, [3.0, 0.75, -0.75], xp=xp)
    assert_close(
        compute_advantages(rewards, "gpg", group_ids=labels).advantages, [0, 0.75, -0.75], xp=xp
    )
    # verl's REINFORCE++-baseline: [2, 0.5, -0.5], mean 2/3, unbiased variance 19/12.
    rpp = compute_advantages(rewards, "reinforce_plus_plus_baseline", group_ids=labels,
                             singletons="raw")  # fmt: skip
    expected = (np.array([2.0, 0.5, -0.5]) - 2 / 3) / math.sqrt(19 / 12 + 1e-8)
    assert_close(rpp.advantages, expected, xp=xp)
    # RLOO normalized: the lone rollout is left out of the statistics (TRL: NaN baseline).
    rn = compute_advantages(rewards, "rloo_normalized", group_ids=labels)
    s = math.sqrt(2) + 1e-4
    assert_close(rn.advantages, [0.0, 1 / s, -1 / s], xp=xp)
    assert_close(
        compute_advantages(rewards, "grpo_passk", group_ids=labels).advantages,
        [0.0, 1 / (math.sqrt(0.5) + 1e-6), 0.0],
        xp=xp,
    )


# -- the float64 loop reference on random inputs over every layout ------------------------


def _random_batch(rng, layout):
    if layout == "group_size":
        g, m = int(rng.integers(2, 9)), int(rng.integers(1, 6))
        sizes = [g] * m
    else:
        sizes = list(rng.integers(1 if layout != "padded" else 2, 10, size=rng.integers(1, 7)))
    labels = [f"p{k}" for k, s in enumerate(sizes) for _ in range(s)]
    n = len(labels)
    # Graded rewards with ties: some groups constant, many repeated values.
    rewards = rng.choice([-1.0, 0.0, 0.0, 0.3, 1.0, 1.0, 2.5], size=n) + rng.normal(size=n) * (
        rng.random(n) < 0.3
    )
    if layout != "group_size":
        order = rng.permutation(n)
        labels = [labels[i] for i in order]
        rewards = rewards[order]
    return rewards, labels, sizes


# -- invariants --------------------------------------------------------------------------

backend_settings = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
VALUES = [-2.0, -1.0, 0.0, 0.25, 0.5, 1.0, 3.0]


@st.composite
def batches(draw, min_size=1):
    sizes = draw(st.lists(st.integers(min_size, 8), min_size=1, max_size=6))
    labels = [f"q{g}" for g, s in enumerate(sizes) for _ in range(s)]
    n = len(labels)
    rewards = draw(st.lists(st.sampled_from(VALUES), min_size=n, max_size=n))
    lengths = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    order = draw(st.permutations(range(n)))
    return (
        np.array(rewards)[order],
        [labels[i] for i in order],
        np.array(lengths, dtype=np.float64)[order],
    )


def _sums(values, labels, weights=None):
    out: dict[str, float] = {}
    for i, label in enumerate(labels):
        out[label] = out.get(label, 0.0) + values[i] * (1 if weights is None else weights[i])
    return np.array(list(out.values()))


def _call(xp, name, rewards, labels, lengths, **kw):
    inputs: dict[str, Any] = {}
    if any(i.name == "response_lengths" for i in get_spec(name).inputs):
        inputs["response_lengths"] = xp.asarray(lengths, dtype=xp.float64)
    if name == "remax":
        inputs["reward_baselines"] = xp.asarray(lengths / 10, dtype=xp.float64)
    r = xp.asarray(rewards, dtype=xp.float64)
    return to_numpy(compute_advantages(r, name, group_ids=labels, **inputs, **kw).advantages)


@backend_settings
@given(batch=batches())
def test_group_centred_estimators_sum_to_zero_per_group(xp, batch):
    _, labels, lengths = batch
    # opo's baseline is the length-weighted mean: the length-weighted sum is zero.
    assert np.all(np.abs(_sums(_call(xp, "opo", *batch), labels, lengths)) < 1e-9)
    for name in ("gpg", "grpo_batch_std", "rloo_normalized"):
        assert np.all(np.abs(_sums(_call(xp, name, *batch), labels)) < 1e-9), name


@pytest.mark.parametrize("name", [n for n in NEW if n not in ("gpg", "remax")])
@backend_settings
@given(batch=batches(min_size=2), shift=st.sampled_from([-3.0, 0.5, 7.0]))
def test_adding_a_constant_to_every_reward_changes_nothing(xp, name, batch, shift):
    rewards, labels, lengths = batch
    before = _call(xp, name, rewards, labels, lengths)
    after = _call(xp, name, rewards + shift, labels, lengths)
    np.testing.assert_allclose(after, before, atol=1e-7)


@backend_settings
@given(batch=batches(), shift=st.sampled_from([-3.0, 0.5]))
def test_remax_moves_with_its_baseline(xp, batch, shift):
    rewards, labels, lengths = batch
    kw = {"reward_baselines": xp.asarray(lengths / 10 + shift, dtype=xp.float64)}
    r = xp.asarray(rewards + shift, dtype=xp.float64)
    out = to_numpy(compute_advantages(r, "remax", group_ids=labels, **kw).advantages)
    np.testing.assert_allclose(out, rewards - lengths / 10, atol=1e-12)


@pytest.mark.parametrize("name", WHITENED)
@backend_settings
@given(batch=batches())
def test_whitened_advantages_have_token_weighted_mean_0_and_std_1(xp, name, batch):
    rewards, labels, lengths = batch
    # Without the variance regularisers: with them (verl's var_eps 1e-8, the 1e-8 floor)
    # the std is sqrt(var / (var + eps)), 1e-6 below 1 already at var 1e-2 (hypothesis
    # found such a batch): the defaults' scale is checked below.
    exact = _call(xp, name, rewards, labels, lengths, var_eps=0.0, var_floor=0.0)
    correction = get_spec(name).option("std_correction").default
    mean = np.sum(lengths * exact) / np.sum(lengths)
    assert abs(mean) < 1e-9
    out = _call(xp, name, rewards, labels, lengths)
    if np.max(np.abs(exact)) == 0:  # a batch whose (centred) rewards are all equal
        assert np.all(out == 0)
        return
    var = np.sum(lengths * (exact - mean) ** 2) / (np.sum(lengths) - correction)
    assert var == pytest.approx(1.0, rel=1e-6)
    # The defaults only shrink the same advantages, by at most the regulariser's share.
    scale = np.sum(out * exact) / np.sum(exact * exact)
    np.testing.assert_allclose(out, scale * exact, rtol=1e-9, atol=1e-12)
    assert 0 < scale <= 1 + 1e-12


@backend_settings
@given(batch=batches(min_size=2))
def test_passk_updates_at_most_the_best_rollout_of_each_group(xp, batch):
    rewards, labels, _ = batch
    out = _call(xp, "grpo_passk", *batch)
    assert np.all(out >= 0)
    for label in set(labels):
        idx = [i for i, x in enumerate(labels) if x == label]
        nonzero = [i for i in idx if out[i] != 0]
        assert len(nonzero) <= 1
        if nonzero:
            assert rewards[nonzero[0]] == max(rewards[idx])


# -- errors -------------------------------------------------------------------------------


def test_missing_inputs_and_bad_options_are_named():
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="response_lengths: the opo estimator needs the token"):
        compute_advantages(rewards, "opo", group_size=2)
    with pytest.raises(ValueError, match="reward_baselines: the remax estimator needs"):
        compute_advantages(rewards, "remax", group_size=2)
    with pytest.raises(ValueError, match=r"response_lengths: expected one value per rollout"):
        compute_advantages(rewards, "opo", group_size=2, response_lengths=[1.0, 2.0])
    with pytest.raises(ValueError, match="norm_adv_by_std: expected True or False, got 'yes'"):
        compute_advantages(rewards, "grpo_passk", group_size=2, norm_adv_by_std="yes")
    with pytest.raises(ValueError, match="f_norm: expected a positive finite number, got 0"):
        compute_advantages(rewards, "gpg", group_size=2, f_norm=0)
    with pytest.raises(ValueError, match="var_eps: expected a finite number >= 0, got -1"):
        compute_advantages(rewards, "reinforce", group_size=2, var_eps=-1)
    with pytest.raises(ValueError, match=r"std_correction: expected 0 .* got 2"):
        compute_advantages(rewards, "reinforce_baseline", group_size=2, std_correction=2)
    with pytest.raises(TypeError, match="eps: not an option of estimator 'gpg'"):
        compute_advantages(rewards, "gpg", group_size=2, eps=1e-6)
    with pytest.raises(ValueError, match="singletons: expected 'skip' for the grpo_passk"):
        compute_advantages(rewards, "grpo_passk", group_size=2, singletons="raw")
    with pytest.raises(ValueError, match=r"response_lengths: the opo estimator needs .* constant"):
        implied_slope("opo", 4, 0.5)


def test_specs_declare_skip_rules_batch_statistics_and_slopes():
    for name in ("reinforce_plus_plus_baseline", "reinforce_baseline", "reinforce", "remax"):
        assert get_spec(name).skips == "never"
    for name in ("opo", "grpo_passk", "gpg", "grpo_batch_std", "rloo_normalized"):
        assert get_spec(name).skips == "ties"
    for name in ("gpg", "grpo_batch_std", "rloo_normalized", *WHITENED):
        assert get_spec(name).batch_statistics
    assert get_spec("reinforce_plus_plus_baseline").slope_of == "dr"
    assert get_spec("rloo_normalized").slope_of == "rloo"
    assert [i.required for i in get_spec("reinforce").inputs] == [False]
    # Mirrors: verl's constants for its estimators, OpenRLHF's and TRL's for theirs.
    verl = get_convention("verl")
    assert verl.settings("reinforce_plus_plus_baseline")["singletons"] == "raw"
    assert verl.settings("grpo_passk")["singletons"] == "refuse"  # as verl's, on a group of one
    assert verl.settings("opo")["tie_atol"] == 0.0
    assert get_convention("openrlhf").settings("reinforce_baseline")["var_floor"] == 1e-8
    assert get_convention("trl").settings("grpo_batch_std")["eps"] == 1e-4
    assert get_convention("trl").settings("rloo_normalized")["eps"] == 1e-4


# -- jax.jit ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_jax_jit(name):
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        _jit_matches_reference(jax, name)


def _jit_matches_reference(jax, name):  # type: ignore[no-untyped-def]
    jnp = jax.numpy
    rng = np.random.default_rng(0)
    rewards = rng.choice([0.0, 0.5, 1.0], size=12)
    inputs = _inputs(name, rng, 12)

    @jax.jit
    def run(r, kw):
        return compute_advantages(r, name, group_size=4, **kw).advantages

    out = run(jnp.asarray(rewards), {k: jnp.asarray(v) for k, v in inputs.items()})
    tie = 0.0 if get_spec(name).skips == "never" else 1e-6
    expected = reference(name, rewards, np.arange(12) // 4, tie=tie, **inputs)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-10, atol=1e-10)


# -- theory --------------------------------------------------------------------------------

P = [0.05, 0.3, 0.5, 0.95]


def test_implied_slopes_for_binary_rewards():
    g = 8
    dr = implied_slope("dr", g, P)
    np.testing.assert_allclose(dr, 7.0)
    # Constant response lengths make opo dr; gpg, grpo_batch_std and the whitened
    # REINFORCE baselines have dr's slope up to a positive batch factor (slope_of).
    np.testing.assert_allclose(implied_slope("opo", g, P, response_lengths=5), dr)
    for name in ("gpg", "grpo_batch_std", "reinforce_baseline", "reinforce_plus_plus_baseline"):
        np.testing.assert_allclose(implied_slope(name, g, P), dr)
    np.testing.assert_allclose(implied_slope("rloo_normalized", g, P), implied_slope("rloo", g, P))
    # ReMax with any constant baseline: every rollout's reward counts, slope G.
    np.testing.assert_allclose(implied_slope("remax", g, P, reward_baselines=0.3), 8.0)
    # Pass@k: only k = 1 moves anything, A = 1 / (std + eps), std = 1/sqrt(G) (unbiased):
    # slope = G (1-p)^(G-1) / (1/sqrt(G) + eps).
    p = np.array(P)
    expected = g * (1 - p) ** (g - 1) / (1 / math.sqrt(g) + 1e-6)
    np.testing.assert_allclose(implied_slope("grpo_passk", g, P), expected, rtol=1e-12)
    unnormalised = implied_slope("grpo_passk", g, P, norm_adv_by_std=False)
    np.testing.assert_allclose(unnormalised, g * (1 - p) ** (g - 1), rtol=1e-12)


def test_binary_advantages_average_over_the_correct_rollouts():
    correct, wrong = binary_advantages("grpo_passk", 4, norm_adv_by_std=False)
    np.testing.assert_array_equal(correct, [np.nan, 1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(wrong, [0.0, 0.0, 0.0, 0.0, np.nan])

    # A hand-made estimator that gives only the first correct rollout of a group 1: the
    # mean over the k correct ones is 1/k, so k * correct[k] is the group's sum, 1.
    def first_only(rewards, group_size):
        table = np.asarray(rewards).reshape(-1, group_size)
        out = np.zeros_like(table)
        out[table[:, 0] == 1, 0] = 1.0
        return out.reshape(-1)

    correct, wrong = binary_advantages(first_only, 4)
    np.testing.assert_allclose(correct[1:], [1.0, 0.5, 1 / 3, 0.25])
    np.testing.assert_allclose(implied_slope(first_only, 4, P), _first_only_slope(np.array(P)))


def _first_only_slope(p):
    # The up-term only: sum_k C(4,k) k p^(k-1) (1-p)^(4-k) * (1/k).
    return sum(math.comb(4, k) * p ** (k - 1) * (1 - p) ** (4 - k) for k in range(1, 5))


@pytest.mark.parametrize("name", NEW)
def test_omitted_nan_rewards_are_left_out_of_every_statistic(xp, name):
    rng = np.random.default_rng(7)
    rewards, labels, _ = _random_batch(rng, "labels")
    rewards = np.concatenate([rewards, [0.5, 1.0, 0.0]])
    labels = [*labels, "p0", "p0", "p1"]
    if name == "grpo_passk":
        labels = ["p0" if label != "p0" else "p1" for label in labels]  # no group of one
    inputs = _inputs(name, rng, len(rewards))
    dropped = np.array([True] * (len(rewards) - 3) + [False, True, False])
    with_nan = np.where(dropped, rewards, np.nan)
    kept_labels = [label for label, keep in zip(labels, dropped, strict=True) if keep]
    expected = np.zeros(len(rewards))
    expected[dropped] = reference(
        name, rewards[dropped], kept_labels, **{k: v[dropped] for k, v in inputs.items()}
    )
    res = compute_advantages(
        xp.asarray(with_nan, dtype=xp.float64),
        name,
        group_ids=labels,
        nan_policy="omit",
        **_as(xp, inputs, xp.float64),
    )
    assert_close(res.advantages, expected, xp=xp, rtol=1e-10, atol=1e-10)
