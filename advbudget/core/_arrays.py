"""Array-namespace plumbing shared by the core: namespaces, dtypes, devices, tracing.

Nothing here imports a framework: torch and jax are only looked at when they are
already in ``sys.modules`` (the caller passed their arrays), as einops does.
"""

from __future__ import annotations

import sys
from typing import Any

import array_api_compat
import numpy as np

Array = Any
"""An array of any Array API namespace (numpy, torch, jax, array-api-strict, ...)."""

Namespace = Any
"""An Array API namespace, as returned by ``array_api_compat.array_namespace``."""


def as_array(values: Any, name: str) -> tuple[Array, Namespace]:
    """Return ``values`` as an array with its namespace; Python sequences become numpy."""
    if isinstance(values, (list, tuple)) or np.isscalar(values):
        values = np.asarray(values)
    try:
        xp = array_api_compat.array_namespace(values)
    except TypeError:
        raise TypeError(
            f"{name}: expected an array (numpy, torch, jax or any Array API namespace) "
            f"or a list, got {type(values).__name__}"
        ) from None
    return values, xp


def compute_dtype(xp: Namespace, dtype: Any, device: Any, name: str) -> Any:
    """The float dtype the estimators compute in: at least float32, float64 kept.

    Integer and boolean rewards are normal (0/1 verifiers) and take the namespace's
    default float; bf16/fp16 are upcast because their rounding (~4e-3) is larger than
    the advantage differences that matter.
    """
    if xp.isdtype(dtype, ("integral", "bool")):
        return xp.__array_namespace_info__().default_dtypes(device=device)["real floating"]
    if not xp.isdtype(dtype, "real floating"):
        raise TypeError(f"{name}: expected real numbers (float, int or bool), got dtype {dtype}")
    if xp.finfo(dtype).bits < 32:
        return xp.float32
    return dtype


def is_traced(x: Array) -> bool:
    """Whether ``x`` is being traced (jax.jit, torch.compile): its values cannot be read."""
    jax = sys.modules.get("jax")
    if jax is not None and array_api_compat.is_jax_array(x):
        return isinstance(x, jax.core.Tracer)  # concrete jax arrays can be read
    if array_api_compat.is_lazy_array(x):  # dask, ndonnx, ...
        return True
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def check_same_device(reference: Array, other: Array, reference_name: str, name: str) -> None:
    """Raise if ``other`` lives on another device than ``reference``."""
    expected, got = array_api_compat.device(reference), array_api_compat.device(other)
    if expected != got:
        raise ValueError(
            f"{name}: expected an array on the same device as {reference_name} "
            f"({expected}), got one on {got}"
        )


def to_numpy(x: Array) -> np.ndarray[Any, Any]:
    """Copy any array to a numpy array on the host (for small host-side work)."""
    if isinstance(x, np.ndarray):
        return x
    if array_api_compat.is_torch_array(x):
        return np.asarray(x.detach().cpu())  # type: ignore[no-any-return]
    return np.asarray(x)
