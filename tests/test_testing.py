"""advbudget.testing: assert_close checks namespace, dtype, device, shape and values by
default; rounding_tolerance scales with the result, the sums behind it and their dtype."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from advbudget.testing import assert_close, rounding_tolerance


def test_an_array_reference_sets_namespace_dtype_and_device(xp: Any) -> None:
    reference = xp.asarray([1.0, 2.0], dtype=xp.float64)
    assert_close(xp.asarray([1.0, 2.0], dtype=xp.float64), reference)
    with pytest.raises(AssertionError, match="dtype"):
        assert_close(xp.asarray([1.0, 2.0], dtype=xp.float32), reference)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(xp.asarray([1.0, 2.0, 3.0], dtype=xp.float64), reference)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_close(xp.asarray([1.0, 2.5], dtype=xp.float64), reference)


def test_a_float64_reference_with_xp_checks_the_namespace(xp: Any) -> None:
    assert_close(xp.asarray([0.5, 0.25]), [0.5, 0.25], xp=xp)
    if xp.__name__.endswith("numpy") and "strict" not in xp.__name__:
        return
    with pytest.raises(AssertionError, match="namespace"):
        assert_close(np.asarray([0.5, 0.25]), [0.5, 0.25], xp=xp)


def test_the_device_is_checked() -> None:
    torch = pytest.importorskip("torch")
    meta = torch.empty(2, device="meta")
    with pytest.raises(AssertionError, match="device"):
        assert_close(torch.zeros(2), meta)


def test_like_sets_namespace_dtype_and_device_from_the_input(xp: Any, device: Any) -> None:
    rewards = xp.asarray([1.0, 0.0], dtype=xp.float32, device=device)
    assert_close(
        xp.asarray([0.5, -0.5], dtype=xp.float32, device=device), [0.5, -0.5], like=rewards
    )
    with pytest.raises(AssertionError, match="dtype"):
        assert_close(
            xp.asarray([0.5, -0.5], dtype=xp.float64, device=device), [0.5, -0.5], like=rewards
        )
    with pytest.raises(TypeError, match="like= or xp="):
        assert_close(rewards, [1.0, 0.0], like=rewards, xp=xp)


def test_the_device_fixture_catches_a_result_on_the_default_device(xp: Any, device: Any) -> None:
    """What the conformance battery relies on: where the backend has a second device, an
    array made without ``device=`` (an estimator forgetting its input's device) fails."""
    if str(device) == "cpu":  # numpy, and torch without CUDA: one device, nothing to catch
        assert "strict" not in xp.__name__
        assert "jax" not in xp.__name__
        return
    rewards = xp.asarray([1.0, 0.0], device=device)
    with pytest.raises(AssertionError, match="device"):
        assert_close(xp.asarray([1.0, 0.0]), [1.0, 0.0], like=rewards)


def test_rounding_tolerance_follows_the_scale_the_sum_length_and_the_accumulation() -> None:
    values = np.array([1e-7, -3.0, 0.5])
    eps64, eps32 = np.finfo(np.float64).eps, np.finfo(np.float32).eps
    assert rounding_tolerance(values, terms=100) == 4 * 100 * eps64 * 3.0
    assert rounding_tolerance(values, terms=100, dtype=np.float32) == 4 * 100 * eps32 * 3.0
    assert rounding_tolerance(values * 10, terms=100) == 10 * rounding_tolerance(values, terms=100)
    assert rounding_tolerance(values, terms=1, slack=1.0) == eps64 * 3.0
    assert rounding_tolerance(np.zeros(0), terms=5) == 0.0


def test_rounding_tolerance_takes_torch_and_jax_dtypes() -> None:
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    eps32 = float(np.finfo(np.float32).eps)
    expected = 4 * 8 * eps32 * 2.0
    assert (
        rounding_tolerance(
            torch.tensor([2.0, 1.0], dtype=torch.float64), terms=8, dtype=torch.float32
        )
        == expected
    )
    assert rounding_tolerance(torch.tensor([2.0, 1.0]), terms=8) == expected  # float32 tensor
    assert rounding_tolerance(jnp.asarray([2.0, 1.0]), terms=8, dtype=jnp.float32) == expected


def test_rounding_tolerance_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"terms: expected a positive count of addends, got 0"):
        rounding_tolerance(np.ones(2), terms=0)
    with pytest.raises(
        ValueError, match=r"dtype: expected a floating dtype to accumulate in, got int64"
    ):
        rounding_tolerance(np.ones(2), terms=2, dtype=np.int64)
