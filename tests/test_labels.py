"""Labels to layouts: the O(N) slots of equal-size groups in any order (``Permuted``)
equal what the stable-argsort path gave, on every backend, bit for bit."""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages, make_groups
from advbudget.core._groups import Contiguous, Padded, Permuted, Segmented
from advbudget.core._labels import _equal_group_slots, _factorize_host
from advbudget.metrics import kappa_pairs
from advbudget.testing import to_numpy

from .references import reference

ESTIMATORS = ("budget", "grpo", "dr", "rloo")
REWARD_VALUES = [-1.0, 0.0, 0.1, 0.2, 0.3, 0.5, 1.0, 3.0]  # sums depend on their order

backend_settings = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def argsort_slots(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference: slot -> rollout by a stable argsort of the codes, and its inverse."""
    gather = np.argsort(codes, kind="stable")
    slots = np.empty_like(gather)
    slots[gather] = np.arange(codes.shape[0])
    return gather, slots


def reference_codes(labels: list) -> np.ndarray:
    """Codes 0..M-1: sorted order for int labels, first appearance for strings."""
    if isinstance(labels[0], str):
        table: dict[str, int] = {}
        return np.array([table.setdefault(x, len(table)) for x in labels], dtype=np.int64)
    return np.unique(np.asarray(labels), return_inverse=True)[1].reshape(-1)


@st.composite
def equal_size_codes(draw):
    num_groups = draw(st.integers(1, 40))
    group_size = draw(st.integers(1, 9))
    codes = np.repeat(np.arange(num_groups), group_size)
    order = draw(st.permutations(range(codes.shape[0])))
    return codes[np.array(order, dtype=np.int64)], num_groups, group_size


@st.composite
def labellings(draw):
    """Labels of a shuffled batch: equal or unequal sizes; dense, sparse (one far label)
    or negative ints, or strings; with rewards on a grid of float32-inexact values."""
    equal = draw(st.booleans())
    num_groups = draw(st.integers(1, 7))
    if equal:
        sizes = [draw(st.integers(1, 6))] * num_groups
    else:
        sizes = draw(st.lists(st.integers(1, 6), min_size=num_groups, max_size=num_groups))
    kind = draw(st.sampled_from(["dense", "offset", "sparse", "strings"]))
    names = {
        "dense": list(range(num_groups)),
        "offset": [g * 3 - 5 for g in range(num_groups)],  # negative, gaps: not dense
        "sparse": [g if g else 10**12 for g in range(num_groups)],  # np.unique's branch
        "strings": [f"uid-{g}" for g in range(num_groups)],
    }[kind]
    labels = [names[g] for g, size in enumerate(sizes) for _ in range(size)]
    order = draw(st.permutations(range(len(labels))))
    labels = [labels[i] for i in order]
    rewards = draw(
        st.lists(st.sampled_from(REWARD_VALUES), min_size=len(labels), max_size=len(labels))
    )
    return np.array(rewards), labels


@settings(max_examples=200, deadline=None)
@given(case=equal_size_codes())
def test_counting_slots_equal_the_stable_argsort(case):
    codes, num_groups, group_size = case
    gather, slots = _equal_group_slots(codes, num_groups, group_size)
    want_gather, want_slots = argsort_slots(codes)
    assert gather.dtype == slots.dtype == np.int64
    np.testing.assert_array_equal(gather, want_gather)
    np.testing.assert_array_equal(slots, want_slots)
    # Group c fills slots c*G .. c*G+G-1, its rollouts in batch order.
    np.testing.assert_array_equal(slots // group_size, codes)


def test_counting_slots_fall_back_where_keys_would_overflow():
    codes = np.array([2, 0, 1, 0, 2, 1])
    gather, slots = _equal_group_slots(codes, 2**55, 2)  # a group count past 62 key bits
    want_gather, want_slots = argsort_slots(codes)
    np.testing.assert_array_equal(gather, want_gather)
    np.testing.assert_array_equal(slots, want_slots)


@settings(max_examples=200, deadline=None)
@given(case=labellings(), dtype=st.sampled_from(["int64", "int32", "uint8", "list"]))
def test_factorisation_codes_and_sizes(case, dtype):
    _, labels = case
    host = np.asarray(labels)  # strings, or ints as numpy makes them (int64)
    if host.dtype.kind == "i" and dtype != "list":
        info = np.iinfo(dtype)
        if info.min <= host.min() and host.max() <= info.max:
            host = host.astype(dtype)
    codes, num_groups, sizes = _factorize_host(host)
    want = reference_codes(labels)
    assert codes.dtype == np.int64
    np.testing.assert_array_equal(codes, want)
    assert num_groups == int(want.max()) + 1
    if sizes is not None:
        np.testing.assert_array_equal(sizes, np.bincount(want, minlength=num_groups))
    assert not np.shares_memory(codes, host)  # never a view of the caller's labels


def _argsort_path_groups(xp, r, labels):
    """What the label path built before the counting sort: a stable argsort of the codes,
    and the gather an ``xp.argsort`` of the slots on the backend."""
    codes = reference_codes(labels)
    _, slots = argsort_slots(codes)
    group_size = int(np.bincount(codes)[0])
    device = array_api_compat.device(r)
    positions = xp.asarray(slots, device=device)
    return Permuted(xp, device, len(labels), group_size, positions, gather=xp.argsort(positions))


@pytest.mark.parametrize("estimator", ESTIMATORS)
@backend_settings
@given(case=labellings(), as_array=st.booleans())
def test_label_path_equals_the_argsort_path(xp, estimator, case, as_array):
    """Every backend, ints (as a list or a backend array) and strings, equal sizes or not:
    segment ops where the backend has them, else ``Permuted`` for equal sizes; and
    ``Permuted`` (auto or forced) has the same slots and bit-identical advantages as the
    stable-argsort path."""
    rewards, labels = case
    r = xp.asarray(rewards, dtype=xp.float32)
    ids = labels
    if as_array and not isinstance(labels[0], str) and max(map(abs, labels)) < 2**31:
        ids = xp.asarray(labels)
    groups = make_groups(r, group_ids=ids)
    if type(groups) is Contiguous:  # adjacent runs of one size: the reshape path, as before
        return
    sizes = np.bincount(reference_codes(labels))
    native = not array_api_compat.is_array_api_strict_namespace(xp)
    if sizes.shape[0] > 1 and np.all(sizes == sizes[0]):
        assert isinstance(groups, Segmented if native else Permuted)
        permuted = make_groups(r, group_ids=ids, method="permuted")
        before = _argsort_path_groups(xp, r, labels)
        for name in ("positions", "_gather"):
            got, want = getattr(permuted, name), getattr(before, name)
            assert array_api_compat.array_namespace(got) is xp
            assert got.dtype == want.dtype
            assert array_api_compat.device(got) == array_api_compat.device(want)
            np.testing.assert_array_equal(to_numpy(got), to_numpy(want))
        got = compute_advantages(r, estimator, groups=permuted).advantages
        want = compute_advantages(r, estimator, groups=before).advantages
        np.testing.assert_array_equal(to_numpy(got), to_numpy(want))  # bit for bit
    elif sizes.shape[0] > 1:  # unequal sizes: the segment layouts, as before
        assert isinstance(groups, Segmented if native else Padded)
    np.testing.assert_array_equal(to_numpy(groups.group_index()), reference_codes(labels))


def test_explicit_positions_gather_is_the_inverse(xp):
    """``group_size=G, positions=`` (OpenRLHF): the host-side inverse equals xp.argsort's."""
    slots = [5, 0, 3, 1, 2, 4, 7, 6]
    r = xp.asarray([0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.5, 2.0])
    groups = make_groups(r, group_size=4, positions=slots)
    want = xp.argsort(xp.asarray(slots))
    assert groups._gather.dtype == want.dtype
    np.testing.assert_array_equal(to_numpy(groups._gather), to_numpy(want))
    np.testing.assert_array_equal(to_numpy(groups.positions), slots)


def test_ties_in_shuffled_equal_groups_pick_the_first_in_batch_order(xp):
    """κ_eff's pair of a group: the first of tied top (bottom) rollouts in batch order,
    as the segment layout (batch order by definition) picks it."""
    rewards = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
    labels = [2, 0, 1, 2, 1, 0, 2, 1, 0, 2, 2, 1]  # wait: sizes must be equal
    labels = [2, 0, 1, 2, 1, 0, 2, 1, 0, 0, 2, 1]  # four rollouts in each of 3 groups
    r = xp.asarray(rewards, dtype=xp.float64)
    permuted = compute_advantages(
        r, "budget", groups=make_groups(r, group_ids=labels, method="permuted")
    )
    assert isinstance(permuted.groups, Permuted)
    segment_method = "padded" if array_api_compat.is_array_api_strict_namespace(xp) else "segment"
    segmented = compute_advantages(
        r, "budget", groups=make_groups(r, group_ids=labels, method=segment_method)
    )
    got, want = kappa_pairs(permuted), kappa_pairs(segmented)
    # group 0 is rollouts 1, 5, 8, 9; group 1: 2, 4, 7, 11; group 2: 0, 3, 6, 10
    assert to_numpy(got.top).tolist() == to_numpy(want.top).tolist() == [5, 2, 0]
    assert to_numpy(got.bottom).tolist() == to_numpy(want.bottom).tolist() == [1, 4, 3]


@settings(max_examples=200, deadline=None)
@given(
    slots=st.integers(1, 4).flatmap(
        lambda g: st.integers(1, 5).flatmap(
            lambda m: st.one_of(
                st.permutations(range(g * m)),
                st.lists(st.integers(-2, g * m + 1), min_size=g * m, max_size=g * m),
            ).map(lambda s: (g, list(s)))
        )
    )
)
def test_explicit_positions_are_checked_and_inverted(slots):
    """A permutation of 0..N-1 is accepted and inverted; repeats, gaps or slots out of
    range raise the same error as ever."""
    group_size, positions = slots
    n = len(positions)
    r = np.zeros(n)
    if sorted(positions) != list(range(n)):
        with pytest.raises(ValueError, match=rf"positions: expected a permutation of 0\.\.{n - 1}"):
            make_groups(r, group_size=group_size, positions=positions)
        return
    groups = make_groups(r, group_size=group_size, positions=positions)
    np.testing.assert_array_equal(groups._gather, np.argsort(positions))
    np.testing.assert_array_equal(groups.positions, positions)


# -- the fast label paths against a plain float64 / stable-argsort reference -----------

ID_KINDS = {
    "dense": lambda m, draw: list(range(m)),  # ids 0..M-1: one sort when M divides N
    "negative": lambda m, draw: [g - m // 2 - 1 for g in range(m)],  # dense, low < 0
    "gaps": lambda m, draw: [3 * g for g in range(m)],  # dense range, values missing
    "sparse": lambda m, draw: draw(  # one sort of packed (label, row) keys
        st.lists(st.integers(0, 10**12), min_size=m, max_size=m, unique=True)
    ),
    "huge": lambda m, draw: draw(  # too wide to pack with the row: np.unique
        st.lists(st.integers(-(2**62), 2**62), min_size=m, max_size=m, unique=True)
    ),
    "strings": lambda m, draw: draw(
        st.lists(st.text("abc", min_size=1, max_size=4), min_size=m, max_size=m, unique=True)
    ),
}


@st.composite
def id_batches(draw):
    """Shuffled labels of every shape (equal sizes, unequal, one group, all singletons)
    and kind, as a list or a numpy array, with float64 rewards on a grid."""
    shape = draw(st.sampled_from(["equal", "unequal", "one group", "singletons"]))
    if shape == "equal":
        sizes = [draw(st.integers(2, 6))] * draw(st.integers(2, 12))
    elif shape == "unequal":
        sizes = draw(st.lists(st.integers(1, 6), min_size=2, max_size=12))
    elif shape == "one group":
        sizes = [draw(st.integers(1, 12))]
    else:
        sizes = [1] * draw(st.integers(1, 24))
    names = ID_KINDS[draw(st.sampled_from(sorted(ID_KINDS)))](len(sizes), draw)
    labels = [names[g] for g, size in enumerate(sizes) for _ in range(size)]
    order = draw(st.permutations(range(len(labels))))
    labels = [labels[i] for i in order]
    ids: Any = labels
    if not isinstance(labels[0], str) and draw(st.booleans()):
        ids = np.asarray(labels)  # int64
        if np.abs(ids).max() < 2**31 and draw(st.booleans()):
            ids = ids.astype(np.int32)
    rewards = draw(
        st.lists(st.sampled_from(REWARD_VALUES), min_size=len(labels), max_size=len(labels))
    )
    return np.array(rewards), labels, ids


@pytest.mark.filterwarnings("ignore:group_ids. every one of the")
@settings(max_examples=150, deadline=None)
@given(case=id_batches())
@example(case=(np.array([0.0, 1.0, 0.5, 3.0]), [1, 0, 1, 1], [1, 0, 1, 1]))  # span | N, unequal
@example(case=(np.array([1.0, 0.0]), [7, 7], [7, 7]))  # one group, adjacent
def test_label_layouts_equal_a_stable_argsort_reference(case):
    """numpy, every layout the labels can take: the groups, their order and the order
    inside them are a stable argsort of the reference codes (ints in sorted order,
    strings in order of first appearance), and the advantages equal a float64 loop."""
    rewards, labels, ids = case
    codes = reference_codes(labels)
    sizes = np.bincount(codes)
    groups = make_groups(rewards, group_ids=ids)
    if type(groups) is Contiguous:  # adjacent runs of one size: groups in batch order
        assert labels == [labels[i - i % groups.group_size] for i in range(len(labels))]
    else:  # numpy has segment ops: any other labels, equal sizes or not
        assert isinstance(groups, Segmented)
        np.testing.assert_array_equal(groups.group_index(), codes)
        np.testing.assert_array_equal(groups.sizes(np.int64), sizes)
    layouts = [groups]
    if sizes.shape[0] > 1 and np.all(sizes == sizes[0]):  # the slots, asked for
        permuted = make_groups(rewards, group_ids=ids, method="permuted")
        assert isinstance(permuted, Permuted)
        assert permuted.group_size == sizes[0]
        order = np.argsort(codes, kind="stable")
        np.testing.assert_array_equal(permuted._gather, order)
        np.testing.assert_array_equal(permuted.positions, np.argsort(order))
        np.testing.assert_array_equal(permuted.rows(rewards), rewards[order].reshape(-1, sizes[0]))
        np.testing.assert_array_equal(permuted.group_index(), codes)
        layouts.append(permuted)
    for method in ("segment", "padded"):  # the codes themselves (not only the slot order)
        forced = make_groups(rewards, group_ids=ids, method=method)
        np.testing.assert_array_equal(forced.group_index(), codes)
    for estimator in ("budget", "grpo"):
        want = reference(estimator, rewards, labels)
        for layout in layouts:
            got = compute_advantages(rewards, estimator, groups=layout).advantages
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_label_slots_at_a_million_rows_equal_a_stable_argsort():
    """The packed keys at full width (N = 2**20 rows: 20 row bits), shuffled ids 0..M-1
    and the same ids spread out (sparse, one sort) and offset (negative)."""
    rng = np.random.default_rng(0)
    n, group_size = 2**20, 8
    codes = np.repeat(np.arange(n // group_size), group_size)[rng.permutation(n)]
    rewards = rng.random(n)
    order = np.argsort(codes, kind="stable")
    for ids in (codes, codes * 1_000_003 + 17, codes - n):
        groups = make_groups(rewards, group_ids=ids, method="permuted")
        assert isinstance(groups, Permuted)
        np.testing.assert_array_equal(groups._gather, order)
        np.testing.assert_array_equal(groups.flat(groups.rows(rewards)), rewards)


@settings(max_examples=60, deadline=None)
@given(
    group_size=st.integers(1, 33),
    groups=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
    strided=st.booleans(),
)
def test_a_groups_count_of_true_is_exact_on_every_size(
    group_size: int, groups: int, seed: int, strided: bool
) -> None:
    """Contiguous numpy groups count a bool mask by its bits (sizes 1, 2, 4 and multiples
    of 8), else by a product: both give each group's number of True, whatever the layout
    of the mask in memory."""
    from advbudget.core._groups import _bit_count

    rng = np.random.default_rng(seed)
    wide = rng.random((groups, 2 * group_size)) < rng.random()
    mask = wide[:, ::2] if strided else wide[:, :group_size]
    xp = array_api_compat.array_namespace(mask)
    layout = Contiguous(xp, None, groups * group_size, group_size)
    counted = layout.count(mask, np.float64)
    assert counted.shape == (groups, 1)
    np.testing.assert_array_equal(counted[:, 0], mask.sum(axis=1))
    bits = _bit_count(mask, group_size)
    handled = group_size in (1, 2, 4) or group_size % 8 == 0
    assert (bits is not None) == handled
