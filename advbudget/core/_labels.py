"""From labels to a layout, on the host: contiguity detection, factorisation of labels
into codes ``0..M-1``, the slots of equal-size groups in any order, and the choice of
``Contiguous`` / ``Segmented`` / ``Permuted`` / ``Padded``.

Strings are factorised with a dict, small-range ints (the usual shuffled ids ``0..M-1``)
with a bincount, both O(N); the codes then go to the backend's segment ops. Ints whose
range is too wide for a table, or whose slot order is wanted (equal sizes on a backend
without segment ops), take one SIMD sort of packed ``(label, row)`` keys instead, which
gives the codes, the group sizes and the slot order together.

Unlike the layouts (pure Array API, jit-safe), code here may use numpy freely: labels are
factorised on the host even when they live on a device (a copy of N ints; on one CPU
core numpy sorts 1M packed keys in ~10 ms, where torch's stable sort took ~130 ms).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import array_api_compat
import numpy as np

from .. import checks
from ._arrays import (
    Array,
    Namespace,
    as_array,
    backend,
    check_same_device,
    device_of,
    is_traced,
    to_host,
)
from ._groups import (
    GROUP_METHODS,
    Contiguous,
    GroupMethod,
    Groups,
    Padded,
    Permuted,
    Segmented,
    inverse_permutation,
)
from ._segment_ops import SEGMENT_OPS


def make_groups(
    rewards: Any,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    num_groups: int | None = None,
    method: GroupMethod = "auto",
    positions: Any = None,
) -> Groups:
    """Group the rollouts of ``rewards`` once, to reuse across estimators and metrics.

    ``rewards`` is ``[N]``, or reward components (``[N, K]`` or a mapping name -> ``[N]``)
    for an estimator that takes them: the groups are then those of the N rollouts.

    Grouping by labels costs time (per million rollouts on one CPU core: ~4 ms for
    shuffled int ids, ~30 ms for string uids laid out as verl does, each prompt's
    rollouts adjacent, ~0.5 s for shuffled strings, which are hashed one by one); pass
    the result as ``groups=`` to every later call on the same batch. With
    ``num_groups=M`` the labels are taken as codes ``0..M-1`` as they are (no
    factorisation): this works inside ``jax.jit`` with a static M. Labels that are not
    adjacent runs of one size go to the backend's scatter ops (numpy, torch, jax); in a
    namespace without them, groups of one size take the ``Permuted`` layout (a sort for
    the slots, one gather, then reshapes) and others the padded one. ``method`` forces a
    layout for labels: ``"segment"``, ``"padded"`` (pure Array API) or ``"permuted"``;
    ``group_size=G, positions=slots`` declares a ``Permuted`` layout directly: rollout
    ``k`` is member ``slots[k] % G`` of group ``slots[k] // G`` (OpenRLHF's
    ``experience.index``).

    Examples:
        >>> import numpy as np
        >>> from advbudget import make_groups, budget_advantage, dr_advantage
        >>> rewards = np.array([0.0, 1.0, 1.0, 1.0, 0.0])
        >>> groups = make_groups(rewards, group_ids=["q1", "q2", "q1", "q2", "q2"])
        >>> groups
        Segmented(num_rollouts=5, num_groups=2)
        >>> budget_advantage(rewards, groups=groups).round(4)
        array([-0.5   ,  0.1667,  0.5   ,  0.1667, -0.3333])
        >>> make_groups(rewards[:4], group_size=2, positions=[0, 2, 1, 3])
        Permuted(num_rollouts=4, group_size=2)
    """
    if isinstance(rewards, Mapping):  # reward components by name: any one has the rollouts
        rewards = next(iter(rewards.values()), [])
    rewards, xp = as_array(rewards, "rewards")
    if rewards.ndim == 2 and rewards.shape[1]:  # reward components, [N, K]: a row each
        rewards = rewards[:, 0]
    if rewards.ndim != 1 or rewards.shape[0] == 0:
        raise ValueError(
            "rewards: expected a non-empty 1-D array with one reward per rollout (or [N, K] "
            f"reward components), got shape {tuple(rewards.shape)}"
        )
    return build_groups(
        int(rewards.shape[0]),
        group_size=group_size,
        group_ids=group_ids,
        xp=xp,
        device=device_of(rewards),
        like=rewards,
        method=method,
        num_groups=num_groups,
        positions=positions,
    )


def build_groups(
    num_rollouts: int,
    *,
    group_size: int | None = None,
    group_ids: Any = None,
    xp: Namespace,
    device: Any = None,
    like: Array | None = None,
    method: GroupMethod = "auto",
    num_groups: int | None = None,
    positions: Any = None,
) -> Groups:
    """Build :class:`Groups` for ``num_rollouts`` rollouts of namespace ``xp``.

    Exactly one of ``group_size`` (contiguous groups of that size) and ``group_ids`` (one
    label per rollout: ints or strings, any order, any group sizes) is given. Labels that
    happen to form contiguous equal-size groups take the reshape path.
    ``method`` forces the layout for labels: ``"segment"`` (native ops), ``"padded"``
    (pure Array API) or ``"permuted"`` (groups of one size: one gather, then reshapes);
    ``"auto"`` picks native ops where the namespace has them, else ``"permuted"`` for
    groups of one size and ``"padded"`` for others.
    ``num_groups=M`` declares the labels to be codes ``0..M-1`` already: nothing is
    factorised, so this also works on traced labels (jax.jit with a static M).
    """
    checks.choice("method", method, GROUP_METHODS)
    if (group_size is None) == (group_ids is None):
        given = "both" if group_size is not None else "neither"
        raise ValueError(
            "group_size / group_ids: expected exactly one of them (group_size=G for "
            f"contiguous groups, group_ids=labels for any layout), got {given}"
        )
    if group_size is not None:
        contiguous = _contiguous(xp, device, num_rollouts, group_size)
        if positions is None:
            return contiguous
        return _permuted(xp, device, contiguous, positions, like)
    if positions is not None:
        raise ValueError("positions: expected together with group_size, got group_ids")
    return _from_ids(xp, device, num_rollouts, group_ids, like, method, num_groups)


def _contiguous(xp: Namespace, device: Any, num_rollouts: int, group_size: Any) -> Contiguous:
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(
            f"group_size: expected a positive int, got {type(group_size).__name__} {group_size!r}"
        )
    group_size = int(group_size)
    if group_size < 1:
        raise ValueError(f"group_size: expected a positive int, got {group_size}")
    if num_rollouts % group_size:
        raise ValueError(
            f"group_size: expected a divisor of the number of rollouts ({num_rollouts}), "
            f"got {group_size} ({num_rollouts} = {num_rollouts // group_size} x {group_size} "
            f"+ {num_rollouts % group_size})"
        )
    return Contiguous(xp, device, num_rollouts, group_size)


def _permuted(
    xp: Namespace, device: Any, contiguous: Contiguous, positions: Any, like: Array | None
) -> Permuted:
    n = contiguous.num_rollouts
    if isinstance(positions, (Sequence, np.ndarray)):
        host = np.asarray(positions)
    else:
        array, _ = as_array(positions, "positions")
        if like is not None:
            check_same_device(like, array, "rewards", "positions")
        host = to_host(array)
    if host.ndim != 1 or host.shape[0] != n or host.dtype.kind not in "iu":
        raise ValueError(
            f"positions: expected {n} integer slots (a permutation of 0..{n - 1}), got "
            f"shape {tuple(host.shape)} dtype {host.dtype}"
        )
    # The inverse (slot -> rollout) is one scatter, O(N); n slots written into n cells
    # fill every cell exactly when the positions are a permutation.
    inside = n == 0 or (int(host.min()) >= 0 and int(host.max()) < n)
    slots = host.astype(np.int64)
    gather = np.full(n, -1, dtype=np.int64)
    if inside:
        gather[slots] = np.arange(n, dtype=np.int64)
    if not (inside and bool(np.all(gather >= 0))):
        raise ValueError(f"positions: expected a permutation of 0..{n - 1}, got repeats or gaps")
    return Permuted(
        xp,
        device,
        n,
        contiguous.group_size,
        xp.asarray(slots, device=device),
        gather=xp.asarray(gather, device=device),
    )


def _from_ids(
    xp: Namespace,
    device: Any,
    num_rollouts: int,
    group_ids: Any,
    like: Array | None,
    method: GroupMethod,
    num_groups: int | None,
) -> Groups:
    host = isinstance(group_ids, (Sequence, np.ndarray)) and not isinstance(group_ids, str)
    if host:
        labels = np.asarray(group_ids)
        if labels.dtype.kind not in "iubOUS":
            raise TypeError(
                f"group_ids: expected integer or string labels, got dtype {labels.dtype}"
            )
    else:
        labels, ids_xp = as_array(group_ids, "group_ids")
        if like is not None:
            check_same_device(like, labels, "rewards", "group_ids")
        if not ids_xp.isdtype(labels.dtype, ("integral", "bool")):
            raise TypeError(
                f"group_ids: expected integer labels (or a list/numpy array of strings), "
                f"got dtype {labels.dtype}"
            )
    if labels.ndim != 1 or labels.shape[0] != num_rollouts:
        raise ValueError(
            f"group_ids: expected one label per rollout, shape ({num_rollouts},), "
            f"got shape {tuple(labels.shape)}"
        )
    if num_groups is not None:
        if method == "permuted":
            raise ValueError(
                "method: 'permuted' builds the slots of labels, which num_groups leaves "
                "as they are; pass 'auto', 'segment' or 'padded' with num_groups"
            )
        return _from_codes(xp, device, labels, num_groups, method)
    if is_traced(labels):
        raise TypeError(
            "group_ids: labels cannot be factorised while traced (jax.jit / torch.compile): "
            "pass group_size=G, or codes 0..M-1 with make_groups(..., num_groups=M)"
        )
    # Labels are factorised on the host even when they live on a device: a copy of N
    # ints and a host table or SIMD sort beat a device sort (torch.unique, jnp.unique).
    if not host:
        labels = to_host(labels)
    group_size = _contiguous_group_size_host(labels)
    if group_size is not None and method == "auto":
        return Contiguous(xp, device, num_rollouts, group_size)
    # Where the backend has segment ops, shuffled groups of one size reduce faster through
    # them, on codes counted in O(N), than through a sorted slot order, a gather and a
    # scatter back (benchmarks/RESULTS.md, budget on 1M rollouts in groups of 8, one CPU
    # core: numpy 23 against 30 ms a call, torch 31 against 42, eager jax 28 against 45).
    # Without segment ops, equal sizes take that slot order (Permuted), others padding.
    segment = method == "segment" or (method == "auto" and backend(xp) in SEGMENT_OPS)
    slots = method == "permuted" or (method == "auto" and not segment)
    factors = _factorise(labels, slots=slots)
    sizes = factors.sizes
    if slots and bool(np.all(sizes == sizes[0])):  # equal sizes, any order
        return _permuted_from_order(xp, device, factors.slot_order(), int(sizes[0]))
    if method == "permuted":
        raise ValueError(
            "group_ids: method='permuted' expected groups of one size, got sizes from "
            f"{int(sizes.min())} to {int(sizes.max())} in {factors.num_groups} groups"
        )
    assert factors.codes is not None  # left out only where the slots are wanted
    codes = xp.asarray(factors.codes, device=device)
    if segment:
        sizes_on_device = xp.asarray(factors.sizes, device=device)
        return Segmented(xp, device, codes, factors.num_groups, sizes_on_device)
    return Padded(xp, device, codes, factors.num_groups)


def _permuted_from_order(
    xp: Namespace, device: Any, gather: np.ndarray[Any, Any], group_size: int
) -> Permuted:
    """``Permuted`` from its slot order (slot -> rollout, host int64). numpy's and torch's
    build the inverse only if it is read (``flat`` scatters through ``gather``); other
    namespaces get it from the host (jax's eager scatter took 3x its gather on CPU)."""
    positions = None
    if backend(xp) not in ("numpy", "torch"):
        positions = xp.asarray(inverse_permutation(gather), device=device)
    return Permuted(
        xp,
        device,
        int(gather.shape[0]),
        group_size,
        positions,
        gather=xp.asarray(gather, device=device),
    )


def _from_codes(
    xp: Namespace, device: Any, codes: Array, num_groups: Any, method: GroupMethod
) -> Groups:
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)):
        raise TypeError(f"num_groups: expected a positive int, got {num_groups!r}")
    num_groups = int(num_groups)
    if num_groups < 1:
        raise ValueError(f"num_groups: expected a positive int, got {num_groups}")
    codes_xp = array_api_compat.array_namespace(codes) if not is_traced(codes) else None
    if codes_xp is not None:
        if not codes_xp.isdtype(codes.dtype, "integral"):
            raise TypeError(
                f"group_ids: with num_groups, expected integer codes, got dtype {codes.dtype}"
            )
        low, high = int(codes_xp.min(codes)), int(codes_xp.max(codes))
        if low < 0 or high >= num_groups:
            raise ValueError(
                f"group_ids: with num_groups={num_groups}, expected codes in "
                f"0..{num_groups - 1}, got values from {low} to {high}"
            )
    codes = xp.asarray(codes, device=device)
    if method == "padded" or (method == "auto" and backend(xp) not in SEGMENT_OPS):
        return Padded(xp, device, codes, num_groups)
    return Segmented(xp, device, codes, num_groups)


