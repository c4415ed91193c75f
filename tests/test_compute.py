"""compute_advantages and make_groups around the estimators, on every backend: labels of
any kind in any order against the float64 reference, the layout each gets, OpenRLHF's
explicit positions, dtypes (integers, booleans, float16, bfloat16), near ties, omitted
NaN rewards, the result's fields and options, the registry and its aliases, token
advantages. (Each family's own values: tests/estimators/.)"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest

from advbudget import (
    budget_advantage,
    compute_advantages,
    estimator_names,
    get_estimator,
    make_groups,
    register_estimator,
    token_advantages,
)
from advbudget.core._groups import Contiguous, Padded, Permuted, Segmented
from advbudget.testing import assert_close, to_numpy

from .estimators._shared import FUNCTIONS
from .references import reference

LABELLED = {
    "strings, shuffled, sizes 3/1/2/4": (
        [0.0, 1.0, 5.0, 1.0, 0.0, 2.0, 1.0, 0.3, 0.0, 0.7],
        ["b", "a", "c", "a", "b", "d", "d", "d", "a", "d"],
    ),
    "ints, sparse and negative labels": (
        [1.0, 0.0, 0.0, 1.0, 1.0, 0.5],
        [-7, 10**12, -7, 10**12, 3, 3],
    ),
    "equal sizes, shuffled (Permuted)": (
        [1.0, 0.0, 0.5, 2.0, 0.0, 1.0, 0.25, 1.0],
        ["q", "p", "p", "r", "q", "r", "s", "s"],
    ),
    "uuid-like strings, interleaved": (
        [1.0, 0.0, 0.0, 0.0, 1.0, 1.0],
        ["7c0e-1", "7c0e-1", "7c0e-1", "02ab-2", "02ab-2", "02ab-2"],
    ),
}


@pytest.mark.parametrize("method", ["auto", "segment", "padded", "permuted"])
@pytest.mark.parametrize("estimator", FUNCTIONS)
@pytest.mark.parametrize("case", LABELLED)
def test_labels_match_reference(xp, case, estimator, method):
    rewards, labels = LABELLED[case]
    native = not array_api_compat.is_array_api_strict_namespace(xp)
    r = xp.asarray(rewards, dtype=xp.float64)
    if method == "permuted" and len({labels.count(label) for label in labels}) > 1:
        return  # groups of several sizes: refused (test_layout_choice)
    if method == "segment" and not native:
        with pytest.raises(TypeError, match="no native segment operations"):
            make_groups(r, group_ids=labels, method=method)
        return
    groups = make_groups(r, group_ids=labels, method=method)
    res = compute_advantages(r, estimator, groups=groups)
    assert_close(res.advantages, reference(estimator, rewards, labels), xp=xp)


def test_layout_choice(xp):
    r = xp.zeros(6, dtype=xp.float64)
    assert isinstance(make_groups(r, group_size=3), Contiguous)
    # Contiguous labels are detected, whatever their type.
    assert isinstance(make_groups(r, group_ids=["u", "u", "u", "v", "v", "v"]), Contiguous)
    assert isinstance(make_groups(r, group_ids=np.array([9, 9, 4, 4, 1, 1])), Contiguous)
    device_ids = xp.asarray([5, 5, 2, 2, 8, 8])
    assert make_groups(r, group_ids=device_ids).num_groups == 3
    # Two runs of the same label are one group, not contiguous.
    repeated = make_groups(r, group_ids=["u", "u", "v", "v", "u", "u"])
    assert not isinstance(repeated, Contiguous)
    assert repeated.num_groups == 2
    native = not array_api_compat.is_array_api_strict_namespace(xp)
    unequal = make_groups(r, group_ids=[0, 1, 0, 1, 0, 2])
    assert isinstance(unequal, Segmented if native else Padded)
    assert repr(unequal).endswith("(num_rollouts=6, num_groups=3)")
    # Equal sizes in any order: segment ops where the backend has them (codes counted in
    # O(N)), else the slots: one gather, then Contiguous's reshapes (method="permuted").
    shuffled = make_groups(r, group_ids=[0, 1, 0, 1, 0, 1])
    assert isinstance(shuffled, Segmented if native else Permuted)
    assert to_numpy(shuffled.group_index()).tolist() == [0, 1, 0, 1, 0, 1]
    permuted = make_groups(r, group_ids=[0, 1, 0, 1, 0, 1], method="permuted")
    assert repr(permuted) == "Permuted(num_rollouts=6, group_size=3)"
    assert to_numpy(permuted.group_index()).tolist() == [0, 1, 0, 1, 0, 1]
    with pytest.raises(
        ValueError,
        match=r"^group_ids: method='permuted' expected groups of one size, got sizes from 1 "
        r"to 3 in 3 groups$",
    ):
        make_groups(r, group_ids=[0, 1, 0, 1, 0, 2], method="permuted")
    with pytest.raises(ValueError, match=r"^method: 'permuted' builds the slots of labels"):
        make_groups(r, group_ids=[0, 1, 0, 1, 0, 1], num_groups=2, method="permuted")
    with pytest.raises(
        ValueError,
        match=r"^method: expected one of \('auto', 'segment', 'padded', 'permuted'\), got 'sort'$",
    ):
        make_groups(r, group_ids=[0, 1, 0, 1, 0, 1], method="sort")


def test_explicit_positions(xp):
    """OpenRLHF's layout: rollout k is slot positions[k] of the prompt-major [M, G] block."""
    rewards = [0.0, 1.0, 1.0, 0.5, 0.0, 1.0]
    slots = [3, 0, 4, 1, 2, 5]  # group 0: rollouts 1, 3, 4; group 1: rollouts 0, 2, 5
    r = xp.asarray(rewards, dtype=xp.float64)
    groups = make_groups(r, group_size=3, positions=slots)
    assert isinstance(groups, Permuted)
    labels = [s // 3 for s in slots]
    for estimator in FUNCTIONS:
        res = compute_advantages(r, estimator, groups=groups)
        assert_close(res.advantages, reference(estimator, rewards, labels), xp=xp)
    assert to_numpy(groups.group_index()).tolist() == labels
    with pytest.raises(ValueError, match=r"positions: expected a permutation of 0\.\.5"):
        make_groups(r, group_size=3, positions=[0, 0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="positions: expected 6 integer slots"):
        make_groups(r, group_size=3, positions=[0, 1, 2])
    with pytest.raises(ValueError, match="positions: expected together with group_size"):
        make_groups(r, group_ids=labels, positions=slots)


def test_device_labels_shuffled(xp):
    rewards = [1.0, 0.0, 0.5, 0.0, 1.0, 0.25, 2.0]
    labels = [30, 10, 30, 20, 10, 10, 30]
    r = xp.asarray(rewards, dtype=xp.float64)
    res = compute_advantages(r, "budget", group_ids=xp.asarray(labels))
    assert_close(res.advantages, reference("budget", rewards, labels), xp=xp)
    assert res.num_groups == 3


@pytest.mark.parametrize("estimator", FUNCTIONS)
def test_dtypes(xp, estimator):
    fn = FUNCTIONS[estimator]
    ints = xp.asarray([1, 0, 0, 1, 1, 1])
    out = fn(ints, group_size=3)
    default = xp.__array_namespace_info__().default_dtypes()["real floating"]
    assert out.dtype == default
    assert fn(xp.asarray([True, False, False, True]), group_size=2).dtype == default
    assert fn(xp.asarray([1.0, 0.0], dtype=xp.float32), group_size=2).dtype == xp.float32
    if hasattr(xp, "float16"):
        half = fn(xp.asarray([1.0, 0.0, 0.0, 0.0], dtype=xp.float16), group_size=4)
        assert half.dtype == xp.float32
        expected = reference(estimator, [1, 0, 0, 0], [0] * 4)
        assert_close(half, expected, xp=xp, dtype=xp.float32)
    float64 = xp.asarray([1.0, 0.0], dtype=xp.float64)
    if float64.dtype == xp.float64:  # jax without x64 makes it float32
        assert fn(float64, group_size=2).dtype == xp.float64


def test_torch_bfloat16_is_upcast():
    torch = pytest.importorskip("torch")
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5], dtype=torch.bfloat16)
    out = budget_advantage(rewards, group_size=4)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), reference("budget", [1, 0, 0, 0.5], [0] * 4), rtol=1e-6)


