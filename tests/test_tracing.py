"""The contiguous path traces: jax.jit with a static group size, torch.compile fullgraph;
NaN and inf rewards give the eager numbers (``nan_policy="omit"``) and the eager errors
(raised when the compiled function runs) while traced."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import (
    budget_advantage,
    compute_advantages,
    estimator_names,
    get_spec,
    make_groups,
)
from advbudget.core._groups import Permuted
from advbudget.core.estimators import BUILTINS

from .estimators._shared import FUNCTIONS, inputs_for
from .references import reference

REWARDS = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.25, 1.0]


@pytest.mark.parametrize("estimator", FUNCTIONS)
def test_jax_jit_with_default_x32(estimator):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    fn = FUNCTIONS[estimator]
    with jax.enable_x64(False):
        compiled = jax.jit(fn, static_argnames="group_size")
        rewards = jnp.asarray(REWARDS)
        out = compiled(rewards, group_size=4)
        assert out.dtype == jnp.float32
        expected = reference(estimator, REWARDS, np.arange(12) // 4)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)
        # Eager call agrees with the compiled one; int rewards take the default float.
        np.testing.assert_allclose(
            np.asarray(fn(rewards, group_size=4)), np.asarray(out), atol=1e-6
        )
        ints = jnp.asarray([1, 0, 0, 1])
        assert jax.jit(fn, static_argnames="group_size")(ints, group_size=2).dtype == jnp.float32
        # Labels as jax int32 (x64 off) go through the eager grouped path.
        labels = jnp.asarray([3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2])
        np.testing.assert_allclose(
            np.asarray(fn(rewards[::-1], group_ids=labels[::-1])), expected[::-1], atol=1e-6
        )


def test_jax_jit_traces_inside_a_larger_function():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    @jax.jit
    def loss(logits, rewards):
        advantages = compute_advantages(rewards, "budget", group_size=4).advantages
        return -jnp.sum(advantages * logits)

    grad = jax.grad(loss)(jnp.ones(12), jnp.asarray(REWARDS))
    expected = -reference("budget", REWARDS, np.arange(12) // 4)
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-6)


def test_jit_labels_need_a_static_number_of_groups():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    with pytest.raises(TypeError, match="group_ids: labels cannot be factorised while traced"):
        jax.jit(lambda r, ids: budget_advantage(r, group_ids=ids))(jnp.zeros(4), jnp.zeros(4, int))

    @jax.jit
    def shuffled(rewards, codes):
        groups = make_groups(rewards, group_ids=codes, num_groups=3)
        return budget_advantage(rewards, groups=groups)

    labels = np.array([2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1])
    out = shuffled(jnp.asarray(REWARDS), jnp.asarray(labels))
    np.testing.assert_allclose(np.asarray(out), reference("budget", REWARDS, labels), atol=1e-6)


@pytest.mark.slow
def test_torch_compile_fullgraph():
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()

    def all_estimators(rewards):
        return tuple(fn(rewards, group_size=4) for fn in FUNCTIONS.values())

    compiled = torch.compile(all_estimators, fullgraph=True, backend="eager")
    rewards = torch.tensor(REWARDS)
    outputs = compiled(rewards)
    for estimator, out in zip(FUNCTIONS, outputs, strict=True):
        expected = reference(estimator, REWARDS, np.arange(12) // 4)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_torch_compile_reuses_shuffled_groups():
    """Equal-size groups in any order (``Permuted``) built eagerly from labels, used in a
    compiled function: ``flat`` scatters through the gather and the positions are built
    on demand while tracing, without keeping a traced tensor in the groups."""
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    labels = np.array([2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1])
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    groups = make_groups(rewards, group_ids=torch.from_numpy(labels), method="permuted")
    assert isinstance(groups, Permuted)

    def advantages_and_index(r):
        return budget_advantage(r, groups=groups), groups.group_index()

    compiled = torch.compile(advantages_and_index, fullgraph=True, backend="eager")
    out, index = compiled(rewards)
    expected = reference("budget", REWARDS, labels)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-12)
    np.testing.assert_array_equal(index.numpy(), labels)
    np.testing.assert_array_equal(groups.group_index().numpy(), labels)  # eager again


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own inductor internals
def test_torch_compile_inductor_budget():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch._inductor")
    compiled = torch.compile(lambda r: budget_advantage(r, group_size=4), fullgraph=True)
    out = compiled(torch.tensor(REWARDS))
    expected = reference("budget", REWARDS, np.arange(12) // 4)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="rewards: expected finite numbers, got NaN"):
        compiled(torch.tensor(_nan_at(3), dtype=torch.float32))


# -- NaN and inf rewards while traced: the eager numbers and the eager errors ----------------

N, G = 12, 4
# Estimators with memory update it on the host, those of turns read labels there: both are
# refused while traced (tests below and tests/estimators/test_turns.py).
ALL = [n for n in estimator_names() if get_spec(n).tracker is None and not get_spec(n).turns]
LENGTHS = np.array([3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8])
BASELINES = np.linspace(-0.5, 0.5, N)
NAN_PATTERNS = {
    "none": [],
    "one": [1],
    "whole group": [4, 5, 6, 7],
    "all but one of a group": [0, 1, 2],
    "one per group": [0, 5, 10],
}


def _inputs_for(name: str, xp: Any) -> dict[str, Any]:
    declared = {i.name for i in get_spec(name).inputs}
    out = {"response_lengths": LENGTHS, "reward_baselines": BASELINES}
    return {k: xp.asarray(v) for k, v in out.items() if k in declared}


# gdpo's reward components: the rewards and the rewards of another rollout (NaN elsewhere).
OTHER = np.array([5, 0, 11, 3, 8, 1, 10, 2, 7, 4, 6, 9])


def _in_domain(name: str, xp: Any, rewards: Any) -> tuple[Any, dict[str, Any]]:
    """The rewards (NaN kept) and options an estimator defined on part of the rewards
    takes: passk binary ones (k <= G), maxrl a positive group mean (it warns otherwise),
    gdpo reward components (two: the rewards and those of another rollout)."""
    if name == "passk":
        return xp.where(rewards > 0.5, 1.0, xp.where(rewards <= 0.5, 0.0, rewards)), {"k": 2}
    if name == "maxrl":
        return xp.abs(rewards), {}
    if get_spec(name).components:
        return {"first": rewards, "second": rewards[xp.asarray(OTHER)]}, {}
    return rewards, {}


def _unscorable(name: str, rewards: Any) -> np.ndarray:
    nan = np.isnan(np.asarray(rewards))
    return nan & nan[OTHER] if get_spec(name).components else nan


def _every_estimator(xp: Any, rewards: Any, nan_policy: str) -> dict[str, tuple[Any, Any, Any]]:
    out = {}
    for name in ALL:
        given, options = _in_domain(name, xp, rewards)
        res = compute_advantages(
            given, name, group_size=G, nan_policy=nan_policy, **options, **_inputs_for(name, xp)
        )
        # Python 3.11's cached_property takes a lock, which torch.compile(fullgraph=True)
        # cannot trace: call the property's function itself.
        valid = type(res).valid.func(res)  # type: ignore[attr-defined]
        out[name] = (res.advantages, valid, res.group_skipped)
    return out


def _assert_same(traced: dict[str, Any], eager: dict[str, Any], tol: float) -> None:
    for name in ALL:
        (a, valid, skipped), (b, valid_b, skipped_b) = traced[name], eager[name]
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=name)
        np.testing.assert_array_equal(np.asarray(valid), np.asarray(valid_b), err_msg=name)
        np.testing.assert_array_equal(np.asarray(skipped), np.asarray(skipped_b), err_msg=name)


@pytest.fixture(scope="module")
def jitted_omit():  # type: ignore[no-untyped-def]
    jax = pytest.importorskip("jax")
    return jax.jit(lambda r: _every_estimator(jax.numpy, r, "omit"))


@given(rewards=st.lists(st.sampled_from([0.0, 0.25, 1.0, -2.0, math.nan]), min_size=N, max_size=N))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_jit_omits_nan_rewards_exactly_as_eager(jitted_omit, rewards):  # type: ignore[no-untyped-def]
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        traced = jitted_omit(jax.numpy.asarray(rewards, dtype=jax.numpy.float64))
    eager = _every_estimator(np, np.asarray(rewards), "omit")
    _assert_same(traced, eager, tol=1e-12)
    for name in ALL:  # the omitted rollouts: advantage 0, not valid
        advantages, valid, _ = traced[name]
        assert not np.asarray(valid)[_unscorable(name, rewards)].any(), name
        assert not np.isnan(np.asarray(advantages)).any(), name


@pytest.mark.parametrize("name", ["spo", "rae"])
def test_jit_refuses_an_estimator_with_memory(name: str) -> None:
    jax = pytest.importorskip("jax")
    from advbudget import EstimatorState

    state = EstimatorState()
    step = jax.jit(
        lambda r: (
            compute_advantages(
                r, name, group_size=G, state=state, prompt_ids=list(range(N))
            ).advantages
        )
    )
    with pytest.raises(ValueError, match=r"state: .* call it outside jax\.jit"):
        step(jax.numpy.asarray(np.clip(REWARDS, 0, 1)))
    assert len(state) == 0  # a refused call remembers nothing


def test_jit_raises_on_nan_rewards_when_run():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    step = jax.jit(lambda r: budget_advantage(r, group_size=G))
    rewards = jnp.asarray(REWARDS).at[5].set(jnp.nan).at[9].set(jnp.nan)
    message = (
        r"rewards: expected finite numbers, got 2 of 12 \(first at index 5\) NaN; "
        r"pass nan_policy='omit'"
    )
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        step(rewards).block_until_ready()
    # The same step runs on finite rewards (the check is in the compiled function).
    np.testing.assert_allclose(
        np.asarray(step(jnp.asarray(REWARDS))),
        reference("budget", REWARDS, np.arange(N) // G),
        atol=1e-6,
    )
    # The check does not stand in the way of gradients with respect to the rewards.
    slope = jax.jit(jax.grad(lambda r: jnp.sum(budget_advantage(r, group_size=G) ** 2)))
    assert np.isfinite(np.asarray(slope(jnp.asarray(REWARDS)))).all()
    # Infinite rewards raise under "omit" too, as in eager mode.
    omit = jax.jit(lambda r: budget_advantage(r, group_size=G, nan_policy="omit"))
    with pytest.raises(
        jax.errors.JaxRuntimeError, match=r"got 1 of 12 \(first at index 3\) infinite"
    ):
        omit(jnp.asarray(REWARDS).at[3].set(-jnp.inf)).block_until_ready()
    # Extra inputs are checked too.
    opo = jax.jit(
        lambda r, n: compute_advantages(r, "opo", group_size=G, response_lengths=n).advantages
    )
    with pytest.raises(
        jax.errors.JaxRuntimeError, match=r"response_lengths: expected finite numbers, got 1 of 12"
    ):
        opo(
            jnp.asarray(REWARDS), jnp.asarray(LENGTHS, dtype=jnp.float32).at[0].set(jnp.nan)
        ).block_until_ready()


def test_vmap_reports_the_member_with_nan():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    batched = jax.jit(jax.vmap(lambda r: budget_advantage(r, group_size=G)))
    rewards = jnp.stack([jnp.asarray(REWARDS)] * 3)
    assert batched(rewards).shape == (3, N)
    # JAX wraps the callback's error in a ValueError here, a JaxRuntimeError under jit alone.
    wrapped = (ValueError, jax.errors.JaxRuntimeError)
    with pytest.raises(wrapped, match=r"got 1 of 12 \(first at index 7\) NaN"):
        batched(rewards.at[1, 7].set(jnp.nan)).block_until_ready()
    omitted = jax.jit(jax.vmap(lambda r: budget_advantage(r, group_size=G, nan_policy="omit")))
    out = omitted(rewards.at[1, 7].set(jnp.nan))
    np.testing.assert_allclose(
        np.asarray(out[1]),
        budget_advantage(_nan_at(7), group_size=G, nan_policy="omit"),
        atol=1e-6,
    )


def _nan_at(*positions: int) -> np.ndarray:
    rewards = np.asarray(REWARDS, dtype=np.float64).copy()
    rewards[list(positions)] = np.nan
    return rewards


@pytest.mark.slow
def test_torch_compile_omits_and_raises_as_eager():
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    omit = torch.compile(
        lambda r: _every_estimator(torch, r, "omit"), fullgraph=True, backend="eager"
    )
    for positions in NAN_PATTERNS.values():
        rewards = _nan_at(*positions)
        traced = omit(torch.asarray(rewards))
        eager = _every_estimator(np, rewards, "omit")
        _assert_same(traced, eager, tol=1e-12)
    raising = torch.compile(
        lambda r: budget_advantage(r, group_size=G), fullgraph=True, backend="eager"
    )
    with pytest.raises(
        RuntimeError, match="rewards: expected finite numbers, got NaN; pass nan_policy='omit'"
    ):
        raising(torch.asarray(_nan_at(2)))
    infinite = torch.asarray(REWARDS).clone()
    infinite[0] = math.inf
    with pytest.raises(RuntimeError, match="rewards: expected finite numbers, got infinite values"):
        omit(infinite)


# Every estimator of the catalogue under jax.jit against its float64 reference: those with
# memory are refused while traced (above), gigpo's and gdpo's jit tests are in their family
# files (tests/estimators/test_turns.py, test_components.py).
JITTED = [
    spec.name
    for spec in BUILTINS
    if spec.tracker is None and not spec.turns and spec.name != "gdpo"
]


@pytest.mark.parametrize("name", JITTED)
def test_jax_jit_matches_the_reference(name: str) -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(0)
    values = [0.0, 1.0] if name == "passk" else [0.0, 0.5, 1.0]  # passk: binary outcomes
    rewards = rng.choice(values, size=12)
    inputs = inputs_for(name, rng, 12)

    @jax.jit
    def run(r: Any, kw: dict[str, Any]) -> Any:
        return compute_advantages(r, name, group_size=4, **kw).advantages

    with jax.enable_x64(True):
        out = run(jnp.asarray(rewards), {k: jnp.asarray(v) for k, v in inputs.items()})
    tie = 0.0 if get_spec(name).skips == "never" else 1e-6
    expected = reference(name, rewards, np.arange(12) // 4, tie=tie, **inputs)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-10, atol=1e-10)
