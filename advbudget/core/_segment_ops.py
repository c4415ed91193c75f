"""Per-backend native segment reductions (numpy ufunc.at / reduceat, torch scatter_reduce,
jax.ops.segment_*), behind one small interface used by the ``Segmented`` layout."""

from __future__ import annotations

import math
import sys
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ._arrays import Array, Namespace


def largest(xp: Namespace, dtype: Any) -> Any:
    """The identity of ``min`` for ``dtype``."""
    return math.inf if xp.isdtype(dtype, "real floating") else xp.iinfo(dtype).max


def smallest(xp: Namespace, dtype: Any) -> Any:
    """The identity of ``max`` for ``dtype``."""
    return -math.inf if xp.isdtype(dtype, "real floating") else xp.iinfo(dtype).min


class SegmentOps(ABC):
    def __init__(self, xp: Namespace, index: Array, num_groups: int):
        self.xp, self.index, self.num_groups = xp, index, num_groups

    @abstractmethod
    def sum(self, x: Array) -> Array: ...

    @abstractmethod
    def min(self, x: Array) -> Array: ...

    @abstractmethod
    def max(self, x: Array) -> Array: ...

    def take(self, stats: Array) -> Array:
        """Each rollout's entry of per-group ``stats``."""
        return self.xp.take(stats, self.index, axis=0)


class NumpySegmentOps(SegmentOps):
    def sum(self, x: Array) -> Array:
        if x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer):
            out = np.zeros(self.num_groups, dtype=x.dtype)
            np.add.at(out, self.index, x)
            return out
        # bincount accumulates in float64: exact enough, then back to the input dtype.
        return np.bincount(self.index, weights=x, minlength=self.num_groups).astype(x.dtype)

    def min(self, x: Array) -> Array:
        out = np.full(self.num_groups, largest(np, x.dtype), dtype=x.dtype)
        np.minimum.at(out, self.index, x)
        return out

    def max(self, x: Array) -> Array:
        out = np.full(self.num_groups, smallest(np, x.dtype), dtype=x.dtype)
        np.maximum.at(out, self.index, x)
        return out

    def take(self, stats: Array) -> Array:
        return np.take(stats, self.index)


class TorchSegmentOps(SegmentOps):
    def sum(self, x: Array) -> Array:
        out = x.new_zeros(self.num_groups)
        return out.index_add_(0, self.index, x)

    def _reduce(self, x: Array, reduce: str, fill: Any) -> Array:
        out = x.new_full((self.num_groups,), fill)
        return out.scatter_reduce_(0, self.index, x, reduce=reduce, include_self=True)

    def min(self, x: Array) -> Array:
        return self._reduce(x, "amin", largest(self.xp, x.dtype))

    def max(self, x: Array) -> Array:
        return self._reduce(x, "amax", smallest(self.xp, x.dtype))

    def take(self, stats: Array) -> Array:
        return stats.index_select(0, self.index)  # ~10x faster than the compat take


class JaxSegmentOps(SegmentOps):
    def __init__(self, xp: Namespace, index: Array, num_groups: int):
        super().__init__(xp, index, num_groups)
        self.ops = sys.modules["jax"].ops

    def sum(self, x: Array) -> Array:
        return self.ops.segment_sum(x, self.index, num_segments=self.num_groups)

    def min(self, x: Array) -> Array:
        return self.ops.segment_min(x, self.index, num_segments=self.num_groups)

    def max(self, x: Array) -> Array:
        return self.ops.segment_max(x, self.index, num_segments=self.num_groups)


SEGMENT_OPS: dict[str, type[SegmentOps]] = {
    "numpy": NumpySegmentOps,
    "torch": TorchSegmentOps,
    "jax": JaxSegmentOps,
}