def test_torch_device_and_grad_free():
    torch = pytest.importorskip("torch")
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], requires_grad=False)
    out = budget_advantage(rewards, group_ids=torch.tensor([0, 0, 1, 1]))
    assert out.device == rewards.device
    assert isinstance(out, torch.Tensor)


def test_near_ties_are_ties_and_tolerance_is_configurable():
    b = np.float32(0.3)
    a = np.nextafter(b, np.float32(1))  # one float32 ulp apart
    rewards = np.array([a, b, b, b], dtype=np.float32)
    np.testing.assert_array_equal(budget_advantage(rewards, group_size=4), 0.0)
    summed = np.array([0.1 + 0.2, 0.3, 0.3, 0.3])  # float64 rounding noise
    assert summed[0] != summed[1]
    np.testing.assert_array_equal(budget_advantage(summed, group_size=4), 0.0)
    res = compute_advantages(rewards, "budget", group_size=4, tie_rtol=0, tie_atol=0)
    assert res.num_skipped == 0
    assert float(np.abs(res.advantages).max()) == pytest.approx(0.75)
    # Real gaps of 1e-3 on the usual scale are not ties.
    assert compute_advantages(np.array([1.0, 1.001]), "budget", group_size=2).num_skipped == 0


def test_nan_policy_omit(xp):
    nan = float("nan")
    rewards = xp.asarray([1.0, nan, 0.0, 0.0, nan, nan, 1.0, 0.0], dtype=xp.float64)
    labels = [0, 0, 0, 0, 1, 1, 2, 2]
    for estimator in FUNCTIONS:
        res = compute_advantages(rewards, estimator, group_ids=labels, nan_policy="omit")
        expected = reference(estimator, [1.0, 0.0, 0.0, 1.0, 0.0], [0, 0, 0, 2, 2])
        full = np.zeros(8)
        full[[0, 2, 3, 6, 7]] = expected
        assert_close(res.advantages, full, xp=xp)
        assert to_numpy(res.valid).tolist() == [True, False, True, True, False, False, True, True]
        assert to_numpy(res.group_skipped).tolist() == [False, True, False]