def _contiguous_group_size_host(labels: np.ndarray[Any, Any]) -> int | None:
    """G if ``labels`` form adjacent runs of one size G with distinct labels, else None.

    Vectorised compares only (no hashing of every label), so the common interleaved
    layout (verl's ``repeat(interleave=True)``) costs ~1 ms per million rollouts.
    """
    n = labels.shape[0]
    if n == 0:
        return None
    num_runs = int(np.count_nonzero(labels[1:] != labels[:-1])) + 1
    if n % num_runs:
        return None
    size = n // num_runs
    rows = labels.reshape(num_runs, size)
    if not bool(np.all(rows == rows[:, :1])):
        return None
    heads = rows[:, 0]
    distinct = len(set(heads.tolist())) == num_runs
    return size if distinct else None


class _Factors(NamedTuple):
    """Labels as codes ``0..M-1``: int labels in their sorted order, strings in order of
    first appearance."""

    num_groups: int
    sizes: np.ndarray[Any, Any]  # [M] rollouts per group
    codes: np.ndarray[Any, Any] | None  # [N] int64; None if not asked for and sizes equal
    order: np.ndarray[Any, Any] | None  # the slot order, where a sort of the labels gave it

    def slot_order(self) -> np.ndarray[Any, Any]:
        """Each group's rollouts in batch order, group after group (:func:`_slot_order`)."""
        if self.order is not None:
            return self.order
        assert self.codes is not None  # the paths without a sort always build the codes
        return _slot_order(self.codes, self.num_groups)


