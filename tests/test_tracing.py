"""The contiguous path traces: jax.jit with a static group size, torch.compile fullgraph."""

from __future__ import annotations

import numpy as np
import pytest

from advbudget import (
    budget_advantage,
    compute_advantages,
    dr_advantage,
    group_normalized_advantage,
    make_groups,
    rloo_advantage,
)

from .conftest import reference_advantages

REWARDS = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.25, 1.0]
FUNCTIONS = {
    "budget": budget_advantage,
    "grpo": group_normalized_advantage,
    "dr": dr_advantage,
    "rloo": rloo_advantage,
}


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
        expected = reference_advantages(REWARDS, np.arange(12) // 4, estimator)
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
    expected = -reference_advantages(REWARDS, np.arange(12) // 4, "budget")
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
    np.testing.assert_allclose(
        np.asarray(out), reference_advantages(REWARDS, labels, "budget"), atol=1e-6
    )


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
        expected = reference_advantages(REWARDS, np.arange(12) // 4, estimator)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own inductor internals
def test_torch_compile_inductor_budget():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch._inductor")
    compiled = torch.compile(lambda r: budget_advantage(r, group_size=4), fullgraph=True)
    out = compiled(torch.tensor(REWARDS))
    expected = reference_advantages(REWARDS, np.arange(12) // 4, "budget")
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
