"""Prompt groups: which rollout belongs to which group, and reductions over groups.

A ``Groups`` object lays per-rollout arrays out as *rows* and reduces rows to per-group
*stats*; ``expand`` brings stats back to broadcast against rows. Estimators are written
once in these terms and run unchanged on every layout:

=================  ====================  =================  ==========================
layout             rows of an [N] array   stats              used for
=================  ====================  =================  ==========================
``Contiguous``     [M, G] (a reshape)     [M, 1]             fixed-size adjacent groups
``Permuted``       [M, G] (one gather)    [M, 1]             fixed-size groups in any
                                                             order (OpenRLHF's slots;
                                                             labels without segment ops)
``Segmented``      [N] (unchanged)        [M]                any labels; numpy, torch,
                                                             jax native segment ops
``Padded``         [M, K] gathered        [M, 1]             any labels, any namespace
                   (+ a presence mask)                       (pure Array API fallback)
=================  ====================  =================  ==========================

Building a layout from labels (on the host) is ``_labels``; the native segment reductions
behind ``Segmented`` are ``_segment_ops``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

import numpy as np

from ._arrays import Array, Namespace, backend, is_traced
from ._segment_ops import SEGMENT_OPS, SegmentOps, largest, smallest

GroupMethod = Literal["auto", "segment", "padded", "permuted"]
"""``make_groups(method=)``: the layout of labelled groups: ``"auto"`` (the default:
adjacent runs of one size are contiguous, others take the backend's segment ops, or
without them a permuted or padded layout), ``"segment"``, ``"padded"`` (pure Array API)
or ``"permuted"`` (groups of one size)."""
GROUP_METHODS: tuple[GroupMethod, ...] = ("auto", "segment", "padded", "permuted")


class Groups(ABC):
    """How the N rollouts of a batch split into M prompt groups.

    Build one with :func:`advbudget.make_groups` (or get it from
    :attr:`~advbudget.AdvantageResult.groups`) and pass it as ``groups=`` to reuse the
    factorisation of the labels across estimators and metrics.
    """

    xp: Namespace
    device: Any
    num_rollouts: int
    num_groups: int

    #: Bool rows, False at padding slots (``Padded`` only); None where every slot is a rollout.
    is_rollout: Array | None = None

    @abstractmethod
    def rows(self, x: Array) -> Array:
        """Lay out a per-rollout array ``[N]`` as rows."""

    @abstractmethod
    def flat(self, rows: Array) -> Array:
        """Inverse of :meth:`rows`: back to one value per rollout ``[N]``."""

    @abstractmethod
    def min(self, rows: Array) -> Array:
        """Per-group minimum (over present rollouts) as stats."""

    @abstractmethod
    def max(self, rows: Array) -> Array:
        """Per-group maximum (over present rollouts) as stats."""

    @abstractmethod
    def sum(self, rows: Array) -> Array:
        """Per-group sum (padding counts as zero) as stats."""

    def min_max(self, rows: Array) -> tuple[Array, Array]:
        """Per-group minimum and maximum, as stats."""
        return self.min(rows), self.max(rows)

    def count(self, mask: Array, dtype: Any) -> Array:
        """Per-group number of True rows of a bool ``mask`` (padding False), as stats of
        ``dtype``: exact, whatever the summation order."""
        return self.sum(self.xp.astype(mask, dtype))

    @abstractmethod
    def sizes(self, dtype: Any) -> Array:
        """Number of rollouts in each group, as stats of ``dtype``."""

    @abstractmethod
    def expand(self, stats: Array) -> Array:
        """Per-group stats to an array that broadcasts against rows."""

    def per_group(self, stats: Array) -> Array:
        """Stats as a flat ``[M]`` array, in group order."""
        return self.xp.reshape(stats, (self.num_groups,))

    @abstractmethod
    def group_index(self) -> Array:
        """The group of each rollout, ``[N]`` integers in ``0..M-1``."""

    def tie_order(self) -> Array:
        """``[N]`` distinct keys: among tied rollouts of a group, the smallest key is the
        "first" (κ_eff's o+ / o-). Batch order, unless the layout says otherwise."""
        return self.xp.arange(self.num_rollouts, device=self.device)

    def rollout_in_tie_order(self, keys: Array) -> Array:
        """The rollouts whose :meth:`tie_order` keys are ``keys``."""
        return keys

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_rollouts={self.num_rollouts}, num_groups={self.num_groups})"
        )