def _factorize_host(
    labels: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], int, np.ndarray[Any, Any]]:
    """Integer codes 0..M-1 (a new array, never a view of the caller's labels), M, and
    the group sizes."""
    factors = _factorise(labels, slots=False)
    assert factors.codes is not None
    return factors.codes, factors.num_groups, factors.sizes


def _factorise(labels: np.ndarray[Any, Any], *, slots: bool) -> _Factors:
    """Codes in O(N) for strings (a dict) and small-range ints (a bincount); other ints
    take one sort, which also gives the slot order. ``slots=True``: the slot order is
    wanted (for ``Permuted``), so ints whose groups may all have one size take the sort,
    and their per-rollout codes are left out where the sizes turn out equal."""
    if labels.dtype.kind in "iub":
        return _factorise_integers(labels, slots)
    table: dict[Any, int] = {}
    codes = np.fromiter(
        (table.setdefault(label, len(table)) for label in labels.tolist()),
        dtype=np.int64,
        count=labels.shape[0],
    )
    return _Factors(len(table), np.bincount(codes, minlength=len(table)), codes, None)


def _factorise_integers(labels: np.ndarray[Any, Any], slots: bool) -> _Factors:
    values = labels.astype(np.int64, copy=False)
    n = values.shape[0]
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    dense = span <= 4 * n + 1024
    # Sort packed keys (label - low, row) where a sort is needed anyway (sparse labels) or
    # the slots are wanted and the groups may all have one size (a dense span that
    # divides N: the usual shuffled ids 0..M-1), if they fit in int64.
    if (not dense or (slots and n % span == 0)) and span.bit_length() + _row_bits(n) <= 62:
        return _factorise_by_sort(values, low, need_codes=not slots)
    if dense:
        # One counting pass gives which values occur and how often, O(N + span).
        offsets = values - low  # a new array: codes never alias the caller's labels
        counts = np.bincount(offsets, minlength=span)
        if bool(np.all(counts)):  # every value in low..high occurs: the codes are offsets
            return _Factors(span, counts, offsets, None)
        seen = counts > 0
        code_of = np.cumsum(seen) - 1
        return _Factors(int(code_of[-1]) + 1, counts[seen], code_of[offsets], None)
    uniques, codes, counts = np.unique(values, return_inverse=True, return_counts=True)
    return _Factors(int(uniques.shape[0]), counts, codes.reshape(-1), None)


