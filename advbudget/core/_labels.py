"""From labels to a layout, on the host: contiguity detection, factorisation of ints and
strings in O(N), the slots of equal-size groups in any order, and the choice of
``Contiguous`` / ``Permuted`` / ``Segmented`` / ``Padded``.

Unlike the layouts (pure Array API, jit-safe), code here may use numpy freely: labels are
factorised on the host even when they live on a device (a copy of N ints and an O(N)
table beat a device sort).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat
import numpy as np

from ._arrays import Array, Namespace, as_array, backend, check_same_device, is_traced
from ._groups import Contiguous, GroupMethod, Groups, Padded, Permuted, Segmented
from ._segment_ops import SEGMENT_OPS


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
    ``method`` forces the layout for labels: ``"segment"`` (native ops) or ``"padded"``
    (pure Array API); ``"auto"`` picks native ops where the namespace has them.
    ``num_groups=M`` declares the labels to be codes ``0..M-1`` already: nothing is
    factorised, so this also works on traced labels (jax.jit with a static M).
    """
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
        host = _to_host(array)
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
        return _from_codes(xp, device, labels, num_groups, method)
    if is_traced(labels):
        raise TypeError(
            "group_ids: labels cannot be factorised while traced (jax.jit / torch.compile): "
            "pass group_size=G, or codes 0..M-1 with make_groups(..., num_groups=M)"
        )
    # Labels are factorised on the host even when they live on a device: a copy of N
    # ints and an O(N) table beat a device sort (torch.unique, eager jnp.unique).
    if not host:
        labels = _to_host(labels)
    group_size = _contiguous_group_size_host(labels)
    if group_size is not None and method == "auto":
        return Contiguous(xp, device, num_rollouts, group_size)
    codes_np, num_groups, sizes = _factorize_host(labels)
    if method == "auto":
        if sizes is None:
            sizes = np.bincount(codes_np, minlength=num_groups)
        if bool(np.all(sizes == sizes[0])):  # equal sizes in any order: one gather
            gather, slots = _equal_group_slots(codes_np, num_groups, int(sizes[0]))
            return Permuted(
                xp,
                device,
                num_rollouts,
                int(sizes[0]),
                xp.asarray(slots, device=device),
                gather=xp.asarray(gather, device=device),
            )
    codes = xp.asarray(codes_np, device=device)
    if method == "segment" or (method == "auto" and backend(xp) in SEGMENT_OPS):
        return Segmented(xp, device, codes, num_groups)
    return Padded(xp, device, codes, num_groups)


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
    run_starts = np.flatnonzero(labels[1:] != labels[:-1])
    num_runs = run_starts.shape[0] + 1
    if n % num_runs:
        return None
    size = n // num_runs
    rows = labels.reshape(num_runs, size)
    if not bool(np.all(rows == rows[:, :1])):
        return None
    heads = rows[:, 0]
    distinct = len(set(heads.tolist())) == num_runs
    return size if distinct else None


def _factorize_host(
    labels: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], int, np.ndarray[Any, Any] | None]:
    """Integer codes 0..M-1 in O(N), M, and the group sizes where they came for free.

    Codes follow the labels' sorted order for integers, first appearance for strings.
    The codes are always a new array (never a view of the caller's labels).
    """
    if labels.dtype.kind in "iub":
        return _factorize_integers(labels)
    table: dict[Any, int] = {}
    codes = np.fromiter(
        (table.setdefault(label, len(table)) for label in labels.tolist()),
        dtype=np.int64,
        count=labels.shape[0],
    )
    return codes, len(table), None


def _factorize_integers(
    labels: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], int, np.ndarray[Any, Any]]:
    labels = labels.astype(np.int64, copy=False)
    low, high = int(labels.min()), int(labels.max())
    span = high - low + 1
    if span <= 4 * labels.shape[0] + 1024:
        # Dense labels (the usual 0..M-1 or batch-local ints): one counting pass gives
        # which values occur and how often, O(N + span).
        offsets = labels - low  # a new array: codes never alias the caller's labels
        counts = np.bincount(offsets, minlength=span)
        if bool(np.all(counts)):  # every value in low..high occurs: the codes are offsets
            return offsets, span, counts
        seen = counts > 0
        code_of = np.cumsum(seen) - 1
        return code_of[offsets], int(code_of[-1]) + 1, counts[seen]
    uniques, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    return codes.reshape(-1), int(uniques.shape[0]), counts


def _equal_group_slots(
    codes: np.ndarray[Any, Any], num_groups: int, group_size: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Rows of the ``[M, G]`` block for codes ``0..M-1`` that each occur ``G`` times.

    Returns ``gather`` (slot -> rollout) and ``slots`` (rollout -> slot, its inverse),
    int64. Group ``c`` fills slots ``c*G .. c*G+G-1`` with its rollouts in batch order,
    exactly what a stable argsort of the codes gives (the order inside a group decides
    which of tied rollouts is "first", and the order of the column sums).

    numpy has no vectorised counting sort (the rank of a rollout among its group's
    earlier ones needs a sequential pass) and its only O(N) stable sort, the radix sort
    of <= 16-bit keys, takes 2-3 passes here and measured slower than one unstable sort
    of distinct keys ``code * 2**b + row``: their order is the stable order, and numpy's
    SIMD sort (AVX-512 / AVX2) does 1M of them ~10x faster than the stable (tim)sort of
    int64. The inverse is one O(N) scatter.
    """
    n = codes.shape[0]
    rows = np.arange(n, dtype=np.int64)
    shift = max(n - 1, 1).bit_length()
    if num_groups.bit_length() + shift > 62:  # keys would overflow int64: sort stably
        gather = np.argsort(codes, kind="stable")
    else:
        keys = np.left_shift(codes, shift)
        keys |= rows
        keys.sort()
        keys &= (1 << shift) - 1
        gather = keys
    slots = np.empty_like(gather)
    slots[gather] = rows
    return gather, slots


def _to_host(labels: Array) -> np.ndarray[Any, Any]:
    if array_api_compat.is_torch_array(labels):
        return labels.detach().cpu().numpy()
    return np.asarray(labels)