class Contiguous(Groups):
    """Groups of one fixed size stored next to each other: a reshape, no gathers."""

    def __init__(self, xp: Namespace, device: Any, num_rollouts: int, group_size: int):
        self.xp, self.device = xp, device
        self.num_rollouts, self.group_size = num_rollouts, group_size
        self.num_groups = num_rollouts // group_size
        # numpy reduces short trailing axes slowly; summing the G columns is ~2x faster.
        self._fold_columns = backend(xp) == "numpy" and group_size <= 16
        self._torch = backend(xp) == "torch"

    def rows(self, x: Array) -> Array:
        return self.xp.reshape(x, (self.num_groups, self.group_size))

    def flat(self, rows: Array) -> Array:
        return self.xp.reshape(rows, (self.num_rollouts,))

    def _fold(self, rows: Array, reduce: Any) -> Array:
        out = rows[:, 0:1]
        for column in range(1, self.group_size):
            out = reduce(out, rows[:, column : column + 1])
        return out

    def min(self, rows: Array) -> Array:
        if self._fold_columns:
            return self._fold(rows, self.xp.minimum)
        return self.xp.min(rows, axis=1, keepdims=True)

    def max(self, rows: Array) -> Array:
        if self._fold_columns:
            return self._fold(rows, self.xp.maximum)
        return self.xp.max(rows, axis=1, keepdims=True)

    def sum(self, rows: Array) -> Array:
        if self._fold_columns:
            return self._fold(rows, self.xp.add)
        return self.xp.sum(rows, axis=1, keepdims=True)

    def count(self, mask: Array, dtype: Any) -> Array:
        if self._fold_columns:
            counted = _bit_count(mask, self.group_size)
            if counted is not None:
                return self.xp.astype(counted, dtype)
            # a matrix-vector product: ~4x the column fold on numpy
            ones = self.xp.ones((self.group_size, 1), dtype=dtype)
            return self.xp.astype(mask, dtype) @ ones
        return super().count(mask, dtype)

    def min_max(self, rows: Array) -> tuple[Array, Array]:
        if self._torch:  # one pass instead of two
            low, high = rows.aminmax(dim=1, keepdim=True)
            return low, high
        return self.min(rows), self.max(rows)

    def sizes(self, dtype: Any) -> Array:
        return self.xp.full((self.num_groups, 1), self.group_size, dtype=dtype, device=self.device)

    def expand(self, stats: Array) -> Array:
        return stats

    def group_index(self) -> Array:
        return self.xp.arange(self.num_rollouts, device=self.device) // self.group_size

    def __repr__(self) -> str:
        return f"Contiguous(num_rollouts={self.num_rollouts}, group_size={self.group_size})"


#: The unsigned word that holds a row of ``G`` bools, for the group sizes of one word.
_ROW_WORDS: dict[int, Any] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bit_count(mask: Array, group_size: int) -> Array | None:
    """Each row's number of True of a numpy bool ``[M, G]`` mask, ``[M, 1]``: its bytes
    (0 or 1 each) read as words and their set bits counted, one pass over M words instead
    of a cast to floats and a product over N. None where it does not apply (another dtype,
    a size that is not 1, 2, 4 or a multiple of 8, numpy without ``bitwise_count``)."""
    count_bits = getattr(np, "bitwise_count", None)  # numpy >= 2.0
    if count_bits is None or not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        return None
    if group_size % 8 == 0:
        words = np.ascontiguousarray(mask).view(np.uint64)  # [M, G / 8]
        bits = count_bits(words)
        return bits if group_size == 8 else bits.sum(axis=1, keepdims=True, dtype=np.int64)
    word = _ROW_WORDS.get(group_size)
    if word is None:
        return None
    result: Array = count_bits(np.ascontiguousarray(mask).view(word))
    return result


class Permuted(Contiguous):
    """Groups of one fixed size in any order: rollout ``k`` is member ``positions[k] % G``
    of group ``positions[k] // G``. One gather lays the batch out as the contiguous
    ``[M, G]`` block, so every reduction is ``Contiguous``'s reshape path.

    ``gather`` is the inverse permutation (slot -> rollout). The ``positions=`` path
    checks and inverts the declared slots on the host in O(N) (``_labels``); the label
    path builds only ``gather`` for numpy and torch, whose ``flat`` then scatters through
    it, and the positions are built when first read (a batch grouped by labels per call
    never pays for the inverse).
    """

    def __init__(
        self,
        xp: Namespace,
        device: Any,
        num_rollouts: int,
        group_size: int,
        positions: Array | None,
        *,
        gather: Array,
    ):
        super().__init__(xp, device, num_rollouts, group_size)
        if positions is None and backend(xp) not in ("numpy", "torch"):
            raise ValueError(f"positions: expected an array for {backend(xp)}, got None")
        self._positions = positions  # rollout -> slot
        self._gather = gather  # slot -> rollout (positions is a permutation)

    @property
    def positions(self) -> Array:
        """Rollout -> slot: rollout ``k`` is member ``positions[k] % G`` of group
        ``positions[k] // G``."""
        if self._positions is not None:
            return self._positions
        if self._torch:
            rollouts = self.xp.arange(
                self.num_rollouts, dtype=self._gather.dtype, device=self.device
            )
            positions = self._gather.new_empty(self.num_rollouts).scatter_(
                0, self._gather, rollouts
            )
        else:
            positions = inverse_permutation(self._gather)
        if not is_traced(positions):  # one built inside torch.compile stays in its graph
            self._positions = positions
        return positions

    def _take(self, x: Array, index: Array) -> Array:
        if self._torch:  # compat's take first rewrites negative indices: 3x slower
            return x.index_select(0, index)
        return self.xp.take(x, index)

    def rows(self, x: Array) -> Array:
        return self.xp.reshape(self._take(x, self._gather), (self.num_groups, self.group_size))

    def flat(self, rows: Array) -> Array:
        values = self.xp.reshape(rows, (self.num_rollouts,))
        if self._positions is not None:
            return self._take(values, self._positions)
        # Scatter through the gather: about the cost of the gather by positions, without
        # building them.
        if self._torch:
            return values.new_empty(self.num_rollouts).scatter_(0, self._gather, values)
        out = np.empty_like(values)
        out[self._gather] = values
        return out

    def group_index(self) -> Array:
        return self.positions // self.group_size

    def tie_order(self) -> Array:
        return self.positions  # the declared slot order (OpenRLHF: prompt-major)

    def rollout_in_tie_order(self, keys: Array) -> Array:
        return self._take(self._gather, keys)

    def __repr__(self) -> str:
        return f"Permuted(num_rollouts={self.num_rollouts}, group_size={self.group_size})"


