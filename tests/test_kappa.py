"""κ_eff in two halves: kappa_pairs / kappa_eff_of_pairs, and the sequence reductions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages, make_groups, token_advantages
from advbudget.metrics import (
    KappaPairs,
    kappa_eff,
    kappa_eff_of_pairs,
    kappa_metric_dict,
    kappa_pairs,
    sequence_advantages,
    sequence_logprobs,
)
from advbudget.testing import assert_close, to_numpy

LAYOUTS = ("group_size", "shuffled_ids", "unequal_sizes", "padded")


def _batch(layout: str) -> tuple[np.ndarray, dict[str, Any]]:
    """Rewards and the grouping keywords of one layout (3 groups, one of them constant)."""
    if layout == "group_size":
        rewards = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.5, 1.0])
        return rewards, {"group_size": 4}
    if layout in ("shuffled_ids", "padded"):
        labels = ["b", "a", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c"]
        rewards = np.array([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 1.0])
        return rewards, {"group_ids": labels}
    labels = [2, 0, 0, 1, 2, 0, 2, 2, 1]  # sizes 3, 2, 4; group 1 constant
    rewards = np.array([1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.25, 1.0, 0.5])
    return rewards, {"group_ids": labels}


def _result(xp: Any, layout: str, **options: Any) -> Any:
    rewards, grouping = _batch(layout)
    r = xp.asarray(rewards, dtype=xp.float64)
    if layout == "padded":
        grouping = {"groups": make_groups(r, method="padded", **grouping)}
    return compute_advantages(r, "budget", **grouping, **options)


def reference_pairs(result: Any) -> tuple[list[int], list[int], list[int]]:
    """By hand: per group in group order, first max / first min over rollouts that have a
    reward, kept groups with a gap only."""
    adv = to_numpy(result.advantages)
    index = to_numpy(result.group_index)
    skipped = to_numpy(result.group_skipped)
    valid = to_numpy(result.valid)  # in a kept group: the rollout has a reward
    tops, bottoms, groups = [], [], []
    for g in range(result.num_groups):
        members = [i for i in range(len(adv)) if index[i] == g and valid[i]]
        if skipped[g] or not members:
            continue
        values = [adv[i] for i in members]
        if max(values) - min(values) <= 0:
            continue
        tops.append(members[values.index(max(values))])
        bottoms.append(members[values.index(min(values))])
        groups.append(g)
    return tops, bottoms, groups


def old_kappa_eff(change: Any, advantages: Any, groups: Any) -> Any:
    """The pre-split ``kappa_eff`` selection (metrics.py before the core's _kappa)."""
    xp = groups.xp
    n = groups.num_rollouts
    rows = groups.rows(advantages)
    top, bottom = groups.max(rows), groups.min(rows)
    position = groups.rows(xp.arange(n, device=groups.device))
    first_top = groups.min(xp.where(rows == groups.expand(top), position, n))
    first_bottom = groups.min(xp.where(rows == groups.expand(bottom), position, n))
    values = xp.take(change, groups.per_group(first_top)) - xp.take(
        change, groups.per_group(first_bottom)
    )
    return values[groups.per_group(top - bottom) > 0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kappa_pairs_match_a_hand_selection(xp: Any, layout: str) -> None:
    result = _result(xp, layout)
    pairs = kappa_pairs(result)
    tops, bottoms, groups = reference_pairs(result)
    assert len(groups) == 2  # one constant group gives no pair
    assert to_numpy(pairs.top).tolist() == tops
    assert to_numpy(pairs.bottom).tolist() == bottoms
    assert to_numpy(pairs.group).tolist() == groups
    assert to_numpy(pairs.rows()).tolist() == sorted(set(tops + bottoms))
    assert pairs.num_rollouts == result.advantages.shape[0]
    assert len(pairs) == 2
    for name in ("top", "bottom", "group"):
        assert type(getattr(pairs, name)) is type(result.advantages)


def test_kappa_pairs_ties_take_the_first_in_batch_order(xp: Any) -> None:
    # Rollouts 1 and 3 tie for the max, 0 and 2 for the min (shuffled labels too).
    rewards = xp.asarray([0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0], dtype=xp.float64)
    pairs = kappa_pairs(compute_advantages(rewards, group_size=4))
    assert to_numpy(pairs.top).tolist() == [1, 4]
    assert to_numpy(pairs.bottom).tolist() == [0, 6]
    labels = [5, 9, 5, 9, 5, 9, 5, 9]  # group 5: 0, 0, 1, 0; group 9: 1, 1, 1, 0
    pairs = kappa_pairs(compute_advantages(rewards, group_ids=labels))
    assert sorted(
        zip(to_numpy(pairs.top).tolist(), to_numpy(pairs.bottom).tolist(), strict=True)
    ) == [
        (1, 7),
        (4, 0),
    ]


def test_skipped_groups_and_missing_rewards_give_no_pair(xp: Any) -> None:
    # Group 0 is a tie (skipped); group 1 has a NaN reward, left out under "omit":
    # its advantage 0 would otherwise be the group's smallest.
    rewards = xp.asarray([1.0, 1.0, 1.0, float("nan"), 1.0, 0.5], dtype=xp.float64)
    result = compute_advantages(rewards, "budget", group_size=3, nan_policy="omit")
    assert to_numpy(result.group_skipped).tolist() == [True, False]
    pairs = kappa_pairs(result)
    assert to_numpy(pairs.top).tolist() == [4]
    assert to_numpy(pairs.bottom).tolist() == [5]
    assert to_numpy(pairs.group).tolist() == [1]
    # A batch whose every group is skipped: no pairs, empty κ_eff, count 0.
    none = kappa_pairs(compute_advantages(xp.ones(4, dtype=xp.float64), group_size=2))
    assert len(none) == 0
    assert int(none.rows().shape[0]) == 0
    values = kappa_eff_of_pairs(none, xp.zeros(4), xp.zeros(4))
    assert values.shape[0] == 0
    assert kappa_metric_dict(values)["advbudget/kappa_eff/count"] == 0.0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kappa_eff_of_pairs_all_rows_or_only_the_pair_rows(xp: Any, layout: str) -> None:
    result = _result(xp, layout)
    n = int(result.advantages.shape[0])
    rng = np.random.default_rng(0)
    old_np, new_np = -rng.uniform(1, 5, n), -rng.uniform(1, 5, n)
    old, new = xp.asarray(old_np), xp.asarray(new_np)
    pairs = kappa_pairs(result)
    tops, bottoms, _ = reference_pairs(result)
    change = new_np - old_np
    expected = [change[t] - change[b] for t, b in zip(tops, bottoms, strict=True)]
    assert_close(kappa_eff_of_pairs(pairs, old, new), expected, xp=xp)
    rows = pairs.rows()
    assert_close(
        kappa_eff_of_pairs(pairs, xp.take(old, rows), xp.take(new, rows), rows=rows),
        expected,
        xp=xp,
    )
    # The same as the old kappa_eff selection, bit for bit.
    old_values = old_kappa_eff(new - old, result.advantages, result.groups)
    assert to_numpy(kappa_eff_of_pairs(pairs, old, new)).tolist() == to_numpy(old_values).tolist()
    assert to_numpy(kappa_eff(old, new, result.advantages, groups=result.groups)).tolist() == (
        to_numpy(old_values).tolist()
    )


def test_kappa_eff_of_pairs_errors() -> None:
    pairs = kappa_pairs(np.array([1.0, -1.0, 0.5, -0.5]), group_size=2)
    with pytest.raises(ValueError, match="values: expected one entry per rollouts"):
        kappa_eff_of_pairs(pairs, np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="rows: expected sorted rollout indices that contain"):
        kappa_eff_of_pairs(pairs, np.zeros(3), np.zeros(3), rows=np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="logp_new: expected the shape of logp_old"):
        kappa_eff_of_pairs(pairs, np.zeros(4), np.zeros(3))
    with pytest.raises(ValueError, match="logp_old: expected sequence log-probs"):
        kappa_eff_of_pairs(pairs, np.zeros((4, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="groups: an AdvantageResult carries its grouping"):
        kappa_pairs(compute_advantages(np.array([1.0, 0.0]), group_size=2), group_size=2)


def test_reindexed_maps_pairs_through_a_permutation(xp: Any) -> None:
    # Advantages computed in prompt-major order; the trainer's order is a permutation.
    order = [2, 0, 3, 1]  # order[k]: the prompt-major position of trainer row k
    rewards = xp.asarray([1.0, 0.0, 0.0, 1.0], dtype=xp.float64)  # prompt-major
    pairs = kappa_pairs(compute_advantages(rewards, group_size=2))  # tops 0, 3; bottoms 1, 2
    position = np.empty(4, dtype=np.int64)
    position[order] = np.arange(4)
    moved = pairs.reindexed(xp.asarray(position))
    assert to_numpy(moved.top).tolist() == [1, 2]
    assert to_numpy(moved.bottom).tolist() == [3, 0]
    assert isinstance(moved, KappaPairs)


def test_sequence_logprobs_and_advantages(xp: Any) -> None:
    logp = xp.asarray([[-1.0, -2.0, float("-inf")], [-4.0, 0.5, 0.5]], dtype=xp.float64)
    mask = xp.asarray([[1, 1, 0], [1, 0, 0]])
    assert_close(sequence_logprobs(logp, mask), [-3.0, -4.0], xp=xp)
    assert_close(sequence_logprobs(logp, mask, length_normalized=True), [-1.5, -4.0], xp=xp)
    assert_close(sequence_logprobs(logp, mask != 0), [-3.0, -4.0], xp=xp)
    if hasattr(xp, "float16"):  # half-precision inputs sum in float32
        assert sequence_logprobs(xp.astype(logp, xp.float16), mask).dtype == xp.float32
    # the inverse of token_advantages, exact whatever the length; mean if tokens vary; 0 empty
    adv = xp.asarray([0.1, -0.3, 0.7], dtype=xp.float64)
    long_mask = xp.asarray([[1] * 7, [1, 1, 1, 0, 0, 0, 0], [0] * 7])
    back = sequence_advantages(token_advantages(adv, long_mask), long_mask)
    assert to_numpy(back).tolist() == [0.1, -0.3, 0.0]
    varying = xp.asarray([[1.0, 2.0, 9.0]], dtype=xp.float64)
    assert_close(sequence_advantages(varying, xp.asarray([[1, 1, 0]])), [1.5], xp=xp)
    with pytest.raises(ValueError, match="response_mask: expected the shape of token_logprobs"):
        sequence_logprobs(logp, mask[:, :2])


def test_kappa_eff_by_hand_from_token_log_probs(xp: Any) -> None:
    """The chain every trainer runs: token log-probs before and after an update, their
    sequence sums, the pairs, κ_eff. Group a's winner goes -5 -> -4.5 and its loser -4 ->
    -4.5 (κ_eff 1); group b's winner -3 -> -1, its loser unchanged (κ_eff 2)."""
    old = xp.asarray([[-2.0, -3.0], [-1.0, -3.0], [-3.0, 7.0], [-6.0, 7.0]], dtype=xp.float64)
    new = xp.asarray([[-1.5, -3.0], [-1.5, -3.0], [-1.0, 9.0], [-6.0, 9.0]], dtype=xp.float64)
    mask = xp.asarray([[1, 1], [1, 1], [1, 0], [1, 0]])
    advantages = xp.asarray([0.5, -0.5, 0.5, -0.5], dtype=xp.float64)
    pairs = kappa_pairs(advantages, group_ids=["a", "a", "b", "b"])
    values = kappa_eff_of_pairs(pairs, sequence_logprobs(old, mask), sequence_logprobs(new, mask))
    assert_close(values, [1.0, 2.0], xp=xp)
    metrics = kappa_metric_dict(values)
    assert metrics["advbudget/kappa_eff/mean"] == pytest.approx(1.5)
    assert metrics["advbudget/kappa_eff/count"] == 2.0


def test_kappa_metric_dict() -> None:
    stats = kappa_metric_dict(np.array([1.0, 3.0]), prefix="x/")
    assert list(stats) == [
        f"x/kappa_eff/{k}" for k in ("mean", "median", "std", "min", "max", "count")
    ]
    assert stats["x/kappa_eff/mean"] == 2.0
    assert stats["x/kappa_eff/count"] == 2.0


@st.composite
def batches(draw: Any) -> tuple[np.ndarray, list[int], np.ndarray, np.ndarray]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    labels = [g * 3 + 1 for g, size in enumerate(sizes) for _ in range(size)]
    labels = [labels[i] for i in draw(st.permutations(range(len(labels))))]
    n = len(labels)
    rewards = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n)))
    logps = st.lists(st.floats(-8, 0, allow_nan=False, width=32), min_size=n, max_size=n)
    return rewards, labels, np.array(draw(logps)), np.array(draw(logps))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=batches(), estimator=st.sampled_from(["budget", "grpo", "rloo"]))
