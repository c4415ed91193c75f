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


def to_host(values: Array) -> np.ndarray:
    """``values`` (any namespace, any device) as a numpy array on the host: torch off its
    device first, DLPack for a namespace without ``__array__`` (array-api-strict)."""
    if array_api_compat.is_torch_array(values):
        return values.detach().cpu().numpy()  # type: ignore[no-any-return, unused-ignore]
    try:
        return np.asarray(values)
    except (TypeError, RuntimeError):
        return np.from_dlpack(values)


def as_array(values: Any, name: str) -> tuple[Array, Namespace]:
    """Return ``values`` as an array with its namespace; Python sequences become numpy."""
    if _torch_compiling(values):
        # array-api-compat's lookups are lru_cached, which dynamo warns about.
        from array_api_compat import torch as torch_namespace

        return values, torch_namespace
    if isinstance(values, (list, tuple, int, float, complex, np.generic)):
        values = np.asarray(values)
    try:
        xp = array_api_compat.array_namespace(values)
    except TypeError:
        raise TypeError(
            f"{name}: expected an array (numpy, torch, jax or any Array API namespace) "
            f"or a list, got {type(values).__name__}"
        ) from None
    return values, xp


_BACKENDS = {
    "numpy": "numpy",
    "array_api_compat.numpy": "numpy",
    "torch": "torch",
    "array_api_compat.torch": "torch",
    "jax.numpy": "jax",
}


def backend(xp: Namespace) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"``, or the namespace's name for any other.

    A plain name lookup: array-api-compat's ``is_*_namespace`` are lru_cached, which
    torch.compile warns about.
    """
    name: str = xp.__name__
    return _BACKENDS.get(name, name)


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


def _torch_compiling(x: Array) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and bool(torch.compiler.is_compiling())


def device_of(x: Array) -> Any:
    """The device ``x`` lives on."""
    return x.device if _torch_compiling(x) else array_api_compat.device(x)


def is_traced(x: Array) -> bool:
    """Whether ``x`` is being traced (jax.jit, torch.compile): its values cannot be read."""
    if _torch_compiling(x):
        return True
    jax = sys.modules.get("jax")
    if jax is not None and array_api_compat.is_jax_array(x):
        return isinstance(x, jax.core.Tracer)  # concrete jax arrays can be read
    return bool(array_api_compat.is_lazy_array(x))  # dask, ndonnx, ...


def check_same_device(reference: Array, other: Array, reference_name: str, name: str) -> None:
    """Raise if ``other`` is of another namespace, or lives on another device, than
    ``reference`` (the namespaces are named first: "numpy vs torch", not "cpu vs cpu")."""
    if not (is_traced(reference) or is_traced(other)):
        mine = backend(array_api_compat.array_namespace(reference))
        theirs = backend(array_api_compat.array_namespace(other))
        if mine != theirs:
            raise ValueError(
                f"{name}: expected a {mine} array like {reference_name}, got a {theirs} one "
                f"({mine} vs {theirs})"
            )
    expected, got = device_of(reference), device_of(other)
    if expected != got:
        raise ValueError(
            f"{name}: expected an array on the same device as {reference_name} "
            f"({expected}), got one on {got}"
        )
