"""The finiteness checks of rewards and inputs: one reduction in the common case, the
positions of the first NaN or inf in the message, and, for arrays being traced (jax.jit,
torch.compile), checks that raise when the compiled function runs."""

from __future__ import annotations

import functools
import sys
from typing import Any, Literal

import numpy as np

from ._arrays import Array, backend, device_of, is_traced

NanPolicy = Literal["raise", "omit"]
"""``nan_policy=``: ``"raise"`` on a NaN reward (the default), or ``"omit"``: leave the
rollout out of its group (no advantage, ``valid`` False), as an unscored rollout."""

_OMIT_HINT = "pass nan_policy='omit' to leave unscored rollouts out of their group"


def check_finite(
    xp: Any, rewards: Array, nan_policy: NanPolicy, name: str, *, omittable: bool = True
) -> tuple[Array, Array | None]:
    """The rewards, and None if all are finite or the mask of non-NaN ones under "omit".
    ``omittable``: whether a NaN could be omitted (rewards; not an estimator's inputs), for
    the hint of the error."""
    if str(device_of(rewards)) == "meta":  # torch's shape-only tensors: nothing to read
        raise ValueError(
            f"{name}: expected a tensor with values, got one on the meta device (shapes "
            "only); move it to cpu or cuda first"
        )
    if is_traced(rewards):
        return check_finite_traced(xp, rewards, name, omit_nan=nan_policy == "omit")
    # One reduction and one sync in the common case: a finite sum means every reward is
    # finite (a NaN or inf anywhere makes the sum NaN or inf; overflow only sends us to
    # the exact check below).
    if bool(xp.isfinite(xp.sum(rewards))):
        return rewards, None
    finite = xp.isfinite(rewards)
    if bool(xp.all(finite)):
        return rewards, None
    nan = xp.isnan(rewards)
    infinite = ~finite & ~nan
    if bool(xp.any(infinite)):
        raise ValueError(_not_finite(name, f"{_where_true(xp, infinite)} infinite"))
    if nan_policy == "raise":
        hint = _OMIT_HINT if omittable else ""
        raise ValueError(_not_finite(name, f"{_where_true(xp, nan)} NaN", hint))
    return rewards, ~nan


def _not_finite(name: str, got: str, hint: str = "") -> str:
    return f"{name}: expected finite numbers, got {got}" + (f"; {hint}" if hint else "")


def _where_true(xp: Any, mask: Array) -> str:
    positions = xp.nonzero(mask)[0]
    count = int(positions.shape[0])
    return f"{count} of {mask.shape[0]} (first at index {int(positions[0])})"


def check_finite_traced(
    xp: Any, values: Array, name: str, *, omit_nan: bool
) -> tuple[Array, Array | None]:
    """The checks of the eager path for values that cannot be read while tracing: the
    NaN mask is computed with ``where``-style ops, so omission gives the eager numbers,
    and the errors are raised when the compiled function runs (jax: a host callback,
    only taken when a value is not finite; torch.compile: ``torch._assert_async``).
    Returns the values to go on with (under jax they depend on the check, so that it
    runs) and the mask of non-NaN values when ``omit_nan``, else None."""
    hint = _OMIT_HINT if name.startswith("rewards") else ""
    if backend(xp) == "jax":
        values = _jax_raise_when_run(values, name, omit_nan, hint)
    elif backend(xp) == "torch":
        torch = sys.modules["torch"]
        # The compiled graph cannot format counts: the messages name what, not how many.
        torch._assert_async(~xp.any(xp.isinf(values)), _not_finite(name, "infinite values"))
        if not omit_nan:
            torch._assert_async(~xp.any(xp.isnan(values)), _not_finite(name, "NaN", hint))
    # Other lazy arrays (dask, ...) have no run-time check: omission still works.
    return values, (~xp.isnan(values) if omit_nan else None)


def _jax_raise_when_run(values: Array, name: str, omit_nan: bool, hint: str) -> Array:
    """``values + 0``, where the 0 comes from a host callback that raises on what is not
    allowed; the callback only runs (one host round trip) when a value is not finite.

    A pure_callback whose result is used costs a few microseconds when skipped, where a
    jax.debug.callback (an effect) costs ~10x more per call on CPU. Gradients do not
    flow through the check."""
    jax, jnp = sys.modules["jax"], sys.modules["jax.numpy"]
    checked = jax.lax.stop_gradient(values)
    zero = jax.ShapeDtypeStruct((), values.dtype)
    size, dtype = int(values.shape[-1]), np.dtype(values.dtype)
    host = functools.partial(_raise_non_finite, name, size, omit_nan, hint, dtype)

    def report() -> Array:
        nan, infinite = jnp.isnan(checked), jnp.isinf(checked)
        counts = [jnp.sum(infinite), jnp.argmax(infinite), jnp.sum(nan), jnp.argmax(nan)]
        return jax.pure_callback(host, zero, *counts, vmap_method="broadcast_all")

    allowed = ~jnp.any(jnp.isinf(checked)) if omit_nan else jnp.isfinite(jnp.sum(checked))
    return values + jax.lax.cond(allowed, lambda: jnp.zeros((), values.dtype), report)


def _raise_non_finite(
    name: str, size: int, omit_nan: bool, hint: str, dtype: Any, *counts_and_firsts: Any
) -> Any:
    """Host side of the jax check: raises, or returns the zero(s) the values get. Under
    ``jax.vmap`` the counts come batched (and the callback runs for every member), so
    the first failing member is reported."""
    shape = np.shape(counts_and_firsts[0])
    inf_count, inf_first, nan_count, nan_first = (np.ravel(c) for c in counts_and_firsts)
    checks = [(inf_count, inf_first, "infinite", "")]
    if not omit_nan:
        checks.append((nan_count, nan_first, "NaN", hint))
    for count, first, what, what_hint in checks:
        failing = np.flatnonzero(count)
        if failing.size:
            member = failing[0]
            where = f"{int(count[member])} of {size} (first at index {int(first[member])})"
            raise ValueError(_not_finite(name, f"{where} {what}", what_hint))
    return np.zeros(shape, dtype)