def _factorise_by_sort(values: np.ndarray[Any, Any], low: int, need_codes: bool) -> _Factors:
    """One sort of the keys ``(label - low) * 2**b + row`` (b bits hold a row): sorted, the
    labels come in runs, each run's rows in batch order, so the rows are the slot order
    and the runs are the groups. Equal sizes G are an O(M) check: the first and last key
    of each block of G sorted keys hold the same label, and the next block a larger one.
    """
    n = values.shape[0]
    shift = _row_bits(n)
    keys = _sort_with_rows(values - low, shift)  # a new array: labels are never written
    rows = (1 << shift) - 1
    first_size = int(np.searchsorted(keys, ((int(keys[0]) >> shift) + 1) << shift))
    if n % first_size == 0:
        heads = keys[::first_size] >> shift
        tails = keys[first_size - 1 :: first_size] >> shift
        if np.array_equal(heads, tails) and bool(np.all(heads[1:] > tails[:-1])):
            num_groups = n // first_size
            keys &= rows
            codes = None
            if need_codes:
                codes = np.empty(n, dtype=np.int64)
                codes[keys] = np.arange(n, dtype=np.int64) // first_size
            return _Factors(num_groups, np.full(num_groups, first_size), codes, keys)
    sorted_labels = keys >> shift
    keys &= rows
    starts = np.flatnonzero(sorted_labels[1:] != sorted_labels[:-1]) + 1
    sizes = np.diff(starts, prepend=0, append=n)
    codes = np.empty(n, dtype=np.int64)
    codes[keys] = np.repeat(np.arange(sizes.shape[0], dtype=np.int64), sizes)
    return _Factors(int(sizes.shape[0]), sizes, codes, keys)


