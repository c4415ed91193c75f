"""Every estimator of the catalogue against its float64 reference (tests/references.py), on
every grouping layout and backend, with its arrays on a device that is not the default
where the backend has one (the ``device`` fixture): values in float64 and float32, the
result's namespace, dtype and device, the valid mask, ties, constant groups and groups of
one (scored raw where the estimator declares it, refused where it does not); NaN rewards
omitted from every statistic; torch's meta tensors refused. A catalogue entry without a
reference fails here."""

from __future__ import annotations

import os
import zlib
from typing import Any

import array_api_compat
import numpy as np
import pytest

from advbudget import EstimatorState, compute_advantages, estimator_names, get_spec, make_groups
from advbudget.core.estimators import BUILTINS
from advbudget.testing import assert_close, to_numpy

from .estimators._shared import inputs_for
from .references import DEFAULTS, REFERENCES, reference

SEED = int(os.environ.get("ADVBUDGET_TEST_SEED", "0"))
LAYOUTS = ("contiguous", "permuted", "segmented", "padded")
# Estimators of turns score multi-turn rows (labels, not layouts): tests/estimators/test_turns.py.
NAMES = [spec.name for spec in BUILTINS if not spec.turns]


def test_every_estimator_has_a_reference() -> None:
    missing = [name for name in estimator_names() if name not in REFERENCES]
    assert not missing, f"add a float64 reference to tests/references.py for {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_the_catalogue_keeps_the_documented_defaults(name: str) -> None:
    """A default changed in the catalogue is a change of every user's numbers: it fails
    here, beside the battery (whose reference reads the hand-written table, not the spec)."""
    assert {o.name: o.default for o in get_spec(name).options} == DEFAULTS[name]


# Estimators defined on part of the rewards only (passk: binary; maxrl: a positive group
# mean, it warns otherwise: tests/estimators/test_group.py; gdpo: reward components, [N, 3]),
# and options the battery sets.
DOMAIN = {"passk": "binary", "maxrl": "nonnegative", "gdpo": "components", "spo": "unit"}
OPTIONS: dict[str, dict[str, Any]] = {"passk": {"k": 2}}


def _batch(
    rng: np.random.Generator, layout: str, domain: str = "any"
) -> tuple[np.ndarray, list[str], list[int]]:
    """Graded rewards with repeats (two values per batch when ``binary``; three columns
    for ``components``); some groups constant (in one column only too); groups of one
    unless contiguous; one size for contiguous and permuted, shuffled unless contiguous."""
    if layout == "contiguous":
        sizes = [int(rng.integers(2, 9))] * int(rng.integers(1, 6))
    elif layout == "permuted":
        sizes = [int(rng.integers(1, 9))] * int(rng.integers(2, 6))
    else:
        sizes = [int(s) for s in rng.integers(1, 10, size=int(rng.integers(1, 7)))]
    labels = [f"p{k}" for k, s in enumerate(sizes) for _ in range(s)]
    n = len(labels)
    if domain == "binary":
        rewards = rng.integers(0, 2, size=n) * 2.0 - float(rng.integers(0, 2))
    else:
        shape = (n, 3) if domain == "components" else (n,)
        rewards = rng.choice([-1.0, 0.0, 0.0, 0.3, 1.0, 1.0, 2.5], size=shape)
        rewards = rewards + rng.normal(size=shape) * (rng.random(shape) < 0.3)
        if domain == "nonnegative":
            rewards = np.abs(rewards)
        if domain == "unit":
            rewards = np.clip(np.abs(rewards), 0, 1)
    start = 0
    for k, size in enumerate(sizes):  # every third group constant, some in one column
        if k % 3 == 2:
            rewards[start : start + size] = rewards[start]
        elif k % 3 == 1 and domain == "components":
            rewards[start : start + size, 0] = rewards[start, 0]
        start += size
    if layout != "contiguous":
        order = rng.permutation(n)
        labels, rewards = [labels[i] for i in order], rewards[order]
    return rewards, labels, sizes