def inverse_permutation(order: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``inverse[order[i]] = i`` for a host permutation: one O(N) scatter."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.shape[0], dtype=order.dtype)
    return inverse


class Segmented(Groups):
    """Any group index, reduced with the backend's own scatter/segment operations."""

    def __init__(
        self,
        xp: Namespace,
        device: Any,
        index: Array,
        num_groups: int,
        sizes: Array | None = None,
    ):
        """``sizes``: the ``[M]`` group sizes where the caller has counted them already
        (factorising labels does), else counted here."""
        self.xp, self.device = xp, device
        self.index, self.num_groups = index, num_groups
        self.num_rollouts = int(index.shape[0])
        ops = SEGMENT_OPS.get(backend(xp))
        if ops is None:
            raise TypeError(f"no native segment operations for {xp.__name__}; use Padded")
        self._ops: SegmentOps = ops(xp, index, num_groups)
        if sizes is None:
            sizes = self._ops.sum(xp.ones(self.num_rollouts, device=device))
        self._sizes = sizes

    def rows(self, x: Array) -> Array:
        return x

    def flat(self, rows: Array) -> Array:
        return rows

    def min(self, rows: Array) -> Array:
        return self._ops.min(rows)

    def max(self, rows: Array) -> Array:
        return self._ops.max(rows)

    def sum(self, rows: Array) -> Array:
        return self._ops.sum(rows)

    def sizes(self, dtype: Any) -> Array:
        return self.xp.astype(self._sizes, dtype)

    def expand(self, stats: Array) -> Array:
        return self._ops.take(stats)

    def group_index(self) -> Array:
        return self.index


class Padded(Groups):
    """Any group index in pure Array API: sort, then gather into a padded [M, K] matrix.

    Costs O(M * K) memory, K the largest group: fine for the usual near-equal sizes.
    """

    def __init__(self, xp: Namespace, device: Any, index: Array, num_groups: int):
        self.xp, self.device = xp, device
        self.index, self.num_groups = index, num_groups
        self.num_rollouts = int(index.shape[0])
        order = xp.argsort(index, stable=True)
        sorted_index = xp.take(index, order)
        group_ids = xp.arange(num_groups, dtype=index.dtype, device=device)
        starts = xp.searchsorted(sorted_index, group_ids)
        ends = xp.searchsorted(sorted_index, group_ids, side="right")
        counts = ends - starts
        self.width = width = int(xp.max(counts))
        slot = xp.arange(width, dtype=starts.dtype, device=device)
        present = slot[None, :] < counts[:, None]
        sorted_position = xp.where(present, starts[:, None] + slot[None, :], 0)
        self._gather = xp.take(order, xp.reshape(sorted_position, (-1,)))
        self.is_rollout = present
        self._counts = xp.reshape(counts, (num_groups, 1))
        # Where each rollout sits in the flattened [M, K] matrix, to scatter back.
        rank = xp.argsort(order, stable=True)
        self._scatter = index * width + (rank - xp.take(starts, index))

    def rows(self, x: Array) -> Array:
        return self.xp.reshape(self.xp.take(x, self._gather), (self.num_groups, self.width))

    def flat(self, rows: Array) -> Array:
        return self.xp.take(self.xp.reshape(rows, (-1,)), self._scatter)

    def _fill(self, rows: Array, value: Any) -> Array:
        assert self.is_rollout is not None
        return self.xp.where(self.is_rollout, rows, value)

    def min(self, rows: Array) -> Array:
        return self.xp.min(self._fill(rows, largest(self.xp, rows.dtype)), axis=1, keepdims=True)

    def max(self, rows: Array) -> Array:
        return self.xp.max(self._fill(rows, smallest(self.xp, rows.dtype)), axis=1, keepdims=True)

    def sum(self, rows: Array) -> Array:
        return self.xp.sum(self._fill(rows, 0), axis=1, keepdims=True)

    def sizes(self, dtype: Any) -> Array:
        return self.xp.astype(self._counts, dtype)

    def expand(self, stats: Array) -> Array:
        return stats

    def group_index(self) -> Array:
        return self.index
