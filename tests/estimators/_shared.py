"""What the family files share: one hand-worked batch (two groups of four, with token
lengths) and its check on every backend, the inputs an estimator declares, and hypothesis
batches of labelled groups in any order."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from advbudget import (
    budget_advantage,
    compute_advantages,
    dr_advantage,
    get_spec,
    group_normalized_advantage,
    rloo_advantage,
)
from advbudget.testing import assert_close, to_numpy

# The four estimators with a function of their own, by catalogue name.
FUNCTIONS = {
    "budget": budget_advantage,
    "grpo": group_normalized_advantage,
    "dr": dr_advantage,
    "rloo": rloo_advantage,
}

# Two groups of four: [1, 0, 0, 0] and [0.5, 0.5, 1, 0]; lengths [4, 1, 1, 2 | 1, 3, 2, 2].
R = [1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0]
L = [4.0, 1.0, 1.0, 2.0, 1.0, 3.0, 2.0, 2.0]
DR = np.array([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.5, -0.5])  # r - group mean
RLOO = np.array([1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 2 / 3, -2 / 3])  # 4/3 (r - mean)
SHUFFLE = [5, 0, 7, 2, 4, 1, 6, 3]


def check_hand_values(
    xp: Any, name: str, options: tuple[Any, ...], expected: Any, *, lengths: bool = False
) -> None:
    """``name`` on the batch above (with its lengths as ``response_lengths`` if ``lengths``;
    ReMax with baselines 0.5), in float64 and float32, in group order and shuffled under
    string labels: the rewards' namespace, dtype and device, ``expected``'s values."""
    raw: dict[str, Any] = {}
    if lengths:
        raw["response_lengths"] = np.array(L)
    if name == "remax":
        raw["reward_baselines"] = np.full(8, 0.5)
    labels = [f"q{i // 4}" for i in SHUFFLE]
    for dtype in (xp.float64, xp.float32):
        rewards = xp.asarray(R, dtype=dtype)
        kw = {**dict(options), **as_arrays(xp, raw, dtype)}
        res = compute_advantages(rewards, name, group_size=4, **kw)
        assert_close(res.advantages, expected, like=rewards)
        # The same numbers with the groups shuffled and labelled by strings.
        kw = {**dict(options), **as_arrays(xp, {k: v[SHUFFLE] for k, v in raw.items()}, dtype)}
        shuffled = xp.asarray([R[i] for i in SHUFFLE], dtype=dtype)
        res = compute_advantages(shuffled, name, group_ids=labels, **kw)
        assert_close(res.advantages, np.asarray(expected)[SHUFFLE], like=shuffled)


def inputs_for(name: str, rng: np.random.Generator, n: int) -> dict[str, Any]:
    """Random values of every input ``name`` declares: token counts for
    ``response_lengths``, normal draws for the others (ReMax's baselines, spo's rho)."""
    out: dict[str, Any] = {}
    for declared in get_spec(name).inputs:
        if declared.name == "response_lengths":
            out[declared.name] = rng.integers(1, 40, size=n).astype(np.float64)
        else:
            out[declared.name] = rng.normal(size=n)
    return out


def as_arrays(xp: Any, inputs: dict[str, Any], dtype: Any) -> dict[str, Any]:
    return {k: xp.asarray(v, dtype=dtype) for k, v in inputs.items()}


# -- hypothesis batches: groups of any size, labelled by strings, in any order ---------------

backend_settings = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
VALUES = [-2.0, -1.0, 0.0, 0.25, 0.5, 1.0, 3.0]


@st.composite
def batches(draw: Any, min_size: int = 1) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(rewards, labels, response lengths)."""
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


def group_sums(values: Any, labels: list[str], weights: Any = None) -> np.ndarray:
    out: dict[str, float] = {}
    for i, label in enumerate(labels):
        out[label] = out.get(label, 0.0) + values[i] * (1 if weights is None else weights[i])
    return np.array(list(out.values()))


def advantages_of(
    xp: Any, name: str, rewards: Any, labels: list[str], lengths: Any, **kw: Any
) -> np.ndarray:
    """``name``'s float64 advantages of a drawn batch, as numpy (lengths as its token counts,
    lengths / 10 as ReMax's baselines)."""
    inputs: dict[str, Any] = {}
    if any(i.name == "response_lengths" for i in get_spec(name).inputs):
        inputs["response_lengths"] = xp.asarray(lengths, dtype=xp.float64)
    if name == "remax":
        inputs["reward_baselines"] = xp.asarray(lengths / 10, dtype=xp.float64)
    r = xp.asarray(rewards, dtype=xp.float64)
    return to_numpy(compute_advantages(r, name, group_ids=labels, **inputs, **kw).advantages)


def assert_shift_invariant(xp: Any, name: str, batch: Any, shift: float) -> None:
    """Adding a constant to every reward changes no advantage."""
    rewards, labels, lengths = batch
    before = advantages_of(xp, name, rewards, labels, lengths)
    after = advantages_of(xp, name, rewards + shift, labels, lengths)
    np.testing.assert_allclose(after, before, atol=1e-7)