def _grouping(layout: str, rewards: Any, labels: list[str], sizes: list[int]) -> dict[str, Any]:
    if layout == "contiguous":
        return {"group_size": sizes[0]}
    if layout == "segmented":  # what labels get by default where segment ops exist
        return {"group_ids": labels}
    method = {"permuted": "permuted", "padded": "padded"}[layout]
    return {"groups": make_groups(rewards, group_ids=labels, method=method)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", NAMES)
def test_matches_its_reference(xp: Any, device: Any, name: str, layout: str) -> None:
    if layout == "segmented" and xp.__name__.startswith("array_api_strict"):
        pytest.skip("array_api_strict has no native segment operations (padded covers it)")
    spec = get_spec(name)
    rng = np.random.default_rng(zlib.crc32(f"{name}-{layout}-{SEED}".encode()))
    # jax compiles every new shape op by op: fewer trials there, same coverage elsewhere.
    for trial in range(2 if xp.__name__.startswith("jax") else 4):
        rewards, labels, sizes = _batch(rng, layout, DOMAIN.get(name, "any"))
        inputs = {**inputs_for(name, rng, len(rewards)), **OPTIONS.get(name, {})}
        raw = trial % 2 == 1 and 1 in sizes
        singletons = "raw" if raw and spec.raw_singletons else "skip"
        if spec.tracker is not None:
            _check_memory(xp, device, name, rewards, labels, sizes, layout, rng)
            continue
        expected = reference(name, rewards, labels, singletons=singletons, **inputs)
        for dtype in (xp.float64, xp.float32):
            r = xp.asarray(rewards, dtype=dtype, device=device)
            given = {
                k: xp.asarray(v, dtype=dtype, device=device) if isinstance(v, np.ndarray) else v
                for k, v in inputs.items()
            }
            grouping = _grouping(layout, r, labels, sizes)
            if raw and not spec.raw_singletons:
                with pytest.raises(ValueError, match="singletons: expected 'skip'"):
                    compute_advantages(r, name, singletons="raw", **grouping, **given)
            result = compute_advantages(r, name, singletons=singletons, **grouping, **given)
            tol = 1e-10 if dtype == xp.float64 else 2e-4
            # Namespace, device and dtype of rewards, shape and values of the reference.
            assert_close(result.advantages, expected, like=r, rtol=tol, atol=tol)
            assert array_api_compat.device(result.valid) == device
            if spec.skips == "ties":
                updated = [
                    (len(idx) == 1 and singletons == "raw")
                    or (len(idx) > 1 and _has_gap(rewards[idx]))
                    for idx in _members(labels)
                ]
                valid = np.zeros(len(rewards), dtype=bool)
                for idx, kept in zip(_members(labels), updated, strict=True):
                    valid[idx] = kept
                assert to_numpy(result.valid).tolist() == valid.tolist()
            else:  # "never": every rollout with a reward is updated, a group of one too
                assert to_numpy(result.valid).all(), to_numpy(result.valid)


# gdpo drops NaN per component (tests/estimators/test_components.py); an estimator with
# memory keeps no statistic of the batch to leave a row out of.
OMITTING = [n for n in NAMES if n != "gdpo" and get_spec(n).tracker is None]


@pytest.mark.parametrize("name", OMITTING)
def test_omitted_nan_rewards_are_left_out_of_every_statistic(
    xp: Any, device: Any, name: str
) -> None:
    """nan_policy="omit": the rows with a NaN reward get 0 and count nowhere, so the others
    are the reference's on the batch without them (groups, batch statistics, lengths)."""
    rng = np.random.default_rng(zlib.crc32(f"{name}-omit-{SEED}".encode()))
    rewards, labels, _ = _batch(rng, "segmented", DOMAIN.get(name, "any"))
    n = len(rewards)
    kept = rng.random(n) < 0.7
    kept[: min(n, 2)] = True
    inputs = {**inputs_for(name, rng, n), **OPTIONS.get(name, {})}
    kept_labels = [label for label, keep in zip(labels, kept, strict=True) if keep]
    arrays = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    expected = np.zeros(n)
    expected[kept] = reference(
        name, rewards[kept], kept_labels, **{**inputs, **{k: v[kept] for k, v in arrays.items()}}
    )
    r = xp.asarray(np.where(kept, rewards, np.nan), dtype=xp.float64, device=device)
    given = {k: xp.asarray(v, dtype=xp.float64, device=device) for k, v in arrays.items()}
    options = {k: v for k, v in inputs.items() if k not in arrays}
    result = compute_advantages(r, name, group_ids=labels, nan_policy="omit", **given, **options)
    assert_close(result.advantages, expected, like=r, rtol=1e-10, atol=1e-10)
    assert not np.any(to_numpy(result.valid)[~kept])


@pytest.mark.parametrize("name", NAMES)
def test_a_tensor_without_values_is_refused_in_one_line(name: str) -> None:
    """torch's meta device holds shapes only: every estimator refuses it by name, rather
    than returning advantages that were never computed."""
    torch = pytest.importorskip("torch")
    shape = (4, 3) if DOMAIN.get(name) == "components" else (4,)
    inputs = {
        k: torch.ones(4, device="meta") for k in inputs_for(name, np.random.default_rng(0), 4)
    }
    with pytest.raises(ValueError, match=r"expected a tensor with values, got one on the meta"):
        compute_advantages(
            torch.ones(shape, device="meta"), name, group_size=2, **inputs,
            **OPTIONS.get(name, {}),
        )  # fmt: skip


def _check_memory(
    xp: Any,
    device: Any,
    name: str,
    rewards: np.ndarray,
    labels: list[str],
    sizes: list[int],
    layout: str,
    rng: np.random.Generator,
) -> None:
    """Three steps of a stateful estimator on one state against the reference's memory,
    with prompts that cut across groups (several rows of a prompt in a step, a prompt
    absent from a step)."""
    steps = [rng.choice(["a", "b", "c", 7], size=len(rewards)).tolist() for _ in range(3)]
    for dtype in (xp.float64, xp.float32):
        memory: dict[Any, tuple[float, ...]] = {}
        state = EstimatorState()
        for step, prompt_ids in enumerate(steps):
            shown = rewards[::-1].copy() if step == 1 else rewards
            expected = reference(name, shown, labels, memory=memory, prompt_ids=prompt_ids)
            r = xp.asarray(shown, dtype=dtype, device=device)
            result = compute_advantages(
                r, name, **_grouping(layout, r, labels, sizes), state=state, prompt_ids=prompt_ids
            )
            tol = 1e-10 if dtype == xp.float64 else 2e-4
            assert_close(result.advantages, expected, like=r, rtol=tol, atol=tol)
            assert to_numpy(result.valid).all()
            for prompt, values in memory.items():  # the memory itself, in float64
                assert state.values(prompt) is not None
                got = list(state.values(prompt).values())
                np.testing.assert_allclose(got, values, rtol=tol)


def _members(labels: list[str]) -> list[np.ndarray]:
    out: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        out.setdefault(label, []).append(i)
    return [np.asarray(m) for m in out.values()]


def _has_gap(r: np.ndarray) -> bool:
    return bool(np.ptp(r) > 1e-6 * (1 + np.abs(r).max()))
