"""advbudget.testing.assert_close: namespace, dtype, device, shape and values, by default."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from advbudget.testing import assert_close


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
