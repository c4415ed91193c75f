"""Difficulty weights on any estimator's advantages: ``compute_advantages(...,
group_weight=...)`` multiplies each group's advantages by a weight computed from the
group's solved share p̂ (docs: Estimators, "Difficulty weights").

- ``"grpo_lead"``: GRPO-LEAD's sign-split logistic weight (arXiv 2504.09696;
  ``aeroplanepaper/GRPO-LEAD`` ``verl/trainer/ppo/core_algos.py`` @ 577c63ce,
  ``logistic_reweight``): ``w(x) = floor + (ceiling - floor) / (1 + exp(steepness (x -
  midpoint)))``; a positive advantage gets ``w(p̂)``, a negative one ``w(1 - p̂)``.
- ``"dqw"``: DGPO's difficulty-aware question weights (``AMAP-ML/MathForge``
  ``grpo_trainer.py`` @ 83edda02, ``enable_dgpo_dqw``): a softmax of ``-p̂ / temperature``
  over the batch's kept groups, scaled to sum to their number.
- a callable ``fn(p_hat)``: one weight per group, in group order.

A name may carry options as a mapping: ``{"name": "grpo_lead", "steepness": 12}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import checks
from ._arrays import Array, is_traced
from ._stats import GroupedRewards

#: Each named weight and its options with their defaults (the references' constants).
GROUP_WEIGHTS: Mapping[str, Mapping[str, float]] = {
    "grpo_lead": {"floor": 0.4, "ceiling": 1.5, "midpoint": 0.75, "steepness": 10.0},
    "dqw": {"temperature": 2.0},
}

_CHECKS: Mapping[str, Callable[[str, Any], float]] = {
    "floor": checks.nonnegative_finite,
    "ceiling": checks.nonnegative_finite,
    "midpoint": checks.finite,
    "steepness": checks.finite,
    "temperature": checks.positive_finite,
}


@dataclass(frozen=True)
class GroupWeight:
    """A parsed ``group_weight=``: a named weight with its options, or a callable."""

    name: str
    options: Mapping[str, float] = field(default_factory=dict)
    fn: Callable[[Array], Any] | None = None

    def describe(self) -> str:
        """How metrics and errors name it: ``grpo_lead``, ``dqw(temperature=1.0)``."""
        if self.fn is not None:
            return getattr(self.fn, "__name__", "callable")
        changed = {k: v for k, v in self.options.items() if GROUP_WEIGHTS[self.name][k] != v}
        given = ", ".join(f"{k}={v:g}" for k, v in changed.items())
        return f"{self.name}({given})" if given else self.name


def parse_group_weight(value: Any) -> GroupWeight | None:
    """``group_weight=`` as a :class:`GroupWeight` (None: no weight); a bad value raises
    one line naming ``group_weight``.

    Examples:
        >>> parse_group_weight("dqw")
        GroupWeight(name='dqw', options={'temperature': 2.0}, fn=None)
        >>> parse_group_weight({"name": "grpo_lead", "steepness": 12}).describe()
        'grpo_lead(steepness=12)'
        >>> parse_group_weight("lead")
        Traceback (most recent call last):
        ...
        ValueError: group_weight: expected one of 'grpo_lead', 'dqw', a mapping ... got 'lead'
    """
    if value is None or isinstance(value, GroupWeight):
        return value
    if isinstance(value, str):
        return _named(value, {})
    if isinstance(value, Mapping):
        options = dict(value)
        name = options.pop("name", None)
        if not isinstance(name, str):
            raise ValueError(
                f"group_weight: a mapping needs 'name' (one of {_names()}), got {dict(value)!r}"
            )
        return _named(name, options)
    if callable(value):
        return GroupWeight("callable", {}, value)
    raise TypeError(
        f"group_weight: expected a name ({_names()}), a mapping {{'name': ..., options}} or a "
        f"callable fn(p_hat), got {type(value).__name__}"
    )


def split_weighted(name: str) -> tuple[str, str | None]:
    """An estimator with a named weight, as the lab, the LM experiment and the command line
    take them: ``"grpo+grpo_lead"`` is ``("grpo", "grpo_lead")``, ``"budget"`` is
    ``("budget", None)``. An unknown weight raises one line naming ``estimator``.

    Examples:
        >>> split_weighted("grpo+dqw"), split_weighted("budget")
        (('grpo', 'dqw'), ('budget', None))
    """
    base, plus, weight = name.partition("+")
    if not plus:
        return name, None
    if weight not in GROUP_WEIGHTS or not base:
        raise ValueError(
            f"estimator: expected a name, or <estimator>+<weight> with a weight of "
            f"{_names()}, got {name!r}"
        )
    return base, weight


def _names() -> str:
    return ", ".join(repr(name) for name in GROUP_WEIGHTS)


def _named(name: str, given: Mapping[str, Any]) -> GroupWeight:
    if name not in GROUP_WEIGHTS:
        raise ValueError(
            f"group_weight: expected one of {_names()}, a mapping {{'name': ..., options}}, "
            f"or a callable fn(p_hat), got {name!r}"
        )
    defaults = GROUP_WEIGHTS[name]
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(
            f"group_weight: {name} takes the options {', '.join(defaults)}, got {unknown}"
        )
    options = {k: _CHECKS[k](f"group_weight {k}", given.get(k, v)) for k, v in defaults.items()}
    return GroupWeight(name, options)


def weigh(weight: GroupWeight, g: GroupedRewards, rows: Array) -> tuple[Array, Callable[[], Array]]:
    """``rows`` (an estimator's advantages) times the weight, and a function that gives
    the weight applied to each row (rows; 1 where a sign-split weight met an advantage of
    0), which the result calls only when asked: the product alone is on the hot path."""
    xp = g.xp
    p_hat = g.solved_share()
    if weight.name == "grpo_lead":
        up = g.expand(logistic_weight(xp, p_hat, **weight.options))
        down = g.expand(logistic_weight(xp, 1 - p_hat, **weight.options))
        # A row of 0 stays 0 whichever weight it gets: one choice by sign.
        weighted = _by_sign(rows, up, down)
        if weighted is None:
            weighted = xp.where(rows > 0, up, down) * rows

        def applied() -> Array:
            return xp.where(rows > 0, up, xp.where(rows < 0, down, xp.ones_like(down)))

        return weighted, applied
    if weight.name == "dqw":
        per_group = g.expand(dqw_weights(g, p_hat, **weight.options))
    else:
        assert weight.fn is not None
        per_group = g.expand(_called(weight.fn, g, p_hat))
    # A per-group weight stays per group until the product (no rows of weights to build).
    return rows * per_group, lambda: xp.broadcast_to(per_group, rows.shape)


#: The signed word of each float dtype, whose bits are the float's.
_WORDS: dict[Any, Any] = {np.dtype(np.float64): np.int64, np.dtype(np.float32): np.int32}


def _by_sign(rows: Array, up: Array, down: Array) -> Array | None:
    """numpy: ``where(rows > 0, up, down) * rows`` without numpy's ``where``, which
    branches on each element and costs ~6 multiplications on random signs. Each row's
    sign bit, shifted across its word (all ones when negative), chooses the bits of
    ``down`` or ``up``; the chosen weight is multiplied in place. The same numbers: a row
    of +0 takes ``up`` here, ``down`` there, and is 0 either way. None where it does not
    apply (another namespace, mixed or non-float dtypes)."""
    if not all(type(a) is np.ndarray and a.dtype == rows.dtype for a in (rows, up, down)):
        return None
    word = _WORDS.get(rows.dtype)
    if word is None:
        return None
    negative = np.right_shift(rows.view(word), rows.itemsize * 8 - 1)  # 0 or all ones
    high = up.view(word)
    negative &= high ^ down.view(word)
    negative ^= high
    chosen = negative.view(rows.dtype)
    chosen *= rows
    return chosen


def logistic_weight(
    xp: Any, x: Array, *, floor: float, ceiling: float, midpoint: float, steepness: float
) -> Array:
    """GRPO-LEAD's ``floor + (ceiling - floor) / (1 + exp(steepness (x - midpoint)))``:
    near ``ceiling`` for a hard group (small x under a positive steepness), near ``floor``
    for an easy one. An exp that overflows to inf gives ``floor``, as it should."""
    return floor + (ceiling - floor) / (1 + xp.exp(steepness * (x - midpoint)))


def dqw_weights(g: GroupedRewards, p_hat: Array, *, temperature: float) -> Array:
    """Stats: DGPO's question weights ``λ_s = n_v · softmax(-d / T)_s`` over the kept groups
    (``d = p̂``, 1 where ``p̂ = 0``); skipped groups weigh 1, as every group when none is
    kept. The weights of the kept groups sum to their number ``n_v``."""
    xp = g.xp
    # Masks as 0/1 factors, not where(): numpy's where branches on every group. Each
    # product or sum below is exact (x·1, x·0, x + 0), so these are the where() values.
    kept = xp.astype(g.kept(), p_hat.dtype)
    d = p_hat + xp.astype(p_hat == 0, p_hat.dtype)
    n_kept = xp.sum(kept)
    # Shifted by the smallest kept d (d <= 1; a skipped group's is lifted past 2): a small
    # temperature neither overflows nor leaves every term 0.
    lowest = xp.min(d + 2 * (1 - kept))
    lowest = xp.where(n_kept > 0, lowest, xp.zeros_like(lowest))
    # Skipped groups' gaps are clipped at 0 so their exp never overflows into inf · 0.
    gaps = d - lowest
    terms = xp.exp(-xp.clip(gaps, min=0.0) / temperature) * kept
    total = xp.sum(terms)
    total = xp.where(total > 0, total, xp.ones_like(total))
    return n_kept * terms / total + (1 - kept)


def _called(fn: Callable[[Array], Any], g: GroupedRewards, p_hat: Array) -> Array:
    """The callable's weights as stats of the rewards' namespace, checked: ``M`` finite
    values (checked when they can be read: not while tracing)."""
    xp = g.xp
    flat = g.groups.per_group(p_hat)
    out = fn(flat)
    num = g.groups.num_groups
    if type(out) is not type(flat):  # a list, or another namespace's array: via numpy
        try:
            values = np.asarray(out, dtype=np.float64)
            out = xp.asarray(values, dtype=flat.dtype, device=g.groups.device)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(
                f"group_weight: the callable must return {num} numbers, one per group, "
                f"got {type(out).__name__} ({error})"
            ) from None
    if tuple(out.shape) != (num,):
        raise ValueError(
            f"group_weight: the callable must return {num} weights, one per group (shape "
            f"({num},)), got shape {tuple(out.shape)}"
        )
    out = xp.astype(out, flat.dtype)
    if not is_traced(out) and not bool(xp.all(xp.isfinite(out))):
        bad = int(xp.argmax(xp.astype(~xp.isfinite(out), xp.int32)))
        raise ValueError(
            f"group_weight: the callable must return finite weights, got {float(out[bad])} "
            f"for group {bad} (p_hat {float(flat[bad]):.4g})"
        )
    return xp.reshape(out, p_hat.shape)