def test_property_pairs_and_values(xp: Any, batch: Any, estimator: str) -> None:
    rewards, labels, old_np, new_np = batch
    result = compute_advantages(xp.asarray(rewards, dtype=xp.float64), estimator, group_ids=labels)
    pairs = kappa_pairs(result)
    tops, bottoms, groups = reference_pairs(result)
    assert to_numpy(pairs.top).tolist() == tops
    assert to_numpy(pairs.bottom).tolist() == bottoms
    assert to_numpy(pairs.group).tolist() == groups
    adv = to_numpy(result.advantages)
    assert all(adv[t] > adv[b] for t, b in zip(tops, bottoms, strict=True))
    old, new = xp.asarray(old_np), xp.asarray(new_np)
    full = kappa_eff_of_pairs(pairs, old, new)
    rows = pairs.rows()
    subset = kappa_eff_of_pairs(pairs, xp.take(old, rows), xp.take(new, rows), rows=rows)
    assert to_numpy(full).tolist() == to_numpy(subset).tolist()
    # swapping old and new flips every κ_eff
    assert_close(kappa_eff_of_pairs(pairs, new, old), -to_numpy(full), xp=xp)


def test_ties_follow_the_declared_slot_order_of_explicit_positions():
    """OpenRLHF's prompt-major slots: the first of tied rollouts is the first slot."""
    import numpy as np

    from advbudget import compute_advantages, make_groups
    from advbudget.metrics import kappa_pairs

    rewards = np.array([1.0, 1.0, 0.0, 0.0])  # one group of 4, two tied at the top
    groups = make_groups(rewards, group_size=4, positions=[3, 1, 0, 2])
    pairs = kappa_pairs(compute_advantages(rewards, "budget", groups=groups))
    assert pairs.top.tolist() == [1]  # slot 1 comes before slot 3
    assert pairs.bottom.tolist() == [2]  # slot 0
    plain = kappa_pairs(compute_advantages(rewards, "budget", group_size=4))
    assert plain.top.tolist() == [0]
    assert plain.bottom.tolist() == [2]