def test_result_fields(xp):
    rewards = xp.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.0], dtype=xp.float64)
    labels = ["a", "b", "c", "a", "b", "c", "a", "b", "c"]
    res = compute_advantages(rewards, "budget", group_ids=labels)
    assert res.estimator == "budget"
    assert res.num_groups == 3
    assert res.num_skipped == 0
    assert to_numpy(res.group_index).tolist() == [0, 1, 2] * 3
    # a: [1, 1, 0] -> 1/6, -1/3; b: [0, 1, .5] -> -1/3, 1/3; c: [0, 1, 0] -> -1/3, 2/3
    assert_close(res.group_advantage_gap, [0.5, 2 / 3, 1.0], xp=xp)
    contiguous = compute_advantages(rewards, "dr", group_size=3)
    assert to_numpy(contiguous.group_index).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert to_numpy(contiguous.valid).tolist() == [True] * 3 + [False] * 3 + [True] * 3
    assert_close(contiguous.group_advantage_gap, [1.0, 0.0, 0.5], xp=xp)


def test_registry_and_aliases():
    assert {"budget", "grpo", "dr", "rloo"} <= set(estimator_names())
    assert get_estimator("reward_budget") is get_estimator("budget")
    assert get_estimator("dr_grpo") is get_estimator("dr")
    assert get_estimator("group_norm") is get_estimator("grpo")
    res = compute_advantages(np.array([1.0, 0.0]), "reward_budget", group_size=2)
    assert res.estimator == "budget"

    def halved_budget(grouped, *, budget=1.0):
        return get_estimator("budget")(grouped, budget=budget / 2)

    out = compute_advantages(np.array([1.0, 0.0]), halved_budget, group_size=2)
    np.testing.assert_allclose(out.advantages, [0.25, -0.25])
    assert out.estimator == "halved_budget"
    # The registry is restored after every test (tests/conftest.py).
    register_estimator("halved", halved_budget)
    assert compute_advantages(np.array([1.0, 0.0]), "halved", group_size=2).estimator == "halved"
    register_estimator("halved", halved_budget)  # the same function again is fine
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("halved", lambda g: g.gap)
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("budget", halved_budget)
    with pytest.raises(ValueError, match=r"'dr_grpo' is already registered \(an alias of 'dr'\)"):
        register_estimator("dr_grpo", halved_budget)


def test_python_lists_are_accepted():
    np.testing.assert_allclose(budget_advantage([1, 0], group_size=2), [0.5, -0.5])


def test_token_advantages(xp):
    adv = xp.asarray([0.5, -0.25], dtype=xp.float32)
    mask = xp.asarray([[1, 1, 0], [0, 1, 1]])
    out = token_advantages(adv, mask)
    assert_close(out, [[0.5, 0.5, 0.0], [0.0, -0.25, -0.25]], xp=xp, dtype=xp.float32)
    bool_mask = xp.asarray([[True, False, False], [True, True, True]])
    assert_close(token_advantages(adv, bool_mask), [[0.5, 0, 0], [-0.25] * 3], xp=xp)


def test_the_result_carries_the_options_it_was_computed_with() -> None:
    """Defaults filled in and the given ones kept: what an adapter's per-token step reads
    (verl's and OpenRLHF's reinforce whiten their returns with them)."""
    from advbudget import compute_advantages

    result = compute_advantages(
        [1.0, 0.0, 0.5, 0.5],
        "reinforce",
        group_size=2,
        var_floor=0.25,
        response_lengths=[1, 2, 3, 4],
    )
    assert dict(result.options) == {
        "std_correction": 0,
        "var_eps": 0.0,
        "var_floor": 0.25,
        "std_norm": True,
    }
    assert dict(compute_advantages([1.0, 0.0], "budget", group_size=2).options) == {"budget": 1.0}