def _row_bits(n: int) -> int:
    """Bits that hold a row index ``0..n-1`` (at least 1)."""
    return max(n - 1, 1).bit_length()


def _equal_group_slots(
    codes: np.ndarray[Any, Any], num_groups: int, group_size: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Rows of the ``[M, G]`` block for codes ``0..M-1`` that each occur ``G`` times:
    ``gather`` (slot -> rollout, :func:`_slot_order`) and ``slots`` (rollout -> slot, its
    inverse), int64."""
    gather = _slot_order(codes, num_groups)
    return gather, inverse_permutation(gather)


def _slot_order(codes: np.ndarray[Any, Any], num_groups: int) -> np.ndarray[Any, Any]:
    """The rollouts of group 0, then of group 1, ..., each group's in batch order (int64):
    exactly what a stable argsort of the codes gives (the order inside a group decides
    which of tied rollouts is "first", and the order of the column sums). ``codes`` is
    not modified.
    """
    n = codes.shape[0]
    shift = _row_bits(n)
    if num_groups.bit_length() + shift > 62:  # keys would overflow int64: sort stably
        return np.argsort(codes, kind="stable")
    keys = _sort_with_rows(codes.astype(np.int64, copy=True), shift)
    keys &= (1 << shift) - 1
    return keys


def _sort_with_rows(keys: np.ndarray[Any, Any], shift: int) -> np.ndarray[Any, Any]:
    """Sort ``keys * 2**shift + row`` in place (``keys``: a fresh int64 array) and return it.

    The keys are distinct and their order is the stable order of ``keys``, each key's rows
    in batch order. This one unstable sort is the fastest stable sort numpy has for
    this: its SIMD sort (AVX-512 / AVX2) does 1M int64 in ~10 ms, ~10x faster than the
    stable (tim)sort. numpy has no vectorised counting sort (a row's rank among the
    earlier rows of its group is a sequential pass); what comes closest measured slower
    (one core, N = 524,288, G = 8): its radix argsort of 16-bit codes 1.4x (and codes
    past 16 bits need a second pass and a gather), rounds of ``np.minimum.at`` that peel
    off each group's first row ~10x.
    """
    keys <<= shift
    keys |= np.arange(keys.shape[0], dtype=np.int64)
    keys.sort()
    return keys
